//! EIO on read (issue 9, fault tests), with the broker on faultfs.
//!
//! A running broker: pulls of data that is not in memory (mincore) read it with positional
//! reads (pread), not through the store's mappings, so a block the disk cannot read comes back
//! as an error, not as a SIGBUS. The test rolls the commit log so that one topic lives in the
//! first segment and another in the one being written, drops the first segment's cached pages
//! and makes its reads fail: a pull of that topic is answered SYSTEM_ERROR with the remark
//! "read failed at commitlog offset 0: Input/output error", on a connection that stays open,
//! while the resident topic is still served, the process runs and `/readyz` is 200; once the
//! disk reads again the same pull serves every message. The same for a cold, unreadable
//! ConsumeQueue file. (Before the cold path read with pread, this pull killed the broker with
//! SIGBUS.)
//!
//! Startup: recovery reads nothing through the mappings that it did not first read with
//! pread, so a broker started on an unreadable log (or queue file) ends with a clear error
//! naming what it could not read ("read failed at commitlog offset 0: Input/output error"),
//! exit code 1, never a signal, and never becomes ready on data it could not read; once the
//! disk reads again, recovery is clean and every acknowledged message is served. SYNC flush,
//! acknowledged messages, the page cache dropped (a plug: everything was fsynced, so nothing is
//! lost), then reads of the commit log, or of the queue's file, failing. (Before recovery read
//! with pread, the broker died by SIGBUS here.)

mod common;

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Duration;

use common::child::Broker;
use common::{http_get, pull_request, read_queue, send_request, RawConn, Read, DEADLINE};
use conveyor_faultfs::{FaultFs, Faults, Target};
use conveyor_protocol::code::response_code;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::decode_records;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_started_on_an_unreadable_log_exits_with_an_error_and_recovers_afterwards() {
    start_on_unreadable_blocks("/commitlog/", "read failed at commitlog offset 0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_started_on_an_unreadable_queue_file_exits_with_an_error_and_recovers_afterwards()
{
    start_on_unreadable_blocks(
        "/consumequeue/Eio/0/0",
        "read failed at consumequeue Eio/0 offset",
    )
    .await;
}

/// Acknowledges messages under SYNC flush, pulls the plug (nothing is lost: everything was
/// fsynced; the page cache is gone), makes reads of files whose path contains `unreadable`
/// fail, and starts the broker: it must end by itself, not by a signal, with `expected` and the
/// IO error in its log, without ever answering `/readyz` 200. Then the disk reads again, and a
/// restart serves every acknowledged message.
async fn start_on_unreadable_blocks(unreadable: &str, expected: &str) {
    if !conveyor_faultfs::fuse_available() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "/dev/fuse is missing under CI: the EIO test cannot run"
        );
        eprintln!("eio_read: skipped, no /dev/fuse on this machine");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut fs = FaultFs::mount(&mnt, Faults::default()).expect("mount faultfs");
    let faults = fs.handle();
    let data = mnt.join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::File::open(&mnt)
        .and_then(|d| d.sync_all())
        .unwrap();
    let config = tmp.path().join("conveyor.toml");
    std::fs::write(
        &config,
        "[store]\nflush-mode = \"sync\"\nsegment-size = 1048576\nmax-message-size = 65536\n",
    )
    .unwrap();
    let log = tmp.path().join("conveyor.log");

    let mut broker = Broker::start(&data, &config, &log).await;
    let mut conn = RawConn::connect(&broker.broker.to_string()).await;
    let mut acked = BTreeMap::new();
    for i in 0..50 {
        let body = format!("m{i}");
        let r = conn.request(send_request("Eio", 0, body.clone())).await;
        assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
        acked.insert(r.get_i64("queueOffset").unwrap(), body.into_bytes());
    }
    broker.kill();
    // Drop the kernel's cache of the files (everything acknowledged was fsynced), then make
    // the reads fail.
    fs.plug().expect("remount");
    faults.fail_reads(Some(Target::PathContains(unreadable.into())));

    let sick_log = tmp.path().join("sick.log");
    let mut sick = Broker::spawn(&data, &config, &sick_log);
    let deadline = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(status) = sick
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            break status;
        }
        if let Ok((200, _)) = http_get(sick.http, "/readyz").await {
            // Ready means it read its log: it must not have (every read fails).
            panic!(
                "the broker became ready on unreadable files\n{}",
                sick.log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the broker neither ended nor got ready on unreadable files\n{}",
            sick.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The whole log: the error comes first, a backtrace may follow it.
    let said = std::fs::read_to_string(&sick_log).unwrap_or_default();
    sick.child = None;
    eprintln!("eio_read: broker on unreadable {unreadable} ended with {status:?}");
    assert_eq!(
        status.signal(),
        None,
        "the broker died by a signal on unreadable files\n{said}"
    );
    assert_eq!(status.code(), Some(1), "exit status\n{said}");
    assert!(
        said.contains(expected) && said.contains("Input/output error"),
        "the error does not say what could not be read (want {expected:?})\n{said}"
    );

    // The disk reads again: a clean recovery, and every acknowledged message is served.
    faults.fail_reads(None);
    let broker = Broker::start(&data, &config, &log).await;
    let mut conn = RawConn::connect(&broker.broker.to_string()).await;
    let served = read_queue(&mut conn, "CG_eio", "Eio", 0).await;
    assert_eq!(served, acked, "after recovery\n{}", broker.log_tail());
    drop(broker);
    drop(fs);
}

/// One PULL of `topic`/`queue_id` from `offset` on `conn`: the response, or why none came
/// (the broker closed the connection, or died).
async fn pull(conn: &mut RawConn, topic: &str, offset: i64) -> Read {
    let mut cmd = pull_request("CG_eio_cold", topic, 0, offset);
    cmd.opaque = common::opaque();
    let want = cmd.opaque;
    if conn.send(&cmd).await.is_err() {
        return Read::Closed;
    }
    loop {
        match conn.read(DEADLINE).await {
            Read::Frame(r) if r.is_response() && r.opaque == want => return Read::Frame(r),
            Read::Frame(_) => continue,
            other => return other,
        }
    }
}

/// Pulls queue 0 of `topic` from offset 0 until `want` messages came back (an acknowledged
/// send is durable before the dispatcher has necessarily written its queue entry, so a first
/// pull may see fewer): the bodies by queue offset. Fails on an answer other than SUCCESS or
/// PULL_NOT_FOUND, on a lost connection, or at the deadline.
async fn pull_all(
    conn: &mut RawConn,
    topic: &str,
    broker: &Broker,
    want: usize,
) -> BTreeMap<i64, Vec<u8>> {
    let deadline = Instant::now() + DEADLINE;
    let mut got = BTreeMap::new();
    let mut offset = 0;
    while got.len() < want {
        let Read::Frame(r) = pull(conn, topic, offset).await else {
            panic!("no answer to a pull of {topic}\n{}", broker.log_tail());
        };
        match r.code {
            response_code::SUCCESS => {
                got.extend(bodies(&r));
                offset = r.get_i64("nextBeginOffset").expect("nextBeginOffset");
            }
            response_code::PULL_NOT_FOUND => tokio::time::sleep(Duration::from_millis(5)).await,
            code => panic!("pull of {topic} answered {code}: {:?}", r.remark),
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {} of {want} messages served",
            got.len()
        );
    }
    got
}

/// The bodies a successful pull response carries, by queue offset.
fn bodies(r: &RemotingCommand) -> BTreeMap<i64, Vec<u8>> {
    decode_records(&r.body)
        .expect("records")
        .into_iter()
        .map(|m| (m.queue_offset, m.body.to_vec()))
        .collect()
}

/// Drops the kernel's cached pages of `path` (a file on the faultfs mount), as memory
/// pressure would: the next read of them must go to the filesystem. Opening the file on the
/// mount and POSIX_FADV_DONTNEED do it even for pages the broker has mapped (faultfs opens
/// without FOPEN_KEEP_CACHE, so the kernel invalidates the file's cache, mappings included;
/// fadvise alone would skip mapped pages); the broker's mincore then reports them cold.
fn drop_cache(path: &Path) {
    let file = std::fs::File::open(path).expect("open for fadvise");
    // SAFETY: plain syscall on a descriptor this function owns.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0, "posix_fadvise(DONTNEED) of {}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_cold_pull_is_answered_with_an_error_and_the_broker_keeps_serving() {
    if !conveyor_faultfs::fuse_available() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "/dev/fuse is missing under CI: the EIO test cannot run"
        );
        eprintln!("eio_read: skipped, no /dev/fuse on this machine");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = FaultFs::mount(&mnt, Faults::default()).expect("mount faultfs");
    let faults = fs.handle();
    let data = mnt.join("data");
    std::fs::create_dir(&data).unwrap();
    let config = tmp.path().join("conveyor.toml");
    std::fs::write(
        &config,
        "[store]\nflush-mode = \"sync\"\nsegment-size = 1048576\nmax-message-size = 65536\n",
    )
    .unwrap();
    let log = tmp.path().join("conveyor.log");
    let mut broker = Broker::start(&data, &config, &log).await;
    let mut conn = RawConn::connect(&broker.broker.to_string()).await;
    let mut send = async |topic: &str, body: Vec<u8>| {
        let r = conn.request(send_request(topic, 0, body.clone())).await;
        assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
        (r.get_i64("queueOffset").unwrap(), body)
    };

    // "Cold" lives in the first commit-log segment; enough padding rolls the log, so that
    // "Warm" lives in the second one (the segment being written, in memory).
    let mut cold = BTreeMap::new();
    for i in 0..20 {
        let (offset, body) = send("Cold", format!("cold-{i}").into_bytes()).await;
        cold.insert(offset, body);
    }
    for _ in 0..20 {
        send("Pad", vec![b'p'; 60 << 10]).await;
    }
    let mut warm = BTreeMap::new();
    for i in 0..20 {
        let (offset, body) = send("Warm", format!("warm-{i}").into_bytes()).await;
        warm.insert(offset, body);
    }

    // The first segment drops out of memory and its blocks become unreadable.
    let first_segment = data.join("commitlog").join(format!("{:020}", 0));
    faults.fail_reads(Some(Target::PathContains(
        "/commitlog/00000000000000000000".into(),
    )));
    drop_cache(&first_segment);

    let r = match pull(&mut conn, "Cold", 0).await {
        Read::Frame(r) => r,
        other => panic!(
            "a pull of unreadable data got no answer ({other:?}); broker exit status: {:?}\n{}",
            broker
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten()),
            broker.log_tail()
        ),
    };
    assert_eq!(r.code, response_code::SYSTEM_ERROR, "{:?}", r.remark);
    let remark = r.remark.clone().unwrap_or_default();
    assert!(
        remark.contains("read failed at commitlog offset") && remark.contains("Input/output error"),
        "remark: {remark}"
    );
    assert!(r.body.is_empty(), "nothing served from an unreadable block");
    eprintln!("eio_read: the cold pull was answered {remark:?}");

    // The same connection, the process and the probes are fine; the resident queue is served.
    assert_eq!(pull_all(&mut conn, "Warm", &broker, warm.len()).await, warm);
    assert!(
        broker.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the broker died"
    );
    assert_eq!(http_get(broker.http, "/readyz").await.unwrap().0, 200);

    // The disk reads again: the same pull serves every message.
    faults.fail_reads(None);
    assert_eq!(pull_all(&mut conn, "Cold", &broker, cold.len()).await, cold);

    // The same for the queue's entries: a cold, unreadable ConsumeQueue file.
    let queue_file = data.join("consumequeue/Cold/0").join(format!("{:020}", 0));
    faults.fail_reads(Some(Target::PathContains("/consumequeue/Cold/".into())));
    drop_cache(&queue_file);
    let Read::Frame(r) = pull(&mut conn, "Cold", 0).await else {
        panic!(
            "no answer for an unreadable queue file\n{}",
            broker.log_tail()
        );
    };
    assert_eq!(r.code, response_code::SYSTEM_ERROR, "{:?}", r.remark);
    let remark = r.remark.clone().unwrap_or_default();
    assert!(
        remark.contains("read failed at consumequeue Cold/0 offset 0")
            && remark.contains("Input/output error"),
        "remark: {remark}"
    );
    let Read::Frame(r) = pull(&mut conn, "Warm", 0).await else {
        panic!(
            "the connection did not survive the failed read\n{}",
            broker.log_tail()
        );
    };
    assert_eq!(bodies(&r), warm);
    faults.fail_reads(None);
    let Read::Frame(r) = pull(&mut conn, "Cold", 0).await else {
        panic!(
            "no answer once the queue file reads again\n{}",
            broker.log_tail()
        );
    };
    assert_eq!(r.code, response_code::SUCCESS, "{:?}", r.remark);
    assert_eq!(bodies(&r), cold);
    assert!(
        broker.child.as_mut().unwrap().try_wait().unwrap().is_none(),
        "the broker died"
    );
    drop(conn);
    drop(broker);
    drop(fs);
}
