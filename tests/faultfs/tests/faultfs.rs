//! faultfs mounted for real: a child process (`faultfs-probe`) writes with write(2) and
//! through shared mappings, fsyncs some files and directories, renames some; then the power
//! is pulled and exactly the fsynced state must be there. Each fault must fail the calls it
//! covers with its errno, and only those.

use std::fs::OpenOptions;
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;

use conveyor_faultfs::{FaultFs, Faults, Target};

/// Mounts a fresh faultfs, or `None` (test skipped) where the machine has no FUSE device and
/// this is not CI: under CI=true a missing /dev/fuse is a failure.
fn mount() -> Option<(tempfile::TempDir, FaultFs)> {
    if !conveyor_faultfs::fuse_available() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "/dev/fuse is missing under CI"
        );
        eprintln!("skipped: no /dev/fuse on this machine");
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultFs::mount(dir.path(), Faults::default()).expect("mount faultfs");
    Some((dir, fs))
}

/// Runs the probe with `ops` in a child process; returns its line per operation.
fn probe(ops: &[String]) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_faultfs-probe"))
        .args(ops)
        .output()
        .expect("run faultfs-probe");
    assert!(
        out.status.success(),
        "faultfs-probe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), ops.len(), "one line per operation: {lines:?}");
    lines
}

/// Runs `ops` and asserts each result: `(operation, expected line)`.
fn expect(steps: &[(String, &str)]) {
    let ops: Vec<String> = steps.iter().map(|(op, _)| op.clone()).collect();
    let got = probe(&ops);
    for ((op, want), got) in steps.iter().zip(&got) {
        assert_eq!(got, want, "result of {op}");
    }
}

fn p(root: &Path, rel: &str) -> String {
    root.join(rel).display().to_string()
}

fn read(root: &Path, rel: &str) -> Option<Vec<u8>> {
    match std::fs::read(root.join(rel)) {
        Ok(d) => Some(d),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("read {rel}: {e}"),
    }
}

#[test]
fn power_loss_keeps_exactly_the_fsynced_state() {
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let r = fs.path().to_path_buf();
    let at = |rel: &str| p(&r, rel);
    let ok = "ok";
    expect(&[
        (format!("mkdir:{}", at("d")), ok),
        (format!("fsyncdir:{}", at("")), ok),
        // a: synced as v1, then overwritten without a sync.
        (format!("create:{}", at("d/a")), ok),
        (format!("write:{}:0:v1", at("d/a")), ok),
        (format!("fsync:{}", at("d/a")), ok),
        // c: its name is synced, its data never is.
        (format!("create:{}", at("d/c")), ok),
        (format!("write:{}:0:data of c", at("d/c")), ok),
        // m: preallocated and mapped like a CommitLog segment; one range msynced.
        (format!("create:{}", at("d/m")), ok),
        (format!("fallocate:{}:12288", at("d/m")), ok),
        (format!("fsync:{}", at("d/m")), ok),
        // r1 is renamed with a directory fsync, r2 without.
        (format!("create:{}", at("d/r1")), ok),
        (format!("write:{}:0:r1", at("d/r1")), ok),
        (format!("fsync:{}", at("d/r1")), ok),
        (format!("create:{}", at("d/r2")), ok),
        (format!("write:{}:0:r2", at("d/r2")), ok),
        (format!("fsync:{}", at("d/r2")), ok),
        (format!("fsyncdir:{}", at("d")), ok),
        (format!("rename:{}:{}", at("d/r1"), at("d/r1b")), ok),
        (format!("fsyncdir:{}", at("d")), ok),
        (format!("rename:{}:{}", at("d/r2"), at("d/r2b")), ok),
        (format!("write:{}:0:v2", at("d/a")), ok),
        (format!("mmap-sync:{}:4096:synced", at("d/m")), ok),
        (format!("mmap:{}:8192:lost", at("d/m")), ok),
        // b: data synced, name never; e: a directory whose name is never synced.
        (format!("create:{}", at("d/b")), ok),
        (format!("write:{}:0:b", at("d/b")), ok),
        (format!("fsync:{}", at("d/b")), ok),
        (format!("mkdir:{}", at("e")), ok),
        (format!("create:{}", at("e/f")), ok),
        (format!("fsync:{}", at("e/f")), ok),
        (format!("fsyncdir:{}", at("e")), ok),
    ]);
    // Before the loss everything reads as written (the mapping's unsynced page included:
    // the probe exited, the page cache still has it).
    assert_eq!(read(&r, "d/a").as_deref(), Some(&b"v2"[..]));
    assert_eq!(read(&r, "d/b").as_deref(), Some(&b"b"[..]));
    assert_eq!(read(&r, "d/c").as_deref(), Some(&b"data of c"[..]));
    assert!(read(&r, "e/f").is_some());
    let m = read(&r, "d/m").expect("m");
    assert_eq!(&m[8192..8196], b"lost");

    // A handle of the old mount, to show it fails after the plug.
    let old = OpenOptions::new()
        .write(true)
        .open(r.join("d/a"))
        .expect("open d/a");
    fs.plug().expect("plug");

    assert_eq!(
        read(&r, "d/a").as_deref(),
        Some(&b"v1"[..]),
        "last fsync wins"
    );
    assert_eq!(read(&r, "d/b"), None, "a name never made durable is lost");
    assert_eq!(
        read(&r, "d/c").as_deref(),
        Some(&b""[..]),
        "unsynced data is lost"
    );
    let m = read(&r, "d/m").expect("m survives");
    assert_eq!(m.len(), 12288, "fallocated length was synced");
    assert_eq!(&m[4096..4102], b"synced", "msync(MS_SYNC) is durable");
    assert_eq!(
        &m[8192..8196],
        &[0u8; 4][..],
        "unsynced mapped write is lost"
    );
    assert!(m[..4096].iter().all(|&b| b == 0));
    assert_eq!(read(&r, "d/r1b").as_deref(), Some(&b"r1"[..]));
    assert_eq!(read(&r, "d/r1"), None);
    assert_eq!(
        read(&r, "d/r2").as_deref(),
        Some(&b"r2"[..]),
        "unsynced rename reverts"
    );
    assert_eq!(read(&r, "d/r2b"), None);
    assert!(
        !r.join("e").exists(),
        "unsynced mkdir is lost, with what is below it"
    );
    let err = old
        .write_at(b"zombie", 0)
        .expect_err("old mount must refuse");
    assert_eq!(err.raw_os_error(), Some(libc::EIO));
    drop(old);
    assert_eq!(read(&r, "d/a").as_deref(), Some(&b"v1"[..]));

    // The store accumulates: a second cycle on the reverted state.
    expect(&[
        (format!("write:{}:2:+more", at("d/a")), ok),
        (format!("fsync:{}", at("d/a")), ok),
        (format!("write:{}:0:XX", at("d/r2")), ok),
    ]);
    fs.plug().expect("second plug");
    assert_eq!(read(&r, "d/a").as_deref(), Some(&b"v1+more"[..]));
    assert_eq!(read(&r, "d/r2").as_deref(), Some(&b"r2"[..]));
    assert_eq!(fs.handle().plugs(), 2);
}

#[test]
fn unlink_is_durable_only_with_the_directory() {
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let r = fs.path().to_path_buf();
    let at = |rel: &str| p(&r, rel);
    expect(&[
        (format!("create:{}", at("x")), "ok"),
        (format!("create:{}", at("y")), "ok"),
        (format!("fsyncdir:{}", at("")), "ok"),
        (format!("unlink:{}", at("x")), "ok"),
        (format!("unlink:{}", at("y")), "ok"),
        (format!("create:{}", at("y")), "ok"),
        (format!("write:{}:0:new y", at("y")), "ok"),
        (format!("fsync:{}", at("y")), "ok"),
    ]);
    assert_eq!(read(&r, "x"), None);
    fs.plug().expect("plug");
    assert_eq!(
        read(&r, "x").as_deref(),
        Some(&b""[..]),
        "unsynced unlink reverts"
    );
    assert_eq!(
        read(&r, "y").as_deref(),
        Some(&b""[..]),
        "the old y is back"
    );
}

#[test]
fn capacity_gives_enospc_and_statfs_reports_it() {
    let Some((_dir, fs)) = mount() else {
        return;
    };
    let r = fs.path().to_path_buf();
    let at = |rel: &str| p(&r, rel);
    fs.handle().set_capacity(64 << 10);
    let enospc = format!("err {}", libc::ENOSPC);
    expect(&[
        (format!("statfs:{}", at("")), "ok 65536 65536"),
        (format!("create:{}", at("f")), "ok"),
        (format!("fallocate:{}:32768", at("f")), "ok"),
        (format!("statfs:{}", at("")), "ok 65536 32768"),
        (format!("fallocate:{}:131072", at("f")), &enospc),
        (format!("posix-fallocate:{}:131072", at("f")), &enospc),
        (format!("truncate:{}:1048576", at("f")), &enospc),
        (format!("write:{}:65536:x", at("f")), &enospc),
        (
            format!("write:{}:100:inside the reservation", at("f")),
            "ok",
        ),
        (format!("unlink:{}", at("f")), "ok"),
        (format!("statfs:{}", at("")), "ok 65536 65536"),
    ]);
    assert_eq!(fs.handle().used(), 0);
}

#[test]
fn fsync_faults_fail_with_eio_and_make_nothing_durable() {
    let Some((_dir, mut fs)) = mount() else {
        return;
    };
    let r = fs.path().to_path_buf();
    let at = |rel: &str| p(&r, rel);
    let eio = format!("err {}", libc::EIO);
    expect(&[
        (format!("create:{}", at("bad")), "ok"),
        (format!("create:{}", at("good")), "ok"),
        (format!("fsyncdir:{}", at("")), "ok"),
        (format!("write:{}:0:bad", at("bad")), "ok"),
        (format!("write:{}:0:good", at("good")), "ok"),
    ]);
    fs.handle()
        .fail_fsync(Some(Target::PathContains("bad".into())));
    expect(&[
        (format!("fsync:{}", at("bad")), &eio),
        (format!("fdatasync:{}", at("bad")), &eio),
        (format!("fsync:{}", at("good")), "ok"),
    ]);
    fs.handle().fail_fsync(Some(Target::All));
    expect(&[
        (format!("fsync:{}", at("good")), &eio),
        (format!("fsyncdir:{}", at("")), &eio),
        (format!("create:{}", at("late")), "ok"),
        (format!("fsyncdir:{}", at("")), &eio),
    ]);
    fs.handle().fail_fsync(None);
    fs.plug().expect("plug");
    assert_eq!(read(&r, "bad").as_deref(), Some(&b""[..]));
    assert_eq!(read(&r, "good").as_deref(), Some(&b"good"[..]));
    assert_eq!(read(&r, "late"), None);
}

#[test]
fn write_read_and_fallocate_faults() {
    let Some((_dir, fs)) = mount() else {
        return;
    };
    let r = fs.path().to_path_buf();
    let at = |rel: &str| p(&r, rel);
    let eio = format!("err {}", libc::EIO);
    expect(&[
        (format!("create:{}", at("w")), "ok"),
        (format!("fallocate:{}:8192", at("w")), "ok"),
        (format!("create:{}", at("rfile")), "ok"),
        (format!("write:{}:0:readable?", at("rfile")), "ok"),
    ]);
    fs.handle().fail_writes(Some(Target::All));
    expect(&[
        (format!("write:{}:0:x", at("w")), &eio),
        // The mapping takes the write; the kernel's writeback fails and msync reports it.
        (format!("mmap-sync:{}:0:x", at("w")), &eio),
    ]);
    fs.handle().fail_writes(None);
    fs.handle()
        .fail_reads(Some(Target::PathContains("rfile".into())));
    expect(&[
        (format!("read:{}", at("rfile")), &eio),
        (
            format!("read:{}", at("w")),
            &format!("ok {}", "\0".repeat(8192)),
        ),
    ]);
    fs.handle().fail_reads(None);
    expect(&[(format!("read:{}", at("rfile")), "ok readable?")]);
    fs.handle().set_fallocate_unsupported(true);
    expect(&[(
        format!("fallocate:{}:65536", at("w")),
        &format!("err {}", libc::EOPNOTSUPP),
    )]);
    fs.handle().set_fallocate_unsupported(false);
    expect(&[(format!("fallocate:{}:65536", at("w")), "ok")]);
}
