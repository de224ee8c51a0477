//! Store throughput benchmark: `cargo bench -p conveyor-store`.
//!
//! Prints msgs/s and MB/s for 128 B, 1 KiB and 16 KiB messages with 1, 4 and 64 appenders
//! under ASYNC and SYNC flush, the raw disk figures measured in the same run on the same
//! filesystem (buffered sequential write + fdatasync bandwidth, fdatasync rate), the ratios
//! against them, and the recovery scan speed.
//!
//! Environment: CONVEYOR_BENCH_DIR (default: the system temp dir), CONVEYOR_BENCH_SECS
//! (seconds per case, default 2).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_protocol::message::{Properties, StoredMessage};
use conveyor_store::{FlushMode, MessageStore, StoreConfig};

fn bench_dir() -> PathBuf {
    std::env::var_os("CONVEYOR_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn secs() -> Duration {
    Duration::from_secs_f64(
        std::env::var("CONVEYOR_BENCH_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(2.0),
    )
}

/// Buffered sequential write of `total` bytes in 1 MiB chunks, then one fdatasync.
fn raw_write_bandwidth(dir: &Path, total: usize) -> f64 {
    let path = dir.join("raw-write");
    let chunk = vec![0x5Au8; 1 << 20];
    let start = Instant::now();
    let mut f = std::fs::File::create(&path).unwrap();
    for _ in 0..total / chunk.len() {
        f.write_all(&chunk).unwrap();
    }
    f.sync_data().unwrap();
    let mbs = total as f64 / start.elapsed().as_secs_f64() / 1e6;
    drop(f);
    std::fs::remove_file(&path).unwrap();
    mbs
}

/// 4 KiB write + fdatasync, repeatedly: the rate a single synchronous writer can commit.
fn raw_fdatasync_rate(dir: &Path, dur: Duration) -> f64 {
    let path = dir.join("raw-sync");
    let mut f = std::fs::File::create(&path).unwrap();
    let page = vec![1u8; 4096];
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < dur {
        f.write_all(&page).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    std::fs::remove_file(&path).unwrap();
    rate
}

fn message(size: usize) -> StoredMessage {
    let mut properties = Properties::new();
    properties.insert("UNIQ_KEY", "7F0000010F0B18B4AAC2750DE9000000");
    StoredMessage {
        topic: "BenchTopic".into(),
        queue_id: 0,
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
        body: Bytes::from(vec![b'x'; size]),
        properties,
    }
}

struct Outcome {
    msgs_per_s: f64,
    mb_per_s: f64,
}

fn run_case(
    dir: &Path,
    mode: FlushMode,
    size: usize,
    appenders: usize,
    dur: Duration,
    zero_new_segments: bool,
) -> Outcome {
    let root = dir.join(format!("store-{mode:?}-{size}-{appenders}"));
    let mut cfg = StoreConfig::new(&root);
    cfg.flush_mode = mode;
    cfg.zero_new_segments = zero_new_segments;

    let (store, _) = MessageStore::open(cfg).unwrap();
    let store = Arc::new(store);
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    // Appenders are tasks on a 2-thread tokio runtime, as the broker's connections are: an
    // append is a short critical section, and under SYNC flush a task awaits group commit
    // on a flush ticket instead of parking an OS thread.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let start = Instant::now();
    let tasks: Vec<_> = (0..appenders)
        .map(|t| {
            let (store, stop, count) = (store.clone(), stop.clone(), count.clone());
            rt.spawn(async move {
                let mut m = message(size);
                m.queue_id = (t % 8) as i32;
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (placed, _) = store.append(std::slice::from_ref(&m)).unwrap();
                    if mode == FlushMode::Sync {
                        let end = placed[0].physical_offset + placed[0].size as u64;
                        assert!(store.request_flush(end).wait().await);
                    } else if n.is_multiple_of(64) {
                        tokio::task::yield_now().await;
                    }
                    n += 1;
                }
                count.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    let elapsed = start.elapsed().as_secs_f64();
    let n = count.load(Ordering::Relaxed) as f64;
    drop(store);
    let _ = std::fs::remove_dir_all(&root);
    Outcome {
        msgs_per_s: n / elapsed,
        mb_per_s: n * size as f64 / elapsed / 1e6,
    }
}

/// Writes ~`bytes` of 1 KiB messages, then reopens with no checkpoint so recovery verifies
/// everything; returns (GB scanned, GB/s).
fn recovery_scan(dir: &Path, bytes: u64) -> (f64, f64) {
    let root = dir.join("store-recovery");
    {
        let (store, _) = MessageStore::open(StoreConfig::new(&root)).unwrap();
        let m = message(1024);
        while store.commit_log_max_offset() < bytes {
            store.put_message(&m).unwrap();
        }
    }
    std::fs::remove_file(root.join("checkpoint")).unwrap();
    let (_store, report) = MessageStore::open(StoreConfig::new(&root)).unwrap();
    drop(_store);
    let _ = std::fs::remove_dir_all(&root);
    let gb = report.scanned as f64 / 1e9;
    println!(
        "  recovery total (scan + queue repair + re-dispatch of every record): {:.2} s",
        report.elapsed.as_secs_f64()
    );
    (gb, gb / report.scan_elapsed.as_secs_f64())
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing: run quickly then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let dir = tempfile::tempdir_in(bench_dir()).unwrap();
    let dur = if quick {
        Duration::from_millis(100)
    } else {
        secs()
    };
    let raw_bw = raw_write_bandwidth(dir.path(), if quick { 16 << 20 } else { 1 << 30 });
    let raw_sync = raw_fdatasync_rate(dir.path(), dur);
    println!(
        "# conveyor-store benchmark ({} s per case, dir {})",
        dur.as_secs_f64(),
        bench_dir().display()
    );
    println!("raw disk: buffered sequential write + fdatasync {raw_bw:.0} MB/s; 4 KiB write+fdatasync {raw_sync:.0} ops/s");
    println!();
    println!("| flush | size | appenders | msgs/s | MB/s | MB/s vs raw write |");
    println!("|---|---|---|---|---|---|");
    let mut table = Vec::new();
    for mode in [FlushMode::Async, FlushMode::Sync] {
        for size in [128usize, 1024, 16384] {
            for appenders in [1usize, 4, 64] {
                let case = format!("{mode:?}-{size}-{appenders}");
                if let Ok(filter) = std::env::var("CONVEYOR_BENCH_FILTER") {
                    if !case.contains(&filter) {
                        continue;
                    }
                }
                let o = run_case(dir.path(), mode, size, appenders, dur, false);
                println!(
                    "| {mode:?} | {size} | {appenders} | {:.0} | {:.1} | {:.2} |",
                    o.msgs_per_s,
                    o.mb_per_s,
                    o.mb_per_s / raw_bw
                );
                table.push((mode, size, appenders, o));
            }
        }
    }
    // New SYNC segments are only reserved by default (fallocate: unwritten extents, so a
    // flush also commits a metadata change); the same case with segments zeroed ahead of use
    // by the allocator shows what zeroing costs or buys on this disk.
    if std::env::var("CONVEYOR_BENCH_FILTER").is_ok_and(|f| !"Sync-1024-64".contains(&f)) {
        return;
    }
    let zeroed = run_case(dir.path(), FlushMode::Sync, 1024, 64, dur, true);
    println!(
        "| Sync, segments zeroed ahead | 1024 | 64 | {:.0} | {:.1} | {:.2} |",
        zeroed.msgs_per_s,
        zeroed.mb_per_s,
        zeroed.mb_per_s / raw_bw
    );
    if std::env::var("CONVEYOR_BENCH_FILTER").is_ok() {
        return;
    }
    let find = |mode, size, appenders| {
        table
            .iter()
            .find(|(m, s, a, _)| *m == mode && *s == size && *a == appenders)
            .map(|(_, _, _, o)| o)
            .expect("every case ran")
    };
    println!();
    println!("targets:");
    let a128 = find(FlushMode::Async, 128, 1).msgs_per_s;
    println!("  ASYNC 128 B, 1 appender: {a128:.0} msgs/s (target >= 1,000,000)");
    let a16 = find(FlushMode::Async, 16384, 1)
        .mb_per_s
        .max(find(FlushMode::Async, 16384, 4).mb_per_s);
    println!(
        "  ASYNC 16 KiB: {a16:.0} MB/s = {:.0}% of raw write (target >= 80%)",
        100.0 * a16 / raw_bw
    );
    let s1 = find(FlushMode::Sync, 1024, 64).msgs_per_s;
    let as1 = find(FlushMode::Async, 1024, 64).msgs_per_s;
    println!(
        "  SYNC 1 KiB, 64 appenders: {s1:.0} msgs/s = {:.0}% of ASYNC (target >= 30%); segments zeroed ahead: {:.0} msgs/s = {:.0}%",
        100.0 * s1 / as1,
        zeroed.msgs_per_s,
        100.0 * zeroed.msgs_per_s / as1
    );
    // Each of the 64 appenders waits for its own flush, so at most 64 records share one.
    println!(
        "  SYNC ceiling from the raw 4 KiB fdatasync rate: 64 x {raw_sync:.0} = {:.0} msgs/s",
        64.0 * raw_sync
    );
    let (gb, gbs) = recovery_scan(dir.path(), if quick { 32 << 20 } else { 2 << 30 });
    println!(
        "  recovery scan: {gb:.2} GB verified at {gbs:.2} GB/s from page cache (target >= 1 GB/s)"
    );
}
