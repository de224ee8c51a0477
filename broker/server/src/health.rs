//! The HTTP side port for Kubernetes probes and Prometheus: `/healthz` (the process serves),
//! `/readyz` (store open and registered with a name server) and `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;

/// What the probes look at.
#[derive(Clone, Default)]
pub struct HealthState {
    /// The broker, when this process runs one (a name server alone is ready once listening).
    pub broker: Option<Arc<Broker>>,
}

impl HealthState {
    /// Why the process must not take traffic, if it must not: the store's flush failed (it
    /// refuses writes until reopened), or the broker is not registered yet.
    fn not_ready(&self) -> Option<String> {
        let b = self.broker.as_ref()?;
        if let Some(error) = b.store().flush_failure() {
            return Some(format!(
                "store refuses writes: commit log flush failed: {error}\n"
            ));
        }
        (!b.is_registered()).then(|| "not registered with a name server yet\n".to_string())
    }

    /// Why the process should be restarted, if it should: a failed flush is cleared only by
    /// reopening the store (recovery re-verifies the log), which a restart does.
    fn not_live(&self) -> Option<String> {
        let error = self.broker.as_ref()?.store().flush_failure()?;
        Some(format!(
            "commit log flush failed, restart to re-verify the store: {error}\n"
        ))
    }

    /// Prometheus exposition, built at scrape time from the broker's counters and the
    /// store's positions (a fresh registry per scrape keeps the broker free of metric state).
    fn metrics(&self) -> String {
        use prometheus::{Encoder, IntCounter, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
        let Some(b) = &self.broker else {
            return String::new();
        };
        let registry = Registry::new();
        let counter = |name: &str, help: &str, v: u64| {
            if let Ok(c) = IntCounter::new(name, help) {
                c.inc_by(v);
                let _ = registry.register(Box::new(c));
            }
        };
        let s = b.stats().snapshot();
        counter(
            "conveyor_messages_in_total",
            "Messages stored.",
            s.messages_in,
        );
        counter(
            "conveyor_bytes_in_total",
            "Bytes of records stored.",
            s.bytes_in,
        );
        counter(
            "conveyor_messages_out_total",
            "Messages delivered to consumers.",
            s.messages_out,
        );
        counter(
            "conveyor_bytes_out_total",
            "Bytes of records delivered.",
            s.bytes_out,
        );
        let gauge = |name: &str, help: &str, v: i64| {
            if let Ok(g) = IntGauge::new(name, help) {
                g.set(v);
                let _ = registry.register(Box::new(g));
            }
        };
        let max = b.store().commit_log_max_offset() as i64;
        gauge(
            "conveyor_commitlog_max_offset",
            "End of the commit log.",
            max,
        );
        gauge(
            "conveyor_commitlog_min_offset",
            "Start of the commit log.",
            b.store().commit_log_min_offset() as i64,
        );
        gauge(
            "conveyor_commitlog_unflushed_bytes",
            "Bytes written but not yet durable.",
            max - b.store().commit_log_flushed_offset() as i64,
        );
        gauge(
            "conveyor_registered",
            "1 when registered with a name server.",
            i64::from(b.is_registered()),
        );
        if let Ok(g) = prometheus::Gauge::new(
            "conveyor_disk_used_ratio",
            "Used fraction of the store's filesystem.",
        ) {
            g.set(conveyor_store::disk_usage(&b.store().config().root).unwrap_or(0.0));
            let _ = registry.register(Box::new(g));
        }
        // Replication: the role, the term, the high watermark, and each slave's progress.
        let repl = b.replication();
        gauge(
            "conveyor_replication_role",
            "0 fenced, 1 master, 2 slave.",
            match repl.role_state() {
                crate::ha::RoleState::Fenced => 0,
                crate::ha::RoleState::Master { .. } => 1,
                crate::ha::RoleState::Slave { .. } => 2,
            },
        );
        gauge(
            "conveyor_replication_epoch",
            "The master epoch this broker is in.",
            i64::from(repl.epoch()),
        );
        gauge(
            "conveyor_replication_confirm_offset",
            "High watermark: records below it are held by the in-sync replicas.",
            b.store().confirm_offset().min(i64::MAX as u64) as i64,
        );
        if let Ok(lag) = IntGaugeVec::new(
            Opts::new(
                "conveyor_replication_slave_lag_bytes",
                "CommitLog bytes the master holds that a slave has not acknowledged.",
            ),
            &["slave"],
        ) {
            for slave in repl.slaves() {
                lag.with_label_values(&[slave.broker_id.to_string().as_str()])
                    .set(max.saturating_sub(slave.acked as i64));
            }
            let _ = registry.register(Box::new(lag));
        }
        // Backlog per (group, topic, queue): what the operator's autoscaler reads.
        if let Ok(lag) = IntGaugeVec::new(
            Opts::new(
                "conveyor_consumer_lag_messages",
                "Messages not yet consumed by a group.",
            ),
            &["group", "topic", "queue"],
        ) {
            for group in b.offsets().groups() {
                for (topic, queue, offset) in b.offsets().offsets_of_group(&group) {
                    let backlog = (b.store().max_offset(&topic, queue) - offset).max(0);
                    lag.with_label_values(&[
                        group.as_str(),
                        topic.as_str(),
                        queue.to_string().as_str(),
                    ])
                    .set(backlog);
                }
            }
            let _ = registry.register(Box::new(lag));
        }
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    fn answer(&self, path: &str) -> (StatusCode, String) {
        match path {
            "/healthz" => match self.not_live() {
                None => (StatusCode::OK, "ok\n".into()),
                Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
            },
            "/readyz" => match self.not_ready() {
                None => (StatusCode::OK, "ready\n".into()),
                Some(why) => (StatusCode::SERVICE_UNAVAILABLE, why),
            },
            "/metrics" => (StatusCode::OK, self.metrics()),
            _ => (StatusCode::NOT_FOUND, "not found\n".into()),
        }
    }
}

/// Serves the probe endpoints until `shutdown`.
pub async fn serve(listener: TcpListener, state: HealthState, shutdown: CancellationToken) {
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((s, _)) => s,
                Err(_) => continue,
            },
            _ = shutdown.cancelled() => return,
        };
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let (status, body) = state.answer(req.uri().path());
                async move {
                    let mut resp = Response::new(Full::new(Bytes::from(body)));
                    *resp.status_mut() = status;
                    Ok::<_, Infallible>(resp)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
