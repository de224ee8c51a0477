//! The `MessageQueueCluster` custom resource (`conveyor.dev/v1alpha1`).
//!
//! Validation lives in the schema (types, enums, minimums) and in CEL rules
//! (`x-kubernetes-validations`) that the API server evaluates, so invalid manifests are rejected
//! at admission instead of reaching the reconciler.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the operator's resources.
pub const GROUP: &str = "conveyor.dev";
/// Annotation that stops all changes to a cluster's objects while set to `"true"`.
pub const PAUSE_ANNOTATION: &str = "conveyor.dev/pause-reconciliation";

/// Desired state of a Conveyor cluster: name servers plus `groups` broker groups of
/// `replicasPerGroup` replicas each, one master and the others slaves (see `broker.failover`
/// for who is master).
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "conveyor.dev",
    version = "v1alpha1",
    kind = "MessageQueueCluster",
    plural = "messagequeueclusters",
    shortname = "mqc",
    namespaced,
    status = "MessageQueueClusterStatus",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Groups", type_ = "integer", json_path = ".spec.broker.groups"),
    printcolumn(name = "Replicas", type_ = "integer", json_path = ".spec.broker.replicasPerGroup"),
    printcolumn(name = "Flush", type_ = "string", json_path = ".spec.broker.flushMode"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() <= 40").message("metadata.name must be at most 40 characters (it prefixes the names of owned objects)"),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.broker.replicationMode != 'Sync' || self.broker.replicasPerGroup >= 2").message("replicationMode Sync needs broker.replicasPerGroup >= 2 (a master and at least one slave)"))]
pub struct MessageQueueClusterSpec {
    /// Container image holding the `conveyor` binary.
    #[x_kube(validation = Rule::new("self.size() > 0").message("image must not be empty"))]
    pub image: String,
    /// Image pull policy of every container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Secrets used to pull `image`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// Name servers.
    #[serde(default)]
    pub name_server: NameServerSpec,
    /// Broker groups.
    pub broker: BrokerSpec,
    /// Pod placement applied to name-server and broker pods.
    #[serde(default, skip_serializing_if = "Placement::is_empty")]
    pub placement: Placement,
    /// How clients reach the name servers.
    #[serde(default)]
    pub service: ServiceExposure,
    /// TLS, access control and network isolation.
    #[serde(default, skip_serializing_if = "SecuritySpec::is_default")]
    pub security: SecuritySpec,
    /// Settings of every name-server and broker pod (Strimzi's `template.pod`).
    #[serde(default, skip_serializing_if = "PodTemplate::is_empty")]
    pub pod_template: PodTemplate,
}

/// What a platform team sets on every pod of the cluster: labels and annotations its policies
/// and tools look for, a PriorityClass, and how long a pod may take to stop.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Labels added to every pod (the operator's own labels win over one of the same key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every pod (the operator's own win over one of the same key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// The pods' PriorityClass (it must exist).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Seconds a pod may take to stop after SIGTERM before it is killed. Default: 60 for
    /// brokers (flush, unregister, hand writes over), 30 for name servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub termination_grace_period_seconds: Option<i64>,
}

impl PodTemplate {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// TLS, access control (RocketMQ's ACL) and network isolation of a cluster.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecuritySpec {
    /// TLS on the name servers' and brokers' client ports and the replication port.
    #[serde(default)]
    pub tls: TlsSpec,
    /// Access control: every request signed by a `MessageQueueUser` of the cluster (or by
    /// the cluster itself) and allowed by its permissions.
    #[serde(default)]
    pub acl: AclSpec,
    /// A NetworkPolicy: client ports open, the replication port only to the group's own pods.
    #[serde(default)]
    pub network_policy: NetworkPolicySpec,
}

impl SecuritySpec {
    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// TLS settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// Permissive: TLS and plaintext on each port (RocketMQ's default); Enforcing: TLS only;
    /// Off: plaintext only.
    #[serde(default)]
    pub mode: TlsMode,
    /// A `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`) in the cluster's namespace, such
    /// as a cert-manager Certificate writes; renewed files are picked up without a restart.
    /// Unset: each server generates a self-signed certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Without `secretName`: the operator makes a CA for the cluster (Secret `<name>-ca`, a
    /// year, rotated in two phases: its successor is trusted 60 days before it ends and signs
    /// from 30 days before) and a server certificate signed by it for every name-server and
    /// broker DNS name (Secret `<name>-tls`), valid 90 days and renewed 30 days before it ends
    /// (servers pick the renewed files up without a restart). Clients trust `ca.crt` of the
    /// Secret `<name>-ca-cert`: every CA not yet ended.
    #[serde(default)]
    pub generate_certificates: bool,
}

/// TLS mode of every port.
// Variants are documented by their names; doc comments on them would turn the generated
// schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum TlsMode {
    #[default]
    Permissive,
    Enforcing,
    Off,
}

impl TlsMode {
    /// The value `conveyor --tls-mode` takes.
    pub fn as_flag(self) -> &'static str {
        match self {
            TlsMode::Permissive => "permissive",
            TlsMode::Enforcing => "enforcing",
            TlsMode::Off => "off",
        }
    }
}

/// Access control settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AclSpec {
    /// Check every request (RocketMQ's `aclEnable`). Users are `MessageQueueUser` resources
    /// naming this cluster.
    #[serde(default)]
    pub enabled: bool,
}

/// NetworkPolicy settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// Render a NetworkPolicy for the cluster's pods.
    #[serde(default)]
    pub enabled: bool,
}

/// Image pull policy.
// Variants are documented by their names (Kubernetes' own values); doc comments on them would
// turn the generated schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl ImagePullPolicy {
    /// The value Kubernetes expects.
    pub fn as_str(self) -> &'static str {
        match self {
            ImagePullPolicy::Always => "Always",
            ImagePullPolicy::IfNotPresent => "IfNotPresent",
            ImagePullPolicy::Never => "Never",
        }
    }
}

/// Name-server settings.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NameServerSpec {
    /// Number of name servers (each is independent; brokers register with all of them).
    #[serde(default = "default_name_servers")]
    #[schemars(range(min = 1, max = 9))]
    pub replicas: i32,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Liveness probe settings (`GET /healthz`); unset fields keep the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<ProbeSpec>,
    /// Readiness probe settings (`GET /readyz`); unset fields keep the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ProbeSpec>,
}

/// Timings of a probe (Strimzi's `livenessProbe`/`readinessProbe`): each field unset keeps
/// the operator's default for that probe.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeSpec {
    /// Seconds after the container starts before the first probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub period_seconds: Option<i32>,
    /// Seconds a probe may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_seconds: Option<i32>,
    /// Failed probes in a row before the container is restarted (liveness) or taken out of
    /// its Services (readiness).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub failure_threshold: Option<i32>,
}

fn default_name_servers() -> i32 {
    2
}

impl Default for NameServerSpec {
    fn default() -> Self {
        Self {
            replicas: default_name_servers(),
            resources: None,
            liveness_probe: None,
            readiness_probe: None,
        }
    }
}

/// Broker settings.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BrokerSpec {
    /// Number of broker groups (RocketMQ broker names). Scaling down is refused until draining
    /// exists.
    #[x_kube(validation = Rule::new("self >= 1").message("broker.groups must be at least 1"))]
    #[schemars(range(min = 1, max = 64))]
    pub groups: i32,
    /// Pods per group, one master and the others slaves (brokerId = ordinal). With two or more
    /// and `failover.enabled`, the operator's controller picks the master; otherwise ordinal 0.
    #[serde(default = "default_replicas_per_group")]
    #[schemars(range(min = 1, max = 8))]
    pub replicas_per_group: i32,
    /// Persistent storage of each broker pod.
    pub storage: StorageSpec,
    /// Sync: acknowledge after fsync (group commit); Async: background flush.
    #[serde(default)]
    pub flush_mode: FlushMode,
    /// Sync: a master acknowledges after a slave has the message; Async: immediately.
    #[serde(default)]
    pub replication_mode: ReplicationMode,
    /// Failover: who is master of each group is decided by the replication controller inside
    /// the operator, which promotes an in-sync slave when the master is lost.
    #[serde(default)]
    pub failover: FailoverSpec,
    /// Container resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Extra broker settings: `broker.<key>` or `store.<key>` (kebab-case, as in the broker's TOML
    /// file) to a TOML value, e.g. `broker.auto-create-topic: "false"` or
    /// `store.retention-hours: "72"`. Keys the operator manages cannot be overridden.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    #[x_kube(validation = Rule::new("self.all(k, k.matches('^(broker|store)\\\\.[a-z0-9][a-z0-9-]*$'))").message("config keys must look like broker.<kebab-key> or store.<kebab-key>"))]
    #[x_kube(validation = Rule::new("self.all(k, !(k in ['broker.listen', 'broker.cluster-name', 'broker.broker-name', 'broker.broker-id', 'broker.namesrv-addrs', 'broker.advertised-addr', 'broker.broker-role', 'store.data-dir', 'store.flush-mode']))").message("config must not override keys the operator manages"))]
    pub config: BTreeMap<String, String>,
    /// Liveness probe settings (`GET /healthz`, which answers while the store recovers, so a
    /// long recovery is never restarted); unset fields keep the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<ProbeSpec>,
    /// Readiness probe settings (`GET /readyz`); unset fields keep the operator's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ProbeSpec>,
}

fn default_replicas_per_group() -> i32 {
    1
}

/// Failover of broker groups with more than one replica (RocketMQ 5's controller mode, with
/// the controller in the operator and its state in a ConfigMap per cluster).
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// When true (the default) and a group has two or more replicas, roles come from the
    /// operator's controller instead of pod ordinals: a lost master is replaced by the in-sync
    /// replica with the longest log, and a restarted former master rejoins as a slave. When
    /// false, ordinal 0 is the master for good (RocketMQ's classic master/slave).
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How long a master may be silent before it is replaced (a master whose connection to
    /// the controller closes, such as a killed process, is replaced at once). Brokers
    /// heartbeat every 500 ms, so the default of 4 s is eight missed heartbeats.
    #[serde(default = "default_detection_seconds")]
    #[schemars(range(min = 1, max = 300))]
    pub detection_seconds: u32,
    /// Promote a replica outside the in-sync set when no in-sync replica is alive: the group
    /// becomes writable again but loses what only the old master held. Off by default: the
    /// group then stays unwritable (condition `Degraded`) until an in-sync replica returns.
    #[serde(default)]
    pub allow_unclean_promotion: bool,
}

fn default_true() -> bool {
    true
}

fn default_detection_seconds() -> u32 {
    4
}

impl Default for FailoverSpec {
    fn default() -> Self {
        Self {
            enabled: true,
            detection_seconds: default_detection_seconds(),
            allow_unclean_promotion: false,
        }
    }
}

/// Storage of a broker pod.
#[derive(KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Volume size, a Kubernetes quantity such as `10Gi`.
    #[x_kube(validation = Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("storage.size must be a positive quantity such as 10Gi"))]
    pub size: String,
    /// Storage class of the volumes (cluster default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Delete a group's volume claims (and so, with the usual reclaim policy, its data) when
    /// its StatefulSet is deleted: when the cluster is deleted or a drained group removed
    /// (Strimzi's `deleteClaim`). Off by default: the claims stay for a later cluster of the
    /// same name to find. Lowering `replicasPerGroup` keeps them either way.
    #[serde(default)]
    pub delete_claim: bool,
}

/// Flush mode of the broker's store.
// Variants are documented by their names (Kubernetes' own values); doc comments on them would
// turn the generated schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum FlushMode {
    Sync,
    #[default]
    Async,
}

impl FlushMode {
    /// The value of the broker's `--flush-mode` / `[store] flush-mode`.
    pub fn broker_value(self) -> &'static str {
        match self {
            FlushMode::Sync => "sync",
            FlushMode::Async => "async",
        }
    }
}

/// Master-to-slave replication mode.
// Variants are documented by their names (Kubernetes' own values); doc comments on them would
// turn the generated schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ReplicationMode {
    Sync,
    #[default]
    Async,
}

/// Pod placement.
// The fields are the Kubernetes pod fields of the same names, copied into each pod template.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Rack awareness (Strimzi's `rack`): a group's replicas go only to nodes with this label
    /// and prefer different values of it (zones), and each broker records its node's value as
    /// its zone (for same-zone reads). Without it they still prefer different nodes, and the
    /// zone comes from `topology.kubernetes.io/zone`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<Rack>,
}

/// Which node label names a node's rack or zone.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rack {
    /// The node label, e.g. `topology.kubernetes.io/zone`.
    pub topology_key: String,
}

impl Placement {
    /// True when no placement field is set.
    pub fn is_empty(&self) -> bool {
        self.affinity.is_none()
            && self.tolerations.is_empty()
            && self.topology_spread_constraints.is_empty()
            && self.node_selector.is_empty()
            && self.rack.is_none()
    }
}

/// Exposure of the name servers' client Service.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExposure {
    /// Service type of the client Service.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// Annotations added to the client Service (e.g. for a cloud load balancer).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Kubernetes Service type.
// Variants are documented by their names (Kubernetes' own values); doc comments on them would
// turn the generated schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum ServiceType {
    #[default]
    ClusterIP,
    NodePort,
    LoadBalancer,
}

impl ServiceType {
    /// The value Kubernetes expects.
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
        }
    }
}

/// Observed state, written by the operator.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueClusterStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// kstatus conditions: `Ready`, `Reconciling`, `Stalled` (and `Paused` while paused).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Name-server addresses in RocketMQ's `host:port;host:port` form (stable DNS names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_server_addresses: Option<String>,
    /// The name servers' client Service address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_server_service: Option<String>,
    /// One entry per broker group.
    #[serde(default)]
    pub groups: Vec<BrokerGroupStatus>,
}

/// Observed state of one broker group.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BrokerGroupStatus {
    /// RocketMQ broker name of the group.
    pub name: String,
    /// Pods of the group, by ordinal.
    pub pods: Vec<String>,
    /// Ready pods.
    pub ready_replicas: i32,
    /// The pod acting as master.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master: Option<String>,
    /// The master epoch (failover only): bumped by every promotion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u32>,
    /// Pods holding every acknowledged message, the master included (failover only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_sync_replicas: Vec<String>,
    /// When the operator last saw a new master promoted (failover only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<String>,
    /// The replication-aware rolling restart in progress (failover only): the pod being
    /// restarted, the switchover, or what the next restart waits for. Absent when every pod
    /// runs the current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<String>,
    /// A group past `spec.broker.groups` being drained before its removal: what the drain
    /// does or waits for (writes stopped, clients' route poll, consumers' backlog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<String>,
    /// When every pod of a draining group became read-only (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes_stopped_at: Option<String>,
}

impl MessageQueueCluster {
    /// True when the pause annotation is set to "true".
    pub fn paused(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PAUSE_ANNOTATION))
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// The `MessageQueueCluster` CRD as YAML, as committed under `crds/`.
pub fn crd_yaml() -> String {
    render(&MessageQueueCluster::crd())
}

/// Every CRD of the operator as YAML, with its plural (the `crd` command's argument); each is
/// committed as `crds/<plural>.conveyor.dev.yaml` and in the chart.
pub fn crd_files() -> Vec<(&'static str, String)> {
    vec![
        ("messagequeueclusters", crd_yaml()),
        (
            "consumerautoscalers",
            render(&crate::autoscaler::resource::ConsumerAutoscaler::crd()),
        ),
        (
            "messagequeuetopics",
            render(&crate::topics::resource::MessageQueueTopic::crd()),
        ),
        (
            "messagequeueusers",
            render(&crate::users::resource::MessageQueueUser::crd()),
        ),
    ]
}

fn render(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> String {
    let body = serde_yaml::to_string(crd).expect("a CRD always serialises");
    format!("# Generated by `conveyor-operator crd`; do not edit.\n---\n{body}")
}
