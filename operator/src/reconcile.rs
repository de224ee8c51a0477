//! The reconciler: server-side applies the desired objects under one field manager, then writes
//! kstatus conditions. Unsatisfiable specs (group scale-down, storage changes, bad config
//! overrides) end in `Stalled=True` plus a Warning event and a slow requeue, never a hot loop.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::builders::{self, names, Component, GROUP_LABEL};
use crate::crd::{BrokerGroupStatus, MessageQueueCluster, MessageQueueClusterStatus};

/// The one field manager of every apply.
pub const FIELD_MANAGER: &str = "conveyor-operator";
/// Requeue while pods are still rolling out.
pub const PROGRESS_REQUEUE: Duration = Duration::from_secs(15);
/// Requeue of a settled or stalled cluster (changes arrive through the watches anyway).
pub const IDLE_REQUEUE: Duration = Duration::from_secs(300);
/// First retry after an error; doubles per consecutive failure up to [`MAX_BACKOFF`].
pub const BASE_BACKOFF: Duration = Duration::from_secs(5);
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// Reconciler errors (all transient: API errors are retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object has no name")]
    MissingName,
}

/// Shared state of one controller (no process-global state).
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    /// Consecutive failures per object, for the error backoff.
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(client: Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance,
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            failures: Mutex::new(HashMap::new()),
        }
    }

    fn key(mqc: &MessageQueueCluster) -> String {
        format!("{}/{}", builders::namespace(mqc), mqc.name_any())
    }

    /// Records a failure and returns the delay before the next attempt.
    pub fn next_backoff(&self, mqc: &MessageQueueCluster) -> Duration {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = f.entry(Self::key(mqc)).or_insert(0);
        let delay = BASE_BACKOFF
            .saturating_mul(1u32 << (*n).min(10))
            .min(MAX_BACKOFF);
        *n = n.saturating_add(1);
        delay
    }

    fn reset_backoff(&self, mqc: &MessageQueueCluster) {
        let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        f.remove(&Self::key(mqc));
    }
}

/// Why a spec cannot be carried out as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    pub reason: &'static str,
    pub message: String,
}

/// Server-side apply of one namespaced object under [`FIELD_MANAGER`].
async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
{
    let name = obj.meta().name.clone().ok_or(Error::MissingName)?;
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    Ok(api
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await?)
}

/// Builds a condition, keeping `lastTransitionTime` when the status did not change.
pub fn condition(
    old: &[Condition],
    type_: &str,
    status: bool,
    reason: &str,
    message: String,
    generation: Option<i64>,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_string();
    let last = old
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(Timestamp::now()));
    Condition {
        type_: type_.into(),
        status,
        reason: reason.into(),
        message,
        observed_generation: generation,
        last_transition_time: last,
    }
}

/// True when a StatefulSet has rolled out its current spec and all pods are ready.
pub fn statefulset_ready(sts: &StatefulSet) -> bool {
    let want = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(st) = &sts.status else { return false };
    let current_gen = st.observed_generation.unwrap_or(0) >= sts.metadata.generation.unwrap_or(0);
    current_gen
        && st.ready_replicas.unwrap_or(0) >= want
        && st.updated_replicas.unwrap_or(0) >= want
        && st.replicas <= want
}

fn ready_replicas(sts: &StatefulSet) -> i32 {
    sts.status
        .as_ref()
        .and_then(|s| s.ready_replicas)
        .unwrap_or(0)
}

/// The storage request and class of a StatefulSet's `data` claim template.
fn claim_storage(sts: &StatefulSet) -> Option<(Option<String>, Option<String>)> {
    let claim = sts
        .spec
        .as_ref()?
        .volume_claim_templates
        .as_ref()?
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("data"))?;
    let spec = claim.spec.as_ref()?;
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| q.0.clone());
    Some((size, spec.storage_class_name.clone()))
}

/// Checks the spec against what exists: groups cannot be removed and claim templates cannot
/// change (both need draining/migration that a later version adds).
pub fn find_stalls(
    mqc: &MessageQueueCluster,
    existing: &BTreeMap<i32, StatefulSet>,
) -> (Vec<Stall>, Vec<i32>) {
    let mut stalls = Vec::new();
    let mut frozen = Vec::new();
    let groups = mqc.spec.broker.groups;
    let extra: Vec<String> = existing
        .keys()
        .filter(|g| **g >= groups)
        .map(|g| names::broker_group(&mqc.name_any(), *g))
        .collect();
    if !extra.is_empty() {
        stalls.push(Stall {
            reason: "GroupScaleDownRefused",
            message: format!(
                "spec.broker.groups is {groups} but {} exist ({}); removing broker groups needs draining, which is not supported yet: restore spec.broker.groups to {} or more",
                existing.keys().filter(|g| **g >= groups).count() + groups as usize,
                extra.join(", "),
                existing.keys().max().map(|m| m + 1).unwrap_or(groups)
            ),
        });
    }
    let storage = &mqc.spec.broker.storage;
    for (g, sts) in existing.iter().filter(|(g, _)| **g < groups) {
        if let Some((size, class)) = claim_storage(sts) {
            let class_changed =
                storage.storage_class_name.is_some() && class != storage.storage_class_name;
            if size.as_deref() != Some(storage.size.as_str()) || class_changed {
                frozen.push(*g);
                stalls.push(Stall {
                    reason: "StorageChangeRefused",
                    message: format!(
                        "{}: volume claim templates are immutable (have size {} class {}, spec asks {} class {}); the group is left unchanged",
                        sts.name_any(),
                        size.unwrap_or_default(),
                        class.unwrap_or_else(|| "<default>".into()),
                        storage.size,
                        storage.storage_class_name.clone().unwrap_or_else(|| "<default>".into()),
                    ),
                });
            }
        }
    }
    (stalls, frozen)
}

/// Reconciles one cluster.
pub async fn reconcile(mqc: Arc<MessageQueueCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    let result = reconcile_inner(&mqc, &ctx).await;
    if result.is_ok() {
        ctx.reset_backoff(&mqc);
    }
    result
}

async fn reconcile_inner(mqc: &MessageQueueCluster, ctx: &Context) -> Result<Action, Error> {
    if mqc.metadata.deletion_timestamp.is_some() {
        // Owner references let the garbage collector remove the owned objects; PVCs are kept
        // (retention policy Retain), so no finalizer is needed.
        return Ok(Action::await_change());
    }
    let ns = builders::namespace(mqc);
    let name = mqc.metadata.name.clone().ok_or(Error::MissingName)?;
    let generation = mqc.metadata.generation;
    let old_status = mqc.status.clone().unwrap_or_default();
    let old = old_status.conditions.as_slice();

    if mqc.paused() {
        let mut status = old_status.clone();
        status.observed_generation = generation;
        let msg = format!(
            "annotation {}=true: no changes are applied",
            crate::crd::PAUSE_ANNOTATION
        );
        let mut conditions: Vec<Condition> = old
            .iter()
            .filter(|c| !matches!(c.type_.as_str(), "Paused" | "Reconciling"))
            .cloned()
            .collect();
        conditions.push(condition(
            old,
            "Paused",
            true,
            "PauseAnnotation",
            msg.clone(),
            generation,
        ));
        conditions.push(condition(
            old,
            "Reconciling",
            false,
            "Paused",
            msg.clone(),
            generation,
        ));
        if !conditions.iter().any(|c| c.type_ == "Ready") {
            conditions.push(condition(
                old,
                "Ready",
                false,
                "Paused",
                msg.clone(),
                generation,
            ));
        }
        if !conditions.iter().any(|c| c.type_ == "Stalled") {
            conditions.push(condition(
                old,
                "Stalled",
                false,
                "Paused",
                msg.clone(),
                generation,
            ));
        }
        status.conditions = conditions;
        if !old
            .iter()
            .any(|c| c.type_ == "Paused" && c.status == "True")
        {
            publish(ctx, mqc, EventType::Normal, "Paused", "Pause", msg).await;
        }
        patch_status(ctx, &ns, &name, &status).await?;
        return Ok(Action::await_change());
    }

    // Existing broker groups, by index.
    let sts_api: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!(
        "app.kubernetes.io/instance={name},app.kubernetes.io/component={}",
        Component::Broker.as_str()
    );
    let mut existing = BTreeMap::new();
    for sts in sts_api
        .list(&ListParams::default().labels(&selector))
        .await?
        .items
    {
        let owned = sts
            .owner_references()
            .iter()
            .any(|o| Some(&o.uid) == mqc.metadata.uid.as_ref());
        let group = sts
            .labels()
            .get(GROUP_LABEL)
            .and_then(|g| g.parse::<i32>().ok());
        if let (true, Some(g)) = (owned, group) {
            existing.insert(g, sts);
        }
    }
    let (mut stalls, frozen) = find_stalls(mqc, &existing);

    // Render every group's configuration first: a bad override stalls the brokers as a whole.
    let mut configs = Vec::new();
    for g in 0..mqc.spec.broker.groups {
        match builders::broker_config_map(mqc, g) {
            Ok(cm) => configs.push((g, cm)),
            Err(e) => {
                stalls.push(Stall {
                    reason: "InvalidConfig",
                    message: e.to_string(),
                });
                configs.clear();
                break;
            }
        }
    }

    // Name servers.
    apply(
        &ctx.client,
        &ns,
        &builders::name_server_headless_service(mqc),
    )
    .await?;
    apply(&ctx.client, &ns, &builders::name_server_client_service(mqc)).await?;
    let namesrv = apply(&ctx.client, &ns, &builders::name_server_statefulset(mqc)).await?;
    apply(&ctx.client, &ns, &builders::name_server_pdb(mqc)).await?;

    // Broker groups.
    let mut all_ready = statefulset_ready(&namesrv);
    let mut groups = Vec::new();
    for (g, cm) in &configs {
        let g = *g;
        let group_name = names::broker_group(&name, g);
        let sts = if frozen.contains(&g) {
            existing.get(&g).cloned()
        } else {
            apply::<ConfigMap>(&ctx.client, &ns, cm).await?;
            apply::<Service>(&ctx.client, &ns, &builders::broker_headless_service(mqc, g)).await?;
            let sts = apply(&ctx.client, &ns, &builders::broker_statefulset(mqc, g, cm)).await?;
            apply::<PodDisruptionBudget>(&ctx.client, &ns, &builders::broker_pdb(mqc, g)).await?;
            Some(sts)
        };
        let ready = sts.as_ref().map(ready_replicas).unwrap_or(0);
        all_ready &= sts.as_ref().is_some_and(statefulset_ready);
        let replicas = sts
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.replicas)
            .unwrap_or(mqc.spec.broker.replicas_per_group);
        groups.push(BrokerGroupStatus {
            pods: (0..replicas).map(|i| names::pod(&group_name, i)).collect(),
            ready_replicas: ready,
            // Ordinal 0 is the master until failover promotion exists.
            master: (replicas > 0).then(|| names::pod(&group_name, 0)),
            name: group_name,
        });
    }
    all_ready &= configs.len() as i32 == mqc.spec.broker.groups;

    let stalled = !stalls.is_empty();
    let stall_message = stalls
        .iter()
        .map(|s| s.message.clone())
        .collect::<Vec<_>>()
        .join("; ");
    let stall_reason = stalls.first().map(|s| s.reason).unwrap_or("Satisfiable");
    let ready = all_ready && !stalled;
    let mut conditions = vec![
        condition(
            old,
            "Ready",
            ready,
            if ready {
                "AllPodsReady"
            } else if stalled {
                stall_reason
            } else {
                "Progressing"
            },
            if ready {
                "all name servers and broker groups are ready".into()
            } else if stalled {
                stall_message.clone()
            } else {
                "waiting for StatefulSets to roll out and pods to become ready".into()
            },
            generation,
        ),
        condition(
            old,
            "Reconciling",
            !ready && !stalled,
            if ready || stalled {
                "Settled"
            } else {
                "Progressing"
            },
            if !ready && !stalled {
                "applied the desired objects; waiting for pods".into()
            } else {
                String::new()
            },
            generation,
        ),
        condition(
            old,
            "Stalled",
            stalled,
            stall_reason,
            stall_message.clone(),
            generation,
        ),
    ];
    if old.iter().any(|c| c.type_ == "Paused") {
        conditions.push(condition(
            old,
            "Paused",
            false,
            "Resumed",
            String::new(),
            generation,
        ));
    }
    let status = MessageQueueClusterStatus {
        observed_generation: generation,
        conditions,
        name_server_addresses: Some(builders::name_server_addresses(mqc)),
        name_server_service: Some(builders::name_server_service_address(mqc)),
        groups,
    };
    patch_status(ctx, &ns, &name, &status).await?;

    for s in &stalls {
        publish(
            ctx,
            mqc,
            EventType::Warning,
            s.reason,
            "Reconcile",
            s.message.clone(),
        )
        .await;
    }
    let was_ready = old.iter().any(|c| c.type_ == "Ready" && c.status == "True");
    if ready && !was_ready {
        publish(
            ctx,
            mqc,
            EventType::Normal,
            "Ready",
            "Reconcile",
            "cluster is ready".into(),
        )
        .await;
    }
    Ok(if stalled || ready {
        Action::requeue(IDLE_REQUEUE)
    } else {
        Action::requeue(PROGRESS_REQUEUE)
    })
}

async fn patch_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &MessageQueueClusterStatus,
) -> Result<(), Error> {
    let api: Api<MessageQueueCluster> = Api::namespaced(ctx.client.clone(), ns);
    let body = serde_json::json!({
        "apiVersion": MessageQueueCluster::api_version(&()),
        "kind": MessageQueueCluster::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Publishes an event; a failure to record one is logged, never fatal.
async fn publish(
    ctx: &Context,
    mqc: &MessageQueueCluster,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(note),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, &mqc.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot publish event");
    }
}

/// Error policy: exponential backoff per object (5 s doubling to 5 min), never a hot loop.
pub fn error_policy(mqc: Arc<MessageQueueCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    let delay = ctx.next_backoff(&mqc);
    tracing::warn!(cluster = %Context::key(&mqc), %error, ?delay, "reconcile failed; retrying");
    Action::requeue(delay)
}

#[cfg(test)]
mod tests;
