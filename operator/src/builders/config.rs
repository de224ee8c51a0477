//! The broker's TOML configuration, one file per pod of a group (the pod's ordinal decides its
//! broker id and role), in the format `conveyor broker --config` reads: the broker's own
//! settings model (`conveyor-settings`), filled in and serialised, so a key the broker does not
//! know cannot be written.

use std::net::SocketAddr;

use conveyor_settings::{
    BrokerSection, GrpcSection, HttpSection, NamesrvSection, ReplicationSection, Settings,
    StoreSection,
};

use crate::crd::{FlushMode, MessageQueueCluster, ReplicationMode};

use super::common::OperatorEnv;

use super::common::{names, namespace, BROKER_PORT, DATA_DIR, GRPC_PORT, HTTP_PORT};
use super::nameserver::name_server_addresses;

/// Role of a broker pod, from its ordinal (RocketMQ's `brokerRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerRole {
    /// A master that acknowledges only once its slaves hold the record.
    SyncMaster,
    /// A master that acknowledges on its own durability.
    AsyncMaster,
    /// A replica of its group's master.
    Slave,
}

impl BrokerRole {
    /// Ordinal 0 is the master (sync or async by replication mode); the others are slaves.
    pub fn for_ordinal(ordinal: i32, replication: ReplicationMode) -> Self {
        match (ordinal, replication) {
            (0, ReplicationMode::Sync) => BrokerRole::SyncMaster,
            (0, ReplicationMode::Async) => BrokerRole::AsyncMaster,
            _ => BrokerRole::Slave,
        }
    }

    /// RocketMQ's `brokerRole` value.
    pub fn as_str(self) -> &'static str {
        match self {
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

impl From<BrokerRole> for conveyor_settings::BrokerRole {
    fn from(r: BrokerRole) -> Self {
        match r {
            BrokerRole::SyncMaster => conveyor_settings::BrokerRole::SyncMaster,
            BrokerRole::AsyncMaster => conveyor_settings::BrokerRole::AsyncMaster,
            BrokerRole::Slave => conveyor_settings::BrokerRole::Slave,
        }
    }
}

impl From<FlushMode> for conveyor_settings::FlushMode {
    fn from(m: FlushMode) -> Self {
        match m {
            FlushMode::Sync => conveyor_settings::FlushMode::Sync,
            FlushMode::Async => conveyor_settings::FlushMode::Async,
        }
    }
}

/// A spec that passed the API server's validation but cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An override's value is not a TOML value.
    #[error("broker.config[{key:?}]: {value:?} is not a TOML value ({reason})")]
    BadValue {
        /// The override's key.
        key: String,
        /// The value as written.
        value: String,
        /// The TOML parser's message.
        reason: String,
    },
    /// An override's key has no `broker.`/`store.` section prefix.
    #[error("broker.config key {0:?} must be broker.<key>, store.<key> or replication.<key>")]
    BadKey(String),
    /// The key is `broker.<key>` or `store.<key>` but the broker has no such setting.
    #[error("broker.config key {key:?} is not a broker setting ({reason})")]
    UnknownKey {
        /// The override's key.
        key: String,
        /// The settings model's message (names the accepted keys).
        reason: String,
    },
    /// The key is one the operator sets itself.
    #[error("broker.config key {0:?} is set by the operator and cannot be overridden")]
    Managed(String),
}

/// Parses `value` as a TOML value (`false`, `72`, `"text"`, `[1, 2]`).
fn toml_value(key: &str, value: &str) -> Result<toml::Value, ConfigError> {
    let doc = format!("v = {value}");
    let parsed: toml::Table = toml::from_str(&doc).map_err(|e| ConfigError::BadValue {
        key: key.into(),
        value: value.into(),
        reason: e.message().to_string(),
    })?;
    parsed
        .get("v")
        .cloned()
        .ok_or_else(|| ConfigError::BadValue {
            key: key.into(),
            value: value.into(),
            reason: "empty".into(),
        })
}

/// Keys the operator sets on the command line rather than in the file (the pod IP is only known
/// at run time), so they cannot be overridden either.
const FLAG_MANAGED: [&str; 2] = ["broker.advertised-addr", "broker.zone-file"];

/// Checks the user's `section.<key>` overrides against the section's model `T` (one key at a
/// time, so the error names the key) and returns them as `T`. `managed` is what the operator
/// sets in that section; overriding it is refused.
fn section_overrides<T>(
    section: &str,
    entries: &[(&String, &String, toml::Value)],
    managed: &T,
) -> Result<T, ConfigError>
where
    T: serde::de::DeserializeOwned + serde::Serialize + Default,
{
    let managed = toml::Table::try_from(managed).expect("sections serialise to tables");
    let mut all = toml::Table::new();
    for (key, value, v) in entries {
        let k = &key[section.len() + 1..];
        let alone = toml::Table::from_iter([(k.to_string(), v.clone())]);
        if let Err(e) = toml::Value::Table(alone).try_into::<T>() {
            let reason = e.message().trim_end().to_string();
            return Err(if reason.starts_with("unknown field") {
                ConfigError::UnknownKey {
                    key: (*key).clone(),
                    reason,
                }
            } else {
                ConfigError::BadValue {
                    key: (*key).clone(),
                    value: (*value).clone(),
                    reason,
                }
            });
        }
        if managed.contains_key(k) || FLAG_MANAGED.contains(&key.as_str()) {
            return Err(ConfigError::Managed((*key).clone()));
        }
        all.insert(k.to_string(), v.clone());
    }
    Ok(toml::Value::Table(all)
        .try_into()
        .expect("each key was checked on its own"))
}

/// The settings of pod `ordinal` of broker group `group`, in the broker's own model: what the
/// operator manages (names, ids, role, addresses, paths, flush mode) plus the user's
/// `spec.broker.config` overrides, each checked against the model.
pub fn broker_settings(
    mqc: &MessageQueueCluster,
    group: i32,
    ordinal: i32,
    env: &OperatorEnv,
) -> Result<Settings, ConfigError> {
    let cluster = mqc.metadata.name.clone().unwrap_or_default();
    let broker = &mqc.spec.broker;
    let role = BrokerRole::for_ordinal(ordinal, broker.replication_mode);
    let controller = env.controller_for(mqc);
    let mut broker_entries = Vec::new();
    let mut store_entries = Vec::new();
    let mut replication_entries = Vec::new();
    for (key, value) in &broker.config {
        let v = toml_value(key, value)?;
        match key.split_once('.') {
            Some(("broker", k)) if !k.is_empty() => broker_entries.push((key, value, v)),
            Some(("store", k)) if !k.is_empty() => store_entries.push((key, value, v)),
            Some(("replication", k)) if !k.is_empty() => replication_entries.push((key, value, v)),
            _ => return Err(ConfigError::BadKey(key.clone())),
        }
    }
    let managed = Settings {
        namesrv: NamesrvSection::default(),
        broker: BrokerSection {
            listen: Some(SocketAddr::from(([0, 0, 0, 0], BROKER_PORT as u16))),
            cluster_name: Some(cluster.clone()),
            broker_name: Some(names::broker_group(&cluster, group)),
            broker_id: Some(ordinal.into()),
            // Under failover the controller decides the role.
            broker_role: controller.is_none().then(|| role.into()),
            namesrv_addrs: Some(
                name_server_addresses(mqc)
                    .split(';')
                    .map(String::from)
                    .collect(),
            ),
            ..Default::default()
        },
        store: StoreSection {
            data_dir: Some(DATA_DIR.into()),
            flush_mode: Some(broker.flush_mode.into()),
            ..Default::default()
        },
        http: HttpSection {
            listen: Some(format!("0.0.0.0:{HTTP_PORT}")),
            ..Default::default()
        },
        grpc: GrpcSection {
            listen: Some(format!("0.0.0.0:{GRPC_PORT}")),
            ..Default::default()
        },
        // Classic roles: a SYNC_MASTER waits for every replica of its group; slaves learn the
        // master's replication address from the name server. Failover: the operator's
        // controller names the master and keeps the in-sync set, which a master waits for
        // under Sync replication; every request carries the cluster's scope.
        replication: match &controller {
            None => ReplicationSection {
                in_sync_replicas: (role == BrokerRole::SyncMaster)
                    .then(|| broker.replicas_per_group.max(1) as usize),
                ..Default::default()
            },
            Some(c) => ReplicationSection {
                controller_addrs: Some(vec![c.addr.clone()]),
                controller_scope: Some(c.scope.clone()),
                synchronous: Some(broker.replication_mode == ReplicationMode::Sync),
                group_address: env.group_addresses.get(&group).cloned(),
                ..Default::default()
            },
        },
        controller: Default::default(),
        tls: Default::default(),
        acl: Default::default(),
    };
    let overrides = Settings {
        broker: section_overrides("broker", &broker_entries, &managed.broker)?,
        store: section_overrides("store", &store_entries, &managed.store)?,
        replication: section_overrides("replication", &replication_entries, &managed.replication)?,
        ..Default::default()
    };
    Ok(managed.or(overrides))
}

/// Renders the TOML of pod `ordinal` of broker group `group`: [`broker_settings`] serialised,
/// under a comment saying where it comes from.
pub fn render_broker_toml(
    mqc: &MessageQueueCluster,
    group: i32,
    ordinal: i32,
    env: &OperatorEnv,
) -> Result<String, ConfigError> {
    let settings = broker_settings(mqc, group, ordinal, env)?;
    let cluster = mqc.metadata.name.clone().unwrap_or_default();
    let role = match env.controller_for(mqc) {
        Some(_) => "role decided by the operator's controller (failover)",
        None => BrokerRole::for_ordinal(ordinal, mqc.spec.broker.replication_mode).as_str(),
    };
    Ok(format!(
        "# Rendered by conveyor-operator for MessageQueueCluster {}/{cluster}; changes are overwritten.\n\
         # Pod {} (ordinal {ordinal}): {}. advertised-addr is passed as a flag (the pod IP).\n{}",
        namespace(mqc),
        names::pod(&names::broker_group(&cluster, group), ordinal),
        role,
        settings.to_toml()
    ))
}
