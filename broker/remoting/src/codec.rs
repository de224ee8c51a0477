//! The tokio-util codec over [`FrameCodec`]: decodes frames (either header serialization) and
//! encodes them with a JSON header. One adapter for the client and the broker.

use bytes::BytesMut;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::frame::{FrameCodec, FrameError};
use tokio_util::codec::{Decoder, Encoder};

/// tokio-util codec over [`FrameCodec`].
#[derive(Debug, Clone, Copy, Default)]
pub struct RemotingCodec(pub FrameCodec);

/// Error of [`RemotingCodec`]: a malformed frame or a socket error.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Malformed or oversized frame.
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// Socket error.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl Decoder for RemotingCodec {
    type Item = RemotingCommand;
    type Error = CodecError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<RemotingCommand>, CodecError> {
        Ok(self.0.decode(src)?)
    }
}

impl Encoder<RemotingCommand> for RemotingCodec {
    type Error = CodecError;

    fn encode(&mut self, item: RemotingCommand, dst: &mut BytesMut) -> Result<(), CodecError> {
        Ok(self.0.encode(&item, dst)?)
    }
}
