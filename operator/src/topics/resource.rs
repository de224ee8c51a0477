//! The `MessageQueueTopic` custom resource (`conveyor.dev/v1alpha1`): one topic declared in
//! Git, created and kept by the operator on every broker group of a cluster (queues,
//! permission, order), as Strimzi's KafkaTopic keeps a Kafka topic. Its queue count can
//! follow its consumers (`queueAutoscaling`): grown when ConsumerAutoscalers of the topic are
//! capped by its read queues, shrunk when they need fewer, in RocketMQ's safe order.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::autoscaler::resource::ClusterRef;

/// A topic on every broker group of a cluster: `queues` read and write queues per group.
// Printer columns share their `type_`: not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "conveyor.dev",
    version = "v1alpha1",
    kind = "MessageQueueTopic",
    plural = "messagequeuetopics",
    shortname = "mqt",
    namespaced,
    status = "MessageQueueTopicStatus",
    printcolumn(name = "Topic", type_ = "string", json_path = ".status.topicName"),
    printcolumn(name = "Read", type_ = "integer", json_path = ".status.readQueues"),
    printcolumn(name = "Write", type_ = "integer", json_path = ".status.writeQueues"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.clusterRef) != has(self.nameServer)").message("set exactly one of clusterRef and nameServer"))]
#[x_kube(validation = Rule::new("!has(self.queueAutoscaling) || !self.queueAutoscaling.enabled || (self.queueAutoscaling.minQueues <= self.queues && self.queues <= self.queueAutoscaling.maxQueues)").message("queues must lie within queueAutoscaling.minQueues..maxQueues"))]
pub struct MessageQueueTopicSpec {
    /// A MessageQueueCluster in this namespace (its name is the RocketMQ cluster name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<ClusterRef>,
    /// Or the name servers of a cluster the operator does not manage (`host:port;…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_server: Option<String>,
    /// The RocketMQ cluster the topic is created in, with `nameServer` (default
    /// `DefaultCluster`; with `clusterRef`, the cluster's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_name: Option<String>,
    /// The topic's name (default: `metadata.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    /// Read and write queues per broker group (with autoscaling: the starting count).
    #[schemars(range(min = 1, max = 1024))]
    pub queues: i32,
    /// RocketMQ's permission bits: 6 read and write, 4 read only, 2 write only.
    #[serde(default = "default_perm")]
    #[schemars(range(min = 2, max = 6))]
    pub perm: i32,
    /// An ordered (FIFO) topic: messages of one key keep their order within a queue.
    #[serde(default)]
    pub ordered: bool,
    /// Seconds between two looks at the topic and its consumers.
    #[serde(default = "default_sync_interval")]
    #[schemars(range(min = 1, max = 3600))]
    pub sync_interval_seconds: i32,
    /// Follow the consumers: off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_autoscaling: Option<QueueAutoscaling>,
}

fn default_perm() -> i32 {
    6
}

fn default_sync_interval() -> i32 {
    15
}

/// When the queue count follows the consumers.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueAutoscaling {
    /// On or off.
    #[serde(default)]
    pub enabled: bool,
    /// Fewest queues per broker group.
    #[schemars(range(min = 1))]
    pub min_queues: i32,
    /// Most queues per broker group.
    #[schemars(range(min = 1, max = 1024))]
    pub max_queues: i32,
    /// Queues per broker group added or removed in one step.
    #[serde(default = "default_step")]
    #[schemars(range(min = 1))]
    pub step: i32,
    /// Grow once a ConsumerAutoscaler of the topic was capped by its read queues this long.
    #[serde(default = "default_grow_after")]
    #[schemars(range(min = 0))]
    pub grow_after_seconds: i32,
    /// Shrink once every ConsumerAutoscaler of the topic needed a step fewer consumers than
    /// there are read queues for this long.
    #[serde(default = "default_shrink_after")]
    #[schemars(range(min = 0))]
    pub shrink_after_seconds: i32,
    /// Autoscale an ordered topic too (a changed queue count moves keys to other queues:
    /// their order holds again only once the old queues are drained).
    #[serde(default)]
    pub allow_for_ordered: bool,
}

fn default_step() -> i32 {
    4
}

fn default_grow_after() -> i32 {
    600
}

fn default_shrink_after() -> i32 {
    3600
}

/// What the operator last saw and did.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueTopicStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The topic's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topic_name: Option<String>,
    /// The queue count per broker group the operator is moving to (or holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_queues: Option<i32>,
    /// Read queues per broker group (the fewest over the groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_queues: Option<i32>,
    /// Write queues per broker group (the most over the groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_queues: Option<i32>,
    /// `Stable`, `Growing` (read raised, write next), `Draining` (write lowered; waiting until
    /// every consumer group consumed the queues being removed) or `Shrinking`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// While draining: the groups that have not consumed the queues being removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_for: Vec<String>,
    /// Since when the consumers have needed fewer queues (the shrink window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink_eligible_since: Option<Time>,
    /// `Ready` (the topic is as declared) and `Autoscaling` (refused, and why).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
