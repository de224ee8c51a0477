//! Writes that reach a replica which is not the master of its group. In controller mode the
//! master moves (a failover, a switchover during a rolling restart) while clients keep the
//! old master's address in their routes until their next name-server poll, 30 s later with
//! RocketMQ's defaults. Refusing would fail every send until then; instead a replica that
//! knows its group's current master relays the request there and the answer back, so clients
//! reconnecting to a former master's address write again as soon as it is up as a slave.
//!
//! The master stores and acknowledges exactly as for a direct send (its STOREHOST is in the
//! message id, and the offsets are its own), so the relay adds one hop and changes nothing
//! else. A relayed request is marked: its receiver waits briefly to learn of its own election
//! (the former master may have heard of it first), and one that is still not master then (the
//! master moved again meanwhile) refuses it instead of relaying it on, so requests never loop.

use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::{RemotingClient, RemotingConfig};

use super::reply::Reply;
use crate::ha::{Replication, RoleState};
use crate::remoting::error_response;

/// The ext field that marks a relayed request.
const RELAYED: &str = "conveyorRelayed";

/// How long the master may take: a SYNC flush or slave acknowledgement waits up to the
/// broker's sync timeout (5 s by default) before it answers.
const RELAY_TIMEOUT: Duration = Duration::from_secs(8);

/// How long a relayed write waits for its receiver to become master: the controller tells
/// each replica on its next heartbeat (every second by default), so the former master may
/// hear of an election and relay before the new master knows it was elected.
const PROMOTION_WAIT: Duration = Duration::from_secs(3);

/// The request codes that change a group's data and so must reach its master.
pub fn is_write(code: i32) -> bool {
    matches!(
        code,
        rc::SEND_MESSAGE
            | rc::SEND_MESSAGE_V2
            | rc::SEND_BATCH_MESSAGE
            | rc::RECALL_MESSAGE
            | rc::CONSUMER_SEND_MSG_BACK
            | rc::END_TRANSACTION
            | rc::UPDATE_CONSUMER_OFFSET
    )
}

/// Relays writes from a replica that is not master to the master of its group.
pub struct WriteRelay {
    /// This replica's role and, as a slave, its master's remoting address.
    replication: Arc<Replication>,
    /// Connections to the master.
    client: RemotingClient,
}

/// What to do with a write.
pub enum Route {
    /// This broker is master: handle it here.
    Local,
    /// Relay it to the master at this address.
    Master(String),
}

impl WriteRelay {
    /// A relay for the broker whose role `replication` holds.
    pub fn new(replication: Arc<Replication>) -> Self {
        Self {
            replication,
            client: RemotingClient::new(RemotingConfig::default()),
        }
    }

    /// Where write `req` goes: here when this broker is master; the master's address when
    /// this is a slave in controller mode that knows it and the request was not relayed
    /// already; otherwise SERVICE_NOT_AVAILABLE saying why. A consumer offset that cannot be
    /// relayed is kept here, as RocketMQ's slaves do (the master's copy wins at the next
    /// metadata sync).
    pub async fn route(&self, req: &RemotingCommand) -> Result<Route, RemotingCommand> {
        if self.replication.is_master() {
            return Ok(Route::Local);
        }
        if req.ext(RELAYED).is_some() && self.became_master().await {
            // The former master heard of the election before this broker did.
            return Ok(Route::Local);
        }
        let refuse = |why: &str| {
            if req.code == rc::UPDATE_CONSUMER_OFFSET {
                return Ok(Route::Local);
            }
            Err(error_response(
                req,
                resp::SERVICE_NOT_AVAILABLE,
                format!(
                    "this broker is not the master of {}: it takes no writes ({why}); send to \
                     the master of its group",
                    self.replication.broker_name()
                ),
            ))
        };
        if !self.replication.config().controller_mode() {
            return refuse("a classic slave");
        }
        if req.ext(RELAYED).is_some() {
            return refuse("the request was relayed here by a former master already");
        }
        let slave = matches!(self.replication.role_state(), RoleState::Slave { .. });
        match self.replication.master_broker() {
            Some(master) if slave => Ok(Route::Master(master)),
            _ => refuse("no master is known for the group right now"),
        }
    }

    /// Waits at most [`PROMOTION_WAIT`] for this broker to become master; true if it did.
    async fn became_master(&self) -> bool {
        let mut role = self.replication.role_changes();
        if !self.replication.is_master() {
            self.replication.ask_controller_now();
        }
        let promoted = async {
            role.wait_for(|r| matches!(r, RoleState::Master { .. }))
                .await
                .is_ok()
        };
        tokio::time::timeout(PROMOTION_WAIT, promoted)
            .await
            .unwrap_or(false)
    }

    /// The answer to send `req` that this broker stored as master: unchanged, unless the
    /// broker was deposed while the send waited for its slaves (a switchover or a failover
    /// named another master, whose stream stopped acknowledging). Then the record will be cut
    /// from this log when it follows the new master, so rather than answering
    /// SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT the send is relayed to the new master,
    /// which stores and acknowledges it. (If the new master had already received this
    /// broker's copy, the message is stored twice: at least once, as with a client retry.)
    pub async fn after_demotion(&self, req: &RemotingCommand, answer: Reply) -> Reply {
        let code = match &answer {
            Ok(r) | Err(r) => r.code,
        };
        if !matches!(code, resp::SLAVE_NOT_AVAILABLE | resp::FLUSH_SLAVE_TIMEOUT)
            || self.replication.is_master()
        {
            return answer;
        }
        match self.route(req).await {
            Ok(Route::Master(master)) => {
                tracing::info!(
                    master,
                    "deposed while a send waited for slaves: relayed to the new master"
                );
                self.relay(&master, req).await
            }
            _ => answer,
        }
    }

    /// Sends `req` to the master at `master` and returns its answer as this broker's.
    pub async fn relay(&self, master: &str, req: &RemotingCommand) -> Reply {
        let forwarded = req.clone().with_ext(RELAYED, "true");
        if req.is_oneway() {
            // Nobody waits for an answer (Java commits offsets this way).
            if let Err(e) = self.client.invoke_oneway(master, forwarded).await {
                tracing::debug!(master, error = %e, "a relayed oneway write was lost");
            }
            return Ok(super::reply::ok(req));
        }
        match self
            .client
            .invoke_timeout(master, forwarded, RELAY_TIMEOUT)
            .await
        {
            Ok(mut answer) => {
                answer.opaque = req.opaque;
                if answer.code == resp::SUCCESS {
                    Ok(answer)
                } else {
                    Err(answer)
                }
            }
            Err(e) => Err(error_response(
                req,
                resp::SERVICE_NOT_AVAILABLE,
                format!(
                    "the master of this group at {master} did not answer the relayed write: {e}"
                ),
            )),
        }
    }
}
