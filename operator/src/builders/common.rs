//! What every builder shares: ports, paths, object names, labels, owner references, hashes
//! and the pod settings common to name servers and brokers. A leaf: it imports no other
//! builder, so the builders can all use it without an import circle.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ContainerPort, EnvVar, EnvVarSource, ObjectFieldSelector, PodSecurityContext,
    PodSpec, Probe, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{Resource, ResourceExt};
use sha2::{Digest, Sha256};

use crate::crd::MessageQueueCluster;

/// Broker remoting port.
pub const BROKER_PORT: i32 = 10911;
/// Name-server port.
pub const NAMESRV_PORT: i32 = 9876;
/// Probes and metrics port.
pub const HTTP_PORT: i32 = 8080;
/// Broker port of the RocketMQ 5.x gRPC endpoint (the Java proxy's default `grpcServerPort`).
pub const GRPC_PORT: i32 = 8081;
/// Pod-template annotation holding the hash of the rendered configuration.
pub const CONFIG_HASH_ANNOTATION: &str = "conveyor.dev/config-hash";
/// Label carrying a broker group's index.
pub const GROUP_LABEL: &str = "conveyor.dev/broker-group";
/// Where the broker's volume is mounted.
pub const DATA_DIR: &str = "/var/lib/conveyor";
/// Where the broker's ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/conveyor";
/// Where a broker pod's downward-API files are mounted (its zone).
pub const POD_INFO_DIR: &str = "/var/run/conveyor";
/// Broker-pod annotation holding the zone of the node the pod runs on: the operator copies it
/// from the node's label once the pod is scheduled, and the broker reads it through the
/// downward API (a pod cannot read its node's labels itself).
pub const ZONE_ANNOTATION: &str = "conveyor.dev/zone";
/// Path of the `conveyor` binary in the image.
pub const CONVEYOR_BIN: &str = "/usr/local/bin/conveyor";
/// User id the containers run as (matches the image's user).
pub const RUN_AS_USER: i64 = 10001;

/// Component of a cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The name servers.
    NameServer,
    /// The brokers.
    Broker,
}

impl Component {
    /// The `app.kubernetes.io/component` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::NameServer => "namesrv",
            Component::Broker => "broker",
        }
    }
}

/// Stable object names, all prefixed with the cluster's name.
pub mod names {
    /// Name-server StatefulSet (and its client Service).
    pub fn name_server(cluster: &str) -> String {
        format!("{cluster}-namesrv")
    }
    /// Name-server headless Service (per-pod DNS names).
    pub fn name_server_headless(cluster: &str) -> String {
        format!("{cluster}-namesrv-headless")
    }
    /// A broker group's StatefulSet, headless Service, PDB and RocketMQ broker name.
    pub fn broker_group(cluster: &str, group: i32) -> String {
        format!("{cluster}-broker-{group}")
    }
    /// A broker group's master Service and its EndpointSlice (under failover): the group's
    /// stable address, which leads to whichever pod is master.
    pub fn broker_master(cluster: &str, group: i32) -> String {
        format!("{}-master", broker_group(cluster, group))
    }
    /// A broker group's ConfigMap.
    pub fn broker_config(cluster: &str, group: i32) -> String {
        format!("{cluster}-broker-{group}-config")
    }
    /// The Secret holding the cluster's users file (`plain_acl.yml`), kept by the users
    /// controller.
    pub fn acl_users(cluster: &str) -> String {
        format!("{cluster}-acl-users")
    }
    /// The Secret holding the secret the cluster's own processes sign with.
    pub fn cluster_secret(cluster: &str) -> String {
        format!("{cluster}-cluster-secret")
    }
    /// The Secret holding the server certificate the operator made (`generateCertificates`).
    pub fn tls(cluster: &str) -> String {
        format!("{cluster}-tls")
    }
    /// The Secret holding the cluster's CA (`generateCertificates`): its keys, so private.
    pub fn ca(cluster: &str) -> String {
        format!("{cluster}-ca")
    }
    /// The public Secret holding only the cluster's trust bundle (`ca.crt`, every CA not yet
    /// ended) for applications to mount (`generateCertificates`); never a key.
    pub fn ca_cert(cluster: &str) -> String {
        format!("{cluster}-ca-cert")
    }
    /// The cluster's NetworkPolicy.
    pub fn network_policy(cluster: &str) -> String {
        format!("{cluster}-network")
    }
    /// A pod of a StatefulSet.
    pub fn pod(statefulset: &str, ordinal: i32) -> String {
        format!("{statefulset}-{ordinal}")
    }
}

/// Labels selecting a component's pods (never change: selectors are immutable).
pub fn selector_labels(
    mqc: &MessageQueueCluster,
    component: Component,
    group: Option<i32>,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("app.kubernetes.io/name".into(), "conveyor".into());
    l.insert("app.kubernetes.io/instance".into(), mqc.name_any());
    l.insert(
        "app.kubernetes.io/component".into(),
        component.as_str().into(),
    );
    if let Some(g) = group {
        l.insert(GROUP_LABEL.into(), g.to_string());
    }
    l
}

/// Labels of every owned object: the selector labels plus `managed-by`.
pub fn labels(
    mqc: &MessageQueueCluster,
    component: Component,
    group: Option<i32>,
) -> BTreeMap<String, String> {
    let mut l = selector_labels(mqc, component, group);
    l.insert(
        "app.kubernetes.io/managed-by".into(),
        "conveyor-operator".into(),
    );
    l
}

/// Controller owner reference to the cluster (garbage collection deletes owned objects with it).
pub fn owner_reference(mqc: &MessageQueueCluster) -> OwnerReference {
    mqc.controller_owner_ref(&())
        .expect("a MessageQueueCluster read from the API server has a name and uid")
}

/// Lower-case hex SHA-256 of `parts` (length-prefixed so boundaries count).
pub fn hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The namespace owned objects go to.
pub fn namespace(mqc: &MessageQueueCluster) -> String {
    mqc.namespace().unwrap_or_else(|| "default".into())
}

pub(super) fn field_env(name: &str, path: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The metadata of a pod template: the operator's `labels` and `annotations` over those of
/// `spec.podTemplate` (the operator's win on a clash: selectors and the config hash rely on them).
pub(super) fn pod_template_metadata(
    spec: &crate::crd::MessageQueueClusterSpec,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
    let over = |mut theirs: BTreeMap<String, String>, ours: BTreeMap<String, String>| {
        theirs.extend(ours);
        theirs
    };
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        labels: Some(over(spec.pod_template.labels.clone(), labels)),
        annotations: Some(over(spec.pod_template.annotations.clone(), annotations)),
        ..Default::default()
    }
}

/// Pod settings shared by name-server and broker pods: pull secrets, security, placement
/// (kept apart from the pods `peers` selects: see `placement`).
pub(super) fn common_pod_spec(
    spec: &crate::crd::MessageQueueClusterSpec,
    peers: &BTreeMap<String, String>,
) -> PodSpec {
    fn unless_empty<T: Clone>(v: &[T]) -> Option<Vec<T>> {
        (!v.is_empty()).then(|| v.to_vec())
    }
    let placement = &spec.placement;
    PodSpec {
        image_pull_secrets: unless_empty(&spec.image_pull_secrets),
        security_context: Some(pod_security()),
        automount_service_account_token: Some(false),
        affinity: Some(super::placement::spread_affinity(placement, peers)),
        tolerations: unless_empty(&placement.tolerations),
        topology_spread_constraints: Some(super::placement::spread_constraints(placement, peers)),
        node_selector: (!placement.node_selector.is_empty())
            .then(|| placement.node_selector.clone()),
        priority_class_name: spec.pod_template.priority_class_name.clone(),
        ..Default::default()
    }
}

/// The ports a Conveyor container exposes: remoting (`port`), HTTP probes/metrics, and for a
/// broker the replication stream (`port` + 1, RocketMQ's HA port) and the gRPC endpoint.
pub(super) fn container_ports(port: i32) -> Vec<ContainerPort> {
    let broker_only: &[(&str, i32)] = if port == BROKER_PORT {
        &[("replication", BROKER_PORT + 1), ("grpc", GRPC_PORT)]
    } else {
        &[]
    };
    [("remoting", port), ("http", HTTP_PORT)]
        .iter()
        .chain(broker_only)
        .copied()
        .map(|(name, container_port)| ContainerPort {
            name: Some(name.into()),
            container_port,
            protocol: Some("TCP".into()),
            ..Default::default()
        })
        .collect()
}

/// An HTTP probe of `path` on the `http` port with these default timings, each replaced by the
/// user's setting when `user` gives one.
pub(super) fn http_probe(
    path: &str,
    period: i32,
    failure_threshold: i32,
    initial_delay: i32,
    user: Option<&crate::crd::ProbeSpec>,
) -> Probe {
    let user = user.cloned().unwrap_or_default();
    Probe {
        http_get: Some(k8s_openapi::api::core::v1::HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..Default::default()
        }),
        initial_delay_seconds: Some(user.initial_delay_seconds.unwrap_or(initial_delay)),
        period_seconds: Some(user.period_seconds.unwrap_or(period)),
        timeout_seconds: Some(user.timeout_seconds.unwrap_or(3)),
        failure_threshold: Some(user.failure_threshold.unwrap_or(failure_threshold)),
        ..Default::default()
    }
}

pub(super) fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            ..Default::default()
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn pod_security() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(RUN_AS_USER),
        run_as_group: Some(RUN_AS_USER),
        fs_group: Some(RUN_AS_USER),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What the rendering needs from the operator itself rather than from a cluster's spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorEnv {
    /// Where brokers reach the operator's replication controller (`host:port`); `None` when
    /// the operator runs without one (then every group keeps classic, ordinal-based roles).
    pub controller_addr: Option<String>,
    /// The secret this cluster's processes and the operator sign their requests to each
    /// other with under ACL (`None`: ACL is off, or the operator could not read or make the
    /// cluster's Secret). Set per cluster before each plan.
    pub cluster_secret: Option<ClusterSecret>,
    /// Under failover, each broker group's stable address (`ip:port` of its master Service),
    /// which its masters register with the name servers instead of their own. Set per
    /// cluster before each plan, once the Services have their cluster IPs.
    pub group_addresses: std::collections::BTreeMap<i32, String>,
}

/// The cluster secret: printed as `***`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ClusterSecret(pub String);

impl ClusterSecret {
    /// The credentials that sign as the cluster itself.
    pub fn credentials(&self) -> conveyor_remoting::acl::Credentials {
        conveyor_remoting::acl::Credentials::new(conveyor::acl::CLUSTER_ACCESS_KEY, self.0.clone())
    }
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(***)")
    }
}

/// The controller settings of one cluster's brokers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerTarget {
    /// The controller's address.
    pub addr: String,
    /// The cluster's scope at the controller: `<namespace>/<name>`.
    pub scope: String,
}

impl OperatorEnv {
    /// The controller that decides `mqc`'s roles: only under `spec.broker.failover.enabled`,
    /// with two or more replicas per group, and when the operator runs a controller.
    pub fn controller_for(&self, mqc: &MessageQueueCluster) -> Option<ControllerTarget> {
        let broker = &mqc.spec.broker;
        let addr = self.controller_addr.as_ref()?;
        (broker.failover.enabled && broker.replicas_per_group >= 2).then(|| ControllerTarget {
            addr: addr.clone(),
            scope: scope(mqc),
        })
    }
}

/// A cluster's scope at the operator's controller: `<namespace>/<name>` (broker names repeat
/// across namespaces; the scope keeps their groups apart).
pub fn scope(mqc: &MessageQueueCluster) -> String {
    format!(
        "{}/{}",
        namespace(mqc),
        mqc.metadata.name.as_deref().unwrap_or_default()
    )
}
