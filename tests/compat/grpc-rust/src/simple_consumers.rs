//! SimpleConsumer checks (receive with a 10 s invisible duration, the minimum), as grpc-java's SimpleConsumers.java:
//!   simple-ack       a received and acked message does not come back within 2 x the invisible duration of the ack
//!   simple-redeliver a received message that is not acked comes back after the invisible duration (never before
//!                    the receive call + 10 s, at most 12 s after that), with deliveryAttempt 2 (1 the first time)
//!   simple-tag-filter
//!                    FilterExpression "TagA||TagB" gets exactly the TagA and TagB messages (a second group with
//!                    "TagC" gets exactly the TagC ones); watched for 6 s after the last expected one
//! Not here: simple-change-invisible-extend and simple-change-invisible-ack. This SDK's SimpleConsumer (rocketmq
//! 5.0.0) has no changeInvisibleDuration: its public methods are new, start, shutdown, receive, receive_with and ack.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use rocketmq::Producer;

use crate::g::{self, Arrival, Failure, Scenario, Sent};

const INV: i64 = g::INVISIBLE.as_millis() as i64;
/// How late a redelivery may be, after the invisible duration ran out.
const LATE_MS: i64 = 12000;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario::new("ack-redeliver", &["simple-ack", "simple-redeliver"], |s| Box::pin(ack_redeliver(s))),
        Scenario::new("tag-filter", &["simple-tag-filter"], |s| Box::pin(tag_filter(s))),
    ]
}

async fn send(
    p: &Producer,
    topic: &str,
    check: &str,
    tag: &str,
    from: usize,
    n: usize,
) -> Result<Vec<Sent>, Failure> {
    let mut out = Vec::new();
    for i in from..from + n {
        let mut m = Sent::new(check, i, Some(tag));
        let msg = m.build(topic)?;
        m.send_start = g::now_ms();
        let r = p.send(msg).await.map_err(|e| Failure(format!("send of {} failed: {}", m.key, g::err(&e))))?;
        m.message_id = Some(r.message_id().to_string());
        m.send_end = g::now_ms();
        out.push(m);
    }
    Ok(out)
}

/// Per message: its deliveries so far.
struct Track {
    sent: Sent,
    check: &'static str,
    deliveries: Vec<Arrival>,
    acked_at: i64,
    done: bool,
}

async fn ack_redeliver(s: Arc<Scenario>) -> Result<(), Failure> {
    let topic = g::topic("simple");
    let mut r = g::Receiver::new(&s, &g::group("simple"), &topic, "*", g::INVISIBLE, false, 16).await?;
    let p = match g::producer(&s, &topic).await {
        Ok(p) => p,
        Err(e) => {
            r.close(&s).await;
            return Err(e);
        }
    };
    let result = ack_redeliver_body(&s, &p, &mut r, &topic).await;
    g::shutdown_producer(&s, p).await;
    r.close(&s).await;
    result
}

async fn ack_redeliver_body(s: &Scenario, p: &Producer, r: &mut g::Receiver, topic: &str) -> Result<(), Failure> {
    let mut tracks: BTreeMap<String, Track> = BTreeMap::new();
    for m in send(p, topic, "simple-ack", "ack", 0, 4).await? {
        tracks.insert(m.key.clone(), Track { sent: m, check: "simple-ack", deliveries: vec![], acked_at: -1, done: false });
    }
    for m in send(p, topic, "simple-redeliver", "hold", 4, 4).await? {
        tracks.insert(
            m.key.clone(),
            Track { sent: m, check: "simple-redeliver", deliveries: vec![], acked_at: -1, done: false },
        );
    }
    let sent_at = g::now_ms();
    // Ends when every "hold" message came back and was acked, and 2 x INV passed since the last ack of an "ack"
    // message; or at the deadline.
    let deadline = sent_at + g::timeout_ms(20) + INV + LATE_MS;
    loop {
        let now = g::now_ms();
        let mut last_ack = 0;
        let mut all_acked = true;
        let mut all_redelivered = true;
        for t in tracks.values() {
            if t.check == "simple-ack" {
                all_acked &= t.acked_at >= 0;
                last_ack = last_ack.max(t.acked_at);
            } else {
                all_redelivered &= t.done;
            }
        }
        // The watch over the acked messages ends 2 x INV after the last ack.
        let watch_end = if all_acked { last_ack + 2 * INV } else { i64::MAX };
        if all_acked && all_redelivered && now >= watch_end {
            break;
        }
        let end = deadline.max(if all_acked { watch_end } else { 0 });
        if now >= end {
            break;
        }
        let until = if all_acked && all_redelivered { watch_end } else { end };
        let Some(a) = r.poll(until).await else { continue };
        let Some(t) = g::key_of(&a.view).and_then(|k| tracks.get_mut(&k)) else {
            s.problem("simple-ack", &format!("received a message that was not sent: {}", g::describe(&a.view)));
            continue;
        };
        let view = Arc::clone(&a.view);
        let a_at = a.at;
        t.deliveries.push(a);
        let n = t.deliveries.len();
        if n == 1 {
            let d = t.sent.differences(&view, topic, true);
            if !d.is_empty() {
                s.problem(t.check, &format!("{} arrived different from what was sent: {}", t.sent.key, d.join("; ")));
            }
            if view.delivery_attempt() != 1 {
                s.problem(
                    t.check,
                    &format!("{} first arrived with deliveryAttempt {}", t.sent.key, view.delivery_attempt()),
                );
            }
            if t.check == "simple-ack" {
                let res = r.ack(&view).await;
                t.acked_at = g::now_ms();
                if let Err(e) = res {
                    s.problem("simple-ack", &format!("ack of {} failed: {}", t.sent.key, g::err(&e)));
                }
            }
            continue;
        }
        if t.check == "simple-ack" {
            s.problem(
                "simple-ack",
                &format!(
                    "acked message {} came back {} ms after the ack ({})",
                    t.sent.key,
                    a_at - t.acked_at,
                    g::describe(&view)
                ),
            );
            continue;
        }
        if n == 2 {
            let first = &t.deliveries[0];
            let early = first.receive_start + INV;
            let late = first.at + INV + LATE_MS;
            s.diag_check(
                "simple-redeliver",
                &format!(
                    "{} redelivered {} ms after the first delivery, attempt {}",
                    t.sent.key,
                    a_at - first.at,
                    view.delivery_attempt()
                ),
            );
            if a_at < early {
                s.problem(
                    "simple-redeliver",
                    &format!(
                        "{} came back {} ms after the receive call, before its invisible duration ({} ms) ran out",
                        t.sent.key,
                        a_at - first.receive_start,
                        INV
                    ),
                );
            } else if a_at > late {
                s.problem(
                    "simple-redeliver",
                    &format!(
                        "{} came back {} ms after the first delivery (allowed: {} ms)",
                        t.sent.key,
                        a_at - first.at,
                        INV + LATE_MS
                    ),
                );
            }
            if view.delivery_attempt() != 2 {
                s.problem(
                    "simple-redeliver",
                    &format!("{} came back with deliveryAttempt {}, expected 2", t.sent.key, view.delivery_attempt()),
                );
            }
            if view.message_id() != first.view.message_id() {
                s.problem(
                    "simple-redeliver",
                    &format!(
                        "{} came back with message id {}, first delivered as {}",
                        t.sent.key,
                        view.message_id(),
                        first.view.message_id()
                    ),
                );
            }
            if let Err(e) = r.ack(&view).await {
                s.problem("simple-redeliver", &format!("ack of the redelivered {} failed: {}", t.sent.key, g::err(&e)));
            }
            t.done = true;
            continue;
        }
        s.problem(
            "simple-redeliver",
            &format!(
                "{} came back a third time, after its redelivery was acked ({})",
                t.sent.key,
                g::describe(&view)
            ),
        );
    }
    for t in tracks.values() {
        if t.deliveries.is_empty() {
            s.problem(t.check, &format!("{} was never received; {}", t.sent.key, r.errors()));
        } else if t.check == "simple-redeliver" && !t.done {
            s.problem(
                t.check,
                &format!("{} (not acked) did not come back within {} ms of its first delivery", t.sent.key, INV + LATE_MS),
            );
        }
    }
    s.report("simple-ack");
    s.report("simple-redeliver");
    Ok(())
}

async fn tag_filter(s: Arc<Scenario>) -> Result<(), Failure> {
    let check = "simple-tag-filter";
    let topic = g::topic("tag");
    let mut ab = g::Receiver::new(&s, &g::group("tag"), &topic, "TagA||TagB", g::INVISIBLE, true, 32).await?;
    let mut c = match g::Receiver::new(&s, &g::group("tagc"), &topic, "TagC", g::INVISIBLE, true, 32).await {
        Ok(c) => c,
        Err(e) => {
            ab.close(&s).await;
            return Err(e);
        }
    };
    let p = match g::producer(&s, &topic).await {
        Ok(p) => p,
        Err(e) => {
            ab.close(&s).await;
            c.close(&s).await;
            return Err(e);
        }
    };
    let result = async {
        let mut want_ab: BTreeMap<String, Sent> = BTreeMap::new();
        let mut want_c: BTreeMap<String, Sent> = BTreeMap::new();
        let tags = ["TagC", "TagA", "TagB"];
        for i in 0..18 {
            let tag = tags[i % 3];
            let m = send(&p, &topic, check, tag, i, 1).await?.remove(0);
            if tag == "TagC" { &mut want_c } else { &mut want_ab }.insert(m.key.clone(), m);
        }
        let mut got_ab: HashMap<String, Arrival> = HashMap::new();
        let mut got_c: HashMap<String, Arrival> = HashMap::new();
        let deadline = g::now_ms() + g::timeout_ms(30);
        let mut quiet_until = i64::MAX;
        loop {
            let now = g::now_ms();
            if quiet_until == i64::MAX && got_ab.len() == want_ab.len() && got_c.len() == want_c.len() {
                quiet_until = now + 6000;
            }
            if now >= quiet_until || now >= deadline {
                break;
            }
            let until = quiet_until.min(deadline);
            let mut any = false;
            for which in 0..2 {
                let (r, want, got, filter) = if which == 0 {
                    (&mut ab, &want_ab, &mut got_ab, "TagA||TagB")
                } else {
                    (&mut c, &want_c, &mut got_c, "TagC")
                };
                let Some(a) = r.try_poll() else { continue };
                any = true;
                let k = g::key_of(&a.view).unwrap_or_default();
                let Some(m) = want.get(&k) else {
                    s.problem(
                        check,
                        &format!(
                            "filter \"{}\" received a message with tag {} ({})",
                            filter,
                            a.view.tag().unwrap_or("null"),
                            g::describe(&a.view)
                        ),
                    );
                    continue;
                };
                if got.contains_key(&k) {
                    s.problem(check, &format!("filter \"{}\" received {} twice", filter, k));
                    continue;
                }
                let d = m.differences(&a.view, &topic, true);
                if !d.is_empty() {
                    s.problem(check, &format!("{} arrived different from what was sent: {}", k, d.join("; ")));
                }
                got.insert(k, a);
            }
            if !any {
                let ms = (until - g::now_ms()).clamp(1, 50);
                tokio::time::sleep(Duration::from_millis(ms as u64)).await;
            }
        }
        if got_ab.len() < want_ab.len() {
            s.problem(
                check,
                &format!(
                    "filter \"TagA||TagB\" received {} of the {} TagA/TagB messages within {} s; {}",
                    got_ab.len(),
                    want_ab.len(),
                    g::timeout_ms(30) / 1000,
                    ab.errors()
                ),
            );
        }
        if got_c.len() < want_c.len() {
            s.problem(
                check,
                &format!(
                    "filter \"TagC\" received {} of the {} TagC messages within {} s; {}",
                    got_c.len(),
                    want_c.len(),
                    g::timeout_ms(30) / 1000,
                    c.errors()
                ),
            );
        }
        s.report(check);
        Ok(())
    }
    .await;
    g::shutdown_producer(&s, p).await;
    ab.close(&s).await;
    c.close(&s).await;
    result
}
