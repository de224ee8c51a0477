//! The `ConsumerAutoscaler` custom resource (`conveyor.dev/v1alpha1`): scales one workload
//! (anything with a `/scale` subresource) from the backlog of one consumer group on one or
//! more topics. A namespaced resource beside the consumers, as KEDA's ScaledObject and the
//! HPA are, rather than a field of `MessageQueueCluster`: application teams own their
//! consumers and their scaling, platform teams own the cluster.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscalerBehavior;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Scales `scaleTargetRef` to `ceil(backlog / targetBacklogPerReplica)` replicas, with the
/// HPA's tolerance and `behavior`, at most the number of read queues the group can use
/// (unless `allowIdleConsumers`), to zero after `cooldownPeriodSeconds` when `minReplicas` is
/// 0, and to `fallback.replicas` when the backlog cannot be read.
// Printer columns share their `type_`: not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "conveyor.dev",
    version = "v1alpha1",
    kind = "ConsumerAutoscaler",
    plural = "consumerautoscalers",
    shortname = "cas",
    namespaced,
    status = "ConsumerAutoscalerStatus",
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.scaleTargetRef.name"
    ),
    printcolumn(name = "Group", type_ = "string", json_path = ".spec.consumerGroup"),
    printcolumn(
        name = "Backlog",
        type_ = "integer",
        json_path = ".status.observedBacklog"
    ),
    printcolumn(
        name = "Desired",
        type_ = "integer",
        json_path = ".status.desiredReplicas"
    ),
    printcolumn(
        name = "Current",
        type_ = "integer",
        json_path = ".status.currentReplicas"
    ),
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clusterRef) != has(self.nameServer)").message("set exactly one of clusterRef and nameServer"))]
#[x_kube(validation = Rule::new("self.maxReplicas >= self.minReplicas").message("maxReplicas must be at least minReplicas"))]
#[x_kube(validation = Rule::new("self.mode != 'Keda' || has(self.prometheus)").message("mode Keda needs prometheus: KEDA reads the backlog from there"))]
pub struct ConsumerAutoscalerSpec {
    /// The workload to scale: any resource with a `/scale` subresource (Deployment,
    /// StatefulSet, a custom resource).
    pub scale_target_ref: ScaleTargetRef,
    /// The consumer group whose backlog counts.
    #[x_kube(validation = Rule::new("self.size() > 0").message("consumerGroup must not be empty"))]
    pub consumer_group: String,
    /// The topics the group consumes; the backlog is their sum.
    #[schemars(length(min = 1, max = 64))]
    pub topics: Vec<String>,
    /// A MessageQueueCluster in this namespace: its name servers are asked for routes and
    /// backlog, and its name is the `cluster` label of the default Prometheus query.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<ClusterRef>,
    /// Or the name servers of a cluster the operator does not manage (`host:port;host:port`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_server: Option<String>,
    /// The backlog one replica should carry (KEDA's `lagThreshold`).
    #[schemars(range(min = 1))]
    pub target_backlog_per_replica: i64,
    /// The target goes from 0 to 1 replica only above this backlog (strictly greater).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub activation_backlog: i64,
    /// Lowest replica count; 0 allows scaling to zero after the cooldown.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_replicas: i32,
    /// Highest replica count.
    #[serde(default = "default_max_replicas")]
    #[schemars(range(min = 1))]
    pub max_replicas: i32,
    /// Let the count exceed the number of read queues the group can use (only POP consumers
    /// share a queue; a push or pull consumer without a queue idles).
    #[serde(default)]
    pub allow_idle_consumers: bool,
    /// Seconds between two reads of the backlog.
    #[serde(default = "default_polling_interval")]
    #[schemars(range(min = 1, max = 3600))]
    pub polling_interval_seconds: i32,
    /// Seconds the backlog must stay at or below `activationBacklog` before scaling to zero.
    #[serde(default = "default_cooldown")]
    #[schemars(range(min = 0))]
    pub cooldown_period_seconds: i32,
    /// What to do when the backlog cannot be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Fallback>,
    /// Stabilization windows and rate policies (autoscaling/v2 shape and defaults).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub behavior: Option<HorizontalPodAutoscalerBehavior>,
    /// Read the backlog from Prometheus; without it, straight from the brokers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusSource>,
    /// Native: the operator scales the target. Keda: the operator writes a KEDA ScaledObject
    /// with the same settings (a Prometheus trigger, `maxReplicaCount` capped at the read
    /// queues) and keeps its cap current; KEDA and the HPA scale.
    #[serde(default)]
    pub mode: AutoscalerMode,
}

/// Who scales.
// Variants are documented on the field: doc comments on them would turn the schema's `enum`
// into a `oneOf`.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum AutoscalerMode {
    #[default]
    Native,
    Keda,
}

fn default_max_replicas() -> i32 {
    100
}

fn default_polling_interval() -> i32 {
    15
}

fn default_cooldown() -> i32 {
    300
}

/// The workload scaled.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// Its API version (`apps/v1`).
    pub api_version: String,
    /// Its kind (`Deployment`).
    pub kind: String,
    /// Its name, in the autoscaler's namespace.
    pub name: String,
}

/// A MessageQueueCluster in the autoscaler's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRef {
    /// Its name.
    pub name: String,
}

/// The count used while the backlog cannot be read.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Fallback {
    /// Failed or empty reads in a row before the fallback applies.
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,
    /// The count then (never lower than the current one: no scale-down because data vanished).
    #[schemars(range(min = 0))]
    pub replicas: i32,
}

/// Where Prometheus answers queries.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSource {
    /// Its base URL (`http://prometheus.monitoring.svc:9090`).
    pub server_address: String,
    /// A query returning one number, the backlog. Default: the sum over the topics of
    /// `rocketmq_consumer_lag_messages` of the group (one series per broker group, masters
    /// and slaves deduplicated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Credentials and the CA of a Prometheus that wants them (`https://`, behind an
    /// authenticating proxy). Mode Keda gets the same in a TriggerAuthentication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<PrometheusAuthentication>,
}

/// How the autoscaler (and KEDA, in mode Keda) authenticates to Prometheus: from a Secret in
/// the autoscaler's namespace whose keys are the parameters of KEDA's Prometheus scaler:
/// `bearerToken` (mode Bearer), `username` and `password` (mode Basic), and `ca`, a PEM CA
/// bundle an `https://` server's certificate must chain to (the system's roots without it).
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusAuthentication {
    /// The Secret's name.
    pub secret_name: String,
    /// Which credentials to send; none when absent (only the `ca` key is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<PrometheusAuthMode>,
}

/// The credentials sent to Prometheus (KEDA's `authModes`).
// Variants are documented by their names; doc comments on them would turn the generated
// schema's `enum` into a `oneOf`.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum PrometheusAuthMode {
    Bearer,
    Basic,
}

/// What the autoscaler saw and did last.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsumerAutoscalerStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The target's replicas when last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_replicas: Option<i32>,
    /// The count last decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_replicas: Option<i32>,
    /// The backlog last read (absent when the read failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_backlog: Option<i64>,
    /// The number of read queues the group can use (the replica cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_cap: Option<i32>,
    /// When the count last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scale_time: Option<Time>,
    /// When the backlog was last above the activation threshold (the cooldown counts from
    /// here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_active_time: Option<Time>,
    /// Failed or empty backlog reads in a row.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// `Active`, `Capped`, `MetricsAvailable`, `FallbackActive` (and `Paused` while paused).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What the stabilization windows and rate policies look back on, kept here so that a
    /// new operator leader (or a restarted operator) decides as the previous one would have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<ScalingHistory>,
}

/// The HPA's memory of recent decisions of one autoscaler.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalingHistory {
    /// Recommendations within the longest stabilization window.
    #[serde(default)]
    pub recommendations: Vec<HistoryEntry>,
    /// Scale-ups within the last 30 minutes (replicas added).
    #[serde(default)]
    pub scale_ups: Vec<HistoryEntry>,
    /// Scale-downs within the last 30 minutes (replicas removed).
    #[serde(default)]
    pub scale_downs: Vec<HistoryEntry>,
}

/// One remembered recommendation or change.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HistoryEntry {
    /// When, in milliseconds since the Unix epoch (metav1.Time keeps only seconds).
    pub at_ms: i64,
    /// Replicas recommended, added or removed.
    pub replicas: i32,
}
