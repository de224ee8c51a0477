//! AdminBrokerProcessor: topic and group management and the statistics `mqadmin` prints
//! (clusterList, topicStatus, consumerProgress, …).
//!
//! Several of RocketMQ's admin bodies are maps keyed by a MessageQueue object, which fastjson
//! writes with the object itself as the key (`{{"brokerName":…}:{…}}`, not strict JSON);
//! the Java tools parse exactly that, so [`mq_keyed_map`] writes it the same way.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::admin::{
    CreateTopicRequestHeader, DeleteSubscriptionGroupRequestHeader, DeleteTopicRequestHeader,
    GetSubscriptionGroupConfigRequestHeader, GetTopicConfigRequestHeader,
    GetTopicStatsInfoRequestHeader, QueryTopicConsumeByWhoRequestHeader,
    QueryTopicsByConsumerRequestHeader,
};
use conveyor_protocol::json;
use conveyor_protocol::route::{GroupList, MessageQueue, TopicConfig, TopicConfigSerializeWrapper};
use conveyor_protocol::time::now_ms;
use conveyor_store::MessageStore;
use serde::Serialize;

use super::clients::ClientManager;
use super::config::BrokerConfig;
use super::durability::sync_flush;
use super::groups::{SubscriptionGroupConfig, SubscriptionGroupManager};
use super::offsets::ConsumerOffsetManager;
use super::register::NameServerRegistrar;
use super::reply::{bad_header, error_response, internal, ok, store_error_response, Reply};
use super::stats::BrokerStats;
use super::topics::{self, TopicConfigManager};

/// Writes `{"<field>":{<mq json>:<value json>,…}, <extra fields>}` the way fastjson does.
pub fn mq_keyed_map<V: Serialize>(
    field: &str,
    entries: &[(MessageQueue, V)],
    extra: &[(&str, serde_json::Value)],
) -> Result<Vec<u8>, json::JsonError> {
    let mut out = String::from("{");
    for (k, v) in extra {
        out.push_str(&json::to_string(k)?);
        out.push(':');
        out.push_str(&json::to_string(v)?);
        out.push(',');
    }
    out.push_str(&json::to_string(field)?);
    out.push_str(":{");
    for (i, (mq, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json::to_string(mq)?);
        out.push(':');
        out.push_str(&json::to_string(v)?);
    }
    out.push_str("}}");
    Ok(out.into_bytes())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicOffset {
    min_offset: i64,
    max_offset: i64,
    last_update_timestamp: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TopicList {
    topic_list: Vec<String>,
    broker_addr: String,
}

#[derive(Serialize)]
struct GroupTable<'a> {
    #[serde(rename = "subscriptionGroupTable")]
    table: BTreeMap<String, &'a SubscriptionGroupConfig>,
    #[serde(rename = "dataVersion")]
    data_version: conveyor_protocol::route::DataVersion,
}

/// The settings UPDATE_BROKER_CONFIG changes at run time (RocketMQ's names).
pub const RUNTIME_KEYS: [&str; 3] = [
    "brokerPermission",
    "autoCreateTopicEnable",
    "autoCreateSubscriptionGroup",
];

/// Messages a broker stores for later: delay levels and timers not due yet, transactional
/// half messages not decided yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parked {
    /// Delay-level messages not delivered yet.
    pub delayed: u64,
    /// Timer messages not delivered yet.
    pub timers: u64,
    /// Half messages not committed or rolled back yet.
    pub half: u64,
}

/// What an AdminBrokerProcessor needs from the rest of the broker.
pub struct AdminDeps {
    /// The broker's own permission (UPDATE_BROKER_CONFIG `brokerPermission`).
    pub permission: Arc<super::permission::BrokerPermission>,
    /// Queue offsets, store times and the store's settings.
    pub store: Arc<MessageStore>,
    /// The topic table.
    pub topics: Arc<TopicConfigManager>,
    /// The group table.
    pub groups: Arc<SubscriptionGroupManager>,
    /// Committed offsets.
    pub offsets: Arc<ConsumerOffsetManager>,
    /// Live consumers.
    pub clients: Arc<ClientManager>,
    /// Told when the topic table changed.
    pub registrar: Arc<NameServerRegistrar>,
    /// Traffic counters.
    pub stats: Arc<BrokerStats>,
    /// The role and the replication state.
    pub replication: Arc<crate::ha::Replication>,
}

/// The admin requests.
pub struct AdminBrokerProcessor {
    /// The broker's own permission, changed at run time.
    permission: Arc<super::permission::BrokerPermission>,
    /// The broker's settings, reported by GET_BROKER_CONFIG.
    config: BrokerConfig,
    /// The broker's advertised address.
    store_host: SocketAddr,
    /// Queue offsets, store times and the store's settings.
    store: Arc<MessageStore>,
    /// The topic table.
    topics: Arc<TopicConfigManager>,
    /// The group table.
    groups: Arc<SubscriptionGroupManager>,
    /// Committed offsets (consume progress, who consumes what).
    offsets: Arc<ConsumerOffsetManager>,
    /// Live consumers (connections, subscriptions).
    clients: Arc<ClientManager>,
    /// Told when the topic table changed, so routes follow at once.
    registrar: Arc<NameServerRegistrar>,
    /// Traffic counters (runtime info).
    stats: Arc<BrokerStats>,
    /// The role and the replication state (runtime info).
    replication: Arc<crate::ha::Replication>,
    /// When the broker started (uptime and TPS averages).
    started: Instant,
    /// Wall-clock start time (`bootTimestamp`).
    boot_timestamp: i64,
}

impl AdminBrokerProcessor {
    /// A processor over the broker's services; uptime counts from now.
    pub fn new(config: BrokerConfig, store_host: SocketAddr, deps: AdminDeps) -> Self {
        Self {
            config,
            store_host,
            permission: deps.permission,
            store: deps.store,
            topics: deps.topics,
            groups: deps.groups,
            offsets: deps.offsets,
            clients: deps.clients,
            registrar: deps.registrar,
            stats: deps.stats,
            replication: deps.replication,
            started: Instant::now(),
            boot_timestamp: now_ms(),
        }
    }

    fn mq(&self, topic: &str, queue_id: i32) -> MessageQueue {
        MessageQueue {
            topic: topic.to_string(),
            broker_name: self.config.broker_name.clone(),
            queue_id,
        }
    }

    /// Topics the broker itself keeps (RocketMQ's TopicValidator system topics, with the
    /// cluster and broker names): they cannot be deleted.
    fn is_system_topic(&self, topic: &str) -> bool {
        topics::is_internal(topic)
            || [
                topics::AUTO_CREATE_TOPIC,
                topics::SELF_TEST_TOPIC,
                self.config.cluster_name.as_str(),
                self.config.broker_name.as_str(),
            ]
            .contains(&topic)
    }

    /// DELETE_TOPIC_IN_BROKER.
    pub async fn delete_topic(&self, req: &RemotingCommand) -> Reply {
        let h = DeleteTopicRequestHeader::parse(req).map_err(bad_header(req))?;
        if self.is_system_topic(&h.topic) {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("The topic[{}] is conflict with system topic.", h.topic),
            ));
        }
        // The groups' offsets on it go too (RocketMQ 5): a topic created again under the
        // same name starts its groups afresh.
        for group in self.offsets.groups_of_topic(&h.topic) {
            self.offsets.remove(&group, &h.topic);
        }
        self.topics
            .remove(&h.topic)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        // Its queues go too (RocketMQ deletes them): otherwise a restart would restore the
        // topic from them.
        self.store
            .delete_topic(&h.topic)
            .map_err(|e| store_error_response(req, &e))?;
        self.registrar.register_all().await;
        Ok(ok(req))
    }

    /// GET_ALL_TOPIC_CONFIG.
    pub fn all_topic_config(&self, req: &RemotingCommand) -> Reply {
        let (table, data_version) = self.topics.snapshot();
        let body = json::to_vec(&TopicConfigSerializeWrapper {
            data_version,
            topic_config_table: table,
            ..Default::default()
        })
        .map_err(internal(req))?;
        Ok(ok(req).with_body(body))
    }

    /// GET_TOPIC_CONFIG.
    pub fn topic_config(&self, req: &RemotingCommand) -> Reply {
        let h = GetTopicConfigRequestHeader::parse(req).map_err(bad_header(req))?;
        let topic = h.topic.as_str();
        let config = self.topics.get(topic).ok_or_else(|| {
            error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("No topic in this broker. topic: {topic}"),
            )
        })?;
        #[derive(Serialize)]
        struct Body {
            #[serde(rename = "topicConfig")]
            topic_config: TopicConfig,
        }
        Ok(ok(req).with_body(
            json::to_vec(&Body {
                topic_config: config,
            })
            .map_err(internal(req))?,
        ))
    }

    /// GET_BROKER_CONFIG: the settings as RocketMQ's `key=value` lines.
    pub fn broker_config(&self, req: &RemotingCommand) -> Reply {
        let text = format!(
            "brokerClusterName={}\nbrokerName={}\nbrokerId={}\nbrokerIP1={}\nlistenPort={}\nnamesrvAddr={}\nautoCreateTopicEnable={}\nautoCreateSubscriptionGroup={}\ndefaultTopicQueueNums={}\nflushDiskType={}\nmessageDelayLevel={}\nstorePathRootDir={}\nmaxMessageSize={}\nbrokerPermission={}\n",
            self.config.cluster_name,
            self.config.broker_name,
            self.config.broker_id,
            self.store_host.ip(),
            self.store_host.port(),
            self.config.namesrv_addrs.join(";"),
            self.topics.auto_create(),
            self.groups.auto_create(),
            self.config.default_topic_queue_nums,
            if sync_flush(&self.store) { "SYNC_FLUSH" } else { "ASYNC_FLUSH" },
            self.config.delay_levels,
            self.store.config().root.display(),
            self.store.config().max_message_size,
            self.permission.get(),
        );
        let (_, version) = self.topics.snapshot();
        Ok(ok(req)
            .with_ext("version", json::to_string(&version).map_err(internal(req))?)
            .with_body(text.into_bytes()))
    }

    /// UPDATE_BROKER_CONFIG: the body holds `key=value` lines (Java properties). The settings
    /// in [`RUNTIME_KEYS`] change at run time; a request naming any other key changes nothing
    /// and says which keys it cannot change, and a bad value changes nothing either. Not
    /// persisted: a restart takes the configured values.
    pub fn update_broker_config(&self, req: &RemotingCommand) -> Reply {
        let pairs = conveyor_protocol::properties::parse(&String::from_utf8_lossy(&req.body));
        let fixed: Vec<&str> = pairs
            .iter()
            .map(|(k, _)| k.as_str())
            .filter(|k| !RUNTIME_KEYS.contains(k))
            .collect();
        if !fixed.is_empty() {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                format!(
                    "cannot change {} at run time: only {} can; set the others in the broker's \
                     configuration file and restart it",
                    fixed.join(", "),
                    RUNTIME_KEYS.join(", ")
                ),
            ));
        }
        let invalid = |e: String| error_response(req, resp::INVALID_PARAMETER, e);
        let flag = |key: &str, value: &str| {
            value
                .parse::<bool>()
                .map_err(|_| invalid(format!("{key} must be true or false, not {value:?}")))
        };
        // Every value is checked before any is applied.
        for (key, value) in &pairs {
            match key.as_str() {
                "brokerPermission" => {
                    crate::broker::permission::parse(value).map_err(|e| invalid(e.to_string()))?;
                }
                _ => {
                    flag(key, value)?;
                }
            }
        }
        let mut reregister = false;
        for (key, value) in &pairs {
            let changed = match key.as_str() {
                "brokerPermission" => self
                    .permission
                    .set(value)
                    .map_err(|e| invalid(e.to_string()))?,
                "autoCreateTopicEnable" => self
                    .topics
                    .set_auto_create(flag(key, value)?)
                    .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?,
                _ => self.groups.set_auto_create(flag(key, value)?),
            };
            if changed {
                tracing::warn!(key = %key, value = %value, "broker setting changed at run time");
                // Routes follow at once: producers stop choosing a read-only broker, and
                // clients see TBW102's permission.
                reregister |= key != "autoCreateSubscriptionGroup";
            }
        }
        if reregister {
            self.registrar.register_soon();
        }
        Ok(ok(req))
    }

    /// CLEAN_EXPIRED_CONSUMEQUEUE (`cleanExpiredCQ`): deletes now the ConsumeQueue files
    /// whose records retention already removed from the CommitLog.
    pub fn clean_expired_queues(&self, req: &RemotingCommand) -> Reply {
        let files = self
            .store
            .clean_expired_queues()
            .map_err(|e| store_error_response(req, &e))?;
        tracing::info!(files, "expired ConsumeQueue files deleted on request");
        Ok(ok(req))
    }

    /// CLEAN_UNUSED_TOPIC (`cleanUnusedTopic`): deletes the ConsumeQueues of topics that are
    /// no longer in the topic table. Retry, dead-letter and system topics stay. A start
    /// restores the config of every stored queue (a table restored from a backup loses no
    /// topic, tests/clean_topics.rs) and a deletion removes config and queues together, so
    /// this finds only queues a deletion could not remove (a file error) or that a record
    /// dispatched during the deletion created again.
    pub fn clean_unused_topics(&self, req: &RemotingCommand) -> Reply {
        let (table, _) = self.topics.snapshot();
        let mut unused: Vec<String> = self
            .store
            .queues()
            .into_iter()
            .map(|(t, _)| t)
            .filter(|t| !table.contains_key(t) && !topics::is_kept_without_config(t))
            .collect();
        unused.dedup();
        for topic in &unused {
            self.store
                .delete_topic(topic)
                .map_err(|e| store_error_response(req, &e))?;
        }
        tracing::info!(topics = ?unused, "queues of unused topics deleted on request");
        Ok(ok(req))
    }

    /// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: the body is the group's config.
    pub fn upsert_group(&self, req: &RemotingCommand) -> Reply {
        let config: SubscriptionGroupConfig = json::from_slice(&req.body).map_err(|e| {
            error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("bad subscription group body: {e}"),
            )
        })?;
        if config.group_name.is_empty() {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                "groupName is required",
            ));
        }
        self.groups
            .upsert(config)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        Ok(ok(req))
    }

    /// GET_SUBSCRIPTIONGROUP_CONFIG.
    pub fn group_config(&self, req: &RemotingCommand) -> Reply {
        let h = GetSubscriptionGroupConfigRequestHeader::parse(req).map_err(bad_header(req))?;
        let group = h.group.as_str();
        let config = self.groups.get(group).ok_or_else(|| {
            error_response(
                req,
                resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group [{group}] does not exist"),
            )
        })?;
        Ok(ok(req).with_body(json::to_vec(&config).map_err(internal(req))?))
    }

    /// GET_ALL_SUBSCRIPTIONGROUP_CONFIG.
    pub fn all_group_config(&self, req: &RemotingCommand) -> Reply {
        let all = self.groups.all();
        let body = GroupTable {
            table: all.iter().map(|g| (g.group_name.clone(), g)).collect(),
            data_version: Default::default(),
        };
        Ok(ok(req).with_body(json::to_vec(&body).map_err(internal(req))?))
    }

    /// DELETE_SUBSCRIPTIONGROUP.
    pub fn delete_group(&self, req: &RemotingCommand) -> Reply {
        let h = DeleteSubscriptionGroupRequestHeader::parse(req).map_err(bad_header(req))?;
        self.groups
            .remove(&h.group_name)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        Ok(ok(req))
    }

    /// QUERY_TOPIC_CONSUME_BY_WHO: groups subscribed now or with committed offsets.
    pub fn topic_consumed_by(&self, req: &RemotingCommand) -> Reply {
        let h = QueryTopicConsumeByWhoRequestHeader::parse(req).map_err(bad_header(req))?;
        let mut groups = self.clients.groups_subscribing(&h.topic);
        groups.extend(self.offsets.groups_of_topic(&h.topic));
        groups.sort();
        groups.dedup();
        Ok(ok(req)
            .with_body(json::to_vec(&GroupList { group_list: groups }).map_err(internal(req))?))
    }

    /// QUERY_TOPICS_BY_CONSUMER: topics a group has committed offsets for.
    pub fn topics_consumed_by(&self, req: &RemotingCommand) -> Reply {
        let h = QueryTopicsByConsumerRequestHeader::parse(req).map_err(bad_header(req))?;
        let mut topics: Vec<String> = self
            .offsets
            .offsets_of_group(&h.group)
            .into_iter()
            .map(|(t, _, _)| t)
            .collect();
        topics.sort();
        topics.dedup();
        let body = TopicList {
            topic_list: topics,
            broker_addr: self.config.advertised_addr.clone(),
        };
        Ok(ok(req).with_body(json::to_vec(&body).map_err(internal(req))?))
    }

    /// UPDATE_AND_CREATE_TOPIC.
    pub async fn create_topic(&self, req: &RemotingCommand) -> Reply {
        let h = CreateTopicRequestHeader::parse(req).map_err(bad_header(req))?;
        let topic = h.topic.as_str();
        conveyor_store::validate_topic(topic)
            .map_err(|e| error_response(req, resp::INVALID_PARAMETER, e.to_string()))?;
        if topics::is_forbidden_for_send(topic) || topic == topics::AUTO_CREATE_TOPIC {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("the topic[{topic}] is conflict with system topic"),
            ));
        }
        let (read, write, perm) = (h.read_queue_nums, h.write_queue_nums, h.perm);
        if !(1..=1024).contains(&read) || !(1..=1024).contains(&write) {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                "readQueueNums and writeQueueNums must be between 1 and 1024",
            ));
        }
        let config = TopicConfig {
            topic_name: topic.to_string(),
            read_queue_nums: read,
            write_queue_nums: write,
            perm,
            topic_filter_type: h.topic_filter_type,
            topic_sys_flag: h.topic_sys_flag,
            order: h.order,
            attributes: h.attributes.clone(),
        };
        self.topics
            .upsert(config)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        tracing::info!(topic, read, write, perm, "topic created or updated");
        self.registrar.register_all().await;
        Ok(ok(req))
    }

    /// GET_BROKER_RUNTIME_INFO: the `brokerStatus` table, with what the broker keeps for
    /// later (`parked`).
    pub fn runtime_info(&self, req: &RemotingCommand, parked: &Parked) -> Reply {
        let uptime = self.started.elapsed().as_secs_f64().max(1.0);
        let stats = self.stats.snapshot();
        let (put, get) = (stats.messages_in, stats.messages_out);
        let put_tps = put as f64 / uptime;
        let get_tps = get as f64 / uptime;
        let disk = conveyor_store::disk_usage(&self.store.config().root).unwrap_or(0.0);
        let earliest = self
            .store
            .queues()
            .iter()
            .filter_map(|(t, q)| self.store.earliest_store_time(t, *q))
            .min()
            .unwrap_or(0);
        let mut table: BTreeMap<String, String> = BTreeMap::new();
        let mut put_kv = |k: &str, v: String| {
            table.insert(k.to_string(), v);
        };
        put_kv(
            "brokerVersionDesc",
            format!("Conveyor {}", env!("CARGO_PKG_VERSION")),
        );
        put_kv(
            "brokerVersion",
            conveyor_protocol::code::version::CURRENT.to_string(),
        );
        put_kv("bootTimestamp", self.boot_timestamp.to_string());
        put_kv("putTps", format!("{put_tps:.2} {put_tps:.2} {put_tps:.2}"));
        put_kv(
            "getTransferedTps",
            format!("{get_tps:.2} {get_tps:.2} {get_tps:.2}"),
        );
        put_kv(
            "getTransferredTps",
            format!("{get_tps:.2} {get_tps:.2} {get_tps:.2}"),
        );
        put_kv("msgPutTotalTodayNow", put.to_string());
        put_kv("msgGetTotalTodayNow", get.to_string());
        for k in [
            "msgPutTotalTodayMorning",
            "msgPutTotalYesterdayMorning",
            "msgGetTotalTodayMorning",
            "msgGetTotalYesterdayMorning",
        ] {
            put_kv(k, "0".into());
        }
        for k in [
            "sendThreadPoolQueueSize",
            "pullThreadPoolQueueSize",
            "queryThreadPoolQueueSize",
            "sendThreadPoolQueueHeadWaitTimeMills",
            "pullThreadPoolQueueHeadWaitTimeMills",
            "queryThreadPoolQueueHeadWaitTimeMills",
            "pageCacheLockTimeMills",
        ] {
            put_kv(k, "0".into());
        }
        put_kv("earliestMessageTimeStamp", earliest.to_string());
        put_kv("commitLogDiskRatio", format!("{disk:.4}"));
        put_kv(
            "commitLogMinOffset",
            self.store.commit_log_min_offset().to_string(),
        );
        put_kv(
            "commitLogMaxOffset",
            self.store.commit_log_max_offset().to_string(),
        );
        put_kv(
            "dispatchBehindBytes",
            (self.store.commit_log_max_offset() - self.store.dispatched_offset()).to_string(),
        );
        put_kv("runtime", format!("[ {} seconds ]", uptime as u64));
        // Replication (Conveyor's keys; RocketMQ's `brokerRole` naming for the role).
        let repl = &self.replication;
        put_kv(
            "brokerRole",
            match repl.role_state() {
                crate::ha::RoleState::Fenced => "FENCED",
                crate::ha::RoleState::Master { .. } if repl.is_sync() => "SYNC_MASTER",
                crate::ha::RoleState::Master { .. } => "ASYNC_MASTER",
                crate::ha::RoleState::Slave { .. } => "SLAVE",
            }
            .to_string(),
        );
        put_kv("masterEpoch", repl.epoch().to_string());
        // Conveyor's keys: messages stored for later delivery (a drained group is removed
        // only once they are all delivered and consumed).
        put_kv("delayedMessagesPending", parked.delayed.to_string());
        put_kv("timerMessagesPending", parked.timers.to_string());
        put_kv("halfMessagesPending", parked.half.to_string());
        put_kv("confirmOffset", self.store.confirm_offset().to_string());
        if repl.is_master() {
            // What each slave acknowledged holding: `id:offset,...` (RocketMQ's haStatus
            // `slaveAckOffset` per connection).
            let acks: Vec<String> = repl
                .slaves()
                .iter()
                .map(|s| format!("{}:{}", s.broker_id, s.acked))
                .collect();
            put_kv("slaveAckOffsets", acks.join(","));
        }
        let body =
            json::to_vec(&conveyor_protocol::route::KvTable { table }).map_err(internal(req))?;
        Ok(ok(req).with_body(body))
    }

    /// GET_TOPIC_STATS_INFO: min and max offsets of every queue of a topic.
    pub fn topic_stats(&self, req: &RemotingCommand) -> Reply {
        let h = GetTopicStatsInfoRequestHeader::parse(req).map_err(bad_header(req))?;
        let topic = h.topic.as_str();
        let config = self.topics.get(topic).ok_or_else(|| {
            error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            )
        })?;
        let entries: Vec<(MessageQueue, TopicOffset)> =
            (0..config.write_queue_nums.max(config.read_queue_nums))
                .map(|q| {
                    let max = self.store.max_offset(topic, q);
                    let last = if max > 0 {
                        self.store.store_time_at(topic, q, max - 1).unwrap_or(0)
                    } else {
                        0
                    };
                    (
                        self.mq(topic, q),
                        TopicOffset {
                            min_offset: self.store.min_offset(topic, q),
                            max_offset: max,
                            last_update_timestamp: last,
                        },
                    )
                })
                .collect();
        let body = mq_keyed_map(
            "offsetTable",
            &entries,
            &[("topicPutTps", serde_json::json!(0.0))],
        )
        .map_err(internal(req))?;
        Ok(ok(req).with_body(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mq_keyed_maps_use_object_keys_like_fastjson() {
        let mq = MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: 1,
        };
        let out = mq_keyed_map(
            "offsetTable",
            &[(
                mq,
                TopicOffset {
                    min_offset: 0,
                    max_offset: 5,
                    last_update_timestamp: 9,
                },
            )],
            &[("topicPutTps", serde_json::json!(0.0))],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"topicPutTps":0.0,"offsetTable":{{"brokerName":"b","queueId":1,"topic":"T"}:{"minOffset":0,"maxOffset":5,"lastUpdateTimestamp":9}}}"#
        );
    }
}
