//! Unit tests of the pure status rules: a plan and StatefulSets in, conditions, events and the
//! requeue out, with a fixed clock.

use k8s_openapi::api::apps::v1::StatefulSetStatus;
use k8s_openapi::jiff::SignedDuration;

use super::*;
use crate::builders::tests::cluster;
use crate::crd::PAUSE_ANNOTATION;
use crate::reconcile::conditions::FALSE;
use crate::reconcile::plan::{plan, Stall};

fn t0() -> Timestamp {
    Timestamp::from_second(1_700_000_000).unwrap()
}

fn later() -> Timestamp {
    t0() + SignedDuration::from_secs(60)
}

fn rolled_out(mut sts: StatefulSet) -> StatefulSet {
    let n = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    sts.metadata.generation = Some(1);
    sts.status = Some(StatefulSetStatus {
        observed_generation: Some(1),
        replicas: n,
        ready_replicas: Some(n),
        updated_replicas: Some(n),
        ..Default::default()
    });
    sts
}

/// The plan of a fresh `mqc` and what the API server answers: every StatefulSet rolled out
/// when `ready`, none when not.
fn applied(mqc: &MessageQueueCluster, ready: bool) -> (Plan, Observed) {
    let p = plan(
        mqc,
        &BTreeMap::new(),
        &crate::builders::OperatorEnv::default(),
    );
    let finish = |sts: StatefulSet| if ready { rolled_out(sts) } else { sts };
    let groups = p
        .groups
        .iter()
        .map(|g| match &g.action {
            crate::reconcile::plan::GroupAction::Apply(o) => {
                (g.index, finish(o.statefulset.clone()))
            }
            crate::reconcile::plan::GroupAction::Keep
            | crate::reconcile::plan::GroupAction::Expand(_)
            | crate::reconcile::plan::GroupAction::Drain => {
                unreachable!("fresh cluster")
            }
        })
        .collect();
    let observed = Observed {
        name_server: finish(p.name_server.statefulset.clone()),
        groups,
        rollouts: Default::default(),
        drains: Default::default(),
        expansions: Vec::new(),
        stalls: Vec::new(),
    };
    (p, observed)
}

fn get(s: &MessageQueueClusterStatus, t: ConditionType) -> &Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == t.as_str())
        .unwrap_or_else(|| panic!("no {t}"))
}

fn summary(s: &MessageQueueClusterStatus) -> Vec<(String, String, String)> {
    s.conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect()
}

fn triple(t: ConditionType, holds: bool, r: Reason) -> (String, String, String) {
    (t.to_string(), status_str(holds).into(), r.to_string())
}

#[test]
fn rolling_out_is_reconciling_with_a_fast_requeue() {
    let mqc = cluster(2, 2);
    let (p, observed) = applied(&mqc, false);
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(
        summary(&out.status),
        [
            triple(ConditionType::Ready, false, Reason::Progressing),
            triple(ConditionType::Reconciling, true, Reason::Progressing),
            triple(ConditionType::Stalled, false, Reason::Satisfiable),
        ]
    );
    assert_eq!(out.action, Action::requeue(PROGRESS_REQUEUE));
    assert!(out.notices.is_empty());
    assert_eq!(out.status.observed_generation, Some(1));
    assert_eq!(out.status.groups.len(), 2);
    assert_eq!(out.status.groups[0].ready_replicas, 0);
    assert_eq!(
        out.status.groups[0].pods,
        ["orders-broker-0-0", "orders-broker-0-1"]
    );
    assert!(out
        .status
        .conditions
        .iter()
        .all(|c| c.last_transition_time == Time(t0())));
}

#[test]
fn ready_is_announced_once_and_keeps_its_transition_time() {
    let mut mqc = cluster(1, 3);
    let (p, observed) = applied(&mqc, true);
    let first = status(&mqc, &p, &observed, None, t0());
    assert_eq!(
        summary(&first.status)[..2],
        [
            triple(ConditionType::Ready, true, Reason::AllPodsReady),
            triple(ConditionType::Reconciling, false, Reason::Settled),
        ]
    );
    assert_eq!(first.action, Action::requeue(IDLE_REQUEUE));
    assert_eq!(
        first.notices,
        [Notice {
            type_: EventType::Normal,
            reason: ConditionType::Ready.as_str(),
            action: ACTION_RECONCILE,
            note: "cluster is ready".into(),
        }]
    );
    assert_eq!(first.status.groups[0].ready_replicas, 3);
    assert_eq!(
        first.status.groups[0].master.as_deref(),
        Some("orders-broker-0-0")
    );

    mqc.status = Some(first.status.clone());
    let second = status(&mqc, &p, &observed, None, later());
    assert!(second.notices.is_empty());
    for t in [
        ConditionType::Ready,
        ConditionType::Reconciling,
        ConditionType::Stalled,
    ] {
        assert_eq!(
            get(&second.status, t).last_transition_time,
            Time(t0()),
            "{t}"
        );
    }

    // A status change takes the new time.
    let (p, not_ready) = applied(&mqc, false);
    let third = status(&mqc, &p, &not_ready, None, later());
    assert_eq!(get(&third.status, ConditionType::Ready).status, FALSE);
    assert_eq!(
        get(&third.status, ConditionType::Ready).last_transition_time,
        Time(later())
    );
    assert_eq!(
        get(&third.status, ConditionType::Stalled).last_transition_time,
        Time(t0())
    );
}

#[test]
fn a_roll_step_that_waits_on_ready_pods_is_looked_at_again_soon() {
    // replicasPerGroup 2 -> 1 after a switchover: every pod is ready and nothing will change
    // by itself, but the count drops once the clients' route poll has passed.
    let mqc = cluster(1, 2);
    let (p, mut observed) = applied(&mqc, true);
    observed.rollouts.insert(
        0,
        RollStep::Wait("replicasPerGroup 2 -> 1 waits 30s more".into()),
    );
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(out.action, Action::requeue(PROGRESS_REQUEUE));
    observed.rollouts.insert(0, RollStep::UpToDate);
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(out.action, Action::requeue(IDLE_REQUEUE));
}

#[test]
fn a_missing_name_server_or_group_is_not_ready() {
    let mqc = cluster(2, 1);
    let (p, mut observed) = applied(&mqc, true);
    observed.groups.remove(&1);
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(get(&out.status, ConditionType::Ready).status, FALSE);
    assert_eq!(out.status.groups[1].ready_replicas, 0);
    // Without the StatefulSet the spec's replica count names the pods.
    assert_eq!(out.status.groups[1].pods, ["orders-broker-1-0"]);

    let (p, mut observed) = applied(&mqc, true);
    observed.name_server.status = None;
    assert_eq!(
        get(
            &status(&mqc, &p, &observed, None, t0()).status,
            ConditionType::Ready
        )
        .reason,
        Reason::Progressing.as_str()
    );
}

#[test]
fn refusals_stall_with_every_message_and_a_warning_each() {
    let mqc = cluster(1, 1);
    let (mut p, observed) = applied(&mqc, true);
    p.stalls = vec![
        Stall {
            reason: Reason::InvalidConfig,
            message: "first".into(),
        },
        Stall {
            reason: Reason::StorageChangeRefused,
            message: "second".into(),
        },
    ];
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(
        summary(&out.status),
        [
            triple(ConditionType::Ready, false, Reason::InvalidConfig),
            triple(ConditionType::Reconciling, false, Reason::Settled),
            triple(ConditionType::Stalled, true, Reason::InvalidConfig),
        ]
    );
    assert_eq!(
        get(&out.status, ConditionType::Stalled).message,
        "first; second"
    );
    assert_eq!(out.action, Action::requeue(IDLE_REQUEUE), "no hot loop");
    let reasons: Vec<_> = out.notices.iter().map(|n| (n.type_, n.reason)).collect();
    assert_eq!(
        reasons,
        [
            (EventType::Warning, Reason::InvalidConfig.as_str()),
            (EventType::Warning, Reason::StorageChangeRefused.as_str())
        ]
    );
}

#[test]
fn a_plan_without_groups_is_never_ready() {
    let mut mqc = cluster(1, 1);
    mqc.spec
        .broker
        .config
        .insert("broker.delay-levels".into(), "1s 5s".into());
    let (p, observed) = applied(&mqc, true);
    let out = status(&mqc, &p, &observed, None, t0());
    assert!(out.status.groups.is_empty());
    assert_eq!(
        get(&out.status, ConditionType::Stalled).reason,
        Reason::InvalidConfig.as_str()
    );
    assert_eq!(get(&out.status, ConditionType::Ready).status, FALSE);
}

#[test]
fn pausing_keeps_the_other_fields_and_announces_once() {
    let mut mqc = cluster(1, 1);
    let (p, observed) = applied(&mqc, true);
    let before = status(&mqc, &p, &observed, None, t0()).status;
    mqc.status = Some(before.clone());
    mqc.metadata.generation = Some(2);
    mqc.metadata.annotations = Some([(PAUSE_ANNOTATION.to_string(), "true".to_string())].into());

    let out = paused(&mqc, later());
    assert_eq!(out.action, Action::await_change());
    assert_eq!(
        summary(&out.status),
        [
            triple(ConditionType::Ready, true, Reason::AllPodsReady),
            triple(ConditionType::Stalled, false, Reason::Satisfiable),
            triple(ConditionType::Paused, true, Reason::PauseAnnotation),
            triple(ConditionType::Reconciling, false, Reason::Paused),
        ]
    );
    assert_eq!(out.status.observed_generation, Some(2));
    assert_eq!(out.status.groups, before.groups);
    assert_eq!(
        get(&out.status, ConditionType::Reconciling).last_transition_time,
        Time(t0()),
        "Reconciling stayed False"
    );
    assert_eq!(out.notices.len(), 1);
    assert_eq!(out.notices[0].reason, ConditionType::Paused.as_str());
    assert_eq!(out.notices[0].action, ACTION_PAUSE);

    mqc.status = Some(out.status.clone());
    assert!(paused(&mqc, later()).notices.is_empty());

    // Resuming reports Paused=False.
    let resumed = status(&mqc, &p, &observed, None, later());
    assert_eq!(
        summary(&resumed.status)[3],
        triple(ConditionType::Paused, false, Reason::Resumed)
    );
}

#[test]
fn a_fresh_paused_cluster_gets_every_condition() {
    let mut mqc = cluster(1, 1);
    mqc.metadata.annotations = Some([(PAUSE_ANNOTATION.to_string(), "true".to_string())].into());
    let out = paused(&mqc, t0());
    assert_eq!(
        summary(&out.status),
        [
            triple(ConditionType::Paused, true, Reason::PauseAnnotation),
            triple(ConditionType::Reconciling, false, Reason::Paused),
            triple(ConditionType::Ready, false, Reason::Paused),
            triple(ConditionType::Stalled, false, Reason::Paused),
        ]
    );
}

/// The controller's decision for group `orders-broker-0`: `master` (none: no live in-sync
/// replica) in `epoch`, with `in_sync` ids.
fn decided(master: Option<i64>, epoch: u32, in_sync: &[i64]) -> ControllerState {
    let mut state = ControllerState::default();
    state.groups.insert(
        "orders-broker-0".into(),
        GroupState {
            cluster: "orders".into(),
            master,
            master_epoch: epoch,
            sync_state_set: in_sync.iter().copied().collect(),
            ..Default::default()
        },
    );
    state
}

#[test]
fn failover_status_names_the_controllers_master_and_announces_a_promotion() {
    let mut mqc = cluster(1, 2);
    let (p, observed) = applied(&mqc, true);
    let first = status(
        &mqc,
        &p,
        &observed,
        Some(&decided(Some(0), 1, &[0, 1])),
        t0(),
    );
    let g = &first.status.groups[0];
    assert_eq!(g.master.as_deref(), Some("orders-broker-0-0"));
    assert_eq!(g.epoch, Some(1));
    assert_eq!(
        g.in_sync_replicas,
        ["orders-broker-0-0", "orders-broker-0-1"]
    );
    assert_eq!(g.last_failover, None, "the first election is no failover");
    assert!(first.notices.iter().all(|n| n.reason != MASTER_PROMOTED));
    assert_eq!(
        get(&first.status, ConditionType::Degraded).reason,
        Reason::MastersElected.as_str()
    );

    // Ordinal 1 promoted in epoch 2.
    mqc.status = Some(first.status);
    let second = status(
        &mqc,
        &p,
        &observed,
        Some(&decided(Some(1), 2, &[1])),
        later(),
    );
    let g = &second.status.groups[0];
    assert_eq!(g.master.as_deref(), Some("orders-broker-0-1"));
    assert_eq!(g.last_failover, Some(later().to_string()));
    let promoted: Vec<_> = second
        .notices
        .iter()
        .filter(|n| n.reason == MASTER_PROMOTED)
        .collect();
    assert_eq!(promoted.len(), 1);
    assert_eq!(
        promoted[0].note,
        "orders-broker-0: orders-broker-0-1 is master in epoch 2 (was orders-broker-0-0 in epoch 1)"
    );

    // Reported again unchanged: no second event, lastFailover kept.
    mqc.status = Some(second.status);
    let third = status(
        &mqc,
        &p,
        &observed,
        Some(&decided(Some(1), 2, &[1])),
        later() + SignedDuration::from_secs(60),
    );
    assert!(third.notices.iter().all(|n| n.reason != MASTER_PROMOTED));
    assert_eq!(
        third.status.groups[0].last_failover,
        Some(later().to_string())
    );
}

#[test]
fn a_group_without_a_master_is_degraded() {
    let mqc = cluster(1, 2);
    let (p, observed) = applied(&mqc, true);
    let out = status(&mqc, &p, &observed, Some(&decided(None, 3, &[0])), t0());
    let degraded = get(&out.status, ConditionType::Degraded);
    assert_eq!(degraded.status, TRUE);
    assert_eq!(degraded.reason, Reason::NoInSyncReplica.as_str());
    assert!(
        degraded.message.contains("orders-broker-0"),
        "{}",
        degraded.message
    );
    assert_eq!(out.status.groups[0].master, None);
}

#[test]
fn classic_roles_report_ordinal_zero_and_no_degraded_condition() {
    let mqc = cluster(1, 2);
    let (p, observed) = applied(&mqc, true);
    let out = status(&mqc, &p, &observed, None, t0());
    assert_eq!(
        out.status.groups[0].master.as_deref(),
        Some("orders-broker-0-0")
    );
    assert!(out.status.conditions.iter().all(|c| c.type_ != "Degraded"));
}

#[test]
fn a_rolling_restart_is_reported_per_group_with_an_event_per_step() {
    let mqc = cluster(1, 2);
    let (p, mut observed) = applied(&mqc, false);
    observed.rollouts.insert(
        0,
        RollStep::Restart {
            pod: "orders-broker-0-1".into(),
            uid: None,
            master: false,
        },
    );
    let out = status(
        &mqc,
        &p,
        &observed,
        Some(&decided(Some(0), 1, &[0, 1])),
        t0(),
    );
    let expected = "restarting orders-broker-0-1 (slave) for the new revision";
    assert_eq!(out.status.groups[0].rollout.as_deref(), Some(expected));
    let reconciling = get(&out.status, ConditionType::Reconciling);
    assert_eq!(reconciling.message, format!("orders-broker-0: {expected}"));
    let events: Vec<_> = out
        .notices
        .iter()
        .map(|n| (n.reason, n.note.as_str()))
        .collect();
    assert_eq!(
        events,
        [(
            ROLLING_RESTART,
            format!("orders-broker-0: {expected}").as_str()
        )]
    );

    // A wait is reported but announced by no event; a finished roll is not reported.
    observed.rollouts.insert(
        0,
        RollStep::Wait("orders-broker-0-1 is not in sync yet".into()),
    );
    let out = status(&mqc, &p, &observed, Some(&decided(Some(0), 1, &[0])), t0());
    assert_eq!(
        out.status.groups[0].rollout.as_deref(),
        Some("rolling restart waits: orders-broker-0-1 is not in sync yet")
    );
    assert!(out.notices.is_empty());
    observed.rollouts.insert(0, RollStep::UpToDate);
    let out = status(
        &mqc,
        &p,
        &observed,
        Some(&decided(Some(0), 1, &[0, 1])),
        t0(),
    );
    assert_eq!(out.status.groups[0].rollout, None);
}

#[test]
fn the_time_since_the_master_changed_comes_from_the_status_or_a_newer_epoch() {
    let mut mqc = cluster(1, 2);
    let state = decided(Some(1), 2, &[1]);
    let g = state.groups.get("orders-broker-0");
    assert_eq!(master_since(&mqc, "orders-broker-0", g, later()), None);
    mqc.status = Some(MessageQueueClusterStatus {
        groups: vec![BrokerGroupStatus {
            name: "orders-broker-0".into(),
            epoch: Some(2),
            last_failover: Some(t0().to_string()),
            ..Default::default()
        }],
        ..Default::default()
    });
    assert_eq!(
        master_since(&mqc, "orders-broker-0", g, later()),
        Some(std::time::Duration::from_secs(60))
    );
    // Elected again since the status was written: it just changed.
    let newer = decided(Some(0), 3, &[0]);
    assert_eq!(
        master_since(
            &mqc,
            "orders-broker-0",
            newer.groups.get("orders-broker-0"),
            later()
        ),
        Some(std::time::Duration::ZERO)
    );
}
