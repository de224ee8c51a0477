//! Out of file descriptors (issue 9, fault tests): the broker child process has its
//! RLIMIT_NOFILE lowered at run time (prlimit) to just above what it holds. New connections
//! then cannot be accepted and new ConsumeQueue files cannot be created: messages to new
//! topics are still stored and acknowledged but wait for their queue, while connections and
//! queues that exist keep working. Once descriptors are available again everything catches
//! up, and after a SIGKILL and restart nothing acknowledged is lost.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::child::Broker;
use common::{read_queue, send_request, RawConn, DEADLINE};
use conveyor_protocol::code::response_code;
use tokio::time::Instant;

/// Bodies of queue 0 of `topic`, by queue offset.
async fn read_all(conn: &mut RawConn, topic: &str) -> BTreeMap<i64, Vec<u8>> {
    read_queue(conn, "CG_fd", topic, 0).await
}

/// Sends and returns the acknowledged queue offset.
async fn send_ok(conn: &mut RawConn, topic: &str, body: &str) -> i64 {
    let r = conn.request(send_request(topic, 0, body.to_string())).await;
    assert_eq!(
        r.code,
        response_code::SUCCESS,
        "send to {topic}: {:?}",
        r.remark
    );
    r.get_i64("queueOffset").expect("queueOffset")
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .count() as u64
}

/// Sets the soft RLIMIT_NOFILE of `pid` (the hard limit stays).
fn set_nofile(pid: u32, soft: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the current limits of `pid` into `old`.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            std::ptr::null(),
            &mut old,
        )
    };
    assert_eq!(rc, 0, "prlimit read: {}", std::io::Error::last_os_error());
    let new = libc::rlimit {
        rlim_cur: soft.min(old.rlim_max),
        rlim_max: old.rlim_max,
    };
    // SAFETY: sets the limits of `pid` from `new`.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_NOFILE,
            &new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit set: {}", std::io::Error::last_os_error());
}

async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    let deadline = Instant::now() + DEADLINE;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within the deadline");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_out_of_file_descriptors_stalls_only_what_needs_new_ones() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = dir.path().join("conveyor.toml");
    std::fs::write(&config, "[store]\nflush-mode = \"sync\"\n").unwrap();
    let log = dir.path().join("conveyor.log");
    let mut broker = Broker::start(&data, &config, &log).await;
    let addr = broker.broker.to_string();
    let mut conn = RawConn::connect(&addr).await;
    let mut acked: BTreeMap<String, BTreeMap<i64, Vec<u8>>> = BTreeMap::new();
    let mut record = |topic: &str, offset: i64, body: &str| {
        acked
            .entry(topic.to_string())
            .or_default()
            .insert(offset, body.as_bytes().to_vec());
    };
    let o = send_ok(&mut conn, "Existing", "e0").await;
    record("Existing", o, "e0");
    wait_for("the existing queue serves", || {
        let addr = addr.clone();
        async move {
            let mut c = RawConn::connect(&addr).await;
            !read_all(&mut c, "Existing").await.is_empty()
        }
    })
    .await;

    // No descriptor to spare.
    let pid = broker.pid().expect("pid");
    set_nofile(pid, open_fds(pid) + 1);

    // New topics: stored and acknowledged (the commit log needs no new descriptor), but their
    // ConsumeQueue files cannot be created yet.
    for t in 0..4 {
        let topic = format!("New{t}");
        let body = format!("n{t}");
        let o = send_ok(&mut conn, &topic, &body).await;
        record(&topic, o, &body);
    }
    // The existing queue keeps delivering new messages meanwhile.
    let o = send_ok(&mut conn, "Existing", "e1").await;
    record("Existing", o, "e1");
    let deadline = Instant::now() + DEADLINE;
    while read_all(&mut conn, "Existing").await.len() < 2 {
        assert!(
            Instant::now() < deadline,
            "the existing queue stopped with the new ones\n{}",
            broker.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A new connection cannot be served now (no descriptor to accept it), without harm.
    let pending = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");

    // Descriptors come back: the new queues catch up, the waiting connection is served.
    set_nofile(pid, 65_536);
    for t in 0..4 {
        let topic = format!("New{t}");
        wait_for(&format!("{topic} catches up"), || {
            let addr = addr.clone();
            let topic = topic.clone();
            async move {
                let mut c = RawConn::connect(&addr).await;
                read_all(&mut c, &topic).await.len() == 1
            }
        })
        .await;
    }
    drop(pending);

    // SIGKILL and restart: every acknowledged message is there.
    broker.kill();
    let broker = Broker::start(&data, &config, &log).await;
    let mut conn = RawConn::connect(&broker.broker.to_string()).await;
    for (topic, messages) in &acked {
        let served = read_all(&mut conn, topic).await;
        assert_eq!(
            &served,
            messages,
            "{topic} after restart\n{}",
            broker.log_tail()
        );
    }
}
