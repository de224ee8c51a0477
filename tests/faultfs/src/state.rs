//! The filesystem's contents as plain data, without FUSE: every inode's current and durable
//! image, the namespace, the charge against the capacity, and the power loss that throws the
//! current image away. Kept apart from the FUSE glue so the durability rules can be read (and
//! unit-tested) in one place.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::sync::Arc;
use std::time::SystemTime;

use crate::faults::Faults;

/// Size of one page of file content; also the block size reported to the kernel.
pub(crate) const PAGE: u64 = 4096;

/// Inode number of the root directory (FUSE's fixed root).
pub(crate) const ROOT: u64 = 1;

/// An errno value returned to the kernel.
pub(crate) type Errno = i32;

/// Result of a state operation: the value, or the errno the request fails with.
pub(crate) type Res<T> = Result<T, Errno>;

/// One page. Shared between the current and the durable image until one of them is written
/// (copy on write), so an fsync copies page pointers, not bytes.
type Page = Arc<[u8; PAGE as usize]>;

fn round_up(n: u64) -> u64 {
    n.div_ceil(PAGE) * PAGE
}

/// A file's bytes: sparse pages (a missing page reads as zeros), the length, and how far
/// blocks were reserved by fallocate.
#[derive(Clone, Default, Debug)]
pub(crate) struct Data {
    pages: BTreeMap<u64, Page>,
    pub(crate) len: u64,
    pub(crate) allocated: u64,
}

impl Data {
    /// Bytes charged against the capacity: every block up to the larger of the length and
    /// the reservation (holes are charged too: simple, and never optimistic).
    pub(crate) fn charge(&self) -> u64 {
        round_up(self.len.max(self.allocated))
    }

    /// Up to `size` bytes from `off`, short at the end of the file.
    pub(crate) fn read(&self, off: u64, size: u32) -> Vec<u8> {
        if off >= self.len {
            return Vec::new();
        }
        let end = self.len.min(off + u64::from(size));
        let mut out = vec![0u8; (end - off) as usize];
        let mut at = off;
        while at < end {
            let index = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min((end - at) as usize);
            if let Some(page) = self.pages.get(&index) {
                let dst = (at - off) as usize;
                out[dst..dst + n].copy_from_slice(&page[in_page..in_page + n]);
            }
            at += n as u64;
        }
        out
    }

    /// Writes `data` at `off`, extending the length.
    pub(crate) fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let at = off + done as u64;
            let index = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let n = ((PAGE as usize) - in_page).min(data.len() - done);
            let page = self
                .pages
                .entry(index)
                .or_insert_with(|| Arc::new([0u8; PAGE as usize]));
            Arc::make_mut(page)[in_page..in_page + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        self.len = self.len.max(off + data.len() as u64);
    }

    /// Sets the length; bytes past a shrink are gone (a later extension reads zeros) and so
    /// is the reservation past it.
    pub(crate) fn truncate(&mut self, size: u64) {
        if size < self.len {
            let first_gone = size.div_ceil(PAGE);
            self.pages.split_off(&first_gone);
            if !size.is_multiple_of(PAGE) {
                if let Some(page) = self.pages.get_mut(&(size / PAGE)) {
                    Arc::make_mut(page)[(size % PAGE) as usize..].fill(0);
                }
            }
        }
        self.len = size;
        self.allocated = self.allocated.min(size);
    }
}

/// What an inode is.
#[derive(Debug)]
pub(crate) enum Node {
    /// A regular file: what reads see now, and what survives a power loss.
    File { cur: Data, durable: Data },
    /// A directory: its entries now, and the entries as of its last fsync.
    Dir {
        cur: BTreeMap<OsString, u64>,
        durable: BTreeMap<OsString, u64>,
    },
}

/// One inode.
#[derive(Debug)]
pub(crate) struct Inode {
    pub(crate) node: Node,
    pub(crate) perm: u16,
    /// Permission bits as of the last fsync (restored by a power loss).
    durable_perm: u16,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) atime: SystemTime,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    /// Names in the current namespace.
    pub(crate) nlink: u32,
    /// Open file handles: an unlinked file still open keeps its space until released.
    pub(crate) open: u32,
    /// Last (parent, name) the inode was linked under: its path for fault matching.
    parent: u64,
    name: OsString,
}

impl Inode {
    fn new(node: Node, perm: u16, uid: u32, gid: u32, parent: u64, name: &OsStr) -> Self {
        let now = SystemTime::now();
        Self {
            node,
            perm,
            durable_perm: perm,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            nlink: 1,
            open: 0,
            parent,
            name: name.to_os_string(),
        }
    }

    /// Bytes this inode holds against the capacity now.
    fn charge(&self) -> u64 {
        match &self.node {
            Node::File { cur, .. } if self.nlink > 0 || self.open > 0 => cur.charge(),
            _ => 0,
        }
    }

    /// True for a directory.
    pub(crate) fn is_dir(&self) -> bool {
        matches!(self.node, Node::Dir { .. })
    }

    /// Current length in bytes (directories: 0).
    pub(crate) fn size(&self) -> u64 {
        match &self.node {
            Node::File { cur, .. } => cur.len,
            Node::Dir { .. } => 0,
        }
    }

    /// Current charge in bytes (what `stat` reports as blocks).
    pub(crate) fn allocated(&self) -> u64 {
        match &self.node {
            Node::File { cur, .. } => cur.charge(),
            Node::Dir { .. } => 0,
        }
    }
}

/// The whole filesystem.
#[derive(Debug)]
pub(crate) struct State {
    /// Which mount may act on this state; a power loss starts a new epoch, and requests from
    /// an older mount fail with EIO.
    pub(crate) epoch: u64,
    inodes: HashMap<u64, Inode>,
    next_ino: u64,
    /// Sum of the charges of the inodes in use.
    used: u64,
    /// The faults in force.
    pub(crate) faults: Faults,
}

impl State {
    /// An empty filesystem: only the root directory, itself durable.
    pub(crate) fn new(faults: Faults) -> Self {
        let mut inodes = HashMap::new();
        let root = Inode::new(
            Node::Dir {
                cur: BTreeMap::new(),
                durable: BTreeMap::new(),
            },
            0o755,
            0,
            0,
            ROOT,
            OsStr::new(""),
        );
        inodes.insert(ROOT, root);
        Self {
            epoch: 0,
            inodes,
            next_ino: ROOT + 1,
            used: 0,
            faults,
        }
    }

    /// Bytes in use against the capacity.
    pub(crate) fn used(&self) -> u64 {
        self.used
    }

    /// The inode `ino`, or ENOENT.
    pub(crate) fn inode(&self, ino: u64) -> Res<&Inode> {
        self.inodes.get(&ino).ok_or(libc::ENOENT)
    }

    fn inode_mut(&mut self, ino: u64) -> Res<&mut Inode> {
        self.inodes.get_mut(&ino).ok_or(libc::ENOENT)
    }

    /// The path of `ino` from the mount root ("/a/b"), for matching faults by path.
    pub(crate) fn path(&self, ino: u64) -> String {
        let mut parts = Vec::new();
        let mut at = ino;
        // Bounded: a rename cycle cannot happen, but a stale parent must not loop forever.
        for _ in 0..256 {
            if at == ROOT {
                break;
            }
            let Some(inode) = self.inodes.get(&at) else {
                break;
            };
            parts.push(inode.name.to_string_lossy().into_owned());
            at = inode.parent;
        }
        parts.reverse();
        format!("/{}", parts.join("/"))
    }

    fn entries(&self, dir: u64) -> Res<&BTreeMap<OsString, u64>> {
        match &self.inode(dir)?.node {
            Node::Dir { cur, .. } => Ok(cur),
            Node::File { .. } => Err(libc::ENOTDIR),
        }
    }

    fn entries_mut(&mut self, dir: u64) -> Res<&mut BTreeMap<OsString, u64>> {
        match &mut self.inode_mut(dir)?.node {
            Node::Dir { cur, .. } => Ok(cur),
            Node::File { .. } => Err(libc::ENOTDIR),
        }
    }

    /// The inode named `name` in `dir`.
    pub(crate) fn lookup(&self, dir: u64, name: &OsStr) -> Res<u64> {
        self.entries(dir)?.get(name).copied().ok_or(libc::ENOENT)
    }

    /// The current entries of `dir`, in name order.
    pub(crate) fn list(&self, dir: u64) -> Res<Vec<(OsString, u64, bool)>> {
        Ok(self
            .entries(dir)?
            .iter()
            .map(|(n, &i)| (n.clone(), i, self.inodes.get(&i).is_some_and(Inode::is_dir)))
            .collect())
    }

    /// Applies `change` to `ino`'s file data unless the (length, reservation) it leads to,
    /// as `project` tells beforehand, would not fit the capacity: then ENOSPC and nothing
    /// changes. Projecting first spares copying the data for the check.
    fn change_data(
        &mut self,
        ino: u64,
        project: impl FnOnce(&Data) -> (u64, u64),
        change: impl FnOnce(&mut Data),
    ) -> Res<()> {
        let capacity = self.faults.capacity;
        let used = self.used;
        let inode = self.inodes.get_mut(&ino).ok_or(libc::ENOENT)?;
        let before = inode.charge();
        let counted = inode.nlink > 0 || inode.open > 0;
        let Node::File { cur, .. } = &mut inode.node else {
            return Err(libc::EISDIR);
        };
        let (len, allocated) = project(cur);
        let after = if counted {
            round_up(len.max(allocated))
        } else {
            0
        };
        if after > before && used - before + after > capacity {
            return Err(libc::ENOSPC);
        }
        change(cur);
        let now = SystemTime::now();
        inode.mtime = now;
        inode.ctime = now;
        self.used = used - before + inode.charge();
        Ok(())
    }

    /// Reads current file content.
    pub(crate) fn read(&self, ino: u64, off: u64, size: u32) -> Res<Vec<u8>> {
        match &self.inode(ino)?.node {
            Node::File { cur, .. } => Ok(cur.read(off, size)),
            Node::Dir { .. } => Err(libc::EISDIR),
        }
    }

    /// Writes current file content (not durable until [`State::fsync`]).
    pub(crate) fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> Res<()> {
        let end = off + data.len() as u64;
        self.change_data(
            ino,
            |d| (d.len.max(end), d.allocated),
            |d| d.write(off, data),
        )
    }

    /// Truncates or extends the file to `size`.
    pub(crate) fn set_size(&mut self, ino: u64, size: u64) -> Res<()> {
        self.change_data(ino, |d| (size, d.allocated.min(size)), |d| d.truncate(size))
    }

    /// fallocate(2): mode 0 reserves and extends, FALLOC_FL_KEEP_SIZE only reserves; other
    /// modes (punching holes, zeroing ranges) are not modelled.
    pub(crate) fn fallocate(&mut self, ino: u64, off: u64, len: u64, mode: i32) -> Res<()> {
        if self.faults.fallocate_unsupported {
            return Err(libc::EOPNOTSUPP);
        }
        let keep_size = match mode {
            0 => false,
            libc::FALLOC_FL_KEEP_SIZE => true,
            _ => return Err(libc::EOPNOTSUPP),
        };
        let end = off.checked_add(len).ok_or(libc::EFBIG)?;
        let grow = |d: &Data| {
            let len = if keep_size { d.len } else { d.len.max(end) };
            (len, d.allocated.max(end))
        };
        self.change_data(ino, grow, |d| {
            (d.len, d.allocated) = grow(d);
        })
    }

    /// fsync(2)/fdatasync(2) of a file: its data, length, reservation and permissions become
    /// the image a power loss keeps. Its names do not: those are the directories' business.
    /// On a directory: as [`State::fsync_dir`].
    pub(crate) fn fsync(&mut self, ino: u64) -> Res<()> {
        let inode = self.inode_mut(ino)?;
        inode.durable_perm = inode.perm;
        match &mut inode.node {
            Node::File { cur, durable } => *durable = cur.clone(),
            Node::Dir { cur, durable } => *durable = cur.clone(),
        }
        Ok(())
    }

    /// fsync(2) of a directory: its current entries become the durable ones.
    pub(crate) fn fsync_dir(&mut self, ino: u64) -> Res<()> {
        if !self.inode(ino)?.is_dir() {
            return Err(libc::ENOTDIR);
        }
        self.fsync(ino)
    }

    fn link_new(
        &mut self,
        dir: u64,
        name: &OsStr,
        node: Node,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<u64> {
        if self.entries(dir)?.contains_key(name) {
            return Err(libc::EEXIST);
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        self.inodes
            .insert(ino, Inode::new(node, perm, uid, gid, dir, name));
        self.entries_mut(dir)?.insert(name.to_os_string(), ino);
        self.touch(dir);
        Ok(ino)
    }

    /// Creates an empty regular file. Its name is durable only once `dir` is fsynced.
    pub(crate) fn create(
        &mut self,
        dir: u64,
        name: &OsStr,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<u64> {
        let node = Node::File {
            cur: Data::default(),
            durable: Data::default(),
        };
        self.link_new(dir, name, node, perm, uid, gid)
    }

    /// Creates an empty directory. Its name is durable only once `dir` is fsynced.
    pub(crate) fn mkdir(
        &mut self,
        dir: u64,
        name: &OsStr,
        perm: u16,
        uid: u32,
        gid: u32,
    ) -> Res<u64> {
        let node = Node::Dir {
            cur: BTreeMap::new(),
            durable: BTreeMap::new(),
        };
        self.link_new(dir, name, node, perm, uid, gid)
    }

    fn touch(&mut self, ino: u64) {
        if let Some(i) = self.inodes.get_mut(&ino) {
            let now = SystemTime::now();
            i.mtime = now;
            i.ctime = now;
        }
    }

    /// Drops one name of `ino`; a file with no name and no open handle gives its space back.
    fn drop_link(&mut self, ino: u64) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            let before = inode.charge();
            inode.nlink = inode.nlink.saturating_sub(1);
            inode.ctime = SystemTime::now();
            let after = inode.charge();
            self.used = self.used - before + after;
        }
    }

    /// unlink(2): removes a file's name (durable only once `dir` is fsynced).
    pub(crate) fn unlink(&mut self, dir: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(dir, name)?;
        if self.inode(ino)?.is_dir() {
            return Err(libc::EISDIR);
        }
        self.entries_mut(dir)?.remove(name);
        self.touch(dir);
        self.drop_link(ino);
        Ok(())
    }

    /// rmdir(2): removes an empty directory's name.
    pub(crate) fn rmdir(&mut self, dir: u64, name: &OsStr) -> Res<()> {
        let ino = self.lookup(dir, name)?;
        if !self.entries(ino)?.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        self.entries_mut(dir)?.remove(name);
        self.touch(dir);
        self.drop_link(ino);
        Ok(())
    }

    /// rename(2), with RENAME_NOREPLACE honoured (RENAME_EXCHANGE is refused). Durable only
    /// once both directories are fsynced; until then a power loss keeps the old name.
    pub(crate) fn rename(
        &mut self,
        dir: u64,
        name: &OsStr,
        to_dir: u64,
        to_name: &OsStr,
        no_replace: bool,
    ) -> Res<()> {
        let ino = self.lookup(dir, name)?;
        self.entries(to_dir)?;
        if dir == to_dir && name == to_name {
            return Ok(());
        }
        if self.inode(ino)?.is_dir() {
            // A directory may not move below itself.
            let mut at = to_dir;
            for _ in 0..256 {
                if at == ino {
                    return Err(libc::EINVAL);
                }
                if at == ROOT {
                    break;
                }
                at = self.inode(at)?.parent;
            }
        }
        if let Ok(old) = self.lookup(to_dir, to_name) {
            if no_replace {
                return Err(libc::EEXIST);
            }
            let (old_dir, moving_dir) = (self.inode(old)?.is_dir(), self.inode(ino)?.is_dir());
            match (moving_dir, old_dir) {
                (false, true) => return Err(libc::EISDIR),
                (true, false) => return Err(libc::ENOTDIR),
                (true, true) if !self.entries(old)?.is_empty() => return Err(libc::ENOTEMPTY),
                _ => {}
            }
            self.drop_link(old);
        }
        self.entries_mut(dir)?.remove(name);
        self.entries_mut(to_dir)?
            .insert(to_name.to_os_string(), ino);
        self.touch(dir);
        self.touch(to_dir);
        let inode = self.inode_mut(ino)?;
        inode.parent = to_dir;
        inode.name = to_name.to_os_string();
        inode.ctime = SystemTime::now();
        Ok(())
    }

    /// An open(2) (or create) of `ino`.
    pub(crate) fn opened(&mut self, ino: u64) -> Res<()> {
        self.inode_mut(ino)?.open += 1;
        Ok(())
    }

    /// The last close of a handle of `ino`: an unlinked file's space comes back.
    pub(crate) fn released(&mut self, ino: u64) {
        if let Some(inode) = self.inodes.get_mut(&ino) {
            let before = inode.charge();
            inode.open = inode.open.saturating_sub(1);
            let after = inode.charge();
            self.used = self.used - before + after;
        }
    }

    /// Sets permission bits, owner and times (what chmod/chown/utimes change).
    pub(crate) fn set_meta(
        &mut self,
        ino: u64,
        perm: Option<u16>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime: Option<SystemTime>,
        mtime: Option<SystemTime>,
    ) -> Res<()> {
        let inode = self.inode_mut(ino)?;
        if let Some(p) = perm {
            inode.perm = p;
        }
        if let Some(u) = uid {
            inode.uid = u;
        }
        if let Some(g) = gid {
            inode.gid = g;
        }
        if let Some(t) = atime {
            inode.atime = t;
        }
        if let Some(t) = mtime {
            inode.mtime = t;
        }
        inode.ctime = SystemTime::now();
        Ok(())
    }

    /// The power loss: the state becomes what was durable. The namespace is rebuilt from the
    /// root through durable directory entries only; every reachable file gets its durable
    /// data back; an inode no durable name leads to is gone. No handle is open afterwards.
    pub(crate) fn power_loss(&mut self) {
        let mut old = std::mem::take(&mut self.inodes);
        let mut queue = VecDeque::from([ROOT]);
        let mut nlink: HashMap<u64, u32> = HashMap::from([(ROOT, 1)]);
        while let Some(ino) = queue.pop_front() {
            let Some(mut inode) = old.remove(&ino) else {
                // Reached twice (a rename whose two directories were fsynced apart keeps
                // both names): already restored.
                continue;
            };
            inode.node = match inode.node {
                Node::File { durable, .. } => Node::File {
                    cur: durable.clone(),
                    durable,
                },
                Node::Dir { durable, .. } => {
                    for (name, &child) in &durable {
                        *nlink.entry(child).or_insert(0) += 1;
                        if old.contains_key(&child) {
                            if let Some(c) = old.get_mut(&child) {
                                c.parent = ino;
                                c.name = name.clone();
                            }
                            queue.push_back(child);
                        }
                    }
                    Node::Dir {
                        cur: durable.clone(),
                        durable,
                    }
                }
            };
            inode.perm = inode.durable_perm;
            inode.open = 0;
            self.inodes.insert(ino, inode);
        }
        // A durable entry can name an inode that was never part of the durable tree (its
        // own durable parent chain was cut): drop such dangling names.
        let live: std::collections::HashSet<u64> = self.inodes.keys().copied().collect();
        for inode in self.inodes.values_mut() {
            if let Node::Dir { cur, durable } = &mut inode.node {
                cur.retain(|_, i| live.contains(i));
                durable.retain(|_, i| live.contains(i));
            }
        }
        for (ino, inode) in self.inodes.iter_mut() {
            inode.nlink = nlink.get(ino).copied().unwrap_or(1);
        }
        self.used = self.inodes.values().map(Inode::charge).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fs() -> State {
        State::new(Faults::default())
    }

    fn n(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn data_reads_back_across_pages_and_holes() {
        let mut d = Data::default();
        d.write(4090, b"0123456789");
        assert_eq!(d.len, 4100);
        assert_eq!(d.read(4090, 100), b"0123456789");
        assert_eq!(d.read(0, 4), vec![0; 4]);
        d.truncate(4093);
        d.truncate(5000);
        assert_eq!(d.read(4090, 6), b"012\0\0\0");
    }

    #[test]
    fn power_loss_keeps_exactly_what_was_synced() {
        let mut s = fs();
        let a = s.create(ROOT, n("a"), 0o644, 0, 0).unwrap();
        s.write(a, 0, b"v1").unwrap();
        s.fsync(a).unwrap();
        s.write(a, 0, b"v2").unwrap();
        let b = s.create(ROOT, n("b"), 0o644, 0, 0).unwrap();
        s.write(b, 0, b"never synced").unwrap();
        s.fsync(b).unwrap();
        s.fsync_dir(ROOT).unwrap();
        let c = s.create(ROOT, n("c"), 0o644, 0, 0).unwrap();
        s.fsync(c).unwrap();
        s.rename(ROOT, n("b"), ROOT, n("b2"), false).unwrap();
        s.power_loss();
        assert_eq!(
            s.read(s.lookup(ROOT, n("a")).unwrap(), 0, 10).unwrap(),
            b"v1"
        );
        assert!(
            s.lookup(ROOT, n("b")).is_ok(),
            "rename without dir fsync reverts"
        );
        assert_eq!(s.lookup(ROOT, n("b2")), Err(libc::ENOENT));
        assert_eq!(s.lookup(ROOT, n("c")), Err(libc::ENOENT));
    }

    #[test]
    fn capacity_refuses_growth_and_unlink_gives_space_back() {
        let mut s = State::new(Faults {
            capacity: 3 * PAGE,
            ..Faults::default()
        });
        let a = s.create(ROOT, n("a"), 0o644, 0, 0).unwrap();
        s.fallocate(a, 0, 2 * PAGE, 0).unwrap();
        assert_eq!(s.write(a, 2 * PAGE, &[1; 4097]), Err(libc::ENOSPC));
        assert_eq!(
            s.inode(a).unwrap().size(),
            2 * PAGE,
            "a refused write changes nothing"
        );
        s.write(a, 0, &[1; 100]).unwrap();
        s.unlink(ROOT, n("a")).unwrap();
        assert_eq!(s.used(), 0);
    }
}
