//! Accept loop and per-connection tasks.
//!
//! Each request runs in its own task so slow requests (long-polling pulls, SYNC-flush sends)
//! never hold up the others on the same connection. A per-connection cap on requests in flight
//! turns overload into SYSTEM_BUSY answers instead of unbounded queues. A panicking handler is
//! answered with SYSTEM_ERROR; a malformed frame closes only its own connection.
//!
//! One client must not be able to hurt the others ([`ServeLimits`]): the response bytes held
//! for a connection are bounded by its budget (see [`Connection`]), a peer that stops reading
//! is disconnected after the write timeout, a frame must arrive whole within the idle timeout
//! and the read buffer grows only with the bytes that really arrived (a peer announcing a
//! 16 MiB frame and sending nothing costs nothing), the number of connections is capped with
//! a clear refusal, and shutdown stops waiting for connections after a deadline.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::tls::{Acceptor, MaybeTls, WriteHalf};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::{Connection, Outgoing};
use conveyor_remoting::RemotingCodec;

/// Commands queued for writing per connection (their bytes are bounded by the budget).
const WRITE_QUEUE: usize = 1024;
/// Refusals of connections over the limit answered at once; beyond, they are just closed.
const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// How long a refused connection gets to send its first request (to read the refusal).
const REFUSAL_WAIT: Duration = Duration::from_secs(5);

/// What one server accepts from its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// Largest frame accepted and sent (RocketMQ's 16 MiB).
    pub max_frame_size: usize,
    /// Connections served at once; more are answered SYSTEM_BUSY and closed.
    pub max_connections: usize,
    /// Requests in flight per connection before new ones are answered SYSTEM_BUSY.
    pub max_in_flight: usize,
    /// Response bytes held per connection (queued for writing or reserved by handlers).
    pub response_budget_bytes: usize,
    /// A peer whose socket accepts no bytes for this long is disconnected.
    pub write_timeout: Duration,
    /// A connection on which no whole frame arrives for this long is closed (as RocketMQ's
    /// servers close idle channels); a frame must therefore arrive whole within it.
    pub idle_timeout: Duration,
    /// On shutdown, how long to wait for connections to finish their requests.
    pub drain_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            max_frame_size: 16 << 20,
            max_connections: 10_000,
            max_in_flight: 4096,
            response_budget_bytes: 64 << 20,
            write_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(120),
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Handles requests of one kind of server (name server or broker).
pub trait Processor: Send + Sync + 'static {
    /// Answers one request; `None` sends nothing (oneway requests' answers are dropped anyway).
    fn handle(
        self: Arc<Self>,
        conn: Connection,
        request: RemotingCommand,
    ) -> impl Future<Output = Option<RemotingCommand>> + Send;

    /// Called once when a connection closes.
    fn on_disconnect(&self, _conn: &Connection) {}

    /// True for requests that never wait (no long poll, no flush wait, no outbound call):
    /// the connection task runs them itself instead of spawning a task.
    fn runs_inline(&self, _request: &RemotingCommand) -> bool {
        false
    }
}

/// Serves `listener` until `shutdown` is cancelled, then waits (at most the drain timeout) for
/// requests in flight to finish.
pub async fn serve<P: Processor>(
    listener: TcpListener,
    acceptor: Acceptor,
    processor: Arc<P>,
    shutdown: CancellationToken,
    limits: ServeLimits,
) {
    let tracker = TaskTracker::new();
    let connections = Arc::new(Semaphore::new(limits.max_connections));
    let refusals = Arc::new(Semaphore::new(MAX_REFUSALS_IN_FLIGHT));
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(slot) = connections.clone().try_acquire_owned() else {
                        tracing::warn!(%peer, max = limits.max_connections, "connection refused: too many connections");
                        if let Ok(refusal) = refusals.clone().try_acquire_owned() {
                            tracker.spawn(async move {
                                refuse(stream, limits).await;
                                drop(refusal);
                            });
                        }
                        continue;
                    };
                    let processor = processor.clone();
                    let shutdown = shutdown.clone();
                    let inner = tracker.clone();
                    let acceptor = acceptor.clone();
                    tracker.spawn(async move {
                        // TLS or plaintext, as the port's mode allows ([`crate::tls`]).
                        let accepted = tokio::select! {
                            a = acceptor.accept(stream, limits.idle_timeout) => a,
                            _ = shutdown.cancelled() => return,
                        };
                        match accepted {
                            Ok(stream) => {
                                handle_connection(stream, processor, shutdown, inner, limits).await
                            }
                            Err(e) => tracing::debug!(%peer, error = %e, "connection refused"),
                        }
                        drop(slot);
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = shutdown.cancelled() => break,
        }
    }
    drop(listener);
    tracker.close();
    if tokio::time::timeout(limits.drain_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            remaining = tracker.len(),
            "connections still busy after the drain timeout; stopping without them"
        );
    }
}

/// Answers the first request of a connection over the limit with SYSTEM_BUSY and a remark
/// saying why, then closes it.
async fn refuse(stream: TcpStream, limits: ServeLimits) {
    let codec = RemotingCodec(conveyor_protocol::frame::FrameCodec::new(
        limits.max_frame_size,
    ));
    let (read_half, write_half) = stream.into_split();
    let mut reader = FramedRead::new(read_half, codec);
    let mut writer = FramedWrite::new(write_half, codec);
    if let Ok(Some(Ok(request))) = tokio::time::timeout(REFUSAL_WAIT, reader.next()).await {
        let busy = error_response(
            &request,
            response_code::SYSTEM_BUSY,
            format!(
                "[OVERLOAD] too many connections: this server accepts at most {}, try again later",
                limits.max_connections
            ),
        );
        let _ = tokio::time::timeout(REFUSAL_WAIT, writer.send(busy)).await;
    }
}

async fn handle_connection<P: Processor>(
    stream: MaybeTls,
    processor: Arc<P>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    limits: ServeLimits,
) {
    let (Ok(peer), Ok(local)) = (stream.tcp().peer_addr(), stream.tcp().local_addr()) else {
        return;
    };
    let _ = stream.tcp().set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let codec = RemotingCodec(conveyor_protocol::frame::FrameCodec::new(
        limits.max_frame_size,
    ));
    let mut reader = FramedRead::new(read_half, codec);
    let mut writer = FramedWrite::new(write_half, codec);
    let (tx, mut rx) = mpsc::channel::<Outgoing>(WRITE_QUEUE);
    let conn = Connection::new(
        super::connection::next_id(),
        (peer, local),
        tx,
        limits.response_budget_bytes,
    );
    tracing::debug!(%peer, id = conn.id(), "connection opened");

    let closer = conn.closer();
    let writer_task = tokio::spawn(async move {
        let timeout = limits.write_timeout;
        let written = async {
            while let Some(out) = rx.recv().await {
                feed(&mut writer, out, timeout).await?;
                // Coalesce whatever else is ready into the same write.
                while let Ok(out) = rx.try_recv() {
                    feed(&mut writer, out, timeout).await?;
                }
                within(timeout, writer.flush()).await?;
            }
            Ok::<(), WriteFailed>(())
        }
        .await;
        if let Err(WriteFailed::TimedOut) = written {
            tracing::warn!(%peer, ?timeout, "peer stopped reading; closing the connection");
        }
        // Release everything held for this connection and stop its read loop.
        closer.close();
    });

    let in_flight = Arc::new(Semaphore::new(limits.max_in_flight));
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(limits.idle_timeout, reader.next()) => frame,
            _ = shutdown.cancelled() => break,
            _ = conn.closed() => break,
        };
        let request = match frame {
            Ok(Some(Ok(cmd))) => cmd,
            Ok(Some(Err(conveyor_remoting::CodecError::Io(e)))) => {
                // The peer went away (reset, broken pipe): routine when a client exits.
                tracing::debug!(%peer, error = %e, "connection lost");
                break;
            }
            Ok(Some(Err(e))) => {
                tracing::warn!(%peer, error = %e, "closing connection after a malformed frame");
                break;
            }
            Ok(None) => break,
            Err(_) => {
                tracing::debug!(%peer, "closing idle connection");
                break;
            }
        };
        if request.is_response() {
            // An answer to a request the server sent this client.
            conn.answered(request);
            continue;
        }
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            let busy = error_response(
                &request,
                response_code::SYSTEM_BUSY,
                "[OVERLOAD] too many requests in flight on this connection, try again later",
            );
            if !request.is_oneway() {
                let _ = conn.respond(busy).await;
            }
            continue;
        };
        if processor.runs_inline(&request) {
            // Short, non-blocking requests (sends under ASYNC flush, offset queries): handled
            // right here, saving a task spawn and a cross-thread wake-up per request.
            respond(processor.clone(), conn.clone(), request).await;
            drop(permit);
            continue;
        }
        let processor = processor.clone();
        let conn = conn.clone();
        tracker.spawn(async move {
            respond(processor, conn, request).await;
            drop(permit);
        });
    }
    processor.on_disconnect(&conn);
    tracing::debug!(%peer, id = conn.id(), "connection closed");
    drop(conn);
    // The writer ends once every handler holding the connection has answered (or the write
    // timeout closed it).
    let _ = writer_task.await;
}

/// Why the writer stopped.
enum WriteFailed {
    /// The socket failed (peer gone).
    Io,
    /// The socket accepted nothing for the write timeout.
    TimedOut,
}

/// Runs one write step, bounded by the write timeout.
async fn within<T, E>(
    timeout: Duration,
    step: impl Future<Output = Result<T, E>>,
) -> Result<T, WriteFailed> {
    match tokio::time::timeout(timeout, step).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(WriteFailed::Io),
        Err(_) => Err(WriteFailed::TimedOut),
    }
}

/// Queues a command for writing (bounded by the write timeout). A command that cannot be
/// encoded (a response over the frame limit) is answered with SYSTEM_ERROR in its place, so the
/// connection keeps serving; only a socket error or the timeout ends the writer. The command's
/// budget is released once it is in the write buffer.
async fn feed(
    writer: &mut FramedWrite<WriteHalf, RemotingCodec>,
    out: Outgoing,
    timeout: Duration,
) -> Result<(), WriteFailed> {
    let cmd = out.command;
    let (opaque, code, is_response) = (cmd.opaque, cmd.code, cmd.is_response());
    match tokio::time::timeout(timeout, writer.feed(cmd)).await {
        Err(_) => Err(WriteFailed::TimedOut),
        Ok(Ok(())) => Ok(()),
        Ok(Err(conveyor_remoting::CodecError::Frame(e))) => {
            tracing::warn!(opaque, code, error = %e, "a response could not be encoded; answering SYSTEM_ERROR");
            if !is_response {
                return Ok(());
            }
            let skeleton = RemotingCommand::default().with_opaque(opaque);
            let answer = error_response(
                &skeleton,
                response_code::SYSTEM_ERROR,
                format!("the response could not be sent: {e}"),
            );
            within(timeout, writer.feed(answer)).await
        }
        Ok(Err(conveyor_remoting::CodecError::Io(_))) => Err(WriteFailed::Io),
    }
}

/// Runs one request and queues its response; a panicking handler is answered with
/// SYSTEM_ERROR instead of taking the connection down.
async fn respond<P: Processor>(processor: Arc<P>, conn: Connection, request: RemotingCommand) {
    let oneway = request.is_oneway();
    let code = request.code;
    let skeleton = RemotingCommand::default().with_opaque(request.opaque);
    let outcome = AssertUnwindSafe(processor.handle(conn.clone(), request))
        .catch_unwind()
        .await;
    let response = match outcome {
        Ok(r) => r,
        Err(_) => {
            tracing::error!(code, "request handler panicked");
            Some(error_response(
                &skeleton,
                response_code::SYSTEM_ERROR,
                format!("internal error while handling request code {code}"),
            ))
        }
    };
    match (response, oneway) {
        (Some(response), false) => {
            conn.respond(response).await;
        }
        _ => conn.release(skeleton.opaque),
    }
}

/// Answer for a request code this server does not implement.
pub(crate) fn not_supported(request: &RemotingCommand) -> RemotingCommand {
    let what = match request_code::name(request.code) {
        Some(name) => format!("request code {} ({name})", request.code),
        None => format!("request code {}", request.code),
    };
    let remark = match crate::unsupported::alternative(request.code) {
        Some(instead) => format!("{what} is not supported by Conveyor: {instead}"),
        None => format!("{what} is not supported"),
    };
    error_response(request, response_code::REQUEST_CODE_NOT_SUPPORTED, remark)
}

/// Builds an error response with a remark, the way RocketMQ answers bad requests.
pub fn error_response(
    request: &RemotingCommand,
    code: i32,
    remark: impl Into<String>,
) -> RemotingCommand {
    RemotingCommand::response_to(request, code).with_remark(remark)
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_remoting::{RemotingClient, RemotingConfig};

    /// Answers code 1 with a body over the frame limit and everything else with SUCCESS.
    struct Oversized;

    impl Processor for Oversized {
        async fn handle(
            self: Arc<Self>,
            _conn: Connection,
            request: RemotingCommand,
        ) -> Option<RemotingCommand> {
            let mut r = RemotingCommand::response_to(&request, response_code::SUCCESS);
            if request.code == 1 {
                r.body = bytes::Bytes::from(vec![0u8; 2 << 20]);
            }
            Some(r)
        }
    }

    /// Issue 9, defect 11: a response that cannot be encoded made the writer task exit, so the
    /// connection silently lost every later response. It is answered with SYSTEM_ERROR and the
    /// connection keeps answering.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unencodable_response_is_answered_and_the_connection_keeps_serving() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let shutdown = CancellationToken::new();
        let limits = ServeLimits {
            max_frame_size: 1 << 20,
            ..ServeLimits::default()
        };
        let plain = crate::tls::Acceptor::new(
            &crate::tls::TlsConfig {
                mode: crate::tls::TlsMode::Off,
                ..Default::default()
            },
            &[],
        )
        .unwrap();
        let server = tokio::spawn(serve(
            listener,
            plain,
            Arc::new(Oversized),
            shutdown.clone(),
            limits,
        ));
        let client = RemotingClient::new(RemotingConfig::default());
        let big = client
            .invoke(&addr, RemotingCommand::request(1, Default::default()))
            .await
            .expect("an answer to the oversized response");
        assert_eq!(big.code, response_code::SYSTEM_ERROR, "{big:?}");
        for _ in 0..3 {
            let small = client
                .invoke(&addr, RemotingCommand::request(2, Default::default()))
                .await
                .expect("later requests on the same connection are answered");
            assert_eq!(small.code, response_code::SUCCESS);
        }
        shutdown.cancel();
        client.close();
        server.await.unwrap();
    }
}
