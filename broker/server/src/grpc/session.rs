//! Sessions: what the gRPC endpoint knows of each client (by its `x-mq-client-id`): the
//! settings it sent on its Telemetry stream, the stream's sending half (to push it commands),
//! and the in-process [`Connection`] its requests reach the broker on. The broker registers
//! the client's producer and consumer groups on that connection as for a remoting client, so
//! its transaction check-backs (CHECK_TRANSACTION_STATE) arrive on the connection's receiver
//! and are passed on as RecoverOrphanedTransactionCommands.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conveyor_grpc_api::v2::{
    settings::PubSub, telemetry_command, RecoverOrphanedTransactionCommand, Settings,
    TelemetryCommand,
};
use conveyor_protocol::code::request_code as rc;
use conveyor_protocol::message::decode_records;
use tokio::sync::mpsc;

use super::convert;
use super::renewal::Renewals;
use crate::remoting::{Connection, InProcessReceiver};

/// A client silent this long (no request, no open Telemetry stream) is forgotten, as the
/// broker expires a remoting client.
pub const SESSION_EXPIRY: Duration = Duration::from_secs(120);

/// Where a client's Telemetry stream is written.
pub type TelemetrySender = mpsc::Sender<Result<TelemetryCommand, conveyor_grpc_api::tonic::Status>>;

/// One client.
pub struct Session {
    /// `x-mq-client-id`.
    pub client_id: String,
    /// The connection its requests reach the broker on.
    pub conn: Connection,
    /// What the session changes.
    state: Mutex<SessionState>,
    /// Its push consumers' messages kept invisible (an async lock: a renewal holds it across
    /// its call to the broker, so an answer for the same message waits and takes the new
    /// handle).
    renewals: tokio::sync::Mutex<Renewals>,
}

/// The mutable part of a session.
#[derive(Default)]
struct SessionState {
    /// The client's last settings.
    settings: Option<Settings>,
    /// Its Telemetry stream, while open.
    telemetry: Option<TelemetrySender>,
    /// Its last request.
    last_seen: Option<Instant>,
}

impl Session {
    fn lock(&self) -> std::sync::MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its push consumers' messages kept invisible.
    pub fn renewals(&self) -> &tokio::sync::Mutex<Renewals> {
        &self.renewals
    }

    /// The client's settings, once it sent them.
    pub fn settings(&self) -> Option<Settings> {
        self.lock().settings.clone()
    }

    /// Records the client's settings.
    pub fn set_settings(&self, settings: Settings) {
        self.lock().settings = Some(settings);
    }

    /// Records the client's Telemetry stream.
    pub fn set_telemetry(&self, tx: TelemetrySender) {
        self.lock().telemetry = Some(tx);
    }

    /// Marks the session used now.
    pub fn touch(&self) {
        self.lock().last_seen = Some(Instant::now());
    }

    /// Producer topics of its settings.
    pub fn publishing(&self) -> Vec<String> {
        match self.settings().and_then(|s| s.pub_sub) {
            Some(PubSub::Publishing(p)) => p.topics.iter().map(|t| t.name.clone()).collect(),
            _ => Vec::new(),
        }
    }

    fn expired(&self, now: Instant) -> bool {
        let s = self.lock();
        let open = s.telemetry.as_ref().is_some_and(|t| !t.is_closed());
        !open
            && s.last_seen
                .is_none_or(|t| now.duration_since(t) > SESSION_EXPIRY)
    }

    /// Sends the client a command on its Telemetry stream (dropped when none is open or it
    /// does not keep up: the broker checks again later).
    fn push(&self, command: TelemetryCommand) -> bool {
        let tx = self.lock().telemetry.clone();
        tx.is_some_and(|tx| tx.try_send(Ok(command)).is_ok())
    }
}

/// Every client of the endpoint.
#[derive(Default)]
pub struct Sessions {
    /// By client id.
    map: Mutex<HashMap<String, Arc<Session>>>,
}

impl Sessions {
    /// The session of `client_id`, created on first contact. `broker_name` names this broker in
    /// the transaction ids of the check-backs it passes on.
    pub fn get_or_create(
        &self,
        client_id: &str,
        peer: SocketAddr,
        local: SocketAddr,
        broker_name: &str,
    ) -> Arc<Session> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = map.get(client_id) {
            s.touch();
            return s.clone();
        }
        let (conn, rx) = Connection::in_process(peer, local);
        let session = Arc::new(Session {
            client_id: client_id.to_string(),
            conn,
            state: Mutex::new(SessionState::default()),
            renewals: Default::default(),
        });
        session.touch();
        tokio::spawn(forward(
            Arc::downgrade(&session),
            rx,
            broker_name.to_string(),
        ));
        map.insert(client_id.to_string(), session.clone());
        session
    }

    /// The session of `client_id`, if it has one.
    pub fn get(&self, client_id: &str) -> Option<Arc<Session>> {
        let s = self
            .map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(client_id)
            .cloned();
        if let Some(s) = &s {
            s.touch();
        }
        s
    }

    /// Every session.
    pub fn all(&self) -> Vec<Arc<Session>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// Forgets a client (it said it terminates).
    pub fn remove(&self, client_id: &str) -> Option<Arc<Session>> {
        self.map
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(client_id)
    }

    /// Forgets the clients silent for [`SESSION_EXPIRY`]; returns them.
    pub fn expire(&self, now: Instant) -> Vec<Arc<Session>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let gone: Vec<String> = map
            .iter()
            .filter(|(_, s)| s.expired(now))
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|k| map.remove(k)).collect()
    }
}

/// Passes what the broker sends a session's connection on to its Telemetry stream.
async fn forward(
    session: std::sync::Weak<Session>,
    mut rx: InProcessReceiver,
    broker_name: String,
) {
    while let Some(cmd) = rx.recv().await {
        let Some(session) = session.upgrade() else {
            return;
        };
        if cmd.code != rc::CHECK_TRANSACTION_STATE {
            continue; // the gRPC API has no counterpart (consumer-id changes and the like)
        }
        let (Some(phys), Some(half)) = (
            cmd.get_str_opt("commitLogOffset")
                .and_then(|v| v.parse::<i64>().ok()),
            cmd.get_str_opt("tranStateTableOffset")
                .and_then(|v| v.parse::<i64>().ok()),
        ) else {
            continue;
        };
        let Some(message) = decode_records(&cmd.body)
            .ok()
            .and_then(|m| m.into_iter().next())
        else {
            continue;
        };
        let topic = message.topic.clone();
        let command = TelemetryCommand {
            status: Some(convert::ok()),
            command: Some(
                telemetry_command::Command::RecoverOrphanedTransactionCommand(
                    RecoverOrphanedTransactionCommand {
                        message: Some(convert::inbound(&message, &topic, None, None)),
                        transaction_id: convert::transaction_id(&broker_name, phys, half),
                    },
                ),
            ),
        };
        if !session.push(command) {
            tracing::debug!(
                client = session.client_id,
                "transaction check-back dropped: no Telemetry stream"
            );
        }
    }
}
