//! Master/slave replication of the CommitLog (RocketMQ's HA), on its own port.
//!
//! A slave ([`slave`]) connects to its group's master ([`master`]), both state their log and
//! epoch history, the slave cuts its log back to the point both share if it went past it,
//! and from there the master streams CommitLog bytes that the slave appends at the same
//! offsets (its ConsumeQueues and index are built from them by its own dispatcher, as on
//! the master). The slave acknowledges what it holds; [`acks`] turns acknowledgements into
//! the high watermark and releases the sends waiting for it.
//!
//! Durability modes (`broker-role`): a SYNC_MASTER answers SEND_OK once `in-sync-replicas`
//! copies (its own included) hold the message, and consumers see a record only then (the
//! high watermark); an ASYNC_MASTER answers after its own flush and slaves follow. A slave
//! refuses writes. Frames: [`frame`], their IO: [`wire`], settings: [`config`].

pub mod acks;
pub mod config;
pub mod frame;
mod master;
mod slave;
mod wire;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use conveyor_settings::BrokerRole;
use conveyor_store::{MessageStore, StoreError};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use acks::{ReplicaAcks, Shortfall, SlaveProgress};
pub use config::ReplicationConfig;

/// Why a replication connection ended.
#[derive(Debug, thiserror::Error)]
pub enum HaError {
    /// The socket failed.
    #[error("replication connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer sent bytes that are not a frame.
    #[error(transparent)]
    Frame(#[from] frame::FrameError),
    /// The peer sent a frame out of turn or with impossible values.
    #[error("replication protocol: {0}")]
    Protocol(String),
    /// The peer refused the connection (or this side refused it).
    #[error("replication refused: {0}")]
    Refused(String),
    /// The peer sent nothing for this long.
    #[error("no replication frame for {0:?}")]
    Silent(Duration),
    /// The peer took no bytes for this long.
    #[error("the peer accepted no replication bytes for {0:?}")]
    Stuck(Duration),
    /// This replica's log cannot follow the master's without losing data it cannot judge.
    #[error("replica diverged: {0}")]
    Diverged(String),
    /// The store refused the replicated bytes or a truncation.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The replication service of one broker: its role, the ack table of its slaves (as a
/// master) and the address of its master (as a slave).
pub struct Replication {
    /// Settings, the role included.
    config: ReplicationConfig,
    /// `broker-name`: slaves and master of one group share it.
    broker_name: String,
    /// `broker-id`.
    broker_id: i64,
    /// The store replicated from or into.
    store: Arc<MessageStore>,
    /// As a master: how far each slave holds the log.
    acks: ReplicaAcks,
    /// As a slave: the master's replication address (configured, or from the name server).
    master: watch::Sender<Option<String>>,
    /// As a slave: the master's remoting address (from the name server), for metadata.
    master_broker: std::sync::Mutex<Option<String>>,
    /// Numbers replication connections, so a slave's old connection is told from its new.
    next_connection: AtomicU64,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("role", &self.config.role)
            .field("broker_name", &self.broker_name)
            .field("broker_id", &self.broker_id)
            .finish()
    }
}

impl Replication {
    /// The service for a broker of `broker_name`/`broker_id` on `store`. A master starts a
    /// new term in the store's epoch history, so every byte it sends belongs to a term; a SYNC_MASTER holds consumers back at the high watermark from here on, what the
    /// log already held counting as confirmed.
    pub fn open(
        config: ReplicationConfig,
        broker_name: &str,
        broker_id: i64,
        store: Arc<MessageStore>,
    ) -> Result<Self, StoreError> {
        let end = store.commit_log_max_offset();
        if config.role != BrokerRole::Slave {
            // Every start as master is a new term: what this broker writes from here on can
            // be told apart from what another master wrote after the last shared point (until
            // the controller hands out epochs, a restart is the only way a role changes).
            let epoch = store.epochs().last_epoch() + 1;
            let term = store.begin_epoch(epoch)?;
            tracing::info!(
                epoch,
                start = term.start_offset,
                role = config.role.as_str(),
                "master term"
            );
        }
        let acks = ReplicaAcks::new(config.required_slaves(), config.max_gap_bytes, end);
        if acks.required() > 0 {
            store.set_confirm_offset(end);
        }
        let master = (!config.master_address.is_empty()).then(|| config.master_address.clone());
        Ok(Self {
            broker_name: broker_name.to_string(),
            broker_id,
            store,
            acks,
            master: watch::Sender::new(master),
            master_broker: std::sync::Mutex::new(None),
            next_connection: AtomicU64::new(1),
            config,
        })
    }

    /// The broker's role.
    pub fn role(&self) -> BrokerRole {
        self.config.role
    }

    /// True unless this broker is a slave.
    pub fn is_master(&self) -> bool {
        self.config.role != BrokerRole::Slave
    }

    /// True for a SYNC_MASTER that waits for slaves.
    pub fn is_sync(&self) -> bool {
        self.acks.required() > 0
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

    /// Tells a slave where its master is (the name server's answer to a registration):
    /// `master_addr` for metadata, `ha_addr` for the replication stream (a configured
    /// `master-address` wins for the stream).
    pub fn learn_master(&self, master_addr: &str, ha_addr: &str) {
        if self.is_master() {
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

    /// Runs until `shutdown`: serves slaves on `listener`, and follows the master when this
    /// broker is a slave.
    pub async fn run(self: Arc<Self>, listener: TcpListener, shutdown: CancellationToken) {
        let serving = master::serve(self.clone(), listener, shutdown.clone());
        if self.is_master() {
            serving.await;
        } else {
            tokio::join!(serving, slave::follow(self.clone(), shutdown));
        }
    }
}
