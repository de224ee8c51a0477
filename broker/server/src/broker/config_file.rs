//! ConfigFile: a JSON document under the store's `config/` directory (topics, subscription
//! groups, consumer offsets), read at start and rewritten atomically (temp file, fsync,
//! rename) so a crash leaves either the old or the new version, never half of one.

use std::path::{Path, PathBuf};

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

/// Where a config document lives.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// The document's path.
    path: PathBuf,
}

impl ConfigFile {
    /// `dir/name`.
    pub fn new(dir: &Path, name: &str) -> Self {
        Self {
            path: dir.join(name),
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
        let tmp = self.path.with_extension("tmp");
        std::fs::File::create(&tmp)
            .and_then(|mut f| f.write_all(&bytes).and_then(|_| f.sync_all()))
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|e| self.io(e))
    }
}
