//! Replication-aware rolling restarts, with Strimzi's KafkaRoller as the model. Under
//! failover a group's StatefulSet uses the `OnDelete` strategy: a new pod template (image,
//! flush mode, resources, configuration) changes nothing until the operator deletes a pod, and
//! it deletes them one at a time in the order that keeps the group writable — slaves first,
//! then a controlled switchover that hands the master role to an in-sync slave, then the
//! former master — each only when every other replica is ready and in the in-sync set, so
//! the previous restart has caught up before the next begins. The StatefulSet's own rolling
//! update knows nothing of roles: it would restart the master whenever its ordinal came up.
//!
//! This module is the pure decision: from the StatefulSet, its pods and the controller's
//! state to the one next step of a group. The reconciler carries it out and reports it.

use std::fmt;
use std::time::Duration;

use conveyor::controller::decide::GroupState;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

/// The label the StatefulSet controller puts on each pod: the revision it was created from.
pub const REVISION_LABEL: &str = "controller-revision-hash";

/// One pod of a group, as the roll sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// Pod name (`<group>-<ordinal>`).
    pub name: String,
    /// Its uid: the delete is conditional on it, so a pod recreated meanwhile is spared.
    pub uid: Option<String>,
    /// Its ordinal, which is also its broker id.
    pub ordinal: i32,
    /// The StatefulSet revision it runs.
    pub revision: Option<String>,
    /// Its Ready condition.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Its IP, once it has one (brokers are asked at `<ip>:10911`).
    pub ip: Option<String>,
    /// The node it was scheduled to.
    pub node: Option<String>,
    /// Its zone annotation (`conveyor.dev/zone`), once the operator set it (`""`: the node
    /// names no zone).
    pub zone: Option<String>,
    /// It cannot start as it is (see [`STUCK_REASONS`], or unschedulable): it serves nobody,
    /// and only a new pod can pick up a corrected template.
    pub stuck: bool,
}

/// Why a container waiting to start will not start without a change: a bad image or a
/// configuration the kubelet cannot run, or a crash loop.
pub const STUCK_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// Whether `pod` is stuck: a container (or init container) waits for one of
/// [`STUCK_REASONS`], or the scheduler found no node for it.
fn is_stuck(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let waiting = status
        .container_statuses
        .iter()
        .chain(status.init_container_statuses.iter())
        .flatten()
        .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.as_deref())
        .any(|reason| STUCK_REASONS.contains(&reason));
    let unschedulable = status.conditions.iter().flatten().any(|c| {
        c.type_ == "PodScheduled"
            && c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
    });
    waiting || unschedulable
}

impl PodState {
    /// The view of `pod`, or `None` when its name has no ordinal.
    pub fn of(pod: &Pod) -> Option<Self> {
        let name = pod.name_any();
        let ordinal = name.rsplit_once('-')?.1.parse().ok()?;
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        Some(Self {
            uid: pod.metadata.uid.clone(),
            ordinal,
            revision: pod.labels().get(REVISION_LABEL).cloned(),
            ready,
            terminating: pod.metadata.deletion_timestamp.is_some(),
            ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()),
            node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            zone: pod
                .annotations()
                .get(crate::builders::ZONE_ANNOTATION)
                .cloned(),
            stuck: is_stuck(pod),
            name,
        })
    }
}

/// The next step of one group's roll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollStep {
    /// Every pod runs the StatefulSet's current revision.
    UpToDate,
    /// A restart is due but something must settle first (the text says what).
    Wait(String),
    /// Delete this pod; its StatefulSet recreates it from the new revision.
    Restart {
        /// The pod.
        pod: String,
        /// Its uid (delete precondition).
        uid: Option<String>,
        /// Whether it is the master: only in a group of one replica, where nobody can take over.
        master: bool,
    },
    /// Make broker `to` master (controller switchover) before broker `from` restarts.
    Switchover {
        /// The outdated master's pod.
        from: String,
        /// The in-sync slave's pod.
        to: String,
        /// That slave's broker id.
        to_id: i64,
    },
}

impl RollStep {
    /// True when nothing is left to restart.
    pub fn done(&self) -> bool {
        *self == RollStep::UpToDate
    }
}

impl fmt::Display for RollStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RollStep::UpToDate => write!(f, "every pod runs the current revision"),
            RollStep::Wait(why) => write!(f, "rolling restart waits: {why}"),
            RollStep::Restart { pod, master, .. } => write!(
                f,
                "restarting {pod} ({}) for the new revision",
                if *master { "master" } else { "slave" }
            ),
            RollStep::Switchover { from, to, .. } => write!(
                f,
                "handing the master role from {from} to {to} before {from} restarts"
            ),
        }
    }
}

/// How long after a change of master no pod restarts: RocketMQ clients learn the new master
/// on their next name-server poll (every 30 s by default) and meanwhile write through the
/// former master, which relays to the new one; restarting it sooner would fail their sends.
pub const ROUTE_REFRESH: Duration = Duration::from_secs(35);

/// The next step of the roll of the group run by `sts`, whose pods are `pods` and whose
/// controller state is `decided`; `master_since` is how long ago the group's master last
/// changed (`None`: never since the first election).
pub fn next_step(
    sts: &StatefulSet,
    pods: &[PodState],
    decided: Option<&GroupState>,
    master_since: Option<Duration>,
) -> RollStep {
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(status) = &sts.status else {
        return RollStep::Wait("the StatefulSet has no status yet".into());
    };
    if status.observed_generation.unwrap_or(0) < sts.metadata.generation.unwrap_or(0) {
        return RollStep::Wait("the StatefulSet controller has not seen the new spec yet".into());
    }
    let Some(revision) = status.update_revision.as_deref() else {
        return RollStep::Wait("the StatefulSet has no update revision yet".into());
    };
    let mut outdated: Vec<&PodState> = pods
        .iter()
        .filter(|p| p.ordinal < want && p.revision.as_deref() != Some(revision))
        .collect();
    if outdated.is_empty() {
        return RollStep::UpToDate;
    }
    if let Some(p) = pods.iter().find(|p| p.terminating) {
        return RollStep::Wait(format!("{} is terminating", p.name));
    }
    let present = |ordinal: i32| pods.iter().any(|p| p.ordinal == ordinal);
    if let Some(missing) = (0..want).find(|o| !present(*o)) {
        return RollStep::Wait(format!("pod ordinal {missing} does not exist yet"));
    }
    // A pod of an older revision that cannot start (a bad image, a crash loop, no node for
    // it) serves nobody, and under OnDelete nothing but a restart gives it the current
    // template: restart it first, whatever else is unready (Strimzi's roller does the same).
    // This is how reverting a bad change in Git heals a group without deleting pods by hand.
    // A stuck pod of the current revision is left alone: the change itself is bad, and the
    // pods still running the previous revision must not follow it.
    if let Some(p) = outdated.iter().find(|p| p.stuck) {
        let master = decided.and_then(|g| g.master) == Some(i64::from(p.ordinal));
        return RollStep::Restart {
            pod: p.name.clone(),
            uid: p.uid.clone(),
            master,
        };
    }
    if let Some(p) = pods.iter().find(|p| p.ordinal < want && !p.ready) {
        return RollStep::Wait(format!("{} is not ready", p.name));
    }
    let Some(group) = decided else {
        return RollStep::Wait("no replica of the group registered with the controller".into());
    };
    let Some(master) = group.master else {
        return RollStep::Wait(
            "the group has no master; nothing restarts until one is elected".into(),
        );
    };
    let in_sync = |p: &PodState| group.sync_state_set.contains(&i64::from(p.ordinal));
    // Slaves first, highest ordinal first (the StatefulSet's own order).
    outdated.sort_by_key(|p| std::cmp::Reverse(p.ordinal));
    let is_master = |p: &PodState| i64::from(p.ordinal) == master;
    if let Some(since) = master_since.filter(|s| *s < ROUTE_REFRESH) {
        return RollStep::Wait(format!(
            "the master changed {}s ago; clients learn it on their next route poll, so no pod \
             restarts for {}s",
            since.as_secs(),
            (ROUTE_REFRESH - since).as_secs()
        ));
    }
    if let Some(slave) = outdated.iter().find(|p| !is_master(p)) {
        // Everybody else holds every acknowledged message: the previous restart caught up.
        if let Some(behind) = pods
            .iter()
            .find(|p| p.ordinal < want && p.ordinal != slave.ordinal && !in_sync(p))
        {
            return RollStep::Wait(format!("{} is not in sync yet", behind.name));
        }
        return RollStep::Restart {
            pod: slave.name.clone(),
            uid: slave.uid.clone(),
            master: false,
        };
    }
    // Only the master is left.
    let old = outdated[0];
    if want == 1 {
        return RollStep::Restart {
            pod: old.name.clone(),
            uid: old.uid.clone(),
            master: true,
        };
    }
    match pods
        .iter()
        .filter(|p| p.ordinal < want && !is_master(p) && in_sync(p))
        .min_by_key(|p| p.ordinal)
    {
        Some(to) => RollStep::Switchover {
            from: old.name.clone(),
            to: to.name.clone(),
            to_id: i64::from(to.ordinal),
        },
        None => RollStep::Wait(format!(
            "no in-sync slave to hand the master role to before {} restarts",
            old.name
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use k8s_openapi::api::apps::v1::{StatefulSetSpec, StatefulSetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn sts(replicas: i32) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                generation: Some(2),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(StatefulSetStatus {
                observed_generation: Some(2),
                update_revision: Some("new".into()),
                replicas,
                ..Default::default()
            }),
        }
    }

    fn pod(ordinal: i32, revision: &str) -> PodState {
        PodState {
            name: format!("g-{ordinal}"),
            uid: Some(format!("uid-{ordinal}")),
            ordinal,
            revision: Some(revision.into()),
            ready: true,
            terminating: false,
            ip: None,
            node: None,
            zone: None,
            stuck: false,
        }
    }

    fn group(master: i64, in_sync: &[i64]) -> GroupState {
        GroupState {
            master: Some(master),
            master_epoch: 3,
            sync_state_set: in_sync.iter().copied().collect::<BTreeSet<_>>(),
            ..Default::default()
        }
    }

    fn restart(ordinal: i32) -> RollStep {
        RollStep::Restart {
            pod: format!("g-{ordinal}"),
            uid: Some(format!("uid-{ordinal}")),
            master: false,
        }
    }

    #[test]
    fn a_stuck_pod_of_an_old_revision_restarts_first_whatever_else_waits() {
        // A bad image reached g-1, then was reverted: g-1 is stuck on the bad revision, g-0
        // (master) runs the restored one.
        let s = sts(2);
        let g = group(0, &[0]);
        let mut pods = vec![pod(0, "new"), pod(1, "bad")];
        pods[1].ready = false;
        pods[1].stuck = true;
        assert_eq!(next_step(&s, &pods, Some(&g), None), restart(1));
        // Even before any replica registered, and right after a master change.
        assert_eq!(
            next_step(&s, &pods, None, Some(Duration::from_secs(1))),
            restart(1)
        );
    }

    #[test]
    fn a_stuck_pod_of_the_current_revision_holds_the_roll() {
        // The bad change itself: g-1 already runs it and is stuck; g-0 must not follow.
        let s = sts(2);
        let g = group(0, &[0]);
        let mut pods = vec![pod(0, "old"), pod(1, "new")];
        pods[1].ready = false;
        pods[1].stuck = true;
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Wait("g-1 is not ready".into())
        );
    }

    #[test]
    fn stuck_means_a_container_that_cannot_start_or_no_node() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateWaiting, ContainerStatus, PodCondition, PodStatus,
        };
        let waiting = |reason: &str| Pod {
            metadata: ObjectMeta {
                name: Some("g-1".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    name: "broker".into(),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some(reason.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(PodState::of(&waiting("ImagePullBackOff")).unwrap().stuck);
        assert!(PodState::of(&waiting("CrashLoopBackOff")).unwrap().stuck);
        assert!(!PodState::of(&waiting("ContainerCreating")).unwrap().stuck);
        let unschedulable = Pod {
            metadata: ObjectMeta {
                name: Some("g-1".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(PodState::of(&unschedulable).unwrap().stuck);
    }

    #[test]
    fn slaves_restart_first_then_a_switchover_then_the_former_master() {
        let s = sts(3);
        let g = group(0, &[0, 1, 2]);
        let mut pods = vec![pod(0, "old"), pod(1, "old"), pod(2, "old")];
        assert_eq!(next_step(&s, &pods, Some(&g), None), restart(2));
        pods[2].revision = Some("new".into());
        assert_eq!(next_step(&s, &pods, Some(&g), None), restart(1));
        pods[1].revision = Some("new".into());
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Switchover {
                from: "g-0".into(),
                to: "g-1".into(),
                to_id: 1
            }
        );
        // After the switchover the former master is a slave like any other, restarted once
        // clients had a route poll to learn the new master (they write through it meanwhile).
        let g = group(1, &[1, 2]);
        let just = Some(Duration::from_secs(2));
        assert!(matches!(
            next_step(&s, &pods, Some(&g), just),
            RollStep::Wait(_)
        ));
        assert_eq!(
            next_step(&s, &pods, Some(&g), Some(ROUTE_REFRESH)),
            restart(0)
        );
        pods[0].revision = Some("new".into());
        assert!(next_step(&s, &pods, Some(&g), None).done());
    }

    #[test]
    fn nothing_restarts_until_the_previous_restart_is_ready_and_in_sync() {
        let s = sts(3);
        let mut pods = vec![pod(0, "old"), pod(1, "old"), pod(2, "new")];
        pods[2].ready = false;
        let g = group(0, &[0, 1, 2]);
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Wait("g-2 is not ready".into())
        );
        pods[2].ready = true;
        let g = group(0, &[0, 1]);
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Wait("g-2 is not in sync yet".into())
        );
        pods[2].terminating = true;
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Wait("g-2 is terminating".into())
        );
        let pods = vec![pod(0, "old"), pod(2, "new")];
        assert_eq!(
            next_step(&s, &pods, Some(&g), None),
            RollStep::Wait("pod ordinal 1 does not exist yet".into())
        );
    }

    #[test]
    fn the_master_is_never_restarted_without_an_in_sync_slave_to_take_over() {
        let s = sts(2);
        let pods = vec![pod(0, "old"), pod(1, "new")];
        assert_eq!(
            next_step(&s, &pods, Some(&group(0, &[0])), None),
            RollStep::Wait(
                "no in-sync slave to hand the master role to before g-0 restarts".into()
            )
        );
        let masterless = GroupState {
            master: None,
            ..group(0, &[0, 1])
        };
        assert!(matches!(
            next_step(&s, &pods, Some(&masterless), None),
            RollStep::Wait(_)
        ));
        assert!(matches!(
            next_step(&s, &pods, None, None),
            RollStep::Wait(_)
        ));
        // A group of one has nobody to hand over to: its master restarts.
        let s = sts(1);
        assert_eq!(
            next_step(&s, &[pod(0, "old")], Some(&group(0, &[0])), None),
            RollStep::Restart {
                pod: "g-0".into(),
                uid: Some("uid-0".into()),
                master: true
            }
        );
    }

    #[test]
    fn a_statefulset_the_controller_has_not_caught_up_with_waits() {
        let mut s = sts(2);
        s.metadata.generation = Some(3);
        let pods = vec![pod(0, "old"), pod(1, "old")];
        assert!(matches!(
            next_step(&s, &pods, Some(&group(0, &[0, 1])), None),
            RollStep::Wait(_)
        ));
        let pods = vec![pod(0, "new"), pod(1, "new")];
        assert!(next_step(&sts(2), &pods, Some(&group(0, &[0, 1])), None).done());
    }

    #[test]
    fn a_pod_view_reads_ordinal_revision_and_readiness() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "demo-broker-0-1", "uid": "u1",
                         "labels": {"controller-revision-hash": "demo-broker-0-abc"}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let v = PodState::of(&pod).unwrap();
        assert_eq!(
            (v.ordinal, v.revision.as_deref(), v.ready, v.terminating),
            (1, Some("demo-broker-0-abc"), true, false)
        );
    }
}
