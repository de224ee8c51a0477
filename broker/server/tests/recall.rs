//! RecallMessage (RocketMQ 5.3): a timer message sent through the gRPC endpoint comes with a
//! recall handle; recalled before it is due it is never delivered, across a restart too,
//! while the same topic's other timer messages are; a recall of a delivered message or with
//! a handle that is not one is refused.

mod common;

use std::time::Duration;

use common::grpc::{key, Client};
use common::TestServer;
use conveyor_grpc_api::v2 as pb;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::time::now_ms;
use tokio::time::Instant;

/// Sends a timer message with `key` due at `due_ms` through gRPC; its recall handle.
async fn send_timer(client: &mut Client, topic: &str, key: &str, due_ms: i64) -> String {
    let message = pb::Message {
        topic: Some(pb::Resource {
            name: topic.into(),
            ..Default::default()
        }),
        user_properties: Default::default(),
        system_properties: Some(pb::SystemProperties {
            message_id: format!("{key}-0123456789ABCDEF0123456789"),
            keys: vec![key.into()],
            message_type: pb::MessageType::Delay as i32,
            delivery_timestamp: Some(conveyor_grpc_api::prost_types::Timestamp {
                seconds: due_ms / 1000,
                nanos: ((due_ms % 1000) * 1_000_000) as i32,
            }),
            ..Default::default()
        }),
        body: key.as_bytes().to_vec(),
    };
    let req = client.request(pb::SendMessageRequest {
        messages: vec![message],
    });
    let r = client
        .rpc
        .send_message(req)
        .await
        .expect("send")
        .into_inner();
    let entry = &r.entries[0];
    assert_eq!(
        entry.status.as_ref().map(|s| s.code),
        Some(pb::Code::Ok as i32),
        "{entry:?}"
    );
    assert!(
        !entry.recall_handle.is_empty(),
        "no recall handle: {entry:?}"
    );
    entry.recall_handle.clone()
}

async fn recall(client: &mut Client, topic: &str, handle: &str) -> pb::RecallMessageResponse {
    let req = client.request(pb::RecallMessageRequest {
        topic: Some(pb::Resource {
            name: topic.into(),
            ..Default::default()
        }),
        recall_handle: handle.into(),
    });
    client
        .rpc
        .recall_message(req)
        .await
        .expect("recall")
        .into_inner()
}

fn code(r: &pb::RecallMessageResponse) -> i32 {
    r.status.as_ref().map_or(-1, |s| s.code)
}

/// Receives for `group` until `until`; the keys that came (acknowledged).
async fn received_until(
    client: &mut Client,
    group: &str,
    topic: &str,
    until: Instant,
) -> Vec<String> {
    let mut seen = Vec::new();
    while Instant::now() < until {
        let poll = until
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(100), Duration::from_secs(2));
        for m in client
            .receive(group, topic, Some(Duration::from_secs(30)), poll)
            .await
        {
            client.ack(group, topic, &m).await;
            seen.push(key(&m));
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recalled_timer_message_is_never_delivered_even_across_a_restart() {
    let mut server = TestServer::start().await;
    let (topic, group) = ("RecallT", "CG_recall");
    server.create_topic(topic, 2).await;
    let mut client = Client::connect(&server, "recall-client").await;
    let due = now_ms() + 6_000;
    let recalled = send_timer(&mut client, topic, "recalled", due).await;
    send_timer(&mut client, topic, "kept", due).await;
    let r = recall(&mut client, topic, &recalled).await;
    assert_eq!(code(&r), pb::Code::Ok as i32, "{r:?}");
    assert!(r.message_id.starts_with("recalled-"), "{r:?}");

    // The recall is in the log: a restart before the messages are due keeps it.
    server.restart().await;
    let mut client = Client::connect(&server, "recall-client").await;
    let wait = Duration::from_millis((due - now_ms()).max(0) as u64);
    let seen = received_until(
        &mut client,
        group,
        topic,
        Instant::now() + wait + Duration::from_secs(6),
    )
    .await;
    assert_eq!(seen, ["kept"], "only the message not recalled is delivered");
    // Recalling a message that was delivered is refused.
    let kept = send_timer(&mut client, topic, "late", now_ms() + 1_500).await;
    let seen = received_until(
        &mut client,
        group,
        topic,
        Instant::now() + Duration::from_secs(5),
    )
    .await;
    assert_eq!(seen, ["late"]);
    let r = recall(&mut client, topic, &kept).await;
    assert_ne!(
        code(&r),
        pb::Code::Ok as i32,
        "a delivered message was recalled: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recalls_with_bad_handles_are_refused_with_a_reason() {
    let server = TestServer::start().await;
    let topic = "RecallBad";
    server.create_topic(topic, 1).await;
    let mut client = Client::connect(&server, "recall-bad-client").await;
    let handle = send_timer(&mut client, topic, "m", now_ms() + 60_000).await;
    // Not a handle at all, over gRPC.
    let r = recall(&mut client, topic, "not a handle").await;
    assert_eq!(code(&r), pb::Code::BadRequest as i32, "{r:?}");

    // Over remoting (RECALL_MESSAGE): the handle of another topic, and a missing topic.
    let mut raw = server.raw().await;
    let recall_raw = |topic: &str, handle: &str| {
        RemotingCommand::request(request_code::RECALL_MESSAGE, Default::default())
            .with_ext("topic", topic)
            .with_ext("producerGroup", "pg")
            .with_ext("recallHandle", handle)
    };
    server.create_topic("RecallOther", 1).await;
    let r = raw.request(recall_raw("RecallOther", &handle)).await;
    assert_eq!(r.code, response_code::ILLEGAL_OPERATION, "{:?}", r.remark);
    assert!(r.remark.unwrap_or_default().contains("topic not match"));
    let r = raw.request(recall_raw("NoSuchTopic", &handle)).await;
    assert_eq!(r.code, response_code::TOPIC_NOT_EXIST, "{:?}", r.remark);
    // The right one works, and says which message.
    let r = raw.request(recall_raw(topic, &handle)).await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    assert_eq!(r.get_str_opt("msgId"), Some("m-0123456789ABCDEF0123456789"));
}
