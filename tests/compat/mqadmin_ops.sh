# shellcheck shell=bash
# The mqadmin operations checks (issue 13), sourced by run.sh: the commands operators run against an online group
# (a Java producer and push consumer kept up by conveyor.compat.Rewind), configuration, KV and order
# configuration, topic maintenance, and rewinding a running consumer with resetOffsetByTime. Each check's output
# is matched against what the broker holds (the group's offsets, the message's queue, the name server's values).
#
# Uses run.sh's pass/fail/java_cmd and mqadmin_lib.sh's mqadmin_check/mqadmin_check_absent.
# COMPAT_TARGET=apache (run-against-apache.sh) skips the checks of Conveyor-only answers (a refused setting, an
# unsupported request's remark).

# Checks every mqadmin version runs; 5.x-only commands are in MQADMIN_OPS_CHECKS_5.
MQADMIN_OPS_CHECKS="consumerConnection consumerStatus consumerStatus-client producerConnection brokerConsumeStats \
queryCq queryMsgByUniqueKey printMsgByQueue queryMsgByKey queryMsgById brokerStatus updateSubGroup cloneGroupOffset \
cloneGroupOffset-offsets deleteSubGroup \
resetOffsetByTime-online rewind-running-consumer checkMsgSendRT sendMsgStatus clusterRT getNamesrvConfig \
updateNamesrvConfig getNamesrvConfig-changed updateOrderConf-put updateOrderConf-get topicRoute-orderConf \
updateKvConfig updateOrderConf-get-kv deleteKvConfig updateOrderConf-put-again updateOrderConf-delete \
updateOrderConf-get-deleted updateNamesrvConfig-restore updateBrokerConfig-autoCreate getBrokerConfig-autoCreate \
updateBrokerConfig-autoCreate-restore \
cleanExpiredCQ cleanUnusedTopic deleteTopic topicList-deleted"
# Checks of Conveyor's own answers (not run against Apache RocketMQ); the second list only with 5.x tools.
MQADMIN_OPS_CONVEYOR_CHECKS="updateBrokerConfig-fixed-refused"
MQADMIN_OPS_CONVEYOR_CHECKS_5="unsupported-remark"

# mqadmin_ops_checks PROFILE: the names of the checks run_mqadmin_ops reports for that tools version.
mqadmin_ops_checks() {
  echo "$MQADMIN_OPS_CHECKS"
  [[ "${COMPAT_TARGET:-conveyor}" == apache ]] && return 0
  echo "$MQADMIN_OPS_CONVEYOR_CHECKS"
  if [[ "$1" == rmq5 ]]; then echo "$MQADMIN_OPS_CONVEYOR_CHECKS_5"; fi
}

# wait_file PATH SECONDS: waits until PATH exists or the time is up (exit status 1).
wait_file() {
  local deadline=$((SECONDS + $2))
  until [[ -e "$1" ]]; do
    ((SECONDS >= deadline)) && return 1
    sleep 0.5
  done
}

# run_mqadmin_ops PROFILE PREFIX CLUSTER ADMIN_TOPIC
run_mqadmin_ops() {
  local p="$1" prefix="$2" cluster="$3" admin_topic="$4"
  local dir="$LOG_DIR/rewind-$p" c
  rm -rf "$dir"
  mkdir -p "$dir"
  java_cmd "$p" conveyor.compat.Rewind "$dir"
  timeout -k 10 "$TEST_TIMEOUT" "${JAVA_ARGV[@]}" >"$dir/out" 2>"$dir/err" &
  local rewind_pid=$!
  if ! wait_file "$dir/ready" 300; then
    kill "$rewind_pid" 2>/dev/null
    wait "$rewind_pid" 2>/dev/null
    sed 's/^/  # /' "$dir/out" | tail -n 30
    for c in $(mqadmin_ops_checks "$p"); do fail "$prefix/$c" "the online group (conveyor.compat.Rewind) did not start"; done
    return
  fi
  local topic group pgroup broker_name broker_addr reset_time uniq queue
  topic="$(sed -n 's/^topic=//p' "$dir/ready")"
  group="$(sed -n 's/^group=//p' "$dir/ready")"
  pgroup="$(sed -n 's/^producerGroup=//p' "$dir/ready")"
  broker_name="$(sed -n 's/^brokerName=//p' "$dir/ready")"
  broker_addr="$(sed -n 's/^brokerAddr=//p' "$dir/ready")"
  reset_time="$(sed -n 's/^resetTime=//p' "$dir/ready")"
  uniq="$(sed -n 's/^uniqId=//p' "$dir/ready")"
  queue="$(sed -n 's/^queueId=//p' "$dir/ready")"
  local key offset_id
  key="$(sed -n 's/^key=//p' "$dir/ready")"
  offset_id="$(sed -n 's/^offsetMsgId=//p' "$dir/ready")"

  # Who is connected, and what the group and its client say of themselves.
  mqadmin_check "$prefix/consumerConnection" '#ClientId +#ClientAddr +#Language +#Version' \
    "^$topic +\\*\$" '^ConsumeType: CONSUME_PASSIVELY$' '^MessageModel: CLUSTERING$' -- consumerConnection -g "$group"
  # consumerStatus writes each client's running info to <time>/<clientId> below the working directory.
  mkdir -p "$dir/cwd"
  pushd "$dir/cwd" >/dev/null || return
  mqadmin_check "$prefix/consumerStatus" '#Index +#ClientId +#Version +#ConsumerRunningInfoFile' '^1 +[^ ]+@' \
    'Same subscription in the same group of consumer' -- consumerStatus -g "$group"
  popd >/dev/null || return
  local client_id
  client_id="$(timeout -k 5 120 "$HERE/mqadmin.sh" consumerConnection -g "$group" 2>/dev/null |
    awk '$1 ~ /@/ {print $1; exit}')"
  mqadmin_check "$prefix/consumerStatus-client" "#Consumer Subscription#" "$topic" "#Consumer MQ Detail#" -- \
    consumerStatus -g "$group" -i "${client_id:-missing}"
  mqadmin_check "$prefix/producerConnection" '^0001 +[^ ]+@[^ ]+ +[0-9.]+:[0-9]+ +JAVA +V[0-9]' -- \
    producerConnection -g "$pgroup" -t "$topic"
  # The group's row on its broker: consumed to the end (diff 0, consumer offset = broker offset).
  mqadmin_check "$prefix/brokerConsumeStats" '#Topic +#Group +#Broker Name +#QID' \
    "^$topic +$group +[^ ]+ +[0-9]+ +([0-9]+) +\\1 +0 " -- brokerConsumeStats -b "$broker_addr"

  # Where the first message of batch B is: its queue's entries, the message by its unique key, and the queue
  # printed with that message in it.
  mqadmin_check "$prefix/queryCq" '^Subscription data' '^max: [1-9][0-9]*, min: 0$' '^idx: 0$' 'physicOffset=' -- \
    queryCq -t "$topic" -q "$queue" -i 0 -c 100 -g "$group"
  MQADMIN_TRACKS_EXCEPTIONS=1 mqadmin_check "$prefix/queryMsgByUniqueKey" "^Topic: +$topic\$" "^Queue ID: +$queue\$" \
    "consumerGroup=$group, trackType=CONSUMED" -- queryMsgByUniqueKey -i "$uniq" -t "$topic"
  mqadmin_check "$prefix/printMsgByQueue" "MSGID: $uniq " -- \
    printMsgByQueue -t "$topic" -a "$broker_name" -i "$queue" -p true
  mqadmin_check "$prefix/queryMsgByKey" '#Message ID +#QID +#Offset' "^$uniq +$queue +[0-9]+" -- \
    queryMsgByKey -t "$topic" -k "$key"
  # 5.x tools require the topic (-t), 4.9.x tools have no such option.
  local by_id=(queryMsgById -i "$offset_id")
  [[ "$p" == rmq5 ]] && by_id+=(-t "$topic")
  MQADMIN_TRACKS_EXCEPTIONS=1 mqadmin_check "$prefix/queryMsgById" "^Topic: +$topic\$" "^Keys: +\\[$key " -- "${by_id[@]}"
  mqadmin_check "$prefix/brokerStatus" 'commitLogMaxOffset +: *[1-9][0-9]*' -- brokerStatus -b "$broker_addr"

  # The group's offsets copied to a new group (which must exist first on RocketMQ 5): its rows equal the source's.
  local clone="${group}_clone"
  mqadmin_check "$prefix/updateSubGroup" 'create subscription group to .* success' -- \
    updateSubGroup -c "$cluster" -g "$clone"
  mqadmin_check "$prefix/cloneGroupOffset" 'clone group offset success' -- \
    cloneGroupOffset -s "$group" -d "$clone" -t "$topic"
  mqadmin_check "$prefix/cloneGroupOffset-offsets" "^$topic +$clone +[^ ]+ +[0-9]+ +([0-9]+) +\\1 +0 " -- \
    brokerConsumeStats -b "$broker_addr"
  mqadmin_check "$prefix/deleteSubGroup" "delete subscription group \\[$clone\\] from broker .* success" -- \
    deleteSubGroup -c "$cluster" -g "$clone"

  # Rewinding the running group to the first store time of batch B: its consumer receives exactly B again.
  mqadmin_check "$prefix/resetOffsetByTime-online" '#brokerName +#queueId +#offset' -- \
    resetOffsetByTime -g "$group" -t "$topic" -s "$reset_time" -f true
  touch "$dir/reset"
  wait_file "$dir/rewound" 240

  # Probe sends: to the topic, to the broker's own topic, and to every broker of the cluster (clusterRT runs until
  # killed: its first round is what is checked).
  mqadmin_check "$prefix/checkMsgSendRT" '#Broker Name +#QID +#Send Result +#RT' '^[^ ]+ +[0-9]+ +true +[0-9]+' \
    '^Avg RT: [0-9.]+' -- checkMsgSendRT -t "$topic" -a 5 -s 64
  mqadmin_check "$prefix/sendMsgStatus" '^rt=[0-9]+ms, SendResult=SendResult \[sendStatus=SEND_OK' -- \
    sendMsgStatus -b "$broker_name" -c 3
  MQADMIN_TIMEOUT=25 mqadmin_check "$prefix/clusterRT" '#Cluster Name +#Broker Name +#RT +#successCount +#failCount' \
    "^$cluster +$broker_name +[0-9.]+ +3 +0" -- clusterRT -c "$cluster" -a 3 -i 1
  touch "$dir/done"
  wait "$rewind_pid"
  if [[ -e "$dir/rewound" ]] && grep -q '^PASS ' "$dir/out"; then
    pass "$prefix/rewind-running-consumer"
  else
    sed 's/^/  # /' "$dir/out" | tail -n 30
    fail "$prefix/rewind-running-consumer" "the running consumer did not receive exactly the messages stored after the reset time"
  fi

  # The name server's settings, and order configuration through them: with orderMessageEnable a topic's route
  # carries its ORDER_TOPIC_CONFIG entry.
  mqadmin_check "$prefix/getNamesrvConfig" '^============.+============$' 'orderMessageEnable +=  false' -- \
    getNamesrvConfig
  mqadmin_check "$prefix/updateNamesrvConfig" 'update name server config success!' -- \
    updateNamesrvConfig -k orderMessageEnable -v true
  mqadmin_check "$prefix/getNamesrvConfig-changed" 'orderMessageEnable +=  true' -- getNamesrvConfig
  mqadmin_check "$prefix/updateOrderConf-put" 'update orderConf success' -- \
    updateOrderConf -t "$admin_topic" -m put -v "$broker_name:4"
  mqadmin_check "$prefix/updateOrderConf-get" "orderConf=\\[$broker_name:4\\]" -- \
    updateOrderConf -t "$admin_topic" -m get
  mqadmin_check "$prefix/topicRoute-orderConf" "\"orderTopicConf\" *: *\"$broker_name:4\"" -- \
    topicRoute -t "$admin_topic"
  mqadmin_check "$prefix/updateKvConfig" 'create or update kv config to namespace success' -- \
    updateKvConfig -s ORDER_TOPIC_CONFIG -k "$admin_topic" -v "$broker_name:2"
  mqadmin_check "$prefix/updateOrderConf-get-kv" "orderConf=\\[$broker_name:2\\]" -- \
    updateOrderConf -t "$admin_topic" -m get
  mqadmin_check "$prefix/deleteKvConfig" 'delete kv config from namespace success' -- \
    deleteKvConfig -s ORDER_TOPIC_CONFIG -k "$admin_topic"
  mqadmin_check "$prefix/updateOrderConf-put-again" 'update orderConf success' -- \
    updateOrderConf -t "$admin_topic" -m put -v "$broker_name:4"
  mqadmin_check "$prefix/updateOrderConf-delete" "delete orderConf success. topic=\\[$admin_topic\\]" -- \
    updateOrderConf -t "$admin_topic" -m delete
  # Deleted: the get fails with QUERY_NOT_FOUND.
  mqadmin_check_absent "$prefix/updateOrderConf-get-deleted" 'CODE: 22 ' -- updateOrderConf -t "$admin_topic" -m get
  mqadmin_check "$prefix/updateNamesrvConfig-restore" 'update name server config success!' -- \
    updateNamesrvConfig -k orderMessageEnable -v false

  # Broker settings changed at run time besides brokerPermission (checked in run.sh): automatic topic creation
  # off and on again. Conveyor refuses a key it cannot change at run time, naming it.
  mqadmin_check "$prefix/updateBrokerConfig-autoCreate" 'update broker config success' -- \
    updateBrokerConfig -c "$cluster" -k autoCreateTopicEnable -v false
  mqadmin_check "$prefix/getBrokerConfig-autoCreate" 'autoCreateTopicEnable +=  false' -- getBrokerConfig -c "$cluster"
  mqadmin_check "$prefix/updateBrokerConfig-autoCreate-restore" 'update broker config success' -- \
    updateBrokerConfig -c "$cluster" -k autoCreateTopicEnable -v true
  if [[ "${COMPAT_TARGET:-conveyor}" != apache ]]; then
    mqadmin_check_absent "$prefix/updateBrokerConfig-fixed-refused" 'CODE: 16 .*cannot change flushDiskType at run time' \
      -- updateBrokerConfig -b "$broker_addr" -k flushDiskType -v SYNC_FLUSH
  fi

  # Store maintenance, then a whole topic deleted from the cluster's brokers and the name servers.
  mqadmin_check "$prefix/cleanExpiredCQ" '^success' -- cleanExpiredCQ -c "$cluster"
  mqadmin_check "$prefix/cleanUnusedTopic" '^success' -- cleanUnusedTopic -c "$cluster"
  local doomed="${admin_topic}_del"
  java_cmd "$p" conveyor.compat.Tool create-topic "$doomed" 2
  "${JAVA_ARGV[@]}" >"$dir/create-doomed.log" 2>&1 || sed 's/^/  # /' "$dir/create-doomed.log" | tail -n 5
  mqadmin_check "$prefix/deleteTopic" "delete topic \\[$doomed\\] from cluster \\[$cluster\\] success" \
    "delete topic \\[$doomed\\] from NameServer success" -- deleteTopic -t "$doomed" -c "$cluster"
  local listed
  listed="$(timeout -k 5 120 "$HERE/mqadmin.sh" topicList 2>&1)"
  if grep -q "^$admin_topic\$" <<<"$listed" && ! grep -q "^$doomed\$" <<<"$listed"; then
    pass "$prefix/topicList-deleted"
  else
    fail "$prefix/topicList-deleted" "topicList after deleteTopic: $(grep -c . <<<"$listed") lines, $doomed listed or $admin_topic missing"
  fi

  # A request Conveyor deliberately does not serve names what to use instead (5.x tools: updateStaticTopic).
  if [[ "$p" == rmq5 && "${COMPAT_TARGET:-conveyor}" != apache ]]; then
    mqadmin_check_absent "$prefix/unsupported-remark" 'static topics .*not supported: create a regular topic' -- \
      updateStaticTopic -c "$cluster" -t "${admin_topic}_static" -qn 2
  fi
}
