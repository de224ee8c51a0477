//! Runs every MessageQueueUser: makes its credentials Secret (the secret key generated once
//! and kept), then rewrites its cluster's users file from all the cluster's users. A
//! finalizer holds a user's deletion until the users file no longer lists it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event};
use kube::runtime::{watcher, Controller};
use kube::{Client, Resource, ResourceExt};
use rand::Rng;

use super::plan::{user_secret, users_file, users_secret, UserEntry, SECRET_KEY};
use super::resource::{MessageQueueUser, MessageQueueUserStatus};
use crate::builders::{names, owner_reference};
use crate::crd::MessageQueueCluster;
use crate::reconcile::apply::{apply, apply_status};
use crate::reconcile::status::condition_of;

/// Held on every user until its cluster's users file no longer lists it.
const FINALIZER: &str = "conveyor.dev/users-file";

/// How often a user is looked at again without a change (a Secret edited by hand is put
/// back).
const RESYNC: Duration = Duration::from_secs(300);

/// Why a sync could not run (retried).
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// An API call failed.
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    /// Applying failed.
    #[error("apply: {0}")]
    Apply(#[from] crate::reconcile::context::Error),
    /// The object has no namespace.
    #[error("the user resource has no namespace")]
    NoNamespace,
    /// The finalizer step failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

/// What every sync shares.
struct UserContext {
    /// Client of every API call.
    client: Client,
}

/// Runs the users of `namespace` (all when `None`) until the future is dropped.
pub async fn run(client: Client, namespace: Option<String>) {
    let api: Api<MessageQueueUser> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(UserContext { client });
    Controller::new(api, watcher::Config::default())
        .run(sync, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "user sync error");
            }
        })
        .await;
}

fn error_policy(u: Arc<MessageQueueUser>, error: &UserError, _ctx: Arc<UserContext>) -> Action {
    tracing::warn!(user = %u.name_any(), %error, "user sync failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn sync(user: Arc<MessageQueueUser>, ctx: Arc<UserContext>) -> Result<Action, UserError> {
    let ns = user.namespace().ok_or(UserError::NoNamespace)?;
    let api: Api<MessageQueueUser> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, user, |event| async {
        match event {
            Event::Apply(u) => admit(&u, &ns, &ctx).await,
            Event::Cleanup(u) => {
                rewrite_users_file(
                    &ctx.client,
                    &ns,
                    &u.spec.cluster_ref.name,
                    Some(&u.name_any()),
                )
                .await?;
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => UserError::Finalizer(other.to_string()),
    })
}

/// A random secret key: 32 letters and digits.
fn new_secret_key() -> String {
    rand::rng()
        .sample_iter(&rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// The user's credentials Secret, then the cluster's users file, then the status.
async fn admit(user: &MessageQueueUser, ns: &str, ctx: &UserContext) -> Result<Action, UserError> {
    let name = user.name_any();
    let cluster = &user.spec.cluster_ref.name;
    let api: Api<MessageQueueUser> = Api::namespaced(ctx.client.clone(), ns);
    let old = user.status.clone().unwrap_or_default();
    let generation = user.metadata.generation;
    let secret_name = user
        .spec
        .secret_name
        .clone()
        .unwrap_or_else(|| name.clone());
    let status = |ready: bool, reason: &str, message: String| MessageQueueUserStatus {
        observed_generation: generation,
        access_key: Some(name.clone()),
        secret_name: Some(secret_name.clone()),
        conditions: vec![condition_of(
            &old.conditions,
            "Ready",
            ready,
            reason,
            message,
            generation,
            Timestamp::now(),
        )],
    };
    let clusters: Api<MessageQueueCluster> = Api::namespaced(ctx.client.clone(), ns);
    if clusters.get_opt(cluster).await?.is_none() {
        let s = status(
            false,
            "ClusterNotFound",
            format!("no MessageQueueCluster {cluster} in {ns}"),
        );
        apply_status(&api, &name, &s).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let existing_key = secrets
        .get_opt(&secret_name)
        .await?
        .and_then(|s| secret_value(&s, SECRET_KEY))
        .filter(|k| k.len() > 6);
    let secret_key = existing_key.unwrap_or_else(new_secret_key);
    let owner = user
        .controller_owner_ref(&())
        .ok_or(UserError::NoNamespace)?;
    apply(
        &ctx.client,
        ns,
        &user_secret(secret_name.clone(), ns, cluster, owner, &name, &secret_key),
    )
    .await?;
    let listed = rewrite_users_file(&ctx.client, ns, cluster, None).await?;
    let s = status(
        true,
        "Ready",
        format!("credentials in Secret {secret_name}; one of the {listed} users of {cluster}"),
    );
    apply_status(&api, &name, &s).await?;
    Ok(Action::requeue(RESYNC))
}

fn secret_value(secret: &Secret, key: &str) -> Option<String> {
    let bytes = secret.data.as_ref()?.get(key)?;
    String::from_utf8(bytes.0.clone()).ok()
}

/// Rewrites the users file of `cluster` from its users (without `leaving`, being deleted).
/// Returns how many it lists. A user whose Secret is not written yet is left out until its
/// own sync, which rewrites the file again.
async fn rewrite_users_file(
    client: &Client,
    ns: &str,
    cluster: &str,
    leaving: Option<&str>,
) -> Result<usize, UserError> {
    let clusters: Api<MessageQueueCluster> = Api::namespaced(client.clone(), ns);
    let Some(mqc) = clusters.get_opt(cluster).await? else {
        return Ok(0); // the cluster and its users file are gone
    };
    let users: Api<MessageQueueUser> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let mut members = Vec::new();
    for u in users.list(&ListParams::default()).await? {
        let name = u.name_any();
        if u.spec.cluster_ref.name != cluster
            || u.metadata.deletion_timestamp.is_some()
            || Some(name.as_str()) == leaving
        {
            continue;
        }
        let secret_name = u.spec.secret_name.clone().unwrap_or_else(|| name.clone());
        if let Some(key) = secrets
            .get_opt(&secret_name)
            .await?
            .and_then(|s| secret_value(&s, SECRET_KEY))
        {
            members.push((name, key, u));
        }
    }
    let entries: Vec<UserEntry<'_>> = members
        .iter()
        .map(|(name, key, u)| UserEntry {
            access_key: name,
            secret_key: key,
            spec: &u.spec,
        })
        .collect();
    let file = users_file(&entries);
    apply(
        client,
        ns,
        &users_secret(
            names::acl_users(cluster),
            ns,
            cluster,
            owner_reference(&mqc),
            file,
        ),
    )
    .await?;
    Ok(entries.len())
}
