//! The broker's TOML configuration, one file per pod of a group (the pod's ordinal decides its
//! broker id and role), in the format `conveyor broker --config` reads.

use std::fmt::Write as _;

use crate::crd::{MessageQueueCluster, ReplicationMode};

use super::{names, BROKER_PORT, DATA_DIR, HTTP_PORT};

/// Role of a broker pod, from its ordinal (RocketMQ's `brokerRole`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BrokerRole {
    SyncMaster,
    AsyncMaster,
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

    pub fn as_str(self) -> &'static str {
        match self {
            BrokerRole::SyncMaster => "SYNC_MASTER",
            BrokerRole::AsyncMaster => "ASYNC_MASTER",
            BrokerRole::Slave => "SLAVE",
        }
    }
}

/// A spec that passed the API server's validation but cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("broker.config[{key:?}]: {value:?} is not a TOML value ({reason})")]
    BadValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("broker.config key {0:?} must be broker.<key> or store.<key>")]
    BadKey(String),
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

fn quoted(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Renders the TOML of pod `ordinal` of broker group `group`.
pub fn render_broker_toml(
    mqc: &MessageQueueCluster,
    group: i32,
    ordinal: i32,
) -> Result<String, ConfigError> {
    let cluster = mqc.metadata.name.clone().unwrap_or_default();
    let broker = &mqc.spec.broker;
    let role = BrokerRole::for_ordinal(ordinal, broker.replication_mode);
    let mut broker_extra = Vec::new();
    let mut store_extra = Vec::new();
    for (key, value) in &broker.config {
        let v = toml_value(key, value)?;
        match key.split_once('.') {
            Some(("broker", k)) if !k.is_empty() => broker_extra.push((k.to_string(), v)),
            Some(("store", k)) if !k.is_empty() => store_extra.push((k.to_string(), v)),
            _ => return Err(ConfigError::BadKey(key.clone())),
        }
    }
    let namesrv: Vec<String> = super::name_server_addresses(mqc)
        .split(';')
        .map(quoted)
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Rendered by conveyor-operator for MessageQueueCluster {}/{cluster}; changes are overwritten.",
        super::namespace(mqc)
    );
    let _ = writeln!(
        out,
        "# Pod {} (ordinal {ordinal}): {}. advertised-addr is passed as a flag (the pod IP).",
        names::pod(&names::broker_group(&cluster, group), ordinal),
        role.as_str()
    );
    out.push_str("[broker]\n");
    let _ = writeln!(
        out,
        "listen = {}",
        quoted(&format!("0.0.0.0:{BROKER_PORT}"))
    );
    let _ = writeln!(out, "cluster-name = {}", quoted(&cluster));
    let _ = writeln!(
        out,
        "broker-name = {}",
        quoted(&names::broker_group(&cluster, group))
    );
    let _ = writeln!(out, "broker-id = {ordinal}");
    let _ = writeln!(out, "broker-role = {}", quoted(role.as_str()));
    let _ = writeln!(out, "namesrv-addrs = [{}]", namesrv.join(", "));
    for (k, v) in &broker_extra {
        let _ = writeln!(out, "{k} = {v}");
    }
    out.push_str("\n[store]\n");
    let _ = writeln!(out, "data-dir = {}", quoted(DATA_DIR));
    let _ = writeln!(
        out,
        "flush-mode = {}",
        quoted(broker.flush_mode.broker_value())
    );
    for (k, v) in &store_extra {
        let _ = writeln!(out, "{k} = {v}");
    }
    out.push_str("\n[http]\n");
    let _ = writeln!(out, "listen = {}", quoted(&format!("0.0.0.0:{HTTP_PORT}")));
    Ok(out)
}
