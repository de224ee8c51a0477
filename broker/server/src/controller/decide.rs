//! The controller's decisions as pure functions of its state (RocketMQ 5's
//! ReplicasInfoManager and DefaultElectPolicy): who is the master of each broker group, in
//! which epoch, and which replicas are in sync. Nothing here does IO or reads a clock; the
//! caller passes liveness in, and persists the state before it answers anyone.
//!
//! The rules that make failover lose no acknowledged message:
//! - A master is elected only from the in-sync set (every acknowledged record is on each of
//!   its members), unless unclean election was explicitly allowed.
//! - Every election bumps the master epoch; a master's request carries its epoch and is
//!   refused when it is not the current one, so a deposed master can change nothing.
//! - The in-sync set changes only by compare-and-set on its own epoch, asked for by the
//!   current master, and always keeps the master: a master cannot quietly drop its slaves.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Everything the controller decides, per broker group (`broker-name`). This is what is
/// persisted (a file for `conveyor controller`, the Kubernetes API for the operator).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ControllerState {
    /// Broker groups by name.
    pub groups: BTreeMap<String, GroupState>,
}

/// One broker group.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupState {
    /// The cluster the group belongs to.
    pub cluster: String,
    /// The master's broker id, `None` while no eligible replica exists.
    pub master: Option<i64>,
    /// The master epoch: bumped by every election.
    pub master_epoch: u32,
    /// Replicas holding every acknowledged record (the master included).
    pub sync_state_set: BTreeSet<i64>,
    /// Bumped by every change of `sync_state_set`.
    pub sync_state_set_epoch: u32,
    /// Every replica that registered: broker id → addresses.
    pub members: BTreeMap<i64, Member>,
}

/// A replica's addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// Remoting address (clients, admin).
    pub addr: String,
    /// Replication stream address.
    pub ha_addr: String,
}

/// What a replica last reported, as the caller knows it (not persisted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// The replica.
    pub broker_id: i64,
    /// Heartbeating within the detection time.
    pub alive: bool,
    /// The last epoch its log holds.
    pub epoch: u32,
    /// Its CommitLog end.
    pub max_offset: u64,
}

/// The outcome of an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    /// The new master.
    pub master: i64,
    /// Its epoch.
    pub master_epoch: u32,
    /// The in-sync set it starts with (itself).
    pub sync_state_set: BTreeSet<i64>,
    /// That set's epoch.
    pub sync_state_set_epoch: u32,
}

/// Why the controller refuses (RocketMQ's 2000-range response codes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControllerError {
    /// The request's master epoch is not the current one (CONTROLLER_FENCED_MASTER_EPOCH).
    #[error("master epoch {got} is not the current epoch {current}")]
    FencedMasterEpoch {
        /// The epoch in the request.
        got: u32,
        /// The controller's.
        current: u32,
    },
    /// The request's in-sync set epoch is stale (CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH).
    #[error("in-sync set epoch {got} is not the current epoch {current}")]
    FencedSyncStateSetEpoch {
        /// The epoch in the request.
        got: u32,
        /// The controller's.
        current: u32,
    },
    /// The requester is not the group's master (CONTROLLER_INVALID_MASTER).
    #[error("broker {0} is not the master of its group")]
    InvalidMaster(i64),
    /// A new in-sync set that drops the master or names an unknown or dead replica
    /// (CONTROLLER_ALTER_SYNC_STATE_SET_FAILED).
    #[error("invalid in-sync set: {0}")]
    InvalidSyncStateSet(String),
    /// No replica may become master (CONTROLLER_MASTER_NOT_AVAILABLE).
    #[error("no replica can become master: {0}")]
    MasterNotAvailable(String),
    /// A designated election of the master that is already master and alive
    /// (CONTROLLER_MASTER_STILL_EXIST).
    #[error("the old master {0} is still alive, no need to elect a new master")]
    MasterStillExists(i64),
    /// The group or broker is unknown (CONTROLLER_BROKER_METADATA_NOT_EXIST).
    #[error("unknown broker group or member: {0}")]
    Unknown(String),
}

impl GroupState {
    /// Records a replica's addresses. A group without members elects its first replica as
    /// master (epoch 1, or one past the last epoch in its log: a store that was master before,
    /// say in classic mode, can only begin a newer term); returns that election.
    pub fn register(
        &mut self,
        cluster: &str,
        broker_id: i64,
        member: Member,
        log_epoch: u32,
    ) -> Option<Election> {
        self.cluster = cluster.to_string();
        let first = self.members.is_empty() && self.master.is_none() && self.master_epoch == 0;
        self.members.insert(broker_id, member);
        first.then(|| self.install(broker_id, log_epoch))
    }

    /// Makes `broker_id` master in a new epoch, past the current one and past `seen` (the
    /// newest epoch a replica's log holds), alone in the in-sync set.
    fn install(&mut self, broker_id: i64, seen: u32) -> Election {
        self.master = Some(broker_id);
        self.master_epoch = self.master_epoch.max(seen) + 1;
        self.sync_state_set = BTreeSet::from([broker_id]);
        self.sync_state_set_epoch += 1;
        Election {
            master: broker_id,
            master_epoch: self.master_epoch,
            sync_state_set: self.sync_state_set.clone(),
            sync_state_set_epoch: self.sync_state_set_epoch,
        }
    }

    /// Elects a master when the current one is gone: among the alive members of the in-sync
    /// set (all of them hold every acknowledged record), the one with the newest epoch, then
    /// the longest log, then the lowest id; a `designated` replica wins if it is eligible (a
    /// controlled switchover). With `allow_unclean`, any alive member is eligible when no
    /// in-sync one is (acknowledged messages may be lost). When nobody is eligible the group
    /// is left without master and nothing changes.
    pub fn elect(
        &mut self,
        candidates: &[Candidate],
        designated: Option<i64>,
        allow_unclean: bool,
    ) -> Result<Election, ControllerError> {
        let alive = |c: &&Candidate| c.alive && self.members.contains_key(&c.broker_id);
        if let Some(id) = designated.filter(|id| self.master == Some(*id)) {
            if candidates.iter().any(|c| c.broker_id == id && alive(&c)) {
                return Err(ControllerError::MasterStillExists(id));
            }
        }
        let in_sync: Vec<&Candidate> = candidates
            .iter()
            .filter(alive)
            .filter(|c| self.sync_state_set.contains(&c.broker_id))
            .collect();
        let pool: Vec<&Candidate> = if !in_sync.is_empty() {
            in_sync
        } else if allow_unclean {
            candidates.iter().filter(alive).collect()
        } else {
            let dead: Vec<i64> = self.sync_state_set.iter().copied().collect();
            self.master = None;
            return Err(ControllerError::MasterNotAvailable(format!(
                "no member of the in-sync set {dead:?} is alive, and unclean election is off"
            )));
        };
        let chosen = match designated {
            Some(id) => pool
                .iter()
                .find(|c| c.broker_id == id)
                .copied()
                .ok_or_else(|| {
                    ControllerError::MasterNotAvailable(format!(
                        "broker {id} is not an alive member of the in-sync set"
                    ))
                })?,
            None => pool
                .iter()
                .copied()
                .max_by(|a, b| {
                    (a.epoch, a.max_offset)
                        .cmp(&(b.epoch, b.max_offset))
                        .then(b.broker_id.cmp(&a.broker_id))
                })
                .ok_or_else(|| ControllerError::MasterNotAvailable("no alive replica".into()))?,
        };
        let seen = candidates.iter().map(|c| c.epoch).max().unwrap_or(0);
        Ok(self.install(chosen.broker_id, seen))
    }

    /// The master asks to change the in-sync set (compare-and-set on both epochs). The master
    /// stays in it; every member must be registered and alive.
    pub fn alter_sync_state_set(
        &mut self,
        master: i64,
        master_epoch: u32,
        sync_state_set_epoch: u32,
        new_set: BTreeSet<i64>,
        is_alive: impl Fn(i64) -> bool,
    ) -> Result<u32, ControllerError> {
        if master_epoch != self.master_epoch {
            return Err(ControllerError::FencedMasterEpoch {
                got: master_epoch,
                current: self.master_epoch,
            });
        }
        if self.master != Some(master) {
            return Err(ControllerError::InvalidMaster(master));
        }
        if sync_state_set_epoch != self.sync_state_set_epoch {
            return Err(ControllerError::FencedSyncStateSetEpoch {
                got: sync_state_set_epoch,
                current: self.sync_state_set_epoch,
            });
        }
        if !new_set.contains(&master) {
            return Err(ControllerError::InvalidSyncStateSet(
                "the master must stay in the in-sync set".into(),
            ));
        }
        for id in &new_set {
            if !self.members.contains_key(id) {
                return Err(ControllerError::InvalidSyncStateSet(format!(
                    "broker {id} is not a member"
                )));
            }
            if *id != master && !self.sync_state_set.contains(id) && !is_alive(*id) {
                return Err(ControllerError::InvalidSyncStateSet(format!(
                    "broker {id} is not alive"
                )));
            }
        }
        if new_set != self.sync_state_set {
            self.sync_state_set = new_set;
            self.sync_state_set_epoch += 1;
        }
        Ok(self.sync_state_set_epoch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: i64) -> Member {
        Member {
            addr: format!("10.0.0.{id}:10911"),
            ha_addr: format!("10.0.0.{id}:10912"),
        }
    }

    fn c(broker_id: i64, alive: bool, epoch: u32, max_offset: u64) -> Candidate {
        Candidate {
            broker_id,
            alive,
            epoch,
            max_offset,
        }
    }

    fn group() -> GroupState {
        let mut g = GroupState::default();
        let first = g
            .register("c", 0, member(0), 0)
            .expect("the first replica is master");
        assert_eq!((first.master, first.master_epoch), (0, 1));
        assert!(g.register("c", 1, member(1), 0).is_none());
        assert!(g.register("c", 2, member(2), 0).is_none());
        g.alter_sync_state_set(0, 1, 1, BTreeSet::from([0, 1, 2]), |_| true)
            .unwrap();
        g
    }

    #[test]
    fn the_best_in_sync_replica_is_elected_in_a_new_epoch() {
        let mut g = group();
        let e = g
            .elect(
                &[c(0, false, 1, 900), c(1, true, 1, 700), c(2, true, 1, 800)],
                None,
                false,
            )
            .unwrap();
        assert_eq!(
            (e.master, e.master_epoch),
            (2, 2),
            "longest log among the alive"
        );
        assert_eq!(e.sync_state_set, BTreeSet::from([2]));
        assert_eq!(g.master, Some(2));
        // Ties go to the lowest id; a newer epoch beats a longer log.
        let mut g = group();
        let e = g
            .elect(&[c(1, true, 1, 800), c(2, true, 1, 800)], None, false)
            .unwrap();
        assert_eq!(e.master, 1);
        let mut g = group();
        let e = g
            .elect(&[c(1, true, 2, 100), c(2, true, 1, 800)], None, false)
            .unwrap();
        assert_eq!(e.master, 1);
    }

    #[test]
    fn a_new_epoch_is_past_every_epoch_a_replica_log_holds() {
        // A store that was master in classic mode up to epoch 7 joins a new controller.
        let mut g = GroupState::default();
        let e = g.register("c", 0, member(0), 7).expect("first master");
        assert_eq!(e.master_epoch, 8);
        g.register("c", 1, member(1), 0);
        g.sync_state_set = BTreeSet::from([0, 1]);
        let e = g
            .elect(&[c(0, false, 8, 900), c(1, true, 11, 900)], None, false)
            .unwrap();
        assert_eq!((e.master, e.master_epoch), (1, 12));
    }

    #[test]
    fn a_replica_outside_the_in_sync_set_is_never_elected_unless_unclean_is_allowed() {
        let mut g = group();
        g.alter_sync_state_set(0, 1, 2, BTreeSet::from([0]), |_| true)
            .unwrap();
        let before = g.clone();
        let err = g
            .elect(&[c(0, false, 1, 900), c(1, true, 1, 900)], None, false)
            .unwrap_err();
        assert!(matches!(err, ControllerError::MasterNotAvailable(_)));
        assert_eq!(g.master, None, "unwritable, not promoted");
        assert_eq!(g.master_epoch, before.master_epoch);
        assert_eq!(g.sync_state_set, before.sync_state_set);
        let e = g
            .elect(&[c(0, false, 1, 900), c(1, true, 1, 900)], None, true)
            .unwrap();
        assert_eq!(e.master, 1);
    }

    #[test]
    fn a_designated_replica_wins_only_if_eligible() {
        let mut g = group();
        let all = [c(0, true, 1, 900), c(1, true, 1, 100), c(2, true, 1, 900)];
        assert_eq!(g.clone().elect(&all, Some(1), false).unwrap().master, 1);
        g.alter_sync_state_set(0, 1, 2, BTreeSet::from([0, 2]), |_| true)
            .unwrap();
        assert!(g.elect(&all, Some(1), false).is_err());
    }

    #[test]
    fn designating_the_alive_master_elects_nobody() {
        let mut g = group();
        let all = [c(0, true, 1, 900), c(1, true, 1, 900)];
        let before = g.clone();
        assert_eq!(
            g.elect(&all, Some(0), false),
            Err(ControllerError::MasterStillExists(0))
        );
        assert_eq!(g, before);
    }

    #[test]
    fn the_in_sync_set_changes_only_by_compare_and_set_from_the_current_master() {
        let mut g = group();
        let alive = |_| true;
        // A stale master epoch (a deposed master) is fenced.
        g.elect(&[c(1, true, 1, 0)], None, false).unwrap();
        assert!(matches!(
            g.alter_sync_state_set(0, 1, 2, BTreeSet::from([0]), alive),
            Err(ControllerError::FencedMasterEpoch { .. })
        ));
        // The new master, with a stale set epoch.
        assert!(matches!(
            g.alter_sync_state_set(1, 2, 1, BTreeSet::from([1, 2]), alive),
            Err(ControllerError::FencedSyncStateSetEpoch { .. })
        ));
        assert!(matches!(
            g.alter_sync_state_set(1, 2, 3, BTreeSet::from([2]), alive),
            Err(ControllerError::InvalidSyncStateSet(_))
        ));
        assert!(matches!(
            g.alter_sync_state_set(1, 2, 3, BTreeSet::from([1, 7]), alive),
            Err(ControllerError::InvalidSyncStateSet(_))
        ));
        assert!(matches!(
            g.alter_sync_state_set(1, 2, 3, BTreeSet::from([1, 2]), |id| id != 2),
            Err(ControllerError::InvalidSyncStateSet(_))
        ));
        assert_eq!(
            g.alter_sync_state_set(1, 2, 3, BTreeSet::from([1, 2]), alive),
            Ok(4)
        );
        assert!(matches!(
            g.alter_sync_state_set(2, 2, 4, BTreeSet::from([2]), alive),
            Err(ControllerError::InvalidMaster(2))
        ));
    }
}
