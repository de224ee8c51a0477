//! Operator telemetry, kept apart from the reconcile logic: Prometheus metrics of the reconciler
//! and the HTTP endpoint serving them with the liveness and readiness probes. The reconciler
//! only records into [`Metrics`]; the controller only reports its [`State`].

mod http;
mod metrics;

use std::sync::{Arc, Mutex};

pub use http::{answer, serve, Listen, Reply, DEFAULT_HTTP_LISTEN};
pub use metrics::{Metrics, DURATION_BUCKETS};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_standby_and_running_are_ready() {
        let all = [
            State::Starting,
            State::Standby,
            State::LeaseUnreachable,
            State::Syncing,
            State::Running,
        ];
        let ready: Vec<_> = all.iter().filter(|s| s.ready()).collect();
        assert_eq!(ready, [&State::Standby, &State::Running]);
    }

    #[test]
    fn the_leader_gauge_follows_the_state() {
        let t = Telemetry::new();
        assert_eq!(t.state(), State::Starting);
        t.set_state(State::Syncing);
        assert!(t.metrics.render().contains("conveyor_operator_leader 1"));
        t.set_state(State::Standby);
        assert!(t.metrics.render().contains("conveyor_operator_leader 0"));
    }
}
