//! The reconciler, in the kube-rs controller-rs shape: a pure [`plan`](plan::plan) from the
//! cluster and the observed broker groups, an [`apply`](apply::apply_plan) step that
//! server-side applies it under one field manager, and a pure [`status`](status::status) that
//! turns the result into kstatus conditions, events and the next requeue. Unsatisfiable specs
//! (group scale-down, storage changes, bad config overrides) end in `Stalled=True` plus a
//! Warning event and a slow requeue, never a hot loop.

pub mod apply;
pub mod conditions;
pub mod observe;
pub mod plan;
pub mod status;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};

pub use plan::{find_stalls, Stall};
pub use status::{condition, statefulset_ready};

use crate::builders;
use crate::crd::MessageQueueCluster;
use crate::telemetry::Metrics;
use plan::Gate;

/// The one field manager of every apply.
pub const FIELD_MANAGER: &str = "conveyor-operator";
/// Requeue while pods are still rolling out.
pub const PROGRESS_REQUEUE: Duration = Duration::from_secs(15);
/// Requeue of a settled or stalled cluster (changes arrive through the watches anyway).
pub const IDLE_REQUEUE: Duration = Duration::from_secs(300);
/// First retry after an error; doubles per consecutive failure up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_secs(5);
/// Longest delay between retries after errors.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Reconciler errors (all transient: API errors are retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// An object (the cluster or a desired object) has no `metadata.name`.
    #[error("object has no name")]
    MissingName,
}

impl Error {
    /// `(kind, reason)` labels of `conveyor_operator_reconcile_errors_total`: kind `api` with the
    /// API server's status reason (`Conflict`, `Forbidden`, `InternalError`, ...), kind `client`
    /// with the client-side failure (`HyperError`, `Service`, `SerdeError`, `Other`), or kind
    /// `object` with `MissingName`. Both come from small fixed sets.
    pub fn metric_labels(&self) -> (&'static str, String) {
        match self {
            Error::Kube(kube::Error::Api(s)) if !s.reason.is_empty() => ("api", s.reason.clone()),
            Error::Kube(kube::Error::Api(s)) => ("api", format!("Code{}", s.code)),
            Error::Kube(e) => {
                let reason = match e {
                    kube::Error::HyperError(_) => "HyperError",
                    kube::Error::Service(_) => "Service",
                    kube::Error::SerdeError(_) => "SerdeError",
                    _ => "Other",
                };
                ("client", reason.into())
            }
            Error::MissingName => ("object", "MissingName".into()),
        }
    }
}

/// Shared state of one controller (no process-global state).
pub struct Context {
    /// Client of every API call.
    pub client: Client,
    /// Publishes the events.
    pub recorder: Recorder,
    /// Reconcile counts, durations and errors (shared with the HTTP endpoint).
    pub metrics: Arc<Metrics>,
    /// Consecutive failures per object, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    /// A context reporting events as `instance` of [`FIELD_MANAGER`], with its own metrics.
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            metrics: Arc::new(Metrics::new()),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Records into `metrics` instead of the context's own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    fn key(mqc: &MessageQueueCluster) -> String {
        format!("{}/{}", builders::namespace(mqc), mqc.name_any())
    }

    /// Records a failure and returns the delay before the next attempt.
    pub fn next_backoff(&self, mqc: &MessageQueueCluster) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(Self::key(mqc)).or_insert(0);
        let delay = BASE_BACKOFF
            .saturating_mul(1u32 << (*n).min(10))
            .min(MAX_BACKOFF);
        *n = n.saturating_add(1);
        delay
    }

    fn reset_backoff(&self, mqc: &MessageQueueCluster) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.remove(&Self::key(mqc));
    }
}

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

    let existing = observe::existing_groups(&ctx.client, &ns, mqc).await?;
    let plan = plan::plan(mqc, &existing);
    let observed = apply::apply_plan(&ctx.client, &ns, &plan, &existing).await?;
    let outcome = status::status(mqc, &plan, &observed, Timestamp::now());
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
