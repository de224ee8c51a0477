//! A client connection as the server sees it: its identity, peer address and a handle to
//! send it commands (responses, and server-initiated requests such as
//! NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE).
//!
//! It also owns the connection's *response budget*: a client that stops reading must not
//! make the server hold gigabytes of answers for it. Every command queued for writing holds
//! budget bytes until the writer has written it, and handlers that build large bodies (pulls,
//! message views, key queries) reserve the bytes before they copy anything, so the memory
//! held for one connection stays within the budget however many requests it has in flight.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use conveyor_protocol::command::RemotingCommand;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

/// Process-unique connection id.
pub type ConnectionId = u64;

static NEXT_CONNECTION_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh connection id.
pub(crate) fn next_id() -> ConnectionId {
    NEXT_CONNECTION_ID.fetch_add(1, Ordering::Relaxed)
}

/// Commands the broker sends a client on an in-process connection ([`Connection::in_process`]):
/// server-initiated requests such as CHECK_TRANSACTION_STATE, for the front end (the gRPC
/// endpoint) to pass on in its own protocol.
pub struct InProcessReceiver(mpsc::Receiver<Outgoing>);

impl InProcessReceiver {
    /// The next command, `None` once every handle of the connection is gone.
    pub async fn recv(&mut self) -> Option<RemotingCommand> {
        self.0.recv().await.map(|out| out.command)
    }
}

/// Bytes a command is charged beyond its body (header, remark, extension fields).
const HEADER_ALLOWANCE: usize = 1024;

/// Server-initiated requests awaiting their answer at once on one connection (admin
/// questions forwarded to a client, such as GET_CONSUMER_RUNNING_INFO); more are refused, so
/// a client that never answers cannot make the broker hold unbounded waiters.
const MAX_PENDING_CALLS: usize = 64;

/// Why a request the server sent a client got no answer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    /// The connection closed, or its queue was full.
    #[error("the client's connection is closed or not reading")]
    Closed,
    /// No answer within the deadline.
    #[error("the client did not answer within {0:?}")]
    TimedOut(std::time::Duration),
    /// Too many requests to this client are already waiting.
    #[error("too many requests to this client are waiting for answers")]
    Busy,
}

/// A command on its way to the socket, with the budget it holds until written.
pub(crate) struct Outgoing {
    /// The command.
    pub(crate) command: RemotingCommand,
    /// Budget bytes released when the writer drops this after writing.
    _held: Option<OwnedSemaphorePermit>,
}

/// Cheap-to-clone handle to one connection.
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Process-unique id.
    id: ConnectionId,
    /// The client's address.
    peer: SocketAddr,
    /// The server's address the client reached (the address to tell it to call back on).
    local: SocketAddr,
    /// The writer task's queue.
    tx: mpsc::Sender<Outgoing>,
    /// Opaque of the next server-initiated request.
    next_opaque: AtomicI32,
    /// Response bytes this connection may hold (queued, or reserved by handlers).
    budget: Arc<Semaphore>,
    /// The budget's size in bytes (the most one command is charged).
    budget_bytes: usize,
    /// Budget reserved by handlers for the response to a request, by its opaque.
    reserved: Mutex<HashMap<i32, OwnedSemaphorePermit>>,
    /// Cancelled when the connection is closing (writer gone, peer stopped reading).
    closed: CancellationToken,
    /// Server-initiated requests waiting for the client's answer, by opaque.
    pending: Mutex<HashMap<i32, oneshot::Sender<RemotingCommand>>>,
}

impl Connection {
    pub(crate) fn new(
        id: ConnectionId,
        (peer, local): (SocketAddr, SocketAddr),
        tx: mpsc::Sender<Outgoing>,
        budget_bytes: usize,
    ) -> Self {
        let budget_bytes = budget_bytes.clamp(1, u32::MAX as usize);
        Self {
            inner: Arc::new(Inner {
                id,
                peer,
                local,
                tx,
                next_opaque: AtomicI32::new(1),
                budget: Arc::new(Semaphore::new(budget_bytes)),
                budget_bytes,
                reserved: Mutex::new(HashMap::new()),
                closed: CancellationToken::new(),
                pending: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A connection that is no socket: a front end in this process (the gRPC endpoint) hands
    /// requests to the broker on it for one of its clients, so the broker keeps that client's
    /// registrations and sends it server-initiated requests as for any remoting client.
    /// Responses are returned by the processor directly; what the broker sends on its own
    /// arrives on the receiver.
    pub fn in_process(peer: SocketAddr, local: SocketAddr) -> (Self, InProcessReceiver) {
        let (tx, rx) = mpsc::channel(64);
        (
            Self::new(next_id(), (peer, local), tx, 16 << 20),
            InProcessReceiver(rx),
        )
    }

    /// The connection id.
    pub fn id(&self) -> ConnectionId {
        self.inner.id
    }

    /// The client's address (the born host of messages it sends).
    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// The server's address this connection reached: where the client can call back (a
    /// controller names itself with it).
    pub fn local(&self) -> SocketAddr {
        self.inner.local
    }

    /// True while the connection's writer is alive.
    pub fn is_open(&self) -> bool {
        !self.inner.tx.is_closed() && !self.inner.closed.is_cancelled()
    }

    /// Waits until `bytes` of the response budget are free and holds them for the response to
    /// request `opaque` (released once that response is written, or the connection closes).
    /// Handlers call this before copying a large body. `false` if the connection closed.
    pub async fn reserve(&self, opaque: i32, bytes: usize) -> bool {
        let Some(permit) = self.acquire(bytes).await else {
            return false;
        };
        self.lock_reserved().insert(opaque, permit);
        true
    }

    /// Queues a response for writing, charging it to the budget (or using what its handler
    /// reserved). Waits while the budget is spent; `false` if the connection closed.
    pub async fn respond(&self, response: RemotingCommand) -> bool {
        let reserved = self.lock_reserved().remove(&response.opaque);
        let held = match reserved {
            Some(permit) => permit,
            None => match self.acquire(charge(&response)).await {
                Some(permit) => permit,
                None => return false,
            },
        };
        let out = Outgoing {
            command: response,
            _held: Some(held),
        };
        self.inner.tx.send(out).await.is_ok()
    }

    /// Drops a reservation whose response will not be sent (oneway requests).
    pub(crate) fn release(&self, opaque: i32) {
        self.lock_reserved().remove(&opaque);
    }

    /// Sends a oneway request initiated by the server (the client does not answer). Never
    /// waits: if the connection's queue or budget is full, the notification is dropped (the
    /// clients re-sync on their own timers anyway) rather than stalling the caller.
    pub fn send_oneway(&self, mut request: RemotingCommand) -> bool {
        request.opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        request.mark_oneway();
        self.try_queue(request)
    }

    /// Queues a server-initiated request if the budget and the writer's queue have room now;
    /// never waits. `false` when it was not queued.
    fn try_queue(&self, request: RemotingCommand) -> bool {
        let bytes = charge(&request).min(self.inner.budget_bytes) as u32;
        let Ok(held) = self.inner.budget.clone().try_acquire_many_owned(bytes) else {
            return false;
        };
        let out = Outgoing {
            command: request,
            _held: Some(held),
        };
        self.inner.tx.try_send(out).is_ok()
    }

    /// Sends the client a request and waits up to `timeout` for its answer (RocketMQ's
    /// `invokeSync` from the broker to a client, as for GET_CONSUMER_RUNNING_INFO). Like [`Connection::send_oneway`] it never waits for queue
    /// space: a client that is not reading is answered [`CallError::Closed`] at once.
    pub async fn call(
        &self,
        mut request: RemotingCommand,
        timeout: std::time::Duration,
    ) -> Result<RemotingCommand, CallError> {
        let opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        request.opaque = opaque;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = self.lock_pending();
            if pending.len() >= MAX_PENDING_CALLS {
                return Err(CallError::Busy);
            }
            pending.insert(opaque, tx);
        }
        let outcome = if !self.try_queue(request) {
            Err(CallError::Closed)
        } else {
            tokio::select! {
                answer = rx => answer.map_err(|_| CallError::Closed),
                _ = tokio::time::sleep(timeout) => Err(CallError::TimedOut(timeout)),
                _ = self.inner.closed.cancelled() => Err(CallError::Closed),
            }
        };
        self.lock_pending().remove(&opaque);
        outcome
    }

    /// Hands a client's answer to the [`Connection::call`] waiting for it; answers nobody
    /// waits for (to oneway requests, or after a timeout) are dropped.
    pub(crate) fn answered(&self, response: RemotingCommand) {
        if let Some(waiter) = self.lock_pending().remove(&response.opaque) {
            let _ = waiter.send(response);
        }
    }

    fn lock_pending(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<i32, oneshot::Sender<RemotingCommand>>> {
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A handle that closes the connection without keeping it open (the writer task holds
    /// this, not a [`Connection`], so that the writer still ends when the last handle goes).
    pub(crate) fn closer(&self) -> Closer {
        Closer {
            budget: self.inner.budget.clone(),
            closed: self.inner.closed.clone(),
        }
    }

    /// Resolves once [`Connection::close`] was called.
    pub(crate) async fn closed(&self) {
        self.inner.closed.cancelled().await;
    }

    async fn acquire(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let bytes = bytes.clamp(1, self.inner.budget_bytes) as u32;
        self.inner
            .budget
            .clone()
            .acquire_many_owned(bytes)
            .await
            .ok()
    }

    fn lock_reserved(&self) -> std::sync::MutexGuard<'_, HashMap<i32, OwnedSemaphorePermit>> {
        self.inner
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }
}

/// Closes a connection: waiting handlers give up and the read loop stops.
pub(crate) struct Closer {
    /// The connection's budget, closed so that waiting reservations fail at once.
    budget: Arc<Semaphore>,
    /// The connection's closing signal.
    closed: CancellationToken,
}

impl Closer {
    /// Marks the connection closing.
    pub(crate) fn close(&self) {
        self.budget.close();
        self.closed.cancel();
    }
}

/// What a command is charged against the budget.
fn charge(cmd: &RemotingCommand) -> usize {
    cmd.body.len() + HEADER_ALLOWANCE
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn connection() -> (Connection, mpsc::Receiver<Outgoing>) {
        let (tx, rx) = mpsc::channel(4);
        let peer = "127.0.0.1:1".parse().unwrap();
        (Connection::new(1, (peer, peer), tx, 1 << 20), rx)
    }

    #[tokio::test]
    async fn a_call_gets_the_answer_with_its_opaque() {
        let (conn, mut rx) = connection();
        let client = tokio::spawn(async move {
            let sent = rx.recv().await.unwrap().command;
            // An unrelated answer first: it must not be taken for the awaited one.
            let mut other = RemotingCommand::response_to(&sent, 1);
            other.opaque = sent.opaque + 100;
            (sent, other, rx)
        });
        let waiting = {
            let conn = conn.clone();
            tokio::spawn(async move {
                conn.call(
                    RemotingCommand::request(307, Default::default()),
                    Duration::from_secs(30),
                )
                .await
            })
        };
        let (sent, other, _rx) = client.await.unwrap();
        conn.answered(other);
        conn.answered(RemotingCommand::response_to(&sent, 0).with_ext("k", "v"));
        let answer = waiting.await.unwrap().unwrap();
        assert_eq!(answer.opaque, sent.opaque);
        assert_eq!(answer.get_str_opt("k"), Some("v"));
        assert!(conn.lock_pending().is_empty());
    }

    #[tokio::test]
    async fn a_call_nobody_answers_times_out_and_leaves_nothing_behind() {
        let (conn, _rx) = connection();
        let outcome = conn
            .call(
                RemotingCommand::request(307, Default::default()),
                Duration::from_millis(20),
            )
            .await;
        assert_eq!(
            outcome.unwrap_err(),
            CallError::TimedOut(Duration::from_millis(20))
        );
        assert!(conn.lock_pending().is_empty());
    }

    #[tokio::test]
    async fn a_call_on_a_closed_connection_fails_at_once() {
        let (conn, rx) = connection();
        drop(rx);
        let outcome = conn
            .call(
                RemotingCommand::request(307, Default::default()),
                Duration::from_secs(30),
            )
            .await;
        assert_eq!(outcome.unwrap_err(), CallError::Closed);
    }
}
