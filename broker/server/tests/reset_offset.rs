//! Rewinding and skipping a group's consumption (INVOKE_BROKER_TO_RESET_OFFSET, what mqadmin
//! `resetOffsetByTime` and `skipAccumulatedMessage` send, and what `conveyor admin
//! reset-offset` uses): every readable queue moves, including the read-only queues of a topic
//! whose queues are being shrunk, and without `isForce` offsets only move backwards.

mod common;

use common::{send_request, wait_max_offset, TestServer, CLUSTER};
use conveyor_client::admin::{ResetTo, TopicSpec};
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;

const TOPIC: &str = "Shrinking";
const GROUP: &str = "g-reset";

/// Sends `n` messages to each of `queues` queues of [`TOPIC`].
async fn fill(server: &TestServer, queues: i32, n: usize) {
    let mut conn = server.raw().await;
    for q in 0..queues {
        for i in 0..n {
            let r = conn
                .request(send_request(TOPIC, q, format!("m{q}-{i}")))
                .await;
            assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
        }
    }
}

fn reset_request(timestamp: i64, force: bool) -> RemotingCommand {
    RemotingCommand::request(rc::INVOKE_BROKER_TO_RESET_OFFSET, Default::default())
        .with_ext("topic", TOPIC)
        .with_ext("group", GROUP)
        .with_ext("timestamp", timestamp)
        .with_ext("isForce", force)
}

#[tokio::test]
async fn a_reset_moves_every_readable_queue_and_only_backwards_unless_forced() {
    let server = TestServer::start().await;
    let queues = server.create_topic(TOPIC, 4).await;
    fill(&server, 4, 3).await;
    let consumer = server.consumer(GROUP);
    for q in &queues {
        // Sends are acknowledged once in the CommitLog; queues are built right after.
        wait_max_offset(&consumer, q, 3).await;
        consumer.commit_offset(q, 1).await.expect("commit");
    }
    // The topic is being shrunk: queues 2 and 3 take no new messages but still hold a backlog.
    let mut spec = TopicSpec::new(TOPIC, 4);
    spec.write_queue_nums = 2;
    server
        .admin()
        .create_topic(CLUSTER, &spec)
        .await
        .expect("shrink");

    // Not forced, to the end: forward, so nothing moves.
    let mut conn = server.raw().await;
    let r = conn.request(reset_request(-1, false)).await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    for q in &queues {
        assert_eq!(consumer.query_offset(q).await.unwrap(), Some(1), "{q:?}");
    }

    // Skipping the backlog reaches the read-only queues too.
    let moved = server
        .admin()
        .reset_offsets(GROUP, TOPIC, ResetTo::Latest)
        .await
        .expect("reset to latest");
    assert_eq!(moved.len(), 4);
    for m in &moved {
        assert_eq!(m.before, Some(1), "{m:?}");
        assert_eq!(m.after, 3, "queue {} skipped its backlog", m.queue.queue_id);
    }

    // Not forced, back to the start: backwards, so every queue moves.
    let r = conn.request(reset_request(0, false)).await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    for q in &queues {
        assert_eq!(consumer.query_offset(q).await.unwrap(), Some(0), "{q:?}");
    }
}

#[tokio::test]
async fn a_group_without_offsets_on_the_topic_is_refused_with_a_remark() {
    let server = TestServer::start().await;
    server.create_topic(TOPIC, 2).await;
    let mut conn = server.raw().await;
    let r = conn.request(reset_request(0, true)).await;
    assert_eq!(r.code, resp::SYSTEM_ERROR);
    assert!(
        r.remark.as_deref().is_some_and(|m| m.contains(GROUP)),
        "{:?}",
        r.remark
    );
}
