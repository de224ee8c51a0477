//! Lowering `replicasPerGroup` without losing the master. A StatefulSet scaled in removes its
//! highest ordinals, whatever their role; under failover the master may be one of them (after
//! any promotion), and going down to one replica makes ordinal 0 a classic master whether or
//! not it holds every acknowledged message. So, before a group loses replicas, its master must
//! be on an ordinal that stays: the operator hands the role over (a controller switchover, the
//! same hand-over as a roll's) to the lowest kept replica in the in-sync set, waits until
//! clients can have learnt the new master, and only then applies the lower count. Until then
//! the whole cluster keeps its current replica count (one count for every group).
//!
//! This module is the pure decision; the reconciler applies the count it returns and carries
//! out each group's step like a roll step.

use std::time::Duration;

use conveyor::controller::decide::GroupState;

use super::roll::{RollStep, ROUTE_REFRESH};

/// One group's situation, as the decision needs it.
#[derive(Debug, Clone, Copy)]
pub struct GroupShrink<'a> {
    /// The group's name (its StatefulSet; pods are `<name>-<ordinal>`).
    pub name: &'a str,
    /// Replicas its StatefulSet has now.
    pub current: i32,
    /// What the controller decided for it, when the operator's controller has the group.
    pub decided: Option<&'a GroupState>,
    /// How long ago its master last changed (`None`: never since the first election).
    pub master_since: Option<Duration>,
}

/// What lowering the count to `want` requires of `group`: `None` when it can happen now, else
/// the step that comes first (a switchover, or a wait whose text says why). `failover`: the
/// cluster is under failover (without it ordinal 0 is always the master and always stays).
pub fn step(want: i32, failover: bool, group: &GroupShrink<'_>) -> Option<RollStep> {
    if want >= group.current || !failover {
        return None;
    }
    let pod = |ordinal: i64| format!("{}-{ordinal}", group.name);
    let Some(decided) = group.decided else {
        return Some(RollStep::Wait(format!(
            "replicasPerGroup {} -> {want} waits for the controller's state of {}",
            group.current, group.name
        )));
    };
    let Some(master) = decided.master else {
        return Some(RollStep::Wait(format!(
            "replicasPerGroup {} -> {want} waits: {} has no master",
            group.current, group.name
        )));
    };
    let kept = |id: i64| id < i64::from(want);
    if kept(master) {
        // The master stays; clients must also have had time to leave a former master that
        // a recent switchover replaced and that is about to go.
        return group
            .master_since
            .filter(|s| *s < ROUTE_REFRESH)
            .map(|since| {
                RollStep::Wait(format!(
                    "replicasPerGroup {} -> {want} waits {}s more: the master of {} changed {}s \
                     ago and clients learn it on their next route poll",
                    group.current,
                    (ROUTE_REFRESH - since).as_secs(),
                    group.name,
                    since.as_secs()
                ))
            });
    }
    match decided
        .sync_state_set
        .iter()
        .copied()
        .filter(|id| kept(*id))
        .min()
    {
        Some(to) => Some(RollStep::Switchover {
            from: pod(master),
            to: pod(to),
            to_id: to,
        }),
        None => Some(RollStep::Wait(format!(
            "replicasPerGroup {} -> {want} waits: the master of {} is {}, which would be removed, \
             and no replica that stays (ordinals below {want}) is in sync to take over",
            group.current,
            group.name,
            pod(master)
        ))),
    }
}

/// The replica count to apply to every group this reconcile: `want`, or the highest current
/// count of the groups that still have a step to take (`held`).
pub fn replicas(want: i32, held: impl IntoIterator<Item = i32>) -> i32 {
    held.into_iter().fold(want, i32::max)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn decided(master: i64, in_sync: &[i64]) -> GroupState {
        GroupState {
            master: Some(master),
            master_epoch: 2,
            sync_state_set: in_sync.iter().copied().collect::<BTreeSet<_>>(),
            ..Default::default()
        }
    }

    fn group(current: i32, decided: Option<&GroupState>) -> GroupShrink<'_> {
        GroupShrink {
            name: "c-broker-0",
            current,
            decided,
            master_since: None,
        }
    }

    #[test]
    fn nothing_to_do_when_not_lowering_or_without_failover() {
        let d = decided(1, &[0, 1]);
        assert_eq!(step(2, true, &group(2, Some(&d))), None);
        assert_eq!(step(3, true, &group(2, Some(&d))), None);
        // Classic roles: ordinal 0 is the master and stays.
        assert_eq!(step(1, false, &group(2, None)), None);
    }

    #[test]
    fn a_master_on_a_kept_ordinal_lets_the_count_drop() {
        let d = decided(0, &[0, 1]);
        assert_eq!(step(1, true, &group(2, Some(&d))), None);
        let d = decided(1, &[0, 1, 2]);
        assert_eq!(step(2, true, &group(3, Some(&d))), None);
    }

    #[test]
    fn a_master_that_would_be_removed_hands_over_to_the_lowest_kept_in_sync_replica() {
        let d = decided(1, &[0, 1]);
        assert_eq!(
            step(1, true, &group(2, Some(&d))),
            Some(RollStep::Switchover {
                from: "c-broker-0-1".into(),
                to: "c-broker-0-0".into(),
                to_id: 0,
            })
        );
        // 3 -> 2 with the master on 2: ordinal 1 is the lowest kept one in sync.
        let d = decided(2, &[1, 2]);
        assert!(matches!(
            step(2, true, &group(3, Some(&d))),
            Some(RollStep::Switchover { to_id: 1, .. })
        ));
    }

    #[test]
    fn no_kept_replica_in_sync_holds_the_count() {
        let d = decided(1, &[1]);
        let s = step(1, true, &group(2, Some(&d)));
        assert!(
            matches!(&s, Some(RollStep::Wait(why)) if why.contains("no replica that stays")),
            "{s:?}"
        );
    }

    #[test]
    fn unknown_state_or_no_master_holds_the_count() {
        assert!(matches!(
            step(1, true, &group(2, None)),
            Some(RollStep::Wait(_))
        ));
        let d = GroupState::default();
        assert!(matches!(
            step(1, true, &group(2, Some(&d))),
            Some(RollStep::Wait(_))
        ));
    }

    #[test]
    fn a_recent_switchover_holds_the_count_until_clients_can_know() {
        let d = decided(0, &[0, 1]);
        let mut g = group(2, Some(&d));
        g.master_since = Some(Duration::from_secs(5));
        assert!(matches!(step(1, true, &g), Some(RollStep::Wait(_))));
        g.master_since = Some(ROUTE_REFRESH);
        assert_eq!(step(1, true, &g), None);
    }

    #[test]
    fn the_count_stays_while_any_group_has_a_step() {
        let d0 = decided(0, &[0, 1]);
        let d1 = decided(1, &[0, 1]);
        let (g0, g1) = (group(2, Some(&d0)), group(2, Some(&d1)));
        let held = |groups: &[GroupShrink<'_>]| -> Vec<i32> {
            groups
                .iter()
                .filter(|g| step(1, true, g).is_some())
                .map(|g| g.current)
                .collect()
        };
        assert_eq!(replicas(1, held(&[g0, g1])), 2);
        assert_eq!(replicas(1, held(&[g0])), 1);
    }
}
