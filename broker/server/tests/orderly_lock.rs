//! LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers (docs/protocol.md §6.6): a
//! queue belongs to one client of the group at a time until that client unlocks it.

mod common;

use common::{RawConn, TestServer};
use conveyor_client::MessageQueue;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::LockBatchResponseBody;
use serde_json::json;

const GROUP: &str = "CG_orderly";

/// A Java-shaped consumer heartbeat for `client_id` in `group`, subscribed to `topic`.
fn consumer_heartbeat(client_id: &str, group: &str, topic: &str) -> RemotingCommand {
    let body = json!({
        "clientID": client_id,
        "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        "consumerDataSet": [{
            "groupName": group,
            "consumeType": "CONSUME_PASSIVELY",
            "messageModel": "CLUSTERING",
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "unitMode": false,
            "subscriptionDataSet": [{
                "classFilterMode": false, "topic": topic, "subString": "*",
                "tagsSet": [], "codeSet": [], "subVersion": 1, "expressionType": "TAG"
            }]
        }]
    });
    RemotingCommand::request(request_code::HEART_BEAT, Default::default())
        .with_body(serde_json::to_vec(&body).expect("json"))
}

fn lock_request(code: i32, client_id: &str, queues: &[MessageQueue]) -> RemotingCommand {
    let body = json!({
        "consumerGroup": GROUP,
        "clientId": client_id,
        "onlyThisBroker": false,
        "mqSet": queues,
    });
    RemotingCommand::request(code, Default::default())
        .with_body(serde_json::to_vec(&body).expect("json"))
}

/// Locks `queues` for `client_id`; returns the queues it now holds, sorted.
async fn lock(conn: &mut RawConn, client_id: &str, queues: &[MessageQueue]) -> Vec<MessageQueue> {
    let r = conn
        .request(lock_request(request_code::LOCK_BATCH_MQ, client_id, queues))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "lock: {r:?}");
    let body: LockBatchResponseBody = json::from_slice(&r.body).expect("lock response body");
    let mut held = body.lock_ok_mq_set;
    held.sort_by_key(|q| q.queue_id);
    held
}

async fn unlock(conn: &mut RawConn, client_id: &str, queues: &[MessageQueue]) {
    let r = conn
        .request(lock_request(
            request_code::UNLOCK_BATCH_MQ,
            client_id,
            queues,
        ))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "unlock: {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_from_a_client_without_heartbeat_is_refused() {
    let server = TestServer::start().await;
    let topic = "OrderlyNoHb";
    let queues = server.create_topic(topic, 4).await;
    let mut conn = server.raw().await;
    let r = conn
        .request(lock_request(
            request_code::LOCK_BATCH_MQ,
            "127.0.0.1@ghost",
            &queues,
        ))
        .await;
    assert_ne!(
        r.code,
        response_code::SUCCESS,
        "a client never seen in a heartbeat got locks: {}",
        String::from_utf8_lossy(&r.body)
    );
    assert!(r.remark.as_deref().is_some_and(|s| !s.is_empty()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_are_locked_by_one_client_until_unlocked() {
    let server = TestServer::start().await;
    let topic = "OrderlyLocks";
    let queues = server.create_topic(topic, 4).await;
    let (c1, c2) = ("127.0.0.1@orderly-1", "127.0.0.1@orderly-2");
    let mut conn1 = server.raw().await;
    let mut conn2 = server.raw().await;
    for (conn, id) in [(&mut conn1, c1), (&mut conn2, c2)] {
        let r = conn.request(consumer_heartbeat(id, GROUP, topic)).await;
        assert_eq!(r.code, response_code::SUCCESS, "heartbeat: {r:?}");
    }

    // The first client gets every queue; the second none of them.
    assert_eq!(lock(&mut conn1, c1, &queues).await, queues);
    assert!(lock(&mut conn2, c2, &queues).await.is_empty());
    // Renewal by the owner keeps them.
    assert_eq!(lock(&mut conn1, c1, &queues).await, queues);
    assert!(lock(&mut conn2, c2, &queues[..1]).await.is_empty());

    // An unlock by someone else does not release them.
    unlock(&mut conn2, c2, &queues).await;
    assert!(lock(&mut conn2, c2, &queues).await.is_empty());

    // Once the owner unlocks two queues, the other client gets exactly those.
    unlock(&mut conn1, c1, &queues[..2]).await;
    assert_eq!(lock(&mut conn2, c2, &queues).await, queues[..2].to_vec());
    assert_eq!(lock(&mut conn1, c1, &queues).await, queues[2..].to_vec());

    // Locks are per group: another group's client may lock the same queues.
    let r = conn2
        .request(consumer_heartbeat(c2, "CG_orderly_other", topic))
        .await;
    assert_eq!(r.code, response_code::SUCCESS);
    let other = json!({
        "consumerGroup": "CG_orderly_other",
        "clientId": c2,
        "mqSet": &queues,
    });
    let r = conn2
        .request(
            RemotingCommand::request(request_code::LOCK_BATCH_MQ, Default::default())
                .with_body(serde_json::to_vec(&other).unwrap()),
        )
        .await;
    assert_eq!(r.code, response_code::SUCCESS);
    let body: LockBatchResponseBody = json::from_slice(&r.body).unwrap();
    assert_eq!(body.lock_ok_mq_set.len(), queues.len());
}
