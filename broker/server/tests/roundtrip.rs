//! Produce and consume through the Rust client against the real in-process broker: single and
//! batch sends, everything a producer sets coming back byte-for-byte, tag filtering, lookups
//! by key / unique key / offset message id, queue offsets and search by time.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{now_ms, wait_max_offset, wait_until, TestServer, DEADLINE};
use conveyor_client::consumer::{PullHeader, PullOptions};
use conveyor_client::{Message, PullStatus, SendStatus, StoredMessage, Subscription};
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{decode_records, keys, offset_msg_id};

/// What was sent, to compare with what comes back.
struct Sent {
    msg: Message,
    uniq: String,
    offset_msg_id: String,
}

fn binary_body(seed: u8) -> Bytes {
    // Every byte value, including 0x00, 0x01, 0x02 and invalid UTF-8.
    (0..=255u8)
        .map(|b| b.wrapping_add(seed))
        .chain([seed, 0xFF, 0x00])
        .collect::<Vec<u8>>()
        .into()
}

fn assert_same(got: &StoredMessage, sent: &Message, uniq: &str) {
    assert_eq!(got.topic, sent.topic);
    assert_eq!(got.body, sent.body, "body must come back byte-for-byte");
    assert_eq!(got.flag, sent.flag, "flag");
    assert_eq!(got.properties.get(keys::TAGS), sent.tags.as_deref(), "tags");
    let want_keys = (!sent.keys.is_empty()).then(|| sent.keys.join(" "));
    assert_eq!(got.properties.get(keys::KEYS), want_keys.as_deref(), "keys");
    for (k, v) in sent.properties.iter() {
        assert_eq!(got.properties.get(k), Some(v), "property {k:?}");
    }
    assert_eq!(
        got.properties.get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        Some(uniq)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_consume_round_trip() {
    let server = TestServer::start().await;
    let topic = "RoundTrip";
    let queues = server.create_topic(topic, 1).await;
    let q = &queues[0];
    let producer = server.producer("PG_roundtrip");
    let consumer = server.consumer("CG_roundtrip");

    // Single sends with tags A, B, C; unusual but legal property content.
    let mut sent: Vec<Sent> = Vec::new();
    for (i, tag) in ["A", "B", "C", "A"].into_iter().enumerate() {
        let msg = Message::new(topic, binary_body(i as u8))
            .with_tags(tag)
            .with_keys([format!("key-{i}"), "shared-key".to_string()])
            .with_property("color", "red and blue")
            .with_property("unicode", "héllo ✓ \"quoted\" {json} \\ =:;,")
            .with_property("empty-ish", " ")
            .with_flag(1000 + i as i32);
        let r = producer.send(&msg).await.expect("send");
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.queue.queue_id, 0);
        assert_eq!(r.queue_offset, i as i64, "consecutive offsets");
        sent.push(Sent {
            msg,
            uniq: r.msg_id.clone(),
            offset_msg_id: r.offset_msg_id.clone(),
        });
    }

    // A batch: consecutive offsets, one UNIQ_KEY and offset id per message.
    let batch: Vec<Message> = ["B", "C", "A"]
        .into_iter()
        .enumerate()
        .map(|(i, tag)| {
            Message::new(topic, Bytes::from(format!("batch-{i}\u{0}\u{1}\u{2}end")))
                .with_tags(tag)
                .with_key(format!("batch-key-{i}"))
                .with_property("batch-index", i.to_string())
                .with_flag(i as i32)
        })
        .collect();
    let r = producer.send_batch(&batch).await.expect("batch send");
    assert_eq!(r.status, SendStatus::SendOk);
    assert_eq!(r.queue_offset, 4);
    let uniqs: Vec<&str> = r.msg_id.split(',').collect();
    let offset_ids: Vec<&str> = r.offset_msg_id.split(',').collect();
    assert_eq!(uniqs.len(), 3);
    assert_eq!(offset_ids.len(), 3, "one offset msg id per batch entry");
    for ((m, u), o) in batch.into_iter().zip(uniqs).zip(offset_ids) {
        sent.push(Sent {
            msg: m,
            uniq: u.to_string(),
            offset_msg_id: o.to_string(),
        });
    }
    let total = sent.len() as i64;
    wait_max_offset(&consumer, q, total).await;

    // Everything, in order.
    let all = consumer
        .pull(q, 0, 32, Duration::ZERO)
        .await
        .expect("pull all");
    assert_eq!(all.status, PullStatus::Found);
    assert_eq!(all.messages.len(), sent.len());
    assert_eq!(all.next_begin_offset, total);
    assert_eq!(all.max_offset, total);
    for (i, (got, s)) in all.messages.iter().zip(&sent).enumerate() {
        assert_eq!(got.queue_offset, i as i64);
        assert_same(got, &s.msg, &s.uniq);
        assert_eq!(
            offset_msg_id(got.store_host, got.physical_offset),
            s.offset_msg_id,
            "offset msg id of message {i}"
        );
    }

    // Tag filter `A || B` through the client.
    let filtered = consumer
        .pull_with(
            q,
            0,
            PullOptions {
                max_msgs: 32,
                subscription: Some(Subscription::parse("A || B").expect("expr")),
                ..PullOptions::default()
            },
        )
        .await
        .expect("filtered pull");
    let want: Vec<i64> = sent
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s.msg.tags.as_deref(), Some("A" | "B")))
        .map(|(i, _)| i as i64)
        .collect();
    let got: Vec<i64> = filtered.messages.iter().map(|m| m.queue_offset).collect();
    assert_eq!(got, want);
    // ...and the broker itself filters (the client re-filters, so check the raw answer).
    let header = PullHeader {
        consumer_group: "CG_roundtrip".into(),
        topic: topic.into(),
        queue_id: 0,
        queue_offset: 0,
        max_msg_nums: 32,
        sys_flag: conveyor_client::consumer::pull_sys_flag::SUBSCRIPTION,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("A || B".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
    };
    let raw = consumer
        .remoting()
        .invoke(
            &server.broker_addr(),
            RemotingCommand::request(request_code::PULL_MESSAGE, header.to_ext_fields()),
        )
        .await
        .expect("raw pull");
    assert_eq!(raw.code, response_code::SUCCESS);
    let raw_offsets: Vec<i64> = decode_records(&raw.body)
        .expect("records")
        .iter()
        .map(|m| m.queue_offset)
        .collect();
    assert_eq!(raw_offsets, want, "broker-side tag filtering");

    // Offsets.
    assert_eq!(consumer.min_offset(q).await.expect("min"), 0);
    assert_eq!(consumer.max_offset(q).await.expect("max"), total);

    // View by offset message id, for a single and a batch message.
    let admin = server.admin();
    for s in [&sent[1], &sent[5]] {
        let viewed = admin.view_message(&s.offset_msg_id).await.expect("view");
        assert_same(&viewed, &s.msg, &s.uniq);
    }

    // Query by key (the index is built asynchronously: wait for it).
    let begin = now_ms() - 3_600_000;
    let end = now_ms() + 3_600_000;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let by_key = loop {
        let found = admin
            .query_by_key(topic, "shared-key", 32, begin, end, false)
            .await
            .expect("query by key");
        if found.len() >= 4 || tokio::time::Instant::now() >= deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut offsets: Vec<i64> = by_key.iter().map(|m| m.queue_offset).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, [0, 1, 2, 3]);
    let one = admin
        .query_by_key(topic, "batch-key-1", 32, begin, end, false)
        .await
        .expect("query batch key");
    assert_eq!(one.len(), 1);
    assert_same(&one[0], &sent[5].msg, &sent[5].uniq);
    let by_uniq = admin
        .query_by_key(topic, &sent[2].uniq, 32, begin, end, true)
        .await
        .expect("query by unique key");
    assert_eq!(by_uniq.len(), 1);
    assert_same(&by_uniq[0], &sent[2].msg, &sent[2].uniq);
    let none = admin
        .query_by_key(topic, "no-such-key", 32, begin, end, false)
        .await
        .expect("query miss");
    assert!(none.is_empty());

    // Search by timestamp: send a second phase strictly after the first one's store times.
    let last_first_phase = all
        .messages
        .iter()
        .map(|m| m.store_timestamp)
        .max()
        .expect("messages");
    wait_until(
        "the clock passes the first phase",
        DEADLINE,
        || async move { now_ms() > last_first_phase },
    )
    .await;
    let second = producer
        .send(&Message::new(topic, "second phase").with_tags("Z"))
        .await
        .expect("second phase send");
    assert_eq!(second.queue_offset, total);
    wait_max_offset(&consumer, q, total + 1).await;
    let second_msg = consumer
        .pull(q, total, 1, Duration::ZERO)
        .await
        .expect("pull second phase");
    let ts2 = second_msg.messages[0].store_timestamp;
    assert!(ts2 > last_first_phase);
    assert_eq!(consumer.search_offset(q, ts2).await.expect("search"), total);
    assert_eq!(consumer.search_offset(q, 0).await.expect("search 0"), 0);
    assert_eq!(
        consumer
            .search_offset(q, ts2 + 3_600_000)
            .await
            .expect("search future"),
        total + 1,
        "a time after every message gives the max offset"
    );
    // Any first-phase timestamp gives the first message stored at or after it.
    for probe in &all.messages {
        let found = consumer
            .search_offset(q, probe.store_timestamp)
            .await
            .expect("search");
        let expect = all
            .messages
            .iter()
            .position(|m| m.store_timestamp >= probe.store_timestamp)
            .expect("exists") as i64;
        assert_eq!(found, expect, "search for {}", probe.store_timestamp);
    }

    // Pulling beyond the end.
    let past = consumer
        .pull(q, total + 1, 32, Duration::ZERO)
        .await
        .expect("pull at end");
    assert_eq!(past.status, PullStatus::NoNewMsg);
    assert_eq!(past.next_begin_offset, total + 1);

    let mut server = server;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_created_topic_round_trip() {
    let server = TestServer::start().await;
    let producer = server.producer("PG_auto");
    let topic = "AutoCreated";
    let r = producer
        .send(&Message::new(topic, "first").with_tags("T"))
        .await
        .expect("send to an unknown topic auto-creates it");
    assert_eq!(r.status, SendStatus::SendOk);
    // The route appears (the broker re-registers right after creating the topic).
    let admin = server.admin();
    let route = admin
        .wait_for_route(topic, DEADLINE)
        .await
        .expect("route of the auto-created topic");
    assert!(!route.queue_datas.is_empty());
    let consumer = server.consumer("CG_auto");
    wait_max_offset(&consumer, &r.queue, r.queue_offset + 1).await;
    let got = consumer
        .pull(&r.queue, r.queue_offset, 1, Duration::ZERO)
        .await
        .expect("pull");
    assert_eq!(got.status, PullStatus::Found);
    assert_eq!(got.messages[0].body, Bytes::from_static(b"first"));
    let mut server = server;
    server.stop().await;
}
