//! Behaviour of the store as a whole: puts, reads, restarts, bad input, retention.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use conveyor_protocol::message::{tag_hash_code, RecordView};
use conveyor_store::{
    AcceptAll, FlushMode, GetStatus, MessageFilter, MessageStore, StoreConfig, StoreError,
};

fn open(cfg: StoreConfig) -> MessageStore {
    MessageStore::open(cfg).expect("open store").0
}

struct TagCode(i64);

impl MessageFilter for TagCode {
    fn matches_entry(&self, e: &conveyor_store::CqEntry) -> bool {
        e.tag_code == self.0
    }
}

#[test]
fn put_then_read_back_by_queue_offset_key_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(StoreConfig::small(dir.path()));
    let mut placements = Vec::new();
    for i in 0..50u64 {
        let mut m = message(
            "TopicA",
            (i % 3) as i32,
            &body_for(i, 100),
            &format!("U{i}"),
        );
        m.properties
            .insert("KEYS", format!("order-{} common", i / 10));
        m.properties
            .insert("TAGS", if i % 2 == 0 { "even" } else { "odd" });
        let r = store.put_message(&m).unwrap();
        placements.push(r.placements[0]);
    }
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    // Queue offsets are dense per queue and in append order.
    for q in 0..3 {
        let expected = (0..50).filter(|i| i % 3 == q).count() as i64;
        assert_eq!(store.max_offset("TopicA", q), expected);
        assert_eq!(store.min_offset("TopicA", q), 0);
    }
    let r = store.get_messages("TopicA", 0, 0, 100, 1 << 20, &AcceptAll);
    assert_eq!(r.status, GetStatus::Found);
    assert_eq!(r.messages.len(), 17);
    for (n, slice) in r.messages.iter().enumerate() {
        let v = RecordView::parse_verified(slice, true).unwrap();
        let i = (n * 3) as u64;
        assert_eq!(v.body(), &body_for(i, 100)[..]);
        assert_eq!(v.queue_offset(), n as i64);
        assert_eq!(v.property("UNIQ_KEY"), Some(format!("U{i}").as_str()));
    }
    // Tag filtering on the ConsumeQueue entry.
    let even = tag_hash_code("even");
    let r = store.get_messages("TopicA", 1, 0, 100, 1 << 20, &TagCode(even));
    assert!(r
        .messages
        .iter()
        .all(|s| RecordView::parse(s).unwrap().property("TAGS") == Some("even")));
    assert_eq!(r.next_begin_offset, store.max_offset("TopicA", 1));
    // By physical offset, by key and by unique id.
    let p = placements[7];
    let v = store.message_at(p.physical_offset).unwrap();
    assert_eq!(
        RecordView::parse(&v).unwrap().property("UNIQ_KEY"),
        Some("U7")
    );
    assert!(store.message_at(p.physical_offset + 1).is_none());
    let hits = store.query_by_key("TopicA", "order-2", 100, 0, i64::MAX);
    assert_eq!(hits.len(), 10);
    assert_eq!(
        store.query_by_key("TopicA", "U33", 10, 0, i64::MAX).len(),
        1
    );
    assert!(store
        .query_by_key("TopicB", "U33", 10, 0, i64::MAX)
        .is_empty());
    // Offset by time: everything was stored after t0.
    assert_eq!(store.offset_by_time("TopicA", 2, 0), 0);
    assert_eq!(
        store.offset_by_time("TopicA", 2, i64::MAX),
        store.max_offset("TopicA", 2)
    );
    // Read statuses at the edges.
    let max = store.max_offset("TopicA", 0);
    let r = store.get_messages("TopicA", 0, max, 10, 1 << 20, &AcceptAll);
    assert_eq!(r.status, GetStatus::OffsetOverflowOne);
    let r = store.get_messages("TopicA", 0, max + 5, 10, 1 << 20, &AcceptAll);
    assert_eq!(
        (r.status, r.next_begin_offset),
        (GetStatus::OffsetOverflowBadly, max)
    );
    let r = store.get_messages("Nope", 0, 0, 10, 1 << 20, &AcceptAll);
    assert_eq!(r.status, GetStatus::NoMatchedLogicQueue);
}

#[test]
fn survives_clean_restart_and_continues_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig::small(dir.path());
    {
        let store = open(cfg.clone());
        for i in 0..2000u64 {
            // Enough data to roll over several 1 MiB segments.
            store
                .put_message(&message("T", 0, &body_for(i, 1500), &format!("U{i}")))
                .unwrap();
        }
        store.shutdown().unwrap();
    }
    assert!(!dir.path().join("abort").exists());
    let (store, report) = MessageStore::open(cfg).unwrap();
    assert!(!report.unclean);
    assert_eq!(store.max_offset("T", 0), 2000);
    let r = store
        .put_message(&message("T", 0, b"next", "U2000"))
        .unwrap();
    assert_eq!(r.placements[0].queue_offset, 2000);
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let r = store.get_messages("T", 0, 1990, 20, 1 << 20, &AcceptAll);
    assert_eq!(r.messages.len(), 11);
    assert_eq!(RecordView::parse(&r.messages[10]).unwrap().body(), b"next");
    assert_eq!(store.query_by_key("T", "U5", 1, 0, i64::MAX).len(), 1);
}

#[test]
fn batch_is_contiguous_and_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(StoreConfig::small(dir.path()));
    let batch: Vec<_> = (0..10)
        .map(|i| message("B", 1, &body_for(i, 10), &format!("b{i}")))
        .collect();
    let r = store.put_messages(&batch).unwrap();
    let offsets: Vec<_> = r.placements.iter().map(|p| p.queue_offset).collect();
    assert_eq!(offsets, (0..10).collect::<Vec<_>>());
    // A batch mixing queues is refused as a whole.
    let mut bad = batch.clone();
    bad[3].queue_id = 2;
    assert!(store.put_messages(&bad).is_err());
    assert_eq!(
        store.commit_log_max_offset(),
        r.placements[9].physical_offset + r.placements[9].size as u64
    );
}

#[test]
fn bad_input_gets_typed_errors_and_leaves_the_store_intact() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(StoreConfig::small(dir.path()));
    let before = store.commit_log_max_offset();
    let big = vec![0u8; 300 << 10];
    assert!(matches!(
        store.put_message(&message("T", 0, &big, "x")),
        Err(StoreError::MessageTooLarge { .. })
    ));
    for topic in ["", "bad topic", "a/b", &"x".repeat(128)] {
        assert!(matches!(
            store.put_message(&message(topic, 0, b"x", "x")),
            Err(StoreError::InvalidTopic { .. })
        ));
    }
    let mut m = message("T", 0, b"x", "x");
    m.properties.insert("BIG", "v".repeat(40_000));
    assert!(matches!(
        store.put_message(&m),
        Err(StoreError::InvalidMessage(_))
    ));
    assert_eq!(store.commit_log_max_offset(), before);
    store
        .put_message(&message("%RETRY%g|x_y-z", 0, b"ok", "ok"))
        .unwrap();
}

#[test]
fn second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _store = open(StoreConfig::small(dir.path()));
    let err = MessageStore::open(StoreConfig::small(dir.path())).unwrap_err();
    assert!(matches!(err, StoreError::Locked(_)), "{err}");
    assert!(err.to_string().contains("locked"));
}

#[test]
fn unwritable_directory_is_a_clear_error() {
    let err = MessageStore::open(StoreConfig::small("/proc/conveyor-cannot-be-here")).unwrap_err();
    assert!(matches!(err, StoreError::Io { .. }), "{err}");
    assert!(err.to_string().contains("conveyor-cannot-be-here"), "{err}");
}

#[test]
fn concurrent_appenders_get_dense_ordered_queue_offsets_under_sync_flush() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::small(dir.path());
    cfg.flush_mode = FlushMode::Sync;
    let store = Arc::new(open(cfg));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                for i in 0..200u64 {
                    let id = t * 1000 + i;
                    let r = store
                        .put_message(&message("C", 0, &body_for(id, 64), &id.to_string()))
                        .unwrap();
                    assert_eq!(r.status, conveyor_store::PutStatus::Ok);
                    // Acknowledged under SYNC: durable already.
                    let p = r.placements[0];
                    assert!(store.commit_log_flushed_offset() >= p.physical_offset + p.size as u64);
                    seen.push(p);
                }
                seen
            })
        })
        .collect();
    let mut all: Vec<_> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    all.sort_by_key(|p| p.physical_offset);
    // Queue offsets follow append (physical) order exactly.
    for (n, p) in all.iter().enumerate() {
        assert_eq!(p.queue_offset, n as i64);
    }
}

#[test]
fn retention_deletes_expired_segments_and_reads_below_report_offset_moved() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::small(dir.path());
    cfg.retention = Duration::from_secs(3600);
    cfg.clean_interval = Duration::from_secs(3600); // run rounds by hand
    let store = open(cfg);
    for i in 0..3000u64 {
        store
            .put_message(&message("R", 0, &body_for(i, 1000), &i.to_string()))
            .unwrap();
    }
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let segs: Vec<_> = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(
        segs.len() >= 3,
        "need several segments, have {}",
        segs.len()
    );
    // Nothing is old yet.
    assert_eq!(store.clean_now().unwrap(), 0);
    // Age every segment by two hours.
    let old = std::time::SystemTime::now() - Duration::from_secs(7200);
    for s in &segs {
        std::fs::File::options()
            .write(true)
            .open(s)
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    let deleted = store.clean_now().unwrap();
    assert_eq!(deleted, segs.len() - 1, "all but the segment being written");
    let left = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .count();
    assert_eq!(left, 1);
    let min = store.min_offset("R", 0);
    assert!(min > 0);
    let r = store.get_messages("R", 0, 0, 10, 1 << 20, &AcceptAll);
    assert_eq!(
        (r.status, r.next_begin_offset),
        (GetStatus::OffsetTooSmall, min)
    );
    let r = store.get_messages("R", 0, min, 10, 1 << 20, &AcceptAll);
    assert_eq!(r.status, GetStatus::Found);
    // Old ConsumeQueue files went too.
    let cq_files = std::fs::read_dir(dir.path().join("consumequeue/R/0"))
        .unwrap()
        .count();
    assert!(cq_files < 3, "consume queue files left: {cq_files}");
}

/// Issue 9, defect 3: a ConsumeQueue entry that points at a record of another topic (a stale
/// entry left past a cut, or a damaged one) passes recovery's check (it points into the intact
/// log) and is not rewritten by re-dispatch when no record of its own queue covers it, so the
/// read path must check that the record belongs to the queue and offset it was reached from,
/// and never serve it.
#[test]
fn an_entry_pointing_at_another_topics_record_is_never_served() {
    let dir = tempfile::tempdir().unwrap();
    // Small segments, and TopicA's records several segments before the end, so that a clean
    // open re-verifies (and re-dispatches) only the last segment, not TopicA's entries.
    let config = || tiny_segments(dir.path());
    let b = {
        let store = open(config());
        for i in 0..2 {
            store
                .put_message(&message("TopicA", 0, b"a", &format!("UA{i}")))
                .unwrap();
        }
        for i in 0..200 {
            store
                .put_message(&message("Filler", 0, &[7; 1024], &format!("F{i}")))
                .unwrap();
        }
        let b = store
            .put_message(&message("TopicB", 0, b"secret-of-b", "UB0"))
            .unwrap()
            .placements[0];
        assert!(store.wait_dispatched(Duration::from_secs(10)));
        store.shutdown().unwrap();
        b
    };
    // TopicA/0's first entry overwritten to point at TopicB's record, as a stale or damaged
    // entry would (recovery keeps it: the queue's last entry is its own, so it ends after it).
    let entry = |raw: &mut [u8]| {
        raw[0..8].copy_from_slice(&b.physical_offset.to_be_bytes());
        raw[8..12].copy_from_slice(&(b.size as u32).to_be_bytes());
    };
    let own = dir
        .path()
        .join("consumequeue/TopicA/0/00000000000000000000");
    let mut raw = std::fs::read(&own).unwrap();
    entry(&mut raw[..20]);
    std::fs::write(&own, raw).unwrap();
    // A queue file for TopicA/1 (which has no record) whose only entry points at TopicB's
    // record: recovery finds no entry of its own there and wipes it (issue 9, defect 3).
    let qdir = dir.path().join("consumequeue/TopicA/1");
    std::fs::create_dir_all(&qdir).unwrap();
    let mut raw = vec![0u8; 1000 * 20];
    entry(&mut raw[..20]);
    std::fs::write(qdir.join("00000000000000000000"), raw).unwrap();

    let store = open(config());
    assert_eq!(
        store.max_offset("TopicA", 1),
        0,
        "recovery wipes the foreign entry"
    );
    let r = store.get_messages("TopicA", 1, 0, 10, 1 << 20, &AcceptAll);
    assert!(r.messages.is_empty(), "{r:?}");
    assert_eq!(store.max_offset("TopicA", 0), 2, "recovery keeps the queue");
    let r = store.get_messages("TopicA", 0, 0, 10, 1 << 20, &AcceptAll);
    // The foreign entry is skipped, the queue's own record after it still served.
    assert_eq!(
        r.queue_offsets,
        vec![1],
        "another topic's record was served: {r:?}"
    );
    let v = RecordView::parse(&r.messages[0]).unwrap();
    assert_eq!(v.property("UNIQ_KEY"), Some("UA1"));
    assert_eq!(r.next_begin_offset, 2);
    // The cold path (positional reads) applies the same checks.
    for queue_id in [0, 1] {
        let warm = store.get_messages("TopicA", queue_id, 0, 10, 1 << 20, &AcceptAll);
        let cold = store
            .get_messages_cold("TopicA", queue_id, 0, 10, 1 << 20, &AcceptAll)
            .unwrap();
        assert_same_read(&warm, &cold);
    }
}

/// Two reads of the same queue agree: status, offsets, and the bytes of every record.
fn assert_same_read(warm: &conveyor_store::GetResult, cold: &conveyor_store::GetResult) {
    assert_eq!(
        (
            warm.status,
            warm.next_begin_offset,
            warm.min_offset,
            warm.max_offset
        ),
        (
            cold.status,
            cold.next_begin_offset,
            cold.min_offset,
            cold.max_offset
        )
    );
    assert_eq!(warm.queue_offsets, cold.queue_offsets);
    let bytes = |r: &conveyor_store::GetResult| -> Vec<Vec<u8>> {
        r.messages.iter().map(|m| m.to_vec()).collect()
    };
    assert_eq!(bytes(warm), bytes(cold));
}

/// The cold read (pread of the queue and log files, for data not in memory) serves exactly
/// what the mapped read serves, across segments, with tag filters, byte limits and every
/// out-of-range status.
#[test]
fn cold_reads_serve_what_mapped_reads_serve() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(tiny_segments(dir.path()));
    for i in 0..300 {
        let mut m = message("Q", i % 2, &[i as u8; 700], &format!("U{i}"));
        m.properties
            .insert("TAGS", if i % 3 == 0 { "TagA" } else { "TagB" });
        store.put_message(&m).unwrap();
    }
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let tag_a = TagCode(tag_hash_code("TagA"));
    let filters: [&dyn MessageFilter; 2] = [&AcceptAll, &tag_a];
    for filter in filters {
        for (offset, count, bytes) in [
            (0, 32, 1 << 20),
            (7, 500, 1 << 20),
            (100, 10, 2000),
            (149, 5, 1 << 20),
            (150, 5, 1 << 20),
            (999, 5, 1 << 20),
        ] {
            let warm = store.get_messages("Q", 1, offset, count, bytes, filter);
            let cold = store
                .get_messages_cold("Q", 1, offset, count, bytes, filter)
                .unwrap();
            assert_same_read(&warm, &cold);
        }
    }
    let cold = store
        .get_messages_cold("Nope", 0, 0, 5, 1 << 20, &AcceptAll)
        .unwrap();
    assert_eq!(cold.status, GetStatus::NoMatchedLogicQueue);
}

/// Issue 9, defect 1: after an unclean stop, when the index lags the scanned segment (its last
/// entry lies in an older segment), re-dispatch started at the index's last entry + 1, which is
/// not a record boundary: the walk failed on its first record, the failure was ignored, and the
/// records of the scanned tail never reached their ConsumeQueue (new messages then reused their
/// queue offsets). Every record must be back in its queue, and the index complete.
#[test]
fn recovery_redispatches_the_tail_when_the_index_lags_behind() {
    let dir = tempfile::tempdir().unwrap();
    let body = vec![b'r'; 1000];
    let stale_index = dir.path().join("index-copy");
    {
        let store = open(StoreConfig::small(dir.path()));
        for i in 0..3000u64 {
            store
                .put_message(&message("Lag", 0, &body, &format!("U{i}")))
                .unwrap();
        }
        assert!(store.wait_dispatched(Duration::from_secs(20)));
    }
    copy_dir(&dir.path().join("index"), &stale_index);
    {
        let store = open(StoreConfig::small(dir.path()));
        for i in 3000..6000u64 {
            store
                .put_message(&message("Lag", 0, &body, &format!("U{i}")))
                .unwrap();
        }
        assert!(store.wait_dispatched(Duration::from_secs(20)));
        assert_eq!(store.max_offset("Lag", 0), 6000);
    }
    // As after a crash: the index on disk is three segments behind, the last 200 ConsumeQueue
    // entries never reached the disk, and the abort marker is still there.
    std::fs::remove_dir_all(dir.path().join("index")).unwrap();
    copy_dir(&stale_index, &dir.path().join("index"));
    let cq = dir.path().join("consumequeue/Lag/0/00000000000000100000");
    let mut raw = std::fs::read(&cq).unwrap();
    raw[800 * 20..].fill(0);
    std::fs::write(&cq, raw).unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();

    let store = open(StoreConfig::small(dir.path()));
    assert_eq!(
        store.max_offset("Lag", 0),
        6000,
        "every record is back in its queue"
    );
    let r = store.get_messages("Lag", 0, 5800, 300, 1 << 20, &AcceptAll);
    assert_eq!(r.messages.len(), 200);
    assert_eq!(r.queue_offsets.first(), Some(&5800));
    // A new message takes the next offset instead of reusing one.
    let placed = store
        .put_message(&message("Lag", 0, b"after", "U-after"))
        .unwrap()
        .placements[0];
    assert_eq!(placed.queue_offset, 6000);
    // The index was rebuilt for the records it lacked.
    let now = i64::MAX;
    for key in ["U3500", "U5999"] {
        assert_eq!(
            store.query_by_key("Lag", key, 4, 0, now).len(),
            1,
            "key {key}"
        );
    }
}

/// Issue 9, defect 2: one damaged record in the middle of the log used to end the log there
/// (the rest of its segment zeroed, later segments deleted), losing acknowledged records.
/// Now the damaged bytes are skipped and quarantined, and every record after them stays.
#[test]
fn a_damaged_record_mid_log_keeps_every_record_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = || tiny_segments(dir.path());
    let mut placements = Vec::new();
    {
        let store = open(config());
        for i in 0..300 {
            let m = message("Mid", i % 2, &[i as u8; 700], &format!("M{i}"));
            placements.push(store.put_message(&m).unwrap().placements[0]);
        }
        assert!(store.wait_dispatched(Duration::from_secs(10)));
        store.shutdown().unwrap();
    }
    // Damage one body byte of a record of the last segment with records after it (the part
    // recovery re-verifies), then pretend a crash.
    let victim = placements.len() - 20;
    let p = placements[victim];
    let base = p.physical_offset - p.physical_offset % (64 << 10);
    let path = dir.path().join(format!("commitlog/{base:020}"));
    let mut data = std::fs::read(&path).unwrap();
    data[(p.physical_offset - base) as usize + 200] ^= 0x5a;
    std::fs::write(&path, data).unwrap();
    std::fs::write(dir.path().join("abort"), b"").unwrap();

    let (store, report) = MessageStore::open(config()).unwrap();
    assert_eq!(report.damaged_ranges, 1, "{report:?}");
    assert_eq!(report.damaged_bytes, p.size as u64);
    let quarantined: Vec<_> = std::fs::read_dir(dir.path().join("quarantine"))
        .unwrap()
        .collect();
    assert_eq!(quarantined.len(), 1, "a copy of the damaged bytes is kept");
    for (i, q) in placements.iter().enumerate() {
        let qid = (i % 2) as i32;
        let r = store.get_messages("Mid", qid, q.queue_offset, 1, 1 << 20, &AcceptAll);
        if i == victim {
            assert!(
                !r.queue_offsets.contains(&q.queue_offset),
                "the damaged record is never served"
            );
            continue;
        }
        assert_eq!(
            r.queue_offsets,
            vec![q.queue_offset],
            "record {i} lost: {r:?}"
        );
        let v = RecordView::parse_verified(&r.messages[0], true).unwrap();
        assert_eq!(v.property("UNIQ_KEY"), Some(format!("M{i}").as_str()));
    }
    // New messages continue after the last kept one, and a second unclean open is stable: the
    // marker is skipped without new damage reports.
    let next = store
        .put_message(&message("Mid", 0, b"next", "next"))
        .unwrap()
        .placements[0];
    assert_eq!(next.queue_offset, 150);
    drop(store);
    std::fs::write(dir.path().join("abort"), b"").unwrap();
    let (store, report) = MessageStore::open(config()).unwrap();
    assert_eq!(report.damaged_ranges, 0, "{report:?}");
    assert_eq!(store.max_offset("Mid", 0), 151);
    assert_eq!(store.max_offset("Mid", 1), 150);
}

/// Issue 9, defect 7: the single dispatcher retried a failing record forever, so one queue
/// whose ConsumeQueue file could not be created (ENOSPC, EMFILE, here a file where its
/// directory must go) stopped delivery for every queue. Now only that queue waits; the others
/// keep delivering, and it catches up, in order, once the cause is gone.
#[test]
fn one_queue_that_cannot_be_written_does_not_stop_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(StoreConfig::small(dir.path()));
    // The queue directory of "Blocked" cannot be created: a file is in its way.
    std::fs::create_dir_all(dir.path().join("consumequeue")).unwrap();
    let obstacle = dir.path().join("consumequeue/Blocked");
    std::fs::write(&obstacle, b"not a directory").unwrap();
    for i in 0..5 {
        store
            .put_message(&message("Blocked", 0, b"b", &format!("B{i}")))
            .unwrap();
        store
            .put_message(&message("Flowing", 0, b"f", &format!("F{i}")))
            .unwrap();
    }
    assert!(
        wait_until(Duration::from_secs(10), || store.max_offset("Flowing", 0)
            == 5),
        "the other queue stopped with the blocked one (max {})",
        store.max_offset("Flowing", 0)
    );
    let r = store.get_messages("Flowing", 0, 0, 10, 1 << 20, &AcceptAll);
    assert_eq!(r.queue_offsets, vec![0, 1, 2, 3, 4]);
    assert_eq!(store.max_offset("Blocked", 0), 0);
    // The cause goes away: the blocked queue catches up with all of its records, in order.
    std::fs::remove_file(&obstacle).unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || store.max_offset("Blocked", 0)
            == 5),
        "the blocked queue never caught up"
    );
    let r = store.get_messages("Blocked", 0, 0, 10, 1 << 20, &AcceptAll);
    let ids: Vec<String> = r
        .messages
        .iter()
        .map(|m| {
            let v = RecordView::parse(m).unwrap();
            v.property("UNIQ_KEY").unwrap().to_string()
        })
        .collect();
    assert_eq!(ids, ["B0", "B1", "B2", "B3", "B4"]);
    store
        .put_message(&message("Blocked", 0, b"b", "B5"))
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || store
        .max_offset("Blocked", 0)
        == 6));
}

/// A small store whose CommitLog rolls every 64 KiB, so that a few hundred messages span
/// several segments (and a clean open re-verifies only the last ones).
fn tiny_segments(dir: &std::path::Path) -> StoreConfig {
    let mut cfg = StoreConfig::small(dir);
    cfg.commit_log_segment_size = 64 << 10;
    cfg.max_message_size = 16 << 10;
    cfg
}

/// Issue 13: `queryCq` reads a queue's entries, and `cleanExpiredCQ` deletes only queue files
/// whose records are gone, never moving a queue's offsets.
#[test]
fn queue_entries_are_readable_and_cleaning_keeps_live_queues_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(StoreConfig::small(dir.path()));
    for i in 0..20u64 {
        store
            .put_message(&message("Q", 1, &body_for(i, 100), &i.to_string()))
            .unwrap();
    }
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let first = store.queue_entry("Q", 1, 0).expect("the first entry");
    let second = store.queue_entry("Q", 1, 1).expect("the second entry");
    assert_eq!(
        second.physical_offset,
        first.physical_offset + first.size as u64
    );
    assert!(store.queue_entry("Q", 1, 20).is_none(), "past the end");
    assert!(store.queue_entry("Q", 0, 0).is_none(), "another queue");
    assert!(store.queue_entry("None", 1, 0).is_none(), "unknown topic");
    assert_eq!(store.clean_expired_queues().unwrap(), 0);
    assert_eq!(
        (store.min_offset("Q", 1), store.max_offset("Q", 1)),
        (0, 20)
    );
    assert_eq!(store.queue_entry("Q", 1, 0), Some(first));
}

/// Issue 13: `cleanExpiredCQ` deletes the queue files whose records are gone from the
/// CommitLog (here the oldest segments were removed while the store was down, as a crash
/// between retention's two steps leaves them), and the queue keeps its end and later entries.
#[test]
fn cleaning_deletes_queue_files_left_behind_by_removed_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = tiny_segments(dir.path());
    cfg.consume_queue_entries_per_file = 16;
    let store = open(cfg.clone());
    for i in 0..300u64 {
        store
            .put_message(&message("Old", 0, &body_for(i, 1024), &i.to_string()))
            .unwrap();
    }
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    drop(store);
    let queue_files = |dir: &std::path::Path| {
        std::fs::read_dir(dir.join("consumequeue").join("Old").join("0"))
            .unwrap()
            .count()
    };
    let files_before = queue_files(dir.path());
    let mut segments: Vec<_> = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segments.sort();
    assert!(segments.len() >= 4, "{} segments", segments.len());
    for s in &segments[..2] {
        std::fs::remove_file(s).unwrap();
    }

    let store = open(cfg);
    let log_min = store.commit_log_min_offset();
    assert!(log_min > 0);
    let deleted = store.clean_expired_queues().unwrap();
    assert!(deleted > 0, "no queue file deleted");
    assert_eq!(queue_files(dir.path()), files_before - deleted);
    let min = store.min_offset("Old", 0);
    assert!(min > 0);
    assert_eq!(store.max_offset("Old", 0), 300, "the queue keeps its end");
    let first = store
        .queue_entry("Old", 0, min)
        .expect("the first entry left");
    assert!(first.physical_offset >= log_min);
    assert!(store.queue_entry("Old", 0, min - 1).is_none());
    assert_eq!(
        store.clean_expired_queues().unwrap(),
        0,
        "nothing left to clean"
    );
}
