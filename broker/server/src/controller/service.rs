//! The controller service: the decision state behind a lock, the replicas' heartbeats, and
//! the detection loop that elects a new master when one goes silent. Every change is saved
//! through the [`StateStore`] before it takes effect or anyone hears of it.
//!
//! A replica is dead when its heartbeats stop for the detection time, or at once when the
//! connection it heartbeats on closes (as RocketMQ's controller does on a channel close): a
//! killed process's socket is closed by its kernel, so a `kill -9` is seen in milliseconds
//! while a frozen or cut-off master still takes the full detection time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::decide::{Candidate, ControllerError, ControllerState, GroupState, Member};
use super::state_store::{StateStore, StateStoreError};
use crate::remoting::ConnectionId;

/// The master clients should be led to ([`Controller::serving_master`]): by a group endpoint
/// (`super::endpoint`) or the operator's master Service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    /// Its replica id.
    pub broker_id: i64,
    /// The master epoch it serves in.
    pub epoch: u32,
    /// Its own remoting address.
    pub addr: String,
}

/// How the controller decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerConfig {
    /// A master silent this long is replaced (RocketMQ's `controllerHeartBeatTimeoutMills`).
    pub detection: Duration,
    /// Elect outside the in-sync set when nobody in it is alive (loses acknowledged messages).
    pub allow_unclean: bool,
    /// How long after this controller started a member it has not heard from yet still counts
    /// as alive (never less than `detection`): the time brokers need to find a new or
    /// restarted controller (a leader change of the operator: the Service moving to the new
    /// leader, the brokers' next heartbeat) before their master is replaced for nothing.
    pub takeover_grace: Duration,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            detection: Duration::from_secs(4),
            allow_unclean: false,
            takeover_grace: Duration::from_secs(4),
        }
    }
}

/// What a group's replicas are told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// The master's id, if any.
    pub master: Option<i64>,
    /// The master's addresses.
    pub master_member: Option<Member>,
    /// The master epoch.
    pub master_epoch: u32,
    /// The in-sync set.
    pub sync_state_set: BTreeSet<i64>,
    /// Its epoch.
    pub sync_state_set_epoch: u32,
    /// Every registered replica.
    pub members: std::collections::BTreeMap<i64, Member>,
    /// Told to the master only, during a switchover: hand the group over to this replica
    /// (stop taking writes, wait until it holds the whole log, then say so; see
    /// [`Controller::switchover`]).
    pub hand_off_to: Option<i64>,
}

impl ReplicaInfo {
    fn of(g: &GroupState) -> Self {
        Self {
            master: g.master,
            master_member: g.master.and_then(|m| g.members.get(&m).cloned()),
            master_epoch: g.master_epoch,
            sync_state_set: g.sync_state_set.clone(),
            sync_state_set_epoch: g.sync_state_set_epoch,
            members: g.members.clone(),
            hand_off_to: None,
        }
    }
}

/// A switchover under way (not persisted: a controller that restarts forgets it, and the
/// master resumes writes after its own hold limit).
#[derive(Debug, Clone, Copy)]
struct Handoff {
    /// The master handing over, in its epoch.
    master: i64,
    /// Its epoch.
    master_epoch: u32,
    /// The replica taking over.
    target: i64,
    /// When the switchover is given up if the master has not reported ready.
    until: Instant,
    /// The master was told: it is not told again (a master that gave up resumes writes and
    /// is not made to hold them again and again; a new switchover call asks again).
    told: bool,
}

/// How long a switchover may take before it is given up (the master has not said it holds
/// writes with the target caught up): the operator or the user tries again.
const HANDOFF_TIMEOUT: Duration = Duration::from_secs(10);

/// What [`Controller::switchover`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Switchover {
    /// The live master was asked to hand over; the election follows its answer.
    Started,
    /// A switchover to this target is under way already.
    Pending,
    /// No live master to hand over: the target was elected at once.
    Elected(ReplicaInfo),
    /// The target is the master already.
    AlreadyMaster,
}

/// A replica's last heartbeat.
#[derive(Debug, Clone, Copy)]
struct Heartbeat {
    /// When it arrived.
    at: Instant,
    /// The replica's last epoch.
    epoch: u32,
    /// Its CommitLog end.
    max_offset: u64,
    /// The connection it came on, if known: its close ends the replica's liveness.
    connection: Option<ConnectionId>,
    /// That connection has closed: the replica is dead until it heartbeats again.
    closed: bool,
}

impl Heartbeat {
    /// Whether this heartbeat still says the replica is alive.
    fn alive(&self, now: Instant, detection: Duration) -> bool {
        !self.closed && now.duration_since(self.at) < detection
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The decision refused it.
    #[error(transparent)]
    Decision(#[from] ControllerError),
    /// Saving the new state failed: nothing changed.
    #[error("saving the controller state failed: {0}")]
    Save(#[from] StateStoreError),
}

/// The controller.
pub struct Controller {
    /// Settings.
    config: ControllerConfig,
    /// The decisions (persisted).
    state: Mutex<ControllerState>,
    /// Where they are persisted.
    store: Box<dyn StateStore>,
    /// Heartbeats by (group, broker id); not persisted.
    heartbeats: Mutex<HashMap<(String, i64), Heartbeat>>,
    /// When this controller started: every replica counts as alive for one detection time
    /// after, so a restarted controller does not depose masters it has not heard from yet.
    started: Instant,
    /// Wakes the detection loop when a replica's connection closes, or a replica calls
    /// while its group has no live master.
    lost: Notify,
    /// Counts saved changes, for whoever reports the decisions (the operator's status).
    changed: tokio::sync::watch::Sender<u64>,
    /// Switchovers under way, by group.
    handoffs: Mutex<HashMap<String, Handoff>>,
}

impl Controller {
    /// A controller over the state `store` holds.
    pub fn open(
        config: ControllerConfig,
        store: Box<dyn StateStore>,
    ) -> Result<Self, StateStoreError> {
        let state = store.load()?;
        Ok(Self {
            config,
            state: Mutex::new(state),
            store,
            heartbeats: Mutex::new(HashMap::new()),
            started: Instant::now(),
            lost: Notify::new(),
            changed: tokio::sync::watch::Sender::new(0),
            handoffs: Mutex::new(HashMap::new()),
        })
    }

    /// Applies `change` to a copy of group `name`'s state, saves the whole state if it
    /// changed, and only then installs it.
    fn change<T>(
        &self,
        name: &str,
        change: impl FnOnce(&mut GroupState) -> Result<T, ControllerError>,
    ) -> Result<(T, ReplicaInfo), ServiceError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = state.clone();
        let group = next.groups.entry(name.to_string()).or_default();
        let result = change(group);
        let info = ReplicaInfo::of(group);
        if next != *state {
            match self.store.save(&next) {
                Ok(()) => {
                    *state = next;
                    self.changed.send_modify(|n| *n += 1);
                }
                Err(e @ StateStoreError::Conflict(_)) => {
                    // Another controller decided since: take its state, answer nothing now.
                    match self.store.load() {
                        Ok(theirs) => *state = theirs,
                        Err(reload) => {
                            tracing::warn!(error = %reload, "cannot reload the controller state")
                        }
                    }
                    return Err(e.into());
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok((result?, info))
    }

    /// The decisions as they stand (what the operator reports in its status).
    pub fn state(&self) -> ControllerState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How this controller decides.
    pub fn config(&self) -> &ControllerConfig {
        &self.config
    }

    /// Changes every time a decision is saved.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// A replica registers (or re-registers with new addresses).
    pub fn register(
        &self,
        cluster: &str,
        group: &str,
        broker_id: i64,
        member: Member,
        log_epoch: u32,
        connection: Option<ConnectionId>,
    ) -> Result<ReplicaInfo, ServiceError> {
        self.beat(group, broker_id, log_epoch, 0, connection);
        let (election, info) = self.change(group, |g| {
            Ok(g.register(cluster, broker_id, member, log_epoch))
        })?;
        if let Some(e) = election {
            tracing::info!(
                group,
                master = e.master,
                epoch = e.master_epoch,
                "first master elected"
            );
        }
        Ok(info)
    }

    /// A replica's heartbeat; answers with its group's replica info. A master that was asked
    /// to hand over (see [`Controller::switchover`]) is told so in the answer; once it says
    /// `ready` (it takes no writes, and the target holds its whole log up to that end) the
    /// target is elected, and the answer already names it.
    pub fn heartbeat(
        &self,
        group: &str,
        broker_id: i64,
        epoch: u32,
        max_offset: u64,
        connection: Option<ConnectionId>,
        ready: Option<u64>,
    ) -> Result<ReplicaInfo, ServiceError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let g = state.groups.get(group).ok_or_else(|| {
            ControllerError::Unknown(format!("group {group} has no registered replica"))
        })?;
        if !g.members.contains_key(&broker_id) {
            return Err(ControllerError::Unknown(format!("broker {broker_id} of {group}")).into());
        }
        let mut info = ReplicaInfo::of(g);
        drop(state);
        self.beat(group, broker_id, epoch, max_offset, connection);
        // A replica calling into a group without a live master may be the one to elect:
        // do not wait for the next detection tick.
        if !info
            .master
            .is_some_and(|m| self.is_alive(group, m, Instant::now()))
        {
            self.lost.notify_one();
        }
        if let Some(h) = self.handoff(group, &info) {
            if h.master == broker_id {
                match ready {
                    Some(end) => {
                        self.handoffs
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(group);
                        tracing::info!(
                            group,
                            from = h.master,
                            to = h.target,
                            end,
                            "switchover: the master holds writes and the target has its log"
                        );
                        return self.elect(group, Some(h.target));
                    }
                    None if !h.told => {
                        if let Some(h) = self
                            .handoffs
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .get_mut(group)
                        {
                            h.told = true;
                        }
                        info.hand_off_to = Some(h.target);
                    }
                    None => {}
                }
            } else if h.target == broker_id {
                // The target heartbeats again at once until it hears of its election, so
                // the writes the former master relays to it wait as little as possible.
                info.hand_off_to = Some(h.target);
            }
        }
        Ok(info)
    }

    /// The switchover under way in `group`, if it still applies to the master `info` names
    /// (an expired one, or one whose master lost the role meanwhile, is dropped).
    fn handoff(&self, group: &str, info: &ReplicaInfo) -> Option<Handoff> {
        let mut handoffs = self.handoffs.lock().unwrap_or_else(|e| e.into_inner());
        let h = *handoffs.get(group)?;
        let current = info.master == Some(h.master) && info.master_epoch == h.master_epoch;
        if !current || Instant::now() >= h.until {
            handoffs.remove(group);
            if current {
                tracing::warn!(
                    group,
                    to = h.target,
                    "switchover given up: the master never reported ready"
                );
            }
            return None;
        }
        Some(h)
    }

    /// A controlled switchover to `target` that loses nothing under either replication mode:
    /// the live master is asked (on its next heartbeat) to stop taking writes, and once
    /// `target` holds everything it wrote the target is elected; writes that waited meanwhile
    /// go on through the new master (the former one relays them). Without a live master the
    /// target is elected at once. `target` must be an alive member of the in-sync set.
    pub fn switchover(&self, group: &str, target: i64) -> Result<Switchover, ServiceError> {
        let now = Instant::now();
        let info = self.replica_info(group)?;
        if info.master == Some(target) {
            return Ok(Switchover::AlreadyMaster);
        }
        if !info.sync_state_set.contains(&target) || !self.is_alive(group, target, now) {
            return Err(ControllerError::MasterNotAvailable(format!(
                "broker {target} is not an alive member of the in-sync set"
            ))
            .into());
        }
        match info.master.filter(|m| self.is_alive(group, *m, now)) {
            Some(_)
                if self
                    .handoff(group, &info)
                    .is_some_and(|h| h.target == target) =>
            {
                Ok(Switchover::Pending)
            }
            Some(master) => {
                tracing::info!(
                    group,
                    from = master,
                    to = target,
                    "switchover: asking the master to hand over"
                );
                self.handoffs
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(
                        group.to_string(),
                        Handoff {
                            master,
                            master_epoch: info.master_epoch,
                            target,
                            until: now + HANDOFF_TIMEOUT,
                            told: false,
                        },
                    );
                Ok(Switchover::Started)
            }
            None => self.elect(group, Some(target)).map(Switchover::Elected),
        }
    }

    /// Connection `connection` closed: every replica that heartbeated on it is dead now, and
    /// the detection loop runs at once.
    pub fn connection_closed(&self, connection: ConnectionId) {
        let mut lost = false;
        let mut beats = self.heartbeats.lock().unwrap_or_else(|e| e.into_inner());
        for ((group, id), h) in beats.iter_mut() {
            if h.connection == Some(connection) && !h.closed {
                tracing::info!(group, broker_id = id, "replica's connection closed");
                h.closed = true;
                lost = true;
            }
        }
        drop(beats);
        if lost {
            self.lost.notify_one();
        }
    }

    fn beat(
        &self,
        group: &str,
        broker_id: i64,
        epoch: u32,
        max_offset: u64,
        connection: Option<ConnectionId>,
    ) {
        self.heartbeats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                (group.to_string(), broker_id),
                Heartbeat {
                    at: Instant::now(),
                    epoch,
                    max_offset,
                    connection,
                    closed: false,
                },
            );
    }

    /// The group's replica info.
    pub fn replica_info(&self, group: &str) -> Result<ReplicaInfo, ServiceError> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state
            .groups
            .get(group)
            .map(ReplicaInfo::of)
            .ok_or_else(|| ControllerError::Unknown(format!("group {group}")).into())
    }

    /// Whether each registered replica of `group` is alive now (heartbeating within the
    /// detection time), for CONTROLLER_GET_SYNC_STATE_DATA.
    pub fn liveness(&self, group: &str) -> BTreeMap<i64, bool> {
        let now = Instant::now();
        self.member_ids(group)
            .into_iter()
            .map(|id| (id, self.is_alive(group, id, now)))
            .collect()
    }

    /// The master changes the in-sync set (compare-and-set).
    pub fn alter_sync_state_set(
        &self,
        group: &str,
        master: i64,
        master_epoch: u32,
        sync_state_set_epoch: u32,
        new_set: BTreeSet<i64>,
    ) -> Result<u32, ServiceError> {
        let now = Instant::now();
        let alive = |id: i64| self.is_alive(group, id, now);
        let (epoch, _) = self.change(group, |g| {
            g.alter_sync_state_set(master, master_epoch, sync_state_set_epoch, new_set, alive)
        })?;
        Ok(epoch)
    }

    /// Elects a master now: `designated` for a switchover, else the best in-sync replica.
    pub fn elect(&self, group: &str, designated: Option<i64>) -> Result<ReplicaInfo, ServiceError> {
        let candidates = self.candidates(group, Instant::now());
        let unclean = self.config.allow_unclean;
        let (e, info) = self.change(group, |g| g.elect(&candidates, designated, unclean))?;
        tracing::warn!(
            group,
            master = e.master,
            epoch = e.master_epoch,
            "master elected"
        );
        Ok(info)
    }

    /// A replica not heard from since this controller started counts as alive for one
    /// detection time: a restarted controller must not depose masters before they call.
    fn is_alive(&self, group: &str, id: i64, now: Instant) -> bool {
        match self
            .heartbeats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), id))
        {
            Some(h) => h.alive(now, self.config.detection),
            None => {
                now.duration_since(self.started)
                    < self.config.detection.max(self.config.takeover_grace)
            }
        }
    }

    /// The master of `group` a client should be led to: elected, alive, and heartbeating in
    /// its epoch since its election, so it knows it is master and takes writes at once (a
    /// write reaching it earlier would be relayed to its frozen or dead predecessor).
    pub fn serving_master(&self, group: &str) -> Option<Serving> {
        let (broker_id, epoch, addr) = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let g = state.groups.get(group)?;
            let m = g.master?;
            (m, g.master_epoch, g.members.get(&m)?.addr.clone())
        };
        let beat = self
            .heartbeats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), broker_id))
            .copied()?;
        (beat.epoch == epoch && beat.alive(Instant::now(), self.config.detection)).then_some(
            Serving {
                broker_id,
                epoch,
                addr,
            },
        )
    }

    /// The registered replicas of `group`.
    fn member_ids(&self, group: &str) -> Vec<i64> {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .groups
            .get(group)
            .map(|g| g.members.keys().copied().collect())
            .unwrap_or_default()
    }

    fn candidates(&self, group: &str, now: Instant) -> Vec<Candidate> {
        let members = self.member_ids(group);
        let beats = self
            .heartbeats
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        members
            .into_iter()
            .map(|id| {
                let h = beats.get(&(group.to_string(), id));
                Candidate {
                    broker_id: id,
                    alive: h.is_some_and(|h| h.alive(now, self.config.detection)),
                    epoch: h.map_or(0, |h| h.epoch),
                    max_offset: h.map_or(0, |h| h.max_offset),
                }
            })
            .collect()
    }

    /// Every detection time / 4, and whenever a replica's connection closes, until
    /// `shutdown`: a group whose master is dead (or that has none) gets an election.
    ///
    /// A controller that is stopping closes its replicas' connections itself (the server
    /// shares the token): those closes say nothing about the replicas, so once `shutdown` is
    /// cancelled nothing is decided any more, whichever wake-up came first. Deciding then
    /// would save "no master" for a healthy group, and the next controller would re-elect
    /// it in a new epoch.
    pub async fn run_detection(&self, shutdown: CancellationToken) {
        let mut tick =
            tokio::time::interval((self.config.detection / 4).max(Duration::from_millis(50)));
        loop {
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => return,
                _ = tick.tick() => {}
                _ = self.lost.notified() => {}
            }
            if shutdown.is_cancelled() {
                return;
            }
            let now = Instant::now();
            let groups: Vec<(String, Option<i64>)> = self
                .state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .groups
                .iter()
                .map(|(name, g)| (name.clone(), g.master))
                .collect();
            for (group, master) in groups {
                let master_alive = master.is_some_and(|m| self.is_alive(&group, m, now));
                if master_alive {
                    continue;
                }
                match self.elect(&group, None) {
                    Ok(_) => {}
                    Err(e) => tracing::debug!(group, error = %e, "no election"),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// State kept in memory.
    #[derive(Default)]
    struct MemoryStore(Mutex<ControllerState>);

    impl StateStore for MemoryStore {
        fn load(&self) -> Result<ControllerState, StateStoreError> {
            Ok(self.0.lock().unwrap().clone())
        }
        fn save(&self, state: &ControllerState) -> Result<(), StateStoreError> {
            *self.0.lock().unwrap() = state.clone();
            Ok(())
        }
    }

    fn member(id: i64) -> Member {
        Member {
            addr: format!("10.0.0.{id}:10911"),
            ha_addr: format!("10.0.0.{id}:10912"),
        }
    }

    #[test]
    fn a_member_unheard_since_the_start_counts_as_alive_for_the_takeover_grace() {
        let open = |detection: u64, grace: u64| {
            let config = ControllerConfig {
                detection: Duration::from_secs(detection),
                allow_unclean: false,
                takeover_grace: Duration::from_secs(grace),
            };
            Controller::open(config, Box::<MemoryStore>::default()).unwrap()
        };
        let c = open(4, 10);
        let at = |s: u64| c.started + Duration::from_secs(s);
        assert!(c.is_alive("g", 0, at(9)));
        assert!(!c.is_alive("g", 0, at(11)));
        // Never less than the detection time.
        let c = open(4, 1);
        assert!(c.is_alive("g", 0, c.started + Duration::from_secs(3)));
        assert!(!c.is_alive("g", 0, c.started + Duration::from_secs(5)));
    }

    /// A group with master 0 (on connection 100) and in-sync slave 1 (on connection 101),
    /// under a detection time far longer than any test.
    fn group() -> Arc<Controller> {
        let config = ControllerConfig {
            detection: Duration::from_secs(3600),
            allow_unclean: false,
            takeover_grace: Duration::ZERO,
        };
        let c = Arc::new(Controller::open(config, Box::<MemoryStore>::default()).unwrap());
        c.register("c", "g", 0, member(0), 0, Some(100)).unwrap();
        c.register("c", "g", 1, member(1), 0, Some(101)).unwrap();
        let info = c.heartbeat("g", 0, 1, 4096, Some(100), None).unwrap();
        c.heartbeat("g", 1, 1, 4096, Some(101), None).unwrap();
        c.alter_sync_state_set(
            "g",
            0,
            info.master_epoch,
            info.sync_state_set_epoch,
            BTreeSet::from([0, 1]),
        )
        .unwrap();
        c
    }

    #[tokio::test]
    async fn a_closed_master_connection_elects_at_once() {
        let c = group();
        assert_eq!(c.replica_info("g").unwrap().master, Some(0));
        let stop = CancellationToken::new();
        let detection = tokio::spawn({
            let (c, stop) = (c.clone(), stop.clone());
            async move { c.run_detection(stop).await }
        });
        // Another connection closing changes nothing.
        c.connection_closed(999);
        assert!(c.is_alive("g", 0, Instant::now()));
        c.connection_closed(100);
        assert!(!c.is_alive("g", 0, Instant::now()));
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.replica_info("g").unwrap().master != Some(1) {
            assert!(Instant::now() < deadline, "no election after the close");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(c.replica_info("g").unwrap().master_epoch, 2);
        // The old master heartbeating again on a new connection is alive again.
        c.heartbeat("g", 0, 1, 4096, Some(102), None).unwrap();
        assert!(c.is_alive("g", 0, Instant::now()));
        stop.cancel();
        detection.await.unwrap();
    }

    #[tokio::test]
    async fn a_stopping_controller_does_not_depose_the_master_whose_connection_it_closed() {
        // The server and the detection loop share one token: on shutdown the server closes
        // every replica's connection, which wakes the loop. Many rounds, because which of
        // the two wake-ups a loop sees first is up to the scheduler.
        for _ in 0..50 {
            let c = group();
            let stop = CancellationToken::new();
            let detection = tokio::spawn({
                let (c, stop) = (c.clone(), stop.clone());
                async move { c.run_detection(stop).await }
            });
            tokio::task::yield_now().await;
            stop.cancel();
            c.connection_closed(100);
            c.connection_closed(101);
            detection.await.unwrap();
            let info = c.replica_info("g").unwrap();
            assert_eq!((info.master, info.master_epoch), (Some(0), 1));
        }
    }

    #[test]
    fn a_switchover_elects_the_target_only_once_the_master_reports_ready() {
        let c = group();
        assert!(c.switchover("g", 7).is_err(), "not a member");
        assert_eq!(c.switchover("g", 0).unwrap(), Switchover::AlreadyMaster);
        assert_eq!(c.switchover("g", 1).unwrap(), Switchover::Started);
        // The target and the master hear of it: the master is asked to hand over, the
        // target to heartbeat at once until it is elected.
        let slave = c.heartbeat("g", 1, 1, 4096, Some(101), None).unwrap();
        assert_eq!((slave.master, slave.hand_off_to), (Some(0), Some(1)));
        let master = c.heartbeat("g", 0, 1, 4096, Some(100), None).unwrap();
        assert_eq!((master.master, master.hand_off_to), (Some(0), Some(1)));
        // Told once: a master that gave up is not asked again until a new switchover call.
        let again = c.heartbeat("g", 0, 1, 4096, Some(100), None).unwrap();
        assert_eq!(again.hand_off_to, None);
        // A second call while it is under way changes nothing; the target is told to
        // heartbeat at once until elected.
        assert_eq!(c.switchover("g", 1).unwrap(), Switchover::Pending);
        let target = c.heartbeat("g", 1, 1, 4096, Some(101), None).unwrap();
        assert_eq!(target.hand_off_to, Some(1));
        // Ready: the answer names the target, in a new epoch; the handoff is over.
        let done = c.heartbeat("g", 0, 1, 4200, Some(100), Some(4200)).unwrap();
        assert_eq!((done.master, done.master_epoch), (Some(1), 2));
        assert_eq!(done.hand_off_to, None);
        let after = c.heartbeat("g", 0, 1, 4200, Some(100), None).unwrap();
        assert_eq!((after.master, after.hand_off_to), (Some(1), None));
        let target = c.heartbeat("g", 1, 1, 4200, Some(101), None).unwrap();
        assert_eq!((target.master, target.hand_off_to), (Some(1), None));
    }

    #[test]
    fn a_switchover_without_a_live_master_elects_at_once_and_a_stale_ready_elects_nobody() {
        let c = group();
        c.connection_closed(100);
        match c.switchover("g", 1).unwrap() {
            Switchover::Elected(info) => assert_eq!(info.master, Some(1)),
            other => panic!("{other:?}"),
        }
        // A former master's late "ready" (no handoff under way) changes nothing.
        let info = c.heartbeat("g", 0, 1, 4096, Some(102), Some(4096)).unwrap();
        assert_eq!((info.master, info.master_epoch), (Some(1), 2));
    }

    #[test]
    fn replicas_not_heard_from_yet_count_as_alive_for_one_detection_time() {
        let saved = group().state.lock().unwrap().clone();
        let restarted = Controller::open(
            ControllerConfig::default(),
            Box::new(MemoryStore(Mutex::new(saved))),
        )
        .unwrap();
        let now = Instant::now();
        assert!(restarted.is_alive("g", 0, now));
        assert!(!restarted.is_alive("g", 0, now + Duration::from_secs(11)));
    }
}
