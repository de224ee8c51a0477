//! The master's end of the replication stream (RocketMQ's HAService/HAConnection): accepts
//! slaves of its group, answers their hello with its log and epochs, then streams CommitLog
//! bytes from where each slave stands and records its acknowledgements. Each slave has its
//! own task and socket, so a slow or stalled slave slows only itself: appends never wait for
//! a sender, only synchronously replicated sends wait for acknowledgements (with a timeout).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::error::HaError;
use super::frame::{transfer_header, Frame, VERSION};
use super::replication::Replication;
use super::wire::{read_frame, write_frame, write_parts};

/// Accepts slaves until `shutdown`.
pub(super) async fn serve(
    repl: Arc<Replication>,
    listener: TcpListener,
    tls: crate::tls::Acceptor,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "replication accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let repl = repl.clone();
        let shutdown = shutdown.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            // TLS or plaintext, as the port's mode allows (the slave's stream is the whole
            // log: with TLS enforcing it never crosses the network in the clear).
            let stream = match tls
                .accept(stream, repl.config.housekeeping_interval())
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "replication connection refused");
                    return;
                }
            };
            let id = repl.next_connection.fetch_add(1, Ordering::Relaxed);
            tokio::select! {
                r = connection(&repl, stream, peer, id) => {
                    if let Err(e) = r {
                        tracing::warn!(%peer, error = %e, "replication connection closed");
                    }
                }
                _ = shutdown.cancelled() => {}
            }
        });
    }
}

/// One slave: handshake, then send and receive acknowledgements until either fails.
async fn connection(
    repl: &Replication,
    stream: crate::tls::MaybeTls,
    peer: SocketAddr,
    id: u64,
) -> Result<(), HaError> {
    stream.tcp().set_nodelay(true)?;
    let (mut rd, mut wr) = stream.into_split();
    let silent = repl.config.housekeeping_interval();
    let Frame::SlaveHello {
        version,
        broker_name,
        broker_id,
        max_offset,
        epochs,
        auth,
    } = read_frame(&mut rd, silent).await?
    else {
        return Err(HaError::Protocol("expected the slave's hello".into()));
    };
    let proof = match repl.config.cluster_secret.as_deref() {
        Some(secret) => super::auth::check(
            secret,
            &broker_name,
            broker_id,
            &auth,
            conveyor_protocol::time::now_ms(),
        )
        .err(),
        None => None,
    };
    let refusal = if let Some(why) = proof {
        Some(why)
    } else if version != VERSION {
        Some(format!(
            "replication protocol {version}, this master speaks {VERSION}"
        ))
    } else if broker_name != repl.broker_name {
        Some(format!(
            "this is the master of {}, not of {broker_name}",
            repl.broker_name
        ))
    } else if broker_id <= 0 && !repl.config.controller_mode() {
        Some(format!(
            "a slave needs a broker id above 0, not {broker_id}"
        ))
    } else if !repl.is_master() {
        Some("this broker is not a master".to_string())
    } else if epochs.last().map_or(0, |e| e.epoch) > repl.store.epochs().last_epoch() {
        // The slave saw a newer term than this master's: this master was deposed.
        Some(format!(
            "the slave knows epoch {}, newer than this master's {}",
            epochs.last().map_or(0, |e| e.epoch),
            repl.store.epochs().last_epoch()
        ))
    } else {
        None
    };
    if let Some(reason) = refusal {
        write_frame(
            &mut wr,
            &Frame::Refuse {
                reason: reason.clone(),
            },
            silent,
        )
        .await?;
        return Err(HaError::Refused(reason));
    }
    let store = &repl.store;
    write_frame(
        &mut wr,
        &Frame::MasterHello {
            version: VERSION,
            segment_size: store.config().commit_log_segment_size,
            min_offset: store.commit_log_min_offset(),
            max_offset: store.commit_log_max_offset(),
            epochs: store.epochs().entries().to_vec(),
        },
        silent,
    )
    .await?;
    let Frame::Follow { from } = read_frame(&mut rd, silent).await? else {
        return Err(HaError::Protocol(
            "expected the slave's start offset".into(),
        ));
    };
    let (min, max) = (store.commit_log_min_offset(), store.commit_log_max_offset());
    if from > max || from < min {
        let reason =
            format!("the slave would start at {from}, outside this master's log [{min}, {max})");
        write_frame(
            &mut wr,
            &Frame::Refuse {
                reason: reason.clone(),
            },
            silent,
        )
        .await?;
        return Err(HaError::Refused(reason));
    }
    tracing::info!(%peer, broker_id, from, slave_end = max_offset, "slave following");
    repl.acks.connected(broker_id, id, from, Some(peer));
    let mut role = repl.role_changes();
    let term = *role.borrow_and_update();
    let result = tokio::select! {
        r = send(repl, &mut wr, from, broker_id, id) => r,
        r = receive_acks(repl, &mut rd, broker_id, id) => r,
        _ = role.wait_for(|r| *r != term) => Err(HaError::Refused("this broker's role changed".into())),
    };
    repl.acks.disconnected(broker_id, id);
    result
}

/// Streams the log from `from` to slave `broker_id` on `connection`: whatever is there in
/// batches (never past a segment end or into another term), and a heartbeat when idle.
async fn send(
    repl: &Replication,
    wr: &mut (impl AsyncWrite + Unpin),
    from: u64,
    broker_id: i64,
    connection: u64,
) -> Result<(), HaError> {
    let store = &repl.store;
    let config = &repl.config;
    let deadline = config.housekeeping_interval();
    let mut next = from;
    loop {
        let appended = store.appended();
        tokio::pin!(appended);
        appended.as_mut().enable();
        if let Some(slice) = store.read_for_replica(next, config.batch_bytes()) {
            let (term, term_end) = store.epochs().term_at(next);
            let len = (slice.len() as u64).min(term_end - next) as usize;
            let header = transfer_header(
                next,
                term.epoch,
                term.start_offset,
                store.confirm_offset(),
                len,
            );
            if store.log_is_resident(next, next + len as u64) {
                write_parts(wr, &[&header, &slice[..len]], deadline).await?;
            } else {
                // Cold bytes (a fresh slave catching up): fault them in off the runtime.
                let data: Bytes =
                    tokio::task::spawn_blocking(move || Bytes::copy_from_slice(&slice[..len]))
                        .await
                        .map_err(|_| HaError::Protocol("reading the log panicked".into()))?;
                write_parts(wr, &[&header, &data], deadline).await?;
            }
            next += len as u64;
            repl.acks
                .transferred(broker_id, connection, len as u64, super::flow::now_s());
            continue;
        }
        tokio::select! {
            _ = appended => {}
            _ = tokio::time::sleep(config.heartbeat_interval()) => {
                let (term, _) = store.epochs().term_at(next.saturating_sub(1));
                let header = transfer_header(
                    next,
                    term.epoch,
                    term.start_offset,
                    store.confirm_offset(),
                    0,
                );
                write_parts(wr, &[&header], deadline).await?;
            }
        }
    }
}

/// Records the slave's acknowledgements; under synchronous replication each one that moves
/// the high watermark lets consumers see the records below it.
async fn receive_acks(
    repl: &Replication,
    rd: &mut (impl AsyncRead + Unpin),
    broker_id: i64,
    id: u64,
) -> Result<(), HaError> {
    let silent = repl.config.housekeeping_interval();
    loop {
        match read_frame(rd, silent).await? {
            Frame::Ack { offset, zone } => {
                if let Some(zone) = zone {
                    repl.zones
                        .set_slave(broker_id, conveyor_protocol::route::normalize_zone(&zone));
                }
                if offset > repl.store.commit_log_max_offset() {
                    return Err(HaError::Protocol(format!(
                        "the slave acknowledged {offset}, past this master's end"
                    )));
                }
                if let Some(confirmed) = repl.acks.acked(broker_id, id, offset) {
                    if repl.is_sync() {
                        repl.store.set_confirm_offset(confirmed);
                    }
                }
            }
            Frame::Refuse { reason } => return Err(HaError::Refused(reason)),
            other => {
                return Err(HaError::Protocol(format!(
                    "unexpected frame from a slave: {other:?}"
                )))
            }
        }
    }
}
