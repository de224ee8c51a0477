//! A client connection as the server sees it: its identity, peer address and a handle to
//! send it commands (responses, and server-initiated requests such as
//! NOTIFY_CONSUMER_IDS_CHANGED or CHECK_TRANSACTION_STATE).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use conveyor_protocol::command::RemotingCommand;
use tokio::sync::mpsc;

/// Process-unique connection id.
pub type ConnectionId = u64;

/// Cheap-to-clone handle to one connection.
#[derive(Debug, Clone)]
pub struct Connection {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    id: ConnectionId,
    peer: SocketAddr,
    tx: mpsc::Sender<RemotingCommand>,
    next_opaque: AtomicI32,
}

impl Connection {
    pub(crate) fn new(
        id: ConnectionId,
        peer: SocketAddr,
        tx: mpsc::Sender<RemotingCommand>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                id,
                peer,
                tx,
                next_opaque: AtomicI32::new(1),
            }),
        }
    }

    /// The connection id.
    pub fn id(&self) -> ConnectionId {
        self.inner.id
    }

    /// The client's address (the born host of messages it sends).
    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// True while the connection's writer is alive.
    pub fn is_open(&self) -> bool {
        !self.inner.tx.is_closed()
    }

    /// Queues a response for writing.
    pub async fn respond(&self, response: RemotingCommand) -> bool {
        self.inner.tx.send(response).await.is_ok()
    }

    /// Sends a oneway request initiated by the server (the client does not answer). Never
    /// waits: if the connection's queue is full, the notification is dropped (the clients
    /// re-sync on their own timers anyway) rather than stalling the caller.
    pub fn send_oneway(&self, mut request: RemotingCommand) -> bool {
        request.opaque = self.inner.next_opaque.fetch_add(1, Ordering::Relaxed);
        request.mark_oneway();
        self.inner.tx.try_send(request).is_ok()
    }
}
