//! The transport, from `conveyor-remoting` (shared with the broker): the pooled
//! request/response client and the frame codec. Its errors convert into [`ClientError`]
//! variants of the same names.

pub use conveyor_remoting::{
    channel_handler, expect_success, CodecError, RemotingClient, RemotingCodec, RemotingConfig,
    RemotingError, ServerRequest, ServerRequestHandler,
};

use crate::error::ClientError;

impl From<RemotingError> for ClientError {
    fn from(e: RemotingError) -> Self {
        match e {
            RemotingError::Server { code, remark } => ClientError::Server { code, remark },
            RemotingError::Connect { addr, source } => ClientError::Connect { addr, source },
            RemotingError::ConnectTimeout { addr, timeout } => {
                ClientError::ConnectTimeout { addr, timeout }
            }
            RemotingError::ConnectionClosed { addr } => ClientError::ConnectionClosed { addr },
            RemotingError::Timeout {
                addr,
                code,
                timeout,
            } => ClientError::Timeout {
                addr,
                code,
                timeout,
            },
            RemotingError::Frame(f) => ClientError::Frame(f),
            RemotingError::Io(io) => ClientError::Io(io),
        }
    }
}

impl From<CodecError> for ClientError {
    fn from(e: CodecError) -> Self {
        RemotingError::from(e).into()
    }
}
