//! Push consumers over gRPC (ReceiveMessage with `auto_renew`): the endpoint keeps a received
//! message invisible for as long as the client works on it, and the client's answer, made
//! with the handle it was given, still counts after the endpoint renewed it; a client that
//! terminates gets its messages back to the group at once, not after their invisible time.
//! The requests are the 5.x SDKs' own (`apache.rocketmq.v2`), sent with the generated client.

mod common;

use std::time::Duration;

use common::grpc::{key, Client};
use common::TestServer;
use conveyor_client::Message;
use conveyor_grpc_api::v2 as pb;
use tokio::time::Instant;

async fn send(server: &TestServer, topic: &str, k: &str) {
    server
        .producer("renewal-producer")
        .send(&Message::new(topic, k.as_bytes().to_vec()).with_key(k))
        .await
        .expect("send");
}

/// Receives for `group` as a SimpleConsumer until `until`, returning what came.
async fn watch(client: &mut Client, group: &str, topic: &str, until: Instant) -> Vec<String> {
    let mut seen = Vec::new();
    while Instant::now() < until {
        let left = until.saturating_duration_since(Instant::now());
        let poll = left
            .min(Duration::from_secs(2))
            .max(Duration::from_millis(100));
        for m in client
            .receive(group, topic, Some(Duration::from_secs(30)), poll)
            .await
        {
            seen.push(key(&m));
        }
    }
    seen
}

#[tokio::test]
async fn a_push_consumers_message_stays_invisible_until_it_answers() {
    // Each renewal: 4 s, renewed 2 s before it ends; the client works on it for 14 s.
    let server = TestServer::start_with(|c| c.grpc.push_invisible_ms = 4_000).await;
    let topic = "RenewT";
    server.create_topic(topic, 4).await;
    send(&server, topic, "k1").await;
    let (group, mut push, mut other) = (
        "RenewG",
        Client::connect(&server, "push-client").await,
        Client::connect(&server, "simple-client").await,
    );
    let got = push
        .receive(group, topic, None, Duration::from_secs(10))
        .await;
    assert_eq!(got.iter().map(key).collect::<Vec<_>>(), ["k1"]);
    let meanwhile = watch(
        &mut other,
        group,
        topic,
        Instant::now() + Duration::from_secs(14),
    )
    .await;
    assert!(
        meanwhile.is_empty(),
        "renewed for 14 s (3.5 × its invisible time): the group saw {meanwhile:?}"
    );
    assert_eq!(
        push.ack(group, topic, &got[0]).await,
        pb::Code::Ok as i32,
        "the ack with the handle the message came with counts after its renewals"
    );
    let after = watch(
        &mut other,
        group,
        topic,
        Instant::now() + Duration::from_secs(8),
    )
    .await;
    assert!(after.is_empty(), "acknowledged: never back, got {after:?}");
}

#[tokio::test]
async fn a_terminating_push_consumer_gives_its_messages_back_at_once() {
    // The default renewal (60 s): redelivery well before it proves the release.
    let server = TestServer::start().await;
    let topic = "ReleaseT";
    server.create_topic(topic, 4).await;
    send(&server, topic, "k2").await;
    let group = "ReleaseG";
    let mut push = Client::connect(&server, "leaving-client").await;
    let got = push
        .receive(group, topic, None, Duration::from_secs(10))
        .await;
    assert_eq!(got.iter().map(key).collect::<Vec<_>>(), ["k2"]);
    let first = got[0].system_properties.as_ref().unwrap().delivery_attempt;
    push.terminate(group).await;
    let released = Instant::now();
    let mut other = Client::connect(&server, "staying-client").await;
    let deadline = released + Duration::from_secs(30);
    let mut back = Vec::new();
    while back.is_empty() && Instant::now() < deadline {
        back = other
            .receive(
                group,
                topic,
                Some(Duration::from_secs(30)),
                Duration::from_secs(2),
            )
            .await;
    }
    assert_eq!(
        back.iter().map(key).collect::<Vec<_>>(),
        ["k2"],
        "back to the group within 30 s, not after the 60 s invisible time"
    );
    assert!(back[0].system_properties.as_ref().unwrap().delivery_attempt > first);
}
