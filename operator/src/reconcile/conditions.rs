//! The status vocabulary in one place: condition types, condition reasons and event actions.
//! Users, dashboards and `kubectl wait --for=condition=...` depend on these strings, so they are
//! spelled once here and everything else (status, events, tests) refers to them.

use std::fmt;

/// `status` of a condition that holds.
pub const TRUE: &str = "True";
/// `status` of a condition that does not hold.
pub const FALSE: &str = "False";

/// The `status` string of a condition that holds when `holds` is true.
pub fn status_str(holds: bool) -> &'static str {
    if holds {
        TRUE
    } else {
        FALSE
    }
}

/// A condition type of `MessageQueueCluster.status.conditions` (kstatus conventions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// Every name server and broker group is rolled out and ready.
    Ready,
    /// The operator applied changes and waits for them to take effect.
    Reconciling,
    /// The spec cannot be carried out as written; a person has to change it.
    Stalled,
    /// The pause annotation is set; nothing is applied.
    Paused,
    /// A broker group under failover has no master: it takes no writes until an in-sync
    /// replica returns (or unclean promotion is allowed).
    Degraded,
}

impl ConditionType {
    /// The `type` string written to the API.
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Reconciling => "Reconciling",
            ConditionType::Stalled => "Stalled",
            ConditionType::Paused => "Paused",
            ConditionType::Degraded => "Degraded",
        }
    }
}

impl fmt::Display for ConditionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition `reason` (CamelCase, as the API conventions ask). The refusal reasons are also the
/// reasons of the Warning events that announce them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// `Ready=True`: all name servers and broker groups are ready.
    AllPodsReady,
    /// `Ready=False` / `Reconciling=True`: objects applied, pods still rolling out.
    Progressing,
    /// `Reconciling=False`: nothing left to wait for (ready or stalled).
    Settled,
    /// `Stalled=False`: the spec can be carried out.
    Satisfiable,
    /// `Paused=True`: the pause annotation is set.
    PauseAnnotation,
    /// `Ready`/`Reconciling`/`Stalled` while paused.
    Paused,
    /// `Paused=False` after the pause annotation was removed.
    Resumed,
    /// Refusal: the storage size or class of an existing group changed.
    StorageChangeRefused,
    /// Refusal: a larger storage size, but a claim's StorageClass does not allow expansion.
    StorageExpansionRefused,
    /// Refusal: a `broker.config` override does not render.
    InvalidConfig,
    /// Refusal: ACL is on but the operator has no cluster secret (it cannot read or create
    /// its Secret).
    NoClusterSecret,
    /// `Degraded=False`: every group under failover has a master.
    MastersElected,
    /// `Degraded=True`: a group under failover has no live in-sync replica to promote.
    NoInSyncReplica,
}

impl Reason {
    /// The `reason` string written to the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::AllPodsReady => "AllPodsReady",
            Reason::Progressing => "Progressing",
            Reason::Settled => "Settled",
            Reason::Satisfiable => "Satisfiable",
            Reason::PauseAnnotation => "PauseAnnotation",
            Reason::Paused => "Paused",
            Reason::Resumed => "Resumed",
            Reason::StorageChangeRefused => "StorageChangeRefused",
            Reason::StorageExpansionRefused => "StorageExpansionRefused",
            Reason::InvalidConfig => "InvalidConfig",
            Reason::NoClusterSecret => "NoClusterSecret",
            Reason::MastersElected => "MastersElected",
            Reason::NoInSyncReplica => "NoInSyncReplica",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Event `action` of events raised while reconciling.
pub const ACTION_RECONCILE: &str = "Reconcile";
/// Event `action` of the event announcing a pause.
pub const ACTION_PAUSE: &str = "Pause";
/// Event `action` of the event announcing a promotion.
pub const ACTION_FAILOVER: &str = "Failover";
/// Event `reason` of a promotion: a group has a new master in a new epoch.
pub const MASTER_PROMOTED: &str = "MasterPromoted";
/// Event `action` of the replication-aware rolling restart's steps.
pub const ACTION_ROLL: &str = "Roll";
/// Event `reason` of a broker pod deleted by the roll (its StatefulSet recreates it).
pub const ROLLING_RESTART: &str = "RollingRestart";
/// Event `reason` of a volume expansion (claims grown, StatefulSet recreated; see `expand`).
pub const VOLUME_EXPANSION: &str = "VolumeExpansion";
/// Event `reason` of a switchover the roll asked for before restarting a master.
pub const SWITCHOVER: &str = "Switchover";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strings_are_the_published_ones() {
        let types = [
            ConditionType::Ready,
            ConditionType::Reconciling,
            ConditionType::Stalled,
            ConditionType::Paused,
        ];
        assert_eq!(
            types.map(ConditionType::as_str),
            ["Ready", "Reconciling", "Stalled", "Paused"]
        );
        assert_eq!(
            Reason::StorageChangeRefused.to_string(),
            "StorageChangeRefused"
        );
        assert_eq!((status_str(true), status_str(false)), ("True", "False"));
    }
}
