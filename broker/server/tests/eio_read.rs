//! EIO on read (issue 9, fault tests): the store reads its files through memory mappings, and
//! a block the disk cannot read surfaces as SIGBUS in the reading thread, not as an error code.
//! So the broker process dies (a container runtime restarts it) rather than serving anything
//! it could not read. This test pins that behaviour down and what must follow it: the broker
//! on faultfs, SYNC flush, acknowledged messages; the page cache dropped (a plug: everything
//! was fsynced, so nothing is lost); reads of the commit log failing with EIO; the broker
//! started on it must not become ready serving wrong data — it dies by a signal; once the
//! disk reads again, recovery is clean and every acknowledged message is served.

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::child::Broker;
use common::{http_get, read_queue, send_request, RawConn, DEADLINE};
use conveyor_faultfs::{FaultFs, Faults, Target};
use conveyor_protocol::code::response_code;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_blocks_stop_the_broker_and_recovery_afterwards_loses_nothing() {
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
    // every read of the commit log fail.
    fs.plug().expect("remount");
    faults.fail_reads(Some(Target::PathContains("/commitlog/".into())));

    let mut sick = Broker::spawn(&data, &config, &log);
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
                "the broker became ready on an unreadable log\n{}",
                sick.log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "the broker neither died nor got ready on an unreadable log\n{}",
            sick.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    sick.child = None;
    eprintln!("eio_read: broker on an unreadable log ended with {status:?}");
    assert!(
        status.signal() == Some(libc::SIGBUS) || !status.success(),
        "the broker ended successfully on an unreadable log"
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
