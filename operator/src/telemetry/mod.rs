//! Operator telemetry, kept apart from the reconcile logic: Prometheus metrics of the reconciler
//! and the HTTP endpoint serving them with the liveness and readiness probes. The reconciler
//! only records into [`Metrics`]; the controller only reports its [`State`].

mod http;
mod metrics;
mod state;

pub use http::{answer, serve, Listen, Reply, DEFAULT_HTTP_LISTEN};
pub use metrics::{Metrics, DURATION_BUCKETS};
pub use state::{State, Telemetry};

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
