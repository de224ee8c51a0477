//! CONSUMER_SEND_MSG_BACK (docs/protocol.md §6.7): a failed message comes back in
//! `%RETRY%<group>` after its delay level (3 + reconsume times), never earlier, with its
//! origin recorded; past the max reconsume times (or with delay level −1) it goes to
//! `%DLQ%<group>`; a send-back for an offset holding no message is refused.

mod common;

use std::time::Duration;

use common::{now_ms, prop, pull_for, pull_until, RawConn, TestServer, DEADLINE};
use conveyor_client::{Message, StoredMessage};
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::keys;

fn send_back(offset: i64, group: &str, delay_level: i32, origin: &str) -> RemotingCommand {
    RemotingCommand::request(request_code::CONSUMER_SEND_MSG_BACK, Default::default())
        .with_ext("offset", offset)
        .with_ext("group", group)
        .with_ext("delayLevel", delay_level)
        .with_ext("originMsgId", origin)
        .with_ext("maxReconsumeTimes", 2)
}

async fn server() -> TestServer {
    TestServer::start_with(|cfg| cfg.broker.delay_levels = "1s 2s 3s 4s 5s 6s".into()).await
}

/// Body, tags, keys and user properties are those of the original.
fn assert_same_content(got: &StoredMessage, original: &StoredMessage) {
    assert_eq!(got.body, original.body, "body");
    for k in [
        keys::TAGS,
        keys::KEYS,
        "biz",
        keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    ] {
        assert_eq!(prop(got, k), prop(original, k), "property {k}");
    }
    assert_eq!(got.flag, original.flag, "flag");
    assert_eq!(
        got.born_timestamp, original.born_timestamp,
        "born timestamp"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_back_retries_with_growing_delay_then_dead_letters() {
    let server = server().await;
    let topic = "RetryOrigin";
    let group = "CG_retry";
    let retry_topic = format!("%RETRY%{group}");
    let dlq_topic = format!("%DLQ%{group}");
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_retry");
    let consumer = server.consumer(group);
    producer
        .send(
            &Message::new(topic, "fails-every-time")
                .with_tags("TagR")
                .with_keys(["k1", "k2"])
                .with_property("biz", "7")
                .with_flag(3),
        )
        .await
        .expect("send");
    let mut offset = 0;
    let original = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty())
        .await
        .remove(0);
    let origin_id = prop(&original, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .expect("uniq key")
        .to_string();
    let mut raw = server.raw().await;

    // First failure: level 3 + 0 = 3 s.
    let before = now_ms();
    let r = raw
        .request(send_back(original.physical_offset, group, 0, &origin_id))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "send back: {r:?}");
    let rq = server.wait_route(&retry_topic, 1).await.remove(0);
    let mut retry_offset = 0;
    let first = pull_until(&consumer, &rq, &mut retry_offset, DEADLINE, |g| {
        !g.is_empty()
    })
    .await;
    assert_eq!(first.len(), 1, "one retry copy: {first:?}");
    let first = &first[0];
    assert!(
        first.store_timestamp >= before + 3000,
        "retry copy stored {} ms after the send-back, before level 3 (3 s)",
        first.store_timestamp - before
    );
    assert_eq!(first.topic, retry_topic);
    assert_eq!(first.reconsume_times, 1);
    assert_eq!(prop(first, keys::RETRY_TOPIC), Some(topic));
    assert_eq!(
        prop(first, keys::ORIGIN_MESSAGE_ID),
        Some(origin_id.as_str())
    );
    assert_eq!(prop(first, keys::DELAY_TIME_LEVEL), None);
    assert_same_content(first, &original);

    // Second failure (of the retry copy): level 3 + 1 = 4 s.
    let before = now_ms();
    let r = raw
        .request(send_back(first.physical_offset, group, 0, &origin_id))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "second send back: {r:?}");
    let second = pull_until(&consumer, &rq, &mut retry_offset, DEADLINE, |g| {
        !g.is_empty()
    })
    .await;
    assert_eq!(second.len(), 1, "one retry copy: {second:?}");
    let second = &second[0];
    assert!(
        second.store_timestamp >= before + 4000,
        "second retry stored {} ms after the send-back, before level 4 (4 s)",
        second.store_timestamp - before
    );
    assert_eq!(second.reconsume_times, 2);
    assert_eq!(prop(second, keys::RETRY_TOPIC), Some(topic));
    assert_eq!(
        prop(second, keys::ORIGIN_MESSAGE_ID),
        Some(origin_id.as_str())
    );
    assert_same_content(second, &original);

    // Third failure: reconsume times (2) reached the max (2): dead-lettered, at once.
    let r = raw
        .request(send_back(second.physical_offset, group, 0, &origin_id))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "third send back: {r:?}");
    let dq = server.wait_route(&dlq_topic, 1).await.remove(0);
    let mut dlq_offset = 0;
    let dead = pull_until(&consumer, &dq, &mut dlq_offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    assert_eq!(dead.topic, dlq_topic);
    assert_eq!(dead.reconsume_times, 3);
    assert_eq!(prop(dead, keys::DLQ_ORIGIN_TOPIC), Some(topic));
    assert_eq!(
        prop(dead, keys::ORIGIN_MESSAGE_ID),
        Some(origin_id.as_str())
    );
    assert_eq!(
        prop(dead, keys::DLQ_ORIGIN_MESSAGE_ID),
        Some(origin_id.as_str())
    );
    assert_eq!(prop(dead, keys::DELAY_TIME_LEVEL), None);
    assert_same_content(dead, &original);

    // Nothing more comes back in the retry topic; the DLQ holds it once.
    assert!(pull_for(
        &consumer,
        &rq,
        &mut retry_offset,
        Duration::from_millis(1000)
    )
    .await
    .is_empty());
    assert!(
        pull_for(&consumer, &dq, &mut dlq_offset, Duration::from_millis(300))
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_level_minus_one_goes_straight_to_the_dlq() {
    let server = server().await;
    let topic = "RetryDirect";
    let group = "CG_retry_direct";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_retry_direct");
    let consumer = server.consumer(group);
    producer
        .send(&Message::new(topic, "poison").with_tags("P").with_key("kp"))
        .await
        .expect("send");
    let mut offset = 0;
    let original = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty())
        .await
        .remove(0);
    let origin_id = prop(&original, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .unwrap()
        .to_string();
    let before = now_ms();
    let mut raw = server.raw().await;
    let r = raw
        .request(send_back(original.physical_offset, group, -1, &origin_id))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "send back: {r:?}");
    let dq = server
        .wait_route(&format!("%DLQ%{group}"), 1)
        .await
        .remove(0);
    let mut dlq_offset = 0;
    let dead = pull_until(&consumer, &dq, &mut dlq_offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    // No delay level was applied: it is there well before level 3 (3 s) would allow.
    assert!(
        dead.store_timestamp < before + 3000,
        "dead-lettered only after {} ms",
        dead.store_timestamp - before
    );
    assert_eq!(dead.reconsume_times, 1);
    assert_eq!(prop(dead, keys::DLQ_ORIGIN_TOPIC), Some(topic));
    assert_eq!(prop(dead, keys::RETRY_TOPIC), Some(topic));
    assert_same_content(dead, &original);
    // And never in the retry topic.
    assert!(server.stored(&format!("%RETRY%{group}"), 0).is_empty());
    assert!(server.stored("SCHEDULE_TOPIC_XXXX", 2).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_back_of_a_missing_offset_is_refused() {
    let server = server().await;
    let topic = "RetryMissing";
    let group = "CG_retry_missing";
    server.create_topic(topic, 1).await;
    let producer = server.producer("PG_retry_missing");
    producer
        .send(&Message::new(topic, "x"))
        .await
        .expect("send");
    let mut raw = RawConn::connect(&server.broker_addr()).await;
    for bad in [1i64 << 40, -5] {
        let r = raw.request(send_back(bad, group, 0, "NOPE")).await;
        assert_ne!(r.code, response_code::SUCCESS, "offset {bad}: {r:?}");
        assert!(
            r.remark.as_deref().is_some_and(|s| !s.is_empty()),
            "offset {bad}: no remark"
        );
    }
    // No side effect: nothing parked for a retry, nothing dead-lettered.
    let broker = server.broker();
    for level in 0..6 {
        assert_eq!(broker.store().max_offset("SCHEDULE_TOPIC_XXXX", level), 0);
    }
    assert_eq!(broker.store().max_offset(&format!("%DLQ%{group}"), 0), 0);
}

/// RocketMQ allows retry and dead-letter topic names up to 255 characters (ordinary topics up
/// to 127): a group with a 248-character name gets a 255-character `%RETRY%` topic, which the
/// client, the broker and the store all accept, and its 253-character `%DLQ%` topic too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_and_dlq_topics_of_255_characters_work_end_to_end() {
    let server = server().await;
    let topic = "RetryLongGroup";
    let group = format!("CG_{}", "g".repeat(245));
    let retry_topic = format!("%RETRY%{group}");
    let dlq_topic = format!("%DLQ%{group}");
    assert_eq!(retry_topic.len(), 255);
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_long");
    let consumer = server.consumer(&group);
    producer
        .send(&Message::new(topic, "long group").with_tags("L"))
        .await
        .expect("send");
    let mut offset = 0;
    let original = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty())
        .await
        .remove(0);
    let origin_id = prop(&original, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        .unwrap()
        .to_string();
    let mut raw = server.raw().await;
    let r = raw
        .request(send_back(original.physical_offset, &group, 1, &origin_id))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "send back: {r:?}");
    let rq = server.wait_route(&retry_topic, 1).await.remove(0);
    let mut retry_offset = 0;
    let retried = pull_until(&consumer, &rq, &mut retry_offset, DEADLINE, |g| {
        !g.is_empty()
    })
    .await;
    assert_eq!(retried.len(), 1, "{retried:?}");
    assert_eq!(retried[0].topic, retry_topic);
    assert_same_content(&retried[0], &original);

    // A producer may write to the 255-character topic directly, as RocketMQ allows.
    producer
        .send(&Message::new(retry_topic.as_str(), "direct").with_tags("D"))
        .await
        .expect("send to the 255-character retry topic");
    let direct = pull_until(&consumer, &rq, &mut retry_offset, DEADLINE, |g| {
        !g.is_empty()
    })
    .await;
    assert_eq!(direct.len(), 1, "{direct:?}");
    assert_eq!(&direct[0].body[..], b"direct");

    let r = raw
        .request(send_back(
            retried[0].physical_offset,
            &group,
            -1,
            &origin_id,
        ))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "dead-letter: {r:?}");
    let dq = server.wait_route(&dlq_topic, 1).await.remove(0);
    let mut dlq_offset = 0;
    let dead = pull_until(&consumer, &dq, &mut dlq_offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].topic, dlq_topic);

    // One character more is refused (by the client, with the same rule the broker applies).
    let too_long = format!("{retry_topic}x");
    let err = producer
        .send(&Message::new(too_long.as_str(), "x"))
        .await
        .expect_err("a 256-character retry topic is refused");
    assert!(err.to_string().contains("255"), "{err}");
}
