//! A really full filesystem: a small tmpfs mounted for the test (needs root, as CI and the
//! development machines run). Appends must fail with a clean DiskFull error, never corrupt the
//! store, and resume once space is freed; the watermarks must refuse writes and force-clean.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use conveyor_protocol::message::RecordView;
use conveyor_store::{AcceptAll, MessageStore, StoreConfig, StoreError};

/// A tmpfs mounted on a temp dir, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Self { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn config(root: PathBuf) -> StoreConfig {
    let mut cfg = StoreConfig::small(root);
    cfg.commit_log_segment_size = 256 << 10;
    cfg.max_message_size = 64 << 10;
    cfg.index_hash_slots = 64;
    cfg.index_max_entries = 512;
    cfg.consume_queue_entries_per_file = 1024;
    cfg.clean_interval = Duration::from_secs(3600); // rounds run by hand
    cfg
}

fn fill(path: &Path, bytes: usize) {
    // A write that runs out of space is fine: whatever fits is what we wanted.
    let _ = std::fs::write(path, vec![7u8; bytes]);
}

/// Appends 1 KiB messages until one fails; returns the acknowledged ids and the error.
fn append_until_error(store: &MessageStore, start: u64) -> (Vec<u64>, StoreError) {
    let mut acked = Vec::new();
    for id in start..start + 100_000 {
        match store.put_message(&message("Full", 0, &body_for(id, 1024), &id.to_string())) {
            Ok(_) => acked.push(id),
            Err(e) => return (acked, e),
        }
    }
    panic!("the disk never filled up");
}

fn check_readable(store: &MessageStore, ids: &[u64]) {
    assert!(store.wait_dispatched(Duration::from_secs(10)));
    let mut offset = store.min_offset("Full", 0);
    let mut seen = Vec::new();
    while offset < store.max_offset("Full", 0) {
        let r = store.get_messages("Full", 0, offset, 256, 1 << 22, &AcceptAll);
        for s in &r.messages {
            let v = RecordView::parse_verified(s, true).unwrap();
            let id: u64 = v.property("UNIQ_KEY").unwrap().parse().unwrap();
            assert_eq!(v.body(), &body_for(id, 1024)[..]);
            seen.push(id);
        }
        offset = r.next_begin_offset;
    }
    for id in ids {
        assert!(seen.contains(id), "acknowledged message {id} lost");
    }
}

#[test]
fn out_of_space_fails_cleanly_and_resumes() {
    let Some(fs) = Tmpfs::mount("4m") else {
        println!("SKIPPED: cannot mount a tmpfs here (needs root); the disk-full test did not run");
        return;
    };
    let mut cfg = config(fs.path().join("store"));
    cfg.disk_full_ratio = 1.0; // no watermark: hit the real ENOSPC
    cfg.disk_force_clean_ratio = 1.0;
    let filler = fs.path().join("filler");
    let (store, _) = MessageStore::open(cfg.clone()).unwrap();
    fill(&filler, 3 << 20);
    let (acked, err) = append_until_error(&store, 0);
    assert!(matches!(err, StoreError::DiskFull(_)), "got {err}");
    assert!(err.to_string().contains("No space left"), "{err}");
    assert!(!acked.is_empty());
    // Still full: still a clean error, nothing half-written.
    assert!(matches!(
        store.put_message(&message("Full", 0, &body_for(0, 1024), "again")),
        Err(StoreError::DiskFull(_))
    ));
    check_readable(&store, &acked);
    // Free the space: appends resume.
    std::fs::remove_file(&filler).unwrap();
    let (more, _) = {
        let mut more = Vec::new();
        for id in 1_000_000..1_000_400u64 {
            store
                .put_message(&message("Full", 0, &body_for(id, 1024), &id.to_string()))
                .unwrap_or_else(|e| panic!("append after freeing space failed: {e}"));
            more.push(id);
        }
        (more, ())
    };
    drop(store);
    let (store, _) = MessageStore::open(cfg).unwrap();
    check_readable(&store, &[acked, more].concat());
}

#[test]
fn watermarks_refuse_writes_and_force_clean() {
    let Some(fs) = Tmpfs::mount("8m") else {
        println!("SKIPPED: cannot mount a tmpfs here (needs root); the watermark test did not run");
        return;
    };
    let mut cfg = config(fs.path().join("store"));
    cfg.disk_full_ratio = 0.5;
    cfg.disk_force_clean_ratio = 0.95;
    let (store, _) = MessageStore::open(cfg).unwrap();
    // The cleaner's round notices usage; appends re-check it while refused.
    let filler = fs.path().join("filler");
    fill(&filler, 5 << 20);
    store.clean_now().unwrap();
    assert!(store.is_disk_full());
    let err = store
        .put_message(&message("Full", 0, b"x", "x"))
        .unwrap_err();
    assert!(matches!(err, StoreError::DiskFull(_)), "{err}");
    assert!(err.to_string().contains("watermark"), "{err}");
    std::fs::remove_file(&filler).unwrap();
    assert!(
        wait_until(Duration::from_secs(5), || store
            .put_message(&message("Full", 0, b"x", "y"))
            .is_ok()),
        "writes did not resume after space was freed"
    );
    // Force clean: fill the store itself past the force watermark; the oldest segments go
    // although they are young.
    drop(store);
    let mut cfg = config(fs.path().join("store"));
    cfg.disk_full_ratio = 0.99;
    cfg.disk_force_clean_ratio = 0.6;
    let (store, _) = MessageStore::open(cfg).unwrap();
    for id in 0..5000u64 {
        if store
            .put_message(&message("Full", 0, &body_for(id, 1024), &id.to_string()))
            .is_err()
        {
            break;
        }
        if conveyor_store::disk_usage(fs.path()).unwrap() > 0.7 {
            break;
        }
    }
    let before = store.commit_log_min_offset();
    let deleted = store.clean_now().unwrap();
    assert!(deleted > 0, "nothing force-cleaned");
    assert!(store.commit_log_min_offset() > before);
    assert!(conveyor_store::disk_usage(fs.path()).unwrap() < 0.6 + 0.05);
    assert!(store.min_offset("Full", 0) > 0);
}
