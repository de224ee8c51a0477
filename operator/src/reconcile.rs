//! The reconciler, in the kube-rs controller-rs shape: a pure [`plan`](plan::plan) from the
//! cluster and the observed broker groups, an [`apply`](apply::apply_plan) step that
//! server-side applies it under one field manager, and a pure [`status`](status::status) that
//! turns the result into kstatus conditions, events and the next requeue. Unsatisfiable specs
//! (group scale-down, storage changes, bad config overrides) end in `Stalled=True` plus a
//! Warning event and a slow requeue, never a hot loop.

pub mod apply;
pub mod brokers;
pub mod conditions;
pub mod context;
pub mod drain;
pub mod expand;
pub mod observe;
pub mod plan;
pub mod roll;
pub mod shrink;
pub mod status;
pub mod zones;

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;

pub use context::{
    Context, Error, BASE_BACKOFF, FIELD_MANAGER, IDLE_REQUEUE, MAX_BACKOFF, PROGRESS_REQUEUE,
};
pub use plan::{find_stalls, Stall};
pub use status::{condition, statefulset_ready};

use crate::builders;
use crate::crd::MessageQueueCluster;
use plan::Gate;

/// Reconciles one cluster, recording the count, duration and any error in the metrics.
pub async fn reconcile(mqc: Arc<MessageQueueCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_inner(&mqc, &ctx).await;
    match &result {
        Ok(_) => {
            ctx.reset_backoff(&mqc);
            ctx.metrics.record_reconcile(started.elapsed(), None);
        }
        Err(e) => {
            let (kind, reason) = e.metric_labels();
            ctx.metrics
                .record_reconcile(started.elapsed(), Some((kind, &reason)));
        }
    }
    result
}

/// The operator's settings for `mqc`: its own, with the cluster's secret (made if need be)
/// when the cluster has ACL on. Without it the plan stalls (the pods would wait for the
/// Secret).
async fn cluster_env(ctx: &Context, mqc: &MessageQueueCluster) -> builders::OperatorEnv {
    let mut env = ctx.env.clone();
    env.cluster_secret = None;
    if mqc.spec.security.acl.enabled {
        match crate::cluster_secret::ensure(&ctx.client, mqc).await {
            Ok(secret) => env.cluster_secret = Some(secret),
            Err(e) => tracing::warn!(cluster = ?mqc.metadata.name, error = %e, "no cluster secret"),
        }
    }
    env
}

/// Gate, then observe → plan → apply → status → write status → events.
async fn reconcile_inner(mqc: &MessageQueueCluster, ctx: &Context) -> Result<Action, Error> {
    let gate = plan::gate(mqc);
    if gate == Gate::Deleting {
        if let Some(f) = &ctx.failover {
            f.forget(&builders::scope(mqc));
        }
        return Ok(Action::await_change());
    }
    let ns = builders::namespace(mqc);
    let name = mqc.metadata.name.clone().ok_or(Error::MissingName)?;

    if gate == Gate::Paused {
        let outcome = status::paused(mqc, Timestamp::now());
        // The pause is announced before its status is written.
        apply::publish(ctx, mqc, &outcome.notices).await;
        apply::patch_status(ctx, &ns, &name, &outcome.status).await?;
        return Ok(outcome.action);
    }

    // A lower replicasPerGroup waits until no group's master is on an ordinal it removes.
    let existing = observe::existing_groups(&ctx.client, &ns, mqc).await?;
    let (shrink_steps, replicas) = shrink_steps(ctx, mqc, &existing);
    let held;
    let mqc = if replicas == mqc.spec.broker.replicas_per_group {
        mqc
    } else {
        tracing::info!(
            cluster = name,
            replicas,
            want = mqc.spec.broker.replicas_per_group,
            "replicasPerGroup kept until every master is on a replica that stays"
        );
        let mut m = mqc.clone();
        m.spec.broker.replicas_per_group = replicas;
        held = m;
        &held
    };

    let mut env = cluster_env(ctx, mqc).await;
    if env.controller_for(mqc).is_some() {
        // The groups' stable addresses before the configuration that names them.
        env.group_addresses = apply::master_services(&ctx.client, &ns, mqc).await?;
    }
    let signer = env.cluster_secret.as_ref().map(|s| s.credentials());
    let signer = signer.as_ref();
    // The controller first: brokers rendered for failover call it as soon as they start.
    let controller = match &ctx.failover {
        Some(f) => f.ensure(mqc, &env)?,
        None => None,
    };
    // The operator's own certificates before the pods that mount them.
    let certificates_due = crate::certificates::ensure(&ctx.client, mqc).await?;
    let plan = plan::plan(mqc, &existing, &env);
    let mut observed = apply::apply_plan(&ctx.client, &ns, &plan, &existing).await?;
    let draining = plan
        .groups
        .iter()
        .any(|g| matches!(g.action, plan::GroupAction::Drain));
    let cancelled = status::cancelled_drains(mqc, &plan);
    let pods = observe::group_pods(&ctx.client, &ns, mqc).await?;
    zones::annotate(
        &ctx.client,
        &ns,
        &pods,
        builders::zone_label(&mqc.spec.placement),
    )
    .await;
    if draining {
        drain_groups(
            ctx,
            signer,
            mqc,
            &plan,
            &pods,
            controller.as_deref(),
            &mut observed,
        )
        .await?;
    }
    for index in cancelled {
        // A scale-in taken back: the group's pods take writes again.
        for pod in pods.get(&index).into_iter().flatten() {
            if let Some(ip) = &pod.ip {
                if let Err(e) = ctx
                    .brokers
                    .set_permission(&brokers::address(ip), 6, signer)
                    .await
                {
                    tracing::warn!(pod = pod.name, error = %e, "cannot make the pod writable again");
                }
            }
        }
    }
    if let Some(c) = &controller {
        // Under failover the operator rolls the pods: one step per group and reconcile.
        let decided = c.state();
        for g in &plan.groups {
            if matches!(g.action, plan::GroupAction::Drain) {
                continue;
            }
            let Some(sts) = observed.groups.get(&g.index) else {
                continue;
            };
            let group_pods = pods.get(&g.index).map(Vec::as_slice).unwrap_or_default();
            let group = decided.groups.get(&g.name);
            let since = status::master_since(mqc, &g.name, group, Timestamp::now());
            let step = match shrink_steps.get(&g.index) {
                Some(step) => step.clone(),
                None => roll::next_step(sts, group_pods, group, since),
            };
            let done = apply::carry_out_roll(&ctx.client, &ns, c, &g.name, step).await?;
            observed.rollouts.insert(g.index, done);
        }
    }
    let decided = controller.map(|c| c.state());
    let outcome = status::status(mqc, &plan, &observed, decided.as_ref(), Timestamp::now());
    apply::patch_status(ctx, &ns, &name, &outcome.status).await?;
    apply::publish(ctx, mqc, &outcome.notices).await;
    Ok(sooner(outcome.action, certificates_due))
}

/// Each group's step before `replicasPerGroup` can drop to the spec's (see `shrink`), and the
/// replica count to apply meanwhile.
fn shrink_steps(
    ctx: &Context,
    mqc: &MessageQueueCluster,
    existing: &observe::ExistingGroups,
) -> (std::collections::BTreeMap<i32, roll::RollStep>, i32) {
    let want = mqc.spec.broker.replicas_per_group;
    let failover = mqc.spec.broker.failover.enabled && ctx.failover.is_some();
    let decided = ctx
        .failover
        .as_ref()
        .and_then(|f| f.get(&builders::scope(mqc)))
        .map(|c| c.state());
    let cluster = mqc.metadata.name.clone().unwrap_or_default();
    let now = Timestamp::now();
    let mut steps = std::collections::BTreeMap::new();
    let mut held = Vec::new();
    for (index, sts) in existing.range(..mqc.spec.broker.groups) {
        let name = builders::names::broker_group(&cluster, *index);
        let group = decided.as_ref().and_then(|d| d.groups.get(&name));
        let g = shrink::GroupShrink {
            name: &name,
            current: sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            decided: group,
            master_since: status::master_since(mqc, &name, group, now),
        };
        if let Some(step) = shrink::step(want, failover, &g) {
            held.push(g.current);
            steps.insert(*index, step);
        }
    }
    (steps, shrink::replicas(want, held))
}

/// `action`, or a requeue after `due` when that comes first: a step of the certificates'
/// rotation (a CA switch above all) falls due at a set time, and Secrets are not watched, so
/// the idle requeue alone could hold a forced renewal's switch back by minutes.
fn sooner(action: Action, due: Option<std::time::Duration>) -> Action {
    let Some(due) = due else {
        return action;
    };
    // `Action` does not tell its delay: compare with the ones the status step gives.
    let later = action == Action::await_change()
        || [PROGRESS_REQUEUE, IDLE_REQUEUE]
            .into_iter()
            .any(|d| due < d && action == Action::requeue(d));
    if later {
        Action::requeue(due)
    } else {
        action
    }
}

/// One step of the drain of every group past the spec (see `drain`): its pods made
/// read-only, its master asked for the consumers' backlog, and the group removed once the
/// drain allows it. What each group does is left in `observed` for the status.
async fn drain_groups(
    ctx: &Context,
    signer: Option<&conveyor_remoting::acl::Credentials>,
    mqc: &MessageQueueCluster,
    plan: &plan::Plan,
    pods: &observe::GroupPods,
    controller: Option<&conveyor::controller::Controller>,
    observed: &mut status::Observed,
) -> Result<(), Error> {
    let ns = &builders::namespace(mqc);
    let decided = controller.map(|c| c.state());
    let now = Timestamp::now();
    for g in plan
        .groups
        .iter()
        .filter(|g| matches!(g.action, plan::GroupAction::Drain))
    {
        let group_pods: Vec<&roll::PodState> = pods
            .get(&g.index)
            .into_iter()
            .flatten()
            .filter(|p| p.ip.is_some() && !p.terminating)
            .collect();
        let mut read_only = 0;
        for pod in &group_pods {
            let addr = brokers::address(pod.ip.as_deref().unwrap_or_default());
            match ctx.brokers.set_permission(&addr, 4, signer).await {
                Ok(()) => read_only += 1,
                Err(e) => {
                    tracing::info!(pod = pod.name, error = %e, "drain: pod not read-only yet")
                }
            }
        }
        // The master holds the committed offsets (classic roles: ordinal 0).
        let master = decided
            .as_ref()
            .and_then(|d| d.groups.get(&g.name))
            .map_or(Some(0), |d| d.master)
            .and_then(|id| group_pods.iter().find(|p| i64::from(p.ordinal) == id));
        let (backlog, parked) = match master {
            Some(p) => {
                let addr = brokers::address(p.ip.as_deref().unwrap_or_default());
                let known = |what: &str, r: Result<_, brokers::BrokerCallError>| match r {
                    Ok(n) => Some(n),
                    Err(e) => {
                        tracing::info!(pod = p.name, error = %e, "drain: {what} unknown");
                        None
                    }
                };
                (
                    known("backlog", ctx.brokers.backlog(&addr, signer).await),
                    known("parked messages", ctx.brokers.parked(&addr, signer).await),
                )
            }
            None => (None, None),
        };
        let seen = drain::DrainObservation {
            pods: group_pods.len(),
            read_only,
            backlog,
            parked,
        };
        let stopped_at = status::writes_stopped_at(mqc, &g.name)
            .or_else(|| (seen.pods > 0 && seen.read_only == seen.pods).then_some(now));
        let step = drain::next_step(
            &seen,
            stopped_at.map(|t| now.duration_since(t).unsigned_abs()),
        );
        if step == drain::DrainStep::Remove {
            tracing::warn!(group = g.name, "drained: removing the group");
            apply::remove_group(&ctx.client, ns, mqc, g.index).await?;
        }
        observed.drains.insert(
            g.index,
            status::GroupDrain {
                step,
                writes_stopped_at: stopped_at,
            },
        );
    }
    Ok(())
}

/// Error policy: exponential backoff per object (5 s doubling to 5 min), never a hot loop.
pub fn error_policy(mqc: Arc<MessageQueueCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.next_backoff(&mqc);
    tracing::warn!(cluster = %Context::key(&mqc), %error, ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod requeue_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_certificate_step_due_before_the_requeue_brings_it_forward() {
        let switch = Duration::from_secs(121);
        assert_eq!(
            sooner(Action::requeue(IDLE_REQUEUE), Some(switch)),
            Action::requeue(switch)
        );
        assert_eq!(
            sooner(Action::requeue(PROGRESS_REQUEUE), Some(switch)),
            Action::requeue(PROGRESS_REQUEUE)
        );
        assert_eq!(
            sooner(
                Action::requeue(PROGRESS_REQUEUE),
                Some(Duration::from_secs(3))
            ),
            Action::requeue(Duration::from_secs(3))
        );
        assert_eq!(
            sooner(
                Action::requeue(IDLE_REQUEUE),
                Some(Duration::from_secs(40 * 86_400))
            ),
            Action::requeue(IDLE_REQUEUE)
        );
        assert_eq!(
            sooner(Action::requeue(IDLE_REQUEUE), None),
            Action::requeue(IDLE_REQUEUE)
        );
    }
}
