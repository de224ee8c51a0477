//! The HTTP side port for Kubernetes probes and Prometheus: `/healthz` (the process serves;
//! also while the store recovers), `/readyz` (store open and registered with a name server)
//! and `/metrics`.

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::broker::lag::GroupLag;
use crate::broker::stats::Traffic;
use crate::broker::Broker;

/// The labels RocketMQ 5 puts on every broker series.
const NODE_LABELS: [&str; 3] = ["cluster", "node_type", "node_id"];

/// What the probes look at.
#[derive(Clone)]
pub struct HealthState {
    /// The broker once its store is open, when this process runs one: `None` for a name
    /// server or controller alone (ready once listening), an empty cell while the store
    /// recovers (alive, not ready).
    pub broker: Option<Arc<OnceLock<Arc<Broker>>>>,
    /// Whether series name topics and consumer groups (`[http] resource-labels`).
    pub resource_labels: bool,
}

impl Default for HealthState {
    fn default() -> Self {
        Self {
            broker: None,
            resource_labels: true,
        }
    }
}

impl HealthState {
    /// Why the process must not take traffic, if it must not: the store's flush failed (it
    /// refuses writes until reopened), or the broker is not registered yet.
    fn not_ready(&self) -> Option<String> {
        let Some(b) = self.broker.as_ref()?.get() else {
            return Some("store recovering\n".to_string());
        };
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
        let error = self.broker.as_ref()?.get()?.store().flush_failure()?;
        Some(format!(
            "commit log flush failed, restart to re-verify the store: {error}\n"
        ))
    }

    /// Prometheus exposition, built at scrape time from the broker's counters and the
    /// store's positions (a fresh registry per scrape keeps the broker free of metric state).
    fn metrics(&self) -> String {
        use prometheus::{Encoder, IntCounter, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder};
        let Some(b) = self.broker.as_ref().and_then(|b| b.get()) else {
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
        // Latency histograms: sends, pull reads, CommitLog flushes.
        for h in b.stats().latencies() {
            let _ = registry.register(Box::new(h));
        }
        let _ = registry.register(Box::new(b.store().flush_latency()));
        // Storage, with the names and labels of RocketMQ 5's store metrics (its OpenTelemetry
        // exporter appends the unit: `_bytes`, `_milliseconds`).
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
            "rocketmq_storage_flush_behind_bytes",
            "CommitLog bytes written but not flushed.",
            max - b.store().commit_log_flushed_offset() as i64,
        );
        storage_gauge(
            "rocketmq_storage_dispatch_behind_bytes",
            "CommitLog bytes not yet dispatched to the ConsumeQueues.",
            max - b.store().dispatched_offset() as i64,
        );
        // As RocketMQ: the used space of the filesystem holding the store.
        storage_gauge(
            "rocketmq_storage_size_bytes",
            "Bytes in use on the filesystem holding the store.",
            conveyor_store::disk_space(&b.store().config().root)
                .map_or(0, |s| s.used.min(i64::MAX as u64) as i64),
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
            "rocketmq_storage_message_reserve_time_milliseconds",
            "Age of the oldest message the CommitLog keeps (0 when empty).",
            oldest.map_or(0, |t| (conveyor_protocol::time::now_ms() - t).max(0)),
        );
        // Traffic per topic: in by message type, out by consumer group (labels as RocketMQ 5).
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
                "is_system",
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
                    let group = if label == "consumer_group" {
                        &value
                    } else {
                        ""
                    };
                    let system = crate::broker::lag::is_system(&topic, group);
                    // Without resource labels the names go (an empty label is no label) and
                    // the series of all topics and groups add up into one.
                    let (topic, value) = if self.resource_labels || label != "consumer_group" {
                        (
                            if self.resource_labels {
                                topic
                            } else {
                                String::new()
                            },
                            value,
                        )
                    } else {
                        (String::new(), String::new())
                    };
                    let values = [
                        node[0].as_str(),
                        node[1].as_str(),
                        node[2].as_str(),
                        topic.as_str(),
                        value.as_str(),
                        if system { "true" } else { "false" },
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
        let mut out = Vec::new();
        let _ = TextEncoder::new().encode(&registry.gather(), &mut out);
        let mut text = String::from_utf8(out).unwrap_or_default();
        if self.resource_labels {
            per_group_families(&mut text, b, &node);
        }
        text
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

/// One value of a group's lag at a time (ms).
type LagValue = fn(&GroupLag, i64) -> i64;

/// The families with one series per (consumer group, topic), written as text (see
/// [`crate::exposition`]): for every group with offsets, consumers online or not, the backlog
/// autoscalers read, under RocketMQ 5's names and labels and under rocketmq-exporter's.
fn per_group_families(out: &mut String, b: &Broker, node: &[String; 3]) {
    use crate::exposition::{family, sample};
    let lags = crate::broker::lag::consumer_lag(
        b.offsets(),
        b.store(),
        &b.pop().popped(),
        b.metrics_per_queue(),
    );
    let now = conveyor_protocol::time::now_ms();
    out.reserve(lags.len() * 6 * 160);
    let gauges: [(&str, &str, LagValue); 4] = [
        (
            "rocketmq_consumer_lag_messages",
            "Messages stored and not yet consumed by the group.",
            |l, _| l.messages as i64,
        ),
        (
            "rocketmq_consumer_lag_latency_milliseconds",
            "Age of the oldest message the group has not consumed.",
            |l, now| l.age_ms(now),
        ),
        (
            "rocketmq_consumer_inflight_messages",
            "Messages the group pulled and has not committed yet.",
            |l, _| l.inflight as i64,
        ),
        (
            "rocketmq_consumer_ready_messages",
            "Messages stored and not yet pulled by the group.",
            |l, _| l.messages.saturating_sub(l.inflight) as i64,
        ),
    ];
    for (name, help, value) in gauges {
        family(out, name, help, "gauge");
        for l in &lags {
            let labels = [
                (NODE_LABELS[0], node[0].as_str()),
                (NODE_LABELS[1], node[1].as_str()),
                (NODE_LABELS[2], node[2].as_str()),
                ("consumer_group", l.group.as_str()),
                ("topic", l.topic.as_str()),
                ("is_retry", if l.is_retry { "true" } else { "false" }),
                ("is_system", if l.is_system { "true" } else { "false" }),
            ];
            sample(out, name, &labels, value(l, now));
        }
    }
    if b.metrics_per_queue() {
        let name = "conveyor_consumer_queue_lag_messages";
        family(
            out,
            name,
            "Messages stored and not yet consumed by the group, per queue (metrics-per-queue).",
            "gauge",
        );
        for l in &lags {
            for (queue, left) in &l.queues {
                let queue = queue.to_string();
                let labels = [
                    (NODE_LABELS[0], node[0].as_str()),
                    (NODE_LABELS[1], node[1].as_str()),
                    (NODE_LABELS[2], node[2].as_str()),
                    ("consumer_group", l.group.as_str()),
                    ("topic", l.topic.as_str()),
                    ("queue_id", queue.as_str()),
                ];
                sample(out, name, &labels, left);
            }
        }
    }
    // rocketmq-exporter's names, which existing Grafana boards and alert rules read. Offsets
    // kept by the broker are clustering consumers' (msgModel 1).
    let online: Vec<String> = lags
        .iter()
        .map(|l| b.clients().consumer_count(&l.group).to_string())
        .collect();
    for (retry, name, help) in [
        (
            false,
            "rocketmq_group_diff",
            "Messages not yet consumed by the group (rocketmq-exporter).",
        ),
        (
            true,
            "rocketmq_group_retrydiff",
            "Messages of the group's retry topic not yet consumed (rocketmq-exporter).",
        ),
    ] {
        family(out, name, help, "gauge");
        for (l, online) in lags
            .iter()
            .zip(&online)
            .filter(|(l, _)| l.is_retry == retry)
        {
            let labels = [
                ("group", l.group.as_str()),
                ("topic", l.topic.as_str()),
                ("countOfOnlineConsumers", online.as_str()),
                ("msgModel", "1"),
            ];
            sample(out, name, &labels, l.messages as i64);
        }
    }
    // rocketmq-exporter's rates, per second over the last minute.
    let rates = b.stats().rates(std::time::Instant::now());
    let addr = &b.replication().config().broker_addr;
    let broker_ip = addr.rsplit_once(':').map_or(addr.as_str(), |(ip, _)| ip);
    for (name, help, value) in [
        (
            "rocketmq_broker_tps",
            "Messages stored per second over the last minute (rocketmq-exporter).",
            rates.messages_in,
        ),
        (
            "rocketmq_broker_qps",
            "Messages delivered per second over the last minute (rocketmq-exporter).",
            rates.messages_out,
        ),
    ] {
        family(out, name, help, "gauge");
        let labels = [
            ("cluster", node[0].as_str()),
            ("brokerIP", broker_ip),
            ("broker", node[2].as_str()),
        ];
        sample(out, name, &labels, value);
    }
    let name = "rocketmq_producer_tps";
    family(
        out,
        name,
        "Messages stored per second over the last minute, by topic (rocketmq-exporter).",
        "gauge",
    );
    for (topic, tps) in &rates.by_topic {
        let labels = [
            ("cluster", node[0].as_str()),
            ("broker", node[2].as_str()),
            ("topic", topic.as_str()),
        ];
        sample(out, name, &labels, tps);
    }
    let name = "rocketmq_consumer_tps";
    family(
        out,
        name,
        "Messages delivered per second over the last minute, by topic and group (rocketmq-exporter).",
        "gauge",
    );
    for (topic, group, tps) in &rates.by_group {
        let labels = [
            ("cluster", node[0].as_str()),
            ("broker", node[2].as_str()),
            ("topic", topic.as_str()),
            ("group", group.as_str()),
        ];
        sample(out, name, &labels, tps);
    }
    let name = "rocketmq_group_get_latency_by_storetime";
    family(
        out,
        name,
        "Age in ms of the oldest message the group has not consumed (rocketmq-exporter).",
        "gauge",
    );
    for l in &lags {
        let labels = [
            ("cluster", node[0].as_str()),
            ("broker", node[2].as_str()),
            ("topic", l.topic.as_str()),
            ("group", l.group.as_str()),
        ];
        sample(out, name, &labels, l.age_ms(now));
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
