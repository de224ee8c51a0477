//! The child process of the crate's tests: performs file operations on a faultfs mount from
//! another process (as the broker does), one per argument, and prints one line per operation:
//! `ok`, `ok <text>` for a read, or `err <errno>`. It goes on after a failure, so one run can
//! show which steps a fault refused.
//!
//! Operations (`:`-separated; paths are absolute):
//! `create:P`, `mkdir:P`, `write:P:OFF:TEXT` (pwrite), `read:P` (whole file),
//! `truncate:P:LEN`, `fallocate:P:LEN` (fallocate(2), mode 0), `posix-fallocate:P:LEN`,
//! `mmap:P:OFF:TEXT` (through a shared mapping of the whole file, not synced),
//! `mmap-sync:P:OFF:TEXT` (the same, then msync(MS_SYNC) of the written range),
//! `fsync:P`, `fdatasync:P`, `fsyncdir:P`, `rename:FROM:TO`, `unlink:P`, `rmdir:P`,
//! `statfs:P` (prints total and free bytes).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;

fn open_rw(path: &str) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

fn num(s: Option<&str>) -> io::Result<u64> {
    s.and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "bad number"))
}

fn nix_err(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn mmap_write(path: &str, off: u64, text: &str, sync: bool) -> io::Result<()> {
    let file = open_rw(path)?;
    // SAFETY: the mapping is private to this short-lived process and nothing else changes
    // the file's length while it exists (the tests run one probe at a time per file).
    let mut map = unsafe { memmap2::MmapMut::map_mut(&file)? };
    let at = off as usize;
    map[at..at + text.len()].copy_from_slice(text.as_bytes());
    if sync {
        map.flush_range(at, text.len())?;
    }
    Ok(())
}

fn run(op: &str) -> io::Result<Option<String>> {
    let mut parts = op.splitn(4, ':');
    let name = parts.next().unwrap_or_default();
    let path = parts.next().unwrap_or_default();
    let (a, b) = (parts.next(), parts.next());
    match name {
        "create" => File::create_new(path).map(|_| None),
        "mkdir" => std::fs::create_dir(path).map(|_| None),
        "write" => {
            let f = open_rw(path)?;
            f.write_all_at(b.unwrap_or_default().as_bytes(), num(a)?)?;
            Ok(None)
        }
        "read" => std::fs::read(path).map(|d| Some(String::from_utf8_lossy(&d).into_owned())),
        "truncate" => open_rw(path)?.set_len(num(a)?).map(|_| None),
        "fallocate" => {
            let f = open_rw(path)?;
            let len = num(a)? as i64;
            nix::fcntl::fallocate(&f, nix::fcntl::FallocateFlags::empty(), 0, len)
                .map_err(nix_err)?;
            Ok(None)
        }
        "posix-fallocate" => {
            let f = open_rw(path)?;
            nix::fcntl::posix_fallocate(&f, 0, num(a)? as i64).map_err(nix_err)?;
            Ok(None)
        }
        "mmap" => mmap_write(path, num(a)?, b.unwrap_or_default(), false).map(|_| None),
        "mmap-sync" => mmap_write(path, num(a)?, b.unwrap_or_default(), true).map(|_| None),
        "fsync" => open_rw(path)?.sync_all().map(|_| None),
        "fdatasync" => open_rw(path)?.sync_data().map(|_| None),
        "fsyncdir" => File::open(path)?.sync_all().map(|_| None),
        "rename" => std::fs::rename(path, a.unwrap_or_default()).map(|_| None),
        "unlink" => std::fs::remove_file(path).map(|_| None),
        "rmdir" => std::fs::remove_dir(path).map(|_| None),
        "statfs" => {
            let st = nix::sys::statvfs::statvfs(path).map_err(nix_err)?;
            let total = st.blocks() * st.fragment_size();
            let free = st.blocks_available() * st.fragment_size();
            Ok(Some(format!("{total} {free}")))
        }
        other => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("unknown operation {other}"),
        )),
    }
}

fn main() {
    for op in std::env::args().skip(1) {
        match run(&op) {
            Ok(None) => println!("ok"),
            Ok(Some(text)) => println!("ok {text}"),
            Err(e) => match e.raw_os_error() {
                Some(code) => println!("err {code}"),
                None => {
                    eprintln!("faultfs-probe: {op}: {e}");
                    std::process::exit(2);
                }
            },
        }
    }
}
