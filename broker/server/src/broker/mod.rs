//! The broker: serves producers and consumers from a `conveyor-store` MessageStore and
//! registers its topics with the name servers.
//!
//! One file per concern: [`send`] (SEND_*), [`pull`] (PULL with long polling), [`consumer`]
//! (heartbeats, groups, offsets), [`query`] (offsets by time, lookups by id and key),
//! [`admin`] (topics, groups and the statistics `mqadmin` reads), [`register`] (name-server
//! registration), plus the persisted tables [`topics`], [`groups`], [`offsets`] and the live
//! [`clients`].

pub mod admin;
pub mod clients;
pub mod config_file;
pub mod consumer;
pub mod groups;
pub mod hold;
pub mod offsets;
pub mod pull;
pub mod query;
pub mod register;
pub mod retry;
pub mod schedule;
pub mod send;
pub mod timer;
pub mod topics;
pub mod transaction;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conveyor_protocol::code::{request_code as rc, response_code as resp, version};
use conveyor_protocol::command::{HeaderError, RemotingCommand};
use conveyor_protocol::message::{keys, StoredMessage};
use conveyor_store::{FlushMode, MessageStore, StoreConfig};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::remoting::{error_response, not_supported, Connection, Link, Processor};
use clients::ClientManager;
use groups::SubscriptionGroupManager;
use hold::PullHold;
use offsets::ConsumerOffsetManager;
use topics::TopicConfigManager;

/// A handler's outcome: the response, or an error response.
pub type Reply = Result<RemotingCommand, RemotingCommand>;

/// Maps a header error to an INVALID_PARAMETER answer naming the field.
pub(crate) fn bad_header(req: &RemotingCommand) -> impl Fn(HeaderError) -> RemotingCommand + '_ {
    move |e| error_response(req, resp::INVALID_PARAMETER, e.to_string())
}

/// Broker settings (RocketMQ's BrokerConfig, the parts Conveyor uses).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct BrokerConfig {
    /// Cluster the broker belongs to.
    pub cluster_name: String,
    /// Broker group name (master and slaves share it).
    pub broker_name: String,
    /// 0 = master.
    pub broker_id: i64,
    /// Address clients use to reach this broker ("ip:port"); also the STOREHOST of records.
    pub advertised_addr: String,
    /// Name servers to register with.
    pub namesrv_addrs: Vec<String>,
    /// Create unknown topics on first send from the TBW102 template.
    pub auto_create_topic: bool,
    /// Create unknown consumer groups on first use.
    pub auto_create_subscription_group: bool,
    /// Queues of TBW102 (and so the most an auto-created topic gets).
    pub default_topic_queue_nums: i32,
    /// Registration period (RocketMQ: 30 s, clamped to 10–60 s).
    pub register_interval_ms: u64,
    /// Consumer offsets persistence period.
    pub offset_persist_interval_ms: u64,
    /// How long a SEND may wait for a free slot before the broker answers SYSTEM_BUSY.
    pub send_queue_wait_ms: u64,
    /// Sends in flight across all connections before new ones wait.
    pub max_sends_in_flight: usize,
    /// Delay levels, RocketMQ's `messageDelayLevel`.
    pub delay_levels: String,
    /// Longest delay a timer message may ask for (RocketMQ: 3 days).
    pub timer_max_delay_ms: u64,
    /// Age after which an undecided half message is checked back (RocketMQ: 6 s).
    pub transaction_timeout_ms: u64,
    /// Time between two checks of the same half message.
    pub transaction_check_interval_ms: u64,
    /// Checks before an undecided half message is discarded (RocketMQ: 15).
    pub transaction_check_max: u32,
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            cluster_name: "DefaultCluster".into(),
            broker_name: "broker-a".into(),
            broker_id: 0,
            advertised_addr: "127.0.0.1:10911".into(),
            namesrv_addrs: vec!["127.0.0.1:9876".into()],
            auto_create_topic: true,
            auto_create_subscription_group: true,
            default_topic_queue_nums: 8,
            register_interval_ms: 30_000,
            offset_persist_interval_ms: 5_000,
            send_queue_wait_ms: 200,
            max_sends_in_flight: 10_000,
            delay_levels: "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".into(),
            timer_max_delay_ms: 3 * 24 * 3600 * 1000,
            transaction_timeout_ms: 6_000,
            transaction_check_interval_ms: 30_000,
            transaction_check_max: 15,
        }
    }
}

/// Counters exposed on `/metrics` and in GET_BROKER_RUNTIME_INFO.
#[derive(Default)]
pub struct BrokerStats {
    pub messages_in: AtomicU64,
    pub bytes_in: AtomicU64,
    pub messages_out: AtomicU64,
    pub bytes_out: AtomicU64,
}

/// A running broker.
pub struct Broker {
    pub config: BrokerConfig,
    pub store: Arc<MessageStore>,
    pub topics: TopicConfigManager,
    pub groups: SubscriptionGroupManager,
    pub offsets: ConsumerOffsetManager,
    pub clients: ClientManager,
    pub hold: Arc<PullHold>,
    pub stats: BrokerStats,
    pub schedule: schedule::ScheduleProgress,
    pub locks: consumer::QueueLocks,
    pub timer: timer::TimerService,
    pub transactions: transaction::TransactionService,
    delay_levels: Vec<Duration>,
    store_host: SocketAddr,
    namesrvs: Vec<Link>,
    registered: AtomicBool,
    send_slots: Semaphore,
    started: Instant,
    boot_timestamp: i64,
    /// Cancelled when the process begins to stop: held pulls answer at once.
    stopping: CancellationToken,
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("invalid advertised address {0:?}: expected ip:port")]
    AdvertisedAddr(String),
    #[error("invalid delay levels {0:?}: expected e.g. \"1s 5s 10s 30s 1m 2h\"")]
    DelayLevels(String),
    #[error(transparent)]
    Store(#[from] conveyor_store::StoreError),
    #[error(transparent)]
    Config(#[from] config_file::ConfigFileError),
}

/// Wall-clock time in ms (RocketMQ's timestamps).
pub(crate) use conveyor_protocol::time::now_ms;

impl Broker {
    /// Opens the store and the persisted tables. Call [`Broker::run_background`] next.
    pub fn open(
        config: BrokerConfig,
        mut store_config: StoreConfig,
    ) -> Result<Arc<Self>, BrokerError> {
        let store_host: SocketAddr = config
            .advertised_addr
            .parse()
            .map_err(|_| BrokerError::AdvertisedAddr(config.advertised_addr.clone()))?;
        store_config.store_host = store_host;
        let config_dir = store_config.root.join("config");
        let (store, report) = MessageStore::open(store_config)?;
        tracing::info!(
            unclean = report.unclean,
            valid_end = report.valid_end,
            scanned = report.scanned,
            elapsed_ms = report.elapsed.as_millis() as u64,
            "store opened"
        );
        let delay_levels = send::parse_delay_levels(&config.delay_levels);
        if delay_levels.is_empty() {
            return Err(BrokerError::DelayLevels(config.delay_levels.clone()));
        }
        let levels = delay_levels.len() as i32;
        let topics = TopicConfigManager::load(
            &config_dir,
            &config.cluster_name,
            &config.broker_name,
            config.auto_create_topic,
            config.default_topic_queue_nums,
            levels,
        )?;
        let groups =
            SubscriptionGroupManager::load(&config_dir, config.auto_create_subscription_group)?;
        let offsets = ConsumerOffsetManager::load(&config_dir)?;
        let schedule = schedule::ScheduleProgress::load(&config_dir)?;
        let timer = timer::TimerService::load(&config_dir)?;
        let transactions = transaction::TransactionService::load(&config_dir)?;
        let hold = Arc::new(PullHold::default());
        {
            let hold = hold.clone();
            store.set_arrival_listener(Arc::new(move |topic: &str, queue_id: i32, _max: i64| {
                hold.arrived(topic, queue_id)
            }));
        }
        let namesrvs = config.namesrv_addrs.iter().map(Link::new).collect();
        let broker = Arc::new(Self {
            send_slots: Semaphore::new(config.max_sends_in_flight),
            config,
            store: Arc::new(store),
            topics,
            groups,
            offsets,
            clients: ClientManager::default(),
            hold,
            stats: BrokerStats::default(),
            schedule,
            locks: consumer::QueueLocks::default(),
            timer,
            transactions,
            delay_levels,
            store_host,
            namesrvs,
            registered: AtomicBool::new(false),
            started: Instant::now(),
            boot_timestamp: now_ms(),
            stopping: CancellationToken::new(),
        });
        broker.reconcile_progress();
        Ok(broker)
    }

    /// Brings the delay, timer and transaction progress in line with the recovered store
    /// before anything is served: progress saved past a log that a power loss cut short is
    /// pulled back, and the transaction bookkeeping is rebuilt so that an END_TRANSACTION
    /// arriving first still sees which half messages are decided.
    fn reconcile_progress(&self) {
        for level in 1..=self.delay_levels.len() as i32 {
            self.schedule.clamp(
                level,
                self.store.max_offset(topics::SCHEDULE_TOPIC, level - 1),
            );
        }
        self.timer
            .clamp(self.store.max_offset(topics::TIMER_TOPIC, 0));
        self.transactions
            .clamp(self.store.max_offset(topics::TRANS_HALF_TOPIC, 0));
        self.scan_transactions();
    }

    /// The broker's advertised address.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }

    /// True once a registration with some name server succeeded.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// The group's config (created on first use when allowed), or the error response.
    pub(crate) fn group_config(
        &self,
        req: &RemotingCommand,
        group: &str,
    ) -> Result<groups::SubscriptionGroupConfig, RemotingCommand> {
        self.groups
            .find_or_create(group)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?
            .ok_or_else(|| {
                error_response(
                    req,
                    resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                    format!("subscription group [{group}] does not exist"),
                )
            })
    }

    /// Begins stopping: long polls in flight are answered right away instead of holding the
    /// shutdown until their suspend timeout.
    pub fn begin_stop(&self) {
        self.stopping.cancel();
    }

    /// Under SYNC_FLUSH, waits (at most the store's flush timeout) until the CommitLog is
    /// durable up to `end`; `false` on timeout. Always `true` under ASYNC_FLUSH.
    pub(crate) async fn durable(&self, end: u64) -> bool {
        if !self.sync_flush() {
            return true;
        }
        let mut rx = self.store.request_flush(end);
        let timeout = self.store.config().sync_flush_timeout;
        let flushed = tokio::time::timeout(timeout, rx.wait_for(|f| *f >= end)).await;
        matches!(flushed, Ok(Ok(_)))
    }

    /// True when the store uses SYNC_FLUSH.
    pub fn sync_flush(&self) -> bool {
        self.store.config().flush_mode == FlushMode::Sync
    }

    /// Runs registration, client expiry and offset persistence until `shutdown`, then
    /// unregisters, persists offsets and closes the store.
    pub async fn run_background(self: Arc<Self>, shutdown: CancellationToken) {
        let register_every =
            Duration::from_millis(self.config.register_interval_ms.clamp(1_000, 60_000));
        let persist_every = Duration::from_millis(self.config.offset_persist_interval_ms.max(100));
        let mut register_tick = tokio::time::interval(register_every);
        let mut persist_tick = tokio::time::interval(persist_every);
        let mut expiry_tick = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = register_tick.tick() => self.register_all().await,
                _ = persist_tick.tick() => {
                    if let Err(e) = self.offsets.persist() {
                        tracing::error!(error = %e, "persisting consumer offsets failed");
                    }
                }
                _ = expiry_tick.tick() => self.clients.expire(Instant::now(), clients::CLIENT_EXPIRY),
                _ = shutdown.cancelled() => break,
            }
        }
        self.unregister_all().await;
        if let Err(e) = self.offsets.persist() {
            tracing::error!(error = %e, "persisting consumer offsets failed");
        }
    }

    /// Flushes and closes the store (after the servers stopped).
    pub fn close(&self) {
        if let Err(e) = self.offsets.persist() {
            tracing::error!(error = %e, "persisting consumer offsets failed");
        }
        if let Err(e) = self.store.shutdown() {
            tracing::error!(error = %e, "store shutdown failed");
        }
    }

    fn version_response(req: &RemotingCommand, code: i32) -> RemotingCommand {
        let mut r = RemotingCommand::response_to(req, code);
        r.version = version::CURRENT;
        r
    }

    async fn dispatch(self: &Arc<Self>, conn: &Connection, req: &RemotingCommand) -> Reply {
        match req.code {
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                self.send(conn, req).await
            }
            rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE => self.pull(req).await,
            rc::HEART_BEAT => self.heartbeat(conn, req).await,
            rc::UNREGISTER_CLIENT => self.unregister_client(conn, req),
            rc::GET_CONSUMER_LIST_BY_GROUP => self.consumer_list(req),
            rc::QUERY_CONSUMER_OFFSET => self.query_consumer_offset(req),
            rc::UPDATE_CONSUMER_OFFSET => self.update_consumer_offset(req),
            rc::GET_MAX_OFFSET => self.max_offset(req),
            rc::GET_MIN_OFFSET => self.min_offset(req),
            rc::SEARCH_OFFSET_BY_TIMESTAMP => self.search_offset(req),
            rc::GET_EARLIEST_MSG_STORETIME => self.earliest_msg_store_time(req),
            rc::VIEW_MESSAGE_BY_ID => self.view_message(req),
            rc::QUERY_MESSAGE => self.query_message(req),
            rc::CHECK_CLIENT_CONFIG => self.check_client_config(req),
            rc::LOCK_BATCH_MQ | rc::UNLOCK_BATCH_MQ => self.lock_batch(req),
            rc::CONSUMER_SEND_MSG_BACK => self.send_back(req).await,
            rc::END_TRANSACTION => self.end_transaction(req).await,
            code if admin::handles(code) => self.admin(conn, req).await,
            _ => Err(not_supported(req)),
        }
    }
}

impl Processor for Broker {
    async fn handle(
        self: Arc<Self>,
        conn: Connection,
        request: RemotingCommand,
    ) -> Option<RemotingCommand> {
        let mut response = self.dispatch(&conn, &request).await.unwrap_or_else(|e| e);
        response.version = version::CURRENT;
        Some(response)
    }

    fn on_disconnect(&self, conn: &Connection) {
        self.clients.connection_closed(conn.id());
    }

    fn runs_inline(&self, request: &RemotingCommand) -> bool {
        match request.code {
            // A send waits only for a SYNC flush; topic auto-creation registers in the
            // background.
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => !self.sync_flush(),
            rc::QUERY_CONSUMER_OFFSET
            | rc::UPDATE_CONSUMER_OFFSET
            | rc::GET_MAX_OFFSET
            | rc::GET_MIN_OFFSET => true,
            rc::END_TRANSACTION => !self.sync_flush(),
            _ => false,
        }
    }
}

/// Moves a message into a system topic until it may be delivered, keeping its destination
/// in REAL_TOPIC/REAL_QID (delay levels, timers, transactional half messages).
pub(crate) fn park(m: &mut StoredMessage, system_topic: &str, queue_id: i32) {
    m.properties.insert(keys::REAL_TOPIC, m.topic.clone());
    m.properties
        .insert(keys::REAL_QUEUE_ID, m.queue_id.to_string());
    m.topic = system_topic.to_string();
    m.queue_id = queue_id;
}

/// Restores a parked message's real topic and queue; `false` if it carries none.
pub(crate) fn unpark(m: &mut StoredMessage) -> bool {
    let (Some(topic), Some(queue)) = (
        m.properties.get(keys::REAL_TOPIC).map(str::to_string),
        m.properties
            .get(keys::REAL_QUEUE_ID)
            .and_then(|q| q.parse::<i32>().ok()),
    ) else {
        return false;
    };
    m.properties.remove(keys::REAL_TOPIC);
    m.properties.remove(keys::REAL_QUEUE_ID);
    m.topic = topic;
    m.queue_id = queue;
    true
}

/// Shorthand for a success response.
pub(crate) fn ok(req: &RemotingCommand) -> RemotingCommand {
    Broker::version_response(req, resp::SUCCESS)
}
