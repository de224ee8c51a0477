//! The remoting transport shared by the name server and the broker: frames over TCP, one task
//! per connection, requests handled concurrently (a long-polling pull must not block the
//! connection), responses and server-initiated requests written by one writer task.

mod connection;
mod link;
mod server;

pub use connection::{CallError, Connection, ConnectionId, InProcessReceiver};
/// The tokio-util framing shared with the client (one adapter for both sides).
pub use conveyor_remoting::{CodecError, RemotingCodec};
pub use link::Link;
pub use server::error_response;
pub(crate) use server::not_supported;
pub use server::{serve, Processor, ServeLimits};
