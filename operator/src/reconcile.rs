//! The reconciler, in the kube-rs controller-rs shape: a pure [`plan`](plan::plan) from the
//! cluster and the observed broker groups, an [`apply`](apply::apply_plan) step that
//! server-side applies it under one field manager, and a pure [`status`](status::status) that
//! turns the result into kstatus conditions, events and the next requeue. Unsatisfiable specs
//! (group scale-down, storage changes, bad config overrides) end in `Stalled=True` plus a
//! Warning event and a slow requeue, never a hot loop.

pub mod apply;
pub mod conditions;
pub mod context;
pub mod observe;
pub mod plan;
pub mod roll;
pub mod status;

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

    // The controller first: brokers rendered for failover call it as soon as they start.
    let controller = match &ctx.failover {
        Some(f) => f.ensure(mqc, &ctx.env)?,
        None => None,
    };
    let existing = observe::existing_groups(&ctx.client, &ns, mqc).await?;
    let plan = plan::plan(mqc, &existing, &ctx.env);
    let mut observed = apply::apply_plan(&ctx.client, &ns, &plan, &existing).await?;
    if let Some(c) = &controller {
        // Under failover the operator rolls the pods: one step per group and reconcile.
        let decided = c.state();
        let pods = observe::group_pods(&ctx.client, &ns, mqc).await?;
        for g in &plan.groups {
            let Some(sts) = observed.groups.get(&g.index) else {
                continue;
            };
            let group_pods = pods.get(&g.index).map(Vec::as_slice).unwrap_or_default();
            let group = decided.groups.get(&g.name);
            let since = status::master_since(mqc, &g.name, group, Timestamp::now());
            let step = roll::next_step(sts, group_pods, group, since);
            let done = apply::carry_out_roll(&ctx.client, &ns, c, &g.name, step).await?;
            observed.rollouts.insert(g.index, done);
        }
    }
    let decided = controller.map(|c| c.state());
    let outcome = status::status(mqc, &plan, &observed, decided.as_ref(), Timestamp::now());
    apply::patch_status(ctx, &ns, &name, &outcome.status).await?;
    apply::publish(ctx, mqc, &outcome.notices).await;
    Ok(outcome.action)
}

/// Error policy: exponential backoff per object (5 s doubling to 5 min), never a hot loop.
pub fn error_policy(mqc: Arc<MessageQueueCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.next_backoff(&mqc);
    tracing::warn!(cluster = %Context::key(&mqc), %error, ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
