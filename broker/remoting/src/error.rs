//! Transport errors. The client library maps each onto its own error type, keeping the same
//! variant names; callers tell apart a server's error answer (code and remark kept, they
//! decide whether a retry makes sense) from a transport failure (reconnect or try elsewhere).

use std::time::Duration;

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::frame::FrameError;

use crate::codec::CodecError;

/// Result alias of this crate.
pub type Result<T, E = RemotingError> = std::result::Result<T, E>;

/// What can go wrong in a remoting call.
#[derive(Debug, thiserror::Error)]
pub enum RemotingError {
    /// The peer answered with a non-success response code.
    #[error("server error {code} ({name}): {remark}", name = response_code::name(*code).unwrap_or("UNKNOWN"), remark = remark.as_deref().unwrap_or(""))]
    Server {
        /// Response code ([`conveyor_protocol::code::response_code`]).
        code: i32,
        /// The remark of the response, if any.
        remark: Option<String>,
    },
    /// Could not open a TCP connection.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// Peer address.
        addr: String,
        /// Underlying error.
        source: std::io::Error,
    },
    /// Connecting did not finish in time.
    #[error("connecting to {addr} timed out after {timeout:?}")]
    ConnectTimeout {
        /// Peer address.
        addr: String,
        /// The limit.
        timeout: Duration,
    },
    /// The connection was closed (by the peer, an IO error or the client) before the response
    /// arrived.
    #[error("connection to {addr} closed")]
    ConnectionClosed {
        /// Peer address.
        addr: String,
    },
    /// No response arrived in time.
    #[error("request {code} ({name}) to {addr} timed out after {timeout:?}", name = request_code::name(*code).unwrap_or("UNKNOWN"))]
    Timeout {
        /// Peer address.
        addr: String,
        /// Request code.
        code: i32,
        /// The limit.
        timeout: Duration,
    },
    /// A frame could not be encoded or decoded.
    #[error("frame error: {0}")]
    Frame(#[from] FrameError),
    /// A socket read or write failed.
    #[error("io error: {0}")]
    Io(#[from] std::io::Error),
}

impl RemotingError {
    /// A [`RemotingError::Server`] from a response's code and remark.
    pub fn server(code: i32, remark: Option<String>) -> Self {
        Self::Server { code, remark }
    }

    /// The response code of a [`RemotingError::Server`].
    pub fn code(&self) -> Option<i32> {
        match self {
            Self::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// True for failures of the connection itself (everything but a server's answer): the
    /// request may not have been processed and another address may work.
    pub fn is_transport(&self) -> bool {
        !matches!(self, Self::Server { .. })
    }
}

impl From<CodecError> for RemotingError {
    fn from(e: CodecError) -> Self {
        match e {
            CodecError::Frame(f) => Self::Frame(f),
            CodecError::Io(io) => Self::Io(io),
        }
    }
}
