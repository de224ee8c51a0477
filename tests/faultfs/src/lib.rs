//! A FUSE filesystem for power-loss tests.
//!
//! Conveyor promises that under SYNC flush no acknowledged message is lost. Killing the broker
//! with SIGKILL cannot test that promise: the page cache survives a process crash, so data that
//! was written but never fsynced still reads back. A power loss is what throws unsynced data
//! away, and this crate makes one on demand.
//!
//! [`FaultFs::mount`] serves an in-memory filesystem over an empty directory from a background
//! thread of the test process. Every file has a *current* content (what reads see) and a
//! *durable* one; `fsync`/`fdatasync` of the file (and `msync(MS_SYNC)` of a shared mapping,
//! which ends in one) makes its data and size durable. Directory entries — create, mkdir,
//! rename, unlink, rmdir — become durable only when their directory is fsynced (both
//! directories for a rename): the strictest reading of POSIX, which real filesystems are
//! allowed to implement. [`FaultFs::plug`] pulls the power: the mount fails every further
//! request with EIO (so the kernel's later writeback of dirty pages cannot bring lost data
//! back), the state reverts to its durable image, the mount is detached and the same
//! directory is mounted afresh on the reverted state.
//!
//! Faults ([`Faults`]) are switched at run time through a [`Handle`]: a capacity (ENOSPC),
//! failing fsyncs, writes or reads (EIO, for all files or those whose path contains a
//! substring) and an unsupported fallocate (EOPNOTSUPP).
//!
//! What it does not model: torn or reordered sector writes inside one write request, partial
//! loss of an fsync that returned success, or corruption of durable data. Data either was
//! fsynced (and survives whole) or was not (and is gone).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod faults;
mod fs;
mod state;

use std::path::{Path, PathBuf};

pub use faults::{Faults, Target, DEFAULT_CAPACITY};

use fs::{lock, Mounted, Shared};
use state::State;

/// Why mounting or re-mounting failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The FUSE mount (mount(2), or fusermount3 when mount(2) is refused) failed.
    #[error("mount faultfs on {path}: {source}")]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// What the kernel or fusermount3 said.
        source: std::io::Error,
    },
    /// Detaching the mount whose power was pulled failed.
    #[error("detach faultfs from {path}: {source}")]
    Detach {
        /// The mount point.
        path: PathBuf,
        /// What umount2 said.
        source: nix::Error,
    },
}

/// A cloneable handle on a mounted filesystem's faults and figures, usable from any thread
/// while the [`FaultFs`] itself stays with the test.
#[derive(Clone)]
pub struct Handle {
    shared: Shared,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("faults", &self.faults())
            .finish()
    }
}

impl Handle {
    /// The faults in force.
    pub fn faults(&self) -> Faults {
        lock(&self.shared).faults.clone()
    }

    /// Replaces every fault setting at once.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.shared).faults = faults;
    }

    /// Sets the capacity in bytes (ENOSPC beyond it; statfs reports it).
    pub fn set_capacity(&self, bytes: u64) {
        lock(&self.shared).faults.capacity = bytes;
    }

    /// Makes fsync of matching files and directories fail with EIO (`None`: stop).
    pub fn fail_fsync(&self, target: Option<Target>) {
        lock(&self.shared).faults.fail_fsync = target;
    }

    /// Makes writes to matching files fail with EIO (`None`: stop).
    pub fn fail_writes(&self, target: Option<Target>) {
        lock(&self.shared).faults.fail_writes = target;
    }

    /// Makes reads of matching files fail with EIO (`None`: stop).
    pub fn fail_reads(&self, target: Option<Target>) {
        lock(&self.shared).faults.fail_reads = target;
    }

    /// Makes fallocate fail with EOPNOTSUPP (`false`: supported again).
    pub fn set_fallocate_unsupported(&self, unsupported: bool) {
        lock(&self.shared).faults.fallocate_unsupported = unsupported;
    }

    /// Bytes in use (what statfs subtracts from the capacity).
    pub fn used(&self) -> u64 {
        lock(&self.shared).used()
    }

    /// How many times the power was pulled.
    pub fn plugs(&self) -> u64 {
        lock(&self.shared).epoch
    }
}

/// The mounted filesystem. Dropping it unmounts (lazily: a process still using it gets EIO).
pub struct FaultFs {
    path: PathBuf,
    handle: Handle,
    session: Option<fuser::BackgroundSession>,
}

impl std::fmt::Debug for FaultFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultFs").field("path", &self.path).finish()
    }
}

/// True when this machine can mount FUSE filesystems at all (the device exists).
pub fn fuse_available() -> bool {
    Path::new("/dev/fuse").exists()
}

fn spawn(path: &Path, shared: &Shared, epoch: u64) -> Result<fuser::BackgroundSession, Error> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("faultfs".into()),
        fuser::MountOption::Subtype("faultfs".into()),
        fuser::MountOption::RW,
    ];
    let fs = Mounted {
        shared: shared.clone(),
        epoch,
    };
    fuser::spawn_mount(fs, path, &config).map_err(|source| Error::Mount {
        path: path.to_path_buf(),
        source,
    })
}

impl FaultFs {
    /// Mounts an empty filesystem with `faults` in force on `path` (an existing, empty
    /// directory) and returns once it serves requests.
    pub fn mount(path: impl AsRef<Path>, faults: Faults) -> Result<Self, Error> {
        let path = path
            .as_ref()
            .canonicalize()
            .map_err(|source| Error::Mount {
                path: path.as_ref().to_path_buf(),
                source,
            })?;
        let shared: Shared = std::sync::Arc::new(std::sync::Mutex::new(State::new(faults)));
        let session = spawn(&path, &shared, 0)?;
        Ok(Self {
            path,
            handle: Handle { shared },
            session: Some(session),
        })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A handle to change faults and read figures from other threads.
    pub fn handle(&self) -> Handle {
        self.handle.clone()
    }

    /// Pulls the power. From this call on, every request on the current mount fails with
    /// EIO; the state reverts to its durable image (namespace and contents); the mount is
    /// lazily detached, which leaves the kernel's page cache of it behind; and the same path
    /// is mounted again on the reverted state. Returns once the new mount serves. Processes
    /// still holding files of the old mount keep getting EIO from them.
    pub fn plug(&mut self) -> Result<(), Error> {
        let epoch = {
            let mut s = lock(&self.handle.shared);
            // The epoch flips under the same lock every request takes, so no request of the
            // old mount can change the state after this point.
            s.epoch += 1;
            s.power_loss();
            s.epoch
        };
        self.detach()?;
        self.session = Some(spawn(&self.path, &self.handle.shared, epoch)?);
        Ok(())
    }

    /// Detaches the current mount (MNT_DETACH: it may still be in use by a killed process's
    /// mappings) and drops its session. The session's own unmount on drop then finds the
    /// path no longer mounted; it must run before a new mount appears on the path, or it
    /// would unmount that one.
    fn detach(&mut self) -> Result<(), Error> {
        if let Some(session) = self.session.take() {
            nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH).map_err(
                |source| Error::Detach {
                    path: self.path.clone(),
                    source,
                },
            )?;
            drop(session);
        }
        Ok(())
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        // Fail whatever still reaches the mount rather than let it block the unmount.
        lock(&self.handle.shared).epoch += 1;
        let _ = self.detach();
    }
}
