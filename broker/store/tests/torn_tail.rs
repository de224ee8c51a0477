//! Torn tails: the last CommitLog segment truncated, or zeroed from a random point to its end,
//! as a crash or power loss mid-write leaves it. Recovery must keep exactly the intact prefix,
//! cut the rest, rebuild the ConsumeQueues to match and keep serving; never panic, never
//! return a damaged record. (Damage followed by intact records is `corruption.rs`: there the
//! records after the damage are kept.)

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use common::*;
use conveyor_protocol::message::RecordView;
use conveyor_store::{AcceptAll, MessageStore, StoreConfig};
use rand::{Rng, SeedableRng};

const TOPICS: [&str; 2] = ["TornA", "TornB"];

#[derive(Debug, Clone)]
struct Written {
    id: u64,
    topic: &'static str,
    queue_id: i32,
    queue_offset: i64,
    phys: u64,
    size: usize,
}

fn config(root: &Path) -> StoreConfig {
    let mut cfg = StoreConfig::small(root);
    cfg.commit_log_segment_size = 256 << 10;
    cfg.max_message_size = 64 << 10;
    cfg
}

enum Damage {
    Truncate,
    ZeroTail,
}

#[test]
fn recovery_keeps_exactly_the_intact_prefix() {
    let seed: u64 = std::env::var("CONVEYOR_TORN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let iterations: usize = std::env::var("CONVEYOR_TORN_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    println!("torn tail seed {seed} ({iterations} iterations; CONVEYOR_TORN_SEED reproduces)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    // A pristine store spanning several segments, shut down cleanly.
    let pristine = tempfile::tempdir().unwrap();
    let mut written = Vec::new();
    {
        let store = MessageStore::open(config(pristine.path())).unwrap().0;
        for id in 0..900u64 {
            let topic = TOPICS[(id % 2) as usize];
            let queue_id = (id % 3) as i32;
            let len = rng.random_range(0..1500);
            let mut m = message(topic, queue_id, &body_for(id, len), &format!("ID{id}"));
            m.properties.insert("KEYS", format!("K{id}"));
            let p = store.put_message(&m).unwrap().placements[0];
            written.push(Written {
                id,
                topic,
                queue_id,
                queue_offset: p.queue_offset,
                phys: p.physical_offset,
                size: p.size,
            });
        }
        store.shutdown().unwrap();
    }
    let end = written.last().map(|w| w.phys + w.size as u64).unwrap();
    let seg_size = config(pristine.path()).commit_log_segment_size;
    let last_base = end - end % seg_size;
    assert!(last_base > 0, "the test needs more than one segment");
    let last_file = format!("commitlog/{last_base:020}");

    for iter in 0..iterations {
        let work = tempfile::tempdir().unwrap();
        copy_dir(pristine.path(), work.path());
        if rng.random_bool(0.5) {
            // Pretend the previous run crashed.
            std::fs::write(work.path().join("abort"), b"").unwrap();
        }
        let pos = rng.random_range(last_base..end);
        let damage = if rng.random_bool(0.5) {
            Damage::Truncate
        } else {
            Damage::ZeroTail
        };
        let path = work.path().join(&last_file);
        let rel = (pos - last_base) as usize;
        match damage {
            Damage::Truncate => {
                std::fs::File::options()
                    .write(true)
                    .open(&path)
                    .unwrap()
                    .set_len(rel as u64)
                    .unwrap();
            }
            Damage::ZeroTail => {
                let mut data = std::fs::read(&path).unwrap();
                data[rel..].fill(0);
                std::fs::write(&path, data).unwrap();
            }
        }
        // The intact prefix: records wholly before the first damaged byte.
        let intact: Vec<&Written> = written
            .iter()
            .filter(|w| w.phys + w.size as u64 <= pos)
            .collect();
        let expected_end = intact
            .last()
            .map_or(last_base, |w| (w.phys + w.size as u64).max(last_base));
        let lost: Vec<&Written> = written
            .iter()
            .filter(|w| w.phys + w.size as u64 > pos)
            .collect();

        let (store, report) = MessageStore::open(config(work.path()))
            .unwrap_or_else(|e| panic!("iteration {iter} (pos {pos}): open failed: {e}"));
        assert_eq!(
            report.valid_end, expected_end,
            "iteration {iter}: damage at {pos}"
        );
        let mut per_queue: HashMap<(&str, i32), i64> = HashMap::new();
        for w in &intact {
            *per_queue.entry((w.topic, w.queue_id)).or_default() += 1;
        }
        for topic in TOPICS {
            for q in 0..3 {
                let expected = per_queue.get(&(topic, q)).copied().unwrap_or(0);
                assert_eq!(
                    store.max_offset(topic, q),
                    expected,
                    "iteration {iter}: queue {topic}/{q}"
                );
            }
        }
        // Spot-check intact records through their queues, and the lost ones are gone.
        for w in intact.iter().rev().take(20) {
            let r = store.get_messages(w.topic, w.queue_id, w.queue_offset, 1, 1 << 20, &AcceptAll);
            let v = RecordView::parse_verified(&r.messages[0], true).unwrap();
            assert_eq!(v.property("UNIQ_KEY"), Some(format!("ID{}", w.id).as_str()));
        }
        for w in lost.iter().take(5) {
            assert!(
                store.message_at(w.phys).is_none(),
                "iteration {iter}: lost record readable"
            );
            assert!(
                store
                    .query_by_key(w.topic, &format!("K{}", w.id), 5, 0, i64::MAX)
                    .is_empty(),
                "iteration {iter}: lost message {} still found by key",
                w.id
            );
        }
        // The store keeps working: the next message continues its queue.
        let next = store
            .put_message(&message("TornA", 0, b"after", "after"))
            .unwrap()
            .placements[0];
        assert_eq!(
            next.queue_offset,
            per_queue.get(&("TornA", 0)).copied().unwrap_or(0)
        );
        assert!(store.wait_dispatched(Duration::from_secs(10)));
        drop(store);
    }
}
