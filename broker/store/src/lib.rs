//! `conveyor-store`: Conveyor's storage engine, RocketMQ's design in Rust. No networking.
//!
//! Every message is appended to one [`commit_log::CommitLog`] of memory-mapped segments; a
//! dispatcher builds a [`consume_queue::ConsumeQueue`] per (topic, queue id) and an
//! [`index::IndexService`] for key lookups from it; a flush service makes appends durable
//! (group-committed SYNC or interval-driven ASYNC); a checkpoint plus a CRC-verified scan
//! recover a consistent store after any crash; a clean service enforces retention and disk
//! watermarks. [`MessageStore`] ties them together.
//!
//! Module layering (no module imports one that imports it): `mapped_file` ←
//! `mapped_file_queue` ← `commit_log`/`consume_queue` ← `core` (shared state) ← `dispatch`,
//! `retention`, `prefault`, `recovery` ← `replica` ← `services` ← `store` (the facade).
//! `epoch` (master terms) is a leaf that `core` holds.
//!
//! On disk (like RocketMQ's): `commitlog/`, `consumequeue/<topic>/<queueId>/`, `index/`,
//! `config/`, `checkpoint`, `epochFileCheckpoint`, `abort`, `lock`.
#![warn(missing_docs)]

mod allocate;
pub mod checkpoint;
pub mod commit_log;
pub mod config;
pub mod consume_queue;
mod core;
mod disk;
mod dispatch;
pub mod epoch;
pub mod error;
mod filter;
mod flush;
pub mod index;
mod mapped_file;
mod mapped_file_queue;
mod prefault;
mod queues;
mod recovery;
mod replica;
mod retention;
mod services;
mod shutdown;
mod store;

pub use commit_log::{Placement, RecordSlice};
pub use config::{FlushMode, StoreConfig};
pub use consume_queue::CqEntry;
pub use core::ArrivalListener;
pub use disk::{disk_space, disk_usage, DiskSpace};
pub use epoch::{EpochEntry, EpochHistory};
pub use error::{ReadSite, Result, StoreError};
pub use filter::{AcceptAll, MessageFilter};
pub use flush::FlushTicket;
pub use recovery::RecoveryReport;
pub use store::{validate_topic, GetResult, GetStatus, MessageStore, PutResult, PutStatus};
