//! The FUSE side: each kernel request becomes one call on the shared [`State`], under its
//! lock, after checking that the request comes from the mount of the current epoch (a mount
//! whose power was pulled fails everything with EIO) and that no fault applies.

use std::ffi::OsStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::faults::hits;
use crate::state::{Errno, Inode, Res, State, PAGE};

/// No attribute or entry caching in the kernel: every size and name the kernel uses comes
/// from the state as it is now (faults and power losses change it behind the kernel's back).
const TTL: Duration = Duration::ZERO;

/// The state shared by the handle and every mount made on it.
pub(crate) type Shared = Arc<Mutex<State>>;

/// Locks the state; a panic in another holder leaves the data consistent (every change is
/// applied whole or not at all), so a poisoned lock is still usable.
pub(crate) fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, State> {
    shared
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// One mount of the state: serves requests only while the state is in its epoch.
pub(crate) struct Mounted {
    pub(crate) shared: Shared,
    pub(crate) epoch: u64,
}

fn attr(ino: u64, i: &Inode) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: i.size(),
        blocks: i.allocated() / 512,
        atime: i.atime,
        mtime: i.mtime,
        ctime: i.ctime,
        crtime: i.ctime,
        kind: if i.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: i.perm,
        nlink: if i.is_dir() { i.nlink + 1 } else { i.nlink },
        uid: i.uid,
        gid: i.gid,
        rdev: 0,
        blksize: PAGE as u32,
        flags: 0,
    }
}

fn errno(e: Errno) -> fuser::Errno {
    fuser::Errno::from_i32(e)
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Mounted {
    /// Runs `f` on the state if this mount is still the live one, else EIO.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> Res<T>) -> Res<T> {
        let mut s = lock(&self.shared);
        if s.epoch != self.epoch {
            return Err(libc::EIO);
        }
        f(&mut s)
    }

    fn entry(&self, reply: ReplyEntry, f: impl FnOnce(&mut State) -> Res<u64>) {
        match self.with(|s| {
            let ino = f(s)?;
            Ok(attr(ino, s.inode(ino)?))
        }) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn empty(&self, reply: ReplyEmpty, f: impl FnOnce(&mut State) -> Res<()>) {
        match self.with(f) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

impl Filesystem for Mounted {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, |s| s.lookup(parent.0, name));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.with(|s| Ok(attr(ino.0, s.inode(ino.0)?))) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = self.with(|s| {
            if let Some(size) = size {
                s.set_size(ino.0, size)?;
            }
            s.set_meta(
                ino.0,
                mode.map(|m| (m & 0o7777) as u16),
                uid,
                gid,
                atime.map(time),
                mtime.map(time),
            )?;
            Ok(attr(ino.0, s.inode(ino.0)?))
        });
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        if mode & libc::S_IFMT != libc::S_IFREG {
            // Only regular files and directories are modelled.
            reply.error(fuser::Errno::EPERM);
            return;
        }
        let perm = (mode & !umask & 0o7777) as u16;
        self.entry(reply, |s| {
            s.create(parent.0, name, perm, req.uid(), req.gid())
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        self.entry(reply, |s| {
            s.mkdir(parent.0, name, perm, req.uid(), req.gid())
        });
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.unlink(parent.0, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, |s| s.rmdir(parent.0, name));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(fuser::Errno::EINVAL);
            return;
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        self.empty(reply, |s| {
            s.rename(parent.0, name, newparent.0, newname, no_replace)
        });
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // Page-cached IO (no direct_io), so shared writable mappings work as on a disk.
        match self.with(|s| s.opened(ino.0)) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let perm = (mode & !umask & 0o7777) as u16;
        let result = self.with(|s| {
            let ino = s.create(parent.0, name, perm, req.uid(), req.gid())?;
            s.opened(ino)?;
            Ok(attr(ino, s.inode(ino)?))
        });
        match result {
            Ok(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.with(|s| {
            if hits(&s.faults.fail_reads, || s.path(ino.0)) {
                return Err(libc::EIO);
            }
            s.read(ino.0, offset, size)
        });
        match result {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let result = self.with(|s| {
            if hits(&s.faults.fail_writes, || s.path(ino.0)) {
                return Err(libc::EIO);
            }
            s.write(ino.0, offset, data)
        });
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close(2) makes nothing durable; it only has to reach a live mount.
        self.empty(reply, |s| s.inode(ino.0).map(|_| ()));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| {
            s.released(ino.0);
            Ok(())
        });
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // fdatasync is modelled as fsync: the length is data too (it is what makes appended
        // bytes readable), and nothing else of the inode matters here.
        self.empty(reply, |s| {
            if hits(&s.faults.fail_fsync, || s.path(ino.0)) {
                return Err(libc::EIO);
            }
            s.fsync(ino.0)
        });
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.with(|s| {
            if s.inode(ino.0)?.is_dir() {
                Ok(())
            } else {
                Err(libc::ENOTDIR)
            }
        }) {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::empty()),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listing = self.with(|s| s.list(ino.0));
        let entries = match listing {
            Ok(e) => e,
            Err(e) => return reply.error(errno(e)),
        };
        let dots = [
            (OsStr::new(".").to_os_string(), ino.0, true),
            (OsStr::new("..").to_os_string(), ino.0, true),
        ];
        // Offsets are positions in name order: a directory changed between two calls may
        // show an entry twice or not at all, which readdir(3) allows.
        for (i, (name, child, dir)) in dots
            .into_iter()
            .chain(entries)
            .enumerate()
            .skip(offset as usize)
        {
            let kind = if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            if reply.add(INodeNo(child), i as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |_| Ok(()));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| {
            if hits(&s.faults.fail_fsync, || s.path(ino.0)) {
                return Err(libc::EIO);
            }
            s.fsync_dir(ino.0)
        });
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.with(|s| Ok((s.faults.capacity, s.used()))) {
            Ok((capacity, used)) => {
                let free = capacity.saturating_sub(used) / PAGE;
                let files = 1 << 20;
                reply.statfs(
                    capacity / PAGE,
                    free,
                    free,
                    files,
                    files,
                    PAGE as u32,
                    255,
                    PAGE as u32,
                )
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, |s| s.fallocate(ino.0, offset, length, mode));
    }
}
