//! What the probes report: the controller's [`State`] and the shared [`Telemetry`] handle
//! (state + metrics). A leaf that the HTTP endpoint reads and the controller writes.

use std::sync::{Arc, Mutex};

use super::metrics::Metrics;

/// Where this replica stands, as `/readyz` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// No answer about the leader Lease yet: the process just started, or it just lost
    /// leadership and asks again. Not ready.
    Starting,
    /// Another replica holds a valid Lease; this one waits to take over. Ready: a standby is
    /// healthy, and a rolling update must be able to proceed past it.
    Standby,
    /// The last attempt to read or take the Lease failed (API server unreachable, RBAC). Not
    /// ready.
    LeaseUnreachable,
    /// This replica leads (or runs without leader election) and its controller has started, but
    /// the initial list of MessageQueueClusters has not completed. Not ready.
    Syncing,
    /// The controller runs: its MessageQueueCluster watch has completed the initial list, so
    /// every cluster is queued for reconciliation. Ready.
    Running,
}

impl State {
    /// Whether `/readyz` answers 200.
    pub fn ready(self) -> bool {
        matches!(self, State::Standby | State::Running)
    }

    /// Whether this replica runs the controller.
    pub fn leading(self) -> bool {
        matches!(self, State::Syncing | State::Running)
    }

    /// The `/readyz` body.
    pub fn describe(self) -> &'static str {
        match self {
            State::Starting => "starting: leader election state not known yet",
            State::Standby => "ready: standby, another replica holds the leader lease",
            State::LeaseUnreachable => "not ready: cannot read or take the leader lease",
            State::Syncing => "not ready: leading, waiting for the initial list of clusters",
            State::Running => "ready: leading, controller running",
        }
    }
}

/// Shared telemetry handle: cheap to clone, one per process.
#[derive(Clone)]
pub struct Telemetry {
    /// Reconciler metrics (handed to the reconcile context).
    pub metrics: Arc<Metrics>,
    state: Arc<Mutex<State>>,
}

impl Telemetry {
    /// Fresh metrics, state [`State::Starting`].
    pub fn new() -> Self {
        Self {
            metrics: Arc::new(Metrics::new()),
            state: Arc::new(Mutex::new(State::Starting)),
        }
    }

    /// The current state.
    pub fn state(&self) -> State {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a new state (and the leader gauge that follows from it).
    pub fn set_state(&self, state: State) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if *s != state {
            tracing::debug!(from = ?*s, to = ?state, "operator state");
        }
        *s = state;
        self.metrics.set_leader(state.leading());
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Self::new()
    }
}
