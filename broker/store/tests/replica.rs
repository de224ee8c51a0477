//! Replication in the store (issue 10): a slave's CommitLog is a byte copy of its master's,
//! its ConsumeQueues are rebuilt from the copied bytes, a former master cut back to the point
//! it shares with the new master keeps nothing it wrote after the fork, and the high watermark
//! holds records back from consumers. Two stores in one process stand for master and slave;
//! the bytes go through `read_for_replica` / `append_replicated` exactly as the broker's
//! replication stream carries them, in batches that split records.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{body_for, message, wait_until};
use conveyor_store::epoch::consistent_point;
use conveyor_store::{AcceptAll, MessageStore, StoreConfig, StoreError};

const TOPIC: &str = "Replicated";
const QUEUES: i32 = 3;

fn open(root: &Path) -> MessageStore {
    MessageStore::open(StoreConfig::small(root)).unwrap().0
}

/// Appends `n` messages round-robin over the queues, ids from `first`; bodies vary in size
/// so that records straddle batch and segment ends.
fn produce(store: &MessageStore, first: u64, n: u64) {
    for id in first..first + n {
        let len = 200 + (id as usize * 7919) % 9000;
        let m = message(
            TOPIC,
            (id % QUEUES as u64) as i32,
            &body_for(id, len),
            &format!("id-{id}"),
        );
        store.put_message(&m).unwrap();
    }
}

/// Copies `master`'s log into `slave` from the slave's end, in batches of `batch` bytes that
/// split records, as the replication stream does. Returns the bytes copied.
fn replicate(master: &MessageStore, slave: &MessageStore, batch: usize) -> u64 {
    let mut copied = 0;
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let from = slave.commit_log_max_offset() + pending.len() as u64;
        let Some(bytes) = master.read_for_replica(from, batch) else {
            assert!(
                pending.is_empty(),
                "a record was left incomplete at the end"
            );
            return copied;
        };
        pending.extend_from_slice(&bytes);
        let offset = slave.commit_log_max_offset();
        let taken = slave.append_replicated(offset, &pending).unwrap();
        pending.drain(..taken);
        copied += bytes.len() as u64;
    }
}

/// Every (queue, queue offset) → body readable from `store`.
fn contents(store: &MessageStore) -> BTreeMap<(i32, i64), Vec<u8>> {
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let mut out = BTreeMap::new();
    for q in 0..QUEUES {
        let mut next = store.min_offset(TOPIC, q);
        loop {
            let r = store.get_messages(TOPIC, q, next, 64, 1 << 30, &AcceptAll);
            if r.messages.is_empty() {
                break;
            }
            for (slice, qoff) in r.messages.iter().zip(&r.queue_offsets) {
                let view = conveyor_protocol::message::RecordView::parse(slice).unwrap();
                out.insert((q, *qoff), view.body().to_vec());
            }
            next = r.next_begin_offset;
        }
    }
    out
}

/// The CommitLog bytes `[from, to)` of a store.
fn log_bytes(store: &MessageStore, from: u64, to: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = from;
    while at < to {
        let chunk = store.read_for_replica(at, (to - at) as usize).unwrap();
        out.extend_from_slice(&chunk);
        at += chunk.len() as u64;
    }
    out
}

#[test]
fn a_slave_is_a_byte_copy_of_its_master_and_serves_the_same_queues() {
    let (m_dir, s_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(m_dir.path());
    let slave = open(s_dir.path());
    produce(&master, 0, 600); // about 3 MiB over 1 MiB segments
    assert!(master.commit_log_max_offset() > 2 << 20);
    // Odd batch sizes so records and blanks are split between batches.
    for batch in [4093, 70_001, 1 << 20] {
        produce(&master, 10_000 + batch as u64, 50);
        replicate(&master, &slave, batch);
    }
    let end = master.commit_log_max_offset();
    assert_eq!(slave.commit_log_max_offset(), end);
    assert!(
        log_bytes(&master, 0, end) == log_bytes(&slave, 0, end),
        "the slave's log differs from the master's"
    );
    assert_eq!(contents(&slave), contents(&master));
    for q in 0..QUEUES {
        assert_eq!(slave.max_offset(TOPIC, q), master.max_offset(TOPIC, q));
    }
    // Promoted, the slave goes on numbering each queue where the master stopped.
    let next = master.max_offset(TOPIC, 1);
    let p = slave
        .put_message(&message(TOPIC, 1, b"after", "after"))
        .unwrap();
    assert_eq!(p.placements[0].queue_offset, next);
}

#[test]
fn bytes_that_do_not_continue_the_log_are_refused_and_change_nothing() {
    let (m_dir, s_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(m_dir.path());
    let slave = open(s_dir.path());
    produce(&master, 0, 20);
    replicate(&master, &slave, 1 << 20);
    let end = slave.commit_log_max_offset();
    // Not at the slave's end.
    assert!(matches!(
        slave.append_replicated(end + 8, b"whatever"),
        Err(StoreError::ReplicaOffset { .. })
    ));
    // A damaged record.
    produce(&master, 20, 1);
    let mut bytes = master.read_for_replica(end, 1 << 20).unwrap().to_vec();
    let last = bytes.len() - 30;
    bytes[last] ^= 0x40;
    assert!(matches!(
        slave.append_replicated(end, &bytes),
        Err(StoreError::ReplicaStream(_))
    ));
    // A record copied to another offset (it names its own).
    let other = tempfile::tempdir().unwrap();
    let shifted = open(other.path());
    shifted
        .put_message(&message(TOPIC, 0, b"first", "x"))
        .unwrap();
    let off = shifted.commit_log_max_offset();
    let r = shifted.append_replicated(off, &master.read_for_replica(0, 1 << 20).unwrap());
    assert!(matches!(r, Err(StoreError::ReplicaStream(_))), "{r:?}");
    assert_eq!(slave.commit_log_max_offset(), end);
    replicate(&master, &slave, 1 << 20);
    assert_eq!(contents(&slave), contents(&master));
}

#[test]
fn a_former_master_is_cut_to_the_shared_point_and_then_follows_the_new_master() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = open(a_dir.path());
    let b = open(b_dir.path());
    a.begin_epoch(1).unwrap();
    produce(&a, 0, 300);
    replicate(&a, &b, 65_536);
    b.follow_epoch(1, 0).unwrap();
    let fork = b.commit_log_max_offset();
    // A goes on alone (never acknowledged: its slave did not get these), B is promoted.
    produce(&a, 1_000, 200);
    b.begin_epoch(2).unwrap();
    produce(&b, 2_000, 150);
    assert_eq!(b.epochs().last().unwrap().start_offset, fork);

    let cut = consistent_point(
        &a.epochs(),
        a.commit_log_max_offset(),
        &b.epochs(),
        b.commit_log_max_offset(),
    );
    assert_eq!(cut, Some(fork));
    a.truncate_to(fork).unwrap();
    assert_eq!(a.commit_log_max_offset(), fork);
    assert_eq!(a.epochs().last().unwrap().epoch, 1);
    a.follow_epoch(2, fork).unwrap();
    replicate(&b, &a, 100_000);

    let end = b.commit_log_max_offset();
    assert!(log_bytes(&a, 0, end) == log_bytes(&b, 0, end));
    let got = contents(&a);
    assert_eq!(got, contents(&b));
    assert_eq!(got.len(), 450);
    let served: std::collections::HashSet<&Vec<u8>> = got.values().collect();
    for id in 1_000..1_200u64 {
        let len = 200 + (id as usize * 7919) % 9000;
        assert!(
            !served.contains(&body_for(id, len)),
            "message {id}, written after the fork, is still served"
        );
    }
    // Restarted, the store agrees with itself.
    drop(a);
    let a = open(a_dir.path());
    assert_eq!(contents(&a), got);
    assert_eq!(a.epochs(), b.epochs());
}

#[test]
fn a_cut_below_records_not_yet_dispatched_keeps_queue_offsets_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    produce(&store, 0, 30);
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let keep = store.commit_log_max_offset();
    let before = contents(&store);
    // Hold the rest back from dispatch, then cut inside it.
    store.set_confirm_offset(keep);
    produce(&store, 30, 30);
    store.truncate_to(keep).unwrap();
    store.set_confirm_offset(u64::MAX);
    produce(&store, 100, 6);
    let after = contents(&store);
    assert_eq!(after.len(), 36);
    for q in 0..QUEUES {
        let offsets: Vec<i64> = after.keys().filter(|k| k.0 == q).map(|k| k.1).collect();
        let expected: Vec<i64> = (0..offsets.len() as i64).collect();
        assert_eq!(offsets, expected, "queue {q} has gaps or repeats");
    }
    assert!(before.iter().all(|(k, v)| after.get(k) == Some(v)));
}

#[test]
fn the_high_watermark_holds_records_back_from_consumers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    produce(&store, 0, 9);
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let mark = store.commit_log_max_offset();
    store.set_confirm_offset(mark);
    produce(&store, 9, 9);
    // Give the dispatcher every chance to go past the mark: it must not.
    std::thread::sleep(Duration::from_millis(50));
    let held: i64 = (0..QUEUES).map(|q| store.max_offset(TOPIC, q)).sum();
    assert_eq!(held, 9, "records past the high watermark reached a queue");
    store.set_confirm_offset(u64::MAX);
    assert!(wait_until(Duration::from_secs(10), || {
        (0..QUEUES).map(|q| store.max_offset(TOPIC, q)).sum::<i64>() == 18
    }));
}

#[test]
fn a_fresh_slave_starts_at_the_masters_first_segment() {
    let (m_dir, s_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(m_dir.path());
    produce(&master, 0, 700);
    let segment = StoreConfig::small(m_dir.path()).commit_log_segment_size;
    let start = segment * 2;
    assert!(master.commit_log_max_offset() > start + 100_000);
    let slave = open(s_dir.path());
    slave.start_empty_at(start).unwrap();
    assert_eq!(slave.commit_log_max_offset(), start);
    copies_from(&master, slave, s_dir.path(), start, |slave| {
        // Once it holds records, it cannot be moved.
        assert!(slave.start_empty_at(start + segment).is_err());
    });
}

/// Replicates `master` into `slave` (started empty at `start`, a segment of the master) and
/// checks the copy: the same bytes from `start` on, queues serving only what the master
/// serves with the master's ends and nothing below `start`, `more` checks, and the same
/// contents after a reopen of `slave_dir`.
fn copies_from(
    master: &MessageStore,
    slave: MessageStore,
    slave_dir: &Path,
    start: u64,
    more: impl FnOnce(&MessageStore),
) {
    replicate(master, &slave, 300_000);
    let end = master.commit_log_max_offset();
    assert!(log_bytes(master, start, end) == log_bytes(&slave, start, end));
    let m = contents(master);
    let s = contents(&slave);
    assert!(!s.is_empty());
    assert!(
        s.iter().all(|(k, v)| m.get(k) == Some(v)),
        "the replica serves what the master does not"
    );
    for q in 0..QUEUES {
        assert_eq!(slave.max_offset(TOPIC, q), master.max_offset(TOPIC, q));
        assert!(slave.min_offset(TOPIC, q) > 0);
    }
    more(&slave);
    drop(slave);
    let slave = open(slave_dir);
    assert_eq!(contents(&slave), s);
}

/// A replica whose next bytes the master's retention already deleted: it drops its log and
/// copies the master's from the master's first segment, and its queues then serve only what
/// the master serves (also after a restart).
#[test]
fn a_replica_holding_records_can_start_again_at_the_masters_first_segment() {
    let (m_dir, s_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = open(m_dir.path());
    let slave = open(s_dir.path());
    produce(&master, 0, 40);
    replicate(&master, &slave, 64 * 1024);
    assert!(wait_until(Duration::from_secs(10), || {
        (0..QUEUES).map(|q| slave.max_offset(TOPIC, q)).sum::<i64>() == 40
    }));
    produce(&master, 40, 700);
    let segment = StoreConfig::small(m_dir.path()).commit_log_segment_size;
    let start = segment * 2;
    assert!(slave.commit_log_max_offset() < start);
    assert!(master.commit_log_max_offset() > start + 100_000);

    // Moving a log that holds records is refused until it is emptied.
    assert!(slave.start_empty_at(start).is_err());
    slave.truncate_to(slave.commit_log_min_offset()).unwrap();
    slave.start_empty_at(start).unwrap();
    assert_eq!(slave.commit_log_min_offset(), start);
    assert_eq!(slave.commit_log_max_offset(), start);
    copies_from(&master, slave, s_dir.path(), start, |_| {});
}
