//! Master/slave replication between real `conveyor` processes (issue 10): a SYNC_MASTER
//! answers SEND_OK only once its slave holds the message, and anything else (no slave, a
//! killed slave) gets SLAVE_NOT_AVAILABLE or FLUSH_SLAVE_TIMEOUT, never SEND_OK; consumers
//! never see a record the slave does not hold (the high watermark); the slave's CommitLog is
//! a byte copy of the master's; a fresh slave catches up from the master's first segment; a
//! former master whose log went past the new master's is cut back before it follows.
//!
//! The master runs `conveyor standalone` (its own name server); slaves run `conveyor broker`
//! registering with it, and learn the master's replication address from the name server.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::child::{Broker, Mode};
use common::{pull_request, read_queue, send_request, RawConn, DEADLINE};
use conveyor_protocol::code::response_code as resp;
use tokio::time::Instant;

const TOPIC: &str = "Replicated";

/// Short heartbeats and timeouts so that failures show within the test's deadlines.
const REPLICATION: &str = "[replication]\nslave-timeout-ms = 1500\nheartbeat-interval-ms = 200\nhousekeeping-interval-ms = 2000\nmetadata-sync-interval-ms = 200\n";

/// Slaves that serve pulls, so the tests can read what a slave holds.
const READS: &str = "[broker]\nslave-read-enable = true\n";

/// A test directory with a settings file for the given extra settings (TOML tables, before
/// the `[store]` and `[replication]` ones).
struct Node {
    data: PathBuf,
    config: PathBuf,
    log: PathBuf,
}

fn node(root: &Path, name: &str, settings: &str) -> Node {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("conveyor.toml");
    std::fs::write(
        &config,
        format!(
            "{settings}[store]\nsegment-size = 1048576\nmax-message-size = 65536\n{REPLICATION}"
        ),
    )
    .unwrap();
    Node {
        data: dir.join("data"),
        config,
        log: dir.join("conveyor.log"),
    }
}

async fn master(n: &Node, role: &str) -> Broker {
    Broker::start_as(
        &n.data,
        &n.config,
        &n.log,
        Mode::Standalone,
        &["--broker-role", role],
    )
    .await
}

async fn slave(n: &Node, master: &Broker) -> Broker {
    Broker::start_as(
        &n.data,
        &n.config,
        &n.log,
        Mode::Broker {
            namesrv: master.namesrv,
        },
        &["--broker-role", "SLAVE", "--broker-id", "1"],
    )
    .await
}

/// Sends until one is answered SEND_OK (the slave caught up and is acknowledging), failing
/// after the deadline with the last answer. Returns the bodies stored meanwhile.
async fn send_until_ok(conn: &mut RawConn, tag: &str) -> Vec<(i64, Vec<u8>)> {
    let deadline = Instant::now() + DEADLINE;
    let mut stored = Vec::new();
    for i in 0.. {
        let body = format!("{tag}-{i}").into_bytes();
        let r = conn.request(send_request(TOPIC, 0, body.clone())).await;
        assert_ne!(r.code, resp::SYSTEM_ERROR, "{:?}", r.remark);
        if let Ok(offset) = r.get_i64("queueOffset") {
            stored.push((offset, body));
        }
        if r.code == resp::SUCCESS {
            return stored;
        }
        assert!(
            Instant::now() < deadline,
            "no SEND_OK: last answer {} {:?}",
            r.code,
            r.remark
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    unreachable!()
}

/// The bytes of every CommitLog segment, by file name, without the zeros after the end.
fn commit_log(data: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(data.join("commitlog")).unwrap() {
        let e = e.unwrap();
        let mut bytes = std::fs::read(e.path()).unwrap();
        while bytes.last() == Some(&0) {
            bytes.pop();
        }
        out.insert(e.file_name().to_string_lossy().into_owned(), bytes);
    }
    out
}

/// Waits until pulls of queue 0 from `addr` return `want` messages.
async fn wait_for_queue(addr: &str, want: usize) -> BTreeMap<i64, Vec<u8>> {
    let mut conn = RawConn::connect(addr).await;
    let deadline = Instant::now() + DEADLINE;
    loop {
        let got = read_queue(&mut conn, "readers", TOPIC, 0).await;
        if got.len() >= want || Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_master_answers_send_ok_only_once_its_slave_holds_the_message() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, s) = (
        node(tmp.path(), "master", READS),
        node(tmp.path(), "slave", READS),
    );
    let mut master = master(&m, "SYNC_MASTER").await;
    let mut conn = RawConn::connect(&master.broker.to_string()).await;

    // No slave yet: stored, but not SEND_OK.
    let r = conn.request(send_request(TOPIC, 0, "alone")).await;
    assert_eq!(r.code, resp::SLAVE_NOT_AVAILABLE, "{:?}", r.remark);
    // And no consumer sees it: the slave does not hold it.
    let mut reader = RawConn::connect(&master.broker.to_string()).await;
    assert!(read_queue(&mut reader, "readers", TOPIC, 0)
        .await
        .is_empty());

    let mut slave_proc = slave(&s, &master).await;
    let mut stored = send_until_ok(&mut conn, "catch-up").await;
    for i in 0..300 {
        let body = format!("synced-{i}-{}", "x".repeat(i * 10));
        let r = conn.request(send_request(TOPIC, 0, body.clone())).await;
        assert_eq!(r.code, resp::SUCCESS, "send {i}: {:?}", r.remark);
        stored.push((r.get_i64("queueOffset").unwrap(), body.into_bytes()));
    }
    // Everything acknowledged is readable, on the master and on the slave.
    let on_master = wait_for_queue(&master.broker.to_string(), 1 + stored.len()).await;
    let on_slave = wait_for_queue(&slave_proc.broker.to_string(), 1 + stored.len()).await;
    for (offset, body) in &stored {
        assert_eq!(
            on_master.get(offset),
            Some(body),
            "offset {offset} on the master"
        );
        assert_eq!(
            on_slave.get(offset),
            Some(body),
            "offset {offset} on the slave"
        );
    }
    assert_eq!(on_slave, on_master);
    // A slave takes no writes.
    let mut to_slave = RawConn::connect(&slave_proc.broker.to_string()).await;
    let r = to_slave
        .request(send_request(TOPIC, 0, "to the slave"))
        .await;
    assert_eq!(r.code, resp::SERVICE_NOT_AVAILABLE, "{:?}", r.remark);

    // The slave dies: no SEND_OK, and nothing new becomes visible.
    slave_proc.kill();
    let before = on_master.len();
    let mut unacked = 0;
    for i in 0..5 {
        let r = conn
            .request(send_request(TOPIC, 0, format!("unreplicated-{i}")))
            .await;
        assert!(
            r.code == resp::SLAVE_NOT_AVAILABLE || r.code == resp::FLUSH_SLAVE_TIMEOUT,
            "send {i} with the slave dead: {} {:?}",
            r.code,
            r.remark
        );
        unacked += 1;
    }
    let mut reader = RawConn::connect(&master.broker.to_string()).await;
    assert_eq!(
        read_queue(&mut reader, "readers", TOPIC, 0).await.len(),
        before
    );

    // Back, the slave catches up: the unreplicated messages become visible and SEND_OK returns.
    let slave_proc = slave(&s, &master).await;
    send_until_ok(&mut conn, "after").await;
    let on_master = wait_for_queue(&master.broker.to_string(), before + unacked + 1).await;
    assert!(
        on_master.len() > before + unacked,
        "{} of {}",
        on_master.len(),
        before + unacked
    );

    // Byte copies once both are stopped.
    let _ = master.terminate(DEADLINE).await;
    let mut slave_proc = slave_proc;
    let _ = slave_proc.terminate(DEADLINE).await;
    assert_eq!(
        commit_log(&s.data),
        commit_log(&m.data),
        "the slave's log differs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_slave_of_a_master_with_history_catches_up_to_a_byte_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, s) = (
        node(tmp.path(), "master", READS),
        node(tmp.path(), "slave", READS),
    );
    let mut master = master(&m, "ASYNC_MASTER").await;
    let mut conn = RawConn::connect(&master.broker.to_string()).await;
    // About 3.5 MiB over 1 MiB segments, before any slave exists.
    let body = "y".repeat(12_000);
    for i in 0..300 {
        let r = conn
            .request(send_request(TOPIC, 0, format!("{i}-{body}")))
            .await;
        assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    }
    let mut slave_proc = slave(&s, &master).await;
    let on_slave = wait_for_queue(&slave_proc.broker.to_string(), 300).await;
    assert_eq!(on_slave.len(), 300);
    let mut reader = RawConn::connect(&master.broker.to_string()).await;
    assert_eq!(read_queue(&mut reader, "readers", TOPIC, 0).await, on_slave);
    let _ = master.terminate(DEADLINE).await;
    let _ = slave_proc.terminate(DEADLINE).await;
    let (ml, sl) = (commit_log(&m.data), commit_log(&s.data));
    assert!(ml.len() >= 4, "{} segments", ml.len());
    assert_eq!(sl, ml, "the slave's log differs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_former_master_is_cut_back_to_the_new_masters_term_before_it_follows() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (node(tmp.path(), "a", READS), node(tmp.path(), "b", READS));
    // A is master of term 1; B copies it.
    let mut a_proc = master(&a, "ASYNC_MASTER").await;
    let mut conn = RawConn::connect(&a_proc.broker.to_string()).await;
    for i in 0..50 {
        let r = conn
            .request(send_request(TOPIC, 0, format!("shared-{i}")))
            .await;
        assert_eq!(r.code, resp::SUCCESS);
    }
    let mut b_proc = slave(&b, &a_proc).await;
    assert_eq!(
        wait_for_queue(&b_proc.broker.to_string(), 50).await.len(),
        50
    );
    // B stops; A writes on alone (nobody acknowledged these as replicated).
    let _ = b_proc.terminate(DEADLINE).await;
    for i in 0..40 {
        let r = conn
            .request(send_request(TOPIC, 0, format!("lost-{i}")))
            .await;
        assert_eq!(r.code, resp::SUCCESS);
    }
    a_proc.kill();
    // B becomes master: term 2 starts where its log ends.
    let mut b_proc = master(&b, "ASYNC_MASTER").await;
    let mut conn = RawConn::connect(&b_proc.broker.to_string()).await;
    for i in 0..30 {
        let r = conn
            .request(send_request(TOPIC, 0, format!("new-{i}")))
            .await;
        assert_eq!(r.code, resp::SUCCESS);
    }
    // A comes back as B's slave: its 40 messages after the fork go, B's 30 come.
    let a_proc = slave(&a, &b_proc).await;
    let on_a = wait_for_queue(&a_proc.broker.to_string(), 80).await;
    let bodies: Vec<String> = on_a
        .values()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert_eq!(on_a.len(), 80, "{bodies:?}");
    assert!(bodies.iter().all(|b| !b.starts_with("lost-")), "{bodies:?}");
    assert_eq!(bodies.iter().filter(|b| b.starts_with("new-")).count(), 30);
    let offsets: Vec<i64> = on_a.keys().copied().collect();
    assert_eq!(
        offsets,
        (0..80).collect::<Vec<i64>>(),
        "queue offsets in order"
    );
    let _ = b_proc.terminate(DEADLINE).await;
    let mut a_proc = a_proc;
    let _ = a_proc.terminate(DEADLINE).await;
    assert_eq!(
        commit_log(&a.data),
        commit_log(&b.data),
        "the former master's log differs"
    );
    assert!(
        std::fs::read_to_string(&a.log)
            .unwrap()
            .contains("cutting the commit log back"),
        "no truncation logged"
    );
}

/// RocketMQ's `slaveReadEnable`: off (the default) a slave refuses pulls with SYSTEM_BUSY and
/// a master's answers say "read from the master"; on, the slave serves what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slave_serves_pulls_only_when_slave_reads_are_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, closed, open) = (
        node(tmp.path(), "master", ""),
        node(tmp.path(), "closed", ""),
        node(tmp.path(), "open", READS),
    );
    let master = master(&m, "ASYNC_MASTER").await;
    let mut conn = RawConn::connect(&master.broker.to_string()).await;
    for i in 0..5 {
        let r = conn.request(send_request(TOPIC, 0, format!("m-{i}"))).await;
        assert_eq!(r.code, resp::SUCCESS);
    }
    assert_eq!(wait_for_queue(&master.broker.to_string(), 5).await.len(), 5);
    let r = conn.request(pull_request("readers", TOPIC, 0, 0)).await;
    assert_eq!(r.code, resp::SUCCESS);
    assert_eq!(r.get_i64("suggestWhichBrokerId").unwrap(), 0);
    let closed = slave(&closed, &master).await;
    let mut to_closed = RawConn::connect(&closed.broker.to_string()).await;
    let r = to_closed
        .request(pull_request("readers", TOPIC, 0, 0))
        .await;
    assert_eq!(r.code, resp::SYSTEM_BUSY, "{:?}", r.remark);
    assert!(
        r.remark
            .as_deref()
            .unwrap_or_default()
            .contains("slave-read-enable"),
        "{:?}",
        r.remark
    );
    drop(to_closed);
    let mut closed = closed;
    let _ = closed.terminate(DEADLINE).await;
    let open = slave(&open, &master).await;
    assert_eq!(
        wait_for_queue(&open.broker.to_string(), 5).await.len(),
        5,
        "a slave with slave reads on serves what it holds"
    );
}

/// Same-zone reads (RocketMQ's zone: `ROCKETMQ_ZONE` on both sides): the master registers its
/// zone as the group's `zoneName`, name servers give a client in zone mode only its zone's
/// groups, and with slave reads on a consumer that names its zone (`__ZONE_NAME`) is sent to
/// the replica there and kept there. The slave's zone arrives late, through its zone file (as
/// on Kubernetes, once the pod is scheduled), and reaches the master on its replication
/// stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_is_sent_to_the_replica_in_its_zone() {
    // On the heap: the whole exchange as one future is too deep for the test thread's stack
    // in a debug build.
    Box::pin(zone_reads()).await
}

async fn zone_reads() {
    use conveyor_protocol::code::request_code as rc;
    use conveyor_protocol::command::RemotingCommand;
    use conveyor_protocol::route::{TopicRouteData, ZONE_MODE, ZONE_NAME};

    let tmp = tempfile::tempdir().unwrap();
    let zone_file = tmp.path().join("slave-zone");
    let m = node(
        tmp.path(),
        "master",
        "[broker]\nslave-read-enable = true\nzone = \"zone-a\"\n",
    );
    let s = node(
        tmp.path(),
        "slave",
        &format!(
            "[broker]\nslave-read-enable = true\nzone-file = \"{}\"\n",
            zone_file.display()
        ),
    );
    let master = master(&m, "ASYNC_MASTER").await;
    let mut conn = RawConn::connect(&master.broker.to_string()).await;
    for i in 0..5 {
        let r = conn.request(send_request(TOPIC, 0, format!("z-{i}"))).await;
        assert_eq!(r.code, resp::SUCCESS);
    }
    let slave = slave(&s, &master).await;
    assert_eq!(wait_for_queue(&slave.broker.to_string(), 5).await.len(), 5);

    let pull_from = |zone: Option<&str>| {
        let req = pull_request("zoned", TOPIC, 0, 0);
        match zone {
            Some(z) => req.with_ext(ZONE_NAME, z),
            None => req,
        }
    };
    let suggested = |r: &RemotingCommand| r.get_i64("suggestWhichBrokerId").unwrap();
    // The slave has no zone yet: everyone reads from the master.
    let r = conn.request(pull_from(Some("zone-b"))).await;
    assert_eq!((r.code, suggested(&r)), (resp::SUCCESS, 0));

    std::fs::write(&zone_file, "zone-b\n").unwrap();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let r = conn.request(pull_from(Some("zone-b"))).await;
        if suggested(&r) == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "never sent to the zone-b slave");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = conn.request(pull_from(Some("zone-a"))).await;
    assert_eq!(suggested(&r), 0, "zone-a's replica is the master");
    let r = conn.request(pull_from(None)).await;
    assert_eq!(suggested(&r), 0, "no zone: the group's broker id");
    let r = conn.request(pull_from(Some("zone-c"))).await;
    assert_eq!(suggested(&r), 0, "no replica in zone-c");

    let mut to_slave = RawConn::connect(&slave.broker.to_string()).await;
    let r = to_slave.request(pull_from(Some("zone-b"))).await;
    assert_eq!(
        (r.code, suggested(&r)),
        (resp::SUCCESS, 1),
        "kept on the slave"
    );
    let r = to_slave.request(pull_from(Some("zone-a"))).await;
    assert_eq!(suggested(&r), 0, "back to the master");

    // The name server: the group's zone is the master's; zone mode filters on it.
    let mut namesrv = RawConn::connect(&master.namesrv.to_string()).await;
    let route = |zone_mode: Option<&str>| {
        let req = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC, Default::default())
            .with_ext("topic", TOPIC);
        match zone_mode {
            Some(z) => req.with_ext(ZONE_MODE, "true").with_ext(ZONE_NAME, z),
            None => req,
        }
    };
    let groups = |r: RemotingCommand| {
        assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
        let route: TopicRouteData = conveyor_protocol::json::from_slice(&r.body).unwrap();
        route
            .broker_datas
            .into_iter()
            .map(|b| b.zone_name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        groups(namesrv.request(route(None)).await),
        vec![Some("zone-a".to_string())]
    );
    assert_eq!(
        groups(namesrv.request(route(Some("zone-a"))).await).len(),
        1
    );
    assert!(groups(namesrv.request(route(Some("zone-b"))).await).is_empty());
}

/// TLS enforcing and ACL on (issue 25): a slave that has the cluster secret follows its
/// master over TLS; one with another secret is refused; a plaintext connection to the
/// replication port is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_enforcing_and_acl_only_members_with_the_secret_replicate() {
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("plain_acl.yml");
    std::fs::write(&users, "accounts: []\n").unwrap();
    let secured = |secret: &str| {
        let file = tmp.path().join(format!("secret-{secret}"));
        std::fs::write(&file, secret).unwrap();
        format!(
            "[tls]\nmode = \"enforcing\"\n[acl]\nenabled = true\nusers-file = {:?}\ncluster-secret-file = {:?}\n",
            users, file
        )
    };
    let (m, s, r) = (
        node(tmp.path(), "master", &secured("the-cluster-secret-1")),
        node(tmp.path(), "slave", &secured("the-cluster-secret-1")),
        node(tmp.path(), "rogue", &secured("another-secret-of-16")),
    );
    let mut master = master(&m, "ASYNC_MASTER").await;
    let mut member = slave(&s, &master).await;
    let follows = |id: &'static str| {
        let http = master.http;
        async move {
            common::http_get(http, "/metrics")
                .await
                .is_ok_and(|(_, text)| {
                    text.contains(&format!(
                        "conveyor_replication_slave_lag_bytes{{slave=\"{id}\"}}"
                    ))
                })
        }
    };
    common::wait_until("the member follows its master over TLS", DEADLINE, || {
        follows("1")
    })
    .await;

    // A broker of another cluster secret pointed at the master's replication port (its
    // registration with the name server is refused too, so it is not waited for).
    let ha = master.replication.to_string();
    let mut rogue = Broker::spawn_as(
        &r.data,
        &r.config,
        &r.log,
        Mode::Broker {
            namesrv: master.namesrv,
        },
        &[
            "--broker-role",
            "SLAVE",
            "--broker-id",
            "2",
            "--master-address",
            &ha,
        ],
    );
    common::wait_until("the rogue is refused for its secret", DEADLINE, || {
        let log = std::fs::read_to_string(&r.log).unwrap_or_default();
        async move { log.contains("does not match the cluster secret") }
    })
    .await;
    assert!(
        !follows("2").await,
        "a broker without the cluster secret follows the master"
    );

    // The replication port takes TLS only.
    let ha = master.replication;
    let mut plain = tokio::net::TcpStream::connect(ha).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    plain
        .write_all(&[0, 0, 0, 8, 1, 0, 1, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(DEADLINE, plain.read(&mut buf))
        .await
        .unwrap();
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "a plaintext peer got {read:?}"
    );

    let _ = rogue.terminate(DEADLINE).await;
    let _ = member.terminate(DEADLINE).await;
    let _ = master.terminate(DEADLINE).await;
}
