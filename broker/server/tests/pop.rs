//! Pop consumption over the remoting codes, as RocketMQ 5's clients send them: a popped
//! message stays invisible to the group until it is acknowledged, comes back (through the
//! group's pop retry topic, one reconsume time more) when its invisible time passes, can have
//! that time changed, goes to the dead-letter queue past the group's retryMaxTimes, and
//! survives a broker restart between pop and ack: acknowledged messages do not come back,
//! unacknowledged ones do. An orderly pop keeps one batch in flight per queue.

mod common;

use std::time::Duration;

use common::{RawConn, TestServer, DEADLINE};
use conveyor_client::Message;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{decode_records, keys, StoredMessage};
use tokio::time::Instant;

/// One popped message and the handle a client builds for it (ExtraInfoUtil's way).
#[derive(Debug, Clone)]
struct Got {
    msg: StoredMessage,
    /// The topic to acknowledge on (the pop retry topic for retried messages).
    ack_topic: String,
    extra: String,
}

fn pop_request(
    group: &str,
    topic: &str,
    max: i32,
    invisible_ms: i64,
    poll_ms: i64,
    order: bool,
) -> RemotingCommand {
    RemotingCommand::request(request_code::POP_MESSAGE, Default::default())
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", -1)
        .with_ext("maxMsgNums", max)
        .with_ext("invisibleTime", invisible_ms)
        .with_ext("pollTime", poll_ms)
        .with_ext("bornTime", common::now_ms())
        .with_ext("initMode", 0)
        .with_ext("expType", "TAG")
        .with_ext("exp", "*")
        .with_ext("order", order)
}

/// Pops as the Java client does and builds each message's handle from the answer's header.
async fn pop(
    raw: &mut RawConn,
    group: &str,
    topic: &str,
    max: i32,
    invisible_ms: i64,
    poll_ms: i64,
    order: bool,
) -> Vec<Got> {
    let r = raw
        .request(pop_request(group, topic, max, invisible_ms, poll_ms, order))
        .await;
    if r.code == response_code::POLLING_TIMEOUT {
        return Vec::new();
    }
    assert_eq!(r.code, response_code::SUCCESS, "pop: {:?}", r.remark);
    let field = |k: &str| r.get_str_opt(k).unwrap_or_default().to_string();
    let info = |k: &str| -> Vec<(String, String)> {
        field(k)
            .split(';')
            .filter(|e| !e.is_empty())
            .map(|e| {
                let p: Vec<&str> = e.split(' ').collect();
                assert_eq!(p.len(), 3, "{k} entry {e:?}");
                (format!("{}@{}", p[0], p[1]), p[2].to_string())
            })
            .collect()
    };
    let starts = info("startOffsetInfo");
    let offsets = info("msgOffsetInfo");
    let (pop_time, invisible, revive) =
        (field("popTime"), field("invisibleTime"), field("reviveQid"));
    let mut seen: std::collections::HashMap<String, usize> = Default::default();
    decode_records(&r.body)
        .expect("pop body decodes")
        .into_iter()
        .map(|msg| {
            assert_eq!(msg.topic, topic, "messages come under the topic popped");
            if let Some(ck) = msg.properties.get(keys::POP_CK) {
                let extra = ck.to_string();
                return Got {
                    ack_topic: format!("%RETRY%{group}_{topic}"),
                    msg,
                    extra,
                };
            }
            let key = format!("0@{}", msg.queue_id);
            let start = &starts
                .iter()
                .find(|(k, _)| *k == key)
                .expect("start offset")
                .1;
            let list = &offsets.iter().find(|(k, _)| *k == key).expect("offsets").1;
            let i = seen.entry(key).or_default();
            let offset = list
                .split(',')
                .nth(*i)
                .expect("offset for each message")
                .to_string();
            *i += 1;
            assert_eq!(offset, msg.queue_offset.to_string());
            let extra = format!(
                "{start} {pop_time} {invisible} {revive} 0 broker-a {} {offset}",
                msg.queue_id
            );
            Got {
                ack_topic: topic.to_string(),
                msg,
                extra,
            }
        })
        .collect()
}

fn handle_request(code: i32, group: &str, got: &Got) -> RemotingCommand {
    let f: Vec<&str> = got.extra.split(' ').collect();
    RemotingCommand::request(code, Default::default())
        .with_ext("consumerGroup", group)
        .with_ext("topic", got.ack_topic.as_str())
        .with_ext("queueId", f[6])
        .with_ext("offset", f[7])
        .with_ext("extraInfo", got.extra.as_str())
}

async fn ack(raw: &mut RawConn, group: &str, got: &Got) {
    let r = raw
        .request(handle_request(request_code::ACK_MESSAGE, group, got))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "ack: {:?}", r.remark);
}

/// Pops until `n` messages arrived (or the deadline passes), acknowledging none.
async fn pop_n(
    raw: &mut RawConn,
    group: &str,
    topic: &str,
    n: usize,
    invisible_ms: i64,
) -> Vec<Got> {
    let deadline = Instant::now() + DEADLINE;
    let mut all = Vec::new();
    while all.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} messages popped",
            all.len()
        );
        all.extend(pop(raw, group, topic, 32, invisible_ms, 1000, false).await);
    }
    all
}

fn body(m: &StoredMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

/// Sends `bodies` and waits until each is in its consume queue: SEND_OK comes before the
/// dispatch, and a pop sees only dispatched messages.
async fn send(server: &TestServer, topic: &str, bodies: &[&str]) {
    let producer = server.producer("PG_pop");
    let mut last = std::collections::HashMap::new();
    for b in bodies {
        let r = producer
            .send(&Message::new(topic, b.to_string()).with_tags("T"))
            .await
            .expect("send");
        last.insert(r.queue.queue_id, (r.queue, r.queue_offset));
    }
    let consumer = server.consumer("PG_pop");
    for (queue, offset) in last.values() {
        common::wait_max_offset(&consumer, queue, offset + 1).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_message_comes_back_once_its_invisible_time_passed_and_an_acknowledged_one_never(
) {
    let server = TestServer::start().await;
    let (topic, group) = ("PopTopic", "CG_pop");
    server.create_topic(topic, 2).await;
    send(&server, topic, &["a", "b"]).await;
    let mut raw = server.raw().await;
    let got = pop_n(&mut raw, group, topic, 2, 1000).await;
    assert!(got.iter().all(|g| g.msg.reconsume_times == 0));
    let (keep, drop): (Vec<_>, Vec<_>) = got.into_iter().partition(|g| body(&g.msg) == "a");
    ack(&mut raw, group, &keep[0]).await;
    // "b" comes back from the retry topic with one reconsume time more; "a" never does.
    let again = pop_n(&mut raw, group, topic, 1, 1000).await;
    assert_eq!(body(&again[0].msg), "b");
    assert_eq!(again[0].msg.reconsume_times, 1);
    assert!(
        again[0].extra.split(' ').nth(4) == Some("1"),
        "retry flag in {}",
        again[0].extra
    );
    assert_eq!(
        again[0]
            .msg
            .properties
            .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        drop[0]
            .msg
            .properties
            .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
        "the same message id"
    );
    ack(&mut raw, group, &again[0]).await;
    // Nothing comes back after both were acknowledged: wait past two invisible times.
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        let more = pop(&mut raw, group, topic, 32, 1000, 500, false).await;
        assert!(
            more.is_empty(),
            "acknowledged messages came back: {:?}",
            more.iter().map(|g| body(&g.msg)).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_invisible_time_holds_the_message_and_the_new_handle_acknowledges_it() {
    let server = TestServer::start().await;
    let (topic, group) = ("PopChange", "CG_change");
    server.create_topic(topic, 1).await;
    send(&server, topic, &["x"]).await;
    let mut raw = server.raw().await;
    let got = pop_n(&mut raw, group, topic, 1, 1000).await.remove(0);
    let r = raw
        .request(
            handle_request(request_code::CHANGE_MESSAGE_INVISIBLETIME, group, &got)
                .with_ext("invisibleTime", 4000),
        )
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let (pop_time, invisible, revive) = (
        r.get_str_opt("popTime").unwrap().to_string(),
        r.get_str_opt("invisibleTime").unwrap().to_string(),
        r.get_str_opt("reviveQid").unwrap().to_string(),
    );
    assert_eq!(invisible, "4000");
    // Past the first invisible time it is still held.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert!(
            pop(&mut raw, group, topic, 32, 1000, 300, false)
                .await
                .is_empty(),
            "redelivered before the new time"
        );
    }
    let offset = got.msg.queue_offset;
    let renewed = Got {
        extra: format!("{offset} {pop_time} {invisible} {revive} 0 broker-a 0 {offset}"),
        ..got
    };
    ack(&mut raw, group, &renewed).await;
    let quiet = Instant::now() + Duration::from_secs(3);
    while Instant::now() < quiet {
        assert!(
            pop(&mut raw, group, topic, 32, 1000, 500, false)
                .await
                .is_empty(),
            "acknowledged by the new handle, yet back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_retry_max_times_a_popped_message_goes_to_the_dead_letter_queue() {
    let server = TestServer::start().await;
    let (topic, group) = ("PopDlq", "CG_dlq");
    server.create_topic(topic, 1).await;
    let mut raw = server.raw().await;
    let r = raw
        .request(
            RemotingCommand::request(
                request_code::UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                Default::default(),
            )
            .with_body(format!(
                r#"{{"groupName":"{group}","retryMaxTimes":1,"retryQueueNums":1}}"#
            )),
        )
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    send(&server, topic, &["doomed"]).await;
    // Delivered twice (reconsume times 0 and 1), never acknowledged, then dead-lettered.
    for attempt in 0..2 {
        let got = pop_n(&mut raw, group, topic, 1, 1000).await;
        assert_eq!(got[0].msg.reconsume_times, attempt);
    }
    let dlq = format!("%DLQ%{group}");
    common::wait_until("the message in the DLQ", DEADLINE, || async {
        !server.stored(&dlq, 0).is_empty()
    })
    .await;
    let dead = server.stored(&dlq, 0).remove(0);
    assert_eq!(body(&dead), "doomed");
    assert_eq!(dead.properties.get(keys::DLQ_ORIGIN_TOPIC), Some(topic));
    assert!(
        pop(&mut raw, group, topic, 32, 1000, 1500, false)
            .await
            .is_empty(),
        "not delivered a third time"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_between_pop_and_ack_loses_nothing_and_brings_back_nothing_acknowledged() {
    let mut server = TestServer::start().await;
    let (topic, group) = ("PopRestart", "CG_restart");
    server.create_topic(topic, 1).await;
    send(
        &server,
        topic,
        &["acked-before", "acked-after", "never-acked"],
    )
    .await;
    let mut raw = server.raw().await;
    let got = pop_n(&mut raw, group, topic, 3, 3000).await;
    let find = |b: &str| got.iter().find(|g| body(&g.msg) == b).unwrap().clone();
    ack(&mut raw, group, &find("acked-before")).await;
    drop(raw);
    server.restart().await;
    let mut raw = server.raw().await;
    // The handle from before the restart still acknowledges (the checkpoint was replayed).
    common::wait_until("pops served again", DEADLINE, || {
        let server = &server;
        async move {
            let mut raw = server.raw().await;
            let r = raw
                .request(handle_request(
                    request_code::ACK_MESSAGE,
                    group,
                    &find("acked-after"),
                ))
                .await;
            r.code == response_code::SUCCESS
        }
    })
    .await;
    let again = pop_n(&mut raw, group, topic, 1, 1000).await;
    assert_eq!(
        body(&again[0].msg),
        "never-acked",
        "only the unacknowledged message comes back"
    );
    ack(&mut raw, group, &again[0]).await;
    let quiet = Instant::now() + Duration::from_secs(4);
    while Instant::now() < quiet {
        let more = pop(&mut raw, group, topic, 32, 1000, 500, false).await;
        assert!(
            more.is_empty(),
            "came back: {:?}",
            more.iter().map(|g| body(&g.msg)).collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_pop_keeps_one_batch_in_flight_per_queue_and_redelivers_it_in_place() {
    let server = TestServer::start().await;
    let (topic, group) = ("PopOrder", "CG_order");
    server.create_topic(topic, 1).await;
    send(&server, topic, &["1", "2", "3"]).await;
    let mut raw = server.raw().await;
    let deadline = Instant::now() + DEADLINE;
    let first = pop_orderly_until_some(&mut raw, group, topic, 2, deadline, "nothing popped").await;
    assert_eq!(
        first.iter().map(|g| body(&g.msg)).collect::<Vec<_>>(),
        ["1", "2"]
    );
    // Locked: nothing while the batch is in flight.
    assert!(pop(&mut raw, group, topic, 2, 1500, 300, true)
        .await
        .is_empty());
    // Not acknowledged: the same batch again, in place.
    let again = pop_orderly_until_some(
        &mut raw,
        group,
        topic,
        2,
        deadline,
        "the batch never came back",
    )
    .await;
    assert_eq!(
        again.iter().map(|g| body(&g.msg)).collect::<Vec<_>>(),
        ["1", "2"]
    );
    for g in &again {
        ack(&mut raw, group, g).await;
    }
    let next = pop(&mut raw, group, topic, 2, 1500, 2000, true).await;
    assert_eq!(next.iter().map(|g| body(&g.msg)).collect::<Vec<_>>(), ["3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_invisible_time_in_an_orderly_batch_keeps_the_queue_locked_and_every_handle_valid(
) {
    let server = TestServer::start().await;
    let (topic, group) = ("PopOrderChange", "CG_order_change");
    server.create_topic(topic, 1).await;
    send(&server, topic, &["1", "2", "3", "4"]).await;
    let mut raw = server.raw().await;
    let deadline = Instant::now() + DEADLINE;
    let batch = pop_orderly_until_some(&mut raw, group, topic, 3, deadline, "nothing popped").await;
    assert_eq!(
        batch.iter().map(|g| body(&g.msg)).collect::<Vec<_>>(),
        ["1", "2", "3"]
    );
    // A push consumer renews every message it holds: the third, then the first.
    let renewed_3 = change_invisible(&mut raw, group, &batch[2], 4000).await;
    let renewed_1 = change_invisible(&mut raw, group, &batch[0], 4000).await;
    // Past the first invisible time the queue is still locked: nothing new, nothing again.
    let until = Instant::now() + Duration::from_millis(2500);
    while Instant::now() < until {
        assert_locked(&mut raw, group, topic).await;
    }
    ack(&mut raw, group, &renewed_1).await;
    assert_locked(&mut raw, group, topic).await;
    ack(&mut raw, group, &batch[1]).await;
    assert_locked(&mut raw, group, topic).await;
    ack(&mut raw, group, &renewed_3).await;
    let next = pop(&mut raw, group, topic, 3, 1500, 2000, true).await;
    assert_eq!(next.iter().map(|g| body(&g.msg)).collect::<Vec<_>>(), ["4"]);
}

/// Changes a message's invisible time; returns it with the new handle the answer gives.
async fn change_invisible(raw: &mut RawConn, group: &str, got: &Got, invisible_ms: i64) -> Got {
    let r = raw
        .request(
            handle_request(request_code::CHANGE_MESSAGE_INVISIBLETIME, group, got)
                .with_ext("invisibleTime", invisible_ms),
        )
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    let mut f: Vec<String> = got.extra.split(' ').map(str::to_string).collect();
    f[1] = r.get_str_opt("popTime").unwrap().to_string();
    f[2] = r.get_str_opt("invisibleTime").unwrap().to_string();
    Got {
        extra: f.join(" "),
        ..got.clone()
    }
}

/// Pops orderly (1.5 s invisible) until a batch of at most `max` comes; `what` if none by
/// `deadline`.
async fn pop_orderly_until_some(
    raw: &mut RawConn,
    group: &str,
    topic: &str,
    max: i32,
    deadline: Instant,
    what: &str,
) -> Vec<Got> {
    loop {
        let g = pop(raw, group, topic, max, 1500, 500, true).await;
        if !g.is_empty() {
            return g;
        }
        assert!(Instant::now() < deadline, "{what}");
    }
}

/// An orderly pop of a queue whose batch is in flight gives nothing.
async fn assert_locked(raw: &mut RawConn, group: &str, topic: &str) {
    let g = pop(raw, group, topic, 3, 1500, 300, true).await;
    assert!(
        g.is_empty(),
        "popped while the batch is held: {:?}",
        g.iter().map(|g| body(&g.msg)).collect::<Vec<_>>()
    );
}
