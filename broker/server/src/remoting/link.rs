//! Link: the broker's persistent outbound connection to one name server. The name server drops
//! a broker's routes as soon as its connection closes, so the broker keeps one connection per
//! name server open (the shared [`RemotingClient`] pools it and reconnects on demand) instead
//! of dialling per registration.

use std::time::Duration;

use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::{RemotingClient, RemotingConfig, RemotingError};

/// One name server's connection; calls are multiplexed over it.
pub struct Link {
    /// The name server ("host:port").
    addr: String,
    /// The transport (one pooled connection to `addr`).
    client: RemotingClient,
}

impl Link {
    /// A link to `addr` ("host:port"); nothing is dialled until the first call.
    pub fn new(addr: impl Into<String>) -> Self {
        Self {
            addr: addr.into(),
            client: RemotingClient::new(RemotingConfig::default()),
        }
    }

    /// The remote address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Sends `request` and waits at most `timeout` for its response.
    pub async fn call(
        &self,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, RemotingError> {
        self.client
            .invoke_timeout(&self.addr, request, timeout)
            .await
    }

    /// Drops the connection (after UNREGISTER_BROKER on shutdown).
    pub async fn close(&self) {
        self.client.close();
    }
}
