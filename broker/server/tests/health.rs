//! The HTTP probe port: /healthz, /readyz (after registration), /metrics.

mod common;

use common::{http_get, wait_max_offset, wait_until, TestServer, DEADLINE};
use conveyor_client::consumer::PullOptions;
use conveyor_client::Message;

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

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
    let lag = body
        .lines()
        .find(|l| {
            l.starts_with("conveyor_consumer_lag_messages{")
                && l.contains("group=\"CG_metrics\"")
                && l.contains("topic=\"Metered\"")
                && l.contains("queue=\"0\"")
        })
        .unwrap_or_else(|| panic!("no lag line for the group: {body}"));
    assert!(lag.ends_with(" 2"), "{lag}");

    let (status, _) = http_get(http, "/nope").await.expect("404");
    assert_eq!(status, 404);

    server.stop().await;
    // After a stop the probe port is closed.
    assert!(http_get(http, "/healthz").await.is_err());
}
