//! The operator's Prometheus metrics: how often reconciles run, how long they take and why they
//! fail. One registry per [`Metrics`] value (no process-global registry), so tests and several
//! controllers in one process never share counters.

use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

/// Upper bounds (seconds) of the reconcile-duration buckets: a reconcile is a handful of API
/// calls, so milliseconds to seconds, with a tail for a slow or restarting API server.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Counters and timings of the reconciler, rendered as Prometheus text.
pub struct Metrics {
    registry: Registry,
    reconciliations: IntCounter,
    errors: IntCounterVec,
    duration: Histogram,
    leader: IntGauge,
}

impl Metrics {
    /// A fresh set of metrics in its own registry, all zero.
    pub fn new() -> Self {
        let reconciliations = IntCounter::new(
            "conveyor_operator_reconciliations_total",
            "Reconciles run, whatever their outcome.",
        )
        .expect("valid metric name");
        let errors = IntCounterVec::new(
            Opts::new(
                "conveyor_operator_reconcile_errors_total",
                "Reconciles that failed and are retried with backoff, by error kind and reason.",
            ),
            &["kind", "reason"],
        )
        .expect("valid metric name");
        let duration = Histogram::with_opts(
            HistogramOpts::new(
                "conveyor_operator_reconcile_duration_seconds",
                "Wall-clock time of one reconcile, API calls included.",
            )
            .buckets(DURATION_BUCKETS.to_vec()),
        )
        .expect("valid metric name and buckets");
        let leader = IntGauge::new(
            "conveyor_operator_leader",
            "1 while this replica runs the controller (holds the lease, or runs without election).",
        )
        .expect("valid metric name");
        let registry = Registry::new();
        for c in [
            Box::new(reconciliations.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(errors.clone()),
            Box::new(duration.clone()),
            Box::new(leader.clone()),
        ] {
            registry
                .register(c)
                .expect("metric names are unique in a fresh registry");
        }
        Self {
            registry,
            reconciliations,
            errors,
            duration,
            leader,
        }
    }

    /// Records one reconcile that took `elapsed`; `error` is its `(kind, reason)` when it failed.
    pub fn record_reconcile(&self, elapsed: Duration, error: Option<(&str, &str)>) {
        self.reconciliations.inc();
        self.duration.observe(elapsed.as_secs_f64());
        if let Some((kind, reason)) = error {
            self.errors.with_label_values(&[kind, reason]).inc();
        }
    }

    /// Sets the `conveyor_operator_leader` gauge.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding into a Vec only fails on invalid metric families, which `new` never builds.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_timings_and_errors_render_as_prometheus_text() {
        let m = Metrics::new();
        m.record_reconcile(Duration::from_millis(20), None);
        m.record_reconcile(Duration::from_millis(3), Some(("api", "InternalError")));
        m.record_reconcile(Duration::from_secs(2), Some(("api", "InternalError")));
        m.set_leader(true);
        let text = m.render();
        for line in [
            "# TYPE conveyor_operator_reconciliations_total counter",
            "conveyor_operator_reconciliations_total 3",
            "conveyor_operator_reconcile_errors_total{kind=\"api\",reason=\"InternalError\"} 2",
            "# TYPE conveyor_operator_reconcile_duration_seconds histogram",
            "conveyor_operator_reconcile_duration_seconds_bucket{le=\"0.005\"} 1",
            "conveyor_operator_reconcile_duration_seconds_bucket{le=\"0.025\"} 2",
            "conveyor_operator_reconcile_duration_seconds_bucket{le=\"+Inf\"} 3",
            "conveyor_operator_reconcile_duration_seconds_count 3",
            "conveyor_operator_leader 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn two_metric_sets_do_not_share_counters() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.record_reconcile(Duration::ZERO, None);
        assert!(b
            .render()
            .contains("conveyor_operator_reconciliations_total 0"));
    }
}
