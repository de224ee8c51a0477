//! Settings: the command line, `CONVEYOR_*` environment variables and an optional TOML file,
//! merged into an [`AppConfig`]. Precedence, highest first: flags, environment, file,
//! built-in defaults (clap resolves flag-over-environment; the file fills what neither set).
//!
//! The file's model is `conveyor-settings` ([`Settings`], one struct per section, unknown keys
//! refused); the flags become one more layer of the same model ([`ServerArgs::layer`]), layers
//! combine with [`Settings::or`], and [`app_config`] is the one conversion into the runtime
//! configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use conveyor_settings::{
    AclSection, BrokerRole, BrokerSection, FlushMode, GrpcSection, HttpSection, NamesrvSection,
    ParseError, ReplicationSection, Settings, StoreSection, TlsSection,
};
use conveyor_store::StoreConfig;

use crate::app::{AppConfig, Role};
use crate::broker::zone::ZoneSource;
use crate::broker::{AutoCreateLimits, BrokerConfig};
use crate::ha::ReplicationConfig;
use crate::remoting::ServeLimits;

/// Flush mode as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FlushModeArg {
    /// SYNC_FLUSH: acknowledge after fsync (group commit).
    Sync,
    /// ASYNC_FLUSH: acknowledge after the write; a background thread flushes.
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

/// Broker role as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BrokerRoleArg {
    /// A master that answers SEND_OK once its in-sync replicas hold the message.
    SyncMaster,
    /// A master that does not wait for slaves.
    AsyncMaster,
    /// A replica of its group's master; refuses writes.
    Slave,
}

impl From<BrokerRoleArg> for BrokerRole {
    fn from(r: BrokerRoleArg) -> Self {
        match r {
            BrokerRoleArg::SyncMaster => BrokerRole::SyncMaster,
            BrokerRoleArg::AsyncMaster => BrokerRole::AsyncMaster,
            BrokerRoleArg::Slave => BrokerRole::Slave,
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
    /// Label /metrics series with topic and consumer-group names (default true; false sums
    /// traffic over them and leaves out the per-group families).
    #[arg(long, env = "CONVEYOR_HTTP_RESOURCE_LABELS")]
    pub http_resource_labels: Option<bool>,
    /// The RocketMQ 5.x gRPC endpoint for the 5.x SDKs (default 0.0.0.0:8081; `off`
    /// disables). Served by brokers (and `standalone`).
    #[arg(long, env = "CONVEYOR_GRPC_LISTEN")]
    pub grpc_listen: Option<String>,
    /// TLS on the client ports (name server, broker, gRPC): permissive (TLS and plaintext,
    /// the default), enforcing (TLS only) or off.
    #[arg(long, env = "CONVEYOR_TLS_MODE")]
    pub tls_mode: Option<String>,
    /// PEM certificate chain for TLS, re-read when it changes (default: a self-signed
    /// certificate generated at start).
    #[arg(long, env = "CONVEYOR_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file`.
    #[arg(long, env = "CONVEYOR_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Check every request against the ACL users file (RocketMQ's `aclEnable`).
    #[arg(long, env = "CONVEYOR_ACL_ENABLED")]
    pub acl_enabled: Option<bool>,
    /// The ACL users file (RocketMQ's `plain_acl.yml` format), re-read when it changes.
    #[arg(long, env = "CONVEYOR_ACL_USERS_FILE")]
    pub acl_users_file: Option<PathBuf>,
    /// The file holding the secret the cluster's processes sign their requests to each other
    /// with.
    #[arg(long, env = "CONVEYOR_ACL_CLUSTER_SECRET_FILE")]
    pub acl_cluster_secret_file: Option<PathBuf>,
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
    /// SYNC_MASTER, ASYNC_MASTER or SLAVE (default: ASYNC_MASTER for id 0, SLAVE otherwise).
    #[arg(long, env = "CONVEYOR_BROKER_ROLE", value_enum)]
    pub broker_role: Option<BrokerRoleArg>,
    /// Listen address of the replication stream (default: the broker's port plus one).
    #[arg(long, env = "CONVEYOR_REPLICATION_LISTEN")]
    pub replication_listen: Option<SocketAddr>,
    /// A slave follows this master replication address instead of the name server's answer.
    #[arg(long, env = "CONVEYOR_MASTER_ADDRESS")]
    pub master_address: Option<String>,
    /// Controllers that decide the broker's role, `host:port;host:port` (controller mode).
    #[arg(long, env = "CONVEYOR_CONTROLLER_ADDR")]
    pub controller_addr: Option<String>,
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
    /// The zone the broker runs in (registered with the name servers, for same-zone reads).
    #[arg(long, env = "CONVEYOR_ZONE")]
    pub zone: Option<String>,
    /// A file holding the zone, re-read while the broker runs (wins over --zone).
    #[arg(long, env = "CONVEYOR_ZONE_FILE")]
    pub zone_file: Option<PathBuf>,
}

/// Why settings could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid TOML or does not fit the model; `source` names the section, the
    /// key and the line.
    #[error("invalid configuration file {path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, with section, key and line.
        #[source]
        source: ParseError,
    },
    /// The HTTP listen setting is neither `ip:port` nor `off`.
    #[error("invalid HTTP listen address {0:?} (expected ip:port or \"off\")")]
    Http(String),
    /// `broker-role` and `broker-id` disagree (RocketMQ: a master has id 0, a slave above 0).
    #[error("broker-role {role} needs {expected}, but broker-id is {id}")]
    RoleId {
        /// The role.
        role: &'static str,
        /// What the id must be.
        expected: &'static str,
        /// The id set.
        id: i64,
    },
    /// A setting that is not one of its allowed values, or that needs another one.
    #[error("{key}: {reason}")]
    Invalid {
        /// The key, with its section.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A number outside its range.
    #[error("{key} = {value} is out of range: {reason}")]
    OutOfRange {
        /// The key, with its section.
        key: &'static str,
        /// The value given.
        value: u64,
        /// The range.
        reason: &'static str,
    },
}

/// Reads and parses a settings file.
pub fn load_file(path: &Path) -> Result<Settings, SettingsError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    Settings::from_toml(&text).map_err(|source| SettingsError::Parse {
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

impl ServerArgs {
    /// The flags and environment variables of `role` as a settings layer. `--listen` sets the
    /// listen address of the role's main server: `[namesrv]` for `namesrv`, `[broker]`
    /// otherwise; `--namesrv-listen` only applies to `standalone`.
    pub fn layer(&self, role: Role) -> Settings {
        let (namesrv_listen, broker_listen) = match role {
            Role::NameServer | Role::Controller => (self.listen, None),
            Role::Broker => (None, self.listen),
            Role::Standalone => (self.namesrv_listen, self.listen),
        };
        Settings {
            namesrv: NamesrvSection {
                listen: namesrv_listen,
            },
            broker: BrokerSection {
                listen: broker_listen,
                cluster_name: self.cluster_name.clone(),
                broker_name: self.broker_name.clone(),
                broker_id: self.broker_id,
                broker_role: self.broker_role.map(Into::into),
                namesrv_addrs: self.namesrv_addr.as_deref().map(split_addrs),
                advertised_addr: self.advertised_addr.clone(),
                auto_create_topic: self.auto_create_topic,
                delay_levels: self.delay_levels.clone(),
                transaction_timeout_ms: self.transaction_timeout_ms,
                transaction_check_interval_ms: self.transaction_check_interval_ms,
                zone: self.zone.clone(),
                zone_file: self.zone_file.clone(),
                ..Default::default()
            },
            store: StoreSection {
                data_dir: self.data_dir.clone(),
                flush_mode: self.flush_mode.map(Into::into),
                ..Default::default()
            },
            http: HttpSection {
                listen: self.http_listen.clone(),
                resource_labels: self.http_resource_labels,
            },
            grpc: GrpcSection {
                listen: self.grpc_listen.clone(),
                ..Default::default()
            },
            tls: TlsSection {
                mode: self.tls_mode.clone(),
                cert_file: self.tls_cert_file.clone(),
                key_file: self.tls_key_file.clone(),
            },
            acl: AclSection {
                enabled: self.acl_enabled,
                users_file: self.acl_users_file.clone(),
                cluster_secret_file: self.acl_cluster_secret_file.clone(),
                ..Default::default()
            },
            replication: ReplicationSection {
                listen: self.replication_listen,
                master_address: self.master_address.clone(),
                controller_addrs: self.controller_addr.as_deref().map(split_addrs),
                ..Default::default()
            },
            controller: Default::default(),
        }
    }
}

/// TLS from `[tls]`: the certificate and key files go together.
fn tls_config(tls: TlsSection) -> Result<crate::tls::TlsConfig, SettingsError> {
    use crate::tls::{CertSource, TlsConfig};
    let mode = match tls.mode {
        Some(m) => m.parse().map_err(|reason| SettingsError::Invalid {
            key: "tls.mode",
            reason,
        })?,
        None => Default::default(),
    };
    let cert = match (tls.cert_file, tls.key_file) {
        (None, None) => CertSource::SelfSigned,
        (Some(cert), Some(key)) => CertSource::Files { cert, key },
        (Some(_), None) | (None, Some(_)) => {
            return Err(SettingsError::Invalid {
                key: "tls.cert-file",
                reason: "cert-file and key-file are given together".into(),
            })
        }
    };
    Ok(TlsConfig { mode, cert })
}

/// ACL from `[acl]`: off unless enabled; when enabled both files are needed.
fn acl_config(acl: AclSection) -> Result<Option<crate::acl::AclConfig>, SettingsError> {
    if !acl.enabled.unwrap_or(false) {
        return Ok(None);
    }
    let missing = |key| SettingsError::Invalid {
        key,
        reason: "ACL is enabled: the users file and the cluster secret file are needed".into(),
    };
    let reload_interval = match acl.reload_interval_ms {
        Some(ms @ 100..=600_000) => Duration::from_millis(ms),
        Some(ms) => {
            return Err(SettingsError::OutOfRange {
                key: "acl.reload-interval-ms",
                value: ms,
                reason: "must be 100 … 600000",
            })
        }
        None => Duration::from_secs(5),
    };
    Ok(Some(crate::acl::AclConfig {
        users_file: acl.users_file.ok_or_else(|| missing("acl.users-file"))?,
        cluster_secret_file: acl
            .cluster_secret_file
            .ok_or_else(|| missing("acl.cluster-secret-file"))?,
        reload_interval,
    }))
}

/// `host:port;host:port` (RocketMQ's `namesrvAddr`) as a list.
fn split_addrs(v: &str) -> Vec<String> {
    v.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Builds the configuration of `role` from flags/environment (`args`) and the file they name:
/// flags and environment over the file, the file over the defaults.
pub fn build(role: Role, args: &ServerArgs) -> Result<AppConfig, SettingsError> {
    let file = match &args.config {
        Some(path) => load_file(path)?,
        None => Settings::default(),
    };
    app_config(role, args.layer(role).or(file))
}

/// The runtime configuration of `role` from merged settings; what no layer set takes its
/// default (`BrokerConfig::default`, `StoreConfig::new`, the ports 9876/10911/8080).
pub fn app_config(role: Role, settings: Settings) -> Result<AppConfig, SettingsError> {
    let Settings {
        namesrv,
        broker: b,
        store: s,
        http,
        grpc,
        tls,
        acl,
        replication: r,
        controller: c,
    } = settings;
    let d = BrokerConfig::default();
    let broker = BrokerConfig {
        cluster_name: b.cluster_name.unwrap_or(d.cluster_name),
        broker_name: b.broker_name.unwrap_or(d.broker_name),
        broker_id: b.broker_id.unwrap_or(d.broker_id),
        // Empty: derive from the listen address.
        advertised_addr: b.advertised_addr.unwrap_or_default(),
        // In standalone mode, empty means the embedded name server.
        namesrv_addrs: b.namesrv_addrs.unwrap_or_else(|| match role {
            Role::Standalone => Vec::new(),
            Role::Broker | Role::NameServer | Role::Controller => d.namesrv_addrs,
        }),
        auto_create_topic: b.auto_create_topic.unwrap_or(d.auto_create_topic),
        auto_create_subscription_group: b
            .auto_create_subscription_group
            .unwrap_or(d.auto_create_subscription_group),
        default_topic_queue_nums: b
            .default_topic_queue_nums
            .unwrap_or(d.default_topic_queue_nums),
        auto_create: AutoCreateLimits {
            max_topics: b.auto_create_max_topics.unwrap_or(d.auto_create.max_topics),
            max_groups: b.auto_create_max_groups.unwrap_or(d.auto_create.max_groups),
            burst: b.auto_create_burst.unwrap_or(d.auto_create.burst),
            per_second: b.auto_create_per_second.unwrap_or(d.auto_create.per_second),
        },
        register_interval_ms: b.register_interval_ms.unwrap_or(d.register_interval_ms),
        offset_persist_interval_ms: b
            .offset_persist_interval_ms
            .unwrap_or(d.offset_persist_interval_ms),
        send_queue_wait_ms: b.send_queue_wait_ms.unwrap_or(d.send_queue_wait_ms),
        max_sends_in_flight: b.max_sends_in_flight.unwrap_or(d.max_sends_in_flight),
        delay_levels: b.delay_levels.unwrap_or(d.delay_levels),
        timer_max_delay_ms: b.timer_max_delay_ms.unwrap_or(d.timer_max_delay_ms),
        transaction_timeout_ms: b.transaction_timeout_ms.unwrap_or(d.transaction_timeout_ms),
        transaction_check_interval_ms: b
            .transaction_check_interval_ms
            .unwrap_or(d.transaction_check_interval_ms),
        transaction_check_max: b.transaction_check_max.unwrap_or(d.transaction_check_max),
        slave_read_enable: b.slave_read_enable.unwrap_or(d.slave_read_enable),
        metrics_per_queue: b.metrics_per_queue.unwrap_or(d.metrics_per_queue),
        access_message_in_memory_max_ratio: b
            .access_message_in_memory_max_ratio
            .unwrap_or(d.access_message_in_memory_max_ratio)
            .min(100),
        zone: ZoneSource {
            fixed: b.zone,
            file: b.zone_file,
        },
        replication: ReplicationConfig::default(),
    };
    let broker = BrokerConfig {
        replication: replication_config(b.broker_role, broker.broker_id, &r)?,
        ..broker
    };
    let d = StoreConfig::new(
        s.data_dir
            .unwrap_or_else(|| PathBuf::from("./conveyor-data")),
    );
    let store = StoreConfig {
        flush_mode: s.flush_mode.map(store_flush_mode).unwrap_or(d.flush_mode),
        commit_log_segment_size: s.segment_size.unwrap_or(d.commit_log_segment_size),
        max_message_size: s.max_message_size.unwrap_or(d.max_message_size),
        retention: s
            .retention_hours
            .map(|h| Duration::from_secs(h * 3600))
            .unwrap_or(d.retention),
        disk_clean_ratio: s.disk_clean_ratio.unwrap_or(d.disk_clean_ratio),
        disk_force_clean_ratio: s.disk_force_clean_ratio.unwrap_or(d.disk_force_clean_ratio),
        disk_full_ratio: s.disk_full_ratio.unwrap_or(d.disk_full_ratio),
        sync_flush_timeout: s
            .sync_flush_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(d.sync_flush_timeout),
        flush_interval: s
            .flush_interval_ms
            .map(Duration::from_millis)
            .unwrap_or(d.flush_interval),
        flush_thorough_interval: s
            .flush_thorough_interval_ms
            .map(Duration::from_millis)
            .unwrap_or(d.flush_thorough_interval),
        ..d
    };
    let default_ns = SocketAddr::from(([0, 0, 0, 0], 9876));
    let default_broker = SocketAddr::from(([0, 0, 0, 0], 10911));
    let default_controller = SocketAddr::from(([0, 0, 0, 0], 9878));
    let http_listen = match http.listen.as_deref() {
        Some(s) => parse_http(s)?,
        None => Some(SocketAddr::from(([0, 0, 0, 0], 8080))),
    };
    let grpc_listen = match grpc.listen.as_deref() {
        Some(s) => parse_http(s)?,
        None => Some(SocketAddr::from(([0, 0, 0, 0], crate::grpc::GRPC_PORT))),
    };
    let dg = crate::grpc::GrpcConfig::default();
    let grpc_config = crate::grpc::GrpcConfig {
        push_invisible_ms: match grpc.push_invisible_ms {
            Some(ms @ 1_000..=43_200_000) => ms as i64,
            Some(ms) => {
                return Err(SettingsError::OutOfRange {
                    key: "grpc.push-invisible-ms",
                    value: ms,
                    reason: "must be 1000 … 43200000 (1 s … 12 h)",
                })
            }
            None => dg.push_invisible_ms,
        },
    };
    let tls = tls_config(tls)?;
    let acl = acl_config(acl)?;
    // A role's listen address comes from its own section; the other one keeps the default.
    let namesrv_listen = match role {
        Role::NameServer | Role::Standalone => namesrv.listen.unwrap_or(default_ns),
        Role::Broker | Role::Controller => default_ns,
    };
    let broker_listen = match role {
        Role::Broker | Role::Standalone => b.listen.unwrap_or(default_broker),
        Role::NameServer | Role::Controller => default_broker,
    };
    // The replication stream: `[replication] listen`, else the broker's port plus one (an
    // ephemeral broker port gets an ephemeral replication port).
    let replication_listen = r.listen.unwrap_or_else(|| {
        let port = match broker_listen.port() {
            0 => 0,
            p => p.wrapping_add(1),
        };
        SocketAddr::new(broker_listen.ip(), port)
    });
    let dc = crate::controller::ControllerConfig::default();
    let detection = c
        .detection_ms
        .map(Duration::from_millis)
        .unwrap_or(dc.detection);
    let controller = crate::controller::ControllerConfig {
        detection,
        allow_unclean: c.allow_unclean_election.unwrap_or(dc.allow_unclean),
        // Brokers reach a restarted `conveyor controller` at the same address at their next
        // heartbeat: the detection time is grace enough.
        takeover_grace: detection,
    };
    let controller_listen = match role {
        Role::Controller => c.listen.or(namesrv.listen).unwrap_or(default_controller),
        _ => default_controller,
    };
    let group_endpoints = c
        .group_endpoints
        .iter()
        .flatten()
        .map(|e| {
            e.parse()
                .map_err(
                    |e: crate::controller::endpoint::EndpointError| SettingsError::Invalid {
                        key: "controller.group-endpoints",
                        reason: e.to_string(),
                    },
                )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(AppConfig {
        role,
        controller_listen,
        controller,
        group_endpoints,
        namesrv_listen,
        broker_listen,
        replication_listen,
        http_listen,
        http_resource_labels: http.resource_labels.unwrap_or(true),
        grpc_listen,
        grpc: grpc_config,
        tls,
        acl,
        broker,
        store,
        limits: ServeLimits::default(),
    })
}

/// The role (from `broker-role`, else from the id: 0 is an ASYNC_MASTER, others slaves)
/// and the `[replication]` settings over their defaults.
fn replication_config(
    role: Option<BrokerRole>,
    broker_id: i64,
    r: &ReplicationSection,
) -> Result<ReplicationConfig, SettingsError> {
    if r.controller_addrs.as_ref().is_some_and(|a| !a.is_empty()) {
        // The controller decides; the broker starts fenced. Any id names the replica.
        let role = BrokerRole::Slave;
        return Ok(ReplicationConfig {
            role,
            ..replication_settings(role, r)
        });
    }
    let role = role.unwrap_or(if broker_id == 0 {
        BrokerRole::AsyncMaster
    } else {
        BrokerRole::Slave
    });
    match role {
        BrokerRole::Slave if broker_id <= 0 => {
            return Err(SettingsError::RoleId {
                role: role.as_str(),
                expected: "an id above 0",
                id: broker_id,
            })
        }
        BrokerRole::SyncMaster | BrokerRole::AsyncMaster if broker_id != 0 => {
            return Err(SettingsError::RoleId {
                role: role.as_str(),
                expected: "id 0",
                id: broker_id,
            })
        }
        _ => {}
    }
    Ok(replication_settings(role, r))
}

/// The `[replication]` keys over their defaults.
fn replication_settings(role: BrokerRole, r: &ReplicationSection) -> ReplicationConfig {
    let d = ReplicationConfig::default();
    ReplicationConfig {
        role,
        advertised_addr: r.advertised_addr.clone().unwrap_or(d.advertised_addr),
        cluster_name: d.cluster_name,
        broker_addr: d.broker_addr,
        master_address: r.master_address.clone().unwrap_or(d.master_address),
        in_sync_replicas: r.in_sync_replicas.unwrap_or(d.in_sync_replicas),
        slave_ack: r.slave_ack.unwrap_or(d.slave_ack),
        slave_timeout_ms: r.slave_timeout_ms.unwrap_or(d.slave_timeout_ms),
        transfer_batch_bytes: r.transfer_batch_bytes.unwrap_or(d.transfer_batch_bytes),
        heartbeat_interval_ms: r.heartbeat_interval_ms.unwrap_or(d.heartbeat_interval_ms),
        housekeeping_interval_ms: r
            .housekeeping_interval_ms
            .unwrap_or(d.housekeeping_interval_ms),
        max_gap_bytes: r.max_gap_bytes.unwrap_or(d.max_gap_bytes),
        metadata_sync_interval_ms: r
            .metadata_sync_interval_ms
            .unwrap_or(d.metadata_sync_interval_ms),
        controller_addrs: r.controller_addrs.clone().unwrap_or(d.controller_addrs),
        controller_scope: r
            .controller_scope
            .clone()
            .filter(|s| !s.is_empty())
            .or(d.controller_scope),
        controller_heartbeat_ms: r
            .controller_heartbeat_ms
            .unwrap_or(d.controller_heartbeat_ms),
        group_address: r
            .group_address
            .clone()
            .filter(|s| !s.is_empty())
            .or(d.group_address),
        synchronous: r.synchronous.unwrap_or(d.synchronous),
        max_time_not_caught_up_ms: r
            .max_time_not_caught_up_ms
            .unwrap_or(d.max_time_not_caught_up_ms),
        // Set from `[acl]` when the process starts.
        cluster_secret: None,
    }
}

fn store_flush_mode(m: FlushMode) -> conveyor_store::FlushMode {
    match m {
        FlushMode::Sync => conveyor_store::FlushMode::Sync,
        FlushMode::Async => conveyor_store::FlushMode::Async,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use conveyor_store::FlushMode;

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
    fn every_file_key_reaches_the_runtime_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            r#"
[namesrv]
listen = "127.0.0.1:19876"
[broker]
listen = "127.0.0.1:20911"
cluster-name = "c"
broker-name = "b"
broker-id = 2
broker-role = "SLAVE"
namesrv-addrs = ["n1:9876", "n2:9876"]
advertised-addr = "10.0.0.1:20911"
auto-create-topic = false
auto-create-subscription-group = false
default-topic-queue-nums = 4
register-interval-ms = 11000
offset-persist-interval-ms = 1000
send-queue-wait-ms = 50
max-sends-in-flight = 7
delay-levels = "1s 2s"
timer-max-delay-ms = 60000
transaction-timeout-ms = 100
transaction-check-interval-ms = 200
transaction-check-max = 3
metrics-per-queue = true
[store]
data-dir = "/d"
flush-mode = "sync"
segment-size = 2097152
max-message-size = 1024
retention-hours = 5
disk-clean-ratio = 0.5
disk-force-clean-ratio = 0.6
disk-full-ratio = 0.7
sync-flush-timeout-ms = 900
flush-interval-ms = 20
flush-thorough-interval-ms = 300
[http]
listen = "127.0.0.1:18080"
"#,
        )
        .unwrap();
        let args = ServerArgs {
            config: Some(path),
            ..Default::default()
        };
        let cfg = build(Role::Standalone, &args).unwrap();
        assert_eq!(cfg.namesrv_listen, "127.0.0.1:19876".parse().unwrap());
        assert_eq!(cfg.broker_listen, "127.0.0.1:20911".parse().unwrap());
        assert_eq!(cfg.http_listen, Some("127.0.0.1:18080".parse().unwrap()));
        let b = &cfg.broker;
        assert_eq!(
            (b.cluster_name.as_str(), b.broker_name.as_str()),
            ("c", "b")
        );
        assert_eq!(b.broker_id, 2);
        assert_eq!(b.namesrv_addrs, ["n1:9876", "n2:9876"]);
        assert_eq!(b.advertised_addr, "10.0.0.1:20911");
        assert!(!b.auto_create_topic && !b.auto_create_subscription_group);
        assert_eq!(b.default_topic_queue_nums, 4);
        assert_eq!(b.register_interval_ms, 11000);
        assert_eq!(b.offset_persist_interval_ms, 1000);
        assert_eq!(b.send_queue_wait_ms, 50);
        assert_eq!(b.max_sends_in_flight, 7);
        assert_eq!(b.delay_levels, "1s 2s");
        assert_eq!(b.timer_max_delay_ms, 60000);
        assert_eq!(b.transaction_timeout_ms, 100);
        assert_eq!(b.transaction_check_interval_ms, 200);
        assert_eq!(b.transaction_check_max, 3);
        assert!(b.metrics_per_queue);
        let s = &cfg.store;
        assert_eq!(s.root, PathBuf::from("/d"));
        assert_eq!(s.flush_mode, FlushMode::Sync);
        assert_eq!(s.commit_log_segment_size, 2 << 20);
        assert_eq!(s.max_message_size, 1024);
        assert_eq!(s.retention, Duration::from_secs(5 * 3600));
        assert_eq!(
            (
                s.disk_clean_ratio,
                s.disk_force_clean_ratio,
                s.disk_full_ratio
            ),
            (0.5, 0.6, 0.7)
        );
        assert_eq!(s.sync_flush_timeout, Duration::from_millis(900));
        assert_eq!(s.flush_interval, Duration::from_millis(20));
        assert_eq!(s.flush_thorough_interval, Duration::from_millis(300));
    }

    #[test]
    fn defaults_are_the_runtime_defaults() {
        let cfg = build(Role::Broker, &ServerArgs::default()).unwrap();
        let d = BrokerConfig::default();
        assert_eq!(cfg.broker.namesrv_addrs, d.namesrv_addrs);
        assert_eq!(cfg.broker.cluster_name, d.cluster_name);
        assert_eq!(cfg.broker.delay_levels, d.delay_levels);
        assert_eq!(
            cfg.broker.advertised_addr, "",
            "derived from the listen address"
        );
        let s = StoreConfig::new("./conveyor-data");
        assert_eq!(cfg.store.commit_log_segment_size, s.commit_log_segment_size);
        assert_eq!(cfg.store.retention, s.retention);
        assert_eq!(cfg.http_listen, Some("0.0.0.0:8080".parse().unwrap()));
    }

    #[test]
    fn listen_flags_follow_the_role() {
        let args = ServerArgs {
            listen: Some("127.0.0.1:1".parse().unwrap()),
            namesrv_listen: Some("127.0.0.1:2".parse().unwrap()),
            namesrv_addr: Some(" a:9876; b:9876 ;".into()),
            ..Default::default()
        };
        let ns = build(Role::NameServer, &args).unwrap();
        assert_eq!(ns.namesrv_listen.port(), 1);
        let broker = build(Role::Broker, &args).unwrap();
        assert_eq!(broker.broker_listen.port(), 1);
        assert_eq!(broker.broker.namesrv_addrs, ["a:9876", "b:9876"]);
        let both = build(Role::Standalone, &args).unwrap();
        assert_eq!(
            (both.namesrv_listen.port(), both.broker_listen.port()),
            (2, 1)
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

    #[test]
    fn unknown_keys_are_refused_naming_file_section_and_key() {
        let dir = tempfile::tempdir().unwrap();
        for (section, text) in [
            (
                "broker",
                "[broker]\nbroker-name = \"b\"\nbroker-nam = \"typo\"\n",
            ),
            (
                "store",
                "[store]\ndata-dir = \"/d\"\nbroker-nam = \"typo\"\n",
            ),
        ] {
            let path = dir.path().join(format!("{section}.toml"));
            std::fs::write(&path, text).unwrap();
            let args = ServerArgs {
                config: Some(path.clone()),
                ..Default::default()
            };
            let err = build(Role::Broker, &args).unwrap_err();
            let SettingsError::Parse { source, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!(source.section(), Some(section));
            assert_eq!(source.key(), Some("broker-nam"));
            let text = err.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(&format!("[{section}] broker-nam")), "{text}");
            assert!(text.contains("unknown field `broker-nam`"), "{text}");
        }
    }
}
