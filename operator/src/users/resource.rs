//! The `MessageQueueUser` custom resource (`conveyor.dev/v1alpha1`): one user of a cluster
//! with ACL on, its permissions as RocketMQ's `plain_acl.yml` has them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::autoscaler::resource::ClusterRef;

/// A user of a cluster: its access key is the resource's name, its secret key is generated
/// into a Secret, its permissions are those of the spec.
// Printer columns share their `type_`: not a duplicated attribute.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, KubeSchema, Deserialize, Serialize, Clone, Debug, PartialEq)]
#[kube(
    group = "conveyor.dev",
    version = "v1alpha1",
    kind = "MessageQueueUser",
    plural = "messagequeueusers",
    shortname = "mqu",
    namespaced,
    status = "MessageQueueUserStatus",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.clusterRef.name"),
    printcolumn(name = "Secret", type_ = "string", json_path = ".status.secretName"),
    printcolumn(name = "Admin", type_ = "boolean", json_path = ".spec.admin"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.size() > 6").message("metadata.name is the access key: RocketMQ needs more than 6 characters")
)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueUserSpec {
    /// The MessageQueueCluster in this namespace the user belongs to.
    pub cluster_ref: ClusterRef,
    /// May make admin requests (create and delete topics and groups, reset offsets, read the
    /// broker configuration) and has every topic and group permission.
    #[serde(default)]
    pub admin: bool,
    /// For topics not listed in `topics`.
    #[serde(default)]
    pub default_topic_permission: Permission,
    /// For consumer groups not listed in `groups`.
    #[serde(default)]
    pub default_group_permission: Permission,
    /// Per topic.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topics: Vec<Grant>,
    /// Per consumer group.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<Grant>,
    /// Addresses this user acts from without signing (RocketMQ's `whiteRemoteAddress`:
    /// `10.1.2.*`, `10.1.2.1-10`, `10.1.2.{1,2}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub white_remote_address: Option<String>,
    /// The Secret the credentials are written to (default: the user's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
}

/// A permission on one topic or consumer group.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// The topic's or group's name.
    #[schemars(length(min = 1))]
    pub name: String,
    /// What the user may do.
    pub permission: Permission,
}

/// RocketMQ's permissions: produce (`Pub`), consume (`Sub`), both, or nothing (`Deny`, which
/// wins over a default).
// Variants are documented by their names; doc comments on them would turn the generated
// schema's `enum` into a `oneOf` and change the CRD.
#[allow(missing_docs)]
#[derive(Deserialize, Serialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum Permission {
    #[default]
    Deny,
    Pub,
    Sub,
    PubSub,
}

impl Permission {
    /// As `plain_acl.yml` writes it.
    pub fn as_acl(self) -> &'static str {
        match self {
            Permission::Deny => "DENY",
            Permission::Pub => "PUB",
            Permission::Sub => "SUB",
            Permission::PubSub => "PUB|SUB",
        }
    }
}

/// What the operator last did.
#[derive(Deserialize, Serialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageQueueUserStatus {
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The user's access key (its name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key: Option<String>,
    /// The Secret holding `accessKey` and `secretKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// `Ready`: the credentials exist and the cluster's users file has the user.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}
