//! `conveyor-client`: the async Rust client for Conveyor, speaking Apache RocketMQ's remoting
//! protocol through the same codec as the broker (`conveyor-protocol`).
//!
//! It exists so that Conveyor's own bench, CLI, tests and operator do not depend on a Java or
//! Go client. Layers, bottom up:
//!
//! - [`remoting`]: pooled TCP connections, request/response matching by opaque, timeouts,
//!   oneway sends and server-initiated requests.
//! - [`namesrv`]: name-server calls (routes, cluster info, topic list) with failover and a
//!   route cache.
//! - [`route`]: from a topic route to the queues a producer or consumer may use.
//! - [`message`], [`uniq_id`], [`subscription`]: what is sent, how it is identified, what
//!   is received.
//! - [`producer`], [`consumer`], [`admin`]: the user-facing clients.
//! - [`bench`] and [`histogram`]: reusable load generators and their latency statistics.
//!
//! Every fallible call returns [`ClientError`]; broker refusals carry the response code and
//! remark ([`ClientError::Server`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admin;
pub mod bench;
pub mod consumer;
pub mod error;
pub mod group;
pub mod histogram;
pub mod http;
pub mod identity;
pub mod message;
pub mod namesrv;
pub mod producer;
pub mod remoting;
pub mod route;
pub mod subscription;
/// UNIQ_KEY ids: the protocol crate owns the layout, shared with the broker.
pub use conveyor_protocol::uniq_id;

pub use admin::Admin;
pub use consumer::{PullConsumer, PullConsumerConfig, PullResult, PullStatus};
pub use conveyor_protocol::message::StoredMessage;
pub use conveyor_protocol::route::MessageQueue;
pub use error::{ClientError, Result};
pub use message::Message;
pub use namesrv::NameServerClient;
pub use producer::{Producer, ProducerConfig, SendResult, SendStatus};
pub use remoting::{RemotingClient, RemotingConfig, ServerRequest};
pub use subscription::Subscription;
