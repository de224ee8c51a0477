//! Link: a persistent outbound connection for request/response calls (broker → name
//! server). The name server drops a broker's routes as soon as its connection closes, so the
//! broker keeps one connection per name server open instead of dialling per registration.

use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use conveyor_protocol::command::RemotingCommand;
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_util::codec::Framed;

use super::{CodecError, RemotingCodec};

/// Why a call over a link failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Transport(#[from] CodecError),
    #[error("connection closed by {0}")]
    Closed(String),
    #[error("no response from {0} in time")]
    Timeout(String),
}

/// One outbound connection, re-established on demand; calls are serialised.
pub struct Link {
    addr: String,
    conn: Mutex<Option<Framed<TcpStream, RemotingCodec>>>,
    next_opaque: AtomicI32,
}

impl Link {
    /// A link to `addr` ("host:port"); nothing is dialled until the first call.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            conn: Mutex::new(None),
            next_opaque: AtomicI32::new(1),
        }
    }

    /// The remote address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` and waits for its response.
    pub async fn call(
        &self,
        mut request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, LinkError> {
        request.opaque = self.next_opaque.fetch_add(1, Ordering::Relaxed);
        let opaque = request.opaque;
        let mut guard = self.conn.lock().await;
        let result = tokio::time::timeout(timeout, async {
            if guard.is_none() {
                let stream =
                    TcpStream::connect(&self.addr)
                        .await
                        .map_err(|source| LinkError::Connect {
                            addr: self.addr.clone(),
                            source,
                        })?;
                let _ = stream.set_nodelay(true);
                *guard = Some(Framed::new(stream, RemotingCodec::default()));
            }
            let framed = guard
                .as_mut()
                .ok_or_else(|| LinkError::Closed(self.addr.clone()))?;
            framed.send(request).await?;
            loop {
                match framed.next().await {
                    Some(Ok(cmd)) if cmd.is_response() && cmd.opaque == opaque => return Ok(cmd),
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(LinkError::Closed(self.addr.clone())),
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(LinkError::Timeout(self.addr.clone())));
        if result.is_err() {
            // The stream may be mid-frame: start over next time.
            *guard = None;
        }
        result
    }

    /// Drops the connection (after UNREGISTER_BROKER on shutdown).
    pub async fn close(&self) {
        *self.conn.lock().await = None;
    }
}
