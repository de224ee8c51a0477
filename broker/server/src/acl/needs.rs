//! What each request needs of its subject, per server (pure): the topic and group permissions
//! of the data requests, as RocketMQ's ACL maps them (`PlainAccessResource.parse`, ACL 2.0's
//! `DefaultAuthorizationContextBuilder`), and for everything else admin permission or the
//! cluster secret. A request code not listed here needs admin permission: a new request
//! is closed until someone decides who may make it.

use conveyor_protocol::code::request_code as rc;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::{HeartbeatData, LockBatchRequestBody};

use super::rules::{Need, Perm, RETRY_PREFIX};

/// The DLQ topic prefix: a group's dead letters are the group's.
const DLQ_PREFIX: &str = "%DLQ%";

/// `perm` on `topic`, or on its group when it is a retry or DLQ topic.
fn on_topic(topic: &str, perm: Perm) -> Need {
    match topic
        .strip_prefix(RETRY_PREFIX)
        .or_else(|| topic.strip_prefix(DLQ_PREFIX))
    {
        Some(group) => Need::Group(group.to_string(), Perm::SUB),
        None => Need::Topic(topic.to_string(), perm),
    }
}

fn field<'a>(req: &'a RemotingCommand, names: &[&str]) -> Option<&'a str> {
    names
        .iter()
        .find_map(|n| req.ext(n))
        .filter(|v| !v.is_empty())
}

fn topic(req: &RemotingCommand, names: &[&str], perm: Perm) -> Option<Need> {
    field(req, names).map(|t| on_topic(t, perm))
}

fn group(req: &RemotingCommand, names: &[&str]) -> Option<Need> {
    field(req, names).map(|g| Need::Group(g.to_string(), Perm::SUB))
}

/// A request whose resources cannot be read (a body that does not parse) needs admin
/// permission: the handler would refuse it anyway, and nobody gets through by garbling it.
fn body<T: serde::de::DeserializeOwned>(req: &RemotingCommand) -> Option<T> {
    json::from_slice(&req.body).ok()
}

/// What a request to the broker needs. `record_topic` reads the topic of the record at a
/// CommitLog offset (the real topic of a prepared transaction message): requests that name a
/// record by offset are checked against what it is, not what the request says it is.
pub fn broker(req: &RemotingCommand, record_topic: impl Fn(u64) -> Option<String>) -> Vec<Need> {
    const PUB: Perm = Perm::PUB;
    const SUB: Perm = Perm::SUB;
    let by_offset = |name: &str, perm: Perm| -> Vec<Need> {
        match req
            .ext(name)
            .and_then(|o| o.parse::<u64>().ok())
            .and_then(&record_topic)
        {
            Some(t) => vec![on_topic(&t, perm)],
            // Nothing there: the handler answers that, and nothing is read or changed.
            None => vec![],
        }
    };
    let needs: Vec<Option<Need>> = match req.code {
        rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
            vec![topic(req, &["topic", "b"], PUB)]
        }
        rc::RECALL_MESSAGE => vec![topic(req, &["topic"], PUB)],
        rc::END_TRANSACTION => return by_offset("commitLogOffset", PUB),
        rc::VIEW_MESSAGE_BY_ID => return by_offset("offset", SUB),
        rc::CONSUMER_SEND_MSG_BACK => vec![group(req, &["group"])],
        rc::PULL_MESSAGE
        | rc::LITE_PULL_MESSAGE
        | rc::QUERY_CONSUMER_OFFSET
        | rc::UPDATE_CONSUMER_OFFSET
        | rc::POP_MESSAGE
        | rc::ACK_MESSAGE
        | rc::PEEK_MESSAGE
        | rc::CHANGE_MESSAGE_INVISIBLETIME
        | rc::NOTIFICATION
        | rc::POLLING_INFO
        | rc::GET_CONSUME_STATS => {
            vec![topic(req, &["topic"], SUB), group(req, &["consumerGroup"])]
        }
        rc::QUERY_MESSAGE
        | rc::GET_MAX_OFFSET
        | rc::GET_MIN_OFFSET
        | rc::SEARCH_OFFSET_BY_TIMESTAMP
        | rc::GET_EARLIEST_MSG_STORETIME
        | rc::GET_TOPIC_STATS_INFO
        | rc::GET_TOPIC_CONFIG
        | rc::QUERY_TOPIC_CONSUME_BY_WHO => vec![topic(req, &["topic"], SUB)],
        rc::UNREGISTER_CLIENT
        | rc::GET_CONSUMER_LIST_BY_GROUP
        | rc::GET_CONSUMER_CONNECTION_LIST => vec![group(req, &["consumerGroup"])],
        rc::GET_SUBSCRIPTIONGROUP_CONFIG | rc::QUERY_TOPICS_BY_CONSUMER => {
            vec![group(req, &["group"])]
        }
        rc::HEART_BEAT => match body::<HeartbeatData>(req) {
            Some(hb) => hb
                .consumer_data_set
                .iter()
                .flat_map(|c| {
                    std::iter::once(Some(Need::Group(c.group_name.clone(), SUB))).chain(
                        c.subscription_data_set
                            .iter()
                            .filter(|s| !s.topic.starts_with(RETRY_PREFIX))
                            .map(|s| Some(on_topic(&s.topic, SUB))),
                    )
                })
                .collect(),
            None => vec![Some(Need::Admin)],
        },
        rc::LOCK_BATCH_MQ | rc::UNLOCK_BATCH_MQ => match body::<LockBatchRequestBody>(req) {
            Some(b) => std::iter::once(Some(Need::Group(b.consumer_group.clone(), SUB)))
                .chain(b.mq_set.iter().map(|mq| Some(on_topic(&mq.topic, SUB))))
                .collect(),
            None => vec![Some(Need::Admin)],
        },
        rc::QUERY_ASSIGNMENT | rc::CHECK_CLIENT_CONFIG => match body::<serde_json::Value>(req) {
            Some(v) => {
                let s = |k: &str| v.get(k).and_then(|x| x.as_str()).filter(|s| !s.is_empty());
                vec![
                    s("topic").map(|t| on_topic(t, SUB)),
                    s("consumerGroup")
                        .or(s("group"))
                        .map(|g| Need::Group(g.to_string(), SUB)),
                ]
            }
            None => vec![Some(Need::Admin)],
        },
        // Everything else changes the broker or reads beyond one user's topics and groups
        // (topic and group administration, offsets of every group, broker configuration and
        // statistics, the replication metadata a slave copies).
        _ => vec![Some(Need::Admin)],
    };
    needs.into_iter().flatten().collect()
}

/// What a request to the name server needs: registering brokers is for the cluster's own
/// brokers; reading a topic's route needs PUB or SUB on it (ACL 2.0); other reads only a
/// signature; changes are admin requests.
pub fn name_server(req: &RemotingCommand) -> Vec<Need> {
    match req.code {
        rc::REGISTER_BROKER | rc::UNREGISTER_BROKER | rc::QUERY_DATA_VERSION | 217 => {
            vec![Need::Cluster]
        }
        rc::GET_ROUTEINFO_BY_TOPIC => match field(req, &["topic"]) {
            Some(t) => vec![on_topic(t, Perm::PUB.or(Perm::SUB))],
            None => vec![],
        },
        rc::GET_BROKER_CLUSTER_INFO
        | rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER
        | rc::GET_TOPICS_BY_CLUSTER
        | rc::GET_KV_CONFIG => vec![],
        _ => vec![Need::Admin],
    }
}

/// What a request to the replication controller needs: what brokers send (registration,
/// heartbeats, in-sync set changes) needs the cluster secret; what mqadmin reads and
/// `electMaster` are admin requests.
pub fn controller(req: &RemotingCommand) -> Vec<Need> {
    match req.code {
        rc::CONTROLLER_GET_METADATA_INFO
        | rc::CONTROLLER_GET_SYNC_STATE_DATA
        | rc::CONTROLLER_GET_REPLICA_INFO
        | rc::CONTROLLER_ELECT_MASTER => vec![Need::Admin],
        _ => vec![Need::Cluster],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_protocol::command::ExtFields;

    fn req(code: i32, fields: &[(&str, &str)]) -> RemotingCommand {
        fields.iter().fold(
            RemotingCommand::request(code, ExtFields::new()),
            |r, (k, v)| r.with_ext(*k, v),
        )
    }

    fn none(_: u64) -> Option<String> {
        None
    }

    #[test]
    fn sends_need_pub_on_the_topic_and_retries_sub_on_the_group() {
        let t = |n: &str, p| Need::Topic(n.into(), p);
        assert_eq!(
            broker(
                &req(rc::SEND_MESSAGE_V2, &[("b", "Orders"), ("a", "pg")]),
                none
            ),
            vec![t("Orders", Perm::PUB)]
        );
        assert_eq!(
            broker(&req(rc::SEND_MESSAGE, &[("topic", "%RETRY%cg")]), none),
            vec![Need::Group("cg".into(), Perm::SUB)]
        );
        assert_eq!(
            broker(
                &req(
                    rc::PULL_MESSAGE,
                    &[("topic", "Orders"), ("consumerGroup", "cg")]
                ),
                none
            ),
            vec![t("Orders", Perm::SUB), Need::Group("cg".into(), Perm::SUB)]
        );
    }

    #[test]
    fn records_named_by_offset_are_checked_as_what_they_are() {
        let real = |_: u64| Some("Payments".to_string());
        assert_eq!(
            broker(
                &req(
                    rc::END_TRANSACTION,
                    &[("commitLogOffset", "42"), ("topic", "Other")]
                ),
                real
            ),
            vec![Need::Topic("Payments".into(), Perm::PUB)]
        );
        assert_eq!(
            broker(&req(rc::VIEW_MESSAGE_BY_ID, &[("offset", "42")]), real),
            vec![Need::Topic("Payments".into(), Perm::SUB)]
        );
    }

    #[test]
    fn heartbeats_need_each_group_and_its_topics() {
        let hb = r#"{"clientID":"c","consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"Orders","subString":"*"},{"topic":"%RETRY%cg","subString":"*"}],"unitMode":false}],"producerDataSet":[{"groupName":"pg"}]}"#;
        let r = req(rc::HEART_BEAT, &[]).with_body(hb.as_bytes().to_vec());
        assert_eq!(
            broker(&r, none),
            vec![
                Need::Group("cg".into(), Perm::SUB),
                Need::Topic("Orders".into(), Perm::SUB)
            ]
        );
        let garbled = req(rc::HEART_BEAT, &[]).with_body(&b"{"[..]);
        assert_eq!(broker(&garbled, none), vec![Need::Admin]);
    }

    #[test]
    fn administration_and_unknown_codes_need_admin_and_registration_the_cluster() {
        for code in [
            rc::UPDATE_AND_CREATE_TOPIC,
            rc::DELETE_TOPIC_IN_BROKER,
            rc::UPDATE_BROKER_CONFIG,
            rc::INVOKE_BROKER_TO_RESET_OFFSET,
            rc::GET_ALL_CONSUMER_OFFSET,
            99_999,
        ] {
            assert_eq!(broker(&req(code, &[]), none), vec![Need::Admin], "{code}");
        }
        assert_eq!(
            name_server(&req(rc::REGISTER_BROKER, &[])),
            vec![Need::Cluster]
        );
        assert_eq!(
            name_server(&req(rc::DELETE_TOPIC_IN_NAMESRV, &[])),
            vec![Need::Admin]
        );
        assert_eq!(name_server(&req(rc::GET_BROKER_CLUSTER_INFO, &[])), vec![]);
        assert_eq!(
            controller(&req(rc::CONTROLLER_REGISTER_BROKER, &[])),
            vec![Need::Cluster]
        );
    }
}
