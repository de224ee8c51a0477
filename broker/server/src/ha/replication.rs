//! Replication: one broker's replication state — its role (watched by the tasks that start
//! and stop with it), the acknowledgements of its slaves as a master, and where its master is
//! as a slave. The stream, the controller client and the acks table use it; it uses none of
//! them but the acks table.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use conveyor_settings::BrokerRole;
use conveyor_store::{MessageStore, StoreError};
use tokio::sync::watch;

use super::acks::{ReplicaAcks, Requirement, Shortfall, SlaveProgress};
use super::config::ReplicationConfig;
use super::zones::Zones;

/// What this broker is right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoleState {
    /// Controller mode, until the controller names a master: no writes are taken.
    Fenced,
    /// The master of its group, in `epoch`.
    Master {
        /// The master epoch (its term in the log's epoch history).
        epoch: u32,
    },
    /// A slave of the master of `epoch` (0 when no controller gives epochs).
    Slave {
        /// The master's epoch as the controller said (0 in classic mode).
        epoch: u32,
    },
}

/// The replication service of one broker: its role, the ack table of its slaves (as a
/// master) and the address of its master (as a slave).
pub struct Replication {
    /// Settings.
    pub(super) config: ReplicationConfig,
    /// `broker-name`: slaves and master of one group share it.
    pub(super) broker_name: String,
    /// `broker-id`: this replica's id.
    pub(super) broker_id: i64,
    /// The store replicated from or into.
    pub(super) store: Arc<MessageStore>,
    /// The current role; tasks watch it to start and stop.
    pub(super) role: watch::Sender<RoleState>,
    /// As a master: how far each slave holds the log.
    pub(super) acks: ReplicaAcks,
    /// As a slave: the master's replication address (configured, or from the name server).
    pub(super) master: watch::Sender<Option<String>>,
    /// As a slave: the master's remoting address (from the name server), for metadata.
    pub(super) master_broker: std::sync::Mutex<Option<String>>,
    /// Numbers replication connections, so a slave's old connection is told from its new.
    pub(super) next_connection: AtomicU64,
    /// This broker's zone and, as a master, its slaves' zones.
    pub(super) zones: Zones,
    /// As a slave: its stream from the master is up (past the handshake).
    pub(super) following: AtomicBool,
    /// As a slave: when it last read a transfer from the master (ms since the epoch, 0:
    /// never), for `haStatus`.
    pub(super) last_read_ms: AtomicI64,
    /// As a slave: when it last wrote an acknowledgement to the master (ms, 0: never).
    pub(super) last_write_ms: AtomicI64,
    /// As a slave: log bytes received per second (`haStatus`).
    pub(super) received: std::sync::Mutex<super::flow::FlowWindow>,
    /// When this broker last stopped being master (see [`Replication::master_within`]).
    pub(super) deposed_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// Writes hold it shared while this broker handles them; a master handing its group
    /// over holds it exclusively, so no write lands after the end the new master must have
    /// (see [`Replication::write_permit`]).
    pub(super) writes: tokio::sync::RwLock<()>,
    /// Wakes the controller follower for a heartbeat now rather than at its next tick (see
    /// [`Replication::ask_controller_now`]).
    pub(super) ask_controller: tokio::sync::Notify,
    /// Called after the log was cut back (see [`Replication::on_truncate`]).
    truncation_hooks: std::sync::Mutex<Vec<TruncationHook>>,
}

/// What runs after a slave cut its log back, before it appends anything after the cut.
pub type TruncationHook = Box<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("role", &*self.role.borrow())
            .field("broker_name", &self.broker_name)
            .field("broker_id", &self.broker_id)
            .finish()
    }
}

impl Replication {
    /// The service for a broker of `broker_name`/`broker_id` on `store`. In controller mode
    /// it starts fenced (no writes) until the controller names a role. Otherwise a master
    /// starts a new term in the store's epoch history at once (every start as master is a new
    /// term, so what it writes can be told apart from what another master wrote after the
    /// last shared point), and a SYNC_MASTER holds consumers back at the high watermark, what
    /// the log already held counting as confirmed.
    pub fn open(
        config: ReplicationConfig,
        broker_name: &str,
        broker_id: i64,
        store: Arc<MessageStore>,
    ) -> Result<Self, StoreError> {
        let master = (!config.master_address.is_empty()).then(|| config.master_address.clone());
        let repl = Self {
            broker_name: broker_name.to_string(),
            broker_id,
            acks: ReplicaAcks::new(Requirement::Count(0), config.max_gap_bytes, 0),
            store,
            role: watch::Sender::new(RoleState::Fenced),
            master: watch::Sender::new(master),
            master_broker: std::sync::Mutex::new(None),
            next_connection: AtomicU64::new(1),
            zones: Zones::new(None),
            following: AtomicBool::new(false),
            last_read_ms: AtomicI64::new(0),
            last_write_ms: AtomicI64::new(0),
            received: Default::default(),
            writes: tokio::sync::RwLock::new(()),
            ask_controller: tokio::sync::Notify::new(),
            deposed_at: std::sync::Mutex::new(None),
            truncation_hooks: std::sync::Mutex::new(Vec::new()),
            config,
        };
        if !repl.config.controller_mode() {
            if repl.config.role == BrokerRole::Slave {
                repl.role.send_replace(RoleState::Slave { epoch: 0 });
            } else {
                let epoch = repl.store.epochs().last_epoch() + 1;
                let required = Requirement::Count(repl.config.required_slaves());
                repl.become_master(epoch, required)?;
            }
        }
        Ok(repl)
    }

    /// Registers `hook`, called each time this replica's log is cut back to the point it
    /// shares with a new master (or restarted empty at the master's first segment), before
    /// the first byte after the cut is appended. Progress kept outside the log (delay, timer
    /// and transaction services) that went past the cut described records that are gone,
    /// whose queue offsets the new master's records will reuse: the hook pulls it back while
    /// the queues still end at the cut.
    pub fn on_truncate(&self, hook: TruncationHook) {
        self.truncation_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(hook);
    }

    /// Runs the truncation hooks.
    pub(super) fn truncated(&self) {
        for hook in self
            .truncation_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            hook();
        }
    }

    /// Becomes master in `epoch` (blocking: the epoch is written to disk): writes are taken
    /// again, `required` slaves must acknowledge each (when synchronous), and everything the
    /// log holds now counts as confirmed.
    pub fn become_master(&self, epoch: u32, required: Requirement) -> Result<(), StoreError> {
        let term = self.store.begin_epoch(epoch)?;
        let end = self.store.commit_log_max_offset();
        let required = if self.config.synchronous() {
            required
        } else {
            Requirement::Count(0)
        };
        self.acks.reset(required.clone(), end);
        self.store
            .set_confirm_offset(if required.is_none() { u64::MAX } else { end });
        self.role.send_replace(RoleState::Master { epoch });
        tracing::info!(
            epoch,
            start = term.start_offset,
            ?required,
            "master of its group"
        );
        Ok(())
    }

    /// Becomes a slave of the master of `epoch`, whose replication stream is at `ha_addr`
    /// and remoting server at `master_addr`: writes are refused; the stream (re)starts there,
    /// and a log that went past the point it shares with that master is cut back first.
    pub fn become_slave(&self, epoch: u32, master_addr: &str, ha_addr: &str) {
        self.acks.reset(Requirement::Count(0), 0);
        *self.master_broker.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(master_addr.to_string());
        self.master.send_replace(Some(ha_addr.to_string()));
        let previous = self.role.send_replace(RoleState::Slave { epoch });
        self.note_deposed(previous);
        if previous != (RoleState::Slave { epoch }) {
            tracing::info!(epoch, master = master_addr, "slave of its group's master");
        }
    }

    fn note_deposed(&self, previous: RoleState) {
        if matches!(previous, RoleState::Master { .. }) {
            *self.deposed_at.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(std::time::Instant::now());
        }
    }

    /// True while this broker is master, or stopped being master less than `window` ago:
    /// clients keep its address as their master's until their next route poll.
    pub fn master_within(&self, window: std::time::Duration) -> bool {
        self.is_master()
            || self
                .deposed_at
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|at| at.elapsed() < window)
    }

    /// Stops taking writes until the controller names a master (controller mode).
    pub fn fence(&self) {
        let previous = self.role.send_replace(RoleState::Fenced);
        self.note_deposed(previous);
        if previous != RoleState::Fenced {
            tracing::warn!("fenced: no master is known for this group");
        }
        self.acks.reset(Requirement::Count(0), 0);
    }

    /// The current role.
    pub fn role_state(&self) -> RoleState {
        *self.role.borrow()
    }

    /// Follows role changes.
    pub fn role_changes(&self) -> watch::Receiver<RoleState> {
        self.role.subscribe()
    }

    /// The id to register with name servers under: this replica's id in classic mode; in
    /// controller mode 0 for the master and the replica id + 1 for slaves (clients take id 0
    /// for the master, so no slave may use it).
    pub fn registration_id(&self) -> i64 {
        match self.role_state() {
            RoleState::Master { .. } if self.config.controller_mode() => 0,
            _ => self.slave_registration_id(self.broker_id),
        }
    }

    /// The address to register with name servers under, this broker's own being `own`: the
    /// group's address while master in controller mode, when one is set (see
    /// `[replication] group-address`).
    pub fn registration_addr<'a>(&'a self, own: &'a str) -> &'a str {
        match (&self.config.group_address, self.registration_id()) {
            (Some(group), 0) if self.config.controller_mode() => group,
            _ => own,
        }
    }

    /// The id a slave of replica id `replica_id` registers under (see
    /// [`Replication::registration_id`]).
    fn slave_registration_id(&self, replica_id: i64) -> i64 {
        if self.config.controller_mode() {
            replica_id + 1
        } else {
            replica_id
        }
    }

    /// This broker's zone and its slaves'.
    pub fn zones(&self) -> &Zones {
        &self.zones
    }

    /// The registration id of the replica a consumer in `zone` should read from, as far as
    /// this broker knows: itself when it runs there (a slave only while it follows its
    /// master), else, on a master, the lowest available slave there (connected and close
    /// behind). `None`: no replica of the group is known there.
    pub fn replica_in_zone(&self, zone: &str) -> Option<i64> {
        if self.zones.own().as_deref() == Some(zone) && (self.is_master() || self.is_following()) {
            return Some(self.registration_id());
        }
        if !self.is_master() {
            return None;
        }
        let end = self.store.commit_log_max_offset();
        self.zones
            .slaves_in(zone)
            .into_iter()
            .find(|id| self.acks.available(*id, end))
            .map(|id| self.slave_registration_id(id))
    }

    /// Taken by every write (send, send-back, end of transaction, offset commit) before it
    /// is routed and for as long as it is handled here. It waits while this master hands its
    /// group over: then the write goes on once the hand-over ended, through the new master
    /// (relayed) if it happened.
    pub async fn write_permit(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.writes.read().await
    }

    /// The write permit for the broker's own writers (the delay, timer and transaction
    /// services), if this broker is still master once it holds it. A hand-over holds writes
    /// while the target catches up with the end it measured: a delivery appended meanwhile
    /// would lie past that end, be cut from the log, and could be skipped by the new master
    /// if the delivery progress reached it. `None`: the role changed; the service stops.
    pub async fn own_write_permit(&self) -> Option<tokio::sync::RwLockReadGuard<'_, ()>> {
        let permit = self.writes.read().await;
        self.is_master().then_some(permit)
    }

    /// Has the controller follower heartbeat at once (controller mode): a replica that a
    /// former master relays writes to may have been elected since its last heartbeat, and
    /// those writes wait until it knows (a heartbeat interval, stretched by load, would eat
    /// the client's send timeout).
    pub fn ask_controller_now(&self) {
        self.ask_controller.notify_one();
    }

    /// As a slave: true while its replication stream from the master is up.
    pub fn is_following(&self) -> bool {
        self.following.load(Ordering::Acquire)
    }

    /// The master epoch this broker is in (0 before any).
    pub fn epoch(&self) -> u32 {
        match self.role_state() {
            RoleState::Master { epoch } | RoleState::Slave { epoch } => epoch,
            RoleState::Fenced => 0,
        }
    }

    /// This replica's id.
    pub fn broker_id(&self) -> i64 {
        self.broker_id
    }

    /// `broker-name`.
    pub fn broker_name(&self) -> &str {
        &self.broker_name
    }

    /// The store replicated.
    pub fn store(&self) -> &Arc<MessageStore> {
        &self.store
    }

    /// The ack table.
    pub fn acks(&self) -> &ReplicaAcks {
        &self.acks
    }

    /// The configured role (classic mode).
    pub fn role(&self) -> BrokerRole {
        self.config.role
    }

    /// True while this broker is its group's master.
    pub fn is_master(&self) -> bool {
        matches!(self.role_state(), RoleState::Master { .. })
    }

    /// True while this broker is a master that waits for slaves.
    pub fn is_sync(&self) -> bool {
        self.is_master() && !self.acks.required().is_none()
    }

    /// True when an append may have to wait for slaves (a send cannot be answered inline).
    pub fn may_wait(&self) -> bool {
        self.config.synchronous()
    }

    /// The settings.
    pub fn config(&self) -> &ReplicationConfig {
        &self.config
    }

    /// The connected slaves and what they acknowledged (a master).
    pub fn slaves(&self) -> Vec<SlaveProgress> {
        self.acks.slaves()
    }

    /// The high watermark as acknowledgements set it.
    pub fn confirmed(&self) -> u64 {
        self.acks.confirmed()
    }

    /// Waits until enough slaves hold the log below `end` (a SYNC_MASTER; anything else
    /// returns at once).
    pub async fn replicated(&self, end: u64) -> Result<(), Shortfall> {
        if !self.is_master() {
            // Demoted while the send waited: it is not known to be replicated.
            return Err(Shortfall::SlaveNotAvailable);
        }
        let wait = self
            .acks
            .wait_for(end, self.store.commit_log_max_offset())?;
        let Some(rx) = wait else {
            return Ok(());
        };
        match tokio::time::timeout(self.config.slave_timeout(), rx).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Shortfall::SlaveTimeout),
        }
    }

    /// The master's remoting address, once the name server told it (a slave).
    pub fn master_broker(&self) -> Option<String> {
        self.master_broker
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Tells a classic-mode slave where its master is (the name server's answer to a
    /// registration): `master_addr` for metadata, `ha_addr` for the replication stream (a
    /// configured `master-address` wins for the stream). In controller mode the controller
    /// says it instead.
    pub fn learn_master(&self, master_addr: &str, ha_addr: &str) {
        if self.is_master() || self.config.controller_mode() {
            return;
        }
        if !master_addr.is_empty() {
            *self.master_broker.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(master_addr.to_string());
        }
        if !self.config.master_address.is_empty() || ha_addr.is_empty() {
            return;
        }
        self.master.send_if_modified(|current| {
            if current.as_deref() == Some(ha_addr) {
                return false;
            }
            tracing::info!(master = ha_addr, "master's replication address learnt");
            *current = Some(ha_addr.to_string());
            true
        });
    }
}
