//! Producer-side checks, each received by a SimpleConsumer that acks what it gets (as grpc-java's Producers.java):
//!   send-normal      200 sync sends; every message received once with identical body, tag, keys, user properties
//!                    and message id (the send receipt's)
//!   send-fifo        4 message groups x 50 messages to a FIFO topic, consumed by a FIFO (consumeMessageOrderly)
//!                    group: each group arrives complete and in send order, with its message group
//!   send-delay       deliveryTimestamp = T + 3..4 s (DELAY topic; this SDK sends whole seconds): received not before
//!                    the delivery timestamp, not more than 3 s after it, carrying it
//!   tx-commit        transactional messages committed at once are delivered (once; again only if the broker checked
//!                    back the committed transaction)
//!   tx-rollback      rolled-back ones never are (watched until the check-backs are over, plus 6 s)
//!   tx-check-commit  ones left open are resolved by the TransactionChecker's check-back (COMMIT; the checker sees the
//!                    message's id and content) and then delivered

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rocketmq::conf::ProducerOption;
use rocketmq::model::message::MessageView;
use rocketmq::model::transaction::{Transaction, TransactionResolution};
use rocketmq::Producer;

use crate::g::{self, Failure, Scenario, Sent};

const NORMAL_COUNT: usize = 200;
const FIFO_GROUPS: usize = 4;
const FIFO_PER_GROUP: usize = 50;
const DELAY_COUNT: usize = 5;
const DELAY_MS: i64 = 3000;
const DELAY_LATE_MS: i64 = 3000;
const TX_EACH: usize = 3;

pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario::new("send-normal", &["send-normal"], |s| Box::pin(normal(s))),
        Scenario::new("send-fifo", &["send-fifo"], |s| Box::pin(fifo(s))),
        Scenario::new("send-delay", &["send-delay"], |s| Box::pin(delay(s))),
        Scenario::new("transactions", &["tx-commit", "tx-rollback", "tx-check-commit"], |s| {
            Box::pin(transactions(s))
        }),
    ]
}

async fn send(p: &Producer, topic: &str, m: &mut Sent) -> Result<(), Failure> {
    let msg = m.build(topic)?;
    m.send_start = g::now_ms();
    let r = p.send(msg).await.map_err(|e| Failure(format!("send of {} failed: {}", m.key, g::err(&e))))?;
    m.send_end = g::now_ms();
    m.message_id = Some(r.message_id().to_string());
    Ok(())
}

async fn normal(s: Arc<Scenario>) -> Result<(), Failure> {
    let check = "send-normal";
    let topic = g::topic("normal");
    let mut r = g::Receiver::new(&s, &g::group("normal"), &topic, "*", g::INVISIBLE, true, 32).await?;
    let p = g::producer(&s, &topic).await?;
    let result = async {
        let mut sent = Vec::new();
        let tags = [Some("TagA"), Some("TagB"), None];
        for i in 0..NORMAL_COUNT {
            let mut m = Sent::new(check, i, tags[i % tags.len()]);
            send(&p, &topic, &mut m).await?;
            sent.push(m);
        }
        s.diag_check(
            check,
            &format!("sent {} messages in {} ms", sent.len(), sent[sent.len() - 1].send_end - sent[0].send_start),
        );
        g::receive_all(&s, check, &mut r, &topic, &g::by_key(&sent), g::timeout_ms(60)).await;
        s.report(check);
        Ok(())
    }
    .await;
    g::shutdown_producer(&s, p).await;
    r.close(&s).await;
    result
}

async fn fifo(s: Arc<Scenario>) -> Result<(), Failure> {
    let check = "send-fifo";
    let topic = g::topic("fifo");
    let mut r = g::Receiver::new(&s, &g::group("fifo"), &topic, "*", g::INVISIBLE, true, 32).await?;
    let p = g::producer(&s, &topic).await?;
    let result = async {
        let mut by_key = BTreeMap::new();
        // Round-robin over the groups: the groups' messages interleave in the queues they share.
        for i in 0..FIFO_PER_GROUP {
            for grp in 0..FIFO_GROUPS {
                let mut m = Sent::new(check, grp * FIFO_PER_GROUP + i, None);
                m.message_group = Some(format!("mg_{}", grp));
                m.props.insert("p_seq".into(), i.to_string());
                send(&p, &topic, &mut m).await?;
                by_key.insert(m.key.clone(), m);
            }
        }
        let first = g::receive_all(&s, check, &mut r, &topic, &by_key, g::timeout_ms(60)).await;
        // Per message group, the arrival order must be the send order.
        let mut order: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (k, _) in &first {
            let m = &by_key[k];
            order
                .entry(m.message_group.clone().unwrap())
                .or_default()
                .push(m.props["p_seq"].parse().unwrap());
        }
        for (grp, seqs) in &order {
            if let Some(i) = (0..seqs.len()).find(|&i| seqs[i] != i) {
                s.problem(
                    check,
                    &format!(
                        "message group {} arrived out of order: position {} holds seq {} (order {})",
                        grp,
                        i,
                        seqs[i],
                        abbreviate(seqs)
                    ),
                );
            }
        }
        s.report(check);
        Ok(())
    }
    .await;
    g::shutdown_producer(&s, p).await;
    r.close(&s).await;
    result
}

fn abbreviate(l: &[usize]) -> String {
    if l.len() <= 20 {
        format!("{:?}", l)
    } else {
        format!("{:?}...", &l[..20])
    }
}

async fn delay(s: Arc<Scenario>) -> Result<(), Failure> {
    let check = "send-delay";
    let topic = g::topic("delay");
    let mut r = g::Receiver::new(&s, &g::group("delay"), &topic, "*", g::INVISIBLE, true, 32).await?;
    let p = g::producer(&s, &topic).await?;
    let result = async {
        let mut sent = Vec::new();
        for i in 0..DELAY_COUNT {
            let mut m = Sent::new(check, i, Some("TagD"));
            // The SDK sends delivery timestamps in whole seconds: the next whole second at least 3 s ahead.
            let t = g::now_ms();
            m.delivery_timestamp_s = Some((t + DELAY_MS + 999) / 1000);
            send(&p, &topic, &mut m).await?;
            sent.push(m);
        }
        let first = g::receive_all(&s, check, &mut r, &topic, &g::by_key(&sent), DELAY_MS + 1000 + g::timeout_ms(30))
            .await;
        let first: HashMap<&String, &g::Arrival> = first.iter().map(|(k, a)| (k, a)).collect();
        let mut measured = Vec::new();
        for m in &sent {
            let Some(a) = first.get(&m.key) else { continue };
            let due = m.delivery_timestamp_s.unwrap() * 1000;
            let rel = a.at - due;
            measured.push(format!("{} ms", rel));
            if a.at < due {
                s.problem(
                    check,
                    &format!(
                        "{} (deliveryTimestamp T+{} ms) arrived {} ms early, at T+{} ms",
                        m.key,
                        due - m.send_start,
                        -rel,
                        a.at - m.send_start
                    ),
                );
            } else if rel > DELAY_LATE_MS {
                s.problem(
                    check,
                    &format!(
                        "{} (deliveryTimestamp T+{} ms) arrived {} ms after it was due (allowed: {} ms)",
                        m.key,
                        due - m.send_start,
                        rel,
                        DELAY_LATE_MS
                    ),
                );
            }
        }
        s.diag_check(check, &format!("arrival relative to the delivery timestamp: {:?}", measured));
        s.report(check);
        Ok(())
    }
    .await;
    g::shutdown_producer(&s, p).await;
    r.close(&s).await;
    result
}

#[derive(Default)]
struct TxState {
    by_id: Mutex<HashMap<String, Sent>>,
    kind_by_id: Mutex<HashMap<String, &'static str>>,
    /// Check-backs: message id -> when the checker was asked.
    checks: Mutex<HashMap<String, Vec<i64>>>,
    checker_problems: Mutex<Vec<String>>,
}

async fn transactions(s: Arc<Scenario>) -> Result<(), Failure> {
    let topic = g::topic("tx");
    let mut r = g::Receiver::new(&s, &g::group("tx"), &topic, "*", g::INVISIBLE, true, 32).await?;
    let st = Arc::new(TxState::default());
    let p = g::build(&s, &format!("transactional Producer({})", topic), || {
        let (st, s2, topic2) = (Arc::clone(&st), Arc::clone(&s), topic.clone());
        async move {
            let mut o = ProducerOption::default();
            o.set_topics(vec![topic2.clone()]);
            let checker = move |transaction_id: String, v: MessageView| -> TransactionResolution {
                let now = g::now_ms();
                let id = v.message_id().to_string();
                st.checks.lock().unwrap().entry(id.clone()).or_default().push(now);
                let kind = st.kind_by_id.lock().unwrap().get(&id).copied();
                s2.diag_check(
                    "tx-check-commit",
                    &format!("check-back for {} transaction {} ({:?})", g::describe(&v), transaction_id, kind),
                );
                let Some(kind) = kind else {
                    st.checker_problems
                        .lock()
                        .unwrap()
                        .push(format!("check-back for a message this producer did not send: {}", g::describe(&v)));
                    return TransactionResolution::UNKNOWN;
                };
                if let Some(m) = st.by_id.lock().unwrap().get(&id) {
                    let d = m.differences(&v, &topic2, true);
                    if !d.is_empty() {
                        st.checker_problems.lock().unwrap().push(format!(
                            "the checker's view of {} differs from what was sent: {}",
                            m.key,
                            d.join("; ")
                        ));
                    }
                }
                if kind == "rollback" {
                    TransactionResolution::ROLLBACK
                } else {
                    TransactionResolution::COMMIT
                }
            };
            let mut p = Producer::new_transaction_producer(o, g::client_option(), Box::new(checker))?;
            p.start().await?;
            Ok(p)
        }
    })
    .await?;
    let result = tx_body(&s, &p, &mut r, &topic, &st).await;
    g::shutdown_producer(&s, p).await;
    r.close(&s).await;
    result
}

async fn tx_body(
    s: &Scenario,
    p: &Producer,
    r: &mut g::Receiver,
    topic: &str,
    st: &TxState,
) -> Result<(), Failure> {
    let mut commit: BTreeMap<String, Sent> = BTreeMap::new();
    let mut rollback: BTreeMap<String, Sent> = BTreeMap::new();
    let mut unknown: BTreeMap<String, Sent> = BTreeMap::new();
    let mut open = Vec::new();
    for i in 0..TX_EACH * 3 {
        let kind = ["commit", "rollback", "unknown"][i % 3];
        let check = match kind {
            "commit" => "tx-commit",
            "rollback" => "tx-rollback",
            _ => "tx-check-commit",
        };
        let mut m = Sent::new(check, i, Some("TagT"));
        let msg = m
            .builder(topic)
            .enable_transaction()
            .build()
            .map_err(|e| Failure(format!("could not build message {}: {}", m.key, e)))?;
        m.send_start = g::now_ms();
        let tx = p
            .send_transaction_message(msg)
            .await
            .map_err(|e| Failure(format!("transactional send of {} failed: {}", m.key, g::err(&e))))?;
        m.send_end = g::now_ms();
        let id = tx.message_id().to_string();
        m.message_id = Some(id.clone());
        st.by_id.lock().unwrap().insert(id.clone(), m.clone());
        st.kind_by_id.lock().unwrap().insert(id, kind);
        match kind {
            "commit" => {
                tx.commit().await.map_err(|e| Failure(format!("commit of {} failed: {}", m.key, g::err(&e))))?;
                commit.insert(m.key.clone(), m);
            }
            "rollback" => {
                tx.rollback().await.map_err(|e| Failure(format!("rollback of {} failed: {}", m.key, g::err(&e))))?;
                rollback.insert(m.key.clone(), m);
            }
            _ => {
                open.push(tx); // neither committed nor rolled back: left to the check-back
                unknown.insert(m.key.clone(), m);
            }
        }
    }
    let sent_at = g::now_ms();
    s.diag(&format!(
        "sent {} committed, {} rolled back, {} open transactional messages",
        commit.len(),
        rollback.len(),
        unknown.len()
    ));

    let mut got: HashMap<String, g::Arrival> = HashMap::new();
    // Wait for the committed and the checked-back messages (the check-back takes the broker's transaction timeout and
    // check interval), then watch a further 6 s for anything rolled back.
    let deadline = sent_at + g::timeout_ms(90);
    let mut quiet_until = i64::MAX;
    loop {
        let now = g::now_ms();
        let complete =
            commit.keys().all(|k| got.contains_key(k)) && unknown.keys().all(|k| got.contains_key(k));
        if complete && quiet_until == i64::MAX {
            quiet_until = now + 6000;
        }
        if now >= quiet_until || now >= deadline {
            break;
        }
        let Some(a) = r.poll(deadline.min(quiet_until)).await else { continue };
        let k = g::key_of(&a.view).unwrap_or_default();
        let check = if commit.contains_key(&k) {
            "tx-commit"
        } else if rollback.contains_key(&k) {
            "tx-rollback"
        } else if unknown.contains_key(&k) {
            "tx-check-commit"
        } else {
            s.problem("tx-commit", &format!("received a message that was not sent: {}", g::describe(&a.view)));
            continue;
        };
        if check == "tx-rollback" {
            s.problem(
                check,
                &format!(
                    "rolled-back message {} was delivered {} ms after the sends ({})",
                    k,
                    a.at - sent_at,
                    g::describe(&a.view)
                ),
            );
            continue;
        }
        let m = commit.get(&k).or_else(|| unknown.get(&k)).unwrap();
        if got.contains_key(&k) {
            let checked_back = st.checks.lock().unwrap().contains_key(m.message_id.as_ref().unwrap());
            if check == "tx-commit" && checked_back {
                // The broker checked back a transaction the producer had already committed (its commit was not
                // processed yet) and the checker said COMMIT again: a duplicate at-least-once allows.
                s.diag_check(
                    check,
                    &format!(
                        "note: {} delivered again after a check-back of its committed transaction ({})",
                        k,
                        g::describe(&a.view)
                    ),
                );
            } else {
                s.problem(check, &format!("{} was delivered twice ({})", k, g::describe(&a.view)));
            }
            continue;
        }
        let d = m.differences(&a.view, topic, true);
        if !d.is_empty() {
            s.problem(check, &format!("{} arrived different from what was sent: {}", k, d.join("; ")));
        }
        got.insert(k, a);
    }
    for m in commit.values() {
        if !got.contains_key(&m.key) {
            s.problem(
                "tx-commit",
                &format!("committed message {} was not delivered within {} s", m.key, g::timeout_ms(90) / 1000),
            );
        }
    }
    let checks = st.checks.lock().unwrap().clone();
    for m in unknown.values() {
        let c = checks.get(m.message_id.as_ref().unwrap());
        let a = got.get(&m.key);
        match (c, a) {
            (None, _) => s.problem(
                "tx-check-commit",
                &format!(
                    "no check-back for the open transaction of {} within {} s",
                    m.key,
                    g::timeout_ms(90) / 1000
                ),
            ),
            (Some(c), None) => s.problem(
                "tx-check-commit",
                &format!(
                    "{} was checked back (COMMIT) {} ms after its send but not delivered",
                    m.key,
                    c[0] - m.send_end
                ),
            ),
            (Some(c), Some(a)) => {
                s.diag_check(
                    "tx-check-commit",
                    &format!(
                        "{}: first check-back {} ms after the send ({} check-backs), delivered {} ms after it",
                        m.key,
                        c[0] - m.send_end,
                        c.len(),
                        a.at - c[0]
                    ),
                );
                if a.at < c[0] {
                    s.problem("tx-check-commit", &format!("{} was delivered before its check-back", m.key));
                }
            }
        }
    }
    for cp in st.checker_problems.lock().unwrap().iter() {
        s.problem("tx-check-commit", cp);
    }
    let kinds = st.kind_by_id.lock().unwrap().clone();
    for id in checks.keys() {
        if let Some(kind) = kinds.get(id) {
            if *kind != "unknown" {
                s.diag(&format!("note: the broker asked about a resolved ({}) transaction: {}", kind, id));
            }
        }
    }
    drop(open);
    s.report("tx-commit");
    s.report("tx-rollback");
    s.report("tx-check-commit");
    Ok(())
}
