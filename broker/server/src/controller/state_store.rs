//! Where the controller keeps its decisions. The decision logic never touches storage; the
//! service saves the whole state through a [`StateStore`] before it answers anyone, so a
//! restarted controller (or another replica of it) can never hand out an epoch twice. For
//! `conveyor controller` the store is a file written atomically with fsync; the operator's
//! store is the Kubernetes API, with resourceVersion as the compare-and-set.

use std::path::Path;

use super::decide::ControllerState;
use crate::broker::config_file::{ConfigFile, ConfigFileError};

/// Why the state could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum StateStoreError {
    /// The state file.
    #[error(transparent)]
    File(#[from] ConfigFileError),
    /// Someone else saved a newer state since this controller loaded or saved it (another
    /// controller replica): nothing was saved; the controller reloads and the caller retries.
    #[error("the controller state was changed by another controller: {0}")]
    Conflict(String),
    /// The store could not be reached or refused the state (the Kubernetes API).
    #[error("the controller state store failed: {0}")]
    Backend(String),
}

/// Durable controller state. `save` is a compare-and-set where two controllers can share the
/// store: it fails with [`StateStoreError::Conflict`] when the state changed since this store
/// last loaded or saved it, so two controllers can never both hand out the same epoch.
pub trait StateStore: Send + Sync + 'static {
    /// The last saved state (empty when none was saved yet).
    fn load(&self) -> Result<ControllerState, StateStoreError>;
    /// Saves `state`; returns only once it is durable.
    fn save(&self, state: &ControllerState) -> Result<(), StateStoreError>;
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
    fn load(&self) -> Result<ControllerState, StateStoreError> {
        Ok(self.file.load()?.unwrap_or_default())
    }

    fn save(&self, state: &ControllerState) -> Result<(), StateStoreError> {
        Ok(self.file.store(state)?)
    }
}
