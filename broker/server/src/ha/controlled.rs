//! Controller mode on the broker (RocketMQ 5's ReplicasManager): register with the
//! controller, heartbeat to it with the log's epoch and end, and take the role it answers —
//! master of a new epoch, slave of another replica, or fenced while no master exists. As a
//! master it also keeps the in-sync set honest: a slave that caught up is added, one whose
//! stream closed or that stayed behind too long is dropped, each change asked of the controller by
//! compare-and-set, and while a change is pending acknowledgements need the union of the
//! old and the new set, so a master can never quietly shrink the set to itself.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::{RemotingClient, RemotingConfig};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::acks::Requirement;
use super::replication::{Replication, RoleState};
use crate::controller::processor::{
    elect_master_request, parse_replica_info, SyncStateSetBody, CONTROLLER_SCOPE, HAND_OFF_READY,
};
use crate::controller::ReplicaInfo;

/// How long one controller request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// What the master side remembers between heartbeats.
#[derive(Default)]
struct InSyncKeeper {
    /// The set and its epoch as the controller last confirmed them.
    current: Option<(BTreeSet<i64>, u32)>,
    /// A change whose outcome is unknown (no answer): the union acknowledgements need, and
    /// the set epoch it was asked against. Settled once the controller shows a newer epoch.
    pending: Option<(BTreeSet<i64>, u32)>,
    /// Since when each member has been behind or away.
    behind_since: HashMap<i64, Instant>,
    /// The master's log end at the previous heartbeat: a slave that acknowledged that much
    /// has caught up.
    last_end: u64,
}

/// Follows the controller until `shutdown`.
pub(super) async fn run(repl: Arc<Replication>, shutdown: CancellationToken) {
    let client = RemotingClient::new(RemotingConfig::default());
    let addrs = repl.config.controller_addrs.clone();
    let mut which = 0usize;
    let mut registered = false;
    let mut keeper = InSyncKeeper::default();
    let mut tick = tokio::time::interval(repl.config.controller_heartbeat());
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            // A master whose slave's stream closed drops it from the in-sync set now (the
            // keeper runs after this heartbeat), not up to a tick later.
            _ = repl.acks.slave_left(), if repl.is_master() => {}
            // A former master relayed writes here (this replica may be their master already),
            // or a stopping master asked for a switchover (the answer tells it to hand over).
            _ = repl.ask_controller.notified() => {}
            _ = shutdown.cancelled() => return,
        }
        let addr = &addrs[which % addrs.len()];
        let request = if registered {
            heartbeat(&repl)
        } else {
            register(&repl)
        };
        let answer = match client.invoke_timeout(addr, request, REQUEST_TIMEOUT).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(controller = %addr, error = %e, "controller unreachable");
                which += 1;
                continue;
            }
        };
        match answer.code {
            resp::SUCCESS => registered = true,
            resp::CONTROLLER_BROKER_METADATA_NOT_EXIST => {
                registered = false;
                continue;
            }
            code => {
                tracing::warn!(controller = %addr, code, remark = ?answer.remark, "controller refused");
                continue;
            }
        }
        let info = match parse_replica_info(&answer) {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(controller = %addr, error = %e, "bad answer from the controller");
                continue;
            }
        };
        if let Err(e) = apply(&repl, &info).await {
            tracing::error!(error = %e, "could not take the role the controller named");
            continue;
        }
        if !repl.is_master() && info.hand_off_to == Some(repl.broker_id) {
            // Elected any moment now (a switchover to this replica): ask again soon rather
            // than a heartbeat interval later.
            tick.reset_after(HAND_OFF_POLL);
        }
        if repl.is_master() {
            match info.hand_off_to {
                Some(target) if target != repl.broker_id => {
                    hand_off(&repl, &client, addr, target).await;
                }
                _ => keep_in_sync(&repl, &client, addr, &info, &mut keeper).await,
            }
        } else {
            keeper = InSyncKeeper::default();
        }
    }
}

/// The longest a master handing over holds writes: waiting for the writes in flight, then
/// for the target to acknowledge the log's end. Past it the switchover is given up here and
/// writes go on (the controller gives it up too).
const HAND_OFF_LIMIT: Duration = Duration::from_secs(3);

/// How soon a replica being handed a group asks the controller again.
const HAND_OFF_POLL: Duration = Duration::from_millis(20);

/// A switchover (the controller's `handOffTo`): stop taking writes, wait until `target`
/// acknowledged the whole log, say so in an immediate heartbeat, whose answer names the
/// target master, and take that role before writes resume; the writes that waited are then
/// relayed to the new master. Nothing this master acknowledged is missing from the target,
/// under asynchronous replication too. If the target does not catch up within
/// [`HAND_OFF_LIMIT`], writes resume and the master stays.
async fn hand_off(repl: &Arc<Replication>, client: &RemotingClient, controller: &str, target: i64) {
    let started = Instant::now();
    let Ok(hold) = tokio::time::timeout(HAND_OFF_LIMIT, repl.writes.write()).await else {
        tracing::warn!(
            target,
            "switchover: writes in flight did not finish; it is given up"
        );
        return;
    };
    let end = repl.store.commit_log_max_offset();
    while !repl.acks.holds(target, end) {
        if started.elapsed() >= HAND_OFF_LIMIT {
            tracing::warn!(
                target,
                end,
                "switchover: the target did not catch up; writes resume"
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Asked twice if the first answer is lost: the election may have happened, and writes
    // taken here meanwhile would be cut from the log. (A second "ready" after the election
    // is a plain heartbeat to the controller.)
    let mut answer = Err(String::new());
    for _ in 0..2 {
        let request = heartbeat(repl).with_ext(HAND_OFF_READY, end);
        answer = match client
            .invoke_timeout(controller, request, REQUEST_TIMEOUT)
            .await
        {
            Ok(r) if r.code == resp::SUCCESS => parse_replica_info(&r),
            Ok(r) => Err(format!("code {}: {:?}", r.code, r.remark)),
            Err(e) => Err(e.to_string()),
        };
        if answer.is_ok() {
            break;
        }
    }
    match answer {
        Ok(info) => {
            if let Err(e) = apply(repl, &info).await {
                tracing::error!(error = %e, "could not take the role the controller named");
            }
            tracing::info!(
                target,
                end,
                held_ms = started.elapsed().as_millis() as u64,
                master = ?info.master,
                "switchover: handed over"
            );
        }
        Err(e) => {
            tracing::warn!(target, error = %e, "switchover: the controller did not answer; writes resume")
        }
    }
    drop(hold);
}

/// The longest a stopping master waits for its group to be handed over: the controller's
/// switchover, the master's own hold ([`HAND_OFF_LIMIT`]) and the election, well inside a
/// pod's termination grace period (60 s by default). Past it the master stops anyway, as
/// it did before hand-overs existed: the controller elects a slave when its connection
/// closes.
const STOP_HAND_OFF_LIMIT: Duration = Duration::from_secs(10);

/// See [`Replication::hand_over_before_stop`]. The candidates are the connected slaves, the
/// furthest first; the controller accepts only an alive member of the in-sync set, so a
/// refused one makes way for the next. Once the controller started the switchover, the
/// follower loop, woken at once, is told to hand over on its heartbeat and runs
/// [`hand_off`]; this waits for the role to change.
pub(super) async fn hand_over_before_stop(repl: &Arc<Replication>) {
    // One bound for all of it: asking (each controller answers within REQUEST_TIMEOUT, or
    // not) and the hand-over itself.
    if tokio::time::timeout(STOP_HAND_OFF_LIMIT, hand_over(repl))
        .await
        .is_err()
    {
        tracing::warn!("stopping as master: the hand-over did not complete in time");
    }
}

async fn hand_over(repl: &Arc<Replication>) {
    if !repl.is_master() {
        return;
    }
    let mut candidates: Vec<_> = repl
        .acks
        .slaves()
        .into_iter()
        .filter(|s| s.connection.is_some() && s.broker_id != repl.broker_id)
        .collect();
    if candidates.is_empty() {
        return; // nobody to hand over to: the group is unavailable until this one is back
    }
    candidates.sort_by_key(|s| std::cmp::Reverse(s.acked));
    let started = Instant::now();
    let client = RemotingClient::new(RemotingConfig::default());
    let mut asked = None;
    'ask: for addr in &repl.config.controller_addrs {
        for slave in &candidates {
            let request = scoped(
                repl,
                elect_master_request(&repl.broker_name, slave.broker_id, true),
            );
            match client.invoke_timeout(addr, request, REQUEST_TIMEOUT).await {
                Ok(r) if r.code == resp::SUCCESS => {
                    asked = Some(slave.broker_id);
                    break 'ask;
                }
                Ok(r) => tracing::info!(
                    target = slave.broker_id,
                    code = r.code,
                    remark = ?r.remark,
                    "stopping: the controller refused a hand-over to this replica"
                ),
                // Another controller address may answer.
                Err(e) => {
                    tracing::warn!(controller = %addr, error = %e, "stopping: controller unreachable");
                    continue 'ask;
                }
            }
        }
    }
    let Some(target) = asked else {
        tracing::warn!("stopping as master: no in-sync replica could take the group over");
        return;
    };
    tracing::info!(target, "stopping: handing the group over first");
    repl.ask_controller_now();
    let mut role = repl.role_changes();
    // The sender lives in `repl`: `changed` cannot fail while it is held.
    while matches!(*role.borrow_and_update(), RoleState::Master { .. }) {
        let _ = role.changed().await;
    }
    tracing::info!(
        target,
        took_ms = started.elapsed().as_millis() as u64,
        "stopping: the group was handed over"
    );
}

/// A request to the controller, carrying this broker's `controllerScope` when it has one.
fn controller_request(repl: &Replication, code: i32) -> RemotingCommand {
    scoped(repl, RemotingCommand::request(code, Default::default()))
}

/// `request` with this broker's `controllerScope`, when it has one.
fn scoped(repl: &Replication, request: RemotingCommand) -> RemotingCommand {
    match &repl.config.controller_scope {
        Some(scope) => request.with_ext(CONTROLLER_SCOPE, scope),
        None => request,
    }
}

fn register(repl: &Replication) -> RemotingCommand {
    controller_request(repl, rc::CONTROLLER_REGISTER_BROKER)
        .with_ext("clusterName", &repl.config.cluster_name)
        .with_ext("brokerName", &repl.broker_name)
        .with_ext("brokerId", repl.broker_id)
        .with_ext("brokerAddress", &repl.config.broker_addr)
        .with_ext("haAddress", &repl.config.advertised_addr)
        .with_ext("epoch", repl.store.epochs().last_epoch())
}

fn heartbeat(repl: &Replication) -> RemotingCommand {
    let store = &repl.store;
    controller_request(repl, rc::BROKER_HEARTBEAT)
        .with_ext("clusterName", &repl.config.cluster_name)
        .with_ext("brokerName", &repl.broker_name)
        .with_ext("brokerId", repl.broker_id)
        .with_ext("brokerAddr", &repl.config.broker_addr)
        .with_ext("epoch", store.epochs().last_epoch())
        .with_ext("maxOffset", store.commit_log_max_offset())
        .with_ext("confirmOffset", store.confirm_offset().min(i64::MAX as u64))
}

/// Takes the role `info` names (never going back to an older epoch).
async fn apply(
    repl: &Arc<Replication>,
    info: &ReplicaInfo,
) -> Result<(), conveyor_store::StoreError> {
    if info.master_epoch < repl.epoch() {
        return Ok(()); // a stale answer
    }
    let me = repl.broker_id;
    match (info.master, &info.master_member) {
        (Some(m), _) if m == me => {
            if repl.role_state()
                != (RoleState::Master {
                    epoch: info.master_epoch,
                })
            {
                let required = Requirement::Members(others(&info.sync_state_set, me));
                let (r, epoch) = (repl.clone(), info.master_epoch);
                tokio::task::spawn_blocking(move || r.become_master(epoch, required))
                    .await
                    .map_err(|_| conveyor_store::StoreError::ShutDown)??;
            }
        }
        (Some(_), Some(member)) => {
            let current = repl.master.borrow().clone();
            if repl.role_state()
                != (RoleState::Slave {
                    epoch: info.master_epoch,
                })
                || current.as_deref() != Some(member.ha_addr.as_str())
            {
                repl.become_slave(info.master_epoch, &member.addr, &member.ha_addr);
            }
        }
        _ => repl.fence(),
    }
    Ok(())
}

fn others(set: &BTreeSet<i64>, me: i64) -> BTreeSet<i64> {
    set.iter().copied().filter(|id| *id != me).collect()
}

/// Under synchronous replication, every member of `set` but this master must acknowledge a
/// record before SEND_OK. (Asynchronous replication keeps the set too: it says who may be
/// elected; nobody is waited for.)
fn require(repl: &Replication, set: &BTreeSet<i64>, end: u64) {
    if repl.config.synchronous() {
        repl.acks
            .set_required(Requirement::Members(others(set, repl.broker_id)), end);
    }
}

/// As master: adds caught-up slaves to the in-sync set and drops those behind or away for
/// longer than `max-time-not-caught-up-ms`, by compare-and-set at the controller.
async fn keep_in_sync(
    repl: &Replication,
    client: &RemotingClient,
    controller: &str,
    info: &ReplicaInfo,
    keeper: &mut InSyncKeeper,
) {
    let me = repl.broker_id;
    let end = repl.store.commit_log_max_offset();
    let (set, set_epoch) = match &keeper.current {
        Some((set, epoch)) if *epoch >= info.sync_state_set_epoch => (set.clone(), *epoch),
        _ => (info.sync_state_set.clone(), info.sync_state_set_epoch),
    };
    // What must acknowledge now: the controller's set, plus, while a change may still land,
    // everything it could hold.
    let mut must = set.clone();
    match &keeper.pending {
        Some((_, asked)) if info.sync_state_set_epoch > *asked => keeper.pending = None,
        Some((union, _)) => must.extend(union.iter().copied()),
        None => {}
    }
    require(repl, &must, end);
    let now = Instant::now();
    let slaves = repl.acks.slaves();
    let caught_up = |id: i64| {
        slaves
            .iter()
            .any(|s| s.broker_id == id && s.holds(keeper.last_end))
    };
    let mut desired = set.clone();
    desired.extend(
        slaves
            .iter()
            .filter(|s| s.holds(keeper.last_end))
            .map(|s| s.broker_id),
    );
    // A member whose stream closed (a slave restarted, stopped or killed) is dropped at once,
    // as RocketMQ's AutoSwitchHAService does when a connection goes: otherwise every
    // synchronous send would wait for it, and time out, until it counted as behind for
    // `max-time-not-caught-up-ms`. One that is connected but behind gets that long.
    let left = |id: i64| {
        slaves
            .iter()
            .any(|s| s.broker_id == id && s.connection.is_none())
    };
    for id in others(&set, me) {
        if caught_up(id) {
            keeper.behind_since.remove(&id);
            continue;
        }
        let since = *keeper.behind_since.entry(id).or_insert(now);
        if left(id) || now.duration_since(since) >= repl.config.max_time_not_caught_up() {
            desired.remove(&id);
        }
    }
    keeper.last_end = end;
    if desired == set {
        keeper.current = Some((set, set_epoch));
        return;
    }
    // Until the controller agrees, acknowledgements need both sets.
    let union: BTreeSet<i64> = must.union(&desired).copied().collect();
    require(repl, &union, end);
    let body = SyncStateSetBody {
        sync_state_set: desired.clone(),
        sync_state_set_epoch: set_epoch,
        members: Default::default(),
    };
    let request = controller_request(repl, rc::CONTROLLER_ALTER_SYNC_STATE_SET)
        .with_ext("brokerName", &repl.broker_name)
        .with_ext("masterBrokerId", me)
        .with_ext("masterEpoch", repl.epoch())
        .with_body(conveyor_protocol::json::to_vec(&body).unwrap_or_default());
    match client
        .invoke_timeout(controller, request, REQUEST_TIMEOUT)
        .await
    {
        Ok(r) if r.code == resp::SUCCESS => {
            let epoch = r.get_i64("newSyncStateSetEpoch").unwrap_or(0) as u32;
            tracing::info!(?desired, epoch, "in-sync set changed");
            let mut must = desired.clone();
            if let Some((union, _)) = &keeper.pending {
                must.extend(union.iter().copied());
            }
            require(repl, &must, end);
            keeper.current = Some((desired, epoch));
        }
        Ok(r) => {
            // Refused: the controller's set stands (the next heartbeat brings it).
            tracing::warn!(code = r.code, remark = ?r.remark, "in-sync set change refused");
            keeper.current = None;
        }
        Err(e) => {
            tracing::warn!(error = %e, "in-sync set change not answered");
            keeper.pending = Some((union, set_epoch));
            keeper.current = None;
        }
    }
}
