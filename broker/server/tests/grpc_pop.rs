//! Pop through the gRPC endpoint across a broker restart, as a 5.x SimpleConsumer sees it:
//! a receipt handle from before the restart still acknowledges, an unacknowledged message
//! comes back after its invisible time with a higher delivery attempt, and an acknowledged one
//! never does, even when acknowledged twice.

mod common;

use std::time::Duration;

use common::grpc::{key, Client};
use common::{TestServer, DEADLINE};
use conveyor_client::Message;
use conveyor_grpc_api::v2 as pb;
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
