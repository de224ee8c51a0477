//! The remoting transport shared by the name server and the broker: frames over TCP, one task
//! per connection, requests handled concurrently (a long-polling pull must not block the
//! connection), responses and server-initiated requests written by one writer task.

mod connection;
mod link;
mod server;

pub use connection::{CallError, Connection, ConnectionId};
/// The tokio-util framing shared with the client (one adapter for both sides).
pub use conveyor_remoting::{CodecError, RemotingCodec};
pub use link::Link;
pub(crate) use server::not_supported;
pub use server::{serve, Processor, ServeLimits};

use conveyor_protocol::command::RemotingCommand;

/// Builds an error response with a remark, the way RocketMQ answers bad requests.
pub fn error_response(
    request: &RemotingCommand,
    code: i32,
    remark: impl Into<String>,
) -> RemotingCommand {
    RemotingCommand::response_to(request, code).with_remark(remark)
}
