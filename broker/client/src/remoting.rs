//! The transport, from `conveyor-remoting` (shared with the broker): the pooled
//! request/response client and the frame codec. Its errors convert into [`ClientError`]
//! (server answers as [`ClientError::Server`], the rest as [`ClientError::Transport`]).

pub use conveyor_remoting::{
    channel_handler, expect_success, CodecError, RemotingClient, RemotingCodec, RemotingConfig,
    RemotingError, ServerRequest, ServerRequestHandler,
};

use crate::error::ClientError;

impl From<CodecError> for ClientError {
    fn from(e: CodecError) -> Self {
        RemotingError::from(e).into()
    }
}
