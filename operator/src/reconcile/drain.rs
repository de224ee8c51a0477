//! Draining a broker group before it is removed (a scale-in of `spec.broker.groups`), the
//! order RocketMQ operators follow by hand with `mqadmin wipeWritePerm`: stop writes, let
//! producers learn it, let every consumer group finish what the group holds, then remove it.
//!
//! 1. Every pod of the group is made read-only (`brokerPermission=4` through
//!    UPDATE_BROKER_CONFIG; repeated every reconcile, so a pod that restarts mid-drain is
//!    read-only again). Its registrations then show every topic read-only and producers choose
//!    other groups.
//! 2. Nothing is removed before clients had a route poll since writes stopped
//!    ([`ROUTE_REFRESH`]): a send in flight to the group still lands and is consumed.
//! 3. Messages the group stores for later delivery (delay levels, timers, undecided
//!    transactions) are delivered there, into its topics, when due: nothing is removed while
//!    the master still holds any (a two-hour delay level holds the drain two hours).
//! 4. The group is removed once no consumer group has anything left on it: for every
//!    `topic@group` the master holds offsets for, each queue's committed offset has reached the
//!    queue's end (retry topics included).
//!
//! This module is the pure decision; the reconciler asks the brokers and carries it out.

use std::collections::BTreeMap;
use std::time::Duration;

use super::roll::ROUTE_REFRESH;

/// What the reconciler learnt from a draining group's brokers this time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainObservation {
    /// Pods of the group that run, and how many of them are read-only now.
    pub pods: usize,
    /// Of those, the ones that took `brokerPermission=4`.
    pub read_only: usize,
    /// Messages each consumer group has yet to consume on the group's master, groups with
    /// nothing left omitted (`None`: the master could not be asked).
    pub backlog: Option<BTreeMap<String, u64>>,
    /// Messages the master stores for later delivery, by kind, kinds with none omitted
    /// (`None`: the master could not be asked).
    pub parked: Option<BTreeMap<String, u64>>,
}

/// The next step of a group's drain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainStep {
    /// Some pod is not read-only yet (or none runs): writes may still land.
    StoppingWrites(String),
    /// Writes stopped; clients have not all had a route poll since.
    WaitingForRoutes(Duration),
    /// Messages stored for later delivery are not delivered yet (by kind).
    WaitingForParked(BTreeMap<String, u64>),
    /// These consumer groups still have this much to read (a group that no longer consumes
    /// holds the drain until it is deleted: the message names it).
    WaitingForConsumers(BTreeMap<String, u64>),
    /// Empty and unwritten: remove the group's objects.
    Remove,
}

impl std::fmt::Display for DrainStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DrainStep::StoppingWrites(why) => write!(f, "stopping writes: {why}"),
            DrainStep::WaitingForRoutes(left) => write!(
                f,
                "writes stopped; waiting {}s for clients' route poll",
                left.as_secs()
            ),
            DrainStep::WaitingForParked(kinds) => {
                let left: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
                write!(
                    f,
                    "writes stopped; messages stored for later delivery are not due yet: {}",
                    left.join(", ")
                )
            }
            DrainStep::WaitingForConsumers(groups) => {
                let left: Vec<String> = groups.iter().map(|(g, n)| format!("{g} {n}")).collect();
                write!(
                    f,
                    "writes stopped; consumer groups have messages left on it: {}",
                    left.join(", ")
                )
            }
            DrainStep::Remove => write!(f, "drained: removing it"),
        }
    }
}

/// Decides the drain's next step from `seen` and how long ago every pod of the group was
/// read-only (`read_only_for`, `None` when not yet).
pub fn next_step(seen: &DrainObservation, read_only_for: Option<Duration>) -> DrainStep {
    if seen.pods == 0 {
        return DrainStep::StoppingWrites("no pod of the group runs to be asked".into());
    }
    if seen.read_only < seen.pods {
        return DrainStep::StoppingWrites(format!(
            "{} of {} pods are read-only",
            seen.read_only, seen.pods
        ));
    }
    let since = read_only_for.unwrap_or_default();
    if since < ROUTE_REFRESH {
        return DrainStep::WaitingForRoutes(ROUTE_REFRESH - since);
    }
    match &seen.parked {
        Some(parked) if parked.is_empty() => {}
        Some(parked) => return DrainStep::WaitingForParked(parked.clone()),
        None => {
            return DrainStep::StoppingWrites(
                "the group's master did not say what it stores for later delivery".into(),
            )
        }
    }
    match &seen.backlog {
        Some(left) if left.is_empty() => DrainStep::Remove,
        Some(left) => DrainStep::WaitingForConsumers(left.clone()),
        None => DrainStep::StoppingWrites("the group's master did not say its backlog".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(pods: usize, read_only: usize, backlog: Option<u64>) -> DrainObservation {
        DrainObservation {
            pods,
            read_only,
            parked: Some(BTreeMap::new()),
            backlog: backlog.map(|n| {
                (n > 0)
                    .then(|| ("orders-consumer".to_string(), n))
                    .into_iter()
                    .collect()
            }),
        }
    }

    #[test]
    fn a_group_is_removed_only_read_only_past_a_route_poll_and_consumed() {
        let long = Some(ROUTE_REFRESH);
        assert!(matches!(
            next_step(&seen(2, 1, Some(0)), long),
            DrainStep::StoppingWrites(_)
        ));
        assert!(matches!(
            next_step(&seen(0, 0, Some(0)), long),
            DrainStep::StoppingWrites(_)
        ));
        assert_eq!(
            next_step(&seen(2, 2, Some(0)), Some(Duration::from_secs(5))),
            DrainStep::WaitingForRoutes(ROUTE_REFRESH - Duration::from_secs(5))
        );
        assert_eq!(
            next_step(&seen(2, 2, Some(0)), None),
            DrainStep::WaitingForRoutes(ROUTE_REFRESH)
        );
        let waiting = next_step(&seen(2, 2, Some(17)), long);
        assert_eq!(
            waiting.to_string(),
            "writes stopped; consumer groups have messages left on it: orders-consumer 17"
        );
        assert!(matches!(
            next_step(&seen(2, 2, None), long),
            DrainStep::StoppingWrites(_)
        ));
        assert_eq!(next_step(&seen(2, 2, Some(0)), long), DrainStep::Remove);
    }

    #[test]
    fn messages_stored_for_later_hold_the_drain_until_delivered() {
        let long = Some(ROUTE_REFRESH);
        let mut parked = seen(2, 2, Some(0));
        parked.parked = Some([("delayed".to_string(), 3), ("timer".to_string(), 1)].into());
        let step = next_step(&parked, long);
        assert_eq!(
            step.to_string(),
            "writes stopped; messages stored for later delivery are not due yet: delayed 3, timer 1"
        );
        parked.parked = None;
        assert!(matches!(
            next_step(&parked, long),
            DrainStep::StoppingWrites(_)
        ));
        parked.parked = Some(BTreeMap::new());
        assert_eq!(next_step(&parked, long), DrainStep::Remove);
    }
}
