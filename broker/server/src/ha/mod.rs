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
pub mod auth;
pub mod config;
mod controlled;
mod error;
pub mod flow;
pub mod frame;
mod master;
mod replication;
mod slave;
pub mod status;
mod wire;
pub mod zones;

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use acks::{ReplicaAcks, Requirement, Shortfall, SlaveProgress};
pub use config::ReplicationConfig;
pub use error::HaError;
pub use replication::{Replication, RoleState};
pub use zones::Zones;

impl Replication {
    /// Runs until `shutdown`: serves slaves on `listener` (TLS as `tls` allows) while
    /// master, follows the master while slave, and in controller mode heartbeats to the
    /// controller and does what it says.
    pub async fn run(
        self: Arc<Self>,
        listener: TcpListener,
        tls: crate::tls::Acceptor,
        shutdown: CancellationToken,
    ) {
        let serving = master::serve(self.clone(), listener, tls, shutdown.clone());
        let following = slave::follow(self.clone(), shutdown.clone());
        if self.config.controller_mode() {
            tokio::join!(serving, following, controlled::run(self.clone(), shutdown));
        } else {
            tokio::join!(serving, following);
        }
    }

    /// Before a graceful stop (SIGTERM: a node drain, a rolling restart, Ctrl-C): a
    /// controller-mode master hands its group over to an in-sync slave and waits, bounded,
    /// until it is a slave itself, so that the stop loses nothing it acknowledged, under
    /// asynchronous replication too, and clients meet a master at once instead of after the
    /// controller's failure detection. Returns at once in any other case.
    pub async fn hand_over_before_stop(self: &Arc<Self>) {
        if self.config.controller_mode() {
            controlled::hand_over_before_stop(self).await;
        }
    }
}
