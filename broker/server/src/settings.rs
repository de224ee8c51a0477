//! Settings: the command line, `CONVEYOR_*` environment variables and an optional TOML file,
//! merged into an [`AppConfig`]. Precedence, highest first: flags, environment, file,
//! built-in defaults (clap resolves flag-over-environment; the file fills what neither set).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use conveyor_store::{FlushMode, StoreConfig};
use serde::Deserialize;

use crate::app::{AppConfig, Role};
use crate::broker::BrokerConfig;

/// Flush mode as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushModeArg {
    Sync,
    Async,
}

impl From<FlushModeArg> for FlushMode {
    fn from(m: FlushModeArg) -> Self {
        match m {
            FlushModeArg::Sync => FlushMode::Sync,
            FlushModeArg::Async => FlushMode::Async,
        }
    }
}

/// Flags shared by `standalone`, `namesrv` and `broker`.
#[derive(Debug, Clone, Default, Args)]
pub struct ServerArgs {
    /// TOML configuration file.
    #[arg(long, env = "CONVEYOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Store directory (standalone default: ./conveyor-data).
    #[arg(long, env = "CONVEYOR_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// SYNC (ack after fsync, group commit) or ASYNC (background flush) durability.
    #[arg(long, env = "CONVEYOR_FLUSH_MODE", value_enum)]
    pub flush_mode: Option<FlushModeArg>,
    /// Name servers the broker registers with, `host:port;host:port`.
    #[arg(long, env = "CONVEYOR_NAMESRV_ADDR")]
    pub namesrv_addr: Option<String>,
    /// Listen address of this role's main server (broker in standalone; default port 10911,
    /// 9876 for `namesrv`).
    #[arg(long, env = "CONVEYOR_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Name server listen address in standalone mode (default 0.0.0.0:9876).
    #[arg(long, env = "CONVEYOR_NAMESRV_LISTEN")]
    pub namesrv_listen: Option<SocketAddr>,
    /// HTTP probes and metrics (default 0.0.0.0:8080; `off` disables).
    #[arg(long, env = "CONVEYOR_HTTP_LISTEN")]
    pub http_listen: Option<String>,
    /// Address clients use to reach the broker (default: the listen address, 127.0.0.1 when
    /// listening on all interfaces).
    #[arg(long, env = "CONVEYOR_ADVERTISED_ADDR")]
    pub advertised_addr: Option<String>,
    /// Cluster name.
    #[arg(long, env = "CONVEYOR_CLUSTER_NAME")]
    pub cluster_name: Option<String>,
    /// Broker group name.
    #[arg(long, env = "CONVEYOR_BROKER_NAME")]
    pub broker_name: Option<String>,
    /// Broker id (0 = master).
    #[arg(long, env = "CONVEYOR_BROKER_ID")]
    pub broker_id: Option<i64>,
    /// Create unknown topics on first send.
    #[arg(long, env = "CONVEYOR_AUTO_CREATE_TOPIC")]
    pub auto_create_topic: Option<bool>,
    /// Delay levels, e.g. "1s 5s 10s 30s 1m 2m".
    #[arg(long, env = "CONVEYOR_DELAY_LEVELS")]
    pub delay_levels: Option<String>,
    /// Age (ms) after which an undecided transactional message is checked back.
    #[arg(long, env = "CONVEYOR_TRANSACTION_TIMEOUT_MS")]
    pub transaction_timeout_ms: Option<u64>,
    /// Time (ms) between two checks of the same undecided transactional message.
    #[arg(long, env = "CONVEYOR_TRANSACTION_CHECK_INTERVAL_MS")]
    pub transaction_check_interval_ms: Option<u64>,
}

/// The TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub namesrv: NamesrvSection,
    pub broker: BrokerSection,
    pub store: StoreSection,
    pub http: HttpSection,
}

/// `[namesrv]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct NamesrvSection {
    pub listen: Option<SocketAddr>,
}

/// `[broker]`: `listen` plus every [`BrokerConfig`] field.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct BrokerSection {
    pub listen: Option<SocketAddr>,
    #[serde(flatten)]
    pub config: BrokerConfig,
}

/// `[store]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct StoreSection {
    pub data_dir: Option<PathBuf>,
    pub flush_mode: Option<FlushModeArg>,
    pub segment_size: Option<u64>,
    pub max_message_size: Option<usize>,
    pub retention_hours: Option<u64>,
    pub disk_clean_ratio: Option<f64>,
    pub disk_force_clean_ratio: Option<f64>,
    pub disk_full_ratio: Option<f64>,
    pub sync_flush_timeout_ms: Option<u64>,
}

/// `[http]`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpSection {
    pub listen: Option<String>,
}

/// Why settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration file {path}: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("invalid HTTP listen address {0:?} (expected ip:port or \"off\")")]
    Http(String),
}

/// Reads and parses a TOML file.
pub fn load_file(path: &Path) -> Result<FileConfig, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| SettingsError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_http(s: &str) -> Result<Option<SocketAddr>, SettingsError> {
    if s.eq_ignore_ascii_case("off") || s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|_| SettingsError::Http(s.to_string()))
}

/// Builds the configuration of `role` from flags/environment (`args`) and the file.
pub fn build(role: Role, args: &ServerArgs) -> Result<AppConfig, SettingsError> {
    let file = match &args.config {
        Some(path) => load_file(path)?,
        None => FileConfig::default(),
    };
    let mut broker = file.broker.config;
    let standalone = role == Role::Standalone;
    if standalone && file.broker.listen.is_none() {
        // The embedded name server is the default target in standalone mode.
        broker.namesrv_addrs.clear();
    }
    if let Some(v) = &args.namesrv_addr {
        broker.namesrv_addrs = v
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect();
    }
    if let Some(v) = &args.advertised_addr {
        broker.advertised_addr = v.clone();
    } else if broker.advertised_addr == BrokerConfig::default().advertised_addr {
        broker.advertised_addr.clear(); // derive from the listen address
    }
    if let Some(v) = &args.cluster_name {
        broker.cluster_name = v.clone();
    }
    if let Some(v) = &args.broker_name {
        broker.broker_name = v.clone();
    }
    if let Some(v) = args.broker_id {
        broker.broker_id = v;
    }
    if let Some(v) = args.auto_create_topic {
        broker.auto_create_topic = v;
    }
    if let Some(v) = &args.delay_levels {
        broker.delay_levels = v.clone();
    }
    if let Some(v) = args.transaction_timeout_ms {
        broker.transaction_timeout_ms = v;
    }
    if let Some(v) = args.transaction_check_interval_ms {
        broker.transaction_check_interval_ms = v;
    }
    let data_dir = args
        .data_dir
        .clone()
        .or(file.store.data_dir.clone())
        .unwrap_or_else(|| PathBuf::from("./conveyor-data"));
    let mut store = StoreConfig::new(data_dir);
    if let Some(m) = args.flush_mode.or(file.store.flush_mode) {
        store.flush_mode = m.into();
    }
    let s = &file.store;
    if let Some(v) = s.segment_size {
        store.commit_log_segment_size = v;
    }
    if let Some(v) = s.max_message_size {
        store.max_message_size = v;
    }
    if let Some(v) = s.retention_hours {
        store.retention = Duration::from_secs(v * 3600);
    }
    if let Some(v) = s.disk_clean_ratio {
        store.disk_clean_ratio = v;
    }
    if let Some(v) = s.disk_force_clean_ratio {
        store.disk_force_clean_ratio = v;
    }
    if let Some(v) = s.disk_full_ratio {
        store.disk_full_ratio = v;
    }
    if let Some(v) = s.sync_flush_timeout_ms {
        store.sync_flush_timeout = Duration::from_millis(v);
    }
    let default_ns: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 9876));
    let default_broker: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 10911));
    let (namesrv_listen, broker_listen) = match role {
        Role::NameServer => (
            args.listen.or(file.namesrv.listen).unwrap_or(default_ns),
            default_broker,
        ),
        Role::Broker => (
            default_ns,
            args.listen.or(file.broker.listen).unwrap_or(default_broker),
        ),
        Role::Standalone => (
            args.namesrv_listen
                .or(file.namesrv.listen)
                .unwrap_or(default_ns),
            args.listen.or(file.broker.listen).unwrap_or(default_broker),
        ),
    };
    let http_listen = match args.http_listen.as_deref().or(file.http.listen.as_deref()) {
        Some(s) => parse_http(s)?,
        None => Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
    };
    Ok(AppConfig {
        role,
        namesrv_listen,
        broker_listen,
        http_listen,
        broker,
        store,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_and_defaults_apply() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            r#"
[store]
data-dir = "/from/file"
flush-mode = "sync"
[broker]
listen = "0.0.0.0:20911"
broker-name = "b-file"
[http]
listen = "off"
"#,
        )
        .unwrap();
        let args = ServerArgs {
            config: Some(path),
            data_dir: Some("/from/flag".into()),
            broker_name: Some("b-flag".into()),
            ..Default::default()
        };
        let cfg = build(Role::Broker, &args).unwrap();
        assert_eq!(cfg.store.root, PathBuf::from("/from/flag"));
        assert_eq!(cfg.store.flush_mode, FlushMode::Sync);
        assert_eq!(cfg.broker_listen.port(), 20911);
        assert_eq!(cfg.broker.broker_name, "b-flag");
        assert_eq!(cfg.http_listen, None);

        let cfg = build(Role::Standalone, &ServerArgs::default()).unwrap();
        assert_eq!(cfg.store.root, PathBuf::from("./conveyor-data"));
        assert_eq!(cfg.store.flush_mode, FlushMode::Async);
        assert!(
            cfg.broker.namesrv_addrs.is_empty(),
            "standalone targets its own name server"
        );
        assert_eq!(
            (cfg.namesrv_listen.port(), cfg.broker_listen.port()),
            (9876, 10911)
        );
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[store]\nflush-mode = \"sometimes\"\n").unwrap();
        let args = ServerArgs {
            config: Some(path),
            ..Default::default()
        };
        let err = build(Role::Broker, &args).unwrap_err().to_string();
        assert!(err.contains("invalid configuration file"), "{err}");
    }
}
