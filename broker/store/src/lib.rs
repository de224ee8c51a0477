//! `conveyor-store`: Conveyor's storage engine, RocketMQ's design in Rust. No networking.
//!
//! Every message is appended to one [`commit_log::CommitLog`] of memory-mapped segments; a
//! dispatcher builds a [`consume_queue::ConsumeQueue`] per (topic, queue id) and an
//! [`index::IndexService`] for key lookups from it; a flush service makes appends durable
//! (group-committed SYNC or interval-driven ASYNC); a checkpoint plus a CRC-verified scan
//! recover a consistent store after any crash; a clean service enforces retention and disk
//! watermarks. [`MessageStore`] ties them together.
//!
//! On disk (like RocketMQ's): `commitlog/`, `consumequeue/<topic>/<queueId>/`, `index/`,
//! `config/`, `checkpoint`, `abort`, `lock`.

pub mod checkpoint;
pub mod commit_log;
pub mod config;
pub mod consume_queue;
mod dispatch;
pub mod error;
mod flush;
pub mod index;
pub mod mapped_file;
mod retention;
mod store;

pub use commit_log::{Placement, RecordSlice};
pub use config::{FlushMode, StoreConfig};
pub use consume_queue::CqEntry;
pub use error::{Result, StoreError};
pub use retention::disk_usage;
pub use store::{
    validate_topic, AcceptAll, ArrivalListener, GetResult, GetStatus, MessageFilter, MessageStore,
    PutResult, PutStatus, RecoveryReport,
};
