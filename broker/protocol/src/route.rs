//! JSON bodies exchanged with the name server and the broker's client-management codes
//! (docs/protocol.md §6, §9): routes, cluster info, broker registration, heartbeats,
//! queue locks, consumer lists.
//!
//! Field names match the Java JSON exactly (camelCase, plus oddities such as `clientID` and
//! `lockOKMQSet`), fields are declared in alphabetical order so that [`crate::json::to_vec`]
//! reproduces Java's output byte for byte, unknown fields are ignored, and `null` or missing
//! collections (Go writes `null` for nil slices) decode as empty.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::json::null_as_default;

/// Permission bits of a topic / queue data (`PermName`).
pub mod perm {
    /// Topic is a template that new topics inherit from (TBW102).
    pub const INHERIT: i32 = 0x1;
    /// Writable.
    pub const WRITE: i32 = 0x2;
    /// Readable.
    pub const READ: i32 = 0x4;
    /// Priority.
    pub const PRIORITY: i32 = 0x8;
    /// Normal topic permission (READ | WRITE).
    pub const READ_WRITE: i32 = READ | WRITE;
}

/// Id of the master in [`BrokerData::broker_addrs`].
pub const MASTER_ID: i64 = 0;

/// Extension field naming the sender's zone (RocketMQ's `MixAll.ZONE_NAME`): a broker's on
/// REGISTER_BROKER, a client's on every request when `ROCKETMQ_ZONE` is set.
pub const ZONE_NAME: &str = "__ZONE_NAME";

/// Extension field of GET_ROUTEINFO_BY_TOPIC (`MixAll.ZONE_MODE`, from `ROCKETMQ_ZONE_MODE`):
/// `true` asks for the route of the client's zone only (see [`TopicRouteData::in_zone`]).
pub const ZONE_MODE: &str = "__ZONE_MODE";

/// Body of a GET_ROUTEINFO_BY_TOPIC (105) response (§9.1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TopicRouteData {
    /// Brokers hosting the topic.
    #[serde(rename = "brokerDatas", default, deserialize_with = "null_as_default")]
    pub broker_datas: Vec<BrokerData>,
    /// Filter servers by broker address (always empty).
    #[serde(
        rename = "filterServerTable",
        default,
        deserialize_with = "null_as_default"
    )]
    pub filter_server_table: BTreeMap<String, Vec<String>>,
    /// `brokerName:queueNums;…` when the name server's `orderMessageEnable` is set.
    #[serde(
        rename = "orderTopicConf",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub order_topic_conf: Option<String>,
    /// Queue layout per broker.
    #[serde(rename = "queueDatas", default, deserialize_with = "null_as_default")]
    pub queue_datas: Vec<QueueData>,
    /// Static-topic mappings; keep absent (Java 5.x treats non-empty as a static topic).
    #[serde(
        rename = "topicQueueMappingByBroker",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub topic_queue_mapping_by_broker: Option<Value>,
}

impl TopicRouteData {
    /// The route a client in `zone` asking for its zone only gets (RocketMQ's name-server
    /// zone filter): the groups registered in that zone (zone names compared ignoring case),
    /// and those with no master (their slaves still serve reads), with their queues.
    #[must_use]
    pub fn in_zone(mut self, zone: &str) -> Self {
        let (kept, dropped): (Vec<BrokerData>, Vec<BrokerData>) =
            self.broker_datas.into_iter().partition(|b| {
                b.master_addr().is_none()
                    || b.zone_name
                        .as_deref()
                        .is_some_and(|z| z.eq_ignore_ascii_case(zone))
            });
        self.queue_datas
            .retain(|q| !dropped.iter().any(|b| b.broker_name == q.broker_name));
        for b in &dropped {
            for addr in b.broker_addrs.values() {
                self.filter_server_table.remove(addr);
            }
        }
        self.broker_datas = kept;
        self
    }
}

/// One broker group (master and slaves) (§9.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct BrokerData {
    /// Broker id → `"ip:port"`; id 0 is the master. Keys are written quoted (`"0"`).
    #[serde(rename = "brokerAddrs", default, deserialize_with = "null_as_default")]
    pub broker_addrs: BTreeMap<i64, String>,
    /// Broker name.
    #[serde(rename = "brokerName", default, deserialize_with = "null_as_default")]
    pub broker_name: String,
    /// Cluster name.
    #[serde(default, deserialize_with = "null_as_default")]
    pub cluster: String,
    /// 5.x acting-master mode.
    #[serde(
        rename = "enableActingMaster",
        default,
        deserialize_with = "null_as_default"
    )]
    pub enable_acting_master: bool,
    /// 5.x zone name: where the group runs (Conveyor: its master's zone).
    #[serde(rename = "zoneName", default, skip_serializing_if = "Option::is_none")]
    pub zone_name: Option<String>,
}

impl BrokerData {
    /// The master's address, if registered.
    pub fn master_addr(&self) -> Option<&str> {
        self.broker_addrs.get(&MASTER_ID).map(String::as_str)
    }
}

/// Queue layout of a topic on one broker (§9.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueData {
    /// Broker name.
    #[serde(rename = "brokerName", default, deserialize_with = "null_as_default")]
    pub broker_name: String,
    /// [`perm`] bits.
    #[serde(default)]
    pub perm: i32,
    /// Readable queue count.
    #[serde(rename = "readQueueNums", default)]
    pub read_queue_nums: i32,
    /// TopicSysFlag bits.
    #[serde(rename = "topicSysFlag", default)]
    pub topic_sys_flag: i32,
    /// Writable queue count.
    #[serde(rename = "writeQueueNums", default)]
    pub write_queue_nums: i32,
}

/// Body of a GET_BROKER_CLUSTER_INFO (106) response (§9.4).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Broker name → broker data.
    #[serde(
        rename = "brokerAddrTable",
        default,
        deserialize_with = "null_as_default"
    )]
    pub broker_addr_table: BTreeMap<String, BrokerData>,
    /// Cluster name → broker names.
    #[serde(
        rename = "clusterAddrTable",
        default,
        deserialize_with = "null_as_default"
    )]
    pub cluster_addr_table: BTreeMap<String, Vec<String>>,
}

/// Body of QUERY_TOPIC_CONSUME_BY_WHO (300) responses: the consumer groups of a topic.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GroupList {
    /// Group names.
    #[serde(rename = "groupList", default, deserialize_with = "null_as_default")]
    pub group_list: Vec<String>,
}

/// Body of GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) / GET_TOPICS_BY_CLUSTER (224) responses.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicList {
    /// Broker address (Java leaves it null).
    #[serde(
        rename = "brokerAddr",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub broker_addr: Option<String>,
    /// Topic names.
    #[serde(rename = "topicList", default, deserialize_with = "null_as_default")]
    pub topic_list: Vec<String>,
}

/// Version stamp of a broker's topic table (`DataVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DataVersion {
    /// Incremented on every change.
    #[serde(default)]
    pub counter: i64,
    /// State version (5.x).
    #[serde(rename = "stateVersion", default)]
    pub state_version: i64,
    /// Time of the last change (ms).
    #[serde(default)]
    pub timestamp: i64,
}

/// Topic filter type (`TopicFilterType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TopicFilterType {
    /// One tag per message (the default).
    #[default]
    #[serde(rename = "SINGLE_TAG")]
    SingleTag,
    /// Several tags per message.
    #[serde(rename = "MULTI_TAG")]
    MultiTag,
}

/// A topic's configuration as carried in broker registrations (§9.2) and admin bodies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Topic attributes (5.x), e.g. `message.type` → `FIFO`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub attributes: BTreeMap<String, String>,
    /// Ordered topic.
    #[serde(default, deserialize_with = "null_as_default")]
    pub order: bool,
    /// [`perm`] bits.
    #[serde(default)]
    pub perm: i32,
    /// Readable queue count.
    #[serde(rename = "readQueueNums", default)]
    pub read_queue_nums: i32,
    /// Filter type.
    #[serde(
        rename = "topicFilterType",
        default,
        deserialize_with = "null_as_default"
    )]
    pub topic_filter_type: TopicFilterType,
    /// Topic name.
    #[serde(rename = "topicName", default, deserialize_with = "null_as_default")]
    pub topic_name: String,
    /// TopicSysFlag bits.
    #[serde(rename = "topicSysFlag", default)]
    pub topic_sys_flag: i32,
    /// Writable queue count.
    #[serde(rename = "writeQueueNums", default)]
    pub write_queue_nums: i32,
}

/// A broker's topic table with its version (`TopicConfigSerializeWrapper`, and the 5.x
/// `TopicConfigAndMappingSerializeWrapper` whose mapping parts are kept opaque).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TopicConfigSerializeWrapper {
    /// Version of the table.
    #[serde(rename = "dataVersion", default, deserialize_with = "null_as_default")]
    pub data_version: DataVersion,
    /// 5.x static-topic mapping version (opaque).
    #[serde(
        rename = "mappingDataVersion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub mapping_data_version: Option<Value>,
    /// Topic name → config.
    #[serde(
        rename = "topicConfigTable",
        default,
        deserialize_with = "null_as_default"
    )]
    pub topic_config_table: BTreeMap<String, TopicConfig>,
    /// 5.x static-topic mapping details (opaque).
    #[serde(
        rename = "topicQueueMappingDetailMap",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub topic_queue_mapping_detail_map: Option<Value>,
    /// 5.x static-topic mapping info (opaque).
    #[serde(
        rename = "topicQueueMappingInfoMap",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub topic_queue_mapping_info_map: Option<Value>,
}

/// Body of a REGISTER_BROKER (103) request, uncompressed JSON form (§9.2).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RegisterBrokerBody {
    /// Filter server addresses (always empty).
    #[serde(
        rename = "filterServerList",
        default,
        deserialize_with = "null_as_default"
    )]
    pub filter_server_list: Vec<String>,
    /// The broker's topics.
    #[serde(
        rename = "topicConfigSerializeWrapper",
        default,
        deserialize_with = "null_as_default"
    )]
    pub topic_config_serialize_wrapper: TopicConfigSerializeWrapper,
}

/// A `{"table":{…}}` KV body: REGISTER_BROKER response (order-topic config) and KV config.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KvTable {
    /// Key → value.
    #[serde(default, deserialize_with = "null_as_default")]
    pub table: BTreeMap<String, String>,
}

/// Body of a HEART_BEAT (34) request (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct HeartbeatData {
    /// Client id, e.g. `192.168.0.7@12345#98765432100`. Note the capital `ID`.
    #[serde(rename = "clientID", default, deserialize_with = "null_as_default")]
    pub client_id: String,
    /// Consumer groups of the client.
    #[serde(
        rename = "consumerDataSet",
        default,
        deserialize_with = "null_as_default"
    )]
    pub consumer_data_set: Vec<ConsumerData>,
    /// Heartbeat v2 fingerprint (Java 5.x).
    #[serde(
        rename = "heartbeatFingerprint",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub heartbeat_fingerprint: Option<i64>,
    /// Producer groups of the client.
    #[serde(
        rename = "producerDataSet",
        default,
        deserialize_with = "null_as_default"
    )]
    pub producer_data_set: Vec<ProducerData>,
    /// Heartbeat v2: subscriptions omitted (Java 5.x).
    #[serde(
        rename = "withoutSub",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub without_sub: Option<bool>,
}

/// A producer group in a heartbeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct ProducerData {
    /// Producer group.
    #[serde(rename = "groupName", default, deserialize_with = "null_as_default")]
    pub group_name: String,
}

/// How a consumer consumes (`ConsumeType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ConsumeType {
    /// Pull consumer.
    #[serde(rename = "CONSUME_ACTIVELY")]
    Actively,
    /// Push consumer.
    #[default]
    #[serde(rename = "CONSUME_PASSIVELY")]
    Passively,
    /// 5.x POP consumer.
    #[serde(rename = "CONSUME_POP")]
    Pop,
    /// A value this crate does not know.
    #[serde(other)]
    Unknown,
}

/// Clustering or broadcasting (`MessageModel`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum MessageModel {
    /// Each message to one member of the group.
    #[default]
    #[serde(rename = "CLUSTERING")]
    Clustering,
    /// Each message to every member.
    #[serde(rename = "BROADCASTING")]
    Broadcasting,
    /// A value this crate does not know.
    #[serde(other)]
    Unknown,
}

/// Where a new consumer group starts (`ConsumeFromWhere`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum ConsumeFromWhere {
    /// From the end of the queue.
    #[default]
    #[serde(rename = "CONSUME_FROM_LAST_OFFSET")]
    LastOffset,
    /// From the beginning.
    #[serde(rename = "CONSUME_FROM_FIRST_OFFSET")]
    FirstOffset,
    /// From a timestamp.
    #[serde(rename = "CONSUME_FROM_TIMESTAMP")]
    Timestamp,
    /// Deprecated.
    #[serde(rename = "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST")]
    LastOffsetAndFromMinWhenBootFirst,
    /// Deprecated.
    #[serde(rename = "CONSUME_FROM_MIN_OFFSET")]
    MinOffset,
    /// Deprecated.
    #[serde(rename = "CONSUME_FROM_MAX_OFFSET")]
    MaxOffset,
    /// A value this crate does not know.
    #[serde(other)]
    Unknown,
}

/// A consumer group in a heartbeat (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConsumerData {
    /// Start position for new groups.
    #[serde(
        rename = "consumeFromWhere",
        default,
        deserialize_with = "null_as_default"
    )]
    pub consume_from_where: ConsumeFromWhere,
    /// Push / pull / pop.
    #[serde(rename = "consumeType", default, deserialize_with = "null_as_default")]
    pub consume_type: ConsumeType,
    /// Consumer group.
    #[serde(rename = "groupName", default, deserialize_with = "null_as_default")]
    pub group_name: String,
    /// Clustering / broadcasting.
    #[serde(rename = "messageModel", default, deserialize_with = "null_as_default")]
    pub message_model: MessageModel,
    /// Subscriptions (including `%RETRY%<group>` in clustering mode).
    #[serde(
        rename = "subscriptionDataSet",
        default,
        deserialize_with = "null_as_default"
    )]
    pub subscription_data_set: Vec<SubscriptionData>,
    /// Unit mode.
    #[serde(rename = "unitMode", default, deserialize_with = "null_as_default")]
    pub unit_mode: bool,
}

/// Expression type of a subscription: tags.
pub const EXPRESSION_TYPE_TAG: &str = "TAG";
/// Expression type of a subscription: SQL92.
pub const EXPRESSION_TYPE_SQL92: &str = "SQL92";

fn default_expression_type() -> String {
    EXPRESSION_TYPE_TAG.to_string()
}

/// One topic subscription (§6.1).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubscriptionData {
    /// Legacy class filter.
    #[serde(
        rename = "classFilterMode",
        default,
        deserialize_with = "null_as_default"
    )]
    pub class_filter_mode: bool,
    /// Java `String.hashCode` of each tag (numbers from Java, numeric strings from Go).
    #[serde(
        rename = "codeSet",
        default,
        deserialize_with = "crate::json::ints_or_numeric_strings"
    )]
    pub code_set: Vec<i32>,
    /// `"TAG"` or `"SQL92"`; `"TAG"` when missing.
    #[serde(rename = "expressionType", default = "default_expression_type")]
    pub expression_type: String,
    /// The expression: `*`/empty = all, else `TagA || TagB`, or SQL.
    #[serde(rename = "subString", default, deserialize_with = "null_as_default")]
    pub sub_string: String,
    /// Subscription version (a timestamp in Java, 0 in Go).
    #[serde(rename = "subVersion", default, deserialize_with = "null_as_default")]
    pub sub_version: i64,
    /// Tags of a TAG expression.
    #[serde(rename = "tagsSet", default, deserialize_with = "null_as_default")]
    pub tags_set: Vec<String>,
    /// Topic.
    #[serde(default, deserialize_with = "null_as_default")]
    pub topic: String,
}

/// A message queue (`MessageQueue`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
pub struct MessageQueue {
    /// Broker name.
    #[serde(rename = "brokerName", default, deserialize_with = "null_as_default")]
    pub broker_name: String,
    /// Queue id.
    #[serde(rename = "queueId", default)]
    pub queue_id: i32,
    /// Topic.
    #[serde(default, deserialize_with = "null_as_default")]
    pub topic: String,
}

/// Body of LOCK_BATCH_MQ (41) and UNLOCK_BATCH_MQ (42) requests (§6.6).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockBatchRequestBody {
    /// Requesting client id.
    #[serde(rename = "clientId", default, deserialize_with = "null_as_default")]
    pub client_id: String,
    /// Consumer group.
    #[serde(
        rename = "consumerGroup",
        default,
        deserialize_with = "null_as_default"
    )]
    pub consumer_group: String,
    /// Queues to lock / unlock.
    #[serde(rename = "mqSet", default, deserialize_with = "null_as_default")]
    pub mq_set: Vec<MessageQueue>,
    /// Only lock on this broker (Go omits it).
    #[serde(
        rename = "onlyThisBroker",
        default,
        deserialize_with = "null_as_default"
    )]
    pub only_this_broker: bool,
}

/// Body of UNLOCK_BATCH_MQ (42): same shape as the lock request.
pub type UnlockBatchRequestBody = LockBatchRequestBody;

/// Body of a LOCK_BATCH_MQ (41) response (§6.6).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LockBatchResponseBody {
    /// Queues now owned by the requesting client.
    #[serde(rename = "lockOKMQSet", default, deserialize_with = "null_as_default")]
    pub lock_ok_mq_set: Vec<MessageQueue>,
}

/// Body of a GET_CONSUMER_LIST_BY_GROUP (38) response (§6.3).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ConsumerListBody {
    /// Client ids of the group's live members.
    #[serde(
        rename = "consumerIdList",
        default,
        deserialize_with = "null_as_default"
    )]
    pub consumer_id_list: Vec<String>,
}

/// Body of a CHECK_CLIENT_CONFIG (46) request (§6.9).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CheckClientRequestBody {
    /// Client id.
    #[serde(rename = "clientId", default, deserialize_with = "null_as_default")]
    pub client_id: String,
    /// Consumer group.
    #[serde(default, deserialize_with = "null_as_default")]
    pub group: String,
    /// Namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The subscription to check.
    #[serde(
        rename = "subscriptionData",
        default,
        deserialize_with = "null_as_default"
    )]
    pub subscription_data: SubscriptionData,
}

/// A zone name as configured or as sent in `__ZONE_NAME`: trimmed; empty means none. The one
/// rule for brokers, name servers and consumers.
pub fn normalize_zone(zone: &str) -> Option<String> {
    let zone = zone.trim();
    (!zone.is_empty()).then(|| zone.to_string())
}

#[cfg(test)]
mod tests;
