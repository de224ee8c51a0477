//! The request/response client: one pooled TCP connection per peer address carrying
//! multiplexed remoting commands (docs/protocol.md §1, §2.4).
//!
//! Every request gets a fresh `opaque`; a reader task routes each response to the waiting
//! caller by that opaque, a writer task batches outgoing frames. A failed or closed
//! connection fails its waiting callers and is replaced on the next request (reconnect on
//! demand). Requests initiated by the server (NOTIFY_CONSUMER_IDS_CHANGED,
//! CHECK_TRANSACTION_STATE, …) go to a user hook; non-oneway ones are answered with the
//! hook's reply, or REQUEST_CODE_NOT_SUPPORTED.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use conveyor_protocol::code::response_code;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::frame::{FrameCodec, DEFAULT_MAX_FRAME_SIZE};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::codec::Framed;
use tracing::{debug, warn};

use crate::codec::{CodecError, RemotingCodec};
use crate::error::{RemotingError, Result};

/// A connection's byte stream: TCP, or TLS over it.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin> Io for T {}

/// Transport settings.
#[derive(Debug, Clone)]
pub struct RemotingConfig {
    /// Limit for establishing a TCP connection.
    pub connect_timeout: Duration,
    /// Default limit for a request/response round trip (callers may pass their own).
    pub request_timeout: Duration,
    /// Largest frame sent or accepted (length prefix included).
    pub max_frame_size: usize,
    /// Frames that may wait for the writer task per connection before senders wait.
    pub write_queue: usize,
    /// Connect with TLS (default: what [`crate::tls::set_client_tls`] said for the process).
    pub tls: bool,
    /// Sign every request with these (default: what [`crate::acl::set_client_credentials`]
    /// said for the process).
    pub credentials: Option<std::sync::Arc<crate::acl::Credentials>>,
}

impl Default for RemotingConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(3),
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
            write_queue: 4096,
            tls: crate::tls::client_tls(),
            credentials: crate::acl::client_credentials(),
        }
    }
}

/// A request the server sent to this client.
#[derive(Debug, Clone)]
pub struct ServerRequest {
    /// Address of the connection it arrived on (as the client dialled it).
    pub addr: String,
    /// The request.
    pub command: RemotingCommand,
}

/// Hook for server-initiated requests. For a non-oneway request the returned command is sent
/// back as the response (opaque and response flag are set by the client); `None` answers
/// REQUEST_CODE_NOT_SUPPORTED. Oneway requests are never answered. Called on the
/// connection's reader task: it must not block.
pub type ServerRequestHandler = Arc<dyn Fn(ServerRequest) -> Option<RemotingCommand> + Send + Sync>;

/// A hook that forwards every server request into a channel (and answers none).
pub fn channel_handler() -> (ServerRequestHandler, mpsc::UnboundedReceiver<ServerRequest>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler: ServerRequestHandler = Arc::new(move |req| {
        let _ = tx.send(req);
        None
    });
    (handler, rx)
}

/// Pooled remoting client. Cheap to clone (shared state); connections close when the last
/// clone is dropped or on [`RemotingClient::close`].
#[derive(Clone)]
pub struct RemotingClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RemotingClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemotingClient")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    config: RemotingConfig,
    codec: FrameCodec,
    opaque: AtomicI32,
    conns: Mutex<HashMap<String, Arc<Connection>>>,
    connect_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    handler: RwLock<Option<ServerRequestHandler>>,
    local_ip: Mutex<Option<IpAddr>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let conns: Vec<_> = match self.conns.get_mut() {
            Ok(m) => m.drain().map(|(_, c)| c).collect(),
            Err(p) => p.into_inner().drain().map(|(_, c)| c).collect(),
        };
        for c in conns {
            c.close();
        }
    }
}

type Pending = HashMap<i32, oneshot::Sender<RemotingCommand>>;

/// One TCP connection with its reader and writer tasks.
struct Connection {
    addr: String,
    tx: mpsc::Sender<RemotingCommand>,
    pending: Mutex<PendingState>,
    closed: AtomicBool,
    tasks: Mutex<Vec<AbortHandle>>,
}

struct PendingState {
    closed: bool,
    waiters: Pending,
}

impl Connection {
    fn is_open(&self) -> bool {
        !self.closed.load(Ordering::Acquire)
    }

    /// Registers a waiter for `opaque`; fails if the connection is already closed.
    fn register(&self, opaque: i32) -> Result<oneshot::Receiver<RemotingCommand>> {
        let (tx, rx) = oneshot::channel();
        let mut p = lock(&self.pending);
        if p.closed {
            return Err(RemotingError::ConnectionClosed {
                addr: self.addr.clone(),
            });
        }
        p.waiters.insert(opaque, tx);
        Ok(rx)
    }

    fn unregister(&self, opaque: i32) {
        lock(&self.pending).waiters.remove(&opaque);
    }

    fn complete(&self, response: RemotingCommand) {
        let waiter = lock(&self.pending).waiters.remove(&response.opaque);
        match waiter {
            Some(w) => {
                let _ = w.send(response);
            }
            None => debug!(
                addr = %self.addr,
                opaque = response.opaque,
                "response for an unknown or expired request dropped"
            ),
        }
    }

    /// Marks the connection closed, stops its tasks and fails every waiter.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiters = {
            let mut p = lock(&self.pending);
            p.closed = true;
            std::mem::take(&mut p.waiters)
        };
        drop(waiters); // receivers observe the drop as "connection closed"
        for t in lock(&self.tasks).drain(..) {
            t.abort();
        }
    }
}

/// Locks a std mutex, ignoring poisoning (the protected state stays consistent: every
/// critical section is a single map operation).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Default for RemotingClient {
    fn default() -> Self {
        Self::new(RemotingConfig::default())
    }
}

impl RemotingClient {
    /// A client with no connection yet (connections open on first use).
    pub fn new(config: RemotingConfig) -> Self {
        let codec = FrameCodec::new(config.max_frame_size);
        Self {
            inner: Arc::new(Inner {
                config,
                codec,
                opaque: AtomicI32::new(1),
                conns: Mutex::new(HashMap::new()),
                connect_locks: Mutex::new(HashMap::new()),
                handler: RwLock::new(None),
                local_ip: Mutex::new(None),
            }),
        }
    }

    /// The settings.
    pub fn config(&self) -> &RemotingConfig {
        &self.inner.config
    }

    /// Installs (or replaces) the hook for server-initiated requests.
    pub fn set_server_request_handler(&self, handler: ServerRequestHandler) {
        let mut h = self
            .inner
            .handler
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *h = Some(handler);
    }

    /// The local IP of the most recently opened connection, once one exists.
    pub fn local_ip(&self) -> Option<IpAddr> {
        *lock(&self.inner.local_ip)
    }

    /// Sends `request` to `addr` and waits for its response (of any code) with the default
    /// timeout.
    pub async fn invoke(&self, addr: &str, request: RemotingCommand) -> Result<RemotingCommand> {
        self.invoke_timeout(addr, request, self.inner.config.request_timeout)
            .await
    }

    /// Sends `request` to `addr` and waits at most `timeout` for its response (of any code).
    /// The opaque of `request` is replaced by a fresh one.
    pub async fn invoke_timeout(
        &self,
        addr: &str,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        let code = request.code;
        let conn = self.connection(addr).await?;
        let opaque = self.next_opaque();
        request.opaque = opaque;
        request.flag &= !conveyor_protocol::command::FLAG_RESPONSE;
        if let Some(credentials) = &self.inner.config.credentials {
            credentials.sign(&mut request);
        }
        let rx = conn.register(opaque)?;
        let send_and_wait = async {
            conn.tx
                .send(request)
                .await
                .map_err(|_| RemotingError::ConnectionClosed {
                    addr: addr.to_string(),
                })?;
            rx.await.map_err(|_| RemotingError::ConnectionClosed {
                addr: addr.to_string(),
            })
        };
        match tokio::time::timeout(timeout, send_and_wait).await {
            Ok(result) => {
                if result.is_err() {
                    conn.unregister(opaque);
                }
                result
            }
            Err(_) => {
                conn.unregister(opaque);
                Err(RemotingError::Timeout {
                    addr: addr.to_string(),
                    code,
                    timeout,
                })
            }
        }
    }

    /// Like [`RemotingClient::invoke_timeout`], but a non-zero response code becomes
    /// [`RemotingError::Server`].
    pub async fn invoke_ok(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        expect_success(self.invoke_timeout(addr, request, timeout).await?)
    }

    /// Sends `request` with the ONEWAY flag; returns once it is queued for writing.
    pub async fn invoke_oneway(&self, addr: &str, mut request: RemotingCommand) -> Result<()> {
        let conn = self.connection(addr).await?;
        request.opaque = self.next_opaque();
        request.flag &= !conveyor_protocol::command::FLAG_RESPONSE;
        request.mark_oneway();
        if let Some(credentials) = &self.inner.config.credentials {
            credentials.sign(&mut request);
        }
        conn.tx
            .send(request)
            .await
            .map_err(|_| RemotingError::ConnectionClosed {
                addr: addr.to_string(),
            })
    }

    /// Closes every connection; later requests reconnect.
    pub fn close(&self) {
        let conns: Vec<_> = lock(&self.inner.conns).drain().map(|(_, c)| c).collect();
        for c in conns {
            c.close();
        }
    }

    /// Closes the connection to `addr`, if any.
    pub fn close_addr(&self, addr: &str) {
        if let Some(c) = lock(&self.inner.conns).remove(addr) {
            c.close();
        }
    }

    fn next_opaque(&self) -> i32 {
        self.inner.opaque.fetch_add(1, Ordering::Relaxed)
    }

    /// The open connection to `addr`, connecting if there is none.
    async fn connection(&self, addr: &str) -> Result<Arc<Connection>> {
        if let Some(c) = self.open_connection(addr) {
            return Ok(c);
        }
        let connect_lock = lock(&self.inner.connect_locks)
            .entry(addr.to_string())
            .or_default()
            .clone();
        let _guard = connect_lock.lock().await;
        if let Some(c) = self.open_connection(addr) {
            return Ok(c);
        }
        let conn = self.connect(addr).await?;
        lock(&self.inner.conns).insert(addr.to_string(), conn.clone());
        Ok(conn)
    }

    fn open_connection(&self, addr: &str) -> Option<Arc<Connection>> {
        let mut conns = lock(&self.inner.conns);
        match conns.get(addr) {
            Some(c) if c.is_open() => Some(c.clone()),
            Some(_) => {
                conns.remove(addr);
                None
            }
            None => None,
        }
    }

    async fn connect(&self, addr: &str) -> Result<Arc<Connection>> {
        let timeout = self.inner.config.connect_timeout;
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(RemotingError::Connect {
                    addr: addr.to_string(),
                    source,
                })
            }
            Err(_) => {
                return Err(RemotingError::ConnectTimeout {
                    addr: addr.to_string(),
                    timeout,
                })
            }
        };
        let _ = stream.set_nodelay(true);
        if let Ok(local) = stream.local_addr() {
            *lock(&self.inner.local_ip) = Some(local.ip());
        }
        debug!(addr, tls = self.inner.config.tls, "connected");
        let io: Box<dyn Io> = if self.inner.config.tls {
            let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .unwrap_or_else(|_| rustls::pki_types::ServerName::try_from("localhost").unwrap());
            let tls = tokio::time::timeout(timeout, crate::tls::connector().connect(name, stream))
                .await
                .map_err(|_| RemotingError::ConnectTimeout {
                    addr: addr.to_string(),
                    timeout,
                })?
                .map_err(|source| RemotingError::Connect {
                    addr: addr.to_string(),
                    source,
                })?;
            Box::new(tls)
        } else {
            Box::new(stream)
        };
        let framed = Framed::new(io, RemotingCodec(self.inner.codec));
        let (mut sink, mut stream) = framed.split();
        let (tx, mut rx) = mpsc::channel::<RemotingCommand>(self.inner.config.write_queue.max(1));
        let conn = Arc::new(Connection {
            addr: addr.to_string(),
            tx,
            pending: Mutex::new(PendingState {
                closed: false,
                waiters: HashMap::new(),
            }),
            closed: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
        });

        // Writer: drain everything queued, then flush once.
        let writer_conn = Arc::downgrade(&conn);
        let writer = tokio::spawn(async move {
            let result: Result<(), CodecError> = async {
                while let Some(first) = rx.recv().await {
                    sink.feed(first).await?;
                    while let Ok(next) = rx.try_recv() {
                        sink.feed(next).await?;
                    }
                    sink.flush().await?;
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                if let Some(c) = writer_conn.upgrade() {
                    warn!(addr = %c.addr, error = %e, "write failed; closing connection");
                    c.close();
                }
            }
        });

        // Reader: responses to waiters, requests to the hook.
        let reader_conn = conn.clone();
        let weak_inner: Weak<Inner> = Arc::downgrade(&self.inner);
        let reader = tokio::spawn(async move {
            let conn = reader_conn;
            loop {
                match stream.next().await {
                    Some(Ok(cmd)) if cmd.is_response() => conn.complete(cmd),
                    Some(Ok(cmd)) => handle_server_request(&weak_inner, &conn, cmd).await,
                    Some(Err(e)) => {
                        warn!(addr = %conn.addr, error = %e, "read failed; closing connection");
                        break;
                    }
                    None => {
                        debug!(addr = %conn.addr, "connection closed by peer");
                        break;
                    }
                }
            }
            conn.close();
            if let Some(inner) = weak_inner.upgrade() {
                let mut conns = lock(&inner.conns);
                if conns.get(&conn.addr).is_some_and(|c| Arc::ptr_eq(c, &conn)) {
                    conns.remove(&conn.addr);
                }
            }
        });
        {
            let mut tasks = lock(&conn.tasks);
            tasks.push(writer.abort_handle());
            tasks.push(reader.abort_handle());
        }
        Ok(conn)
    }
}

async fn handle_server_request(inner: &Weak<Inner>, conn: &Arc<Connection>, cmd: RemotingCommand) {
    let handler = inner
        .upgrade()
        .and_then(|i| i.handler.read().unwrap_or_else(|p| p.into_inner()).clone());
    let oneway = cmd.is_oneway();
    let opaque = cmd.opaque;
    let code = cmd.code;
    let reply = match handler {
        Some(h) => h(ServerRequest {
            addr: conn.addr.clone(),
            command: cmd,
        }),
        None => {
            debug!(addr = %conn.addr, code, "server request ignored (no handler)");
            None
        }
    };
    if oneway {
        return;
    }
    let mut response = reply.unwrap_or_else(|| {
        RemotingCommand::response(
            response_code::REQUEST_CODE_NOT_SUPPORTED,
            Some(format!("request code {code} not supported by this client")),
        )
    });
    response.opaque = opaque;
    response.mark_response();
    let _ = conn.tx.send(response).await;
}

/// Turns a non-zero response code into [`RemotingError::Server`].
pub fn expect_success(response: RemotingCommand) -> Result<RemotingCommand> {
    if response.code == response_code::SUCCESS {
        Ok(response)
    } else {
        Err(RemotingError::server(response.code, response.remark))
    }
}

#[cfg(test)]
mod tests;
