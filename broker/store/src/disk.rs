//! Disk usage and the full-disk guard: appends are refused while the filesystem holding the
//! store is over the full watermark, and accepted again as soon as space comes back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};

/// Space of the filesystem holding a path, in bytes, as `df` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// In use.
    pub used: u64,
    /// Still usable by this process (reserved blocks excluded).
    pub available: u64,
}

impl DiskSpace {
    /// `df`'s "Use%": used over used plus available. Counting blocks reserved for others as
    /// used would make a filesystem with a large reservation look nearly full and trigger
    /// forced deletion on an idle disk.
    pub fn usage(&self) -> f64 {
        let usable = self.used as f64 + self.available as f64;
        if usable <= 0.0 {
            return 0.0;
        }
        self.used as f64 / usable
    }
}

/// The space of the filesystem holding `path`.
pub fn disk_space(path: &Path) -> Result<DiskSpace> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| StoreError::InvalidConfig(format!("path {} has a NUL", path.display())))?;
    // SAFETY: `stat` is a plain out-parameter struct, zero is a valid bit pattern for it.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid NUL-terminated path and out-pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut stat) } != 0 {
        return Err(StoreError::Io {
            context: format!("statvfs {}", path.display()),
            source: std::io::Error::last_os_error(),
        });
    }
    let block = stat.f_frsize as u64;
    Ok(DiskSpace {
        used: (stat.f_blocks.saturating_sub(stat.f_bfree) as u64).saturating_mul(block),
        available: (stat.f_bavail as u64).saturating_mul(block),
    })
}

/// Fraction of the filesystem holding `path` that is in use, as `df` reports it.
pub fn disk_usage(path: &Path) -> Result<f64> {
    disk_space(path).map(|s| s.usage())
}

/// True when `usage` reached a watermark; a watermark of 1.0 or more is switched off.
pub(crate) fn over(usage: f64, watermark: f64) -> bool {
    watermark < 1.0 && usage >= watermark
}

/// Refuses appends while the disk is over the full watermark.
pub(crate) struct DiskGuard {
    /// Store root (the filesystem measured).
    root: PathBuf,
    /// Usage from which appends are refused (`diskSpaceWarningLevelRatio`).
    full_ratio: f64,
    /// Appends are being refused.
    full: AtomicBool,
    /// When a refused append last re-measured usage.
    last_check: Mutex<Option<Instant>>,
}

impl DiskGuard {
    /// A guard for the filesystem of `root`.
    pub(crate) fn new(root: &Path, full_ratio: f64) -> Self {
        Self {
            root: root.to_path_buf(),
            full_ratio,
            full: AtomicBool::new(false),
            last_check: Mutex::new(None),
        }
    }

    /// True while appends are refused.
    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Acquire)
    }

    /// Re-reads disk usage and updates the flag; returns the usage.
    pub(crate) fn refresh(&self) -> Result<f64> {
        let usage = disk_usage(&self.root)?;
        let full = over(usage, self.full_ratio);
        let was = self.full.swap(full, Ordering::AcqRel);
        if full && !was {
            tracing::error!(
                usage,
                watermark = self.full_ratio,
                "disk full: refusing writes"
            );
        } else if was && !full {
            tracing::info!(usage, "disk has room again: accepting writes");
        }
        Ok(usage)
    }

    /// `Ok` when an append may go ahead; while refusing, re-measures at most every 100 ms so
    /// that freed space is noticed promptly.
    pub(crate) fn check(&self) -> Result<()> {
        if !self.is_full() {
            return Ok(());
        }
        {
            let mut last = self.last_check.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_millis(100)) {
                *last = Some(Instant::now());
                drop(last);
                self.refresh()?;
            }
        }
        if self.is_full() {
            let usage = disk_usage(&self.root).unwrap_or(1.0);
            return Err(StoreError::DiskFull(format!(
                "disk usage {:.1}% is at or above the {:.1}% full watermark; writes resume when space is freed",
                usage * 100.0,
                self.full_ratio * 100.0
            )));
        }
        Ok(())
    }
}
