//! KvConfig: the name server's KV configuration (namespace → key → value), what mqadmin
//! `updateKvConfig`, `deleteKvConfig` and `updateOrderConf` (namespace `ORDER_TOPIC_CONFIG`)
//! change. Like RocketMQ's KVConfigManager it is saved after every change, to
//! `<data-dir>/namesrv/kvConfig.json` in RocketMQ's shape (`{"configTable": {…}}`), and
//! loaded at start: an order configuration must survive a name server restart, or ordered
//! producers lose their queue layout.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::broker::config_file::{ConfigFile, ConfigFileError};

/// Namespace → key → value.
type Table = BTreeMap<String, BTreeMap<String, String>>;

/// The saved document.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    /// Namespace → key → value (RocketMQ's `KVConfigSerializeWrapper.configTable`).
    #[serde(rename = "configTable", default)]
    config_table: Table,
}

/// The KV table and where it is saved.
#[derive(Debug)]
pub struct KvConfig {
    /// `kvConfig.json`; `None` when its directory cannot be written (a read-only root file
    /// system without a data volume): the table then lives in memory, as before a save.
    file: Option<ConfigFile>,
    /// The table; held while a change is saved, so saves follow the order of changes.
    table: Mutex<Table>,
}

impl KvConfig {
    /// Loads `dir/kvConfig.json` (an empty table when there is none), creating `dir`. A
    /// directory that cannot be created leaves the table in memory only (with a warning: a
    /// name server must start without a data volume, as RocketMQ's does when it cannot save);
    /// a file that exists but cannot be read or parsed is an error, never silently emptied.
    pub fn load(dir: &Path) -> Result<Self, ConfigFileError> {
        if let Err(e) = std::fs::create_dir_all(dir) {
            tracing::warn!(dir = %dir.display(), error = %e, "the name server's KV configuration cannot be saved there: it is kept in memory only");
            return Ok(Self {
                file: None,
                table: Mutex::default(),
            });
        }
        let file = ConfigFile::new(dir, "kvConfig.json");
        let persisted: Persisted = file.load()?.unwrap_or_default();
        Ok(Self {
            file: Some(file),
            table: Mutex::new(persisted.config_table),
        })
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` in `namespace` and saves; on a failed save the table is left as it was.
    pub fn put(&self, namespace: &str, key: &str, value: &str) -> Result<(), ConfigFileError> {
        let mut table = self.table();
        let mut next = table.clone();
        next.entry(namespace.to_string())
            .or_default()
            .insert(key.to_string(), value.to_string());
        self.save(&mut table, next)
    }

    /// Removes `key` from `namespace` (an empty namespace goes too) and saves.
    pub fn delete(&self, namespace: &str, key: &str) -> Result<(), ConfigFileError> {
        let mut table = self.table();
        let mut next = table.clone();
        if let Some(ns) = next.get_mut(namespace) {
            ns.remove(key);
            if ns.is_empty() {
                next.remove(namespace);
            }
        }
        self.save(&mut table, next)
    }

    fn save(&self, table: &mut Table, next: Table) -> Result<(), ConfigFileError> {
        if *table == next {
            return Ok(());
        }
        if let Some(file) = &self.file {
            file.store(&Persisted {
                config_table: next.clone(),
            })?;
        }
        *table = next;
        Ok(())
    }

    /// The value of `key` in `namespace`.
    pub fn get(&self, namespace: &str, key: &str) -> Option<String> {
        self.table().get(namespace)?.get(key).cloned()
    }

    /// Every key of `namespace`.
    pub fn namespace(&self, namespace: &str) -> BTreeMap<String, String> {
        self.table().get(namespace).cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_survive_a_reload_in_rocketmqs_shape() {
        let dir = tempfile::tempdir().unwrap();
        let kv = KvConfig::load(dir.path()).unwrap();
        kv.put("ORDER_TOPIC_CONFIG", "orders", "broker-a:4;broker-b:4")
            .unwrap();
        kv.put("ns", "k", "v").unwrap();
        kv.delete("ns", "k").unwrap();
        kv.delete("ns", "absent").unwrap();
        let saved: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("kvConfig.json")).unwrap())
                .unwrap();
        assert_eq!(
            saved,
            serde_json::json!({"configTable": {"ORDER_TOPIC_CONFIG": {"orders": "broker-a:4;broker-b:4"}}})
        );
        let again = KvConfig::load(dir.path()).unwrap();
        assert_eq!(
            again.get("ORDER_TOPIC_CONFIG", "orders").as_deref(),
            Some("broker-a:4;broker-b:4")
        );
        assert_eq!(again.get("ns", "k"), None);
        assert_eq!(again.namespace("ORDER_TOPIC_CONFIG").len(), 1);
    }

    #[test]
    fn without_a_writable_directory_the_table_lives_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the directory should be: create_dir_all fails (as on a read-only root).
        let blocked = dir.path().join("blocked");
        std::fs::write(&blocked, b"").unwrap();
        let kv = KvConfig::load(&blocked.join("namesrv")).unwrap();
        kv.put("ns", "k", "v").unwrap();
        assert_eq!(kv.get("ns", "k").as_deref(), Some("v"));
    }

    #[test]
    fn an_unreadable_file_is_an_error_not_an_empty_table() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("kvConfig.json"), b"{not json").unwrap();
        assert!(KvConfig::load(dir.path()).is_err());
    }

    #[test]
    fn a_failed_save_leaves_the_table_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let kv = KvConfig::load(&dir.path().join("namesrv")).unwrap();
        kv.put("ns", "a", "1").unwrap();
        // The directory is gone: the save cannot write its temp file.
        std::fs::remove_dir_all(dir.path().join("namesrv")).unwrap();
        assert!(kv.put("ns", "b", "2").is_err());
        assert_eq!(kv.get("ns", "b"), None);
        assert_eq!(kv.get("ns", "a").as_deref(), Some("1"));
    }
}
