//! The cluster secret: what a cluster's brokers and name servers, and the operator talking to
//! them, sign their requests to each other with when ACL is on (broker registration,
//! controller heartbeats, relayed writes, replication, the operator's admin requests). One per
//! cluster, in the Secret `<cluster>-cluster-secret` of its namespace (made by the operator the
//! first time the cluster has ACL on, owned by the cluster, never changed), so a process of one
//! cluster can never register with, replicate from or steer another cluster, even when the
//! network lets it reach that cluster's ports.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};
use rand::Rng;

use crate::builders::{self, names, ClusterSecret, OperatorEnv, CLUSTER_SECRET_KEY};
use crate::crd::MessageQueueCluster;

/// Why there is no cluster secret.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSecretError {
    /// The API refused (RBAC for secrets, most likely).
    #[error("Secret {name}: {source}")]
    Kube {
        /// The Secret.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
    /// The Secret exists but its value is missing or shorter than 16 characters.
    #[error("Secret {0} has no usable key {CLUSTER_SECRET_KEY} (16 characters or more)")]
    Unusable(String),
}

/// The secret of the cluster `cluster` in `namespace`, if its Secret exists and is usable.
pub async fn read(
    client: &Client,
    namespace: &str,
    cluster: &str,
) -> Result<Option<ClusterSecret>, ClusterSecretError> {
    let name = names::cluster_secret(cluster);
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let found = api
        .get_opt(&name)
        .await
        .map_err(|source| ClusterSecretError::Kube {
            name: name.clone(),
            source,
        })?;
    let Some(secret) = found else {
        return Ok(None);
    };
    usable(secret)
        .map(Some)
        .ok_or(ClusterSecretError::Unusable(name))
}

fn usable(secret: Secret) -> Option<ClusterSecret> {
    let bytes = secret.data?.remove(CLUSTER_SECRET_KEY)?;
    let value = String::from_utf8(bytes.0).ok()?.trim().to_string();
    (value.len() >= 16).then_some(ClusterSecret(value))
}

/// The secret of `mqc`, made (48 random alphanumerics) if it has none yet.
pub async fn ensure(
    client: &Client,
    mqc: &MessageQueueCluster,
) -> Result<ClusterSecret, ClusterSecretError> {
    let ns = builders::namespace(mqc);
    let cluster = mqc.name_any();
    if let Some(found) = read(client, &ns, &cluster).await? {
        return Ok(found);
    }
    let value: String = rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(48)
        .map(char::from)
        .collect();
    let env = OperatorEnv {
        cluster_secret: Some(ClusterSecret(value)),
        ..Default::default()
    };
    if let Some(secret) = builders::cluster_secret(mqc, &env) {
        // A Secret made meanwhile (another replica, or a user's own) is kept and read back.
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        match api.create(&Default::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(source) => {
                return Err(ClusterSecretError::Kube {
                    name: names::cluster_secret(&cluster),
                    source,
                })
            }
        }
        tracing::info!(cluster, "ACL: made the cluster's secret");
    }
    read(client, &ns, &cluster)
        .await?
        .ok_or_else(|| ClusterSecretError::Unusable(names::cluster_secret(&cluster)))
}
