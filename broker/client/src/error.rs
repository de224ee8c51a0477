//! The one error type of the client. Callers mostly need to tell three things apart: the
//! broker answered with an error code (keep the code and remark: they decide whether a retry
//! makes sense), the transport failed (reconnect / try elsewhere), or the input was invalid.

use conveyor_protocol::batch::BatchError;
use conveyor_protocol::code::response_code;
use conveyor_protocol::command::HeaderError;
use conveyor_protocol::frame::FrameError;
use conveyor_protocol::json::JsonError;
use conveyor_protocol::message::RecordError;
use conveyor_remoting::RemotingError;

/// Result alias of this crate.
pub type Result<T, E = ClientError> = std::result::Result<T, E>;

/// Everything that can go wrong in a client call.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The peer answered with a non-success response code.
    #[error("server error {code} ({name}): {remark}", name = response_code::name(*code).unwrap_or("UNKNOWN"), remark = remark.as_deref().unwrap_or(""))]
    Server {
        /// Response code ([`conveyor_protocol::code::response_code`]).
        code: i32,
        /// The remark of the response, if any.
        remark: Option<String>,
    },
    /// The transport failed (connect, close, timeout, socket, framing): the request may not
    /// have been processed and another address may work.
    #[error(transparent)]
    Transport(RemotingError),
    /// A response header lacks a field or has a malformed one.
    #[error("bad response header: {0}")]
    Header(#[from] HeaderError),
    /// A JSON body could not be parsed or produced.
    #[error(transparent)]
    Json(#[from] JsonError),
    /// A message record in a response body is malformed.
    #[error("bad message record: {0}")]
    Record(#[from] RecordError),
    /// A batch could not be encoded.
    #[error("bad batch: {0}")]
    Batch(#[from] BatchError),
    /// No name-server address was configured.
    #[error("no name server address configured")]
    NoNameServer,
    /// The topic has no usable queue (no route, or no writable/readable queue).
    #[error("no usable route for topic {topic}")]
    NoRoute {
        /// Topic.
        topic: String,
    },
    /// A broker name is not in the route, or has no master address.
    #[error("broker {broker_name} has no master address in the route")]
    NoBroker {
        /// Broker name.
        broker_name: String,
    },
    /// The caller passed something unusable.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl From<RemotingError> for ClientError {
    fn from(e: RemotingError) -> Self {
        match e {
            RemotingError::Server { code, remark } => ClientError::Server { code, remark },
            transport => ClientError::Transport(transport),
        }
    }
}

impl From<FrameError> for ClientError {
    fn from(e: FrameError) -> Self {
        ClientError::Transport(RemotingError::Frame(e))
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Transport(RemotingError::Io(e))
    }
}

/// Response codes on which a producer retries on another queue (Java's set, §3.2).
pub const RETRYABLE_SEND_CODES: [i32; 8] = [
    response_code::TOPIC_NOT_EXIST,
    response_code::SERVICE_NOT_AVAILABLE,
    response_code::SYSTEM_ERROR,
    response_code::SYSTEM_BUSY,
    response_code::NO_PERMISSION,
    response_code::NO_BUYER_ID,
    response_code::NOT_IN_CURRENT_UNIT,
    response_code::GO_AWAY,
];

impl ClientError {
    /// A [`ClientError::Server`] from a response's code and remark.
    pub fn server(code: i32, remark: Option<String>) -> Self {
        ClientError::Server { code, remark }
    }

    /// The response code when the peer answered with an error.
    pub fn code(&self) -> Option<i32> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for failures of the connection itself (connect, close, timeout, IO, framing):
    /// the request may not have been processed and another address may work.
    pub fn is_transport(&self) -> bool {
        matches!(self, ClientError::Transport(_))
    }

    /// True when a send that failed this way should be retried on another queue: transport
    /// failures and the response codes of [`RETRYABLE_SEND_CODES`].
    pub fn is_retryable_send(&self) -> bool {
        match self {
            ClientError::Server { code, .. } => RETRYABLE_SEND_CODES.contains(code),
            e => e.is_transport(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_error_text_and_classification() {
        let e = ClientError::server(17, Some("topic[T] not exist".into()));
        assert_eq!(e.code(), Some(17));
        assert_eq!(
            e.to_string(),
            "server error 17 (TOPIC_NOT_EXIST): topic[T] not exist"
        );
        assert!(e.is_retryable_send());
        assert!(!e.is_transport());
        assert!(!ClientError::server(13, None).is_retryable_send());
        let t = ClientError::from(RemotingError::Timeout {
            addr: "a:1".into(),
            code: 310,
            timeout: std::time::Duration::from_secs(1),
        });
        assert!(t.is_transport() && t.is_retryable_send());
        assert!(t.to_string().contains("SEND_MESSAGE_V2"));
    }
}
