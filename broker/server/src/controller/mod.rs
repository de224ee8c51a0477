//! The replication controller (RocketMQ 5's controller mode): it decides which replica of
//! each broker group is master, in which epoch, and which replicas are in sync, and it
//! replaces a master that goes silent. Brokers register with it, heartbeat to it (epoch and
//! log end) and follow what it answers; a master asks it to change the in-sync set.
//!
//! - [`decide`]: the decisions, pure (elect only from the in-sync set, epochs, compare-and-
//!   set of the in-sync set).
//! - [`service`]: the state behind a lock, heartbeats, detection of dead masters.
//! - [`state_store`]: where the state is saved before anyone hears of it (a file here; the
//!   Kubernetes API in the operator).
//! - [`processor`]: the remoting requests.
//! - [`endpoint`]: a stable address per group that leads clients to its current master.
//!
//! It runs as `conveyor controller` (one process; its state survives restarts in its data
//! directory).

pub mod decide;
pub mod endpoint;
pub mod processor;
pub mod service;
pub mod state_store;

pub use service::{Controller, ControllerConfig, ReplicaInfo, Serving, Switchover};
