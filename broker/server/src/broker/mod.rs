//! The broker: serves producers and consumers from a `conveyor-store` MessageStore and
//! registers its topics with the name servers.
//!
//! [`Broker`] is only the composition root: it opens the store, builds the services below
//! (each owning its state, handed the others it needs as `Arc`s), runs their background loops
//! and maps every request code to one service in [`Broker`]'s dispatch table. Services never
//! reach back into the broker; the dependency graph between these modules is acyclic.
//!
//! Request processors (RocketMQ's names):
//! - [`send`] — SEND_MESSAGE / V2 / BATCH: auto-create, DLQ redirection, parking.
//! - [`recall`] — RECALL_MESSAGE: cancels a timer message before it is due.
//! - [`retry`] — CONSUMER_SEND_MSG_BACK.
//! - [`pull`] — PULL_MESSAGE / LITE_PULL_MESSAGE with long polling ([`hold`]) and tag
//!   filtering ([`filter`]).
//! - [`offset_processor`] — consumer offsets and queue offsets (by time, min, max).
//! - [`query`] — messages by offset id and by key.
//! - [`client_processor`] — heartbeats, group membership, orderly locks.
//! - [`admin`] — topics, groups and the statistics `mqadmin` reads.
//! - [`transaction`] — END_TRANSACTION, half-message bookkeeping and check-backs.
//! - [`relay`] — writes that reach a replica which is not master go to its master.
//!
//! Background services: [`schedule`] (delay levels), [`timer`] (timer messages),
//! [`register`] (name-server registration). Where a message is parked is decided by one pure
//! function in [`parking`].
//!
//! State and leaves: [`topics`], [`groups`], [`offsets`] (persisted tables), [`clients`] and
//! [`locks`] (live), [`stats`], [`config`], [`config_file`], [`durability`], [`reply`].

pub mod admin;
pub mod assignment;
pub mod auto_create;
pub mod client_processor;
pub mod clients;
pub mod config;
pub mod config_file;
pub mod consume_admin;
pub mod durability;
pub mod filter;
pub mod groups;
pub mod hold;
pub mod lag;
pub mod locks;
pub mod offset_processor;
pub mod offsets;
pub mod parking;
pub mod permission;
pub mod pop;
pub mod pull;
pub mod query;
pub mod reader;
pub mod recall;
pub mod register;
pub mod relay;
pub mod reply;
pub mod retry;
pub mod schedule;
pub mod send;
pub mod slave_sync;
pub mod stats;
pub mod timer;
pub mod topics;
pub mod transaction;
pub mod zone;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use conveyor_protocol::code::{request_code as rc, version};
use conveyor_protocol::command::RemotingCommand;
use conveyor_store::{MessageStore, StoreConfig};
use tokio_util::sync::CancellationToken;

use crate::ha::{Replication, ReplicationConfig, RoleState};
use crate::remoting::{Connection, Processor};
use admin::{AdminBrokerProcessor, AdminDeps};
use client_processor::ClientManageProcessor;
use clients::ClientManager;
use durability::Durability;
use groups::SubscriptionGroupManager;
use hold::PullHold;
use locks::RebalanceLockManager;
use offset_processor::OffsetProcessor;
use offsets::ConsumerOffsetManager;
use parking::ParkingRules;
use pull::{PullDeps, PullMessageProcessor};
use query::QueryMessageProcessor;
use register::NameServerRegistrar;
use reply::{json_body, not_supported, Reply};
use retry::SendMsgBackProcessor;
use schedule::ScheduleMessageService;
use send::{SendDeps, SendMessageProcessor};
use stats::BrokerStats;
use timer::TimerMessageService;
use topics::TopicConfigManager;
use transaction::TransactionalMessageService;

pub use auto_create::AutoCreateLimits;
pub use config::BrokerConfig;

/// How often a `zone-file` is re-read.
const ZONE_POLL: Duration = Duration::from_secs(2);

/// A running broker: the services, wired together.
pub struct Broker {
    /// The store every service reads and writes.
    store: Arc<MessageStore>,
    /// Traffic counters.
    stats: Arc<BrokerStats>,
    /// `/metrics` reports each group's backlog per queue too.
    metrics_per_queue: bool,
    /// Committed consumer offsets (persisted periodically and on stop).
    offsets: Arc<ConsumerOffsetManager>,
    /// Live producers and consumers (expired periodically, dropped with their connection).
    clients: Arc<ClientManager>,
    /// Registration with the name servers.
    registrar: Arc<NameServerRegistrar>,
    /// The topic table (its auto-created entries are saved by the background loop).
    topics: Arc<TopicConfigManager>,
    /// The subscription group table (likewise).
    groups: Arc<SubscriptionGroupManager>,
    /// SEND_MESSAGE / V2 / BATCH.
    send: SendMessageProcessor,
    /// RECALL_MESSAGE.
    recall: recall::RecallMessageProcessor,
    /// CONSUMER_SEND_MSG_BACK.
    send_back: SendMsgBackProcessor,
    /// PULL_MESSAGE / LITE_PULL_MESSAGE.
    pull: PullMessageProcessor,
    /// Consumer and queue offsets.
    offset_requests: OffsetProcessor,
    /// VIEW_MESSAGE_BY_ID / QUERY_MESSAGE.
    query: QueryMessageProcessor,
    /// Heartbeats, membership, locks.
    client_requests: ClientManageProcessor,
    /// The admin requests.
    admin: AdminBrokerProcessor,
    /// Consumption admin requests (progress, connections, offset moves, queue entries).
    consume_admin: consume_admin::ConsumeAdmin,
    /// Delay-level delivery.
    schedule: Arc<ScheduleMessageService>,
    /// Timer-message delivery.
    timer: Arc<TimerMessageService>,
    /// Pop consumption (remoting POP codes, and the gRPC endpoint through them).
    pop: Arc<pop::PopService>,
    /// POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, PEEK_MESSAGE, NOTIFICATION.
    pop_requests: pop::processor::PopMessageProcessor,
    /// QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE.
    assignment: assignment::QueryAssignmentProcessor,
    /// END_TRANSACTION and check-backs.
    transactions: Arc<TransactionalMessageService>,
    /// The role and the replication stream.
    replication: Arc<Replication>,
    /// Writes reaching this broker while it is not master go to the master.
    relay: relay::WriteRelay,
    /// The broker's own read/write permission (read-only while it is drained).
    permission: Arc<permission::BrokerPermission>,
    /// When an append counts as done (flush, slaves).
    durability: Arc<Durability>,
    /// The advertised address (STOREHOST of records).
    store_host: SocketAddr,
    /// `register_interval_ms`.
    register_interval: Duration,
    /// `offset_persist_interval_ms`.
    offset_persist_interval: Duration,
    /// Where this broker's zone comes from (re-read while it runs when it is a file).
    zone: zone::ZoneSource,
    /// Cancelled when the process begins to stop: held pulls answer at once.
    stopping: CancellationToken,
}

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// `advertised_addr` is not `ip:port`.
    #[error("invalid advertised address {0:?}: expected ip:port")]
    AdvertisedAddr(String),
    /// `delay_levels` has no valid level.
    #[error("invalid delay levels {0:?}: expected e.g. \"1s 5s 10s 30s 1m 2h\"")]
    DelayLevels(String),
    /// The store could not be opened.
    #[error(transparent)]
    Store(#[from] conveyor_store::StoreError),
    /// A persisted table could not be read or written.
    #[error(transparent)]
    Config(#[from] config_file::ConfigFileError),
}

impl Broker {
    /// Opens the store and the persisted tables, and brings the delay, timer and transaction
    /// progress in line with the recovered store before anything is served. Call
    /// [`Broker::run_background`] and the `run_*` loops next.
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
        let store = Arc::new(store);
        let replication = Arc::new(Replication::open(
            ReplicationConfig {
                cluster_name: config.cluster_name.clone(),
                broker_addr: config.advertised_addr.clone(),
                ..config.replication.clone()
            },
            &config.broker_name,
            config.broker_id,
            store.clone(),
        )?);
        replication.zones().set_own(config.zone.read());
        let zone = config.zone.clone();
        let durability = Arc::new(Durability::new(store.clone(), replication.clone()));
        let delay_levels = parking::parse_delay_levels(&config.delay_levels);
        if delay_levels.is_empty() {
            return Err(BrokerError::DelayLevels(config.delay_levels.clone()));
        }
        let parking = ParkingRules {
            delay_levels: delay_levels.len(),
            timer_max_delay_ms: config.timer_max_delay_ms as i64,
        };
        let guard = Arc::new(auto_create::AutoCreateGuard::new(config.auto_create));
        let topics = Arc::new(TopicConfigManager::load(
            &config_dir,
            &config.cluster_name,
            &config.broker_name,
            config.auto_create_topic,
            config.default_topic_queue_nums,
            delay_levels.len() as i32,
            guard.clone(),
        )?);
        // Queues of deleted topics that recovery rebuilt from records still in the log go
        // again; queues of topics whose config was not saved bring their config back.
        for topic in topics.deleted() {
            store.delete_topic(&topic)?;
        }
        let restored = topics.restore_missing(store.queues());
        if !restored.is_empty() {
            tracing::warn!(
                ?restored,
                "topics with stored messages but no saved config restored from the store"
            );
            topics.persist_if_dirty()?;
        }
        let groups = Arc::new(SubscriptionGroupManager::load(
            &config_dir,
            config.auto_create_subscription_group,
            guard,
        )?);
        let offsets = Arc::new(ConsumerOffsetManager::load(&config_dir)?);
        // Like the delay/timer/transaction progress below: nothing saved may point past the
        // recovered log.
        offsets.clamp_to_queue_ends(|topic, queue_id| store.max_offset(topic, queue_id));
        let clients = Arc::new(ClientManager::default());
        let locks = Arc::new(RebalanceLockManager::default());
        let stats = Arc::new(BrokerStats::default());
        let hold = Arc::new(PullHold::default());
        {
            let hold = hold.clone();
            store.set_arrival_listener(Arc::new(move |topic: &str, queue_id: i32, _max: i64| {
                hold.arrived(topic, queue_id)
            }));
        }
        let metrics_per_queue = config.metrics_per_queue;
        let permission = Arc::new(permission::BrokerPermission::default());
        let registrar = Arc::new(NameServerRegistrar::new(
            &config,
            topics.clone(),
            replication.clone(),
            permission.clone(),
        ));
        let schedule = Arc::new(ScheduleMessageService::load(
            &config_dir,
            store.clone(),
            durability.clone(),
            hold.clone(),
            delay_levels,
        )?);
        let timer = Arc::new(TimerMessageService::load(
            &config_dir,
            store.clone(),
            durability.clone(),
            hold.clone(),
        )?);
        let transactions = Arc::new(TransactionalMessageService::load(
            &config_dir,
            &config,
            store_host,
            transaction::TransactionDeps {
                store: store.clone(),
                durability: durability.clone(),
                clients: clients.clone(),
                topics: topics.clone(),
            },
            parking,
        )?);
        {
            // A log cut back to a new master's term: nothing kept outside it may point past
            // the cut, where the new master's records reuse the queue offsets. Weak: the
            // services hold the replication (through their durability), which holds this hook;
            // strong references would keep the store open after the broker stops.
            let (store, offsets) = (Arc::downgrade(&store), Arc::downgrade(&offsets));
            let (schedule, timer, transactions) = (
                Arc::downgrade(&schedule),
                Arc::downgrade(&timer),
                Arc::downgrade(&transactions),
            );
            replication.on_truncate(Box::new(move || {
                if let (Some(store), Some(offsets)) = (store.upgrade(), offsets.upgrade()) {
                    offsets
                        .clamp_to_queue_ends(|topic, queue_id| store.max_offset(topic, queue_id));
                }
                if let Some(schedule) = schedule.upgrade() {
                    schedule.truncated();
                }
                if let Some(timer) = timer.upgrade() {
                    timer.truncated();
                }
                if let Some(transactions) = transactions.upgrade() {
                    transactions.truncated();
                }
            }));
        }
        let stopping = CancellationToken::new();
        let send = SendMessageProcessor::new(
            &config,
            store_host,
            SendDeps {
                store: store.clone(),
                durability: durability.clone(),
                topics: topics.clone(),
                groups: groups.clone(),
                registrar: registrar.clone(),
                stats: stats.clone(),
                parking,
            },
        );
        let recall = recall::RecallMessageProcessor::new(
            &config.broker_name,
            store_host,
            recall::RecallDeps {
                store: store.clone(),
                durability: durability.clone(),
                topics: topics.clone(),
                parking,
            },
        );
        let send_back = SendMsgBackProcessor::new(
            store.clone(),
            durability.clone(),
            topics.clone(),
            groups.clone(),
            registrar.clone(),
            parking,
            store_host,
        );
        let reader = Arc::new(reader::QueueReader::new(store.clone(), stats.clone()));
        let pull = PullMessageProcessor::new(PullDeps {
            store: store.clone(),
            topics: topics.clone(),
            groups: groups.clone(),
            clients: clients.clone(),
            offsets: offsets.clone(),
            hold: hold.clone(),
            stats: stats.clone(),
            stopping: stopping.clone(),
            replication: replication.clone(),
            slave_reads: pull::SlaveReads::new(
                config.slave_read_enable,
                config.access_message_in_memory_max_ratio,
            ),
            reader: reader.clone(),
        });
        let pop = Arc::new(pop::PopService::new(
            pop::PopDeps {
                store: store.clone(),
                durability: durability.clone(),
                topics: topics.clone(),
                offsets: offsets.clone(),
                hold: hold.clone(),
                reader: reader.clone(),
                stats: stats.clone(),
                registrar: registrar.clone(),
            },
            &config.cluster_name,
            &config.broker_name,
            store_host,
        ));
        let pop_requests = pop::processor::PopMessageProcessor::new(
            pop.clone(),
            topics.clone(),
            groups.clone(),
            stopping.clone(),
        );
        let assignment = assignment::QueryAssignmentProcessor::load(
            &config_dir,
            topics.clone(),
            groups.clone(),
            clients.clone(),
            registrar.clone(),
        )?;
        let offset_requests = OffsetProcessor::new(store.clone(), topics.clone(), offsets.clone());
        let query = QueryMessageProcessor::new(store.clone());
        let client_requests = ClientManageProcessor::new(
            clients.clone(),
            locks,
            groups.clone(),
            topics.clone(),
            registrar.clone(),
        );
        let register_interval =
            Duration::from_millis(config.register_interval_ms.clamp(1_000, 60_000));
        let offset_persist_interval =
            Duration::from_millis(config.offset_persist_interval_ms.max(100));
        let consume_admin = consume_admin::ConsumeAdmin::new(consume_admin::ConsumeAdminDeps {
            broker_name: config.broker_name.clone(),
            broker_addr: config.advertised_addr.clone(),
            store: store.clone(),
            topics: topics.clone(),
            offsets: offsets.clone(),
            clients: clients.clone(),
            pop: pop.clone(),
        });
        let admin = AdminBrokerProcessor::new(
            config,
            store_host,
            AdminDeps {
                permission: permission.clone(),
                store: store.clone(),
                topics: topics.clone(),
                groups: groups.clone(),
                offsets: offsets.clone(),
                clients: clients.clone(),
                registrar: registrar.clone(),
                stats: stats.clone(),
                replication: replication.clone(),
            },
        );
        Ok(Arc::new(Self {
            store,
            stats,
            metrics_per_queue,
            offsets,
            clients,
            registrar,
            topics,
            groups,
            send,
            recall,
            send_back,
            pull,
            offset_requests,
            query,
            client_requests,
            admin,
            consume_admin,
            schedule,
            timer,
            pop,
            pop_requests,
            assignment,
            transactions,
            relay: relay::WriteRelay::new(replication.clone()),
            permission,
            replication,
            durability,
            store_host,
            register_interval,
            offset_persist_interval,
            zone,
            stopping,
        }))
    }

    /// The message store.
    pub fn store(&self) -> &Arc<MessageStore> {
        &self.store
    }

    /// The topic of the record at CommitLog `offset` as its producer sent it: the real topic
    /// of one parked in a system topic (a prepared transaction, a delayed or timed message).
    /// `None`: no record there.
    pub fn record_topic(&self, offset: u64) -> Option<String> {
        let record = self.store.message_at(offset)?;
        let message = conveyor_protocol::message::RecordView::parse(&record)
            .and_then(|v| v.to_message())
            .ok()?;
        let real = message
            .properties
            .get(conveyor_protocol::message::keys::REAL_TOPIC)
            .map(str::to_string);
        Some(real.unwrap_or(message.topic))
    }

    /// The replication service (role, slaves, master).
    pub fn replication(&self) -> &Arc<Replication> {
        &self.replication
    }

    /// The traffic counters.
    pub fn stats(&self) -> &BrokerStats {
        &self.stats
    }

    /// Whether `/metrics` reports each group's backlog per queue.
    pub fn metrics_per_queue(&self) -> bool {
        self.metrics_per_queue
    }

    /// The live producers and consumers.
    pub fn clients(&self) -> &ClientManager {
        &self.clients
    }

    /// Pop consumption: what Pop consumers hold in flight.
    pub fn pop(&self) -> &pop::PopService {
        &self.pop
    }

    /// The committed consumer offsets.
    pub fn offsets(&self) -> &ConsumerOffsetManager {
        &self.offsets
    }

    /// The broker group's name.
    pub fn broker_name(&self) -> &str {
        self.pop.broker_name()
    }

    /// A topic's configuration on this broker.
    pub fn topic_config(&self, topic: &str) -> Option<conveyor_protocol::route::TopicConfig> {
        self.topics.get(topic)
    }

    /// A group's settings, the defaults for a group that does not exist yet but would be
    /// created on first use; `None` when it does not exist and will not be.
    pub fn group_config(&self, group: &str) -> Option<groups::SubscriptionGroupConfig> {
        self.groups.get(group).or_else(|| {
            self.groups
                .auto_create()
                .then(|| groups::SubscriptionGroupConfig {
                    group_name: group.to_string(),
                    ..Default::default()
                })
        })
    }

    /// The route of a topic over every broker group, from the name servers.
    pub async fn topic_route(
        &self,
        topic: &str,
    ) -> Result<Option<conveyor_protocol::route::TopicRouteData>, String> {
        self.registrar.topic_route(topic).await
    }

    /// The broker's advertised address.
    pub fn store_host(&self) -> SocketAddr {
        self.store_host
    }

    /// True once a registration with some name server succeeded.
    pub fn is_registered(&self) -> bool {
        self.registrar.is_registered()
    }

    /// True when the store uses SYNC_FLUSH.
    pub fn sync_flush(&self) -> bool {
        durability::sync_flush(&self.store)
    }

    /// Begins stopping: long polls in flight are answered right away instead of holding the
    /// shutdown until their suspend timeout.
    pub fn begin_stop(&self) {
        self.stopping.cancel();
    }

    /// Runs registration, client expiry and offset persistence until `shutdown`, then
    /// unregisters and persists offsets.
    pub async fn run_background(self: Arc<Self>, shutdown: CancellationToken) {
        let mut register_tick = tokio::time::interval(self.register_interval);
        let mut persist_tick = tokio::time::interval(self.offset_persist_interval);
        let mut expiry_tick = tokio::time::interval(Duration::from_secs(10));
        // Auto-created topics and groups are saved here, off the request path.
        let mut tables_tick = tokio::time::interval(Duration::from_millis(200));
        let mut zone_tick = tokio::time::interval(ZONE_POLL);
        // Counter samples for the per-minute rates (rocketmq-exporter's *_tps).
        let mut rates_tick = tokio::time::interval(Duration::from_secs(5));
        let mut role = self.replication.role_changes();
        loop {
            tokio::select! {
                _ = register_tick.tick() => self.registrar.register_all().await,
                // A zone that arrives or changes is registered at once (the replication
                // stream tells the master by itself).
                _ = zone_tick.tick(), if self.zone.is_live() => {
                    if self.replication.zones().set_own(self.zone.read()) {
                        tracing::info!(zone = ?self.replication.zones().own(), "zone changed");
                        self.registrar.register_soon();
                    }
                }
                // A new role is registered at once: clients find a promoted master by id 0.
                Ok(()) = role.changed() => self.registrar.register_all().await,
                _ = persist_tick.tick() => self.persist_offsets(),
                _ = tables_tick.tick() => self.persist_tables_soon(),
                _ = expiry_tick.tick() => self.clients.expire(Instant::now(), clients::CLIENT_EXPIRY),
                _ = rates_tick.tick() => self.stats.sample(Instant::now()),
                _ = shutdown.cancelled() => break,
            }
        }
        self.registrar.unregister_all().await;
        self.persist_offsets();
    }

    /// Copies the master's metadata until `shutdown` (a slave's job).
    pub async fn run_slave_sync(self: Arc<Self>, shutdown: CancellationToken) {
        let sync = slave_sync::SlaveSynchronize {
            replication: self.replication.clone(),
            topics: self.topics.clone(),
            groups: self.groups.clone(),
            offsets: self.offsets.clone(),
            schedule: self.schedule.clone(),
            timer: self.timer.clone(),
        };
        let interval = self.replication.config().metadata_sync_interval();
        sync.run(interval, shutdown).await
    }

    /// Runs the delay-level delivery while this broker is master (it writes), until
    /// `shutdown`.
    pub async fn run_schedule(self: Arc<Self>, shutdown: CancellationToken) {
        let schedule = self.schedule.clone();
        self.while_master(shutdown, move |stop| schedule.clone().run(stop))
            .await
    }

    /// Runs the timer-message delivery while master, until `shutdown`.
    pub async fn run_timer(self: Arc<Self>, shutdown: CancellationToken) {
        let timer = self.timer.clone();
        self.while_master(shutdown, move |stop| timer.clone().run(stop))
            .await
    }

    /// Serves pops while master (replaying the revive log at the start of each term, then
    /// reviving expired batches), until `shutdown`.
    pub async fn run_pop(self: Arc<Self>, shutdown: CancellationToken) {
        let (pop, groups) = (self.pop.clone(), self.groups.clone());
        self.while_master(shutdown, move |stop| pop.clone().run(groups.clone(), stop))
            .await
    }

    /// Runs the transaction check-backs while master, until `shutdown`.
    pub async fn run_transaction_checks(self: Arc<Self>, shutdown: CancellationToken) {
        let transactions = self.transactions.clone();
        self.while_master(shutdown, move |stop| transactions.clone().run_checks(stop))
            .await
    }

    /// Runs `service` during each term in which this broker is master: started when it
    /// becomes master, stopped (its token cancelled, then awaited) when the role changes.
    async fn while_master<F, Fut>(&self, shutdown: CancellationToken, service: F)
    where
        F: Fn(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let mut role = self.replication.role_changes();
        loop {
            let term = *role.borrow_and_update();
            if !matches!(term, RoleState::Master { .. }) {
                tokio::select! {
                    changed = role.changed() => if changed.is_err() { return },
                    _ = shutdown.cancelled() => return,
                }
                continue;
            }
            let stop = shutdown.child_token();
            let run = service(stop.clone());
            tokio::pin!(run);
            tokio::select! {
                _ = &mut run => return,
                _ = async { drop(role.wait_for(|r| *r != term).await) } => {
                    stop.cancel();
                    run.await;
                }
            }
        }
    }

    /// Persists offsets and tables, then flushes and closes the store (after the servers
    /// stopped).
    pub fn close(&self) {
        self.persist_offsets();
        self.persist_tables();
        if let Err(e) = self.store.shutdown() {
            tracing::error!(error = %e, "store shutdown failed");
        }
    }

    /// Saves the topic and group tables if auto-creation changed them.
    fn persist_tables(&self) {
        if let Err(e) = self.topics.persist_if_dirty() {
            tracing::error!(error = %e, "persisting the topic table failed");
        }
        if let Err(e) = self.groups.persist_if_dirty() {
            tracing::error!(error = %e, "persisting the subscription group table failed");
        }
    }

    /// [`Broker::persist_tables`] on the blocking pool (file writes and fsyncs).
    fn persist_tables_soon(self: &Arc<Self>) {
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.persist_tables());
    }

    fn persist_offsets(&self) {
        if let Err(e) = self.offsets.persist() {
            tracing::error!(error = %e, "persisting consumer offsets failed");
        }
    }

    /// NO_PERMISSION for a send to a broker whose permission is read-only, or a pull from one
    /// that is not readable (RocketMQ's wording).
    fn permitted(&self, req: &RemotingCommand) -> Result<(), RemotingCommand> {
        let what = match req.code {
            rc::SEND_MESSAGE
            | rc::SEND_MESSAGE_V2
            | rc::SEND_BATCH_MESSAGE
            | rc::CONSUMER_SEND_MSG_BACK
                if !self.permission.writable() =>
            {
                "sending message"
            }
            rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE if !self.permission.readable() => {
                "pulling message"
            }
            _ => return Ok(()),
        };
        Err(crate::remoting::error_response(
            req,
            conveyor_protocol::code::response_code::NO_PERMISSION,
            format!(
                "the broker[{}] {what} is forbidden (brokerPermission {})",
                self.store_host,
                self.permission.get()
            ),
        ))
    }

    /// What this broker stores for later delivery.
    fn parked(&self) -> admin::Parked {
        admin::Parked {
            delayed: self.schedule.pending(),
            timers: self.timer.pending(),
            half: self.transactions.pending(),
        }
    }

    /// The dispatch table: which service answers which request code.
    async fn dispatch(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        self.permitted(req)?;
        // Held while the write is handled here: a master handing its group over waits for
        // it, and writes arriving meanwhile wait for the hand-over (then are relayed).
        let _permit = if relay::is_write(req.code) {
            let permit = self.replication.write_permit().await;
            if let relay::Route::Master(master) = self.relay.route(req).await? {
                drop(permit);
                return self.relay.relay(&master, req).await;
            }
            Some(permit)
        } else {
            None
        };
        match req.code {
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                let started = std::time::Instant::now();
                let answer = self.send.handle(conn, req).await;
                self.stats.observe_send(started.elapsed());
                self.relay.after_demotion(req, answer).await
            }
            rc::RECALL_MESSAGE => self.recall.handle(conn, req).await,
            rc::CONSUMER_SEND_MSG_BACK => self.send_back.handle(req).await,
            rc::PULL_MESSAGE | rc::LITE_PULL_MESSAGE => self.pull.handle(conn, req).await,
            rc::POP_MESSAGE => self.pop_requests.pop(conn, req).await,
            rc::ACK_MESSAGE => self.pop_requests.ack(req).await,
            rc::CHANGE_MESSAGE_INVISIBLETIME => self.pop_requests.change_invisible(req).await,
            rc::PEEK_MESSAGE => self.pop_requests.peek(conn, req).await,
            rc::NOTIFICATION => self.pop_requests.notification(req).await,
            rc::QUERY_ASSIGNMENT => self.assignment.query(req).await,
            rc::SET_MESSAGE_REQUEST_MODE => self.assignment.set_mode(req),
            rc::HEART_BEAT => self.client_requests.heartbeat(conn, req).await,
            rc::UNREGISTER_CLIENT => self.client_requests.unregister_client(conn, req),
            rc::GET_CONSUMER_LIST_BY_GROUP => self.client_requests.consumer_list(req),
            rc::LOCK_BATCH_MQ | rc::UNLOCK_BATCH_MQ => self.client_requests.lock_batch(req),
            rc::CHECK_CLIENT_CONFIG => self.client_requests.check_client_config(req),
            rc::QUERY_CONSUMER_OFFSET => self.offset_requests.query_consumer_offset(req),
            rc::UPDATE_CONSUMER_OFFSET => self.offset_requests.update_consumer_offset(req),
            rc::GET_MAX_OFFSET => self.offset_requests.max_offset(req),
            rc::GET_MIN_OFFSET => self.offset_requests.min_offset(req),
            rc::SEARCH_OFFSET_BY_TIMESTAMP => self.offset_requests.search_offset(req),
            rc::GET_EARLIEST_MSG_STORETIME => self.offset_requests.earliest_msg_store_time(req),
            rc::VIEW_MESSAGE_BY_ID => self.query.view_message(conn, req).await,
            rc::QUERY_MESSAGE => self.query.query_message(conn, req).await,
            rc::END_TRANSACTION => self.transactions.end_transaction(req).await,
            rc::UPDATE_AND_CREATE_TOPIC => self.admin.create_topic(req).await,
            rc::DELETE_TOPIC_IN_BROKER => self.admin.delete_topic(req).await,
            rc::GET_ALL_TOPIC_CONFIG => self.admin.all_topic_config(req),
            rc::GET_ALL_CONSUMER_OFFSET => json_body(req, self.offsets.to_json()),
            rc::GET_ALL_DELAY_OFFSET => json_body(req, self.schedule.progress_json()),
            rc::GET_TIMER_CHECK_POINT => json_body(req, self.timer.progress_json()),
            rc::GET_TOPIC_CONFIG => self.admin.topic_config(req),
            rc::GET_BROKER_CONFIG => self.admin.broker_config(req),
            rc::UPDATE_BROKER_CONFIG => self.admin.update_broker_config(req),
            rc::GET_BROKER_RUNTIME_INFO => self.admin.runtime_info(req, &self.parked()),
            rc::GET_TOPIC_STATS_INFO => self.admin.topic_stats(req),
            rc::GET_CONSUME_STATS => self.consume_admin.consume_stats(req),
            rc::GET_BROKER_CONSUME_STATS => self.consume_admin.broker_consume_stats(req),
            rc::INVOKE_BROKER_TO_RESET_OFFSET => self.consume_admin.reset_offset(req),
            rc::CLONE_GROUP_OFFSET => self.consume_admin.clone_group_offset(req),
            rc::QUERY_CONSUME_QUEUE => self.consume_admin.query_consume_queue(req),
            rc::GET_CONSUMER_CONNECTION_LIST => self.consume_admin.consumer_connections(req),
            rc::GET_PRODUCER_CONNECTION_LIST => self.consume_admin.producer_connections(req),
            rc::GET_CONSUMER_RUNNING_INFO => self.consume_admin.consumer_running_info(req).await,
            rc::GET_BROKER_HA_STATUS => json_body(
                req,
                conveyor_protocol::json::to_vec(&self.replication.runtime_info()),
            ),
            rc::GET_BROKER_EPOCH_CACHE => json_body(
                req,
                conveyor_protocol::json::to_vec(&self.replication.epoch_cache()),
            ),
            rc::CLEAN_EXPIRED_CONSUMEQUEUE => self.admin.clean_expired_queues(req),
            rc::CLEAN_UNUSED_TOPIC => self.admin.clean_unused_topics(req),
            rc::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP => self.admin.upsert_group(req),
            rc::GET_SUBSCRIPTIONGROUP_CONFIG => self.admin.group_config(req),
            rc::GET_ALL_SUBSCRIPTIONGROUP_CONFIG => self.admin.all_group_config(req),
            rc::DELETE_SUBSCRIPTIONGROUP => self.admin.delete_group(req),
            rc::QUERY_TOPIC_CONSUME_BY_WHO => self.admin.topic_consumed_by(req),
            rc::QUERY_TOPICS_BY_CONSUMER => self.admin.topics_consumed_by(req),
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
        if relay::is_write(request.code) && !self.replication.is_master() {
            return false; // relayed to the master: it waits on the network
        }
        match request.code {
            // A send waits only for a SYNC flush or slaves; topic auto-creation registers in
            // the background.
            rc::SEND_MESSAGE | rc::SEND_MESSAGE_V2 | rc::SEND_BATCH_MESSAGE => {
                !self.durability.waits()
            }
            rc::QUERY_CONSUMER_OFFSET
            | rc::UPDATE_CONSUMER_OFFSET
            | rc::GET_MAX_OFFSET
            | rc::GET_MIN_OFFSET => true,
            rc::END_TRANSACTION => !self.durability.waits(),
            _ => false,
        }
    }
}
