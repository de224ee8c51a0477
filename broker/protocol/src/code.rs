//! Numeric vocabularies of the remoting header (docs/protocol.md §2.1, §3): request and
//! response codes, the sender's language and the `version` ordinal.
//!
//! They are plain `i32` constants rather than enums because codes travel as open-ended
//! integers: a broker must be able to receive a code it does not know and answer
//! `REQUEST_CODE_NOT_SUPPORTED`, and clients answer with codes we never produce.

/// Request codes (`RemotingCommand.code` of a request), §3.1.
pub mod request_code {
    /// Send one message, long header keys (Go single sends).
    pub const SEND_MESSAGE: i32 = 10;
    /// Pull messages from a queue.
    pub const PULL_MESSAGE: i32 = 11;
    /// Query messages by key.
    pub const QUERY_MESSAGE: i32 = 12;
    /// Read a consumer group's committed offset.
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    /// Commit a consumer group's offset.
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    /// Admin: create or update a topic on a broker.
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    /// Admin → broker: every topic config of the broker.
    pub const GET_ALL_TOPIC_CONFIG: i32 = 21;
    /// Admin → broker: change settings at run time (body: `key=value` lines).
    pub const UPDATE_BROKER_CONFIG: i32 = 25;
    /// Admin → broker: the broker's settings as `key=value` lines.
    pub const GET_BROKER_CONFIG: i32 = 26;
    /// Admin → broker: runtime statistics (`brokerStatus`).
    pub const GET_BROKER_RUNTIME_INFO: i32 = 28;
    /// Find the queue offset of a timestamp.
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    /// Next offset to be written in a queue.
    pub const GET_MAX_OFFSET: i32 = 30;
    /// Smallest offset still available in a queue.
    pub const GET_MIN_OFFSET: i32 = 31;
    /// Store time of the earliest message of a queue.
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    /// Read one record by commit-log offset.
    pub const VIEW_MESSAGE_BY_ID: i32 = 33;
    /// Client heartbeat (producer/consumer registration).
    pub const HEART_BEAT: i32 = 34;
    /// Client shutdown (Java only).
    pub const UNREGISTER_CLIENT: i32 = 35;
    /// Consumer hands a failed message back for retry.
    pub const CONSUMER_SEND_MSG_BACK: i32 = 36;
    /// Commit / roll back a transactional half message.
    pub const END_TRANSACTION: i32 = 37;
    /// Client ids of a consumer group.
    pub const GET_CONSUMER_LIST_BY_GROUP: i32 = 38;
    /// Slave → master: every committed consumer offset (SlaveSynchronize).
    pub const GET_ALL_CONSUMER_OFFSET: i32 = 43;
    /// Slave → master: the delay-level delivery progress (SlaveSynchronize).
    pub const GET_ALL_DELAY_OFFSET: i32 = 45;
    /// Slave → master: the timer progress (SlaveSynchronize; Conveyor answers with its own
    /// JSON body, not RocketMQ's binary TimerCheckpoint).
    pub const GET_TIMER_CHECK_POINT: i32 = 60;
    /// Broker → client, oneway: ask for a transaction's state.
    pub const CHECK_TRANSACTION_STATE: i32 = 39;
    /// Broker → client, oneway: group membership changed, rebalance.
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    /// Lock queues for orderly consumption.
    pub const LOCK_BATCH_MQ: i32 = 41;
    /// Unlock queues.
    pub const UNLOCK_BATCH_MQ: i32 = 42;
    /// Java consumer check for SQL92 subscriptions.
    pub const CHECK_CLIENT_CONFIG: i32 = 46;
    /// Admin → name server: store a KV config entry.
    pub const PUT_KV_CONFIG: i32 = 100;
    /// Admin → name server: read a KV config entry.
    pub const GET_KV_CONFIG: i32 = 101;
    /// Admin → name server: delete a KV config entry.
    pub const DELETE_KV_CONFIG: i32 = 102;
    /// Broker → name server registration.
    pub const REGISTER_BROKER: i32 = 103;
    /// Broker → name server, clean shutdown.
    pub const UNREGISTER_BROKER: i32 = 104;
    /// Client → name server: route of a topic.
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    /// Client/admin → name server: clusters and brokers.
    pub const GET_BROKER_CLUSTER_INFO: i32 = 106;
    /// Admin → broker: create or update a subscription group.
    pub const UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: i32 = 200;
    /// Admin → broker: every subscription group.
    pub const GET_ALL_SUBSCRIPTIONGROUP_CONFIG: i32 = 201;
    /// Admin → broker: min/max offsets of a topic's queues.
    pub const GET_TOPIC_STATS_INFO: i32 = 202;
    /// Admin → broker: live connections of a consumer group.
    pub const GET_CONSUMER_CONNECTION_LIST: i32 = 203;
    /// Admin → name server: take the write permission off a broker's topics
    /// (`mqadmin wipeWritePerm`).
    pub const WIPE_WRITE_PERM_OF_BROKER: i32 = 205;
    /// Admin → name server: every topic.
    pub const GET_ALL_TOPIC_LIST_FROM_NAMESERVER: i32 = 206;
    /// Admin → broker: delete a subscription group.
    pub const DELETE_SUBSCRIPTIONGROUP: i32 = 207;
    /// Admin → broker: a group's consume progress per queue.
    pub const GET_CONSUME_STATS: i32 = 208;
    /// Admin → broker: delete a topic.
    pub const DELETE_TOPIC_IN_BROKER: i32 = 215;
    /// Admin → name server: delete a topic.
    pub const DELETE_TOPIC_IN_NAMESRV: i32 = 216;
    /// Broker → client: reset consumer offsets.
    pub const RESET_CONSUMER_CLIENT_OFFSET: i32 = 220;
    /// Broker → client: consumer status.
    pub const GET_CONSUMER_STATUS_FROM_CLIENT: i32 = 221;
    /// Admin → broker: move a group's offsets on a topic to a time (mqadmin
    /// `resetOffsetByTime`, `skipAccumulatedMessage`).
    pub const INVOKE_BROKER_TO_RESET_OFFSET: i32 = 222;
    /// Admin → name server: topics of a cluster.
    pub const GET_TOPICS_BY_CLUSTER: i32 = 224;
    /// Admin → broker: groups consuming a topic.
    pub const QUERY_TOPIC_CONSUME_BY_WHO: i32 = 300;
    /// Broker → client: consumer running info.
    pub const GET_CONSUMER_RUNNING_INFO: i32 = 307;
    /// Broker → client: consume one message directly.
    pub const CONSUME_MESSAGE_DIRECTLY: i32 = 309;
    /// Send one message, short header keys `a`–`n` (Java single sends).
    pub const SEND_MESSAGE_V2: i32 = 310;
    /// Send a batch (body per §5.2, short header keys).
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// Broker → name server: compare data versions.
    pub const QUERY_DATA_VERSION: i32 = 322;
    /// Request-reply: send a reply, long keys.
    pub const SEND_REPLY_MESSAGE: i32 = 324;
    /// Request-reply: send a reply, short keys.
    pub const SEND_REPLY_MESSAGE_V2: i32 = 325;
    /// Broker → client: deliver a reply.
    pub const PUSH_REPLY_MESSAGE_TO_CLIENT: i32 = 326;
    /// Admin → name server: give a broker's topics their write permission back
    /// (`mqadmin addWritePerm`).
    pub const ADD_WRITE_PERM_OF_BROKER: i32 = 327;
    /// Admin → broker: topics a group consumes.
    pub const QUERY_TOPICS_BY_CONSUMER: i32 = 343;
    /// Admin → broker: one topic's config.
    pub const GET_TOPIC_CONFIG: i32 = 351;
    /// Admin → broker: one subscription group's config.
    pub const GET_SUBSCRIPTIONGROUP_CONFIG: i32 = 352;
    /// Java lite-pull consumer (same headers as PULL_MESSAGE).
    pub const LITE_PULL_MESSAGE: i32 = 361;
    /// 5.x producer: recall a delayed message.
    pub const RECALL_MESSAGE: i32 = 370;
    /// 5.x server-side rebalance.
    pub const QUERY_ASSIGNMENT: i32 = 400;
    /// 5.x: set a group's consume mode on a topic (PULL or POP; mqadmin setConsumeMode).
    pub const SET_MESSAGE_REQUEST_MODE: i32 = 401;
    /// Broker → controller (and name server) heartbeat: alive, with its epoch and log end.
    pub const BROKER_HEARTBEAT: i32 = 904;
    /// 5.x POP consumer: pop messages.
    pub const POP_MESSAGE: i32 = 200_050;
    /// 5.x POP consumer: acknowledge.
    pub const ACK_MESSAGE: i32 = 200_051;
    /// 5.x POP consumer: peek.
    pub const PEEK_MESSAGE: i32 = 200_052;
    /// 5.x POP consumer: change invisible time.
    pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200_053;
    /// 5.x POP consumer: notification.
    pub const NOTIFICATION: i32 = 200_054;
    /// 5.x POP consumer: polling info.
    pub const POLLING_INFO: i32 = 200_055;
    /// 5.x POP consumer: roll back a pop.
    pub const POP_ROLLBACK: i32 = 200_056;
    /// 5.x POP consumer: batch acknowledge.
    pub const BATCH_ACK_MESSAGE: i32 = 200_151;
    /// Master → controller: change the in-sync set (compare-and-set on its epoch).
    pub const CONTROLLER_ALTER_SYNC_STATE_SET: i32 = 1001;
    /// Admin → controller: elect a master (a switchover to a designated replica).
    pub const CONTROLLER_ELECT_MASTER: i32 = 1002;
    /// Broker → controller: register a replica.
    pub const CONTROLLER_REGISTER_BROKER: i32 = 1003;
    /// Broker/admin → controller: the master, epoch and in-sync set of a group.
    pub const CONTROLLER_GET_REPLICA_INFO: i32 = 1004;

    /// Admin → broker: a producer group's live connections (`producerConnection`).
    pub const GET_PRODUCER_CONNECTION_LIST: i32 = 204;
    /// Admin → broker: delete ConsumeQueue files whose records are gone (`cleanExpiredCQ`).
    pub const CLEAN_EXPIRED_CONSUMEQUEUE: i32 = 306;
    /// Admin → broker: copy a group's offsets to another group (`cloneGroupOffset`).
    pub const CLONE_GROUP_OFFSET: i32 = 314;
    /// Admin → broker: delete queues of topics no longer configured (`cleanUnusedTopic`).
    pub const CLEAN_UNUSED_TOPIC: i32 = 316;
    /// Admin → broker: every group's progress on the broker (`brokerConsumeStats`).
    pub const GET_BROKER_CONSUME_STATS: i32 = 317;
    /// Admin → name server: change settings at run time (body: `key=value` lines).
    pub const UPDATE_NAMESRV_CONFIG: i32 = 318;
    /// Admin → name server: its settings as `key=value` lines.
    pub const GET_NAMESRV_CONFIG: i32 = 319;
    /// Admin → broker: entries of one ConsumeQueue (`queryCq`).
    pub const QUERY_CONSUME_QUEUE: i32 = 321;
    /// Admin → broker: replication state (`haStatus`).
    pub const GET_BROKER_HA_STATUS: i32 = 907;
    /// Admin → broker: the epochs of its log (`getBrokerEpoch`).
    pub const GET_BROKER_EPOCH_CACHE: i32 = 1007;
    /// Admin → controller: which controller leads (`getControllerMetaData`).
    pub const CONTROLLER_GET_METADATA_INFO: i32 = 1005;
    /// Admin → controller: in-sync sets of broker groups (`getSyncStateSet`).
    pub const CONTROLLER_GET_SYNC_STATE_DATA: i32 = 1006;

    /// The constant name of a request code, for logs and remarks.
    pub fn name(code: i32) -> Option<&'static str> {
        Some(match code {
            SEND_MESSAGE => "SEND_MESSAGE",
            PULL_MESSAGE => "PULL_MESSAGE",
            QUERY_MESSAGE => "QUERY_MESSAGE",
            QUERY_CONSUMER_OFFSET => "QUERY_CONSUMER_OFFSET",
            UPDATE_CONSUMER_OFFSET => "UPDATE_CONSUMER_OFFSET",
            UPDATE_AND_CREATE_TOPIC => "UPDATE_AND_CREATE_TOPIC",
            GET_ALL_TOPIC_CONFIG => "GET_ALL_TOPIC_CONFIG",
            UPDATE_BROKER_CONFIG => "UPDATE_BROKER_CONFIG",
            GET_BROKER_CONFIG => "GET_BROKER_CONFIG",
            GET_BROKER_RUNTIME_INFO => "GET_BROKER_RUNTIME_INFO",
            SEARCH_OFFSET_BY_TIMESTAMP => "SEARCH_OFFSET_BY_TIMESTAMP",
            GET_MAX_OFFSET => "GET_MAX_OFFSET",
            GET_MIN_OFFSET => "GET_MIN_OFFSET",
            GET_EARLIEST_MSG_STORETIME => "GET_EARLIEST_MSG_STORETIME",
            VIEW_MESSAGE_BY_ID => "VIEW_MESSAGE_BY_ID",
            HEART_BEAT => "HEART_BEAT",
            UNREGISTER_CLIENT => "UNREGISTER_CLIENT",
            CONSUMER_SEND_MSG_BACK => "CONSUMER_SEND_MSG_BACK",
            END_TRANSACTION => "END_TRANSACTION",
            GET_CONSUMER_LIST_BY_GROUP => "GET_CONSUMER_LIST_BY_GROUP",
            CONTROLLER_ALTER_SYNC_STATE_SET => "CONTROLLER_ALTER_SYNC_STATE_SET",
            CONTROLLER_ELECT_MASTER => "CONTROLLER_ELECT_MASTER",
            CONTROLLER_REGISTER_BROKER => "CONTROLLER_REGISTER_BROKER",
            CONTROLLER_GET_REPLICA_INFO => "CONTROLLER_GET_REPLICA_INFO",
            GET_PRODUCER_CONNECTION_LIST => "GET_PRODUCER_CONNECTION_LIST",
            CLEAN_EXPIRED_CONSUMEQUEUE => "CLEAN_EXPIRED_CONSUMEQUEUE",
            CLONE_GROUP_OFFSET => "CLONE_GROUP_OFFSET",
            CLEAN_UNUSED_TOPIC => "CLEAN_UNUSED_TOPIC",
            GET_BROKER_CONSUME_STATS => "GET_BROKER_CONSUME_STATS",
            UPDATE_NAMESRV_CONFIG => "UPDATE_NAMESRV_CONFIG",
            GET_NAMESRV_CONFIG => "GET_NAMESRV_CONFIG",
            QUERY_CONSUME_QUEUE => "QUERY_CONSUME_QUEUE",
            GET_BROKER_HA_STATUS => "GET_BROKER_HA_STATUS",
            GET_BROKER_EPOCH_CACHE => "GET_BROKER_EPOCH_CACHE",
            CONTROLLER_GET_METADATA_INFO => "CONTROLLER_GET_METADATA_INFO",
            CONTROLLER_GET_SYNC_STATE_DATA => "CONTROLLER_GET_SYNC_STATE_DATA",
            GET_ALL_CONSUMER_OFFSET => "GET_ALL_CONSUMER_OFFSET",
            GET_ALL_DELAY_OFFSET => "GET_ALL_DELAY_OFFSET",
            GET_TIMER_CHECK_POINT => "GET_TIMER_CHECK_POINT",
            CHECK_TRANSACTION_STATE => "CHECK_TRANSACTION_STATE",
            NOTIFY_CONSUMER_IDS_CHANGED => "NOTIFY_CONSUMER_IDS_CHANGED",
            LOCK_BATCH_MQ => "LOCK_BATCH_MQ",
            UNLOCK_BATCH_MQ => "UNLOCK_BATCH_MQ",
            CHECK_CLIENT_CONFIG => "CHECK_CLIENT_CONFIG",
            PUT_KV_CONFIG => "PUT_KV_CONFIG",
            GET_KV_CONFIG => "GET_KV_CONFIG",
            DELETE_KV_CONFIG => "DELETE_KV_CONFIG",
            REGISTER_BROKER => "REGISTER_BROKER",
            UNREGISTER_BROKER => "UNREGISTER_BROKER",
            GET_ROUTEINFO_BY_TOPIC => "GET_ROUTEINFO_BY_TOPIC",
            GET_BROKER_CLUSTER_INFO => "GET_BROKER_CLUSTER_INFO",
            UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => "UPDATE_AND_CREATE_SUBSCRIPTIONGROUP",
            GET_ALL_SUBSCRIPTIONGROUP_CONFIG => "GET_ALL_SUBSCRIPTIONGROUP_CONFIG",
            GET_TOPIC_STATS_INFO => "GET_TOPIC_STATS_INFO",
            GET_CONSUMER_CONNECTION_LIST => "GET_CONSUMER_CONNECTION_LIST",
            WIPE_WRITE_PERM_OF_BROKER => "WIPE_WRITE_PERM_OF_BROKER",
            ADD_WRITE_PERM_OF_BROKER => "ADD_WRITE_PERM_OF_BROKER",
            GET_ALL_TOPIC_LIST_FROM_NAMESERVER => "GET_ALL_TOPIC_LIST_FROM_NAMESERVER",
            DELETE_SUBSCRIPTIONGROUP => "DELETE_SUBSCRIPTIONGROUP",
            GET_CONSUME_STATS => "GET_CONSUME_STATS",
            DELETE_TOPIC_IN_BROKER => "DELETE_TOPIC_IN_BROKER",
            DELETE_TOPIC_IN_NAMESRV => "DELETE_TOPIC_IN_NAMESRV",
            RESET_CONSUMER_CLIENT_OFFSET => "RESET_CONSUMER_CLIENT_OFFSET",
            INVOKE_BROKER_TO_RESET_OFFSET => "INVOKE_BROKER_TO_RESET_OFFSET",
            GET_CONSUMER_STATUS_FROM_CLIENT => "GET_CONSUMER_STATUS_FROM_CLIENT",
            GET_TOPICS_BY_CLUSTER => "GET_TOPICS_BY_CLUSTER",
            QUERY_TOPIC_CONSUME_BY_WHO => "QUERY_TOPIC_CONSUME_BY_WHO",
            GET_CONSUMER_RUNNING_INFO => "GET_CONSUMER_RUNNING_INFO",
            CONSUME_MESSAGE_DIRECTLY => "CONSUME_MESSAGE_DIRECTLY",
            SEND_MESSAGE_V2 => "SEND_MESSAGE_V2",
            SEND_BATCH_MESSAGE => "SEND_BATCH_MESSAGE",
            QUERY_DATA_VERSION => "QUERY_DATA_VERSION",
            SEND_REPLY_MESSAGE => "SEND_REPLY_MESSAGE",
            SEND_REPLY_MESSAGE_V2 => "SEND_REPLY_MESSAGE_V2",
            PUSH_REPLY_MESSAGE_TO_CLIENT => "PUSH_REPLY_MESSAGE_TO_CLIENT",
            QUERY_TOPICS_BY_CONSUMER => "QUERY_TOPICS_BY_CONSUMER",
            GET_TOPIC_CONFIG => "GET_TOPIC_CONFIG",
            GET_SUBSCRIPTIONGROUP_CONFIG => "GET_SUBSCRIPTIONGROUP_CONFIG",
            LITE_PULL_MESSAGE => "LITE_PULL_MESSAGE",
            RECALL_MESSAGE => "RECALL_MESSAGE",
            QUERY_ASSIGNMENT => "QUERY_ASSIGNMENT",
            SET_MESSAGE_REQUEST_MODE => "SET_MESSAGE_REQUEST_MODE",
            BROKER_HEARTBEAT => "BROKER_HEARTBEAT",
            POP_MESSAGE => "POP_MESSAGE",
            ACK_MESSAGE => "ACK_MESSAGE",
            PEEK_MESSAGE => "PEEK_MESSAGE",
            CHANGE_MESSAGE_INVISIBLETIME => "CHANGE_MESSAGE_INVISIBLETIME",
            NOTIFICATION => "NOTIFICATION",
            POLLING_INFO => "POLLING_INFO",
            POP_ROLLBACK => "POP_ROLLBACK",
            BATCH_ACK_MESSAGE => "BATCH_ACK_MESSAGE",
            _ => return None,
        })
    }
}

/// Response codes (`RemotingCommand.code` of a response), §3.2.
pub mod response_code {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// Generic failure; the remark says why.
    pub const SYSTEM_ERROR: i32 = 1;
    /// Overloaded; Java producers retry.
    pub const SYSTEM_BUSY: i32 = 2;
    /// Unknown request code.
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    /// Transaction failed.
    pub const TRANSACTION_FAILED: i32 = 4;
    /// Stored, but the flush timed out (still "sent").
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    /// Stored, but no slave is available (still "sent").
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    /// Stored, but the slave flush timed out (still "sent").
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    /// Message rejected as illegal (size, properties…).
    pub const MESSAGE_ILLEGAL: i32 = 13;
    /// Service not available.
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    /// Version not supported.
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    /// Permission denied.
    pub const NO_PERMISSION: i32 = 16;
    /// Topic does not exist.
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// Topic already exists.
    pub const TOPIC_EXIST_ALREADY: i32 = 18;
    /// Pull: nothing new at the requested offset.
    pub const PULL_NOT_FOUND: i32 = 19;
    /// Pull: nothing matched, continue immediately.
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// Pull: offset invalid, use `nextBeginOffset`.
    pub const PULL_OFFSET_MOVED: i32 = 21;
    /// Query: nothing found (also "no committed offset").
    pub const QUERY_NOT_FOUND: i32 = 22;
    /// Subscription expression could not be parsed.
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    /// No subscription registered for the group/topic.
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    /// Registered subscription is older than the request's.
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    /// Subscription group does not exist.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// Filter data does not exist.
    pub const FILTER_DATA_NOT_EXIST: i32 = 27;
    /// Filter data is not the latest.
    pub const FILTER_DATA_NOT_LATEST: i32 = 28;
    /// Invalid request parameter.
    pub const INVALID_PARAMETER: i32 = 29;
    /// Transaction check answer: commit.
    pub const TRANSACTION_SHOULD_COMMIT: i32 = 200;
    /// Transaction check answer: roll back.
    pub const TRANSACTION_SHOULD_ROLLBACK: i32 = 201;
    /// Transaction check answer: unknown (spelling as in RocketMQ).
    pub const TRANSACTION_STATE_UNKNOW: i32 = 202;
    /// Transaction state group wrong.
    pub const TRANSACTION_STATE_GROUP_WRONG: i32 = 203;
    /// No buyer id (unit mode).
    pub const NO_BUYER_ID: i32 = 204;
    /// Not in current unit (unit mode).
    pub const NOT_IN_CURRENT_UNIT: i32 = 205;
    /// Consumer not online.
    pub const CONSUMER_NOT_ONLINE: i32 = 206;
    /// Consume timed out.
    pub const CONSUME_MSG_TIMEOUT: i32 = 207;
    /// No message.
    pub const NO_MESSAGE: i32 = 208;
    /// POP polling queue full.
    pub const POLLING_FULL: i32 = 209;
    /// POP polling timed out.
    pub const POLLING_TIMEOUT: i32 = 210;
    /// Broker does not exist.
    pub const BROKER_NOT_EXIST: i32 = 211;
    /// Broker dispatch not complete.
    pub const BROKER_DISPATCH_NOT_COMPLETE: i32 = 212;
    /// Broadcast consumption.
    pub const BROADCAST_CONSUMPTION: i32 = 213;
    /// Flow control (pull: client retries after 20 ms).
    pub const FLOW_CONTROL: i32 = 215;
    /// Not leader for queue.
    pub const NOT_LEADER_FOR_QUEUE: i32 = 501;
    /// Illegal operation.
    pub const ILLEGAL_OPERATION: i32 = 604;
    /// Server going away; clients reconnect elsewhere.
    pub const GO_AWAY: i32 = 1500;
    /// Controller: the request's master epoch is not the current one.
    pub const CONTROLLER_FENCED_MASTER_EPOCH: i32 = 2000;
    /// Controller: the request's in-sync set epoch is stale.
    pub const CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH: i32 = 2001;
    /// Controller: the requester is not the master.
    pub const CONTROLLER_INVALID_MASTER: i32 = 2002;
    /// Controller: no replica can become master.
    pub const CONTROLLER_MASTER_NOT_AVAILABLE: i32 = 2004;
    /// Controller: the group or broker is unknown.
    pub const CONTROLLER_BROKER_METADATA_NOT_EXIST: i32 = 2008;
    /// Controller: a designated election of the master that is alive.
    pub const CONTROLLER_MASTER_STILL_EXIST: i32 = 2011;
    /// Controller: the in-sync set change was refused.
    pub const CONTROLLER_ALTER_SYNC_STATE_SET_FAILED: i32 = 2013;

    /// The constant name of a response code, for logs.
    pub fn name(code: i32) -> Option<&'static str> {
        Some(match code {
            SUCCESS => "SUCCESS",
            SYSTEM_ERROR => "SYSTEM_ERROR",
            SYSTEM_BUSY => "SYSTEM_BUSY",
            REQUEST_CODE_NOT_SUPPORTED => "REQUEST_CODE_NOT_SUPPORTED",
            TRANSACTION_FAILED => "TRANSACTION_FAILED",
            FLUSH_DISK_TIMEOUT => "FLUSH_DISK_TIMEOUT",
            SLAVE_NOT_AVAILABLE => "SLAVE_NOT_AVAILABLE",
            FLUSH_SLAVE_TIMEOUT => "FLUSH_SLAVE_TIMEOUT",
            CONTROLLER_FENCED_MASTER_EPOCH => "CONTROLLER_FENCED_MASTER_EPOCH",
            CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH => "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH",
            CONTROLLER_INVALID_MASTER => "CONTROLLER_INVALID_MASTER",
            CONTROLLER_MASTER_NOT_AVAILABLE => "CONTROLLER_MASTER_NOT_AVAILABLE",
            CONTROLLER_BROKER_METADATA_NOT_EXIST => "CONTROLLER_BROKER_METADATA_NOT_EXIST",
            CONTROLLER_MASTER_STILL_EXIST => "CONTROLLER_MASTER_STILL_EXIST",
            CONTROLLER_ALTER_SYNC_STATE_SET_FAILED => "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED",
            MESSAGE_ILLEGAL => "MESSAGE_ILLEGAL",
            SERVICE_NOT_AVAILABLE => "SERVICE_NOT_AVAILABLE",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            NO_PERMISSION => "NO_PERMISSION",
            TOPIC_NOT_EXIST => "TOPIC_NOT_EXIST",
            TOPIC_EXIST_ALREADY => "TOPIC_EXIST_ALREADY",
            PULL_NOT_FOUND => "PULL_NOT_FOUND",
            PULL_RETRY_IMMEDIATELY => "PULL_RETRY_IMMEDIATELY",
            PULL_OFFSET_MOVED => "PULL_OFFSET_MOVED",
            QUERY_NOT_FOUND => "QUERY_NOT_FOUND",
            SUBSCRIPTION_PARSE_FAILED => "SUBSCRIPTION_PARSE_FAILED",
            SUBSCRIPTION_NOT_EXIST => "SUBSCRIPTION_NOT_EXIST",
            SUBSCRIPTION_NOT_LATEST => "SUBSCRIPTION_NOT_LATEST",
            SUBSCRIPTION_GROUP_NOT_EXIST => "SUBSCRIPTION_GROUP_NOT_EXIST",
            FILTER_DATA_NOT_EXIST => "FILTER_DATA_NOT_EXIST",
            FILTER_DATA_NOT_LATEST => "FILTER_DATA_NOT_LATEST",
            INVALID_PARAMETER => "INVALID_PARAMETER",
            TRANSACTION_SHOULD_COMMIT => "TRANSACTION_SHOULD_COMMIT",
            TRANSACTION_SHOULD_ROLLBACK => "TRANSACTION_SHOULD_ROLLBACK",
            TRANSACTION_STATE_UNKNOW => "TRANSACTION_STATE_UNKNOW",
            TRANSACTION_STATE_GROUP_WRONG => "TRANSACTION_STATE_GROUP_WRONG",
            NO_BUYER_ID => "NO_BUYER_ID",
            NOT_IN_CURRENT_UNIT => "NOT_IN_CURRENT_UNIT",
            CONSUMER_NOT_ONLINE => "CONSUMER_NOT_ONLINE",
            CONSUME_MSG_TIMEOUT => "CONSUME_MSG_TIMEOUT",
            NO_MESSAGE => "NO_MESSAGE",
            POLLING_FULL => "POLLING_FULL",
            POLLING_TIMEOUT => "POLLING_TIMEOUT",
            BROKER_NOT_EXIST => "BROKER_NOT_EXIST",
            BROKER_DISPATCH_NOT_COMPLETE => "BROKER_DISPATCH_NOT_COMPLETE",
            BROADCAST_CONSUMPTION => "BROADCAST_CONSUMPTION",
            FLOW_CONTROL => "FLOW_CONTROL",
            NOT_LEADER_FOR_QUEUE => "NOT_LEADER_FOR_QUEUE",
            ILLEGAL_OPERATION => "ILLEGAL_OPERATION",
            GO_AWAY => "GO_AWAY",
            _ => return None,
        })
    }
}

/// `version` header values: ordinals of Java's `MQVersion.Version` enum (§3.3).
pub mod version {
    /// 3.0.11: REGISTER_BROKER bodies are `RegisterBrokerBody` from here on.
    pub const V3_0_11: i32 = 37;
    /// 3.4.9: SEND / CONSUMER_SEND_MSG_BACK honour header `maxReconsumeTimes` from here on.
    pub const V3_4_9: i32 = 121;
    /// 4.1.0-SNAPSHOT: Java SQL92 subscriptions refuse older brokers.
    pub const V4_1_0_SNAPSHOT: i32 = 232;
    /// 4.4.0.
    pub const V4_4_0: i32 = 293;
    /// 4.5.2: what the Go client always sends.
    pub const V4_5_2: i32 = 317;
    /// 4.9.3.
    pub const V4_9_3: i32 = 399;
    /// 4.9.4: route bodies in standard JSON (quoted numeric keys) from here on.
    pub const V4_9_4: i32 = 401;
    /// 4.9.8.
    pub const V4_9_8: i32 = 409;
    /// 5.0.0: compressed registration carries topic-queue mappings from here on.
    pub const V5_0_0: i32 = 413;
    /// 5.1.0.
    pub const V5_1_0: i32 = 433;
    /// 5.2.0.
    pub const V5_2_0: i32 = 453;
    /// 5.3.0.
    pub const V5_3_0: i32 = 473;
    /// 5.3.3.
    pub const V5_3_3: i32 = 479;
    /// What Conveyor puts in every command it creates: a modern value, as §3.3 recommends.
    pub const CURRENT: i32 = V5_3_3;
}

/// The sender's implementation language (`language` header field, §2.1). Informational.
///
/// Decoding never fails on an unknown name or byte (it becomes [`LanguageCode::Other`]);
/// Conveyor itself always sends [`LanguageCode::Java`] as §2.1 recommends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum LanguageCode {
    /// 0
    #[default]
    Java = 0,
    /// 1
    Cpp = 1,
    /// 2
    Dotnet = 2,
    /// 3
    Python = 3,
    /// 4
    Delphi = 4,
    /// 5
    Erlang = 5,
    /// 6
    Ruby = 6,
    /// 7 (also what unknown values decode to)
    Other = 7,
    /// 8
    Http = 8,
    /// 9
    Go = 9,
    /// 10
    Php = 10,
    /// 11
    Oms = 11,
    /// 12 (Java ≥ 4.9.4 only)
    Rust = 12,
    /// 13 (Java ≥ 5.3.2 only)
    NodeJs = 13,
}

const LANGUAGES: [(LanguageCode, &str); 14] = [
    (LanguageCode::Java, "JAVA"),
    (LanguageCode::Cpp, "CPP"),
    (LanguageCode::Dotnet, "DOTNET"),
    (LanguageCode::Python, "PYTHON"),
    (LanguageCode::Delphi, "DELPHI"),
    (LanguageCode::Erlang, "ERLANG"),
    (LanguageCode::Ruby, "RUBY"),
    (LanguageCode::Other, "OTHER"),
    (LanguageCode::Http, "HTTP"),
    (LanguageCode::Go, "GO"),
    (LanguageCode::Php, "PHP"),
    (LanguageCode::Oms, "OMS"),
    (LanguageCode::Rust, "RUST"),
    (LanguageCode::NodeJs, "NODE_JS"),
];

impl LanguageCode {
    /// The byte used by the binary header (§2.3).
    pub fn as_byte(self) -> u8 {
        self as u8
    }

    /// The enum name used by the JSON header (`"JAVA"`, `"GO"`, …).
    pub fn name(self) -> &'static str {
        // LANGUAGES is indexed by the discriminant.
        LANGUAGES
            .get(self.as_byte() as usize)
            .map_or("OTHER", |(_, n)| *n)
    }

    /// Decodes a binary-header byte; unknown values become [`LanguageCode::Other`].
    pub fn from_byte(b: u8) -> Self {
        LANGUAGES
            .get(b as usize)
            .map_or(LanguageCode::Other, |(l, _)| *l)
    }

    /// Decodes a JSON-header name (case-insensitive); unknown names become
    /// [`LanguageCode::Other`].
    pub fn from_name(name: &str) -> Self {
        LANGUAGES
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(name))
            .map_or(LanguageCode::Other, |(l, _)| *l)
    }
}

/// How the header of a frame is serialized: the high byte of the frame's second int (§2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SerializeType {
    /// 0: JSON header (§2.2). What Conveyor always sends.
    #[default]
    Json,
    /// 1: RocketMQ binary header (§2.3).
    RocketMq,
}

impl SerializeType {
    /// The type byte.
    pub fn as_byte(self) -> u8 {
        match self {
            SerializeType::Json => 0,
            SerializeType::RocketMq => 1,
        }
    }

    /// Decodes the type byte; `None` for anything but 0 and 1.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(SerializeType::Json),
            1 => Some(SerializeType::RocketMq),
            _ => None,
        }
    }

    /// The name Java writes in `serializeTypeCurrentRPC`.
    pub fn name(self) -> &'static str {
        match self {
            SerializeType::Json => "JSON",
            SerializeType::RocketMq => "ROCKETMQ",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn language_bytes_and_names() {
        assert_eq!(LanguageCode::Java.as_byte(), 0);
        assert_eq!(LanguageCode::Go.as_byte(), 9);
        assert_eq!(LanguageCode::Rust.as_byte(), 12);
        assert_eq!(LanguageCode::NodeJs.as_byte(), 13);
        assert_eq!(LanguageCode::NodeJs.name(), "NODE_JS");
        for b in 0..=13u8 {
            let l = LanguageCode::from_byte(b);
            assert_eq!(l.as_byte(), b);
            assert_eq!(LanguageCode::from_name(l.name()), l);
        }
        assert_eq!(LanguageCode::from_byte(200), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("COBOL"), LanguageCode::Other);
        assert_eq!(LanguageCode::from_name("go"), LanguageCode::Go);
    }

    #[test]
    fn code_names() {
        assert_eq!(request_code::name(310), Some("SEND_MESSAGE_V2"));
        assert_eq!(request_code::name(200_151), Some("BATCH_ACK_MESSAGE"));
        assert_eq!(
            request_code::name(352),
            Some("GET_SUBSCRIPTIONGROUP_CONFIG")
        );
        assert_eq!(request_code::name(9999), None);
        assert_eq!(response_code::name(1500), Some("GO_AWAY"));
        assert_eq!(response_code::name(202), Some("TRANSACTION_STATE_UNKNOW"));
    }

    #[test]
    fn serialize_type() {
        assert_eq!(SerializeType::from_byte(1), Some(SerializeType::RocketMq));
        assert_eq!(SerializeType::from_byte(2), None);
        assert_eq!(SerializeType::Json.name(), "JSON");
    }
}
