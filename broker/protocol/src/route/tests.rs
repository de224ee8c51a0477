use super::*;
use crate::json;

fn sample_route() -> TopicRouteData {
    TopicRouteData {
        broker_datas: vec![BrokerData {
            broker_addrs: [
                (0, "10.0.0.5:10911".to_string()),
                (1, "10.0.0.6:10911".to_string()),
            ]
            .into_iter()
            .collect(),
            broker_name: "broker-a".into(),
            cluster: "DefaultCluster".into(),
            enable_acting_master: false,
            zone_name: None,
        }],
        queue_datas: vec![QueueData {
            broker_name: "broker-a".into(),
            perm: perm::READ_WRITE,
            read_queue_nums: 4,
            write_queue_nums: 4,
            topic_sys_flag: 0,
        }],
        ..Default::default()
    }
}

/// The §9.1 example, compacted: what both Java and Go clients accept.
const ROUTE_JSON: &str = concat!(
    r#"{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"},"#,
    r#""brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}],"#,
    r#""filterServerTable":{},"#,
    r#""queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}"#
);

#[test]
fn route_json_is_exact() {
    let route = sample_route();
    assert_eq!(json::to_string(&route).unwrap(), ROUTE_JSON);
    let back: TopicRouteData = json::from_slice(ROUTE_JSON.as_bytes()).unwrap();
    assert_eq!(back, route);
    assert_eq!(back.broker_datas[0].master_addr(), Some("10.0.0.5:10911"));
}

#[test]
fn route_json_with_optional_fields() {
    let mut route = sample_route();
    route.order_topic_conf = Some("broker-a:4".into());
    route.broker_datas[0].zone_name = Some("z1".into());
    let text = json::to_string(&route).unwrap();
    assert!(text.contains(r#""enableActingMaster":false,"zoneName":"z1"}"#));
    assert!(text.contains(r#""filterServerTable":{},"orderTopicConf":"broker-a:4","queueDatas""#));
    assert!(!text.contains(' '));
}

#[test]
fn route_tolerates_unknown_and_missing_fields() {
    let text = r#"{"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":1,"writeQueueNums":1,"extra":1}],
        "brokerDatas":[{"brokerName":"b","brokerAddrs":{"0":"h:1"},"cluster":"c","zoneName":null}],
        "topicQueueMappingByBroker":{}, "somethingNew":[1,2]}"#;
    let r: TopicRouteData = json::from_slice(text.as_bytes()).unwrap();
    assert_eq!(r.queue_datas[0].topic_sys_flag, 0);
    assert_eq!(r.broker_datas[0].master_addr(), Some("h:1"));
    assert!(r.filter_server_table.is_empty());
}

#[test]
fn cluster_info_json() {
    let info = ClusterInfo {
        broker_addr_table: [(
            "broker-a".to_string(),
            sample_route().broker_datas[0].clone(),
        )]
        .into_iter()
        .collect(),
        cluster_addr_table: [("DefaultCluster".to_string(), vec!["broker-a".to_string()])]
            .into_iter()
            .collect(),
    };
    assert_eq!(
        json::to_string(&info).unwrap(),
        concat!(
            r#"{"brokerAddrTable":{"broker-a":{"brokerAddrs":{"0":"10.0.0.5:10911","1":"10.0.0.6:10911"},"#,
            r#""brokerName":"broker-a","cluster":"DefaultCluster","enableActingMaster":false}},"#,
            r#""clusterAddrTable":{"DefaultCluster":["broker-a"]}}"#
        )
    );
}

#[test]
fn register_broker_body_from_doc() {
    let text = r#"{"filterServerList":[],
     "topicConfigSerializeWrapper":{
       "dataVersion":{"counter":12,"stateVersion":0,"timestamp":1717000000000},
       "topicConfigTable":{"TopicTest":{"topicName":"TopicTest","readQueueNums":4,"writeQueueNums":4,"perm":6,
            "topicFilterType":"SINGLE_TAG","topicSysFlag":0,"order":false,"attributes":{}}},
       "topicQueueMappingInfoMap":{}, "topicQueueMappingDetailMap":{}, "mappingDataVersion":{"counter":0}}}"#;
    let body: RegisterBrokerBody = json::from_slice(text.as_bytes()).unwrap();
    let w = &body.topic_config_serialize_wrapper;
    assert_eq!(w.data_version.counter, 12);
    assert_eq!(w.data_version.timestamp, 1_717_000_000_000);
    let t = &w.topic_config_table["TopicTest"];
    assert_eq!(t.perm, 6);
    assert_eq!(t.read_queue_nums, 4);
    assert_eq!(t.topic_filter_type, TopicFilterType::SingleTag);
    // Re-encoding is compact and round-trips.
    let again = json::to_vec(&body).unwrap();
    let back: RegisterBrokerBody = json::from_slice(&again).unwrap();
    assert_eq!(back, body);

    let minimal = RegisterBrokerBody::default();
    assert_eq!(
        json::to_string(&minimal).unwrap(),
        r#"{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":0,"stateVersion":0,"timestamp":0},"topicConfigTable":{}}}"#
    );
}

#[test]
fn topic_config_java_4_without_attributes() {
    let t: TopicConfig = json::from_slice(
        br#"{"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"MULTI_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}"#,
    )
    .unwrap();
    assert_eq!(t.topic_filter_type, TopicFilterType::MultiTag);
    assert!(t.attributes.is_empty());
    assert_eq!(
        json::to_string(&t).unwrap(),
        r#"{"attributes":{},"order":false,"perm":7,"readQueueNums":8,"topicFilterType":"MULTI_TAG","topicName":"TBW102","topicSysFlag":0,"writeQueueNums":8}"#
    );
}

#[test]
fn java_heartbeat_from_doc() {
    let text = r#"{ "clientID": "192.168.0.7@12345#98765432100",
      "producerDataSet": [ {"groupName": "PG"} , {"groupName": "CLIENT_INNER_PRODUCER"} ],
      "consumerDataSet": [ {
          "groupName": "CG",
          "consumeType": "CONSUME_PASSIVELY",
          "messageModel": "CLUSTERING",
          "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
          "unitMode": false,
          "subscriptionDataSet": [ {
              "classFilterMode": false, "topic": "TopicTest", "subString": "TagA || TagB",
              "tagsSet": ["TagA","TagB"], "codeSet": [2598919, 2598920],
              "subVersion": 1717000000000, "expressionType": "TAG" } ] } ],
      "heartbeatFingerprint": 0, "withoutSub": false }"#;
    let hb: HeartbeatData = json::from_slice(text.as_bytes()).unwrap();
    assert_eq!(hb.client_id, "192.168.0.7@12345#98765432100");
    assert_eq!(hb.producer_data_set.len(), 2);
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.consume_type, ConsumeType::Passively);
    assert_eq!(c.message_model, MessageModel::Clustering);
    assert_eq!(c.consume_from_where, ConsumeFromWhere::LastOffset);
    let s = &c.subscription_data_set[0];
    assert_eq!(s.tags_set, vec!["TagA", "TagB"]);
    assert_eq!(s.code_set, vec![2_598_919, 2_598_920]);
    assert_eq!(s.sub_version, 1_717_000_000_000);
    assert_eq!(hb.heartbeat_fingerprint, Some(0));
    assert_eq!(hb.without_sub, Some(false));
    let back: HeartbeatData = json::from_slice(&json::to_vec(&hb).unwrap()).unwrap();
    assert_eq!(back, hb);
}

#[test]
fn go_heartbeat_with_nulls() {
    let text = r#"{"clientID":"10.0.0.1@42","producerDataSet":null,"consumerDataSet":[{"groupName":"g",
      "consumeType":"CONSUME_PASSIVELY","messageModel":"BROADCASTING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",
      "subscriptionDataSet":[{"classFilterMode":false,"topic":"%RETRY%g","subString":"*","tagsSet":null,
      "codeSet":null,"subVersion":0,"expressionType":"TAG"}],"unitMode":false}]}"#;
    let hb: HeartbeatData = json::from_slice(text.as_bytes()).unwrap();
    assert!(hb.producer_data_set.is_empty());
    let c = &hb.consumer_data_set[0];
    assert_eq!(c.message_model, MessageModel::Broadcasting);
    assert!(c.subscription_data_set[0].tags_set.is_empty());
    assert_eq!(hb.heartbeat_fingerprint, None);
}

#[test]
fn unknown_enum_values_decode() {
    let c: ConsumerData = json::from_slice(
        br#"{"groupName":"g","consumeType":"CONSUME_TELEPATHICALLY","messageModel":"X","consumeFromWhere":"Y"}"#,
    )
    .unwrap();
    assert_eq!(c.consume_type, ConsumeType::Unknown);
    assert_eq!(c.message_model, MessageModel::Unknown);
    assert_eq!(c.consume_from_where, ConsumeFromWhere::Unknown);
    let s: SubscriptionData = json::from_slice(br#"{"topic":"t","subString":"*"}"#).unwrap();
    assert_eq!(s.expression_type, EXPRESSION_TYPE_TAG);
}

#[test]
fn lock_bodies() {
    let text = r#"{"consumerGroup":"CG","clientId":"c1","onlyThisBroker":false,"mqSet":[{"topic":"T","brokerName":"broker-a","queueId":0}]}"#;
    let req: LockBatchRequestBody = json::from_slice(text.as_bytes()).unwrap();
    assert_eq!(req.mq_set[0].topic, "T");
    let go: LockBatchRequestBody =
        json::from_slice(br#"{"consumerGroup":"CG","clientId":"c1","mqSet":[]}"#).unwrap();
    assert!(!go.only_this_broker);
    let resp = LockBatchResponseBody {
        lock_ok_mq_set: req.mq_set.clone(),
    };
    assert_eq!(
        json::to_string(&resp).unwrap(),
        r#"{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"T"}]}"#
    );
}

#[test]
fn small_bodies() {
    let list = ConsumerListBody {
        consumer_id_list: vec!["cid1".into(), "cid2".into()],
    };
    assert_eq!(
        json::to_string(&list).unwrap(),
        r#"{"consumerIdList":["cid1","cid2"]}"#
    );
    let topics = TopicList {
        broker_addr: None,
        topic_list: vec!["T1".into(), "T2".into()],
    };
    assert_eq!(
        json::to_string(&topics).unwrap(),
        r#"{"topicList":["T1","T2"]}"#
    );
    assert_eq!(
        json::to_string(&KvTable::default()).unwrap(),
        r#"{"table":{}}"#
    );
    let check: CheckClientRequestBody = json::from_slice(
        br#"{"clientId":"c","group":"g","subscriptionData":{"topic":"t","subString":"a > 1","expressionType":"SQL92"},"namespace":null}"#,
    )
    .unwrap();
    assert_eq!(
        check.subscription_data.expression_type,
        EXPRESSION_TYPE_SQL92
    );
    assert_eq!(check.namespace, None);
}

/// Issue 9: the Go client (rocketmq-client-go v2.1.2) writes a tag subscription's `codeSet` as
/// strings; refusing them dropped the whole heartbeat, so a Go push consumer subscribed with
/// `TagA || TagB` never received anything (while `*`, with an empty set, worked).
#[test]
fn go_heartbeat_with_tag_codes_as_strings() {
    let text = r#"{"clientID":"10.0.0.5@4242","producerDataSet":[],"consumerDataSet":[{
      "groupName":"CG_go","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING",
      "consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","unitMode":false,
      "subscriptionDataSet":[{"classFilterMode":false,"topic":"TopicGo",
        "subString":"TagA || TagB","tagsSet":["TagA","TagB"],"codeSet":["2598919","2598920"],
        "subVersion":1717000000000123456,"expressionType":"TAG"}]}]}"#;
    let hb: HeartbeatData = json::from_slice(text.as_bytes()).unwrap();
    let s = &hb.consumer_data_set[0].subscription_data_set[0];
    assert_eq!(s.code_set, vec![2_598_919, 2_598_920]);
    assert_eq!(s.sub_string, "TagA || TagB");
    // A code that is not an integer is an error naming the value.
    let bad = text.replace("\"2598920\"", "\"x\"");
    let err = json::from_slice::<HeartbeatData>(bad.as_bytes()).unwrap_err();
    assert!(err.to_string().contains("\"x\""), "{err}");
}

#[test]
fn a_zone_route_keeps_the_groups_of_that_zone_and_those_without_a_master() {
    let group = |name: &str, zone: Option<&str>, master: bool| {
        let mut b = sample_route().broker_datas[0].clone();
        b.broker_name = name.into();
        b.zone_name = zone.map(String::from);
        if !master {
            b.broker_addrs.remove(&MASTER_ID);
        }
        b
    };
    let queues = |name: &str| QueueData {
        broker_name: name.into(),
        ..sample_route().queue_datas[0].clone()
    };
    let route = TopicRouteData {
        broker_datas: vec![
            group("a", Some("Zone-1"), true),
            group("b", Some("zone-2"), true),
            group("c", Some("zone-2"), false),
            group("d", None, true),
        ],
        queue_datas: ["a", "b", "c", "d"].into_iter().map(queues).collect(),
        ..Default::default()
    };
    let names = |r: &TopicRouteData| {
        let groups: Vec<_> = r
            .broker_datas
            .iter()
            .map(|b| b.broker_name.clone())
            .collect();
        let queues: Vec<_> = r
            .queue_datas
            .iter()
            .map(|q| q.broker_name.clone())
            .collect();
        (groups, queues)
    };
    let in_1 = route.clone().in_zone("zone-1");
    assert_eq!(
        names(&in_1),
        (vec!["a".into(), "c".into()], vec!["a".into(), "c".into()])
    );
    let in_2 = route.in_zone("zone-2");
    assert_eq!(
        names(&in_2),
        (vec!["b".into(), "c".into()], vec!["b".into(), "c".into()])
    );
}
