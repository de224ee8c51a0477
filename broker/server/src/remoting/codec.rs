//! tokio-util codec adapter around the protocol crate's pure `FrameCodec`.

use bytes::BytesMut;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::frame::{FrameCodec, FrameError};
use tokio_util::codec::{Decoder, Encoder};

/// Errors of the framed transport: a bad frame or an IO failure. Either closes that one
/// connection (a stream whose framing is lost cannot be resynchronised).
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Frames remoting commands on a byte stream.
#[derive(Debug, Clone, Default)]
pub struct RemotingCodec(FrameCodec);

impl RemotingCodec {
    /// A codec refusing frames above `max_frame_size` bytes.
    pub fn new(max_frame_size: usize) -> Self {
        Self(FrameCodec::new(max_frame_size))
    }
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
