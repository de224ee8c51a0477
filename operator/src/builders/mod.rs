//! Pure desired-state functions: a `MessageQueueCluster` in, Kubernetes objects out. No IO, so
//! every rule (names, labels, roles, hashes) is unit-tested here.

mod broker;
mod common;
mod config;
mod nameserver;
mod placement;
mod security;

pub use broker::{
    broker_config_map, broker_headless_service, broker_master_endpoints, broker_master_service,
    broker_pdb, broker_statefulset, service_endpoints, ENDPOINTS_MANAGER,
};
pub use config::{broker_settings, render_broker_toml, BrokerRole, ConfigError};
pub use nameserver::{
    name_server_addresses, name_server_client_service, name_server_headless_service,
    name_server_pdb, name_server_service_address, name_server_statefulset,
};

pub use common::{
    hash, labels, names, namespace, owner_reference, scope, selector_labels, ClusterSecret,
    Component, ControllerTarget, OperatorEnv, BROKER_PORT, CONFIG_DIR, CONFIG_HASH_ANNOTATION,
    CONVEYOR_BIN, DATA_DIR, GROUP_LABEL, HTTP_PORT, NAMESRV_PORT, POD_INFO_DIR, RUN_AS_USER,
    ZONE_ANNOTATION,
};
pub use placement::{spread_affinity, zone_label, DEFAULT_ZONE_LABEL, HOSTNAME_KEY};
pub use security::{
    cluster_secret, empty_users_secret, network_policies, owned_secret, pod_security,
    tls_secret_name, PodSecurity, ACL_DIR, CLUSTER_SECRET_DIR, CLUSTER_SECRET_KEY, TLS_DIR,
    USERS_FILE_KEY,
};

#[cfg(test)]
pub(crate) mod tests;
