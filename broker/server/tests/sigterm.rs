//! The real `conveyor standalone` binary: ready on its probe port, stores a message, exits 0
//! on SIGTERM within a deadline, and still has the message after a restart on the same data
//! directory.

mod common;

use std::time::Duration;

use common::child::Broker;
use common::DEADLINE;
use conveyor_client::{
    Message, MessageQueue, Producer, ProducerConfig, PullConsumer, PullConsumerConfig, PullStatus,
};
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_data_survives() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let config = tmp.path().join("conveyor.toml");
    let log = tmp.path().join("conveyor.log");
    std::fs::write(
        &config,
        "[store]\nsegment-size = 8388608\nmax-message-size = 1048576\n",
    )
    .expect("config");

    let mut proc = Broker::start(&data, &config, &log).await;
    let topic = "SigtermTopic";
    let producer = Producer::new(ProducerConfig::new(proc.namesrv.to_string(), "PG_sigterm"))
        .expect("producer");
    let sent = producer
        .send(&Message::new(topic, "survives SIGTERM").with_key("sig-key"))
        .await
        .expect("send");
    producer.close();

    let status = proc.terminate(Duration::from_secs(20)).await;
    assert!(
        status.success(),
        "exit status after SIGTERM: {status}\n{}",
        proc.log_tail()
    );

    let proc = Broker::start(&data, &config, &log).await;
    let consumer = PullConsumer::new(PullConsumerConfig::new(
        proc.namesrv.to_string(),
        "CG_sigterm",
    ))
    .expect("consumer");
    let queue = MessageQueue {
        topic: topic.into(),
        ..sent.queue.clone()
    };
    // The route comes back with the broker's registration of its persisted topics.
    let deadline = Instant::now() + DEADLINE;
    let got = loop {
        match consumer
            .pull(&queue, sent.queue_offset, 1, Duration::ZERO)
            .await
        {
            Ok(r) if r.status == PullStatus::Found => break r,
            other => assert!(
                Instant::now() < deadline,
                "message not found after restart: {other:?}\n{}",
                proc.log_tail()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(got.messages[0].body, "survives SIGTERM".as_bytes());
    consumer.close();
    let mut proc = proc;
    let status = proc.terminate(Duration::from_secs(20)).await;
    assert!(status.success(), "second exit: {status}");
}
