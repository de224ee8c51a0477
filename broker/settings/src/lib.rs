//! The typed model of Conveyor's TOML settings file (`conveyor … --config FILE`).
//!
//! One struct per section — [`NamesrvSection`] (`[namesrv]`), [`BrokerSection`] (`[broker]`),
//! [`StoreSection`] (`[store]`), [`HttpSection`] (`[http]`), [`GrpcSection`] (`[grpc]`), [`TlsSection`] (`[tls]`), [`AclSection`] (`[acl]`), [`ReplicationSection`]
//! (`[replication]`) — gathered in [`Settings`]. Every
//! field is an `Option`: `None` means "not set at this layer", so the same types describe the
//! file, the command line and the environment, and layers combine with one `or` per section
//! (`higher.or(lower)`). The broker turns the merged layers into its runtime configuration,
//! filling what no layer set with its defaults (documented on each field); the operator
//! serialises the same types to write the files its broker pods read.
//!
//! Every section rejects unknown keys (serde's `deny_unknown_fields`), and [`Settings::from_toml`]
//! reports the section, the key and the line of the first problem ([`ParseError`]).
//!
//! Keys are kebab-case (`cluster-name`); RocketMQ's camelCase name is given where one exists.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod error;
mod sections;
mod values;

pub use error::ParseError;
pub use sections::{
    AclSection, BrokerSection, ControllerSection, GrpcSection, HttpSection, NamesrvSection,
    ReplicationSection, StoreSection, TlsSection,
};
pub use values::{BrokerRole, FlushMode, SlaveAck};

use serde::{Deserialize, Serialize};

/// The whole file: one optional table per section. Unknown sections are rejected.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `[namesrv]`: the name server.
    #[serde(skip_serializing_if = "NamesrvSection::is_empty")]
    pub namesrv: NamesrvSection,
    /// `[broker]`: the broker (RocketMQ's `BrokerConfig`).
    #[serde(skip_serializing_if = "BrokerSection::is_empty")]
    pub broker: BrokerSection,
    /// `[store]`: the message store (RocketMQ's `MessageStoreConfig`).
    #[serde(skip_serializing_if = "StoreSection::is_empty")]
    pub store: StoreSection,
    /// `[http]`: probes and metrics.
    #[serde(skip_serializing_if = "HttpSection::is_empty")]
    pub http: HttpSection,
    /// `[grpc]`: the RocketMQ 5.x gRPC endpoint.
    #[serde(skip_serializing_if = "GrpcSection::is_empty")]
    pub grpc: GrpcSection,
    /// `[tls]`: TLS on the client ports.
    #[serde(skip_serializing_if = "TlsSection::is_empty")]
    pub tls: TlsSection,
    /// `[acl]`: access control.
    #[serde(skip_serializing_if = "AclSection::is_empty")]
    pub acl: AclSection,
    /// `[replication]`: master/slave replication.
    #[serde(skip_serializing_if = "ReplicationSection::is_empty")]
    pub replication: ReplicationSection,
    /// `[controller]`: the replication controller.
    #[serde(skip_serializing_if = "ControllerSection::is_empty")]
    pub controller: ControllerSection,
}

/// Names of the sections, as written in the file.
pub const SECTIONS: [&str; 9] = [
    "namesrv",
    "broker",
    "store",
    "http",
    "grpc",
    "tls",
    "acl",
    "replication",
    "controller",
];

impl Settings {
    /// `self` where set, else `lower` (section by section, key by key).
    #[must_use]
    pub fn or(self, lower: Settings) -> Settings {
        Settings {
            namesrv: self.namesrv.or(lower.namesrv),
            broker: self.broker.or(lower.broker),
            store: self.store.or(lower.store),
            http: self.http.or(lower.http),
            grpc: self.grpc.or(lower.grpc),
            tls: self.tls.or(lower.tls),
            acl: self.acl.or(lower.acl),
            replication: self.replication.or(lower.replication),
            controller: self.controller.or(lower.controller),
        }
    }

    /// True when no key of any section is set.
    pub fn is_empty(&self) -> bool {
        self.namesrv.is_empty()
            && self.broker.is_empty()
            && self.store.is_empty()
            && self.http.is_empty()
            && self.grpc.is_empty()
            && self.tls.is_empty()
            && self.acl.is_empty()
            && self.replication.is_empty()
            && self.controller.is_empty()
    }

    /// Parses a settings file. The error names the section, the key and the line at fault.
    pub fn from_toml(text: &str) -> Result<Settings, ParseError> {
        toml::from_str(text).map_err(|e| error::diagnose(text, &e))
    }

    /// The file text: set keys only, sections in [`SECTIONS`] order, keys in field order;
    /// empty sections are left out.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("settings hold only TOML-representable values")
    }
}

#[cfg(test)]
mod tests;
