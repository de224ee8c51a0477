//! Where the controller keeps its decisions. The decision logic never touches storage; the
//! service saves the whole state through a [`StateStore`] before it answers anyone, so a
//! restarted controller (or another replica of it) can never hand out an epoch twice. For
//! `conveyor controller` the store is a file written atomically with fsync; the operator's
//! store is the Kubernetes API, with resourceVersion as the compare-and-set.

use std::path::Path;

use super::decide::ControllerState;
use crate::broker::config_file::{ConfigFile, ConfigFileError};

/// Durable controller state.
pub trait StateStore: Send + Sync + 'static {
    /// The last saved state (empty when none was saved yet).
    fn load(&self) -> Result<ControllerState, ConfigFileError>;
    /// Saves `state`; returns only once it is durable.
    fn save(&self, state: &ControllerState) -> Result<(), ConfigFileError>;
}

/// `<dir>/controller.json`, replaced atomically and fsynced.
pub struct FileStateStore {
    /// The file.
    file: ConfigFile,
}

impl FileStateStore {
    /// The store in `dir` (created when missing).
    pub fn new(dir: &Path) -> Result<Self, ConfigFileError> {
        std::fs::create_dir_all(dir).map_err(|source| ConfigFileError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Self {
            file: ConfigFile::new(dir, "controller.json"),
        })
    }
}

impl StateStore for FileStateStore {
    fn load(&self) -> Result<ControllerState, ConfigFileError> {
        Ok(self.file.load()?.unwrap_or_default())
    }

    fn save(&self, state: &ControllerState) -> Result<(), ConfigFileError> {
        self.file.store(state)
    }
}
