//! Reading and writing replication frames on a socket, with the deadline every read and write
//! of the stream has (a peer that goes silent is dropped, never waited for forever).

use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::error::HaError;
use super::frame::{check_len, Frame};

/// Reads the next frame, waiting at most `deadline`.
pub async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    deadline: Duration,
) -> Result<Frame, HaError> {
    tokio::time::timeout(deadline, async {
        let len = reader.read_u32().await? as usize;
        check_len(len)?;
        let mut body = BytesMut::zeroed(len);
        reader.read_exact(&mut body).await?;
        Ok(Frame::decode(body.freeze())?)
    })
    .await
    .map_err(|_| HaError::Silent(deadline))?
}

/// Writes `parts` back to back (a frame, or a transfer header and its data), waiting at most
/// `deadline` for the peer to take them.
pub async fn write_parts<W: AsyncWrite + Unpin>(
    writer: &mut W,
    parts: &[&[u8]],
    deadline: Duration,
) -> Result<(), HaError> {
    tokio::time::timeout(deadline, async {
        for part in parts {
            writer.write_all(part).await?;
        }
        Ok::<_, std::io::Error>(())
    })
    .await
    .map_err(|_| HaError::Stuck(deadline))??;
    Ok(())
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin>(
    writer: &mut W,
    frame: &Frame,
    deadline: Duration,
) -> Result<(), HaError> {
    write_parts(writer, &[&frame.encode()], deadline).await
}
