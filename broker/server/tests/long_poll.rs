//! Long polling: a suspended pull is answered as soon as a message arrives, and an idle pull
//! is answered "no new message" when its suspend timeout passes. Only generous bounds on
//! wall-clock times.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_max_offset, TestServer};
use conveyor_client::{Message, PullStatus};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_pull_is_answered_when_a_message_arrives() {
    let mut server = TestServer::start().await;
    let topic = "LongPollWake";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_lp");
    let consumer = Arc::new(server.consumer("CG_lp"));
    let suspend = Duration::from_secs(10);

    for round in 0..2i64 {
        // Round 0 waits on an empty queue, round 1 at the end of a non-empty one.
        let started = Instant::now();
        let mut pull = {
            let consumer = consumer.clone();
            let q = q.clone();
            tokio::spawn(async move { consumer.pull(&q, round, 32, suspend).await })
        };
        // The pull is held rather than answered at once (absence check, not synchronisation:
        // if it has not even reached the broker yet, it is answered with the message later).
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut pull)
                .await
                .is_err(),
            "a pull on a caught-up queue with suspend must be held"
        );
        let body = format!("wake-{round}");
        let sent = producer
            .send(&Message::new(topic, body.clone()))
            .await
            .expect("send");
        assert_eq!(sent.queue_offset, round);
        let result = tokio::time::timeout(Duration::from_secs(8), pull)
            .await
            .expect("the held pull is answered well before its 10 s suspend timeout")
            .expect("pull task")
            .expect("pull");
        assert!(
            started.elapsed() < suspend,
            "answered before the suspend timeout"
        );
        assert_eq!(result.status, PullStatus::Found);
        assert_eq!(result.messages.len(), 1);
        assert_eq!(result.messages[0].body, body.as_bytes());
        assert_eq!(result.next_begin_offset, round + 1);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_pull_returns_no_new_message_at_the_suspend_timeout() {
    let mut server = TestServer::start().await;
    let topic = "LongPollIdle";
    let q = server.create_topic(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_idle");
    let suspend = Duration::from_secs(2);

    // Empty queue.
    let started = Instant::now();
    let r = consumer.pull(&q, 0, 32, suspend).await.expect("idle pull");
    let elapsed = started.elapsed();
    assert_eq!(r.status, PullStatus::NoNewMsg);
    assert_eq!(r.next_begin_offset, 0);
    assert!(
        elapsed >= suspend - Duration::from_millis(200),
        "held until the suspend timeout, answered after {elapsed:?}"
    );
    assert!(elapsed < suspend + Duration::from_secs(3));

    // Caught up with a non-empty queue.
    let producer = server.producer("PG_idle");
    producer
        .send(&Message::new(topic, "one"))
        .await
        .expect("send");
    wait_max_offset(&consumer, &q, 1).await;
    let started = Instant::now();
    let r = consumer.pull(&q, 1, 32, suspend).await.expect("idle pull");
    let elapsed = started.elapsed();
    assert_eq!(r.status, PullStatus::NoNewMsg);
    assert_eq!(r.next_begin_offset, 1);
    assert_eq!(r.max_offset, 1);
    assert!(
        elapsed >= suspend - Duration::from_millis(200),
        "{elapsed:?}"
    );

    // Without the suspend flag the same pull is answered at once.
    let started = Instant::now();
    let r = consumer
        .pull(&q, 1, 32, Duration::ZERO)
        .await
        .expect("pull");
    assert_eq!(r.status, PullStatus::NoNewMsg);
    assert!(started.elapsed() < suspend);
    server.stop().await;
}
