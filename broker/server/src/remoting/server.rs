//! Accept loop and per-connection tasks.
//!
//! Each request runs in its own task so slow requests (long-polling pulls, SYNC-flush sends)
//! never hold up the others on the same connection. A per-connection cap on requests in flight
//! turns overload into SYSTEM_BUSY answers instead of unbounded queues. A panicking handler is
//! answered with SYSTEM_ERROR; a malformed frame closes only its own connection.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connection::Connection;
use super::error_response;
use super::RemotingCodec;

/// Requests in flight per connection before new ones are answered SYSTEM_BUSY.
const MAX_IN_FLIGHT_PER_CONNECTION: usize = 4096;
/// Commands queued for writing per connection.
const WRITE_QUEUE: usize = 1024;
/// Connections idle (nothing read) this long are closed, as RocketMQ's servers do.
const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

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

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// Serves `listener` until `shutdown` is cancelled, then waits for requests in flight to finish.
pub async fn serve<P: Processor>(
    listener: TcpListener,
    processor: Arc<P>,
    shutdown: CancellationToken,
    max_frame_size: usize,
) {
    let tracker = TaskTracker::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let processor = processor.clone();
                    let shutdown = shutdown.clone();
                    let inner = tracker.clone();
                    tracker.spawn(async move {
                        handle_connection(stream, processor, shutdown, inner, max_frame_size).await;
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
    tracker.wait().await;
}

async fn handle_connection<P: Processor>(
    stream: TcpStream,
    processor: Arc<P>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    max_frame_size: usize,
) {
    let Ok(peer) = stream.peer_addr() else {
        return;
    };
    let _ = stream.set_nodelay(true);
    let (read_half, write_half) = stream.into_split();
    let codec = RemotingCodec(conveyor_protocol::frame::FrameCodec::new(max_frame_size));
    let mut reader = FramedRead::new(read_half, codec);
    let mut writer = FramedWrite::new(write_half, codec);
    let (tx, mut rx) = mpsc::channel::<RemotingCommand>(WRITE_QUEUE);
    let conn = Connection::new(NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed), peer, tx);
    tracing::debug!(%peer, id = conn.id(), "connection opened");

    let writer_task = tokio::spawn(async move {
        while let Some(cmd) = rx.recv().await {
            if feed(&mut writer, cmd).await.is_err() {
                return;
            }
            // Coalesce whatever else is ready into the same write.
            while let Ok(cmd) = rx.try_recv() {
                if feed(&mut writer, cmd).await.is_err() {
                    return;
                }
            }
            if writer.flush().await.is_err() {
                return;
            }
        }
    });

    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CONNECTION));
    loop {
        let frame = tokio::select! {
            frame = tokio::time::timeout(IDLE_TIMEOUT, reader.next()) => frame,
            _ = shutdown.cancelled() => break,
        };
        let request = match frame {
            Ok(Some(Ok(cmd))) => cmd,
            Ok(Some(Err(super::CodecError::Io(e)))) => {
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
            // Answers to our oneway requests: nothing waits for them.
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
    // The writer ends once every handler holding the connection has answered.
    let _ = writer_task.await;
}

/// Queues `cmd` for writing. A command that cannot be encoded (a response over the frame
/// limit) is answered with SYSTEM_ERROR in its place, so the connection keeps serving; only a
/// socket error ends the writer.
async fn feed(
    writer: &mut FramedWrite<tokio::net::tcp::OwnedWriteHalf, RemotingCodec>,
    cmd: RemotingCommand,
) -> Result<(), ()> {
    let (opaque, code, is_response) = (cmd.opaque, cmd.code, cmd.is_response());
    match writer.feed(cmd).await {
        Ok(()) => Ok(()),
        Err(super::CodecError::Frame(e)) => {
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
            writer.feed(answer).await.map_err(|_| ())
        }
        Err(super::CodecError::Io(_)) => Err(()),
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
    if let (Some(response), false) = (response, oneway) {
        conn.respond(response).await;
    }
}

/// Answer for a request code this server does not implement.
pub(crate) fn not_supported(request: &RemotingCommand) -> RemotingCommand {
    let name = request_code::name(request.code).unwrap_or("unknown");
    error_response(
        request,
        response_code::REQUEST_CODE_NOT_SUPPORTED,
        format!("request code {} ({name}) is not supported", request.code),
    )
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
        let server = tokio::spawn(serve(
            listener,
            Arc::new(Oversized),
            shutdown.clone(),
            1 << 20,
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
