//! One client cannot hurt the others (issue 9, defects 9 and 11): a client that sends large
//! requests and stops reading is held to the connection's response budget and disconnected
//! after the write timeout, shutdown finishes within its drain deadline even then, a frame
//! announced but never sent costs only what arrived, and connections over the limit are
//! refused with a remark.
//!
//! Memory is read from this test process's /proc/self/status (the server runs in-process), so
//! the tests of this file run one at a time (a process-wide lock) and nothing else runs here.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use conveyor::remoting::ServeLimits;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{Properties, StoredMessage};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

/// The tests measure this process's memory: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A field of /proc/self/status in KiB (VmRSS, VmSize).
fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}

/// Stores a message of `len` bytes directly and returns its commit-log offset.
fn store_big_message(server: &TestServer, len: usize) -> u64 {
    let mut properties = Properties::new();
    properties.insert("UNIQ_KEY", "BIG");
    let m = StoredMessage {
        topic: "Big".into(),
        queue_id: 0,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: 0,
        born_host: "127.0.0.1:1".parse().unwrap(),
        store_timestamp: 0,
        store_host: "127.0.0.1:2".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::from(vec![7u8; len]),
        properties,
    };
    let store = server.broker().store().clone();
    store.put_message(&m).expect("store").placements[0].physical_offset
}

fn view(offset: u64, opaque: i32) -> RemotingCommand {
    let mut cmd = RemotingCommand::request(request_code::VIEW_MESSAGE_BY_ID, Default::default())
        .with_ext("offset", offset);
    cmd.opaque = opaque;
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_held_to_its_budget_and_disconnected() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::start_with(|c| {
        c.limits = ServeLimits {
            response_budget_bytes: 4 << 20,
            write_timeout: Duration::from_secs(2),
            ..ServeLimits::default()
        };
    })
    .await;
    let offset = store_big_message(&server, 200 << 10);
    // Warm up (the record's pages, the handler paths), then take the baseline.
    let mut reader = server.raw().await;
    let r = reader.request(view(offset, 0)).await;
    assert_eq!(r.code, response_code::SUCCESS, "{r:?}");
    let before = status_kib("VmRSS");

    // 1,500 views of a 200 KiB record (300 MiB of answers) on a connection that never reads.
    let mut stuck = server.raw().await;
    let mut frames = Vec::new();
    for i in 0..1500 {
        frames.extend_from_slice(
            &conveyor_protocol::frame::encode_frame(&view(offset, i + 1)).unwrap(),
        );
    }
    stuck.write_raw(&frames).await.expect("requests written");

    // Until the server gives up on it, keep poking it (a write to a connection the server has
    // closed is answered with a reset) and watch this process's memory.
    let mut peak = before;
    let deadline = Instant::now() + Duration::from_secs(60);
    let poke = conveyor_protocol::frame::encode_frame(&view(offset, 10_000)).unwrap();
    let closed = loop {
        peak = peak.max(status_kib("VmRSS"));
        if Instant::now() >= deadline {
            break false;
        }
        let write = tokio::time::timeout(Duration::from_millis(200), stuck.stream.write_all(&poke));
        if let Ok(Err(_)) = write.await {
            break true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        closed,
        "the server never disconnected the client that stopped reading"
    );
    let grown_mib = peak.saturating_sub(before) / 1024;
    println!("memory grown while the client did not read: {grown_mib} MiB (300 MiB of answers)");
    assert!(
        grown_mib < 64,
        "the server held {grown_mib} MiB for a client that does not read (budget 4 MiB)"
    );

    // Other clients were served all along, and still are.
    let r = reader.request(view(offset, 0)).await;
    assert_eq!(r.code, response_code::SUCCESS);
    assert!(r.body.len() > 200 << 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_within_its_drain_deadline_despite_a_stuck_client() {
    let _serial = SERIAL.lock().await;
    let mut server = TestServer::start_with(|c| {
        c.limits = ServeLimits {
            response_budget_bytes: 4 << 20,
            // Never times out a write in this test: only the drain deadline can end it.
            write_timeout: Duration::from_secs(3600),
            drain_timeout: Duration::from_secs(2),
            ..ServeLimits::default()
        };
    })
    .await;
    let offset = store_big_message(&server, 200 << 10);
    let mut stuck = server.raw().await;
    let mut frames = Vec::new();
    for i in 0..300 {
        frames.extend_from_slice(
            &conveyor_protocol::frame::encode_frame(&view(offset, i + 1)).unwrap(),
        );
    }
    stuck.write_raw(&frames).await.expect("requests written");
    // Wait until the server is stuck writing to it: a second client's view is still answered
    // (the server works), while the stuck one holds its budget.
    let mut other = server.raw().await;
    assert_eq!(
        other.request(view(offset, 0)).await.code,
        response_code::SUCCESS
    );
    let stopped = tokio::time::timeout(Duration::from_secs(60), server.stop()).await;
    assert!(
        stopped.is_ok(),
        "shutdown never finished with a client that does not read"
    );
    drop(stuck);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_announced_but_not_sent_costs_only_what_arrived() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::start().await;
    let before = status_kib("VmSize");
    // 200 connections each announce a 16 MiB frame (the limit) and send 64 bytes of it.
    let mut conns = Vec::new();
    for _ in 0..200 {
        let mut c = server.raw().await;
        let mut start = Vec::new();
        start.extend_from_slice(&((16u32 << 20) - 8).to_be_bytes());
        start.extend_from_slice(&[0u8; 64]);
        c.write_raw(&start).await.expect("write");
        conns.push(c);
    }
    // The server has read them all once a request on a fresh connection is answered after
    // them (connections are served concurrently; give the others a moment by answering
    // one request per 50 connections).
    for _ in 0..4 {
        let mut probe = server.raw().await;
        let r = probe
            .request(producer_heartbeat("probe@1", "ProbeGroup"))
            .await;
        assert_eq!(r.code, response_code::SUCCESS);
    }
    let grown_mib = status_kib("VmSize").saturating_sub(before) / 1024;
    println!("address space grown for 200 half-sent 16 MiB frames: {grown_mib} MiB");
    assert!(
        grown_mib < 1024,
        "200 announced-but-unsent frames reserved {grown_mib} MiB (3,200 MiB if reserved whole)"
    );
    drop(conns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_are_refused_with_a_remark() {
    let _serial = SERIAL.lock().await;
    let server = TestServer::start_with(|c| {
        c.limits = ServeLimits {
            max_connections: 4,
            ..ServeLimits::default()
        };
    })
    .await;
    // The test server's own clients hold some connections; fill the rest.
    let mut held = Vec::new();
    let refused = loop {
        let mut c = server.raw().await;
        let r = c.request(producer_heartbeat("limit@1", "LimitGroup")).await;
        if r.code == response_code::SYSTEM_BUSY {
            break r;
        }
        assert_eq!(r.code, response_code::SUCCESS);
        held.push(c);
        assert!(
            held.len() <= 4,
            "more than max_connections connections were served"
        );
    };
    let remark = refused.remark.clone().unwrap_or_default();
    assert!(remark.contains("too many connections"), "{remark}");
    // A freed slot serves again.
    drop(held.pop());
    let served = {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let mut c = server.raw().await;
            let r = c.request(producer_heartbeat("limit@2", "LimitGroup")).await;
            if r.code == response_code::SUCCESS || Instant::now() >= deadline {
                break r.code == response_code::SUCCESS;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    assert!(served, "a freed connection slot was never reused");
}
