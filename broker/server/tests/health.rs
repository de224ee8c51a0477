//! The HTTP probe port: /healthz, /readyz (after registration), /metrics.

mod common;

use std::time::Duration;

use common::{config, http_get, metric, series, wait_max_offset, wait_until, TestServer, DEADLINE};
use conveyor::app::{self, Role};
use conveyor_client::consumer::PullOptions;
use conveyor_client::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_and_metrics() {
    let mut server = TestServer::start().await;
    let http = server.http();

    let (status, body) = http_get(http, "/healthz").await.expect("healthz");
    assert_eq!(status, 200, "{body}");

    // TestServer::start waited for registration; /readyz agrees (polled, not assumed).
    wait_until("/readyz answers 200", DEADLINE, || async move {
        matches!(http_get(http, "/readyz").await, Ok((200, _)))
    })
    .await;

    let (status, body) = http_get(http, "/metrics").await.expect("metrics");
    assert_eq!(status, 200);
    assert!(body.contains("conveyor_messages_in_total"), "{body}");
    assert!(body.contains("# TYPE conveyor_messages_in_total counter"));
    assert_eq!(metric(&body, "conveyor_registered"), Some(1.0), "{body}");
    let before = metric(&body, "conveyor_messages_in_total").expect("value");

    // Sending moves the counter; a committed group shows up as lag.
    let q = server.create_topic("Metered", 1).await.remove(0);
    let producer = server.producer("PG_metrics");
    for i in 0..3 {
        producer
            .send(&Message::new("Metered", format!("m{i}")))
            .await
            .expect("send");
    }
    let consumer = server.consumer("CG_metrics");
    wait_max_offset(&consumer, &q, 3).await;
    // A pull (which registers the group) committing offset 1 along the way.
    consumer
        .pull_with(
            &q,
            1,
            PullOptions {
                max_msgs: 1,
                commit_offset: Some(1),
                ..PullOptions::default()
            },
        )
        .await
        .expect("pull");
    let (_, body) = http_get(http, "/metrics").await.expect("metrics");
    let after = metric(&body, "conveyor_messages_in_total").expect("value");
    assert!(after >= before + 3.0, "{before} -> {after}");
    let lag_labels = [
        "consumer_group=\"CG_metrics\"",
        "topic=\"Metered\"",
        "node_type=\"broker\"",
        "is_retry=\"false\"",
        "is_system=\"false\"",
    ];
    assert_eq!(
        series(&body, "rocketmq_consumer_lag_messages", &lag_labels),
        [2.0],
        "{body}"
    );
    let age = series(
        &body,
        "rocketmq_consumer_lag_latency_milliseconds",
        &lag_labels,
    );
    assert!(age.len() == 1 && age[0] >= 0.0, "{body}");
    // The pull from offset 1 handed out one message the group has not committed (its commit
    // says 1): in flight 1, ready 1 (of the lag of 2).
    for name in [
        "rocketmq_consumer_inflight_messages",
        "rocketmq_consumer_ready_messages",
    ] {
        assert_eq!(series(&body, name, &lag_labels), [1.0], "{name}: {body}");
    }
    // Traffic per topic: the three sends in, as plain messages; the pull out, to its group.
    let normal = [
        "topic=\"Metered\"",
        "message_type=\"normal\"",
        "is_system=\"false\"",
    ];
    assert_eq!(
        series(&body, "rocketmq_messages_in_total", &normal),
        [3.0],
        "{body}"
    );
    let bytes = series(&body, "rocketmq_throughput_in_total", &normal);
    assert!(bytes.len() == 1 && bytes[0] > 0.0, "{body}");
    assert_eq!(
        series(
            &body,
            "rocketmq_messages_out_total",
            &["topic=\"Metered\"", "consumer_group=\"CG_metrics\""]
        ),
        [1.0],
        "{body}"
    );

    // Per-queue detail is off by default.
    assert!(
        !body.contains("conveyor_consumer_queue_lag_messages"),
        "{body}"
    );
    // Latency histograms: every send and pull read counted; the flusher's too.
    assert!(
        metric(&body, "conveyor_send_latency_seconds_count") >= Some(3.0),
        "{body}"
    );
    assert!(
        metric(&body, "conveyor_pull_read_latency_seconds_count") >= Some(1.0),
        "{body}"
    );
    assert!(
        body.contains("conveyor_store_flush_latency_seconds_bucket{le=\"0.001\"}"),
        "{body}"
    );
    // Storage in RocketMQ 5's names and labels: the store's filesystem is in use, the oldest
    // message is not from the future; flush and dispatch carry the storage labels too.
    let storage = [
        "node_type=\"broker\"",
        "storage_type=\"local\"",
        "storage_medium=\"disk\"",
    ];
    let size = series(&body, "rocketmq_storage_size_bytes", &storage);
    assert!(size.len() == 1 && size[0] > 0.0, "{body}");
    let reserve = series(
        &body,
        "rocketmq_storage_message_reserve_time_milliseconds",
        &storage,
    );
    for name in [
        "rocketmq_storage_flush_behind_bytes",
        "rocketmq_storage_dispatch_behind_bytes",
    ] {
        assert_eq!(series(&body, name, &storage).len(), 1, "{name}: {body}");
    }
    assert!(reserve.len() == 1 && reserve[0] >= 0.0, "{body}");

    // Every series the chart's Grafana dashboard queries is one this broker exports (a renamed
    // metric would leave a panel empty). Only a master with slaves has the slave-lag series.
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/conveyor-operator/files/conveyor-dashboard.json"),
    )
    .expect("dashboard");
    let mut queried: Vec<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("rocketmq_") || w.starts_with("conveyor_"))
        .collect();
    queried.sort_unstable();
    queried.dedup();
    assert!(queried.len() >= 8, "{queried:?}");
    for name in queried {
        if name == "conveyor_replication_slave_lag_bytes" {
            continue;
        }
        assert!(
            body.contains(&format!("# TYPE {name} ")),
            "the dashboard queries {name}, which /metrics does not export"
        );
    }

    let (status, _) = http_get(http, "/nope").await.expect("404");
    assert_eq!(status, 404);

    server.stop().await;
    // After a stop the probe port is closed.
    assert!(http_get(http, "/healthz").await.is_err());
}

/// Not ready until registered: a broker whose name server does not answer yet serves
/// /healthz but answers /readyz with 503 (and `conveyor_registered 0`), for as long as
/// registrations fail; once the name server comes up, the next registration makes it ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_until_registered() {
    // A port nobody listens on (yet): registrations are refused.
    let namesrv = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(tmp.path());
    cfg.role = Role::Broker;
    cfg.broker.namesrv_addrs = vec![namesrv.to_string()];
    cfg.broker.register_interval_ms = 1_000; // the minimum: retries soon after the name server is up
    let broker = app::start(cfg).await.expect("start broker");
    let http = broker.http_addr.expect("http");

    let (status, body) = http_get(http, "/healthz").await.expect("healthz");
    assert_eq!(status, 200, "{body}");
    // Several registration rounds fail meanwhile: /readyz stays 503 throughout.
    let until = tokio::time::Instant::now() + Duration::from_millis(2_500);
    let mut answers = 0;
    while tokio::time::Instant::now() < until {
        let (status, body) = http_get(http, "/readyz").await.expect("readyz");
        assert_eq!(
            status, 503,
            "/readyz answered {status} ({body:?}) with no name server reachable"
        );
        assert!(body.contains("not registered"), "{body}");
        answers += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answers >= 5, "only {answers} /readyz answers");
    let (_, metrics) = http_get(http, "/metrics").await.expect("metrics");
    assert!(
        metrics.lines().any(|l| l == "conveyor_registered 0"),
        "{metrics}"
    );

    // The name server comes up on that address: the broker registers and becomes ready.
    let mut ns_cfg = config(tmp.path());
    ns_cfg.role = Role::NameServer;
    ns_cfg.namesrv_listen = namesrv;
    ns_cfg.http_listen = None;
    let ns = app::start(ns_cfg).await.expect("start name server");
    wait_until(
        "/readyz answers 200 once registered",
        DEADLINE,
        || async move { matches!(http_get(http, "/readyz").await, Ok((200, _))) },
    )
    .await;

    tokio::time::timeout(DEADLINE, broker.stop())
        .await
        .expect("broker stops");
    tokio::time::timeout(DEADLINE, ns.stop())
        .await
        .expect("name server stops");
}

/// `rocketmq_consumer_lag_messages` summed over a group's topics equals the backlog the admin
/// API reports (GET_CONSUME_STATS, mqadmin's consumerProgress), for a group with no consumer
/// online (an autoscaler must see the backlog of a group scaled to zero), and the retry topic
/// is its own series.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lag_metric_equals_the_admin_backlog_with_no_consumer_online() {
    let mut server = TestServer::start_with(|c| c.broker.metrics_per_queue = true).await;
    let http = server.http();
    let queues = server.create_topic("Backlogged", 4).await;
    let producer = server.producer("PG_backlog");
    for i in 0..40 {
        producer
            .send_to_queue(&Message::new("Backlogged", format!("m{i}")), &queues[i % 4])
            .await
            .expect("send");
    }
    let consumer = server.consumer("CG_backlog");
    for (i, q) in queues.iter().enumerate() {
        wait_max_offset(&consumer, q, 10).await;
        consumer
            .commit_offset(q, i as i64 * 3)
            .await
            .expect("commit");
    }
    let progress = server
        .admin()
        .consumer_progress("CG_backlog", "Backlogged")
        .await
        .expect("consumer progress");
    assert_eq!(progress.total_diff, 40 - (3 + 6 + 9));
    let (_, body) = http_get(http, "/metrics").await.expect("metrics");
    let sum: f64 = series(
        &body,
        "rocketmq_consumer_lag_messages",
        &["consumer_group=\"CG_backlog\"", "is_retry=\"false\""],
    )
    .iter()
    .sum();
    assert_eq!(sum, progress.total_diff as f64, "{body}");
    // metrics-per-queue: each queue's share, 10 sent, 3 × i committed.
    for (i, q) in queues.iter().enumerate() {
        let id = format!("queue_id=\"{}\"", q.queue_id);
        let left = series(
            &body,
            "conveyor_consumer_queue_lag_messages",
            &["consumer_group=\"CG_backlog\"", "topic=\"Backlogged\"", &id],
        );
        assert_eq!(left, [(10 - 3 * i) as f64], "{id}: {body}");
    }
    // rocketmq-exporter's name for the same backlog (no consumer online).
    let diff = series(
        &body,
        "rocketmq_group_diff",
        &["group=\"CG_backlog\"", "countOfOnlineConsumers=\"0\""],
    );
    assert_eq!(diff, [progress.total_diff as f64], "{body}");
    server.stop().await;
}

/// `[http] resource-labels = false` (issue 25): /metrics names no topic and no group; traffic
/// is still counted, summed over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_without_resource_labels_name_no_topic_or_group() {
    let server = TestServer::start_with(|c| c.http_resource_labels = false).await;
    let q = server.create_topic("SecretTopicName", 1).await.remove(0);
    let producer = server.producer("PG_hidden");
    for i in 0..3 {
        producer
            .send(&Message::new("SecretTopicName", format!("m{i}")))
            .await
            .expect("send");
    }
    let consumer = server.consumer("SecretGroupName");
    wait_max_offset(&consumer, &q, 3).await;
    consumer
        .pull_with(
            &q,
            0,
            PullOptions {
                max_msgs: 3,
                commit_offset: Some(1),
                ..PullOptions::default()
            },
        )
        .await
        .expect("pull");
    let (_, body) = http_get(server.http(), "/metrics").await.expect("metrics");
    assert!(!body.contains("SecretTopicName"), "{body}");
    assert!(!body.contains("SecretGroupName"), "{body}");
    let sent: f64 = series(
        &body,
        "rocketmq_messages_in_total",
        &["message_type=\"normal\""],
    )
    .iter()
    .sum();
    assert!(sent >= 3.0, "{body}");
    assert!(!body.contains("rocketmq_consumer_lag_messages"), "{body}");
}

/// A store's recovery can take minutes (a large log after a crash): the probe port answers
/// from the start, `/healthz` alive and `/readyz` "store recovering", so no liveness probe
/// kills a recovery that would have finished. Here the recovery is held at its first read for
/// as long as the test likes: the store's checkpoint is a FIFO nobody writes yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probes_answer_while_the_store_recovers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = config(dir.path());
    // The port is needed before `start` returns: take a free one.
    let http = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    cfg.http_listen = Some(http);
    let checkpoint = cfg.store.root.join("checkpoint");
    std::fs::create_dir_all(&cfg.store.root).expect("store root");
    let path = std::ffi::CString::new(checkpoint.to_str().expect("utf-8 path")).expect("path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates the file.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let started = tokio::spawn(app::start(cfg));

    wait_until("/readyz says the store is recovering", DEADLINE, || async move {
        matches!(http_get(http, "/readyz").await, Ok((503, body)) if body.contains("store recovering"))
    })
    .await;
    // However long it lasts: alive all along, never ready, and the start has not returned.
    for _ in 0..20 {
        let (status, body) = http_get(http, "/healthz").await.expect("healthz");
        assert_eq!(status, 200, "{body}");
        let (status, _) = http_get(http, "/readyz").await.expect("readyz");
        assert_eq!(status, 503);
        assert!(
            !started.is_finished(),
            "the store opened while its recovery was held"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Let the recovery go on: an empty checkpoint (recover from the start).
    tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&checkpoint)
            .expect("open the FIFO for writing")
    })
    .await
    .expect("writer");
    let running = started.await.expect("start task").expect("start");
    assert_eq!(running.http_addr, Some(http));
    wait_until(
        "/readyz answers 200 once the store is open and registered",
        DEADLINE,
        || async move { matches!(http_get(http, "/readyz").await, Ok((200, _))) },
    )
    .await;
    running.stop().await;
}
