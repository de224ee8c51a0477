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

use crate::broker::stats::Traffic;
use crate::broker::Broker;

/// The labels RocketMQ 5 puts on every broker series.
const NODE_LABELS: [&str; 3] = ["cluster", "node_type", "node_id"];

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
        // RocketMQ 5's names and labels, so its dashboards, alerts and autoscaler queries
        // carry over: `node_id` is the broker group, as RocketMQ's `brokerName`.
        let node = [
            repl.config().cluster_name.clone(),
            "broker".to_string(),
            repl.broker_name().to_string(),
        ];
        let node_gauge = |name: &str, help: &str, v: i64| {
            if let Ok(g) = IntGaugeVec::new(Opts::new(name, help), &NODE_LABELS) {
                g.with_label_values(&[&node[0], &node[1], &node[2]]).set(v);
                let _ = registry.register(Box::new(g));
            }
        };
        node_gauge(
            "rocketmq_storage_flush_behind_bytes",
            "CommitLog bytes written but not flushed.",
            max - b.store().commit_log_flushed_offset() as i64,
        );
        node_gauge(
            "rocketmq_storage_dispatch_behind_bytes",
            "CommitLog bytes not yet dispatched to the ConsumeQueues.",
            max - b.store().dispatched_offset() as i64,
        );
        // Latency histograms: sends, pull reads, CommitLog flushes.
        for h in b.stats().latencies() {
            let _ = registry.register(Box::new(h));
        }
        let _ = registry.register(Box::new(b.store().flush_latency()));
        // Storage, as RocketMQ 5's store metrics name it.
        let storage = [
            node[0].as_str(),
            node[1].as_str(),
            node[2].as_str(),
            "local",
            "disk",
        ];
        let storage_gauge = |name: &str, help: &str, v: i64| {
            let labels = [
                NODE_LABELS[0],
                NODE_LABELS[1],
                NODE_LABELS[2],
                "storage_type",
                "storage_medium",
            ];
            if let Ok(g) = IntGaugeVec::new(Opts::new(name, help), &labels) {
                g.with_label_values(&storage).set(v);
                let _ = registry.register(Box::new(g));
            }
        };
        storage_gauge(
            "rocketmq_storage_size",
            "Bytes of messages the CommitLog keeps (its end minus its start).",
            max - b.store().commit_log_min_offset() as i64,
        );
        let oldest = b
            .store()
            .message_at(b.store().commit_log_min_offset())
            .and_then(|r| {
                conveyor_protocol::message::RecordView::parse(&r)
                    .ok()
                    .map(|v| v.store_timestamp())
            });
        storage_gauge(
            "rocketmq_storage_message_reserve_time",
            "Age in ms of the oldest message the CommitLog keeps (0 when empty).",
            oldest.map_or(0, |t| (conveyor_protocol::time::now_ms() - t).max(0)),
        );
        // Traffic per topic: in by message type, out by consumer group.
        let traffic = |kind: &str,
                       help: &str,
                       label: &str,
                       rows: Vec<(String, String, Traffic)>| {
            let labels = [
                NODE_LABELS[0],
                NODE_LABELS[1],
                NODE_LABELS[2],
                "topic",
                label,
            ];
            let counter = |name: String, what: &str| {
                prometheus::IntCounterVec::new(Opts::new(name, format!("{what} {help}")), &labels)
            };
            if let (Ok(messages), Ok(bytes)) = (
                counter(format!("rocketmq_messages_{kind}_total"), "Messages"),
                counter(
                    format!("rocketmq_throughput_{kind}_total"),
                    "Bytes of records",
                ),
            ) {
                for (topic, value, t) in rows {
                    let values = [
                        node[0].as_str(),
                        node[1].as_str(),
                        node[2].as_str(),
                        topic.as_str(),
                        value.as_str(),
                    ];
                    messages.with_label_values(&values).inc_by(t.messages);
                    bytes.with_label_values(&values).inc_by(t.bytes);
                }
                let _ = registry.register(Box::new(messages));
                let _ = registry.register(Box::new(bytes));
            }
        };
        traffic(
            "in",
            "stored, by topic and message type.",
            "message_type",
            b.stats().topics_in(),
        );
        traffic(
            "out",
            "delivered, by topic and consumer group.",
            "consumer_group",
            b.stats().topics_out(),
        );
        let lags = crate::broker::lag::consumer_lag(b.offsets(), b.store());
        let now = conveyor_protocol::time::now_ms();
        // Backlog per (group, topic) for every group with offsets, consumers online or not:
        // what autoscalers read.
        let lag_labels = [
            NODE_LABELS[0],
            NODE_LABELS[1],
            NODE_LABELS[2],
            "consumer_group",
            "topic",
            "is_retry",
            "is_system",
        ];
        let lag_gauge =
            |name: &str, help: &str| IntGaugeVec::new(Opts::new(name, help), &lag_labels);
        if let (Ok(messages), Ok(latency), Ok(inflight), Ok(ready)) = (
            lag_gauge(
                "rocketmq_consumer_lag_messages",
                "Messages stored and not yet consumed by the group.",
            ),
            lag_gauge(
                "rocketmq_consumer_lag_latency_milliseconds",
                "Age of the oldest message the group has not consumed.",
            ),
            lag_gauge(
                "rocketmq_consumer_inflight_messages",
                "Messages the group pulled and has not committed yet.",
            ),
            lag_gauge(
                "rocketmq_consumer_ready_messages",
                "Messages stored and not yet pulled by the group.",
            ),
        ) {
            for l in &lags {
                let (retry, system) = (l.is_retry.to_string(), l.is_system.to_string());
                let values = [
                    node[0].as_str(),
                    node[1].as_str(),
                    node[2].as_str(),
                    l.group.as_str(),
                    l.topic.as_str(),
                    retry.as_str(),
                    system.as_str(),
                ];
                messages.with_label_values(&values).set(l.messages as i64);
                latency.with_label_values(&values).set(l.age_ms(now));
                inflight.with_label_values(&values).set(l.inflight as i64);
                ready
                    .with_label_values(&values)
                    .set(l.messages.saturating_sub(l.inflight) as i64);
            }
            for g in [messages, latency, inflight, ready] {
                let _ = registry.register(Box::new(g));
            }
        }
        // The same backlog under rocketmq-exporter's names, which existing Grafana boards
        // and alert rules read. Offsets kept by the broker are clustering consumers' (msgModel
        // 1); broadcasting consumers keep theirs themselves.
        let exporter = |name: &str, help: &str| {
            IntGaugeVec::new(
                Opts::new(name, help),
                &["group", "topic", "countOfOnlineConsumers", "msgModel"],
            )
        };
        if let (Ok(diff), Ok(retry_diff), Ok(latency)) = (
            exporter(
                "rocketmq_group_diff",
                "Messages not yet consumed by the group (rocketmq-exporter).",
            ),
            exporter(
                "rocketmq_group_retrydiff",
                "Messages of the group's retry topic not yet consumed (rocketmq-exporter).",
            ),
            IntGaugeVec::new(
                Opts::new(
                    "rocketmq_group_get_latency_by_storetime",
                    "Age in ms of the oldest message the group has not consumed (rocketmq-exporter).",
                ),
                &["cluster", "broker", "topic", "group"],
            ),
        ) {
            for l in &lags {
                let online = b.clients().consumer_count(&l.group).to_string();
                let labels = [l.group.as_str(), l.topic.as_str(), online.as_str(), "1"];
                let gauge = if l.is_retry { &retry_diff } else { &diff };
                gauge.with_label_values(&labels).set(l.messages as i64);
                latency
                    .with_label_values(&[
                        node[0].as_str(),
                        node[2].as_str(),
                        l.topic.as_str(),
                        l.group.as_str(),
                    ])
                    .set(l.age_ms(now));
            }
            let _ = registry.register(Box::new(diff));
            let _ = registry.register(Box::new(retry_diff));
            let _ = registry.register(Box::new(latency));
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
