//! Crash test with real `kill -9`.
//!
//! The parent re-runs this test binary as a child (`CONVEYOR_CRASH_CHILD` set) that appends
//! with several concurrent appenders and prints one line per acknowledged append to its
//! stdout pipe. The parent SIGKILLs it at a random moment (sometimes during its recovery),
//! keeps the ledger of acknowledged appends, and checks after reopening that every one of them
//! is readable byte for byte and listed exactly once in its ConsumeQueue at its queue offset.
//! Each child must end by that SIGKILL (a child that exits or panics on its own fails the test,
//! also during recovery), each ConsumeQueue entry must hold a record of its own topic, queue and
//! offset, and each mode must collect a minimum of acknowledged appends ([`MIN_ACKS`]), so that
//! a broken appender cannot pass with nothing to verify.
//!
//! Cycles: `CONVEYOR_CRASH_CYCLES` (default 20 per flush mode); long mode: set it to e.g. 500.
//! Custom harness (`harness = false`) because the child mode needs its own `main`.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use conveyor_protocol::message::RecordView;
use conveyor_store::{AcceptAll, FlushMode, MessageStore, PutStatus, StoreConfig};
use rand::{Rng, SeedableRng};

const TOPIC: &str = "Crash";
const QUEUES: u64 = 4;
const APPENDERS: u64 = 4;
/// Acknowledged appends a flush mode must collect over its cycles (capped by the sum of the
/// cycles' kill targets, for very short runs). The default 20 cycles aim at ~25,000 acks; even
/// a slow disk under SYNC flush makes 1,000 in the 20 s a cycle may wait for its target.
const MIN_ACKS: usize = 1_000;

fn config(root: &Path, mode: FlushMode) -> StoreConfig {
    let mut cfg = StoreConfig::small(root);
    cfg.flush_mode = mode;
    cfg.commit_log_segment_size = 256 << 10;
    cfg.max_message_size = 64 << 10;
    cfg
}

fn parse_mode(s: &str) -> FlushMode {
    if s == "sync" {
        FlushMode::Sync
    } else {
        FlushMode::Async
    }
}

/// Child: append forever (bounded) and report each acknowledged append.
fn child(dir: &str, mode: &str, cycle: u64) {
    let (store, _) =
        MessageStore::open(config(Path::new(dir), parse_mode(mode))).expect("child: open store");
    let store = Arc::new(store);
    let out = Arc::new(Mutex::new(std::io::stdout()));
    let threads: Vec<_> = (0..APPENDERS)
        .map(|t| {
            let store = store.clone();
            let out = out.clone();
            std::thread::spawn(move || {
                for i in 0..200_000u64 {
                    let id = (cycle << 32) | (t << 24) | i;
                    let queue_id = (id % QUEUES) as i32;
                    let body = body_for(id, (id % 997) as usize + 1);
                    let m = message(TOPIC, queue_id, &body, &id.to_string());
                    let r = store.put_message(&m).expect("child: put");
                    if r.status != PutStatus::Ok {
                        continue; // not acknowledged as durable
                    }
                    let p = r.placements[0];
                    let mut out = out.lock().unwrap();
                    writeln!(
                        out,
                        "{id} {} {queue_id} {}",
                        p.physical_offset, p.queue_offset
                    )
                    .and_then(|_| out.flush())
                    .expect("child: report");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[derive(Clone, Copy)]
struct Ack {
    id: u64,
    phys: u64,
    queue_id: i32,
    queue_offset: i64,
}

/// Reopens the store and checks the whole ledger.
fn verify(dir: &Path, mode: FlushMode, ledger: &[Ack]) -> Result<(), String> {
    let (store, _) = MessageStore::open(config(dir, mode)).map_err(|e| format!("open: {e}"))?;
    for a in ledger {
        let rec = store
            .message_at(a.phys)
            .ok_or_else(|| format!("ack {} at {} missing", a.id, a.phys))?;
        let v = RecordView::parse_verified(&rec, true)
            .map_err(|e| format!("ack {} at {} damaged: {e}", a.id, a.phys))?;
        let body = body_for(a.id, (a.id % 997) as usize + 1);
        if v.body() != &body[..]
            || v.property("UNIQ_KEY") != Some(a.id.to_string().as_str())
            || v.queue_id() != a.queue_id
            || v.queue_offset() != a.queue_offset
        {
            return Err(format!("ack {} at {}: content differs", a.id, a.phys));
        }
    }
    // Every queue entry is a valid record at its own offset; each id is listed once.
    let mut listed: HashMap<u64, usize> = HashMap::new();
    for q in 0..QUEUES as i32 {
        let max = store.max_offset(TOPIC, q);
        let mut offset = store.min_offset(TOPIC, q);
        while offset < max {
            let r = store.get_messages(TOPIC, q, offset, 64, 1 << 20, &AcceptAll);
            if r.messages.is_empty() {
                return Err(format!(
                    "queue {q}: no messages at {offset} below max {max}"
                ));
            }
            for (slice, qo) in r.messages.iter().zip(&r.queue_offsets) {
                let v = RecordView::parse_verified(slice, true)
                    .map_err(|e| format!("queue {q} offset {qo}: damaged record: {e}"))?;
                if v.queue_id() != q || v.topic() != TOPIC {
                    return Err(format!(
                        "queue {q}: entry {qo} holds a record of {}/{}",
                        v.topic(),
                        v.queue_id()
                    ));
                }
                if v.queue_offset() != *qo {
                    return Err(format!(
                        "queue {q}: entry {qo} holds queue offset {}",
                        v.queue_offset()
                    ));
                }
                let id: u64 = v
                    .property("UNIQ_KEY")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(u64::MAX);
                *listed.entry(id).or_default() += 1;
            }
            offset = r.next_begin_offset;
        }
    }
    for a in ledger {
        match listed.get(&a.id) {
            Some(1) => {}
            n => {
                return Err(format!(
                    "ack {} listed {:?} times in queue {}",
                    a.id, n, a.queue_id
                ))
            }
        }
    }
    Ok(())
}

fn run_cycles(mode: &str, cycles: u64, rng: &mut impl Rng) -> Result<usize, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let flush_mode = parse_mode(mode);
    let mut ledger: Vec<Ack> = Vec::new();
    let mut targets = 0usize;
    for cycle in 0..cycles {
        let mut child = Command::new(&exe)
            .env("CONVEYOR_CRASH_CHILD", dir.path())
            .env("CONVEYOR_CRASH_MODE", mode)
            .env("CONVEYOR_CRASH_CYCLE", cycle.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn child: {e}"))?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let acks = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let acks = acks.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let f: Vec<&str> = line.split(' ').collect();
                    if f.len() != 4 {
                        continue; // a line torn by the kill was never an ack we rely on
                    }
                    if let (Ok(id), Ok(phys), Ok(q), Ok(qo)) =
                        (f[0].parse(), f[1].parse(), f[2].parse(), f[3].parse())
                    {
                        acks.lock().unwrap().push(Ack {
                            id,
                            phys,
                            queue_id: q,
                            queue_offset: qo,
                        });
                    }
                }
            })
        };
        // Kill at a random moment: sometimes before any ack (during recovery), usually after
        // a random number of acks.
        let target = if rng.random_bool(0.15) {
            0
        } else {
            rng.random_range(1..3000)
        };
        targets += target;
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut exited = None;
        while acks.lock().unwrap().len() < target && Instant::now() < deadline {
            exited = child.try_wait().map_err(|e| e.to_string())?;
            if exited.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let status = match exited {
            Some(status) => status,
            None => {
                child.kill().map_err(|e| format!("kill: {e}"))?;
                child.wait().map_err(|e| e.to_string())?
            }
        };
        reader.join().map_err(|_| "reader panicked")?;
        let got = std::mem::take(&mut *acks.lock().unwrap());
        // Only our SIGKILL may end a child: an exit or a panic of its own (say in recovery,
        // before any ack) is a failure, whatever it acknowledged.
        if status.signal() != Some(libc::SIGKILL) {
            return Err(format!(
                "cycle {cycle}: child ended on its own ({status}) after {} acks, not by SIGKILL",
                got.len()
            ));
        }
        ledger.extend(got);
        // Verify in the parent every few cycles (a clean reopen), otherwise crash on crash.
        if cycle % 4 == 3 || cycle + 1 == cycles {
            verify(dir.path(), flush_mode, &ledger).map_err(|e| format!("cycle {cycle}: {e}"))?;
        }
    }
    let min = MIN_ACKS.min(targets);
    if ledger.len() < min {
        return Err(format!(
            "only {} acknowledged appends over {cycles} cycles (at least {min} required): the appender is not acknowledging",
            ledger.len()
        ));
    }
    Ok(ledger.len())
}

fn main() {
    if let Ok(dir) = std::env::var("CONVEYOR_CRASH_CHILD") {
        let mode = std::env::var("CONVEYOR_CRASH_MODE").unwrap_or_default();
        let cycle = std::env::var("CONVEYOR_CRASH_CYCLE")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        child(&dir, &mode, cycle);
        return;
    }
    let cycles: u64 = std::env::var("CONVEYOR_CRASH_CYCLES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("CONVEYOR_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let (mut passed, mut failed) = (0, 0);
    for mode in ["sync", "async"] {
        let started = Instant::now();
        match run_cycles(mode, cycles, &mut rng) {
            Ok(acks) => {
                passed += 1;
                println!(
                    "test kill9_{mode}_flush ... ok ({cycles} kill cycles, {acks} acknowledged appends verified, {:.1}s, seed {seed})",
                    started.elapsed().as_secs_f64()
                );
            }
            Err(e) => {
                failed += 1;
                println!("test kill9_{mode}_flush ... FAILED (seed {seed}): {e}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
