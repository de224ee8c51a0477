//! The gRPC port's connections: accepted, told TLS from plaintext ([`crate::tls`]) and
//! handed to tonic. Each handshake runs in a task of its own, so a slow or silent client
//! never holds up the next one's accept.

use std::io;

use conveyor_grpc_api::tonic::transport::server::{Connected, TcpConnectInfo};
use futures_util::stream::{self, Stream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::tls::{Acceptor, MaybeTls};

/// How many accepted connections may wait for tonic to take them.
const BACKLOG: usize = 128;

impl Connected for MaybeTls {
    type ConnectInfo = TcpConnectInfo;

    /// The peer's address, TLS or not (the sessions key clients by it).
    fn connect_info(&self) -> TcpConnectInfo {
        self.tcp().connect_info()
    }
}

/// The connections of `listener` as tonic takes them, until `shutdown`.
pub fn connections(
    listener: TcpListener,
    acceptor: Acceptor,
    shutdown: CancellationToken,
) -> impl Stream<Item = io::Result<MaybeTls>> {
    let (tx, rx) = mpsc::channel(BACKLOG);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.cancelled() => return,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %e, "gRPC accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match acceptor.accept(tcp, crate::tls::HANDSHAKE_TIMEOUT).await {
                    Ok(conn) => {
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "gRPC connection refused"),
                }
            });
        }
    });
    stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}
