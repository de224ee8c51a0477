//! The slave's end of the replication stream (RocketMQ's HAClient): connects to its group's
//! master, agrees with it on where both logs are the same (cutting its own log back when it
//! wrote past the fork as an earlier master), then appends what the master sends at the same
//! offsets and acknowledges what it holds, after the write or after fsync as configured. A
//! lost connection is retried with backoff; every read has a deadline, so a master that goes
//! silent is noticed.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use conveyor_protocol::time::now_ms;
use conveyor_settings::SlaveAck;
use conveyor_store::epoch::consistent_point;
use conveyor_store::MessageStore;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::error::HaError;
use super::frame::{history, Frame, VERSION};
use super::replication::{Replication, RoleState};
use super::wire::{read_frame, write_frame};

/// Shortest wait before reconnecting.
const MIN_BACKOFF: Duration = Duration::from_millis(100);

/// Follows the master while this broker is a slave, until `shutdown`, reconnecting after
/// every failure and starting over when the role or the master changes.
pub(super) async fn follow(repl: Arc<Replication>, shutdown: CancellationToken) {
    let mut master = repl.master.subscribe();
    let mut role = repl.role_changes();
    let mut backoff = MIN_BACKOFF;
    loop {
        let is_slave = matches!(*role.borrow_and_update(), RoleState::Slave { .. });
        let addr = master.borrow_and_update().clone();
        let (true, Some(addr)) = (is_slave, addr) else {
            tokio::select! {
                _ = role.changed() => continue,
                _ = master.changed() => continue,
                _ = shutdown.cancelled() => return,
            }
        };
        let started = tokio::time::Instant::now();
        let result = tokio::select! {
            r = session(&repl, &addr) => r,
            _ = role.changed() => continue,
            _ = master.changed() => continue,
            _ = shutdown.cancelled() => return,
        };
        if let Err(e) = result {
            tracing::warn!(master = %addr, error = %e, "replication from the master stopped");
        }
        if started.elapsed() > repl.config.housekeeping_interval() {
            backoff = MIN_BACKOFF; // it ran for a while: this is a new failure
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = role.changed() => {}
            _ = master.changed() => {}
            _ = shutdown.cancelled() => return,
        }
        backoff = (backoff * 2).min(repl.config.heartbeat_interval());
    }
}

/// The reading and writing halves of a connection to the master at `addr`: over TLS when
/// this process's clients use it (TLS enforcing, as the other ports), else plaintext.
async fn connect_halves(
    stream: TcpStream,
    addr: &str,
    deadline: std::time::Duration,
) -> Result<
    (
        Box<dyn AsyncRead + Send + Unpin>,
        Box<dyn AsyncWrite + Send + Unpin>,
    ),
    HaError,
> {
    if !conveyor_remoting::tls::client_tls() {
        let (rd, wr) = stream.into_split();
        return Ok((Box::new(rd), Box::new(wr)));
    }
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_string();
    let name = rustls::pki_types::ServerName::try_from(host)
        .unwrap_or_else(|_| rustls::pki_types::ServerName::from(std::net::Ipv4Addr::LOCALHOST));
    let tls = tokio::time::timeout(
        deadline,
        conveyor_remoting::tls::connector().connect(name, stream),
    )
    .await
    .map_err(|_| HaError::Silent(deadline))??;
    let (rd, wr) = tokio::io::split(tls);
    Ok((Box::new(rd), Box::new(wr)))
}

/// One connection to the master.
async fn session(repl: &Arc<Replication>, addr: &str) -> Result<(), HaError> {
    let silent = repl.config.housekeeping_interval();
    let stream = tokio::time::timeout(silent, TcpStream::connect(addr))
        .await
        .map_err(|_| HaError::Silent(silent))??;
    stream.set_nodelay(true)?;
    let (mut rd, mut wr) = connect_halves(stream, addr, silent).await?;
    let store = &repl.store;
    write_frame(
        &mut wr,
        &Frame::SlaveHello {
            version: VERSION,
            broker_name: repl.broker_name.clone(),
            broker_id: repl.broker_id,
            max_offset: store.commit_log_max_offset(),
            epochs: store.epochs().entries().to_vec(),
            auth: repl
                .config
                .cluster_secret
                .as_deref()
                .map(|secret| {
                    super::auth::prove(
                        secret,
                        &repl.broker_name,
                        repl.broker_id,
                        conveyor_protocol::time::now_ms(),
                    )
                })
                .unwrap_or_default(),
        },
        silent,
    )
    .await?;
    let hello = read_frame(&mut rd, silent).await?;
    let (segment_size, min_offset, max_offset, epochs) = match hello {
        Frame::MasterHello {
            version,
            segment_size,
            min_offset,
            max_offset,
            epochs,
        } if version == VERSION => (segment_size, min_offset, max_offset, epochs),
        Frame::MasterHello { version, .. } => {
            return Err(HaError::Refused(format!(
                "the master speaks replication protocol {version}, this slave {VERSION}"
            )))
        }
        Frame::Refuse { reason } => return Err(HaError::Refused(reason)),
        other => {
            return Err(HaError::Protocol(format!(
                "expected the master's hello, got {other:?}"
            )))
        }
    };
    if segment_size != store.config().commit_log_segment_size {
        return Err(HaError::Refused(format!(
            "the master's segment size is {segment_size}, this slave's {}: set [store] segment-size alike",
            store.config().commit_log_segment_size
        )));
    }
    let master_epochs = history(&epochs)?;
    // A master older than the one the controller named is a deposed one: never follow it.
    if let RoleState::Slave { epoch } = repl.role_state() {
        if epoch > 0 && master_epochs.last_epoch() < epoch {
            return Err(HaError::Refused(format!(
                "the master at {addr} is in epoch {}, the controller named the master of epoch {epoch}",
                master_epochs.last_epoch()
            )));
        }
    }
    let from = {
        let (store, repl) = (store.clone(), repl.clone());
        tokio::task::spawn_blocking(move || {
            let (from, cut) = align(&store, min_offset, max_offset, &master_epochs)?;
            if cut {
                repl.truncated();
            }
            Ok::<_, HaError>(from)
        })
        .await
        .map_err(|_| HaError::Protocol("aligning the log panicked".into()))??
    };
    write_frame(&mut wr, &Frame::Follow { from }, silent).await?;
    tracing::info!(master = %addr, from, master_end = max_offset, "following the master");
    let _following = Following::start(repl);
    let (held, held_rx) = watch::channel(from);
    tokio::select! {
        r = receive(repl, &mut rd, from, held) => r,
        r = acknowledge(repl, &mut wr, held_rx) => r,
    }
}

/// Marks the slave as following its master for as long as it lives (the session's future
/// may be dropped at any await, so the mark is cleared on drop).
struct Following<'a>(&'a Replication);

impl<'a> Following<'a> {
    fn start(repl: &'a Replication) -> Self {
        repl.following.store(true, Ordering::Release);
        Self(repl)
    }
}

impl Drop for Following<'_> {
    fn drop(&mut self) {
        self.0.following.store(false, Ordering::Release);
    }
}

/// What a replica does with its log before following a master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alignment {
    /// The log continues the master's as it is: follow from its end.
    Keep,
    /// The log went past the point both share (an earlier master's unreplicated tail): cut it
    /// back to that point and follow from there.
    CutTo(u64),
    /// Nothing the log holds can be continued: it is empty, the point it shares with the
    /// master is below its own first segment, or the master's retention already deleted what
    /// follows that point. Drop it and copy the master's log from its first segment, as a
    /// fresh replica does. (What is dropped is either divergent or older than anything the
    /// master still keeps.)
    StartAt(u64),
}

/// Decides how a replica holding `[min, end)` joins a master holding `[master_min, ..)`,
/// `shared` being the last offset both logs agree on (`None`: they share no term).
fn alignment(
    min: u64,
    end: u64,
    shared: Option<u64>,
    master_min: u64,
) -> Result<Alignment, String> {
    if min == end {
        return Ok(if end == master_min {
            Alignment::Keep
        } else {
            Alignment::StartAt(master_min)
        });
    }
    let Some(cut) = shared else {
        return Err(format!(
            "this replica's log [{min}, {end}) shares no term with the master's"
        ));
    };
    Ok(if cut < min || cut < master_min {
        Alignment::StartAt(master_min)
    } else if cut < end {
        Alignment::CutTo(cut)
    } else {
        Alignment::Keep
    })
}

/// Where this slave's log and the master's agree, after making it so ([`alignment`]). Also
/// says whether the log was cut or restarted.
fn align(
    store: &MessageStore,
    master_min: u64,
    master_max: u64,
    master_epochs: &conveyor_store::EpochHistory,
) -> Result<(u64, bool), HaError> {
    let (min, end) = (store.commit_log_min_offset(), store.commit_log_max_offset());
    let local = store.epochs();
    let shared = consistent_point(&local, end, master_epochs, master_max);
    let plan = alignment(min, end, shared, master_min).map_err(|reason| {
        HaError::Diverged(format!(
            "{reason} (local epochs {:?}, master's {:?}); wipe its data directory to make it a replica",
            local.entries(),
            master_epochs.entries()
        ))
    })?;
    match plan {
        Alignment::Keep => Ok((end, false)),
        Alignment::CutTo(cut) => {
            store.truncate_to(cut)?;
            Ok((cut, true))
        }
        Alignment::StartAt(from) => {
            if min != end {
                tracing::warn!(
                    local_min = min,
                    local_end = end,
                    shared = ?shared,
                    master_min,
                    "this replica's log cannot continue the master's; copying the master's from its first segment"
                );
                store.truncate_to(min)?;
            }
            store.start_empty_at(from)?;
            Ok((from, true))
        }
    }
}

/// Appends what the master sends; publishes the end held after each batch.
async fn receive(
    repl: &Replication,
    rd: &mut (impl AsyncRead + Unpin),
    from: u64,
    held: watch::Sender<u64>,
) -> Result<(), HaError> {
    let store = &repl.store;
    let silent = repl.config.housekeeping_interval();
    // Bytes of a record split between batches, waiting for the rest.
    let mut pending = BytesMut::new();
    let mut expected = from;
    loop {
        let (offset, epoch, epoch_start, confirm, data) = match read_frame(rd, silent).await? {
            Frame::Transfer {
                offset,
                epoch,
                epoch_start,
                confirm,
                data,
            } => {
                let now = now_ms();
                repl.last_read_ms.store(now, Ordering::Relaxed);
                repl.received
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .record(data.len() as u64, super::flow::second_of(now));
                (offset, epoch, epoch_start, confirm, data)
            }
            Frame::Refuse { reason } => return Err(HaError::Refused(reason)),
            other => {
                return Err(HaError::Protocol(format!(
                    "unexpected frame from the master: {other:?}"
                )))
            }
        };
        if offset != expected {
            return Err(HaError::Protocol(format!(
                "the master sent bytes at {offset}, expected {expected}"
            )));
        }
        if !data.is_empty() {
            if store.epochs().last().map(|t| (t.epoch, t.start_offset))
                != Some((epoch, epoch_start))
            {
                let store = store.clone();
                tokio::task::spawn_blocking(move || store.follow_epoch(epoch, epoch_start))
                    .await
                    .map_err(|_| HaError::Protocol("recording an epoch panicked".into()))??;
            }
            expected += data.len() as u64;
            pending.extend_from_slice(&data);
            let at = store.commit_log_max_offset();
            let taken = store.append_replicated(at, &pending)?;
            pending.advance(taken);
            held.send_replace(store.commit_log_max_offset());
        }
        // The master's high watermark; what this slave holds is dispatched up to there.
        store.set_confirm_offset(confirm);
    }
}

/// Acknowledges the end the slave holds whenever it grows (after fsync when so configured),
/// and at least every heartbeat interval. The first ack after this broker's zone is known or
/// changed carries it, so the master can send consumers of that zone here.
async fn acknowledge(
    repl: &Replication,
    wr: &mut (impl AsyncWrite + Unpin),
    mut held: watch::Receiver<u64>,
) -> Result<(), HaError> {
    let silent = repl.config.housekeeping_interval();
    let mut zone = repl.zones.own_changes();
    // The zone to tell the master with the next ack: a new connection has told it none, so
    // this broker's zone if known; then each change ("" when the zone is gone).
    let mut zone_news: Option<String> = zone.borrow_and_update().clone();
    let mut acked = None;
    loop {
        let end = *held.borrow_and_update();
        if acked != Some(end) || zone_news.is_some() {
            if acked != Some(end)
                && repl.config.slave_ack == SlaveAck::Flush
                && !repl.store.request_flush(end).wait().await
            {
                return Err(HaError::Protocol(
                    "the slave's flush failed; it no longer acknowledges".into(),
                ));
            }
            let frame = Frame::Ack {
                offset: end,
                zone: zone_news.take(),
            };
            write_frame(wr, &frame, silent).await?;
            repl.last_write_ms.store(now_ms(), Ordering::Relaxed);
            acked = Some(end);
        }
        tokio::select! {
            changed = held.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            Ok(()) = zone.changed() => {
                zone_news = Some(zone.borrow_and_update().clone().unwrap_or_default());
            }
            _ = tokio::time::sleep(repl.config.heartbeat_interval()) => {
                write_frame(wr, &Frame::Ack { offset: end, zone: None }, silent).await?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{alignment, Alignment};

    #[test]
    fn an_empty_replica_starts_at_the_masters_first_segment() {
        assert_eq!(alignment(0, 0, None, 0), Ok(Alignment::Keep));
        assert_eq!(alignment(0, 0, None, 4096), Ok(Alignment::StartAt(4096)));
    }

    #[test]
    fn a_replica_in_step_or_behind_keeps_its_log() {
        assert_eq!(alignment(0, 500, Some(500), 0), Ok(Alignment::Keep));
    }

    #[test]
    fn a_former_master_is_cut_to_the_shared_point() {
        assert_eq!(alignment(0, 900, Some(500), 0), Ok(Alignment::CutTo(500)));
    }

    #[test]
    fn a_replica_whose_next_bytes_the_master_deleted_starts_again_at_the_masters_log() {
        // The master's retention deleted [500, 4096): the replica cannot continue at 500.
        assert_eq!(
            alignment(0, 900, Some(500), 4096),
            Ok(Alignment::StartAt(4096))
        );
        assert_eq!(
            alignment(0, 500, Some(500), 4096),
            Ok(Alignment::StartAt(4096))
        );
    }

    #[test]
    fn a_replica_whose_own_log_begins_after_the_shared_point_starts_again() {
        assert_eq!(
            alignment(8192, 9000, Some(500), 0),
            Ok(Alignment::StartAt(0))
        );
    }

    #[test]
    fn logs_sharing_no_term_are_refused() {
        assert!(alignment(0, 900, None, 0).is_err());
    }
}
