//! What every request handler answers with, and the few ways of building an answer they all
//! share. A leaf: it imports no broker service, so any service may use it without the
//! handlers depending on each other (or on the broker that composes them).

use conveyor_protocol::code::{response_code as resp, version};
use conveyor_protocol::command::{HeaderError, RemotingCommand};
use conveyor_protocol::json::JsonError;
use conveyor_store::StoreError;

pub use crate::remoting::error_response;
pub(crate) use crate::remoting::not_supported;

/// A handler's outcome: the response, or an error response.
pub type Reply = Result<RemotingCommand, RemotingCommand>;

/// A success response to `req`, stamped with the broker's protocol version.
pub fn ok(req: &RemotingCommand) -> RemotingCommand {
    let mut r = RemotingCommand::response_to(req, resp::SUCCESS);
    r.version = version::CURRENT;
    r
}

/// Maps a header error to an INVALID_PARAMETER answer whose remark names the field.
pub fn bad_header(req: &RemotingCommand) -> impl Fn(HeaderError) -> RemotingCommand + '_ {
    move |e| error_response(req, resp::INVALID_PARAMETER, e.to_string())
}

/// Maps a failure to encode a response body to SYSTEM_ERROR.
pub fn internal(req: &RemotingCommand) -> impl Fn(JsonError) -> RemotingCommand + '_ {
    move |e| error_response(req, resp::SYSTEM_ERROR, e.to_string())
}

/// Maps a store error to the RocketMQ response code clients understand.
pub fn store_error_response(req: &RemotingCommand, e: &StoreError) -> RemotingCommand {
    let code = match e {
        StoreError::MessageTooLarge { .. } | StoreError::InvalidMessage(_) => resp::MESSAGE_ILLEGAL,
        StoreError::InvalidTopic { .. } => resp::INVALID_PARAMETER,
        StoreError::DiskFull(_) | StoreError::ShutDown | StoreError::FlushFailed(_) => {
            resp::SERVICE_NOT_AVAILABLE
        }
        StoreError::InvalidConfig(_) => resp::INVALID_PARAMETER,
        // An unreadable block (EIO): only that read fails, with RocketMQ's code for it.
        StoreError::ReadFailed { .. } => resp::SYSTEM_ERROR,
        _ => resp::SYSTEM_ERROR,
    };
    error_response(req, code, e.to_string())
}

/// A success answer carrying a JSON body, or SYSTEM_ERROR when it could not be encoded.
pub fn json_body<E: std::fmt::Display>(req: &RemotingCommand, body: Result<Vec<u8>, E>) -> Reply {
    let body = body.map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
    Ok(ok(req).with_body(body))
}
