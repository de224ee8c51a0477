//! One struct per section of the file. Each field is `None` when the layer (file, environment,
//! command line) does not set it; the default given on each field is what the broker uses when
//! no layer sets it.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::values::{BrokerRole, FlushMode, SlaveAck};

/// Declares a section: every field becomes an `Option` left out of the output when `None`,
/// unknown keys are rejected, and `or`/`is_empty` are generated from the field list.
macro_rules! section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[$fmeta:meta])* pub $field:ident: $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: Option<$ty>,
            )*
        }

        impl $name {
            /// `self`'s value for each key that `self` sets, else `lower`'s.
            #[must_use]
            pub fn or(self, lower: Self) -> Self {
                Self { $( $field: self.$field.or(lower.$field), )* }
            }

            /// True when no key is set.
            pub fn is_empty(&self) -> bool {
                true $( && self.$field.is_none() )*
            }
        }
    };
}

section! {
    /// `[namesrv]`: the name server (`conveyor namesrv`, and the one embedded by
    /// `conveyor standalone`).
    pub struct NamesrvSection {
        /// `listen`: address the name server listens on (RocketMQ's `listenPort` of the
        /// NamesrvController). Flags: `--listen` (`namesrv`), `--namesrv-listen`
        /// (`standalone`). Default `"0.0.0.0:9876"`.
        pub listen: SocketAddr,
    }
}

section! {
    /// `[broker]`: the broker (RocketMQ's `BrokerConfig`, the parts Conveyor uses).
    pub struct BrokerSection {
        /// `listen`: address the broker's remoting server listens on (RocketMQ's `listenPort`).
        /// Flag `--listen` (`broker`, `standalone`). Default `"0.0.0.0:10911"`.
        pub listen: SocketAddr,
        /// `cluster-name`: cluster the broker belongs to (`brokerClusterName`). Flag
        /// `--cluster-name`. Default `"DefaultCluster"`.
        pub cluster_name: String,
        /// `broker-name`: broker group name, shared by a master and its slaves (`brokerName`).
        /// Flag `--broker-name`. Default `"broker-a"`.
        pub broker_name: String,
        /// `broker-id`: 0 for the master, positive for slaves (`brokerId`). Flag `--broker-id`.
        /// Default `0`.
        pub broker_id: i64,
        /// `broker-role`: `"SYNC_MASTER"`, `"ASYNC_MASTER"` or `"SLAVE"` (`brokerRole`). A
        /// SYNC_MASTER answers SEND_OK once `[replication] in-sync-replicas` copies hold the
        /// message; a SLAVE follows its group's master and refuses writes. Flag `--broker-role`.
        /// Default `"ASYNC_MASTER"` for broker id 0, `"SLAVE"` otherwise.
        pub broker_role: BrokerRole,
        /// `namesrv-addrs`: name servers the broker registers with, as a list of `"host:port"`
        /// (`namesrvAddr`, there one `;`-separated string). Flag `--namesrv-addr "a:9876;b:9876"`.
        /// Default `["127.0.0.1:9876"]`; in `standalone`, the embedded name server.
        pub namesrv_addrs: Vec<String>,
        /// `advertised-addr`: `"ip:port"` clients use to reach the broker, also the STOREHOST
        /// written into every record (`brokerIP1` with `listenPort`). Flag `--advertised-addr`.
        /// Default: the listen address, with 127.0.0.1 when listening on all interfaces.
        pub advertised_addr: String,
        /// `auto-create-topic`: create unknown topics on first send from the TBW102 template
        /// (`autoCreateTopicEnable`). Flag `--auto-create-topic`. Default `true`.
        pub auto_create_topic: bool,
        /// `auto-create-subscription-group`: create unknown consumer groups on first use
        /// (`autoCreateSubscriptionGroup`). Default `true`.
        pub auto_create_subscription_group: bool,
        /// `default-topic-queue-nums`: queues of TBW102, so the most an auto-created topic gets
        /// (`defaultTopicQueueNums`). Default `8`.
        pub default_topic_queue_nums: i32,
        /// `auto-create-max-topics`: topics the broker may hold before auto-creating another
        /// is refused (TOPIC_NOT_EXIST with a remark; explicit creation still works). Conveyor
        /// only. Default `4096`.
        pub auto_create_max_topics: usize,
        /// `auto-create-max-groups`: subscription groups the broker may hold before
        /// auto-creating another is refused (SUBSCRIPTION_GROUP_NOT_EXIST). Conveyor only.
        /// Default `16384`.
        pub auto_create_max_groups: usize,
        /// `auto-create-burst`: topic and group auto-creations allowed in a burst; beyond,
        /// SYSTEM_BUSY. Conveyor only. Default `200`.
        pub auto_create_burst: u32,
        /// `auto-create-per-second`: auto-creations per second refilled after a burst.
        /// Conveyor only. Default `50`.
        pub auto_create_per_second: f64,
        /// `slave-read-enable`: a slave serves pulls (`slaveReadEnable`). Off, a slave refuses
        /// them (SYSTEM_BUSY, as RocketMQ's `rejectRequest`) and every pull answer says "read
        /// from the master"; on, a master sends a consumer that lags by more than
        /// `access-message-in-memory-max-ratio` of RAM to its group's
        /// `whichBrokerWhenConsumeSlowly` replica, and others to the group's `brokerId`, and
        /// consumers read from a slave while no master exists. Default `false`.
        pub slave_read_enable: bool,
        /// `access-message-in-memory-max-ratio`: lag, in percent of the machine's RAM, past
        /// which a consumer reads from a slave when `slave-read-enable` is on
        /// (`accessMessageInMemoryMaxRatio`, a store setting in RocketMQ). Default `40`.
        pub access_message_in_memory_max_ratio: u64,
        /// `metrics-per-queue`: `/metrics` also reports each consumer group's backlog per
        /// queue (`conveyor_consumer_queue_lag_messages`, one series per group, topic and
        /// queue: many). Conveyor only. Default `false`.
        pub metrics_per_queue: bool,
        /// `zone`: the zone (rack, availability zone) the broker runs in, as RocketMQ's
        /// `ROCKETMQ_ZONE`: registered with the name servers (the group's `zoneName` in routes,
        /// which clients in zone mode filter on) and told to the master, which sends a
        /// consumer that names its zone to a replica there when `slave-read-enable` is on.
        /// Flag `--zone`. Default: none.
        pub zone: String,
        /// `zone-file`: a file holding the zone, re-read every 2 s while the broker runs; when
        /// it names one it wins over `zone` (the operator writes a pod's zone there once the
        /// pod is scheduled). Flag `--zone-file`. Default: none.
        pub zone_file: PathBuf,
        /// `register-interval-ms`: period of registration with the name servers
        /// (`registerNameServerPeriod`, clamped to 10–60 s). Default `30000`.
        pub register_interval_ms: u64,
        /// `offset-persist-interval-ms`: period at which consumer offsets are persisted
        /// (`flushConsumerOffsetInterval`). Default `5000`.
        pub offset_persist_interval_ms: u64,
        /// `send-queue-wait-ms`: how long a SEND may wait for a free slot before the broker
        /// answers SYSTEM_BUSY (`waitTimeMillsInSendQueue`). Default `200`.
        pub send_queue_wait_ms: u64,
        /// `max-sends-in-flight`: sends in flight across all connections before new ones wait
        /// (RocketMQ bounds its send queue with `sendThreadPoolQueueCapacity`). Default `10000`.
        pub max_sends_in_flight: usize,
        /// `delay-levels`: the delay of each delay level, space-separated (`messageDelayLevel`).
        /// Flag `--delay-levels`. Default `"1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m
        /// 1h 2h"`.
        pub delay_levels: String,
        /// `timer-max-delay-ms`: longest delay a timer message may ask for (`timerMaxDelaySec`,
        /// there in seconds). Default `259200000` (3 days).
        pub timer_max_delay_ms: u64,
        /// `transaction-timeout-ms`: age after which an undecided transactional (half) message
        /// is checked back with its producer (`transactionTimeOut`). Flag
        /// `--transaction-timeout-ms`. Default `6000`.
        pub transaction_timeout_ms: u64,
        /// `transaction-check-interval-ms`: time between two checks of the same undecided half
        /// message (`transactionCheckInterval`). Flag `--transaction-check-interval-ms`. Default
        /// `30000`.
        pub transaction_check_interval_ms: u64,
        /// `transaction-check-max`: checks before an undecided half message is discarded
        /// (`transactionCheckMax`). Default `15`.
        pub transaction_check_max: u32,
    }
}

section! {
    /// `[store]`: the message store (RocketMQ's `MessageStoreConfig`, the parts that can be
    /// set).
    pub struct StoreSection {
        /// `data-dir`: store root directory (`storePathRootDir`). Flag `--data-dir`. Default
        /// `"./conveyor-data"`.
        pub data_dir: PathBuf,
        /// `flush-mode`: `"sync"` (acknowledge after fsync, group commit) or `"async"`
        /// (background flush) (`flushDiskType`: SYNC_FLUSH, ASYNC_FLUSH). Flag `--flush-mode`.
        /// Default `"async"`.
        pub flush_mode: FlushMode,
        /// `segment-size`: CommitLog segment size in bytes (`mappedFileSizeCommitLog`). Must
        /// exceed `max-message-size` + 8 and stay below 4 GiB. Default `1073741824` (1 GiB).
        pub segment_size: u64,
        /// `max-message-size`: largest record accepted, in bytes (`maxMessageSize`). Default
        /// `4194304` (4 MiB).
        pub max_message_size: usize,
        /// `retention-hours`: CommitLog segments older than this are deleted
        /// (`fileReservedTime`). Default `72`.
        pub retention_hours: u64,
        /// `disk-clean-ratio`: disk usage (0.0–1.0) from which expired segments are cleaned
        /// eagerly (`diskMaxUsedSpaceRatio`). Default `0.75`.
        pub disk_clean_ratio: f64,
        /// `disk-force-clean-ratio`: disk usage from which the oldest segments are deleted even
        /// if not expired (`diskSpaceCleanForciblyRatio`). Default `0.85`.
        pub disk_force_clean_ratio: f64,
        /// `disk-full-ratio`: disk usage from which appends are refused
        /// (`diskSpaceWarningLevelRatio`); `1.0` switches that off. Default `0.90`.
        pub disk_full_ratio: f64,
        /// `sync-flush-timeout-ms`: how long a SYNC append waits for its flush
        /// (`syncFlushTimeout`). Default `5000`.
        pub sync_flush_timeout_ms: u64,
        /// `flush-interval-ms`: under ASYNC flush, how often the flusher looks for dirty pages
        /// to write (`flushIntervalCommitLog`). Default `500`.
        pub flush_interval_ms: u64,
        /// `flush-thorough-interval-ms`: under ASYNC flush, the longest time between two
        /// flushes of everything, however few pages are dirty
        /// (`flushCommitLogThoroughInterval`). Default `10000`.
        pub flush_thorough_interval_ms: u64,
    }
}

section! {
    /// `[controller]`: the replication controller (`conveyor controller`).
    pub struct ControllerSection {
        /// `listen`: address the controller listens on. Flag `--listen` (`controller`). Default
        /// `"0.0.0.0:9878"`.
        pub listen: SocketAddr,
        /// `detection-ms`: a master silent this long is replaced
        /// (`controllerHeartBeatTimeoutMills`). Default `4000` (RocketMQ: 10000): eight
        /// heartbeats at the brokers' default 500 ms.
        pub detection_ms: u64,
        /// `allow-unclean-election`: elect a replica outside the in-sync set when no member of
        /// it is alive; acknowledged messages can be lost (`enableElectUncleanMaster`).
        /// Default `false`.
        pub allow_unclean_election: bool,
        /// `group-endpoints`: `"<brokerName>=<ip>:<port>"` entries: for each group, an address
        /// this controller listens on and leads every connection to the group's current master
        /// (the address its masters register as id 0, `[replication] group-address`), so that
        /// unmodified clients reach a new master without waiting for their route poll.
        /// Default: none.
        pub group_endpoints: Vec<String>,
    }
}

section! {
    /// `[replication]`: master/slave replication of the CommitLog (RocketMQ's HA settings).
    pub struct ReplicationSection {
        /// `listen`: address the replication stream listens on (`haListenPort`). Default: the
        /// broker's listen address with its port plus one (10912).
        pub listen: SocketAddr,
        /// `advertised-addr`: `"ip:port"` slaves use to reach this broker's replication stream,
        /// sent to the name server as `haServerAddr`. Default: the broker's advertised host
        /// with the replication port.
        pub advertised_addr: String,
        /// `master-address`: a slave follows this `"ip:port"` instead of the master's
        /// `haServerAddr` learnt from the name server (`haMasterAddress`). Default: unset.
        pub master_address: String,
        /// `in-sync-replicas`: copies (the master's included) that must hold a message before
        /// a SYNC_MASTER answers SEND_OK (`inSyncReplicas`). Default `2` (RocketMQ's default of
        /// 1 makes SYNC_MASTER wait for nobody).
        pub in_sync_replicas: usize,
        /// `slave-ack`: `"write"` or `"flush"`, when a slave acknowledges. Default `"write"`.
        pub slave_ack: SlaveAck,
        /// `slave-timeout-ms`: how long a send waits for its slaves before the broker answers
        /// FLUSH_SLAVE_TIMEOUT (`slaveTimeout`). Default `3000`.
        pub slave_timeout_ms: u64,
        /// `transfer-batch-bytes`: most CommitLog bytes in one transfer frame
        /// (`haTransferBatchSize`). Default `262144`.
        pub transfer_batch_bytes: usize,
        /// `heartbeat-interval-ms`: an idle stream sends a heartbeat this often
        /// (`haSendHeartbeatInterval`). Default `5000`.
        pub heartbeat_interval_ms: u64,
        /// `housekeeping-interval-ms`: a stream silent this long is closed
        /// (`haHousekeepingInterval`). Default `20000`.
        pub housekeeping_interval_ms: u64,
        /// `max-gap-bytes`: a slave further behind than this does not count as available; sends
        /// then get SLAVE_NOT_AVAILABLE at once (`haMaxGapNotInSync`). Default `268435456`.
        pub max_gap_bytes: u64,
        /// `controller-addrs`: controllers (`"host:port"`) that decide this broker's role; when
        /// set, `broker-role` is ignored and the broker starts fenced (no writes) until the
        /// controller names it master (`controllerAddr`). Default: none (roles from
        /// `broker-role`).
        pub controller_addrs: Vec<String>,
        /// `controller-scope`: which of the controller's clusters this broker belongs to, sent with
        /// every controller request (Conveyor's `controllerScope` field). One controller (the
        /// operator's) can then decide for several clusters whose broker names repeat; the
        /// operator sets it to `<namespace>/<cluster>`. Default: none.
        pub controller_scope: String,
        /// `controller-heartbeat-ms`: how often the broker heartbeats to its controller
        /// (`brokerHeartbeatInterval`). Default `500` (RocketMQ: 1000).
        pub controller_heartbeat_ms: u64,
        /// `group-address`: in controller mode, the `"ip:port"` this broker registers with
        /// name servers while it is its group's master, instead of its own address: an
        /// address that always leads to the group's master (a controller's group endpoint, a
        /// Service), so clients keep their route across a failover. Slaves register their own
        /// address. Default: unset (the master registers its own address).
        pub group_address: String,
        /// `synchronous`: in controller mode, a master answers SEND_OK once every member of
        /// the in-sync set holds the message (`allAckInSyncStateSet`); `false` acknowledges
        /// after the master's own flush. Default `true`.
        pub synchronous: bool,
        /// `max-time-not-caught-up-ms`: in controller mode, a member of the in-sync set that
        /// is behind (or not connected) this long is dropped from it
        /// (`haMaxTimeSlaveNotCatchup`). Default `15000`.
        pub max_time_not_caught_up_ms: u64,
        /// `metadata-sync-interval-ms`: how often a slave copies its master's topics, groups,
        /// consumer offsets and delay progress (SlaveSynchronize). Default `10000`.
        pub metadata_sync_interval_ms: u64,
    }
}

section! {
    /// `[grpc]`: the RocketMQ 5.x gRPC endpoint (`apache.rocketmq.v2.MessagingService`) that
    /// the 5.x SDKs use, served by the broker (RocketMQ: the proxy in local mode).
    pub struct GrpcSection {
        /// `listen`: `"ip:port"` to listen on, or `"off"` (or `""`) to serve no gRPC (the
        /// proxy's `grpcServerPort`). Flag `--grpc-listen`. Default `"0.0.0.0:8081"`.
        pub listen: String,
        /// `push-invisible-ms`: how long a push consumer's message stays invisible per
        /// renewal; the endpoint renews it shortly before that ends until the client answers
        /// (the proxy's `defaultInvisibleTimeMills`). 1000 … 43200000. Default `60000`.
        pub push_invisible_ms: u64,
    }
}

section! {
    /// `[tls]`: TLS on the client ports: the name server's and the broker's remoting ports and
    /// the gRPC port (RocketMQ's `tls.server.*` system properties).
    pub struct TlsSection {
        /// `mode`: `"permissive"` (TLS and plaintext on each port, told apart by the first
        /// byte, as Apache RocketMQ's servers do by default), `"enforcing"` (TLS only) or
        /// `"off"` (plaintext only; RocketMQ's `disabled`). Flag `--tls-mode`. Default
        /// `"permissive"`.
        pub mode: String,
        /// `cert-file`: PEM certificate chain (leaf first) served to TLS clients, re-read when
        /// it changes; with `key-file`. Unset: a self-signed certificate generated at start
        /// (RocketMQ's `tlsTestModeEnable`; clients that do not verify it, as RocketMQ's by
        /// default, connect). Flag `--tls-cert-file`.
        pub cert_file: PathBuf,
        /// `key-file`: the PEM private key of `cert-file` (PKCS#8, PKCS#1 or SEC1), re-read
        /// when it changes. Flag `--tls-key-file`.
        pub key_file: PathBuf,
    }
}

section! {
    /// `[acl]`: access control on the name server's, the broker's and the controller's
    /// remoting ports (RocketMQ's `aclEnable` with `plain_acl.yml`): every request signed by a
    /// user of the users file (or by the cluster itself) and allowed by its permissions.
    pub struct AclSection {
        /// `enabled`: check every request (RocketMQ's `aclEnable`). Flag `--acl-enabled`.
        /// Default `false`.
        pub enabled: bool,
        /// `users-file`: the users, their secret keys and permissions, in RocketMQ's
        /// `plain_acl.yml` format; re-read when it changes. Flag `--acl-users-file`.
        pub users_file: PathBuf,
        /// `cluster-secret-file`: a file whose first line is the secret (16 characters or
        /// more) the cluster's own processes share and sign their requests to each other with
        /// (broker registration, the controller, relayed writes, replication). Flag
        /// `--acl-cluster-secret-file`.
        pub cluster_secret_file: PathBuf,
        /// `reload-interval-ms`: how often the users file is looked at for changes. 100 …
        /// 600000. Default `5000`.
        pub reload_interval_ms: u64,
    }
}

section! {
    /// `[http]`: the HTTP server for `/healthz`, `/readyz` and `/metrics`.
    pub struct HttpSection {
        /// `listen`: `"ip:port"` to listen on, or `"off"` (or `""`) to disable the HTTP server
        /// (no RocketMQ equivalent). Flag `--http-listen`. Default `"0.0.0.0:8080"`.
        pub listen: String,
        /// `resource-labels`: label `/metrics` series with topic and consumer-group names
        /// (`false`: traffic is summed over topics and groups and the per-group families —
        /// backlog, lag, consumer counts — are left out, for scrapers that must not learn
        /// the names). Flag `--http-resource-labels`. Default `true`.
        pub resource_labels: bool,
    }
}
