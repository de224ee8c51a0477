//! Transactional messages through the broker (docs/protocol.md §8): half messages stay
//! invisible; END_TRANSACTION commits exactly once or rolls back; bad decisions are refused
//! without side effects; undecided halves are checked back on a connection of their producer
//! group, given up on after the max check count, and survive a broker restart.

mod common;

use std::time::Duration;

use common::{
    next_request, now_ms, producer_heartbeat, prop, pull_for, pull_until, RawConn, TestServer,
    DEADLINE,
};
use conveyor_client::{Message, SendResult};
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{keys, parse_offset_msg_id, RecordView};
use conveyor_protocol::sysflag;

const HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";
const CHECK_MAX_TOPIC: &str = "TRANS_CHECK_MAX_TIME_TOPIC";

/// Commit-log offset of a half message from its SEND result.
fn phys(r: &SendResult) -> i64 {
    parse_offset_msg_id(&r.offset_msg_id)
        .expect("offset msg id")
        .1
}

/// An END_TRANSACTION request as the Java client sends it.
fn end_tx(
    group: &str,
    queue_offset: i64,
    commit_log_offset: i64,
    decision: i32,
    from_check: bool,
    uniq: &str,
) -> RemotingCommand {
    RemotingCommand::request(request_code::END_TRANSACTION, Default::default())
        .with_ext("producerGroup", group)
        .with_ext("tranStateTableOffset", queue_offset)
        .with_ext("commitLogOffset", commit_log_offset)
        .with_ext("commitOrRollback", decision)
        .with_ext("fromTransactionCheck", from_check)
        .with_ext("msgId", uniq)
        .with_ext("transactionId", uniq)
}

fn body(m: &conveyor_client::StoredMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_invisible_commit_once_rollback_never_bad_offsets_refused() {
    // Default timeouts: no check-back interferes within the test.
    let server = TestServer::start().await;
    let topic = "TxVisibility";
    let group = "PG_tx_visibility";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer(group);
    let consumer = server.consumer("CG_tx_visibility");

    let mut halves = Vec::new();
    for b in ["commit-me", "roll-me-back", "commit-later"] {
        let msg = Message::new(topic, b).with_tags("TxTag").with_key(b);
        halves.push(producer.send_half(&msg).await.expect("send half"));
    }
    // Parked in the half topic with their real destination...
    common::wait_until("three half messages parked", DEADLINE, || {
        let n = server.stored(HALF_TOPIC, 0).len();
        async move { n >= 3 }
    })
    .await;
    let parked = server.stored(HALF_TOPIC, 0);
    assert_eq!(parked.len(), 3, "three half messages parked");
    for m in &parked {
        assert_eq!(prop(m, keys::REAL_TOPIC), Some(topic));
        assert_eq!(prop(m, keys::PRODUCER_GROUP), Some(group));
    }
    // ...and invisible in the real topic, also after a while.
    let mut offset = 0;
    let early = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1500)).await;
    assert!(early.is_empty(), "half messages delivered: {early:?}");

    // END_TRANSACTION for offsets that hold no half message: error with a remark.
    let mut raw = server.raw().await;
    let normal = producer
        .send(&Message::new(topic, "plain"))
        .await
        .expect("send plain");
    let bad_offsets = [
        (1i64 << 40, "beyond the commit log"),
        (phys(&normal), "a normal message"),
        (-1, "negative"),
    ];
    for (bad, what) in bad_offsets {
        let r = raw
            .request(end_tx(
                group,
                halves[2].queue_offset,
                bad,
                sysflag::TRANSACTION_COMMIT_TYPE,
                false,
                "X",
            ))
            .await;
        assert_eq!(r.code, response_code::SYSTEM_ERROR, "{what}: {r:?}");
        assert!(
            r.remark.as_deref().is_some_and(|s| !s.is_empty()),
            "{what}: no remark"
        );
    }
    // Right offset, wrong group or wrong queue offset: refused as well.
    let r = raw
        .request(end_tx(
            "PG_someone_else",
            halves[2].queue_offset,
            phys(&halves[2]),
            sysflag::TRANSACTION_COMMIT_TYPE,
            false,
            "X",
        ))
        .await;
    assert_eq!(r.code, response_code::SYSTEM_ERROR, "wrong group: {r:?}");
    let r = raw
        .request(end_tx(
            group,
            halves[2].queue_offset + 7,
            phys(&halves[2]),
            sysflag::TRANSACTION_COMMIT_TYPE,
            false,
            "X",
        ))
        .await;
    assert_eq!(
        r.code,
        response_code::SYSTEM_ERROR,
        "wrong queue offset: {r:?}"
    );

    // Only the plain message is visible.
    let plain = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(plain.len(), 1);
    assert_eq!(body(&plain[0]), "plain");

    producer
        .end_transaction(&halves[0], true)
        .await
        .expect("commit");
    producer
        .end_transaction(&halves[1], false)
        .await
        .expect("rollback");
    // A repeated commit, and a commit after a rollback, are harmless.
    producer
        .end_transaction(&halves[0], true)
        .await
        .expect("second commit");
    producer
        .end_transaction(&halves[1], true)
        .await
        .expect("commit after rollback");
    producer
        .end_transaction(&halves[2], true)
        .await
        .expect("commit the other pending half");

    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| g.len() >= 2).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1500)).await;
    let all: Vec<_> = got.iter().chain(&late).collect();
    let bodies: Vec<String> = all.iter().map(|m| body(m)).collect();
    assert_eq!(
        bodies,
        ["commit-me", "commit-later"],
        "delivered: {bodies:?}"
    );
    for (m, half) in all.iter().zip([&halves[0], &halves[2]]) {
        assert_eq!(m.topic, topic);
        assert_eq!(m.queue_id, q.queue_id);
        assert_eq!(prop(m, keys::TAGS), Some("TxTag"));
        assert_eq!(
            prop(m, keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            Some(half.msg_id.as_str())
        );
        assert_eq!(prop(m, keys::TRANSACTION_PREPARED), None);
        assert_eq!(prop(m, keys::REAL_TOPIC), None);
        assert_eq!(
            sysflag::transaction_type(m.sys_flag),
            sysflag::TRANSACTION_COMMIT_TYPE
        );
        assert_eq!(m.prepared_transaction_offset, phys(half));
    }
    // Exactly three records in the real queue: plain + two commits.
    assert_eq!(consumer.max_offset(&q).await.expect("max offset"), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_of_one_half_deliver_it_once() {
    let server = TestServer::start().await;
    let topic = "TxRace";
    let group = "PG_tx_race";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer(group);
    let consumer = server.consumer("CG_tx_race");
    let rounds = 20;
    for i in 0..rounds {
        let half = producer
            .send_half(&Message::new(topic, format!("race-{i}")))
            .await
            .expect("send half");
        let (qo, po, uniq) = (half.queue_offset, phys(&half), half.msg_id.clone());
        // Several connections commit the same half at once (a check-back answer racing the
        // producer's own END_TRANSACTION).
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let addr = server.broker_addr();
            let uniq = uniq.clone();
            tasks.push(tokio::spawn(async move {
                let mut c = RawConn::connect(&addr).await;
                c.request(end_tx(
                    group,
                    qo,
                    po,
                    sysflag::TRANSACTION_COMMIT_TYPE,
                    true,
                    &uniq,
                ))
                .await
                .code
            }));
        }
        for t in tasks {
            assert_eq!(t.await.expect("task"), response_code::SUCCESS);
        }
    }
    let mut offset = 0;
    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| g.len() >= rounds).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(500)).await;
    let mut bodies: Vec<String> = got.iter().chain(&late).map(body).collect();
    let n = bodies.len();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), rounds, "not every half was committed");
    assert_eq!(n, rounds, "a half message was committed more than once");
}

/// Reads the next CHECK_TRANSACTION_STATE request for half queue offset `qo` on `conn`.
async fn next_check_for(conn: &mut RawConn, qo: i64) -> RemotingCommand {
    loop {
        let check = next_request(conn, request_code::CHECK_TRANSACTION_STATE, DEADLINE)
            .await
            .expect("a CHECK_TRANSACTION_STATE request in time");
        if check
            .get_i64("tranStateTableOffset")
            .expect("tranStateTableOffset")
            == qo
        {
            return check;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undecided_half_is_checked_back_on_the_group_connection() {
    let server = TestServer::start_with(|cfg| {
        cfg.broker.transaction_timeout_ms = 500;
        cfg.broker.transaction_check_interval_ms = 1000;
        cfg.broker.transaction_check_max = 10;
    })
    .await;
    let topic = "TxCheckBack";
    let group = "PG_tx_check";
    let q = server.create_topic(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_tx_check");

    let mut hb = server.raw().await;
    let r = hb
        .request(producer_heartbeat("127.0.0.1@check", group))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "heartbeat: {r:?}");

    let producer = server.producer(group);
    let msg = Message::new(topic, "checked-back")
        .with_tags("T1")
        .with_key("k-check")
        .with_property("biz", "42");
    let before = now_ms();
    let half = producer.send_half(&msg).await.expect("send half");

    let check = next_check_for(&mut hb, half.queue_offset).await;
    assert!(check.is_oneway(), "checks are oneway");
    assert!(
        now_ms() >= before + 500,
        "checked before the transaction timeout"
    );
    assert_eq!(check.get_i64("commitLogOffset").unwrap(), phys(&half));
    assert_eq!(check.ext("transactionId"), Some(half.msg_id.as_str()));
    assert_eq!(check.ext("msgId"), Some(half.msg_id.as_str()));
    assert_eq!(check.ext("offsetMsgId"), Some(half.offset_msg_id.as_str()));
    let view = RecordView::parse(&check.body).expect("check body is a record");
    let m = view.to_message().expect("record decodes");
    assert_eq!(m.topic, topic, "the check shows the REAL topic");
    assert_eq!(m.queue_id, q.queue_id);
    assert_eq!(&m.body[..], b"checked-back");
    assert_eq!(prop(&m, keys::PRODUCER_GROUP), Some(group));
    assert_eq!(prop(&m, "biz"), Some("42"));
    assert_eq!(prop(&m, keys::KEYS), Some("k-check"));
    assert_eq!(m.queue_offset, half.queue_offset);
    assert_eq!(m.physical_offset, phys(&half));

    // Not visible until answered.
    let mut offset = 0;
    assert!(
        pull_for(&consumer, &q, &mut offset, Duration::from_millis(300))
            .await
            .is_empty()
    );

    let answer = end_tx(
        group,
        check.get_i64("tranStateTableOffset").unwrap(),
        check.get_i64("commitLogOffset").unwrap(),
        sysflag::TRANSACTION_COMMIT_TYPE,
        true,
        check.ext("transactionId").unwrap(),
    );
    let r = hb.request(answer).await;
    assert_eq!(r.code, response_code::SUCCESS, "END_TRANSACTION: {r:?}");

    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(got.len(), 1);
    assert_eq!(&got[0].body[..], b"checked-back");
    // Decided: no further checks, no duplicate.
    assert!(
        next_request(
            &mut hb,
            request_code::CHECK_TRANSACTION_STATE,
            Duration::from_millis(2500)
        )
        .await
        .is_none(),
        "a decided half message was checked again"
    );
    assert!(
        pull_for(&consumer, &q, &mut offset, Duration::from_millis(300))
            .await
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unanswered_checks_send_the_half_to_the_check_max_topic() {
    let check_max = 2;
    let server = TestServer::start_with(move |cfg| {
        cfg.broker.transaction_timeout_ms = 500;
        cfg.broker.transaction_check_interval_ms = 500;
        cfg.broker.transaction_check_max = check_max;
    })
    .await;
    let topic = "TxCheckMax";
    let group = "PG_tx_check_max";
    let q = server.create_topic(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_tx_check_max");
    let mut hb = server.raw().await;
    let r = hb
        .request(producer_heartbeat("127.0.0.1@checkmax", group))
        .await;
    assert_eq!(r.code, response_code::SUCCESS);
    let producer = server.producer(group);
    let half = producer
        .send_half(&Message::new(topic, "never-decided").with_key("k-max"))
        .await
        .expect("send half");

    // Count the checks until the half is given up on.
    let mut checks = 0;
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while server.stored(CHECK_MAX_TOPIC, 0).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not discarded in time"
        );
        if next_request(
            &mut hb,
            request_code::CHECK_TRANSACTION_STATE,
            Duration::from_millis(100),
        )
        .await
        .is_some()
        {
            checks += 1;
        }
    }
    while next_request(
        &mut hb,
        request_code::CHECK_TRANSACTION_STATE,
        Duration::from_millis(300),
    )
    .await
    .is_some()
    {
        checks += 1;
    }
    assert_eq!(checks, check_max, "checks before giving up");
    let discarded = server.stored(CHECK_MAX_TOPIC, 0);
    assert_eq!(discarded.len(), 1);
    assert_eq!(&discarded[0].body[..], b"never-decided");
    assert_eq!(prop(&discarded[0], keys::REAL_TOPIC), Some(topic));

    // Never delivered, not even by a late commit.
    let mut offset = 0;
    let early = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1000)).await;
    assert!(early.is_empty(), "discarded half delivered: {early:?}");
    let r = hb
        .request(end_tx(
            group,
            half.queue_offset,
            phys(&half),
            sysflag::TRANSACTION_COMMIT_TYPE,
            false,
            &half.msg_id,
        ))
        .await;
    assert_eq!(r.code, response_code::SUCCESS, "late commit: {r:?}");
    assert!(
        pull_for(&consumer, &q, &mut offset, Duration::from_millis(1000))
            .await
            .is_empty()
    );
    assert_eq!(consumer.max_offset(&q).await.expect("max offset"), 0);
    assert_eq!(server.stored(CHECK_MAX_TOPIC, 0).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pending_halves_are_resolved_after_a_restart() {
    let mut server = TestServer::start_with(|cfg| {
        cfg.broker.transaction_timeout_ms = 500;
        cfg.broker.transaction_check_interval_ms = 1000;
        cfg.broker.transaction_check_max = 15;
    })
    .await;
    let topic = "TxRestart";
    let group = "PG_tx_restart";
    server.create_topic(topic, 1).await;
    let producer = server.producer(group);
    let by_check = producer
        .send_half(&Message::new(topic, "resolved-by-check"))
        .await
        .expect("send half");
    let by_end = producer
        .send_half(&Message::new(topic, "resolved-by-end"))
        .await
        .expect("send half");
    let decided = producer
        .send_half(&Message::new(topic, "committed-before"))
        .await
        .expect("send half");
    producer
        .end_transaction(&decided, true)
        .await
        .expect("commit before restart");
    producer.close();

    server.restart().await;
    let q = server.wait_route(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_tx_restart");

    // A check-back arrives on a connection registered after the restart.
    let mut hb = server.raw().await;
    let r = hb
        .request(producer_heartbeat("127.0.0.1@restart", group))
        .await;
    assert_eq!(r.code, response_code::SUCCESS);
    let check = next_check_for(&mut hb, by_check.queue_offset).await;
    let m = RecordView::parse(&check.body)
        .and_then(|v| v.to_message())
        .expect("check body");
    assert_eq!(m.topic, topic);
    assert_eq!(&m.body[..], b"resolved-by-check");
    let r = hb
        .request(end_tx(
            group,
            by_check.queue_offset,
            check.get_i64("commitLogOffset").unwrap(),
            sysflag::TRANSACTION_COMMIT_TYPE,
            true,
            check.ext("transactionId").unwrap(),
        ))
        .await;
    assert_eq!(r.code, response_code::SUCCESS);
    // END_TRANSACTION from a new producer still works for the other one.
    let producer = server.producer(group);
    producer
        .end_transaction(&by_end, true)
        .await
        .expect("commit after restart");

    let mut offset = 0;
    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| g.len() >= 3).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1500)).await;
    let mut bodies: Vec<String> = got.iter().chain(&late).map(body).collect();
    bodies.sort();
    assert_eq!(
        bodies,
        ["committed-before", "resolved-by-check", "resolved-by-end"],
        "each committed exactly once"
    );
    // The half decided before the restart is not checked again.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
    while let Some(c) = next_request(
        &mut hb,
        request_code::CHECK_TRANSACTION_STATE,
        deadline.saturating_duration_since(tokio::time::Instant::now()),
    )
    .await
    {
        assert_ne!(
            c.get_i64("tranStateTableOffset").unwrap(),
            decided.queue_offset,
            "a half decided before the restart was checked back"
        );
    }
}
