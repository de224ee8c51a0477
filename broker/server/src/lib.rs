//! `conveyor`: the name server and broker of Conveyor, speaking Apache RocketMQ's remoting
//! protocol so unmodified RocketMQ clients work against it.
//!
//! - [`remoting`]: frames over TCP, per-connection tasks, outbound links.
//! - [`namesrv`]: the route table and its requests.
//! - [`broker`]: send, pull (long polling), consumer groups, offsets, admin, registration,
//!   delay levels, timers and transactions on top of `conveyor-store`, as small services
//!   that [`broker::Broker`] composes and dispatches requests to.
//! - [`controller`]: the replication controller (who is master, epochs, in-sync sets).
//! - [`ha`]: master/slave replication of the CommitLog on its own port.
//! - [`health`]: `/healthz`, `/readyz`, `/metrics`.
//! - [`app`]: starting and stopping a process in any role (`conveyor standalone` included).
//! - [`acl`]: who may make which request (RocketMQ's ACL: signatures, users file, permissions).
//! - [`tls`]: TLS beside plaintext on the client ports (permissive, enforcing, reloaded certificates).
//! - [`settings`]: TOML file + environment + flags → [`app::AppConfig`].
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acl;
pub mod app;
pub mod broker;
pub mod controller;
pub mod exposition;
pub mod grpc;
pub mod ha;
pub mod health;
pub mod namesrv;
pub mod remoting;
pub mod settings;
pub mod tls;
pub mod unsupported;
