//! ConfigFile: a JSON document under the store's `config/` directory (topics, subscription
//! groups, consumer offsets), read at start and rewritten atomically (temp file, fsync,
//! rename, fsync of the directory) so a crash or a power loss leaves either the old or the new
//! version, never half of one. Saves of one document are serialised and each writes its own
//! temp file, so concurrent saves cannot interleave their bytes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;

/// A config document could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// Reading or writing the file failed.
    #[error("{path}: {source}")]
    Io {
        /// The document.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the JSON expected (or the value could not be encoded).
    #[error("{path} is not valid: {source}")]
    Json {
        /// The document.
        path: PathBuf,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// Why a progress body (delay or timer progress, served to slaves or taken from a master)
/// could not be produced or taken.
#[derive(Debug, thiserror::Error)]
pub enum SyncBodyError {
    /// Not the JSON expected.
    #[error("bad progress body: {0}")]
    Json(#[from] conveyor_protocol::json::JsonError),
    /// Reading or saving it failed.
    #[error(transparent)]
    File(#[from] ConfigFileError),
}

/// Where a config document lives.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The document's path.
    path: PathBuf,
    /// Held while a save writes and renames (shared by clones).
    saving: Arc<Mutex<()>>,
}

/// Makes every temp file name of this process unique.
static TEMP_SEQ: AtomicU64 = AtomicU64::new(0);

impl ConfigFile {
    /// `dir/name`.
    pub fn new(dir: &Path, name: &str) -> Self {
        Self {
            path: dir.join(name),
            saving: Arc::new(Mutex::new(())),
        }
    }

    /// Loads the document; a missing file yields `None`, an unreadable one an error.
    pub fn load<T: DeserializeOwned>(&self) -> Result<Option<T>, ConfigFileError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| ConfigFileError::Json {
                        path: self.path.clone(),
                        source,
                    })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(self.io(source)),
        }
    }

    fn io(&self, source: std::io::Error) -> ConfigFileError {
        ConfigFileError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes the document durably.
    pub fn store<T: Serialize>(&self, value: &T) -> Result<(), ConfigFileError> {
        use std::io::Write;
        let bytes = serde_json::to_vec_pretty(value).map_err(|source| ConfigFileError::Json {
            path: self.path.clone(),
            source,
        })?;
        let _saving = self.saving.lock().unwrap_or_else(|e| e.into_inner());
        let seq = TEMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .path
            .with_extension(format!("{}.{seq}.tmp", std::process::id()));
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let written = std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            // The rename is durable only once the directory is.
            .and_then(|_| std::fs::File::open(dir).and_then(|d| d.sync_all()));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written.map_err(|e| self.io(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 9, defect 6: concurrent saves of one document shared one temp file, so their bytes
    /// could interleave and a reader could find a document that is not valid JSON.
    #[test]
    fn concurrent_saves_always_leave_a_whole_document() {
        let dir = tempfile::tempdir().unwrap();
        let file = ConfigFile::new(dir.path(), "doc.json");
        file.store(&vec![0u64; 10]).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (file, stop) = (file.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut reads = 0;
                while !stop.load(Ordering::Relaxed) {
                    let doc: Vec<u64> = file.load().unwrap().expect("document exists");
                    assert!(doc.iter().all(|v| *v == doc[0]), "mixed document");
                    reads += 1;
                }
                reads
            })
        };
        let writers: Vec<_> = (0..6u64)
            .map(|w| {
                let file = file.clone();
                std::thread::spawn(move || {
                    for i in 0..40u64 {
                        let len = 1000 + ((w * 7 + i * 13) % 5000) as usize;
                        file.store(&vec![w * 1000 + i; len]).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name() != "doc.json")
            .collect();
        assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
    }
}
