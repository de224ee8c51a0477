//! The cluster secret: what the brokers and name servers of the clusters this operator runs,
//! and the operator itself, sign their requests to each other with when ACL is on (broker
//! registration, controller heartbeats, relayed writes, replication, the operator's admin
//! requests). One per operator, kept in the Secret `conveyor-cluster-secret` of the
//! operator's namespace (made on first start, never changed), and copied into each cluster's
//! namespace for its pods.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;
use kube::api::Api;
use kube::Client;
use rand::Rng;

use crate::builders::{ClusterSecret, CLUSTER_SECRET_KEY};

/// The Secret's name in the operator's namespace.
pub const SECRET_NAME: &str = "conveyor-cluster-secret";

/// Why there is no cluster secret.
#[derive(Debug, thiserror::Error)]
pub enum ClusterSecretError {
    /// The API refused (RBAC for secrets, most likely).
    #[error("Secret {SECRET_NAME}: {0}")]
    Kube(#[from] kube::Error),
    /// The Secret exists but its value is missing or shorter than 16 characters.
    #[error("Secret {SECRET_NAME} has no usable key {CLUSTER_SECRET_KEY} (16 characters or more)")]
    Unusable,
}

/// The operator's cluster secret, made if there is none.
pub async fn ensure(client: &Client, namespace: &str) -> Result<ClusterSecret, ClusterSecretError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    if let Some(found) = read(&api).await? {
        return Ok(found);
    }
    let value: String = rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(48)
        .map(char::from)
        .collect();
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.into()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    "conveyor-operator".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            [(
                CLUSTER_SECRET_KEY.to_string(),
                ByteString(value.into_bytes()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    match api.create(&Default::default(), &secret).await {
        Ok(_) => {}
        // Another replica made it first: take theirs.
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    read(&api).await?.ok_or(ClusterSecretError::Unusable)
}

async fn read(api: &Api<Secret>) -> Result<Option<ClusterSecret>, kube::Error> {
    Ok(api.get_opt(SECRET_NAME).await?.and_then(|s| {
        let bytes = s.data?.remove(CLUSTER_SECRET_KEY)?;
        let value = String::from_utf8(bytes.0).ok()?.trim().to_string();
        (value.len() >= 16).then_some(ClusterSecret(value))
    }))
}
