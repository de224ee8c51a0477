//! Failover in controller mode between real processes (issue 10): a controller, a name
//! server and two brokers of one group, SYNC flush and synchronous replication. The master is
//! killed with SIGKILL over and over while a producer sends keyed messages; each time the
//! controller promotes the slave (in a new epoch), the old master comes back as its slave
//! and is cut back to the point both logs share. A ledger counts only SEND_OK as
//! acknowledged: afterwards every acknowledged message is consumed, no message that was never
//! sent appears, and the two CommitLogs are byte-identical up to the shorter end.
//!
//! `CONVEYOR_FAILOVER_CYCLES` sets the number of kills (default 20; the long mode runs 100).
//! Every fourth cycle the slave is killed just before the master and restarted after it: it
//! is promoted only if it is still in the in-sync set, and what the master acknowledged after
//! dropping it must survive. The time from each kill to the first SEND_OK on
//! the new master is printed. The controller keeps its default detection time (10 s): a
//! killed master's connection closes, which is what it acts on. With
//! `CONVEYOR_FAILOVER_DEFAULTS=1` the brokers keep every default timing too (heartbeats,
//! slave timeout), which is how the unavailability in docs/benchmarks.md is measured.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::child::{Broker, Mode, Place};
use common::{send_request, DEADLINE};
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::{RemotingClient, RemotingConfig};
use tokio::time::Instant;

const TOPIC: &str = "Ledger";
const GROUP: &str = "broker-a";

/// The brokers' storage: SYNC flush, small segments.
const STORAGE_SETTINGS: &str = "\
[store]
flush-mode = \"sync\"
segment-size = 1048576
max-message-size = 65536
";

/// Short timings so a cycle takes about two seconds; the defaults are documented in the
/// settings.
const SHORT_TIMINGS: &str = "\
[replication]
slave-timeout-ms = 1000
heartbeat-interval-ms = 200
housekeeping-interval-ms = 2000
metadata-sync-interval-ms = 200
controller-heartbeat-ms = 200
max-time-not-caught-up-ms = 4000
";

/// A master silent for 1.5 s is replaced (default 10 s). A killed master is replaced at once
/// whatever this says: its connection to the controller closes.
const CONTROLLER_SETTINGS: &str = "[controller]\ndetection-ms = 1500\n";

/// The brokers' settings file: storage and short timings.
fn broker_settings() -> String {
    format!("{STORAGE_SETTINGS}{SHORT_TIMINGS}")
}

struct Paths {
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
}

fn paths(root: &Path, name: &str, settings: &str) -> Paths {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("conveyor.toml");
    std::fs::write(&config, settings).unwrap();
    Paths {
        data: dir.join("data"),
        config,
        log: dir.join("conveyor.log"),
    }
}

/// The processes of the test cluster.
struct Cluster {
    controller: Broker,
    namesrv: Broker,
    nodes: [Paths; 2],
    brokers: [Option<Broker>; 2],
    client: RemotingClient,
}

impl Cluster {
    async fn start(root: &Path) -> Cluster {
        Self::start_with(root, "").await
    }

    /// A cluster whose brokers get `replication` appended to their `[replication]` section.
    async fn start_with(root: &Path, replication: &str) -> Cluster {
        let settings = format!("{}{replication}", broker_settings());
        Self::launch(root, CONTROLLER_SETTINGS, &settings).await
    }

    /// A cluster of processes with these settings files.
    async fn launch(root: &Path, controller: &str, settings: &str) -> Cluster {
        let c = paths(root, "controller", controller);
        let controller = Broker::start_as(&c.data, &c.config, &c.log, Mode::Controller, &[]).await;
        let n = paths(root, "namesrv", "");
        let namesrv = Broker::start_as(&n.data, &n.config, &n.log, Mode::NameServer, &[]).await;
        let nodes = [paths(root, "b0", settings), paths(root, "b1", settings)];
        let mut cluster = Cluster {
            controller,
            namesrv,
            nodes,
            brokers: [None, None],
            client: RemotingClient::new(RemotingConfig::default()),
        };
        cluster.spawn(0).await;
        cluster.spawn(1).await;
        cluster
    }

    async fn spawn(&mut self, id: usize) {
        let p = &self.nodes[id];
        let controller = self.controller.broker.to_string();
        let broker_id = id.to_string();
        let b = Broker::start_as(
            &p.data,
            &p.config,
            &p.log,
            Mode::Broker {
                namesrv: self.namesrv.broker,
            },
            &["--controller-addr", &controller, "--broker-id", &broker_id],
        )
        .await;
        self.brokers[id] = Some(b);
    }

    /// Every process's log, for a failure message.
    fn logs(&self) -> String {
        let read = |p: &Path| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        format!(
            "controller:\n{}\nb0:\n{}\nb1:\n{}",
            read(&self.controller.log),
            read(&self.nodes[0].log),
            read(&self.nodes[1].log)
        )
    }

    /// The controller's in-sync set of the group.
    async fn in_sync(&self) -> BTreeSet<i64> {
        let req = RemotingCommand::request(rc::CONTROLLER_GET_REPLICA_INFO, Default::default())
            .with_ext("brokerName", GROUP);
        let Ok(r) = self
            .client
            .invoke_timeout(
                &self.controller.broker.to_string(),
                req,
                Duration::from_secs(3),
            )
            .await
        else {
            return BTreeSet::new();
        };
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Body {
            sync_state_set: BTreeSet<i64>,
        }
        conveyor_protocol::json::from_slice::<Body>(&r.body)
            .map(|b| b.sync_state_set)
            .unwrap_or_default()
    }

    /// The controller's master of the group and its epoch.
    async fn master(&self) -> Option<(usize, i64)> {
        let req = RemotingCommand::request(rc::CONTROLLER_GET_REPLICA_INFO, Default::default())
            .with_ext("brokerName", GROUP);
        let r = self
            .client
            .invoke_timeout(
                &self.controller.broker.to_string(),
                req,
                Duration::from_secs(3),
            )
            .await
            .ok()?;
        let id = r.get_i64("masterBrokerId").ok()?;
        let epoch = r.get_i64("masterEpoch").ok()?;
        (id >= 0).then_some((id as usize, epoch))
    }

    /// One send to broker `id`: its answer code, or `None` when it did not answer.
    async fn send(&self, id: usize, body: &str) -> Option<i32> {
        let b = self.brokers[id].as_ref()?;
        let r = self
            .client
            .invoke_timeout(
                &b.broker.to_string(),
                send_request(TOPIC, 0, body.to_string()),
                Duration::from_secs(5),
            )
            .await
            .ok()?;
        Some(r.code)
    }
}

/// What the producer saw (Jepsen's total-queue classes).
#[derive(Default)]
struct Ledger {
    /// Answered SEND_OK.
    ok: BTreeSet<String>,
    /// Every body ever sent, whatever the answer.
    attempted: BTreeSet<String>,
    next: u64,
}

impl Ledger {
    /// Waits (sending meanwhile) until a master acknowledges and both replicas are in sync;
    /// returns the master.
    async fn in_sync_master(&mut self, cluster: &Cluster) -> usize {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some((m, _)) = cluster.master().await {
                if self.send(cluster, m).await && cluster.in_sync().await.len() == 2 {
                    return m;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no in-sync master\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends one new message to broker `id`; true on SEND_OK.
    async fn send(&mut self, cluster: &Cluster, id: usize) -> bool {
        let body = format!("m-{:08}", self.next);
        self.next += 1;
        self.attempted.insert(body.clone());
        let code = cluster.send(id, &body).await;
        if code == Some(resp::SUCCESS) {
            self.ok.insert(body);
            return true;
        }
        false
    }
}

/// Every body of queue 0 on the broker at `addr`, read by a fresh group from offset 0.
async fn drain(client: &RemotingClient, addr: &str) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    let mut offset = 0;
    loop {
        let r = client
            .invoke_timeout(
                addr,
                common::pull_request("drain", TOPIC, 0, offset),
                Duration::from_secs(5),
            )
            .await
            .expect("pull");
        if r.code != resp::SUCCESS {
            return out;
        }
        for m in conveyor_protocol::message::decode_records(&r.body).expect("records") {
            out.insert(
                m.queue_offset,
                String::from_utf8_lossy(&m.body).into_owned(),
            );
        }
        offset = r.get_i64("nextBeginOffset").expect("nextBeginOffset");
    }
}

/// Every body broker `id` of `cluster` holds in queue 0 (see [`drain`]).
async fn bodies_on(cluster: &Cluster, id: usize) -> BTreeSet<String> {
    let addr = cluster.brokers[id].as_ref().unwrap().broker.to_string();
    drain(&cluster.client, &addr).await.into_values().collect()
}

/// The CommitLog bytes of a store, all segments in order, without the zeros after the end.
fn commit_log(data: &Path) -> Vec<u8> {
    let mut names: Vec<_> = std::fs::read_dir(data.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let mut out = Vec::new();
    for n in names {
        out.extend(std::fs::read(n).unwrap());
    }
    while out.last() == Some(&0) {
        out.pop();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_master_repeatedly_loses_no_acknowledged_message() {
    let cycles: usize = std::env::var("CONVEYOR_FAILOVER_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let defaults = std::env::var_os("CONVEYOR_FAILOVER_DEFAULTS").is_some();
    let brokers = if defaults {
        STORAGE_SETTINGS.to_string()
    } else {
        broker_settings()
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::launch(tmp.path(), "", &brokers).await;
    let mut ledger = Ledger::default();
    let mut unavailable = Vec::new();
    let mut epochs = Vec::new();
    for cycle in 0..cycles {
        // Wait for a master, and for SEND_OK from it (its slave is in sync).
        let deadline = Instant::now() + DEADLINE;
        let master = loop {
            if let Some((m, _)) = cluster.master().await {
                if ledger.send(&cluster, m).await {
                    break m;
                }
            }
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: no SEND_OK from any master"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (_, epoch) = cluster.master().await.expect("a master");
        epochs.push(epoch);
        // Both replicas in sync (the rejoined one caught up), sending all along.
        while cluster.in_sync().await.len() < 2 {
            ledger.send(&cluster, master).await;
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: the slave never got in sync\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // After each rejoin (from the second cycle on), with no send in flight, both logs
        // agree up to the shorter end.
        if cycle > 0 {
            assert_same_prefix(&cluster, &format!("cycle {cycle}"));
        }
        for _ in 0..20 {
            ledger.send(&cluster, master).await;
        }
        let other = 1 - master;
        if cycle % 4 == 3 {
            // The slave dies first, then the master, with a send in between. The master drops
            // the slave from the in-sync set as soon as its stream closes; the send is SEND_OK
            // only once the controller confirmed that (before, it waits for the slave). So
            // either the slave left the set, and holds not every acknowledged message: it must
            // not be promoted, and the group waits for the old master; or it is still in the
            // set, the send was not acknowledged, and the slave is promoted. A wrong
            // acknowledgement or promotion shows as a lost message below.
            cluster.brokers[other].as_mut().unwrap().kill();
            ledger.send(&cluster, master).await;
            cluster.brokers[master].as_mut().unwrap().kill();
            cluster.spawn(other).await;
            if !cluster.in_sync().await.contains(&(other as i64)) {
                cluster.spawn(master).await;
                continue;
            }
        } else {
            cluster.brokers[master].as_mut().unwrap().kill();
        }
        // Keep sending to the other broker until it says SEND_OK.
        let killed = Instant::now();
        let deadline = killed + DEADLINE;
        while !ledger.send(&cluster, other).await {
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: the slave was not promoted\n{}\ncontroller:\n{}\nold master:\n{}",
                cluster.brokers[other].as_ref().unwrap().log_tail(),
                cluster.controller.log_tail(),
                std::fs::read_to_string(&cluster.nodes[master].log).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        unavailable.push(killed.elapsed());
        // The old master comes back as the new master's slave.
        cluster.spawn(master).await;
    }
    // Let the last rejoin catch up, then read everything from the final master.
    let deadline = Instant::now() + DEADLINE;
    let final_master = loop {
        if let Some((m, _)) = cluster.master().await {
            if ledger.send(&cluster, m).await {
                break m;
            }
        }
        assert!(Instant::now() < deadline, "no SEND_OK at the end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let addr = cluster.brokers[final_master]
        .as_ref()
        .unwrap()
        .broker
        .to_string();
    let consumed = drain(&cluster.client, &addr).await;
    let seen: BTreeSet<String> = consumed.values().cloned().collect();
    let lost: Vec<&String> = ledger.ok.difference(&seen).collect();
    let unexpected: Vec<&String> = seen.difference(&ledger.attempted).collect();
    let offsets: Vec<i64> = consumed.keys().copied().collect();
    assert_eq!(
        offsets,
        (0..offsets.len() as i64).collect::<Vec<_>>(),
        "queue offsets have gaps"
    );
    let mut sorted = unavailable.clone();
    sorted.sort();
    eprintln!(
        "failover ({} timings): {cycles} kills, {} sent, {} SEND_OK, {} consumed, lost {}, unexpected {}, \
         epochs {:?}; unavailable median {:?}, max {:?}",
        if defaults { "default" } else { "short broker" },
        ledger.attempted.len(),
        ledger.ok.len(),
        seen.len(),
        lost.len(),
        unexpected.len(),
        epochs,
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(unexpected.is_empty(), "never sent: {unexpected:?}");
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "every failover is a new epoch: {epochs:?}"
    );
    // Both logs agree up to the shorter end.
    let slave = 1 - final_master;
    let _ = cluster.brokers[final_master]
        .as_mut()
        .unwrap()
        .terminate(DEADLINE)
        .await;
    let _ = cluster.brokers[slave]
        .as_mut()
        .unwrap()
        .terminate(DEADLINE)
        .await;
    assert_same_prefix(&cluster, "at the end");
}

/// Both replicas' CommitLogs are byte-identical up to the shorter end.
fn assert_same_prefix(cluster: &Cluster, when: &str) {
    let (a, b) = (
        commit_log(&cluster.nodes[0].data),
        commit_log(&cluster.nodes[1].data),
    );
    let shorter = a.len().min(b.len());
    assert!(
        a[..shorter] == b[..shorter],
        "{when}: the two CommitLogs differ below the shorter end ({} and {} bytes)",
        a.len(),
        b.len()
    );
}

/// A raw send of `body` to broker `id` with extra message properties (`key`, `value`).
async fn send_with(
    cluster: &Cluster,
    id: usize,
    body: &str,
    key: &str,
    value: &str,
) -> Option<i32> {
    let b = cluster.brokers[id].as_ref()?;
    let mut header = common::send_header(TOPIC, 0);
    header
        .properties
        .push_str(&format!("{key}\u{1}{value}\u{2}"));
    let req = RemotingCommand::request(rc::SEND_MESSAGE_V2, header.to_ext_fields())
        .with_body(body.to_string());
    let r = cluster
        .client
        .invoke_timeout(&b.broker.to_string(), req, Duration::from_secs(5))
        .await
        .ok()?;
    Some(r.code)
}

/// A JSON body broker `id` answers to `code`, if it answers SUCCESS.
async fn progress(cluster: &Cluster, id: usize, code: i32) -> Option<serde_json::Value> {
    let b = cluster.brokers[id].as_ref()?;
    let r = cluster
        .client
        .invoke_timeout(
            &b.broker.to_string(),
            RemotingCommand::request(code, Default::default()),
            Duration::from_secs(3),
        )
        .await
        .ok()?;
    (r.code == resp::SUCCESS)
        .then(|| serde_json::from_slice(&r.body).ok())
        .flatten()
}

/// Delayed and timer messages through a failover: what the master delivered before it died is
/// not delivered again by the promoted slave, which took the master's saved progress
/// (SlaveSynchronize), and what was still waiting is delivered by the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_and_timer_progress_follow_the_master() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(tmp.path()).await;
    let mut ledger = Ledger::default();
    let master = ledger.in_sync_master(&cluster).await;
    let slave = 1 - master;
    let now = conveyor_protocol::time::now_ms();
    for i in 0..3 {
        for (body, key, value) in [
            // Parked (a timer due now is delivered at once), due soon.
            (
                format!("early-timer-{i}"),
                "TIMER_DELIVER_MS",
                (now + 1_000).to_string(),
            ),
            (format!("early-delay-{i}"), "DELAY", "1".to_string()),
            // Due well after the failover below (level 3 is 10 s).
            (
                format!("late-timer-{i}"),
                "TIMER_DELIVER_MS",
                (now + 8_000).to_string(),
            ),
            (format!("late-delay-{i}"), "DELAY", "3".to_string()),
        ] {
            assert_eq!(
                send_with(&cluster, master, &body, key, &value).await,
                Some(resp::SUCCESS),
                "{body}"
            );
        }
    }
    let early: BTreeSet<String> = (0..3)
        .flat_map(|i| [format!("early-timer-{i}"), format!("early-delay-{i}")])
        .collect();
    let late: BTreeSet<String> = (0..3)
        .flat_map(|i| [format!("late-timer-{i}"), format!("late-delay-{i}")])
        .collect();
    // The master delivers the early ones, saves its progress, and the slave takes it: delay
    // level 1 read past its three messages, the timer queue read past all six timers with
    // the three late ones still pending.
    let addr = |c: &Cluster, id: usize| c.brokers[id].as_ref().unwrap().broker.to_string();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let delivered: BTreeSet<String> = drain(&cluster.client, &addr(&cluster, master))
            .await
            .into_values()
            .collect();
        let delay = progress(&cluster, slave, rc::GET_ALL_DELAY_OFFSET).await;
        let timer = progress(&cluster, slave, rc::GET_TIMER_CHECK_POINT).await;
        let delay_done = delay
            .as_ref()
            .is_some_and(|d| d["offsetTable"]["1"].as_i64() >= Some(3));
        let timer_done = timer.as_ref().is_some_and(|t| {
            t["scanned"].as_i64() >= Some(6) && t["pending"].as_array().map(Vec::len) == Some(3)
        });
        if early.is_subset(&delivered) && delay_done && timer_done {
            assert!(delivered.is_disjoint(&late), "late messages came early");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slave never took the master's progress: delivered {delivered:?}, delay \
             {delay:?}, timer {timer:?}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.brokers[master].as_mut().unwrap().kill();
    let deadline = Instant::now() + DEADLINE;
    while !ledger.send(&cluster, slave).await {
        assert!(
            Instant::now() < deadline,
            "the slave was not promoted\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The new master delivers the late ones, and the early ones not again.
    let deadline = Instant::now() + DEADLINE;
    let bodies = loop {
        let bodies: Vec<String> = drain(&cluster.client, &addr(&cluster, slave))
            .await
            .into_values()
            .collect();
        if late.iter().all(|l| bodies.contains(l)) {
            break bodies;
        }
        assert!(
            Instant::now() < deadline,
            "the new master did not deliver the waiting messages\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for body in early.iter().chain(&late) {
        let copies = bodies.iter().filter(|b| *b == body).count();
        assert_eq!(copies, 1, "{body} delivered {copies} times");
    }
}

/// The master address the name server gives clients for the group (broker id 0).
async fn routed_master(cluster: &Cluster) -> Option<String> {
    let req = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC, Default::default())
        .with_ext("topic", TOPIC);
    let r = cluster
        .client
        .invoke_timeout(
            &cluster.namesrv.broker.to_string(),
            req,
            Duration::from_secs(3),
        )
        .await
        .ok()?;
    let route: conveyor_protocol::route::TopicRouteData =
        conveyor_protocol::json::from_slice(&r.body).ok()?;
    route
        .broker_datas
        .iter()
        .find(|b| b.broker_name == GROUP)?
        .broker_addrs
        .get(&0)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_master_is_replaced_and_fenced_when_it_wakes_up() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path()).await;
    let mut ledger = Ledger::default();
    let old = ledger.in_sync_master(&cluster).await;
    let (_, old_epoch) = cluster.master().await.unwrap();
    let new = 1 - old;
    let old_addr = cluster.brokers[old].as_ref().unwrap().broker.to_string();
    let new_addr = cluster.brokers[new].as_ref().unwrap().broker.to_string();

    // Freeze the master past the detection time; a send to it waits in its socket.
    cluster.brokers[old].as_ref().unwrap().pause();
    let queued = {
        let (client, addr) = (
            RemotingClient::new(RemotingConfig::default()),
            old_addr.clone(),
        );
        tokio::spawn(async move {
            client
                .invoke_timeout(
                    &addr,
                    send_request(TOPIC, 0, "sent-to-the-frozen-master"),
                    DEADLINE,
                )
                .await
                .map(|r| r.code)
        })
    };
    ledger.attempted.insert("sent-to-the-frozen-master".into());
    let deadline = Instant::now() + DEADLINE;
    while !ledger.send(&cluster, new).await {
        assert!(
            Instant::now() < deadline,
            "the slave was not promoted\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (master, new_epoch) = cluster.master().await.unwrap();
    assert_eq!(master, new);
    assert!(new_epoch > old_epoch);
    assert_eq!(
        routed_master(&cluster).await.as_deref(),
        Some(new_addr.as_str())
    );

    // It wakes up. What it was asked while frozen, and anything after, is either refused or
    // relayed to the new master once it knows it is a slave: a SEND_OK from it counts like
    // any other and must be on the new master at the end; it never stores a write itself.
    cluster.brokers[old].as_ref().unwrap().resume();
    let queued_ok = queued.await.unwrap().ok() == Some(resp::SUCCESS);
    if queued_ok {
        ledger.ok.insert("sent-to-the-frozen-master".into());
    }
    for _ in 0..10 {
        ledger.send(&cluster, old).await;
    }
    // It rejoins as the new master's slave.
    let deadline = Instant::now() + DEADLINE;
    while cluster.in_sync().await.len() < 2 {
        ledger.send(&cluster, new).await;
        assert!(
            Instant::now() < deadline,
            "the old master never rejoined\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Its registrations since it woke (as master of the old epoch, then as slave) did not
    // take the route back.
    assert_eq!(
        routed_master(&cluster).await.as_deref(),
        Some(new_addr.as_str())
    );
    let consumed = drain(&cluster.client, &new_addr).await;
    let seen: BTreeSet<String> = consumed.values().cloned().collect();
    let lost: Vec<&String> = ledger.ok.difference(&seen).collect();
    let unexpected: Vec<&String> = seen.difference(&ledger.attempted).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(unexpected.is_empty(), "never sent: {unexpected:?}");
    assert!(
        queued_ok || !seen.contains("sent-to-the-frozen-master"),
        "a write the deposed master took survived the rejoin: {:?}\n{}",
        consumed
            .iter()
            .filter(|(_, k)| k.as_str() == "sent-to-the-frozen-master")
            .collect::<Vec<_>>(),
        cluster.logs()
    );
}

/// Runs `conveyor admin …` and returns its standard output.
fn admin(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conveyor"))
        .arg("admin")
        .args(args)
        .output()
        .expect("run conveyor admin");
    assert!(
        out.status.success(),
        "conveyor admin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `conveyor admin promote` of broker `id` in the group (a switchover); what it printed.
fn promote(controller: &str, id: usize) -> String {
    admin(&[
        "promote",
        "--controller",
        controller,
        "--group",
        GROUP,
        "--broker-id",
        &id.to_string(),
    ])
}

/// `conveyor admin replication --output json` of the group.
fn replication_json(controller: &str) -> serde_json::Value {
    serde_json::from_str(&admin(&[
        "replication",
        "--controller",
        controller,
        "--group",
        GROUP,
        "--output",
        "json",
    ]))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controlled_switchover_moves_the_master_without_loss() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path()).await;
    let controller = cluster.controller.broker.to_string();
    let mut ledger = Ledger::default();
    let old = ledger.in_sync_master(&cluster).await;
    for _ in 0..50 {
        ledger.send(&cluster, old).await;
    }
    let status = replication_json(&controller);
    assert_eq!(status["master"], old as i64, "{status}");
    assert_eq!(
        status["syncStateSet"].as_array().unwrap().len(),
        2,
        "{status}"
    );
    assert_eq!(status["replicas"].as_array().unwrap().len(), 2, "{status}");

    let new = 1 - old;
    let printed = promote(&controller, new);
    assert!(
        printed.contains(&format!("broker {new} is master")),
        "{printed}"
    );
    // Consumers keep the former master's address until their route poll: it still serves
    // their pulls (slave reads are off; RocketMQ would answer SYSTEM_BUSY until then).
    let former = cluster.brokers[old].as_ref().unwrap().broker.to_string();
    let r = cluster
        .client
        .invoke_timeout(
            &former,
            common::pull_request("after-switchover", TOPIC, 0, 0),
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    let deadline = Instant::now() + DEADLINE;
    while !ledger.send(&cluster, new).await {
        assert!(
            Instant::now() < deadline,
            "the new master never took writes\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The old master follows the new one and gets in sync again.
    while cluster.in_sync().await.len() < 2 {
        ledger.send(&cluster, new).await;
        assert!(
            Instant::now() < deadline,
            "the old master never followed\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let table = admin(&["replication", "--controller", &controller, "--group", GROUP]);
    assert!(table.contains(&format!("master {new}")), "{table}");
    let addr = cluster.brokers[new].as_ref().unwrap().broker.to_string();
    let seen: BTreeSet<String> = drain(&cluster.client, &addr).await.into_values().collect();
    let lost: Vec<&String> = ledger.ok.difference(&seen).collect();
    assert!(
        lost.is_empty(),
        "acknowledged but lost in the switchover: {lost:?}"
    );
    // A frozen slave falls behind: its lag shows in bytes and in seconds (the age of the
    // first record it lacks), the master's is 0.
    cluster.brokers[old].as_ref().unwrap().pause();
    ledger.send(&cluster, new).await; // stored on the master, never acknowledged
    let deadline = Instant::now() + DEADLINE;
    loop {
        let status = replication_json(&controller);
        let replica = |id: usize| {
            status["replicas"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["brokerId"] == id as i64)
                .cloned()
                .unwrap()
        };
        let (master, frozen) = (replica(new), replica(old));
        assert_eq!(master["lagSeconds"], 0.0, "{status}");
        assert_eq!(master["lagBytes"], 0, "{status}");
        // The frozen slave does not answer; the master says what it acknowledged.
        if frozen["role"] == "unreachable"
            && frozen["lagBytes"].as_u64() > Some(0)
            && frozen["lagSeconds"].as_f64() > Some(0.0)
        {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cluster.brokers[old].as_ref().unwrap().resume();
}

/// Producers sending continuously to whichever broker `target` names (at the addresses in
/// `addrs`), each with one send in flight at all times, recording what was attempted and
/// what was acknowledged.
struct Producers {
    ok: std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
    attempted: std::sync::Arc<std::sync::Mutex<BTreeSet<String>>>,
    target: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    addrs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Producers {
    /// Where each broker of `cluster` listens now (a restarted one gets new ports).
    fn addresses(cluster: &Cluster) -> Vec<String> {
        cluster
            .brokers
            .iter()
            .map(|b| b.as_ref().map_or(String::new(), |b| b.broker.to_string()))
            .collect()
    }

    fn start(cluster: &Cluster, count: usize) -> Producers {
        use std::sync::atomic::Ordering;
        let mut producers = Producers {
            ok: Default::default(),
            attempted: Default::default(),
            target: Default::default(),
            addrs: std::sync::Arc::new(std::sync::Mutex::new(Self::addresses(cluster))),
            stop: Default::default(),
            tasks: Vec::new(),
        };
        for p in 0..count {
            let (ok, attempted, target, stop, addrs) = (
                producers.ok.clone(),
                producers.attempted.clone(),
                producers.target.clone(),
                producers.stop.clone(),
                producers.addrs.clone(),
            );
            producers.tasks.push(tokio::spawn(async move {
                let client = RemotingClient::new(RemotingConfig::default());
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let body = format!("p{p}-{n:08}");
                    n += 1;
                    attempted.lock().unwrap().insert(body.clone());
                    let addr = addrs.lock().unwrap()[target.load(Ordering::Relaxed)].clone();
                    let r = client
                        .invoke_timeout(
                            &addr,
                            send_request(TOPIC, 0, body.clone()),
                            Duration::from_secs(2),
                        )
                        .await;
                    match r {
                        Ok(r) if r.code == resp::SUCCESS => {
                            ok.lock().unwrap().insert(body);
                        }
                        _ => tokio::time::sleep(Duration::from_millis(5)).await,
                    }
                }
            }));
        }
        producers
    }

    fn ok_count(&self) -> usize {
        self.ok.lock().unwrap().len()
    }

    /// Sends go to broker `id` from now on.
    fn aim(&self, id: usize) {
        self.target.store(id, std::sync::atomic::Ordering::Relaxed);
    }

    /// Waits until broker `master` of `cluster` is master with both replicas in sync, and
    /// `more` further sends were acknowledged meanwhile.
    async fn in_sync_with_traffic(&self, cluster: &Cluster, more: usize, what: &str) -> usize {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some((m, _)) = cluster.master().await {
                self.aim(m);
                let before = self.ok_count();
                if cluster.in_sync().await.len() == 2 {
                    while self.ok_count() < before + more {
                        assert!(
                            Instant::now() < deadline,
                            "{what}: no traffic\n{}",
                            cluster.logs()
                        );
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    return m;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{what}: no in-sync master\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops the producers; returns what was acknowledged and what was attempted.
    async fn stop(self) -> (BTreeSet<String>, BTreeSet<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.tasks {
            t.await.unwrap();
        }
        let ok = self.ok.lock().unwrap().clone();
        let attempted = self.attempted.lock().unwrap().clone();
        (ok, attempted)
    }
}

/// Once both replicas are in sync again: every body the master holds in queue 0.
async fn final_bodies(cluster: &Cluster) -> BTreeSet<String> {
    let deadline = Instant::now() + DEADLINE;
    let master = loop {
        if let Some((m, _)) = cluster.master().await {
            if cluster.in_sync().await.len() == 2 {
                break m;
            }
        }
        assert!(Instant::now() < deadline, "no in-sync master at the end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    bodies_on(cluster, master).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asynchronous_replication_loses_only_what_the_slave_had_not_received_and_says_how_much() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start_with(tmp.path(), "synchronous = false\n").await;
    // Four producers with a send each in flight at all times, so that kills land mid-stream.
    let producers = Producers::start(&cluster, 4);
    let kills = 5;
    for cycle in 0..kills {
        let what = format!("cycle {cycle}");
        let master = producers.in_sync_with_traffic(&cluster, 50, &what).await;
        let deadline = Instant::now() + DEADLINE;
        cluster.brokers[master].as_mut().unwrap().kill();
        producers.aim(1 - master);
        let before = producers.ok_count();
        while producers.ok_count() == before {
            assert!(
                Instant::now() < deadline,
                "cycle {cycle}: no promotion\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        cluster.spawn(master).await;
        *producers.addrs.lock().unwrap() = Producers::addresses(&cluster);
    }
    let (ok, attempted) = producers.stop().await;
    let seen = final_bodies(&cluster).await;
    let lost = ok.difference(&seen).count();
    let unexpected: Vec<&String> = seen.difference(&attempted).collect();
    eprintln!(
        "asynchronous replication: {lost} of {} acknowledged messages lost over {kills} master kills \
         (acknowledged by the master, not yet on the slave)",
        ok.len()
    );
    assert!(unexpected.is_empty(), "never sent: {unexpected:?}");
}

/// A switchover hands the group over without losing anything, under asynchronous replication
/// too (where the slave may lag the master's acknowledgements): the master stops taking
/// writes until the target holds its whole log, and the writes that waited go on through the
/// target. Four producers keep a send in flight at all times, still aimed at the former
/// master for a while after each switchover (as clients do until their route poll: it
/// relays them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_under_asynchronous_replication_loses_no_acknowledged_message() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start_with(tmp.path(), "synchronous = false\n").await;
    let controller = cluster.controller.broker.to_string();
    let producers = Producers::start(&cluster, 4);
    let switchovers = 5;
    for round in 0..switchovers {
        let what = format!("switchover {round}");
        let old = producers.in_sync_with_traffic(&cluster, 200, &what).await;
        let new = 1 - old;
        let printed = promote(&controller, new);
        assert!(
            printed.contains(&format!("broker {new} is master")),
            "{printed}"
        );
        // Still aimed at the former master: relayed to the new one.
        let before = producers.ok_count();
        let deadline = Instant::now() + DEADLINE;
        while producers.ok_count() < before + 50 {
            assert!(
                Instant::now() < deadline,
                "{what}: no writes through the former master\n{}",
                cluster.logs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let (ok, attempted) = producers.stop().await;
    let seen = final_bodies(&cluster).await;
    assert_kept(
        &format!("{switchovers} switchovers under asynchronous replication"),
        (&ok, &attempted, &seen),
        &cluster,
    );
}

/// Prints how many acknowledged messages (`ok`) `what` lost (missing from `seen`) and fails if
/// any was, or if `seen` holds a body that was never `attempted`.
fn assert_kept(
    what: &str,
    (ok, attempted, seen): (&BTreeSet<String>, &BTreeSet<String>, &BTreeSet<String>),
    cluster: &Cluster,
) {
    let lost: Vec<&String> = ok.difference(seen).collect();
    let unexpected: Vec<&String> = seen.difference(attempted).collect();
    eprintln!("{what}: {} acknowledged, {} lost", ok.len(), lost.len());
    assert!(
        lost.is_empty(),
        "{what}: acknowledged but lost: {} (first {:?})\n{}",
        lost.len(),
        lost.iter().take(10).collect::<Vec<_>>(),
        cluster.logs()
    );
    assert!(unexpected.is_empty(), "{what}: never sent: {unexpected:?}");
}

/// SIGTERM to a master (a node drain, a rolling restart) under asynchronous replication: the
/// master hands the group over to its in-sync slave before it stops, so the slave it leaves
/// holds every message it acknowledged (a plain stop would leave the slave's missing tail to
/// be cut when the old master rejoins), and the slave is master before the old one has
/// exited. Four producers keep a send in flight at all times, aimed at the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_a_master_hands_the_group_over_and_loses_nothing_under_asynchronous_replication()
{
    let tmp = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start_with(tmp.path(), "synchronous = false\n").await;
    let producers = Producers::start(&cluster, 4);
    let stops = 3;
    for round in 0..stops {
        let what = format!("stop {round}");
        let old = producers.in_sync_with_traffic(&cluster, 200, &what).await;
        let (_, epoch) = cluster.master().await.expect("a master");
        let status = cluster.brokers[old]
            .as_mut()
            .unwrap()
            .terminate(DEADLINE)
            .await;
        assert!(status.success(), "{what}: exit status {status}");
        let log = std::fs::read_to_string(&cluster.nodes[old].log).unwrap_or_default();
        assert!(
            log.contains("stopping: the group was handed over"),
            "{what}: the master stopped without handing over\n{}",
            cluster.logs()
        );
        // Elected before the old master exited: no detection delay.
        assert_eq!(
            cluster.master().await,
            Some((1 - old, epoch + 1)),
            "{what}\n{}",
            cluster.logs()
        );
        producers.aim(1 - old);
        cluster.spawn(old).await;
        *producers.addrs.lock().unwrap() = Producers::addresses(&cluster);
    }
    let (ok, attempted) = producers.stop().await;
    let seen = final_bodies(&cluster).await;
    assert_kept(
        &format!("{stops} SIGTERMs to the master under asynchronous replication"),
        (&ok, &attempted, &seen),
        &cluster,
    );
}

/// An isolated master, in network namespaces: b0 alone on one host; b1 and the controller
/// on another; the name server and the clients (this test) in the test's own namespace, on
/// the bridge between them. The cut drops every packet between b0's host and the other host
/// (silently, both ways), while the clients still reach b0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_master_acknowledges_nothing_and_is_cut_back_after_healing() {
    let lab = match common::netns::Lab::create(2) {
        Ok(lab) => lab,
        Err(e) => {
            // Only where network namespaces cannot be made (not root); CI must run it.
            assert_ne!(
                std::env::var("CI").as_deref(),
                Ok("true"),
                "the partition test needs network namespaces: {e}"
            );
            eprintln!("SKIP partition test: cannot make network namespaces: {e}");
            return;
        }
    };
    let (h0, h1) = (lab.host(0).clone(), lab.host(1).clone());
    let at = |h: &common::netns::Host| Place {
        netns: Some(h.netns.clone()),
        ip: h.ip,
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let c = paths(root, "controller", CONTROLLER_SETTINGS);
    let controller =
        Broker::start_at(&at(&h1), &c.data, &c.config, &c.log, Mode::Controller, &[]).await;
    let n = paths(root, "namesrv", "");
    let own = Place {
        netns: None,
        ip: lab.gateway(),
    };
    let namesrv = Broker::start_at(&own, &n.data, &n.config, &n.log, Mode::NameServer, &[]).await;
    let nodes = [
        paths(root, "b0", &broker_settings()),
        paths(root, "b1", &broker_settings()),
    ];
    let controller_addr = controller.broker.to_string();
    let mut brokers = Vec::new();
    for (id, host) in [&h0, &h1].into_iter().enumerate() {
        let p = &nodes[id];
        let broker_id = id.to_string();
        brokers.push(
            Broker::start_at(
                &at(host),
                &p.data,
                &p.config,
                &p.log,
                Mode::Broker {
                    namesrv: namesrv.broker,
                },
                &[
                    "--controller-addr",
                    &controller_addr,
                    "--broker-id",
                    &broker_id,
                ],
            )
            .await,
        );
    }
    let b1 = brokers.pop();
    let b0 = brokers.pop();
    let cluster = Cluster {
        controller,
        namesrv,
        nodes,
        brokers: [b0, b1],
        client: RemotingClient::new(RemotingConfig::default()),
    };
    let mut ledger = Ledger::default();
    let deadline = Instant::now() + DEADLINE;
    loop {
        if cluster.master().await.map(|m| m.0) == Some(0)
            && ledger.send(&cluster, 0).await
            && cluster.in_sync().await.len() == 2
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no in-sync master b0\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for _ in 0..20 {
        assert!(
            ledger.send(&cluster, 0).await,
            "b0 in sync must acknowledge"
        );
    }

    // Cut b0's host from b1's (b1 and the controller); the clients still reach b0.
    lab.cut(&h0, &[h1.ip]);
    let mut during = BTreeSet::new();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let body = format!("isolated-{}", during.len());
        ledger.attempted.insert(body.clone());
        during.insert(body.clone());
        assert_ne!(
            cluster.send(0, &body).await,
            Some(resp::SUCCESS),
            "the isolated master acknowledged a send"
        );
        if ledger.send(&cluster, 1).await {
            break; // b1 was promoted
        }
        assert!(
            Instant::now() < deadline,
            "b1 was not promoted\n{}",
            cluster.logs()
        );
    }
    // Still isolated, b0 acknowledges nothing.
    for i in 0..3 {
        let body = format!("isolated-late-{i}");
        ledger.attempted.insert(body.clone());
        during.insert(body.clone());
        assert_ne!(cluster.send(0, &body).await, Some(resp::SUCCESS));
    }
    for _ in 0..20 {
        ledger.send(&cluster, 1).await;
    }
    // Healed, b0 learns the new epoch, cuts its log back and follows b1.
    lab.heal(&h0);
    let deadline = Instant::now() + DEADLINE;
    while cluster.in_sync().await.len() < 2 || cluster.master().await.map(|m| m.0) != Some(1) {
        ledger.send(&cluster, 1).await;
        assert!(
            Instant::now() < deadline,
            "b0 never rejoined\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let addr = cluster.brokers[1].as_ref().unwrap().broker.to_string();
    let seen: BTreeSet<String> = drain(&cluster.client, &addr).await.into_values().collect();
    let lost: Vec<&String> = ledger.ok.difference(&seen).collect();
    let unexpected: Vec<&String> = seen.difference(&ledger.attempted).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    assert!(unexpected.is_empty(), "never sent: {unexpected:?}");
    let kept: Vec<&String> = seen.intersection(&during).collect();
    assert!(
        kept.is_empty(),
        "writes the isolated master took survived: {kept:?}"
    );
    let b0_log = std::fs::read_to_string(&cluster.nodes[0].log).unwrap();
    assert!(
        b0_log.contains("cutting the commit log back"),
        "b0 was not cut back"
    );
    // The processes go before their namespaces.
    drop(cluster);
    drop(lab);
}

/// A rolling restart's two needs on the broker side. Clients keep a former master's address
/// until their next route poll, so a write that reaches a slave is relayed to the master
/// (not refused); and a slave that stops is dropped from the in-sync set as soon as its
/// stream closes, so synchronous sends do not wait for it for `max-time-not-caught-up-ms`
/// (set to ten minutes here: only the closed stream can explain the drop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_reaching_a_slave_are_relayed_and_a_stopped_slave_leaves_the_in_sync_set() {
    let tmp = tempfile::tempdir().unwrap();
    let settings = format!(
        "{STORAGE_SETTINGS}\
[replication]
slave-timeout-ms = 5000
heartbeat-interval-ms = 200
controller-heartbeat-ms = 200
metadata-sync-interval-ms = 200
max-time-not-caught-up-ms = 600000
"
    );
    let mut cluster = Cluster::launch(tmp.path(), CONTROLLER_SETTINGS, &settings).await;
    let mut ledger = Ledger::default();
    let master = ledger.in_sync_master(&cluster).await;
    let slave = 1 - master;

    // Sent to the slave, stored by the master: SEND_OK, and the master holds it.
    assert!(
        ledger.send(&cluster, slave).await,
        "a send to the slave was not relayed\n{}",
        cluster.logs()
    );
    let on_master = bodies_on(&cluster, master).await;
    let missing: Vec<&String> = ledger.ok.difference(&on_master).collect();
    assert!(missing.is_empty(), "not on the master: {missing:?}");

    // The slave stops: the in-sync set shrinks to the master long before ten minutes, and
    // synchronous sends to the master succeed again.
    cluster.brokers[slave]
        .as_mut()
        .unwrap()
        .terminate(DEADLINE)
        .await;
    let deadline = Instant::now() + DEADLINE;
    while cluster.in_sync().await != BTreeSet::from([master as i64]) {
        assert!(
            Instant::now() < deadline,
            "the stopped slave stayed in the in-sync set\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ledger.send(&cluster, master).await,
        "a synchronous send after the slave left failed\n{}",
        cluster.logs()
    );
}

/// A switchover while a producer keeps sending to the old master (its clients' routes name
/// it until their next poll): the send that waits for the slave when the slave becomes
/// master, and every send after, is answered SEND_OK — relayed to the new master once the
/// old one learns it was deposed — and every one of them is on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_fails_no_send_made_to_the_old_master() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(tmp.path()).await;
    let controller = cluster.controller.broker.to_string();
    let mut ledger = Ledger::default();
    let old = ledger.in_sync_master(&cluster).await;
    let new = 1 - old;
    let old_addr = cluster.brokers[old].as_ref().unwrap().broker.to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let producer = tokio::spawn({
        let (stop, addr) = (stop.clone(), old_addr.clone());
        async move {
            let client = RemotingClient::new(RemotingConfig::default());
            let mut answers = Vec::new();
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let body = format!("s-{n:08}");
                n += 1;
                let code = client
                    .invoke_timeout(&addr, send_request(TOPIC, 0, body.clone()), DEADLINE)
                    .await
                    .map(|r| r.code)
                    .ok();
                answers.push((body, code));
            }
            answers
        }
    });
    promote(&controller, new);
    // Until the old master follows the new one again, and a little after.
    let deadline = Instant::now() + DEADLINE;
    while cluster.in_sync().await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the old master never followed\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let answers = producer.await.unwrap();
    let failed: Vec<_> = answers
        .iter()
        .filter(|(_, code)| *code != Some(resp::SUCCESS))
        .collect();
    assert!(
        failed.is_empty(),
        "sends to the old master failed during the switchover: {failed:?}\n{}",
        cluster.logs()
    );
    let seen = bodies_on(&cluster, new).await;
    let lost: Vec<&String> = answers
        .iter()
        .map(|(body, _)| body)
        .filter(|b| !seen.contains(*b))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged but not on the new master: {lost:?}"
    );
    assert!(
        answers.len() > 10,
        "the producer hardly sent: {}",
        answers.len()
    );
}

/// The group's address: the controller's group endpoint, which the masters register as id 0.
/// Through it a client reaches whichever replica is master, without a new route: after a
/// freeze (the request in flight to the frozen master fails at once: its connection is
/// closed, it does not wait for its timeout) and after a kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_endpoint_leads_clients_to_whichever_replica_is_master() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let group_addr = format!("127.0.0.1:{port}");
    let tmp = tempfile::tempdir().unwrap();
    let controller = format!("{CONTROLLER_SETTINGS}group-endpoints = [\"{GROUP}={group_addr}\"]\n");
    let settings = format!("{}group-address = \"{group_addr}\"\n", broker_settings());
    let mut cluster = Cluster::launch(tmp.path(), &controller, &settings).await;
    let mut ledger = Ledger::default();
    let old = ledger.in_sync_master(&cluster).await;
    assert_eq!(
        routed_master(&cluster).await.as_deref(),
        Some(group_addr.as_str()),
        "the master registers the group's address as id 0"
    );
    // Sends through the group's address land on the master.
    let through = RemotingClient::new(RemotingConfig::default());
    let (body, code) = send_at(&mut ledger, &through, &group_addr).await;
    assert_eq!(code.ok(), Some(resp::SUCCESS), "{}", cluster.logs());
    ledger.ok.insert(body);

    // Freeze the master: a send through the endpoint waits in its socket until the endpoint
    // sees the new master and closes the connection; it is not answered by a timeout.
    cluster.brokers[old].as_ref().unwrap().pause();
    let (body, in_flight) = send_at(&mut ledger, &through, &group_addr).await;
    match in_flight {
        Ok(code) => assert_ne!(code, resp::SUCCESS, "the frozen master answered {body}"),
        Err(e) => assert!(
            matches!(e, conveyor_remoting::RemotingError::ConnectionClosed { .. }),
            "the request to the frozen master was not failed by the closed connection: {e}\n{}",
            cluster.logs()
        ),
    }
    acknowledged_at(
        &mut ledger,
        &cluster,
        &through,
        &group_addr,
        "no SEND_OK through the group address",
    )
    .await;
    let new = 1 - old;
    assert_eq!(cluster.master().await.map(|(m, _)| m), Some(new));
    cluster.brokers[old].as_ref().unwrap().resume();
    assert_eq!(ledger.in_sync_master(&cluster).await, new);
    assert_eq!(
        routed_master(&cluster).await.as_deref(),
        Some(group_addr.as_str()),
        "the route kept the group's address through the failover"
    );

    // Kill the new master: the group's address leads to the other one again.
    cluster.brokers[new].as_mut().unwrap().kill();
    acknowledged_at(
        &mut ledger,
        &cluster,
        &through,
        &group_addr,
        "no SEND_OK after the kill",
    )
    .await;
    assert_eq!(cluster.master().await.map(|(m, _)| m), Some(old));
    let seen: BTreeSet<String> = drain(&cluster.client, &group_addr)
        .await
        .into_values()
        .collect();
    let lost: Vec<&String> = ledger.ok.difference(&seen).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
    let unexpected: Vec<&String> = seen.difference(&ledger.attempted).collect();
    assert!(unexpected.is_empty(), "never sent: {unexpected:?}");
}

/// Sends one new message to `addr`: its body and the answer's code.
async fn send_at(
    ledger: &mut Ledger,
    client: &RemotingClient,
    addr: &str,
) -> (String, Result<i32, conveyor_remoting::RemotingError>) {
    let body = format!("g-{:08}", ledger.next);
    ledger.next += 1;
    ledger.attempted.insert(body.clone());
    let r = client
        .invoke_timeout(addr, send_request(TOPIC, 0, body.clone()), DEADLINE)
        .await;
    (body, r.map(|r| r.code))
}

/// Sends to `addr` until a send is acknowledged (and recorded); fails the test with `what` if
/// none is within the deadline.
async fn acknowledged_at(
    ledger: &mut Ledger,
    cluster: &Cluster,
    client: &RemotingClient,
    addr: &str,
    what: &str,
) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let (body, code) = send_at(ledger, client, addr).await;
        if code.ok() == Some(resp::SUCCESS) {
            ledger.ok.insert(body);
            return;
        }
        assert!(Instant::now() < deadline, "{what}\n{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
