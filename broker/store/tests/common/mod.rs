//! Helpers shared by the store's integration tests.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_protocol::message::{Properties, StoredMessage};

/// A message for `topic`/`queue_id` with a UNIQ_KEY and optional extra properties.
pub fn message(topic: &str, queue_id: i32, body: &[u8], uniq: &str) -> StoredMessage {
    let mut properties = Properties::new();
    properties.insert("UNIQ_KEY", uniq);
    StoredMessage {
        topic: topic.to_string(),
        queue_id,
        flag: 0,
        queue_offset: 0,
        physical_offset: 0,
        sys_flag: 0,
        born_timestamp: 1_700_000_000_000,
        born_host: "127.0.0.1:40000".parse().unwrap(),
        store_timestamp: 0,
        store_host: "127.0.0.1:10911".parse().unwrap(),
        reconsume_times: 0,
        prepared_transaction_offset: 0,
        body: Bytes::copy_from_slice(body),
        properties,
    }
}

/// Deterministic pseudo-random body for an id (so a checker can regenerate it).
pub fn body_for(id: u64, len: usize) -> Vec<u8> {
    let mut x = id.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Polls `cond` until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Copies a store directory tree (without its `lock` file), as a closed store's snapshot.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else if e.file_name() != "lock" {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}
