//! Disk faults under a running broker, injected by the faultfs test filesystem
//! (`tests/faultfs`) that the store lives on (issue 9, defect 5 and the fault tests):
//!
//! - a failed fsync (EIO) fences the store: no SEND_OK for data that may not be on disk, no
//!   later "successful" retry after the kernel dropped the pages, writes refused with
//!   SERVICE_NOT_AVAILABLE and probes answering 503 until the store is reopened; after the
//!   restart recovery re-verifies the log and nothing acknowledged is lost;
//! - a full disk refuses writes with a code while reads go on, and writes resume once space
//!   is back, with nothing acknowledged lost.
//!
//! The filesystem is served by this test process (a FUSE background session) and the broker
//! runs in-process on it.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use conveyor_faultfs::{FaultFs, Faults, Target};
use conveyor_protocol::code::response_code;
use conveyor_store::FlushMode;

const TOPIC: &str = "Faulty";

fn fuse_or_skip(test: &str) -> bool {
    if conveyor_faultfs::fuse_available() {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "/dev/fuse is missing under CI: {test} cannot run"
    );
    eprintln!("{test}: skipped, no /dev/fuse on this machine");
    false
}

/// Every message of queue 0 from offset 0, by queue offset (body as text).
async fn read_all(conn: &mut RawConn) -> BTreeMap<i64, String> {
    read_queue(conn, "CG_faults", TOPIC, 0)
        .await
        .into_iter()
        .map(|(offset, body)| (offset, String::from_utf8_lossy(&body).into_owned()))
        .collect()
}

/// Sends `body`; returns the response code and, on SEND_OK, the queue offset.
async fn send(conn: &mut RawConn, body: &str) -> (i32, Option<i64>, String) {
    let r = conn.request(send_request(TOPIC, 0, body.to_string())).await;
    let offset =
        (r.code == response_code::SUCCESS).then(|| r.get_i64("queueOffset").expect("queueOffset"));
    (r.code, offset, r.remark.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_fences_the_store_until_it_is_reopened() {
    if fuse_or_skip("a_failed_fsync_fences_the_store_until_it_is_reopened") {
        fenced_by(|faults, target| faults.fail_fsync(target)).await;
    }
}

/// EIO on write: the kernel's writeback of the dirty mapped pages fails, which msync reports;
/// the same fence must follow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_write_back_fences_the_store_until_it_is_reopened() {
    if fuse_or_skip("a_failed_write_back_fences_the_store_until_it_is_reopened") {
        fenced_by(|faults, target| faults.fail_writes(target)).await;
    }
}

/// Runs a SYNC producer, switches the commit log's fault on with `inject` and off again, and
/// checks the fence, the probes and the reopen.
async fn fenced_by(inject: impl Fn(&conveyor_faultfs::Handle, Option<Target>)) {
    let mount = tempfile::tempdir().unwrap();
    let fs = FaultFs::mount(mount.path(), Faults::default()).expect("mount faultfs");
    let faults = fs.handle();
    let data = fs.path().join("data");
    let mut server = TestServer::start_in_with(&data, |c| {
        c.store.flush_mode = FlushMode::Sync;
        c.store.sync_flush_timeout = Duration::from_secs(2);
    })
    .await;
    server.create_topic(TOPIC, 1).await;
    let mut conn = server.raw().await;
    let mut acked = BTreeMap::new();
    for i in 0..20 {
        let body = format!("before-{i}");
        let (code, offset, remark) = send(&mut conn, &body).await;
        assert_eq!(code, response_code::SUCCESS, "{remark}");
        acked.insert(offset.unwrap(), body);
    }

    // The disk starts failing for the commit log: a SYNC send is not acknowledged.
    inject(&faults, Some(Target::PathContains("/commitlog/".into())));
    let (code, _, remark) = send(&mut conn, "during").await;
    assert!(
        code == response_code::FLUSH_DISK_TIMEOUT || code == response_code::SERVICE_NOT_AVAILABLE,
        "a send whose flush failed got code {code}: {remark}"
    );
    // The disk "recovers": a retried flush could now succeed for pages the kernel already
    // dropped, so the store must keep refusing until it is reopened.
    inject(&faults, None);
    let (code, _, remark) = send(&mut conn, "after").await;
    assert_eq!(
        code,
        response_code::SERVICE_NOT_AVAILABLE,
        "the store acknowledged a write after a failed flush: {remark}"
    );
    assert!(remark.contains("flush failed"), "{remark}");
    let (ready, why) = http_get(server.http(), "/readyz").await.expect("readyz");
    assert_eq!(ready, 503, "{why}");
    assert!(why.contains("flush failed"), "{why}");
    let (live, why) = http_get(server.http(), "/healthz").await.expect("healthz");
    assert_eq!(live, 503, "a fenced store asks to be restarted: {why}");
    // Reads go on meanwhile.
    let served = read_all(&mut conn).await;
    for (offset, body) in &acked {
        assert_eq!(
            served.get(offset),
            Some(body),
            "acknowledged message {offset}"
        );
    }

    // Reopened (the restart Kubernetes does on the failed liveness probe): writes resume and
    // every acknowledged message is there.
    server.restart().await;
    let mut conn = server.raw().await;
    let (code, offset, remark) = send(&mut conn, "reopened").await;
    assert_eq!(code, response_code::SUCCESS, "{remark}");
    acked.insert(offset.unwrap(), "reopened".into());
    let (ready, _) = http_get(server.http(), "/readyz").await.expect("readyz");
    assert_eq!(ready, 200);
    let served = read_all(&mut conn).await;
    for (offset, body) in &acked {
        assert_eq!(
            served.get(offset),
            Some(body),
            "acknowledged message {offset} lost"
        );
    }
    server.stop().await;
    drop(fs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_with_a_code_and_keeps_serving_reads() {
    if fuse_or_skip("a_full_disk_refuses_writes_with_a_code_and_keeps_serving_reads") {
        full_disk(Faults::default()).await;
    }
}

/// Issue 9, defect 6: without fallocate the store fell back to a sparse file, so on a full
/// disk a write through the mapping into an unbacked hole would raise SIGBUS. It allocates by
/// writing zeros instead, and a full disk stays a clean refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fallocate_a_full_disk_is_still_a_clean_refusal() {
    if fuse_or_skip("without_fallocate_a_full_disk_is_still_a_clean_refusal") {
        full_disk(Faults {
            fallocate_unsupported: true,
            ..Faults::default()
        })
        .await;
    }
}

/// Fills the disk under a SYNC producer and checks the refusal, the reads, the resumption.
async fn full_disk(faults: Faults) {
    let mount = tempfile::tempdir().unwrap();
    let fs = FaultFs::mount(mount.path(), faults).expect("mount faultfs");
    let faults = fs.handle();
    let data = fs.path().join("data");
    let mut server = TestServer::start_in_with(&data, |c| {
        c.store.flush_mode = FlushMode::Sync;
        c.store.commit_log_segment_size = 256 << 10;
        c.store.max_message_size = 64 << 10;
    })
    .await;
    server.create_topic(TOPIC, 1).await;
    let mut conn = server.raw().await;
    // No room for another segment: the disk fills while the producer goes on.
    faults.set_capacity(faults.used() + (128 << 10));
    let body = "x".repeat(8 << 10);
    let mut acked = BTreeMap::new();
    let mut refused = None;
    for i in 0..200 {
        let msg = format!("{i}:{body}");
        let (code, offset, remark) = send(&mut conn, &msg).await;
        match offset {
            Some(o) => {
                acked.insert(o, msg);
            }
            None => {
                refused = Some((code, remark));
                break;
            }
        }
    }
    let (code, remark) = refused.expect("a full disk never refused a write");
    assert_eq!(code, response_code::SERVICE_NOT_AVAILABLE, "{remark}");
    assert!(remark.to_lowercase().contains("disk"), "{remark}");
    // Reads go on.
    let served = read_all(&mut conn).await;
    for (offset, msg) in &acked {
        assert_eq!(
            served.get(offset),
            Some(msg),
            "acknowledged message {offset}"
        );
    }
    // Space comes back: writes resume, nothing acknowledged is lost, also across a restart.
    faults.set_capacity(Faults::default().capacity);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let offset = loop {
        let (_, offset, remark) = send(&mut conn, "room again").await;
        if let Some(o) = offset {
            break o;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "writes never resumed: {remark}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    acked.insert(offset, "room again".into());
    server.restart().await;
    let mut conn = server.raw().await;
    let served = read_all(&mut conn).await;
    for (offset, msg) in &acked {
        assert_eq!(
            served.get(offset),
            Some(msg),
            "acknowledged message {offset} lost"
        );
    }
    server.stop().await;
    drop(fs);
}
