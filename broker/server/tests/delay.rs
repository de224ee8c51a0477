//! Delay levels through the broker: every delayed message arrives exactly once, never before
//! its due time, also when the schedule queue holds due and not-yet-due messages side by side
//! (a batch read must not skip the ones that are not due yet).

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::{now_ms, TestServer, DEADLINE};
use conveyor_client::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_arrive_once_and_never_early() {
    let mut server = TestServer::start().await;
    let topic = "DelayedOnce";
    let queues = server.create_topic(topic, 2).await;
    let producer = server.producer("PG_delay");
    let consumer = server.consumer("CG_delay");
    // Level 1 is 1 s. Sends spread over ~2 s, so when the first fall due the later ones
    // (read in the same batch) are not due yet.
    let count = 80usize;
    for i in 0..count {
        let msg = Message::new(topic, format!("delayed-{i}")).with_delay_level(1);
        producer.send(&msg).await.expect("send delayed");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mut seen = HashSet::new();
    let mut offsets = vec![0i64; queues.len()];
    let deadline = Instant::now() + DEADLINE;
    while seen.len() < count {
        assert!(
            Instant::now() < deadline,
            "only {} of {count} delayed messages arrived",
            seen.len()
        );
        for (q, offset) in queues.iter().zip(offsets.iter_mut()) {
            let r = consumer
                .pull(q, *offset, 32, Duration::from_millis(200))
                .await
                .expect("pull");
            *offset = (*offset).max(r.next_begin_offset);
            for m in r.messages {
                let body = String::from_utf8_lossy(&m.body).to_string();
                assert!(
                    m.store_timestamp >= m.born_timestamp + 1000,
                    "{body} delivered {} ms after it was born, before its 1 s delay",
                    m.store_timestamp - m.born_timestamp
                );
                assert!(m.store_timestamp <= now_ms());
                assert!(seen.insert(body.clone()), "{body} delivered twice");
            }
        }
    }
    server.stop().await;
}
