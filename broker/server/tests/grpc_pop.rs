//! Pop through the gRPC endpoint across a broker restart, as a 5.x SimpleConsumer sees it:
//! a receipt handle from before the restart still acknowledges, an unacknowledged message
//! comes back after its invisible time with a higher delivery attempt, and an acknowledged one
//! never does, even when acknowledged twice. What a SimpleConsumer holds counts in its
//! group's backlog, in the metrics and in the admin progress.

mod common;

use std::time::Duration;

use common::grpc::{key, Client};
use common::{http_get, series, TestServer, DEADLINE};
use conveyor_client::Message;
use conveyor_grpc_api::v2 as pb;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use tokio::time::Instant;

/// The shortest invisible duration a receive may ask for (the proxy's minimum).
const INVISIBLE: Duration = Duration::from_secs(10);

async fn receive_n(client: &mut Client, group: &str, topic: &str, n: usize) -> Vec<pb::Message> {
    let until = Instant::now() + DEADLINE;
    let mut got = Vec::new();
    while got.len() < n {
        assert!(Instant::now() < until, "received only {}", got.len());
        got.extend(
            client
                .receive(group, topic, Some(INVISIBLE), Duration::from_secs(2))
                .await,
        );
    }
    got
}

fn handle(m: &pb::Message) -> (String, String) {
    let sp = m.system_properties.as_ref().unwrap();
    (sp.message_id.clone(), sp.receipt_handle.clone().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_receive_and_ack_loses_nothing_and_brings_back_nothing_acknowledged() {
    let mut server = TestServer::start().await;
    let (topic, group) = ("GrpcPopRestart", "CG_grpc_restart");
    server.create_topic(topic, 1).await;
    let producer = server.producer("grpc-restart-producer");
    for k in ["acked-before", "acked-after", "never-acked"] {
        producer
            .send(&Message::new(topic, k.as_bytes().to_vec()).with_key(k))
            .await
            .expect("send");
    }
    let mut client = Client::connect(&server, "restart-client").await;
    let got = receive_n(&mut client, group, topic, 3).await;
    let find = |k: &str| handle(got.iter().find(|m| key(m) == k).unwrap());
    let (id, h) = find("acked-before");
    assert_eq!(
        client.ack_handle(group, topic, &id, &h).await,
        pb::Code::Ok as i32
    );

    server.restart().await;
    let mut client = Client::connect(&server, "restart-client").await;
    // The handle from before the restart still acknowledges: the in-flight record was replayed.
    let (id, h) = find("acked-after");
    let until = Instant::now() + DEADLINE;
    loop {
        let code = client.ack_handle(group, topic, &id, &h).await;
        if code == pb::Code::Ok as i32 {
            break;
        }
        assert!(
            Instant::now() < until,
            "the ack with a handle from before the restart answers {code}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A second ack of an acknowledged message changes nothing (it must not consume another).
    let (id, h) = find("acked-before");
    client.ack_handle(group, topic, &id, &h).await;

    let back = receive_n(&mut client, group, topic, 1).await;
    assert_eq!(
        back.iter().map(key).collect::<Vec<_>>(),
        ["never-acked"],
        "only the unacknowledged message comes back"
    );
    let attempt = back[0]
        .system_properties
        .as_ref()
        .unwrap()
        .delivery_attempt
        .unwrap_or(0);
    assert!(attempt >= 2, "redelivered with delivery attempt {attempt}");
    assert_eq!(
        client.ack(group, topic, &back[0]).await,
        pb::Code::Ok as i32
    );

    // Past another invisible time nothing is back.
    let quiet = Instant::now() + INVISIBLE + Duration::from_secs(3);
    while Instant::now() < quiet {
        let more = client
            .receive(group, topic, Some(INVISIBLE), Duration::from_secs(2))
            .await;
        assert!(
            more.is_empty(),
            "came back: {:?}",
            more.iter().map(key).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn received_and_unacknowledged_messages_count_in_the_backlog_and_in_flight() {
    let server = TestServer::start().await;
    let (topic, group) = ("GrpcPopLag", "CG_grpc_lag");
    server.create_topic(topic, 1).await;
    let producer = server.producer("grpc-lag-producer");
    for i in 0..5 {
        let k = format!("m{i}");
        producer
            .send(&Message::new(topic, k.as_bytes().to_vec()).with_key(&k))
            .await
            .expect("send");
    }
    let mut client = Client::connect(&server, "lag-client").await;
    let got = receive_n(&mut client, group, topic, 5).await;
    for m in &got[..2] {
        assert_eq!(client.ack(group, topic, m).await, pb::Code::Ok as i32);
    }

    // The pop committed the queue's offset (5); the three not acknowledged are backlog, all
    // of it in flight, none ready (RocketMQ 5's lag for pop consumers).
    let (_, body) = http_get(server.http(), "/metrics").await.expect("metrics");
    let labels = [
        "consumer_group=\"CG_grpc_lag\"",
        "topic=\"GrpcPopLag\"",
        "is_retry=\"false\"",
    ];
    for (name, want) in [
        ("rocketmq_consumer_lag_messages", 3.0),
        ("rocketmq_consumer_inflight_messages", 3.0),
        ("rocketmq_consumer_ready_messages", 0.0),
    ] {
        assert_eq!(series(&body, name, &labels), [want], "{name}: {body}");
    }

    // consumerProgress (GET_CONSUME_STATS): the diff counts them, shown in flight.
    let mut raw = server.raw().await;
    let r = raw
        .request(
            RemotingCommand::request(request_code::GET_CONSUME_STATS, Default::default())
                .with_ext("consumerGroup", group)
                .with_ext("topic", topic),
        )
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let stats = String::from_utf8_lossy(&r.body).to_string();
    for field in [
        "\"brokerOffset\":5",
        "\"consumerOffset\":2",
        "\"pullOffset\":5",
    ] {
        assert!(stats.contains(field), "{field} missing in {stats}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_waiting_when_the_first_redelivery_comes_gets_it() {
    let server = TestServer::start().await;
    let (topic, group) = ("GrpcPopFirstRetry", "CG_grpc_first_retry");
    server.create_topic(topic, 1).await;
    server
        .producer("grpc-first-retry-producer")
        .send(&Message::new(topic, b"again".to_vec()).with_key("again"))
        .await
        .expect("send");
    let mut client = Client::connect(&server, "first-retry-client").await;
    let first = receive_n(&mut client, group, topic, 1).await;
    assert_eq!(first.len(), 1);
    // Not acknowledged: it comes back through the group's retry topic, which this first
    // redelivery creates. A receive holding its long poll (25 s, past the 10 s invisible
    // time) from before then must get it, not answer empty when its poll ends.
    let back = client
        .receive(group, topic, Some(INVISIBLE), Duration::from_secs(25))
        .await;
    assert_eq!(
        back.iter().map(key).collect::<Vec<_>>(),
        ["again"],
        "the waiting receive did not get the redelivery"
    );
}
