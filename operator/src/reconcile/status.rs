//! Reporting, the pure last step of a reconcile: from the plan and the StatefulSets as the API
//! server returned them to the status to write (kstatus conditions, group pods, name-server
//! addresses), the events to publish and when to look again. The clock is a parameter, so the
//! condition rules (including kept transition times) are unit-tested without an API server.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use conveyor::controller::decide::{ControllerState, GroupState};

use super::conditions::{
    status_str, ConditionType, Reason, ACTION_FAILOVER, ACTION_PAUSE, ACTION_RECONCILE,
    ACTION_ROLL, MASTER_PROMOTED, ROLLING_RESTART, SWITCHOVER, TRUE, VOLUME_EXPANSION,
};
use super::context::{IDLE_REQUEUE, PROGRESS_REQUEUE};
use super::drain::DrainStep;
use super::plan::{GroupAction, Plan, Stall};
use super::roll::RollStep;
use crate::builders::{self, names};
use crate::crd::{BrokerGroupStatus, MessageQueueCluster, MessageQueueClusterStatus};

/// The StatefulSets after the apply step: the name servers' and each planned group's, as the
/// API server answered the apply (or as listed, for a group the plan keeps unchanged).
#[derive(Debug, Clone)]
pub struct Observed {
    /// The name-server StatefulSet.
    pub name_server: StatefulSet,
    /// Broker-group StatefulSets by group index.
    pub groups: BTreeMap<i32, StatefulSet>,
    /// Under failover: the step of each group's replication-aware roll this reconcile took
    /// or waits on (see `roll`).
    pub rollouts: BTreeMap<i32, RollStep>,
    /// Groups past the spec: their drain (see `drain`).
    pub drains: BTreeMap<i32, GroupDrain>,
    /// Volume expansions requested in this reconcile, for people (see `expand`).
    pub expansions: Vec<String>,
    /// Refusals found while applying (a StorageClass that cannot expand), reported with
    /// the plan's.
    pub stalls: Vec<Stall>,
}

/// Where a draining group stands after this reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupDrain {
    /// The step taken or awaited.
    pub step: DrainStep,
    /// When every pod became read-only, once it did.
    pub writes_stopped_at: Option<Timestamp>,
}

/// When the status says every pod of group `name` became read-only (a drain under way).
pub fn writes_stopped_at(mqc: &MessageQueueCluster, name: &str) -> Option<Timestamp> {
    mqc.status
        .as_ref()?
        .groups
        .iter()
        .find(|g| g.name == name)?
        .writes_stopped_at
        .as_deref()?
        .parse()
        .ok()
}

/// Groups the plan applies again although the status shows their drain had stopped writes
/// (the scale-in was taken back): their pods must take writes again.
pub fn cancelled_drains(mqc: &MessageQueueCluster, plan: &Plan) -> Vec<i32> {
    plan.groups
        .iter()
        .filter(|g| !matches!(g.action, GroupAction::Drain))
        .filter(|g| writes_stopped_at(mqc, &g.name).is_some())
        .map(|g| g.index)
        .collect()
}

/// An event to publish about the cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// Normal or Warning.
    pub type_: EventType,
    /// Event reason (a condition type that became true, or a refusal [`Reason`]).
    pub reason: &'static str,
    /// Event action.
    pub action: &'static str,
    /// Human-readable note.
    pub note: String,
}

/// What a reconcile reports: the status, the events and the next requeue.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The status to write through the status subresource.
    pub status: MessageQueueClusterStatus,
    /// Events to publish, in order.
    pub notices: Vec<Notice>,
    /// When to reconcile again (changes arrive through the watches anyway).
    pub action: Action,
}

/// Builds a condition, keeping `lastTransitionTime` from `old` when the status did not change
/// and using `now` when it did.
pub fn condition(
    old: &[Condition],
    type_: ConditionType,
    holds: bool,
    reason: Reason,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    condition_of(
        old,
        type_.as_str(),
        holds,
        reason.as_str(),
        message,
        generation,
        now,
    )
}

/// [`condition`] for any resource's vocabulary: the one rule for `lastTransitionTime`.
pub fn condition_of(
    old: &[Condition],
    type_: &str,
    holds: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
    now: Timestamp,
) -> Condition {
    let status = status_str(holds);
    let last = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now));
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: last,
    }
}

/// True when `conditions` has `type_` with status `True`.
pub fn holds(conditions: &[Condition], type_: ConditionType) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_.as_str() && c.status == TRUE)
}

/// True when a StatefulSet has rolled out its current spec and all pods are ready.
pub fn statefulset_ready(sts: &StatefulSet) -> bool {
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = &sts.status else { return false };
    let current_gen = st.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
    current_gen
        && st.ready_replicas.unwrap_or(0) >= want
        && st.updated_replicas.unwrap_or(0) >= want
        && st.replicas <= want
}

fn ready_replicas(sts: &StatefulSet) -> i32 {
    sts.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// Status of a paused cluster: `Paused=True`, `Reconciling=False`, the other conditions and
/// fields kept; one Normal event when the pause begins; no requeue.
pub fn paused(mqc: &MessageQueueCluster, now: Timestamp) -> Outcome {
    let generation = mqc.metadata.generation;
    let mut status = mqc.status.clone().unwrap_or_default();
    let old = std::mem::take(&mut status.conditions);
    status.observed_generation = generation;
    let msg = format!(
        "annotation {}=true: no changes are applied",
        crate::crd::PAUSE_ANNOTATION
    );
    let paused_type = ConditionType::Paused.as_str();
    let reconciling_type = ConditionType::Reconciling.as_str();
    let mut conditions: Vec<Condition> = old
        .iter()
        .filter(|c| c.type_ != paused_type && c.type_ != reconciling_type)
        .cloned()
        .collect();
    let cond =
        |type_, holds, reason| condition(&old, type_, holds, reason, msg.clone(), generation, now);
    conditions.push(cond(ConditionType::Paused, true, Reason::PauseAnnotation));
    conditions.push(cond(ConditionType::Reconciling, false, Reason::Paused));
    for missing in [ConditionType::Ready, ConditionType::Stalled] {
        if !conditions.iter().any(|c| c.type_ == missing.as_str()) {
            conditions.push(cond(missing, false, Reason::Paused));
        }
    }
    status.conditions = conditions;
    let notices = if holds(&old, ConditionType::Paused) {
        Vec::new()
    } else {
        vec![Notice {
            type_: EventType::Normal,
            reason: ConditionType::Paused.as_str(),
            action: ACTION_PAUSE,
            note: msg,
        }]
    };
    Outcome {
        status,
        notices,
        action: Action::await_change(),
    }
}

/// Status of an active cluster after `plan` was applied and `observed` came back: `Ready` when
/// every StatefulSet is rolled out and nothing is refused, `Stalled` with the refusals,
/// `Reconciling` otherwise; a Warning event per refusal and a Normal event when it becomes
/// ready; a slow requeue once settled or stalled, a fast one while rolling out.
pub fn status(
    mqc: &MessageQueueCluster,
    plan: &Plan,
    observed: &Observed,
    failover: Option<&ControllerState>,
    now: Timestamp,
) -> Outcome {
    let generation = mqc.metadata.generation;
    let old_status = mqc.status.clone().unwrap_or_default();
    let old = old_status.conditions.as_slice();

    let mut all_ready = statefulset_ready(&observed.name_server);
    let mut groups = Vec::new();
    let mut promotions = Vec::new();
    let mut masterless = Vec::new();
    let mut rolls = Vec::new();
    let mut drains = Vec::new();
    for g in &plan.groups {
        let sts = observed.groups.get(&g.index);
        let draining = matches!(g.action, GroupAction::Drain);
        all_ready &= !draining && sts.is_some_and(statefulset_ready);
        let replicas = sts
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.replicas)
            .unwrap_or(mqc.spec.broker.replicas_per_group);
        // Classic roles: ordinal 0 is the master.
        let mut group = BrokerGroupStatus {
            pods: (0..replicas).map(|i| names::pod(&g.name, i)).collect(),
            ready_replicas: sts.map(ready_replicas).unwrap_or(0),
            master: (replicas > 0).then(|| names::pod(&g.name, 0)),
            name: g.name.clone(),
            ..Default::default()
        };
        // Failover: what the controller decided (nothing yet before a replica registers).
        if let Some(decided) = failover.map(|f| f.groups.get(&g.name)) {
            let old = old_status.groups.iter().find(|o| o.name == g.name);
            apply_decision(&mut group, decided, old, now);
            promotions.extend(promotion(old, &group));
            if decided.is_some_and(|d| d.master.is_none()) {
                masterless.push(g.name.clone());
            }
        }
        if draining {
            let d = observed.drains.get(&g.index);
            let text = d.map_or_else(|| "draining".to_string(), |d| d.step.to_string());
            drains.push(format!("{}: {text}", g.name));
            group.drain = Some(text);
            group.writes_stopped_at = d.and_then(|d| d.writes_stopped_at).map(|t| t.to_string());
        }
        if let Some(step) = observed.rollouts.get(&g.index).filter(|s| !s.done()) {
            group.rollout = Some(step.to_string());
            rolls.extend(roll_notice(&g.name, step));
        }
        groups.push(group);
    }
    all_ready &= plan
        .groups
        .iter()
        .filter(|g| !matches!(g.action, GroupAction::Drain))
        .count() as i32
        == mqc.spec.broker.groups;

    let all_stalls: Vec<&Stall> = plan.stalls.iter().chain(&observed.stalls).collect();
    let stalled = !all_stalls.is_empty();
    let stall_message = all_stalls
        .iter()
        .map(|s| s.message.clone())
        .collect::<Vec<_>>()
        .join("; ");
    let stall_reason = all_stalls
        .first()
        .map(|s| s.reason)
        .unwrap_or(Reason::Satisfiable);
    let ready = all_ready && !stalled;
    let (ready_reason, ready_message) = if ready {
        (
            Reason::AllPodsReady,
            "all name servers and broker groups are ready".to_string(),
        )
    } else if stalled {
        (stall_reason, stall_message.clone())
    } else {
        (
            Reason::Progressing,
            "waiting for StatefulSets to roll out and pods to become ready".to_string(),
        )
    };
    let reconciling = !ready && !stalled;
    let rolling: Vec<String> = groups
        .iter()
        .filter_map(|g| g.rollout.as_ref().map(|r| format!("{}: {r}", g.name)))
        .chain(drains.iter().map(|d| format!("draining {d}")))
        .collect();
    let (reconciling_reason, reconciling_message) = if reconciling && !rolling.is_empty() {
        (Reason::Progressing, rolling.join("; "))
    } else if reconciling {
        (
            Reason::Progressing,
            "applied the desired objects; waiting for pods".to_string(),
        )
    } else {
        (Reason::Settled, String::new())
    };
    let cond = |type_, holds, reason, message| {
        condition(old, type_, holds, reason, message, generation, now)
    };
    let mut conditions = vec![
        cond(ConditionType::Ready, ready, ready_reason, ready_message),
        cond(
            ConditionType::Reconciling,
            reconciling,
            reconciling_reason,
            reconciling_message,
        ),
        cond(ConditionType::Stalled, stalled, stall_reason, stall_message),
    ];
    if failover.is_some()
        || old
            .iter()
            .any(|c| c.type_ == ConditionType::Degraded.as_str())
    {
        let degraded = !masterless.is_empty();
        conditions.push(cond(
            ConditionType::Degraded,
            degraded,
            if degraded {
                Reason::NoInSyncReplica
            } else {
                Reason::MastersElected
            },
            if degraded {
                format!(
                    "no master, and no live in-sync replica to promote, in {}: writes to it \
                     are refused until an in-sync replica returns",
                    masterless.join(", ")
                )
            } else {
                String::new()
            },
        ));
    }
    if old
        .iter()
        .any(|c| c.type_ == ConditionType::Paused.as_str())
    {
        conditions.push(cond(
            ConditionType::Paused,
            false,
            Reason::Resumed,
            String::new(),
        ));
    }

    let mut notices: Vec<Notice> = all_stalls
        .iter()
        .map(|s| Notice {
            type_: EventType::Warning,
            reason: s.reason.as_str(),
            action: ACTION_RECONCILE,
            note: s.message.clone(),
        })
        .collect();
    notices.extend(observed.expansions.iter().map(|note| Notice {
        type_: EventType::Normal,
        reason: VOLUME_EXPANSION,
        action: ACTION_RECONCILE,
        note: note.clone(),
    }));
    notices.extend(rolls);
    notices.extend(promotions);
    if ready && !holds(old, ConditionType::Ready) {
        notices.push(Notice {
            type_: EventType::Normal,
            reason: ConditionType::Ready.as_str(),
            action: ACTION_RECONCILE,
            note: "cluster is ready".into(),
        });
    }

    Outcome {
        status: MessageQueueClusterStatus {
            observed_generation: generation,
            conditions,
            name_server_addresses: Some(builders::name_server_addresses(mqc)),
            name_server_service: Some(builders::name_server_service_address(mqc)),
            groups,
        },
        notices,
        // A roll step that waits (for the clients' route poll, a pod to come back) is
        // looked at again soon, even when every pod is ready and nothing else changes.
        action: if stalled || (ready && observed.rollouts.values().all(RollStep::done)) {
            Action::requeue(IDLE_REQUEUE)
        } else {
            Action::requeue(PROGRESS_REQUEUE)
        },
    }
}

/// Puts the controller's decision `decided` for the group (`None`: no replica registered
/// yet) into `group`. Broker ids are pod ordinals. `lastFailover` moves to `now` when the
/// epoch grew past the one the old status showed.
fn apply_decision(
    group: &mut BrokerGroupStatus,
    decided: Option<&GroupState>,
    old: Option<&BrokerGroupStatus>,
    now: Timestamp,
) {
    let pod = |id: i64| names::pod(&group.name, id as i32);
    let epoch = decided.map(|d| d.master_epoch).filter(|e| *e > 0);
    let promoted = matches!((old.and_then(|o| o.epoch), epoch), (Some(o), Some(n)) if n > o);
    group.master = decided.and_then(|d| d.master).map(pod);
    group.in_sync_replicas = decided
        .map(|d| d.sync_state_set.iter().map(|id| pod(*id)).collect())
        .unwrap_or_default();
    group.epoch = epoch;
    group.last_failover = if promoted {
        Some(now.to_string())
    } else {
        old.and_then(|o| o.last_failover.clone())
    };
}

/// The `MasterPromoted` event when `new` has a newer epoch than `old` showed.
fn promotion(old: Option<&BrokerGroupStatus>, new: &BrokerGroupStatus) -> Option<Notice> {
    let (Some(before), Some(after)) = (old.and_then(|o| o.epoch), new.epoch) else {
        return None;
    };
    (after > before).then(|| Notice {
        type_: EventType::Normal,
        reason: MASTER_PROMOTED,
        action: ACTION_FAILOVER,
        note: format!(
            "{}: {} is master in epoch {after} (was {} in epoch {before})",
            new.name,
            new.master.as_deref().unwrap_or("nobody"),
            old.and_then(|o| o.master.as_deref()).unwrap_or("nobody"),
        ),
    })
}

/// How long ago the master of group `name` changed, as of `now`: from the status' last
/// failover, or zero when the controller's epoch `decided` is already past the status' (a
/// change this reconcile has not reported yet). `None` when it never changed.
pub fn master_since(
    mqc: &MessageQueueCluster,
    name: &str,
    decided: Option<&GroupState>,
    now: Timestamp,
) -> Option<std::time::Duration> {
    let reported = mqc
        .status
        .as_ref()
        .and_then(|s| s.groups.iter().find(|g| g.name == name));
    let epoch = reported.and_then(|g| g.epoch);
    if decided.is_some_and(|d| epoch.is_some_and(|e| d.master_epoch > e)) {
        return Some(std::time::Duration::ZERO);
    }
    let at: Timestamp = reported?.last_failover.as_deref()?.parse().ok()?;
    Some(now.duration_since(at).unsigned_abs())
}

/// The event of a roll step that changed something (a restart, a switchover).
fn roll_notice(group: &str, step: &RollStep) -> Option<Notice> {
    let reason = match step {
        RollStep::Restart { .. } => ROLLING_RESTART,
        RollStep::Switchover { .. } => SWITCHOVER,
        RollStep::UpToDate | RollStep::Wait(_) => return None,
    };
    Some(Notice {
        type_: EventType::Normal,
        reason,
        action: ACTION_ROLL,
        note: format!("{group}: {step}"),
    })
}

#[cfg(test)]
mod tests;
