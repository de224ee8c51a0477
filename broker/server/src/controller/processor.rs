//! The controller's requests over RocketMQ's remoting protocol (the 1001-1004 and 904 codes
//! of controller mode, with RocketMQ's header names), mapped to the [`Controller`] service.
//! Every answer that concerns a group carries its replica info: `masterBrokerId` (-1 when
//! none), `masterAddress`, `masterHaAddress` (Conveyor), `masterEpoch`, `syncStateSetEpoch`,
//! and the body `{"syncStateSet":[..],"syncStateSetEpoch":n}`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use serde::{Deserialize, Serialize};

use super::decide::{ControllerError, Member};
use super::service::{Controller, ReplicaInfo, ServiceError, Switchover};
use crate::remoting::{error_response, not_supported, Connection, Processor};

/// The Conveyor field every request of a broker with a `controller-scope` carries: which of a
/// controller's clusters it belongs to (the operator's controller decides for many).
pub const CONTROLLER_SCOPE: &str = "controllerScope";

/// Conveyor's field of a heartbeat answer during a switchover: the replica taking over (see
/// [`Controller::switchover`]). Told to the master, it hands over; told to that replica
/// itself, it heartbeats again at once until it hears of its election.
pub const HAND_OFF_TO: &str = "handOffTo";

/// Conveyor's field of a master's heartbeat saying it takes no writes and the replica taking
/// over holds its log up to this end: elect it.
pub const HAND_OFF_READY: &str = "handOffReady";

/// Conveyor's field of CONTROLLER_ELECT_MASTER asking for a switchover that loses nothing
/// ([`Controller::switchover`]) instead of RocketMQ's immediate election.
pub const HAND_OFF: &str = "handOff";

/// CONTROLLER_ELECT_MASTER making replica `broker_id` of `group` master: a switchover that
/// loses nothing (`hand_off`) or RocketMQ's immediate election.
pub fn elect_master_request(group: &str, broker_id: i64, hand_off: bool) -> RemotingCommand {
    RemotingCommand::request(rc::CONTROLLER_ELECT_MASTER, Default::default())
        .with_ext("brokerName", group)
        .with_ext("brokerId", broker_id)
        .with_ext(HAND_OFF, if hand_off { "true" } else { "false" })
}

/// A handler's outcome: the response, or an error response.
pub type Reply = Result<RemotingCommand, RemotingCommand>;

/// A success response to `req`.
fn ok(req: &RemotingCommand) -> RemotingCommand {
    RemotingCommand::response_to(req, resp::SUCCESS)
}

/// RocketMQ's SyncStateSet body.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncStateSetBody {
    /// Broker ids in the set.
    pub sync_state_set: BTreeSet<i64>,
    /// The set's epoch.
    pub sync_state_set_epoch: u32,
    /// Every registered replica with its addresses (Conveyor; RocketMQ sends them in
    /// BrokerMemberGroup).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub members: BTreeMap<i64, Member>,
}

/// The answer to `req` carrying `info`.
pub fn replica_info_response(req: &RemotingCommand, info: &ReplicaInfo) -> RemotingCommand {
    let body = SyncStateSetBody {
        sync_state_set: info.sync_state_set.clone(),
        sync_state_set_epoch: info.sync_state_set_epoch,
        members: info.members.clone(),
    };
    let member = info.master_member.clone().unwrap_or_default();
    let answer = match info.hand_off_to {
        Some(target) => ok(req).with_ext(HAND_OFF_TO, target),
        None => ok(req),
    };
    answer
        .with_ext("masterBrokerId", info.master.unwrap_or(-1))
        .with_ext("masterAddress", member.addr)
        .with_ext("masterHaAddress", member.ha_addr)
        .with_ext("masterEpoch", info.master_epoch)
        .with_ext("syncStateSetEpoch", info.sync_state_set_epoch)
        .with_body(conveyor_protocol::json::to_vec(&body).unwrap_or_default())
}

/// Reads replica info back from an answer (the broker's side).
pub fn parse_replica_info(r: &RemotingCommand) -> Result<ReplicaInfo, String> {
    let master = r.get_i64("masterBrokerId").map_err(|e| e.to_string())?;
    let body: SyncStateSetBody =
        conveyor_protocol::json::from_slice(&r.body).map_err(|e| e.to_string())?;
    Ok(ReplicaInfo {
        master: (master >= 0).then_some(master),
        master_member: (master >= 0).then(|| Member {
            addr: r
                .get_str_opt("masterAddress")
                .unwrap_or_default()
                .to_string(),
            ha_addr: r
                .get_str_opt("masterHaAddress")
                .unwrap_or_default()
                .to_string(),
        }),
        master_epoch: r.get_i64("masterEpoch").map_err(|e| e.to_string())? as u32,
        sync_state_set: body.sync_state_set,
        sync_state_set_epoch: body.sync_state_set_epoch,
        members: body.members,
        hand_off_to: r.get_i64_opt(HAND_OFF_TO).ok().flatten(),
    })
}

fn refusal(req: &RemotingCommand, e: ServiceError) -> RemotingCommand {
    let code = match &e {
        ServiceError::Decision(ControllerError::FencedMasterEpoch { .. }) => {
            resp::CONTROLLER_FENCED_MASTER_EPOCH
        }
        ServiceError::Decision(ControllerError::FencedSyncStateSetEpoch { .. }) => {
            resp::CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH
        }
        ServiceError::Decision(ControllerError::InvalidMaster(_)) => {
            resp::CONTROLLER_INVALID_MASTER
        }
        ServiceError::Decision(ControllerError::InvalidSyncStateSet(_)) => {
            resp::CONTROLLER_ALTER_SYNC_STATE_SET_FAILED
        }
        ServiceError::Decision(ControllerError::MasterNotAvailable(_)) => {
            resp::CONTROLLER_MASTER_NOT_AVAILABLE
        }
        ServiceError::Decision(ControllerError::MasterStillExists(_)) => {
            resp::CONTROLLER_MASTER_STILL_EXIST
        }
        ServiceError::Decision(ControllerError::Unknown(_)) => {
            resp::CONTROLLER_BROKER_METADATA_NOT_EXIST
        }
        ServiceError::Save(_) => resp::SYSTEM_ERROR,
    };
    error_response(req, code, e.to_string())
}

fn header<'a>(req: &'a RemotingCommand, key: &str) -> Result<&'a str, RemotingCommand> {
    req.get_str(key)
        .map_err(|e| error_response(req, resp::INVALID_PARAMETER, e.to_string()))
}

fn number(req: &RemotingCommand, key: &str) -> Result<i64, RemotingCommand> {
    req.get_i64(key)
        .map_err(|e| error_response(req, resp::INVALID_PARAMETER, e.to_string()))
}

/// The name this controller gives itself in CONTROLLER_GET_METADATA_INFO (RocketMQ's DLedger
/// peer id; Conveyor runs one controller, its own leader).
const CONTROLLER_ID: &str = "n0";

/// RocketMQ's ReplicaIdentity.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaIdentity {
    broker_name: String,
    broker_id: i64,
    broker_address: String,
    alive: bool,
}

/// RocketMQ's ReplicasInfo: one group's master, epochs and replicas in and out of sync.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplicasInfo {
    master_broker_id: i64,
    master_address: String,
    master_epoch: u32,
    sync_state_set_epoch: u32,
    in_sync_replicas: Vec<ReplicaIdentity>,
    not_in_sync_replicas: Vec<ReplicaIdentity>,
}

/// RocketMQ's BrokerReplicasInfo (CONTROLLER_GET_SYNC_STATE_DATA's answer).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BrokerReplicasInfo {
    replicas_info_table: BTreeMap<String, ReplicasInfo>,
}

impl Controller {
    /// The answer to one controller request `req` that came on `conn`.
    pub fn answer(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let info = match req.code {
            rc::CONTROLLER_REGISTER_BROKER => {
                let member = Member {
                    addr: header(req, "brokerAddress")?.to_string(),
                    ha_addr: req.get_str_opt("haAddress").unwrap_or_default().to_string(),
                };
                self.register(
                    header(req, "clusterName")?,
                    header(req, "brokerName")?,
                    number(req, "brokerId")?,
                    member,
                    // Conveyor: the last epoch of the replica's log (0 when not sent).
                    req.get_i64_opt("epoch")
                        .ok()
                        .flatten()
                        .unwrap_or(0)
                        .clamp(0, u32::MAX as i64) as u32,
                    Some(conn.id()),
                )
            }
            rc::BROKER_HEARTBEAT => self.heartbeat(
                header(req, "brokerName")?,
                number(req, "brokerId")?,
                number(req, "epoch")?.max(0) as u32,
                number(req, "maxOffset")?.max(0) as u64,
                Some(conn.id()),
                req.get_i64_opt(HAND_OFF_READY)
                    .ok()
                    .flatten()
                    .map(|end| end.max(0) as u64),
            ),
            rc::CONTROLLER_GET_REPLICA_INFO => self.replica_info(header(req, "brokerName")?),
            rc::CONTROLLER_GET_METADATA_INFO => {
                // One controller: the leader, reachable at the address the caller used.
                let addr = conn.local().to_string();
                return Ok(ok(req)
                    .with_ext("group", "conveyor")
                    .with_ext("controllerLeaderId", CONTROLLER_ID)
                    .with_ext("controllerLeaderAddress", addr.as_str())
                    .with_ext("isLeader", true)
                    .with_ext("peers", format!("{CONTROLLER_ID}:{addr};")));
            }
            rc::CONTROLLER_GET_SYNC_STATE_DATA => return self.sync_state_data(req),
            rc::CONTROLLER_ELECT_MASTER => {
                let designated = req
                    .get_i64_opt("brokerId")
                    .ok()
                    .flatten()
                    .filter(|id| *id >= 0);
                let group = header(req, "brokerName")?;
                match designated {
                    // Conveyor's switchover: answered once started; the caller watches the
                    // replica info for the new master.
                    Some(target) if req.get_bool_opt(HAND_OFF).ok().flatten() == Some(true) => {
                        self.switchover(group, target).and_then(|s| match s {
                            Switchover::Elected(info) => Ok(info),
                            Switchover::Started
                            | Switchover::Pending
                            | Switchover::AlreadyMaster => self.replica_info(group),
                        })
                    }
                    _ => self.elect(group, designated),
                }
            }
            rc::CONTROLLER_ALTER_SYNC_STATE_SET => {
                let body: SyncStateSetBody = conveyor_protocol::json::from_slice(&req.body)
                    .map_err(|e| error_response(req, resp::INVALID_PARAMETER, e.to_string()))?;
                let epoch = self
                    .alter_sync_state_set(
                        header(req, "brokerName")?,
                        number(req, "masterBrokerId")?,
                        number(req, "masterEpoch")?.max(0) as u32,
                        body.sync_state_set_epoch,
                        body.sync_state_set,
                    )
                    .map_err(|e| refusal(req, e))?;
                return Ok(ok(req).with_ext("newSyncStateSetEpoch", epoch));
            }
            _ => return Err(not_supported(req)),
        };
        info.map(|i| replica_info_response(req, &i))
            .map_err(|e| refusal(req, e))
    }
}

impl Controller {
    /// CONTROLLER_GET_SYNC_STATE_DATA (`mqadmin getSyncStateSet`): the body names broker
    /// groups (a JSON array); unknown ones are left out, as RocketMQ does.
    fn sync_state_data(&self, req: &RemotingCommand) -> Reply {
        let names: Vec<String> = conveyor_protocol::json::from_slice(&req.body).map_err(|e| {
            error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("the body must be a JSON array of broker names: {e}"),
            )
        })?;
        let mut table = BTreeMap::new();
        for name in names {
            let Ok(info) = self.replica_info(&name) else {
                continue;
            };
            let alive = self.liveness(&name);
            let (mut in_sync, mut out_of_sync) = (Vec::new(), Vec::new());
            for (id, member) in &info.members {
                let replica = ReplicaIdentity {
                    broker_name: name.clone(),
                    broker_id: *id,
                    broker_address: member.addr.clone(),
                    alive: alive.get(id).copied().unwrap_or(false),
                };
                if info.sync_state_set.contains(id) {
                    in_sync.push(replica);
                } else {
                    out_of_sync.push(replica);
                }
            }
            table.insert(
                name.clone(),
                ReplicasInfo {
                    master_broker_id: info.master.unwrap_or(-1),
                    master_address: info.master_member.map(|m| m.addr).unwrap_or_default(),
                    master_epoch: info.master_epoch,
                    sync_state_set_epoch: info.sync_state_set_epoch,
                    in_sync_replicas: in_sync,
                    not_in_sync_replicas: out_of_sync,
                },
            );
        }
        let body = BrokerReplicasInfo {
            replicas_info_table: table,
        };
        let body = conveyor_protocol::json::to_vec(&body)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        Ok(ok(req).with_body(body))
    }
}

impl Processor for Controller {
    async fn handle(
        self: Arc<Self>,
        conn: Connection,
        request: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(self.answer(&conn, &request).unwrap_or_else(|e| e))
    }

    fn on_disconnect(&self, conn: &Connection) {
        self.connection_closed(conn.id());
    }

    fn runs_inline(&self, _request: &RemotingCommand) -> bool {
        // Answers never wait on anything but the state file's fsync.
        false
    }
}
