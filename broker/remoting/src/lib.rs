//! `conveyor-remoting`: the RocketMQ remoting transport that Conveyor's client and broker share
//! (docs/protocol.md §1, §2).
//!
//! - [`codec`]: the tokio-util framing over the protocol crate's frame codec, used by every
//!   connection on both sides.
//! - [`tls`]: TLS of the clients' connections (process-wide, as RocketMQ's `tls.enable`).
//! - [`acl`]: the ACL request signature (RocketMQ's `AclClientRPCHook`), made and checked.
//! - [`client`]: the pooled, multiplexed request/response client (producers, consumers, admin
//!   tools, and the broker's persistent connections to its name servers).
//!
//! It lives apart from `conveyor-protocol` so that the protocol stays free of async runtime
//! dependencies, and apart from `conveyor-client` so that the broker does not depend on the
//! client library.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod acl;
pub mod client;
pub mod codec;
pub mod error;
pub mod tls;

pub use client::{
    channel_handler, expect_success, RemotingClient, RemotingConfig, ServerRequest,
    ServerRequestHandler,
};
pub use codec::{CodecError, RemotingCodec};
pub use error::{RemotingError, Result};
