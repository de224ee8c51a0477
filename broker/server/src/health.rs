//! The HTTP side port for Kubernetes probes and Prometheus: `/healthz` (the process serves),
//! `/readyz` (store open and registered with a name server) and `/metrics`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
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
    fn ready(&self) -> bool {
        self.broker.as_ref().is_none_or(|b| b.is_registered())
    }

    fn metrics(&self) -> String {
        let Some(b) = &self.broker else {
            return String::new();
        };
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, value: String| {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        };
        let s = &b.stats;
        metric(
            "conveyor_messages_in_total",
            "counter",
            "Messages stored.",
            s.messages_in.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "conveyor_bytes_in_total",
            "counter",
            "Bytes of records stored.",
            s.bytes_in.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "conveyor_messages_out_total",
            "counter",
            "Messages delivered to consumers.",
            s.messages_out.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "conveyor_bytes_out_total",
            "counter",
            "Bytes of records delivered.",
            s.bytes_out.load(Ordering::Relaxed).to_string(),
        );
        metric(
            "conveyor_commitlog_max_offset",
            "gauge",
            "End of the commit log.",
            b.store.commit_log_max_offset().to_string(),
        );
        metric(
            "conveyor_commitlog_min_offset",
            "gauge",
            "Start of the commit log.",
            b.store.commit_log_min_offset().to_string(),
        );
        metric(
            "conveyor_commitlog_unflushed_bytes",
            "gauge",
            "Bytes written but not yet durable.",
            (b.store.commit_log_max_offset() - b.store.commit_log_flushed_offset()).to_string(),
        );
        let disk = conveyor_store::disk_usage(&b.store.config().root).unwrap_or(0.0);
        metric(
            "conveyor_disk_used_ratio",
            "gauge",
            "Used fraction of the store's filesystem.",
            format!("{disk:.4}"),
        );
        metric(
            "conveyor_registered",
            "gauge",
            "1 when registered with a name server.",
            u8::from(b.is_registered()).to_string(),
        );
        // Backlog per (group, topic, queue) for autoscaling.
        out.push_str("# HELP conveyor_consumer_lag_messages Messages not yet consumed by a group.\n# TYPE conveyor_consumer_lag_messages gauge\n");
        for g in b.groups.all() {
            for (topic, queue, offset) in b.offsets.offsets_of_group(&g.group_name) {
                let lag = (b.store.max_offset(&topic, queue) - offset).max(0);
                out.push_str(&format!(
                    "conveyor_consumer_lag_messages{{group=\"{}\",topic=\"{topic}\",queue=\"{queue}\"}} {lag}\n",
                    g.group_name
                ));
            }
        }
        out
    }

    fn answer(&self, path: &str) -> (StatusCode, String) {
        match path {
            "/healthz" => (StatusCode::OK, "ok\n".into()),
            "/readyz" if self.ready() => (StatusCode::OK, "ready\n".into()),
            "/readyz" => (
                StatusCode::SERVICE_UNAVAILABLE,
                "not registered with a name server yet\n".into(),
            ),
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
