//! The replication stream's frames, on their own port (RocketMQ's HA port, `listen + 1`). The
//! shape follows RocketMQ 5's AutoSwitch HA protocol: a handshake in which both sides state
//! their epoch history and log end, then transfer frames that carry the master's epoch, the
//! start of that epoch and the high watermark with the bytes, and acknowledgements of how far
//! the slave holds the log. Interoperating with Apache RocketMQ slaves is not a goal, so every
//! frame is length-prefixed and typed, which makes a confused peer a clean error instead of a
//! misread stream.
//!
//! Frame: `length u32` (of what follows), `kind u8`, then the kind's fields, big-endian.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use conveyor_store::{EpochEntry, EpochHistory};

/// Protocol version sent in both hellos; a peer with another version is refused.
pub const VERSION: u16 = 1;

/// Largest frame accepted (a transfer batch plus its header).
pub const MAX_FRAME: usize = 8 << 20;

/// One frame of the replication stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Slave → master, first: who it is and what its log holds.
    SlaveHello {
        /// Protocol version.
        version: u16,
        /// The broker group (`broker-name`); a master serves only its own group.
        broker_name: String,
        /// The slave's broker id.
        broker_id: i64,
        /// End of the slave's CommitLog.
        max_offset: u64,
        /// The slave's epoch history.
        epochs: Vec<EpochEntry>,
        /// With ACL on, proof that the slave knows the cluster secret ([`super::auth`]);
        /// empty otherwise (and from peers that predate it).
        auth: String,
    },
    /// Master → slave, the answer: the master's log and terms, from which the slave finds the
    /// point both logs share.
    MasterHello {
        /// Protocol version.
        version: u16,
        /// The master's CommitLog segment size: a slave's must be the same, since blanks
        /// and records sit at the same offsets in both.
        segment_size: u64,
        /// Start of the master's CommitLog (older bytes were deleted by retention).
        min_offset: u64,
        /// End of the master's CommitLog.
        max_offset: u64,
        /// The master's epoch history.
        epochs: Vec<EpochEntry>,
    },
    /// Slave → master, after any truncation: stream from here.
    Follow {
        /// The slave's log end after truncation.
        from: u64,
    },
    /// Master → slave: CommitLog bytes at `offset` (none: a heartbeat).
    Transfer {
        /// Where `data` starts in the log.
        offset: u64,
        /// The term that wrote `data` (a batch never spans two).
        epoch: u32,
        /// Where that term starts.
        epoch_start: u64,
        /// The master's high watermark (`u64::MAX`: none).
        confirm: u64,
        /// The bytes, verbatim.
        data: Bytes,
    },
    /// Slave → master: it holds (written, or flushed when it acknowledges after fsync) the
    /// log below `offset`.
    Ack {
        /// The acknowledged end.
        offset: u64,
        /// The slave's zone, sent when it differs from what the slave last told on this
        /// connection (`Some("")`: it has none any more). A trailing field, added after
        /// version 1: a master that does not know it ignores it, and an ack without it
        /// decodes as `None`, so slaves and masters of both kinds work together during a
        /// rolling upgrade.
        zone: Option<String>,
    },
    /// Either side: why the connection is refused; then it is closed.
    Refuse {
        /// A sentence for the log.
        reason: String,
    },
}

/// Why bytes are not a frame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the frame's fields need.
    #[error("replication frame too short")]
    Truncated,
    /// An unknown frame kind.
    #[error("unknown replication frame kind {0}")]
    UnknownKind(u8),
    /// Over [`MAX_FRAME`].
    #[error("replication frame of {0} bytes exceeds the limit")]
    TooLarge(usize),
    /// A string that is not UTF-8.
    #[error("replication frame holds invalid text")]
    BadText,
    /// An epoch list out of order.
    #[error("replication frame holds a bad epoch history: {0}")]
    BadEpochs(String),
}

const SLAVE_HELLO: u8 = 1;
const MASTER_HELLO: u8 = 2;
const FOLLOW: u8 = 3;
const TRANSFER: u8 = 4;
const ACK: u8 = 5;
const REFUSE: u8 = 6;

/// Bytes of a transfer frame before its data: length, kind, offset, epoch, epoch start,
/// confirm.
pub const TRANSFER_HEADER: usize = 4 + 1 + 8 + 4 + 8 + 8;

impl Frame {
    /// The whole frame, length prefix included.
    pub fn encode(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(64);
        b.put_u32(0);
        match self {
            Frame::SlaveHello {
                version,
                broker_name,
                broker_id,
                max_offset,
                epochs,
                auth,
            } => {
                b.put_u8(SLAVE_HELLO);
                b.put_u16(*version);
                put_text(&mut b, broker_name);
                b.put_i64(*broker_id);
                b.put_u64(*max_offset);
                put_epochs(&mut b, epochs);
                put_text(&mut b, auth);
            }
            Frame::MasterHello {
                version,
                segment_size,
                min_offset,
                max_offset,
                epochs,
            } => {
                b.put_u8(MASTER_HELLO);
                b.put_u16(*version);
                b.put_u64(*segment_size);
                b.put_u64(*min_offset);
                b.put_u64(*max_offset);
                put_epochs(&mut b, epochs);
            }
            Frame::Follow { from } => {
                b.put_u8(FOLLOW);
                b.put_u64(*from);
            }
            Frame::Transfer {
                offset,
                epoch,
                epoch_start,
                confirm,
                data,
            } => {
                // The header carries its own length prefix (senders write it alone, then the
                // data straight from the log).
                b.clear();
                b.reserve(TRANSFER_HEADER + data.len());
                b.put_slice(&transfer_header(
                    *offset,
                    *epoch,
                    *epoch_start,
                    *confirm,
                    data.len(),
                ));
                b.put_slice(data);
                return b;
            }
            Frame::Ack { offset, zone } => {
                b.put_u8(ACK);
                b.put_u64(*offset);
                if let Some(zone) = zone {
                    put_text(&mut b, zone);
                }
            }
            Frame::Refuse { reason } => {
                b.put_u8(REFUSE);
                put_text(&mut b, reason);
            }
        }
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_be_bytes());
        b
    }

    /// Decodes a frame's body (the bytes after its length prefix).
    pub fn decode(mut body: Bytes) -> Result<Frame, FrameError> {
        let kind = get_u8(&mut body)?;
        let frame = match kind {
            SLAVE_HELLO => Frame::SlaveHello {
                version: get_u16(&mut body)?,
                broker_name: get_text(&mut body)?,
                broker_id: get_u64(&mut body)? as i64,
                max_offset: get_u64(&mut body)?,
                epochs: get_epochs(&mut body)?,
                auth: if body.has_remaining() {
                    get_text(&mut body)?
                } else {
                    String::new()
                },
            },
            MASTER_HELLO => Frame::MasterHello {
                version: get_u16(&mut body)?,
                segment_size: get_u64(&mut body)?,
                min_offset: get_u64(&mut body)?,
                max_offset: get_u64(&mut body)?,
                epochs: get_epochs(&mut body)?,
            },
            FOLLOW => Frame::Follow {
                from: get_u64(&mut body)?,
            },
            TRANSFER => Frame::Transfer {
                offset: get_u64(&mut body)?,
                epoch: get_u32(&mut body)?,
                epoch_start: get_u64(&mut body)?,
                confirm: get_u64(&mut body)?,
                data: body.split_off(0),
            },
            ACK => Frame::Ack {
                offset: get_u64(&mut body)?,
                zone: if body.has_remaining() {
                    Some(get_text(&mut body)?)
                } else {
                    None
                },
            },
            REFUSE => Frame::Refuse {
                reason: get_text(&mut body)?,
            },
            other => return Err(FrameError::UnknownKind(other)),
        };
        Ok(frame)
    }
}

/// A transfer frame's header for `len` bytes of data (the sender writes the data after it
/// straight from the log, without copying it into the frame).
pub fn transfer_header(
    offset: u64,
    epoch: u32,
    epoch_start: u64,
    confirm: u64,
    len: usize,
) -> [u8; TRANSFER_HEADER] {
    let mut h = [0u8; TRANSFER_HEADER];
    let body_len = (TRANSFER_HEADER - 4 + len) as u32;
    h[..4].copy_from_slice(&body_len.to_be_bytes());
    h[4] = TRANSFER;
    h[5..13].copy_from_slice(&offset.to_be_bytes());
    h[13..17].copy_from_slice(&epoch.to_be_bytes());
    h[17..25].copy_from_slice(&epoch_start.to_be_bytes());
    h[25..33].copy_from_slice(&confirm.to_be_bytes());
    h
}

/// Checks a frame's announced length.
pub fn check_len(len: usize) -> Result<(), FrameError> {
    if len > MAX_FRAME {
        return Err(FrameError::TooLarge(len));
    }
    if len == 0 {
        return Err(FrameError::Truncated);
    }
    Ok(())
}

/// The history an epoch list stands for, or why it is not one.
pub fn history(entries: &[EpochEntry]) -> Result<EpochHistory, FrameError> {
    EpochHistory::from_entries(entries.to_vec()).map_err(|e| FrameError::BadEpochs(e.to_string()))
}

fn put_text(b: &mut BytesMut, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    b.put_u16(bytes.len() as u16);
    b.put_slice(bytes);
}

fn put_epochs(b: &mut BytesMut, epochs: &[EpochEntry]) {
    b.put_u32(epochs.len() as u32);
    for e in epochs {
        b.put_u32(e.epoch);
        b.put_u64(e.start_offset);
    }
}

fn need(body: &Bytes, n: usize) -> Result<(), FrameError> {
    if body.remaining() < n {
        return Err(FrameError::Truncated);
    }
    Ok(())
}

fn get_u8(body: &mut Bytes) -> Result<u8, FrameError> {
    need(body, 1)?;
    Ok(body.get_u8())
}

fn get_u16(body: &mut Bytes) -> Result<u16, FrameError> {
    need(body, 2)?;
    Ok(body.get_u16())
}

fn get_u32(body: &mut Bytes) -> Result<u32, FrameError> {
    need(body, 4)?;
    Ok(body.get_u32())
}

fn get_u64(body: &mut Bytes) -> Result<u64, FrameError> {
    need(body, 8)?;
    Ok(body.get_u64())
}

fn get_text(body: &mut Bytes) -> Result<String, FrameError> {
    let len = get_u16(body)? as usize;
    need(body, len)?;
    String::from_utf8(body.split_to(len).to_vec()).map_err(|_| FrameError::BadText)
}

fn get_epochs(body: &mut Bytes) -> Result<Vec<EpochEntry>, FrameError> {
    let n = get_u32(body)? as usize;
    need(body, n.saturating_mul(12))?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(EpochEntry {
            epoch: body.get_u32(),
            start_offset: body.get_u64(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(f: Frame) {
        let encoded = f.encode().freeze();
        let len = u32::from_be_bytes(encoded[..4].try_into().unwrap()) as usize;
        assert_eq!(len, encoded.len() - 4);
        assert_eq!(Frame::decode(encoded.slice(4..)).unwrap(), f);
    }

    #[test]
    fn every_frame_round_trips() {
        let epochs = vec![
            EpochEntry {
                epoch: 1,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 3,
                start_offset: 4096,
            },
        ];
        round_trip(Frame::SlaveHello {
            version: VERSION,
            broker_name: "broker-a".into(),
            broker_id: 1,
            max_offset: 77,
            epochs: epochs.clone(),
            auth: "1700000000000:c2lnbmF0dXJl".into(),
        });
        // A hello from a peer that predates the proof reads as one without it.
        let mut old = Frame::SlaveHello {
            version: VERSION,
            broker_name: "broker-a".into(),
            broker_id: 1,
            max_offset: 77,
            epochs: vec![],
            auth: String::new(),
        }
        .encode();
        old.truncate(old.len() - 2);
        let len = (old.len() - 4) as u32;
        old[..4].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(
            Frame::decode(old.freeze().slice(4..)),
            Ok(Frame::SlaveHello { auth, .. }) if auth.is_empty()
        ));
        round_trip(Frame::MasterHello {
            version: VERSION,
            segment_size: 1 << 30,
            min_offset: 0,
            max_offset: 1 << 40,
            epochs,
        });
        round_trip(Frame::Follow { from: 12 });
        round_trip(Frame::Transfer {
            offset: 5,
            epoch: 3,
            epoch_start: 4096,
            confirm: u64::MAX,
            data: Bytes::from_static(b"records"),
        });
        round_trip(Frame::Transfer {
            offset: 5,
            epoch: 3,
            epoch_start: 4096,
            confirm: 9,
            data: Bytes::new(),
        });
        round_trip(Frame::Ack {
            offset: 99,
            zone: None,
        });
        round_trip(Frame::Ack {
            offset: 99,
            zone: Some("eu-1a".into()),
        });
        round_trip(Frame::Ack {
            offset: 99,
            zone: Some(String::new()),
        });
        round_trip(Frame::Refuse {
            reason: "not my group".into(),
        });
    }

    #[test]
    fn garbage_is_an_error_never_a_panic() {
        assert_eq!(Frame::decode(Bytes::new()), Err(FrameError::Truncated));
        assert_eq!(
            Frame::decode(Bytes::from_static(&[42])),
            Err(FrameError::UnknownKind(42))
        );
        // A hello announcing four billion epochs in a few bytes.
        let mut b = BytesMut::new();
        b.put_u8(MASTER_HELLO);
        b.put_u16(VERSION);
        b.put_u64(1 << 30);
        b.put_u64(0);
        b.put_u64(0);
        b.put_u32(u32::MAX);
        assert_eq!(Frame::decode(b.freeze()), Err(FrameError::Truncated));
        for cut in 0..20 {
            let f = Frame::SlaveHello {
                version: VERSION,
                broker_name: "x".into(),
                broker_id: 1,
                max_offset: 2,
                epochs: vec![],
                auth: "1:x".into(),
            }
            .encode()
            .freeze();
            let end = (4 + cut).min(f.len());
            let _ = Frame::decode(f.slice(4..end));
        }
        assert!(check_len(MAX_FRAME + 1).is_err());
        assert!(check_len(0).is_err());
    }
}
