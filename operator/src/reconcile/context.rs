//! What every reconcile step shares: the controller's [`Context`] (client, event recorder,
//! metrics, error backoff), the reconciler's [`Error`] and its timing constants. A leaf of the
//! reconcile modules, so that the steps and the top-level flow can all use it without an
//! import circle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};

use crate::builders::{self, OperatorEnv};
use crate::crd::MessageQueueCluster;
use crate::failover::{Failover, FailoverError};
use crate::telemetry::Metrics;

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
    /// The cluster's replication controller could not load its state.
    #[error(transparent)]
    Failover(#[from] FailoverError),
    /// A certificate could not be made (`generateCertificates`).
    #[error("certificate: {0}")]
    Certificate(String),
}

impl Error {
    /// `(kind, reason)` labels of `conveyor_operator_reconcile_errors_total`: kind `api` with the
    /// API server's status reason (`Conflict`, `Forbidden`, `InternalError`, ...), kind `client`
    /// with the client-side failure (`HyperError`, `Service`, `SerdeError`, `Other`), kind
    /// `object` with `MissingName`, or kind `failover` with `StateUnavailable` (a cluster's
    /// controller could not load its state). Both come from small fixed sets.
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
            Error::Failover(_) => ("failover", "StateUnavailable".into()),
            Error::Certificate(_) => ("object", "Certificate".into()),
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
    /// What rendering needs from the operator (the controller's address).
    pub env: OperatorEnv,
    /// The replication controllers of clusters under failover, when the operator runs them.
    pub failover: Option<Arc<Failover>>,
    /// Asks brokers over the remoting protocol (drains).
    pub brokers: super::brokers::Brokers,
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
            env: OperatorEnv::default(),
            failover: None,
            brokers: Default::default(),
        }
    }

    /// Runs failover with `failover`, whose controller brokers reach at `controller_addr`.
    pub fn with_failover(mut self, failover: Arc<Failover>, controller_addr: String) -> Self {
        self.env.controller_addr = Some(controller_addr);
        self.failover = Some(failover);
        self
    }

    /// Records into `metrics` instead of the context's own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub(super) fn key(mqc: &MessageQueueCluster) -> String {
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

    pub(super) fn reset_backoff(&self, mqc: &MessageQueueCluster) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.remove(&Self::key(mqc));
    }
}
