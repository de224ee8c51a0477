//! 5.x timer messages (docs/protocol.md §7): TIMER_DELAY_SEC / TIMER_DELIVER_MS deliver
//! at their due time, never earlier; a due time in the past delivers at once; a delay above
//! the broker's maximum is refused with 13; a restart neither loses a waiting timer nor
//! delivers it early, nor delivers an already delivered one again.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{now_ms, pull_for, pull_until, wait_until, TestServer, DEADLINE};
use conveyor_client::{ClientError, Message, StoredMessage};
use conveyor_protocol::code::response_code;
use conveyor_protocol::message::keys;

const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

async fn server() -> TestServer {
    TestServer::start_with(|cfg| cfg.broker.timer_max_delay_ms = 10_000).await
}

fn body(m: &StoredMessage) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timers_deliver_at_their_due_time_never_earlier() {
    let server = server().await;
    let topic = "TimerDue";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_timer");
    let consumer = server.consumer("CG_timer");

    let deliver_at = now_ms() + 2500;
    producer
        .send_to_queue(
            &Message::new(topic, "delay-sec")
                .with_tags("TT")
                .with_property(keys::TIMER_DELAY_SEC, "2"),
            &q,
        )
        .await
        .expect("send TIMER_DELAY_SEC");
    producer
        .send_to_queue(
            &Message::new(topic, "deliver-ms")
                .with_property(keys::TIMER_DELIVER_MS, deliver_at.to_string()),
            &q,
        )
        .await
        .expect("send TIMER_DELIVER_MS");
    let past_sent = now_ms();
    producer
        .send_to_queue(
            &Message::new(topic, "in-the-past")
                .with_property(keys::TIMER_DELIVER_MS, (now_ms() - 60_000).to_string()),
            &q,
        )
        .await
        .expect("send past TIMER_DELIVER_MS");

    // The past one is there at once, the others are parked.
    let mut offset = 0;
    let first = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(first.len(), 1, "only the past timer is due: {first:?}");
    assert_eq!(body(&first[0]), "in-the-past");
    assert!(
        first[0].store_timestamp - past_sent < 2000,
        "a past timer waited {} ms",
        first[0].store_timestamp - past_sent
    );
    assert_eq!(server.stored(TIMER_TOPIC, 0).len(), 2, "two timers parked");

    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| g.len() >= 2).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1000)).await;
    let by_body: HashMap<String, &StoredMessage> =
        got.iter().chain(&late).map(|m| (body(m), m)).collect();
    assert_eq!(got.len() + late.len(), 2, "each timer delivered once");
    let sec = by_body["delay-sec"];
    assert!(
        sec.store_timestamp >= sec.born_timestamp + 2000,
        "TIMER_DELAY_SEC=2 delivered {} ms after it was born",
        sec.store_timestamp - sec.born_timestamp
    );
    assert!(sec.store_timestamp - sec.born_timestamp < 2000 + 10_000);
    assert_eq!(sec.properties.get(keys::TAGS), Some("TT"));
    assert_eq!(sec.properties.get(keys::TIMER_DELAY_SEC), None);
    assert_eq!(sec.topic, topic);
    assert_eq!(sec.queue_id, q.queue_id);
    let ms = by_body["deliver-ms"];
    assert!(
        ms.store_timestamp >= deliver_at,
        "TIMER_DELIVER_MS delivered {} ms early",
        deliver_at - ms.store_timestamp
    );
    assert!(ms.store_timestamp - deliver_at < 10_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_above_the_maximum_is_refused() {
    let server = server().await;
    let topic = "TimerTooFar";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_timer_max");
    let consumer = server.consumer("CG_timer_max");
    for msg in [
        Message::new(topic, "sec").with_property(keys::TIMER_DELAY_SEC, "60"),
        Message::new(topic, "ms").with_property(keys::TIMER_DELAY_MS, "20000"),
        Message::new(topic, "at")
            .with_property(keys::TIMER_DELIVER_MS, (now_ms() + 3_600_000).to_string()),
    ] {
        match producer.send(&msg).await {
            Err(ClientError::Server { code, remark }) => {
                assert_eq!(code, response_code::MESSAGE_ILLEGAL, "{remark:?}");
                assert!(
                    remark.as_deref().is_some_and(|r| !r.is_empty()),
                    "no remark"
                );
            }
            other => panic!("a timer beyond the maximum was not refused: {other:?}"),
        }
    }
    // Within the maximum is fine.
    producer
        .send_to_queue(
            &Message::new(topic, "ok").with_property(keys::TIMER_DELAY_MS, "500"),
            &q,
        )
        .await
        .expect("a timer within the maximum");
    let mut offset = 0;
    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(500)).await;
    let bodies: Vec<String> = got.iter().chain(&late).map(body).collect();
    assert_eq!(bodies, ["ok"]);
    assert_eq!(server.stored(TIMER_TOPIC, 0).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_neither_loses_nor_hurries_nor_repeats_timers() {
    let mut server = server().await;
    let topic = "TimerRestart";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_timer_restart");
    let consumer = server.consumer("CG_timer_restart");
    producer
        .send_to_queue(
            &Message::new(topic, "before-restart").with_property(keys::TIMER_DELAY_MS, "300"),
            &q,
        )
        .await
        .expect("send short timer");
    producer
        .send_to_queue(
            &Message::new(topic, "across-restart").with_property(keys::TIMER_DELAY_SEC, "5"),
            &q,
        )
        .await
        .expect("send long timer");
    let mut offset = 0;
    let first = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(first.len(), 1);
    assert_eq!(body(&first[0]), "before-restart");
    producer.close();
    consumer.close();

    server.restart().await;
    let q = server.wait_route(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_timer_restart");
    let mut offset = 0;
    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| g.len() >= 2).await;
    let late = pull_for(&consumer, &q, &mut offset, Duration::from_millis(1500)).await;
    let all: Vec<&StoredMessage> = got.iter().chain(&late).collect();
    let bodies: Vec<String> = all.iter().map(|m| body(m)).collect();
    assert_eq!(
        bodies,
        ["before-restart", "across-restart"],
        "each timer delivered exactly once"
    );
    let across = all[1];
    assert!(
        across.store_timestamp >= across.born_timestamp + 5000,
        "delivered {} ms after it was born, before its 5 s",
        across.store_timestamp - across.born_timestamp
    );
}

/// RocketMQ's precedence (HookUtils.checkIfTimerMessage): a delay level wins over the timer
/// properties, which are dropped. A timer this broker would refuse alone (an hour, over its
/// 10 s maximum) therefore does not matter next to delay level 1 (1 s): the message waits in
/// the schedule topic, not the timer topic, and arrives after its level without them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_level_wins_over_a_timer() {
    let server = server().await;
    let topic = "TimerAndDelay";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_timer_delay");
    let consumer = server.consumer("CG_timer_delay");
    producer
        .send_to_queue(
            &Message::new(topic, "both")
                .with_property(keys::DELAY_TIME_LEVEL, "1")
                .with_property(keys::TIMER_DELAY_SEC, "3600"),
            &q,
        )
        .await
        .expect("a delay level with a timer is accepted");
    wait_until("the message parked on delay level 1", DEADLINE, || async {
        server.stored("SCHEDULE_TOPIC_XXXX", 0).len() == 1
    })
    .await;
    assert_eq!(server.stored(TIMER_TOPIC, 0).len(), 0, "no timer parked");
    let mut offset = 0;
    let got = pull_until(&consumer, &q, &mut offset, DEADLINE, |g| !g.is_empty()).await;
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert_eq!(body(m), "both");
    assert!(
        m.store_timestamp >= m.born_timestamp + 1000,
        "delivered {} ms after it was born, before its 1 s level",
        m.store_timestamp - m.born_timestamp
    );
    assert_eq!(m.properties.get(keys::TIMER_DELAY_SEC), None);
}

/// The runtime info's counts of delayed, timer and half messages (Conveyor's keys).
async fn parked(server: &TestServer) -> (u64, u64, u64) {
    use conveyor_protocol::code::request_code;
    use conveyor_protocol::command::RemotingCommand;
    let mut conn = server.raw().await;
    let r = conn
        .request(RemotingCommand::request(
            request_code::GET_BROKER_RUNTIME_INFO,
            Default::default(),
        ))
        .await;
    let table: conveyor_protocol::route::KvTable =
        conveyor_protocol::json::from_slice(&r.body).unwrap();
    let n = |k: &str| table.table[k].parse::<u64>().unwrap();
    (
        n("delayedMessagesPending"),
        n("timerMessagesPending"),
        n("halfMessagesPending"),
    )
}

/// What a broker stores for later shows in its runtime info: a delay-level message, a timer
/// and an undecided half message each count until delivered or decided. The operator holds a
/// drained group's removal on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_messages_are_counted_in_the_runtime_info() {
    let server = server().await;
    let topic = "Parked";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_parked");
    assert_eq!(parked(&server).await, (0, 0, 0));
    producer
        .send_to_queue(
            &Message::new(topic, "in two hours").with_property(keys::DELAY_TIME_LEVEL, "18"),
            &q,
        )
        .await
        .expect("delayed send");
    producer
        .send_to_queue(
            &Message::new(topic, "in 2 s").with_property(keys::TIMER_DELAY_SEC, "2"),
            &q,
        )
        .await
        .expect("timer send");
    producer
        .send_half(&Message::new(topic, "undecided"))
        .await
        .expect("half send");
    wait_until("each parked message counted", DEADLINE, || async {
        parked(&server).await == (1, 1, 1)
    })
    .await;
    // The timer falls due: it no longer counts.
    wait_until(
        "the delivered timer no longer counted",
        DEADLINE,
        || async { parked(&server).await == (1, 0, 1) },
    )
    .await;
}
