//! Runs every ConsumerAutoscaler: each `pollingIntervalSeconds` it reads the target's
//! `/scale`, the backlog and the queue cap, lets [`decide`] choose the count, sets it through
//! `/scale` (the only write to the target: its owner keeps the rest of its spec), records an
//! event for every change and writes the status. The HPA's memory of recent
//! recommendations lives here, per autoscaler, and in the status (`history`, with the activity
//! time and the failure count), so it survives a restart of the operator or a new leader.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::{watcher, Controller};
use kube::{Client, ResourceExt};

use super::metrics::{broker_backlog, default_query, prometheus_backlog, queue_cap};
use super::recommend::Decision;
use super::recommend::{decide, Direction, Memory, Rules};
use super::resource::{AutoscalerMode, ConsumerAutoscaler, ConsumerAutoscalerSpec};
use super::status::{after_poll, events_of, held, Hold, Poll};
use crate::crd::PAUSE_ANNOTATION;
use crate::reconcile::context::FIELD_MANAGER;

/// A memory unused this long (ms) is dropped: twice the longest polling interval (3,600 s),
/// so only a deleted autoscaler's goes.
const FORGET_AFTER_MS: i64 = 2 * 3_600_000;

/// Why a poll could not run (retried with a backoff; nothing is changed).
#[derive(Debug, thiserror::Error)]
pub enum AutoscalerError {
    /// An API call failed.
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    /// The object has no namespace (it is namespaced: only a broken cache gives this).
    #[error("the autoscaler has no namespace")]
    NoNamespace,
}

/// What every poll shares.
struct AutoscalerContext {
    /// Client of every API call.
    client: Client,
    /// This replica's name in the events it records.
    instance: String,
    /// The HPA's memory of each autoscaler, by uid, with when it was last used (ms): one not
    /// used for [`FORGET_AFTER_MS`] belongs to a deleted autoscaler and is dropped.
    memories: Mutex<HashMap<String, (i64, Memory)>>,
    /// Admin clients of the clusters the autoscalers read.
    admins: crate::rocketmq::AdminPool,
    /// Autoscalers (by uid) known to have no ScaledObject of theirs since their last poll in
    /// mode Keda: a Native poll looks for one only once, not on every poll.
    without_scaled_object: Mutex<HashSet<String>>,
}

/// Runs the autoscalers of `namespace` (all when `None`) until the future is dropped.
pub async fn run(client: Client, namespace: Option<String>, instance: Option<String>) {
    let api: Api<ConsumerAutoscaler> = match &namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let ctx = Arc::new(AutoscalerContext {
        instance: instance.unwrap_or_else(|| FIELD_MANAGER.into()),
        client,
        memories: Mutex::new(HashMap::new()),
        admins: Default::default(),
        without_scaled_object: Mutex::new(HashSet::new()),
    });
    Controller::new(api, watcher::Config::default())
        .run(poll, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "autoscaler poll error");
            }
        })
        .await;
}

fn error_policy(
    cas: Arc<ConsumerAutoscaler>,
    error: &AutoscalerError,
    _ctx: Arc<AutoscalerContext>,
) -> Action {
    tracing::warn!(autoscaler = %cas.name_any(), %error, "autoscaler poll failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// The rules of `spec`, or why they cannot be used.
pub fn rules_of(spec: &ConsumerAutoscalerSpec) -> Result<Rules, String> {
    let count = |v: i32| v.max(0) as u32;
    Rules {
        target: spec.target_backlog_per_replica.max(1) as u64,
        activation: spec.activation_backlog.max(0) as u64,
        min: count(spec.min_replicas),
        max: count(spec.max_replicas).max(1),
        cooldown_s: count(spec.cooldown_period_seconds),
        fallback: spec
            .fallback
            .as_ref()
            .map(|f| (count(f.failure_threshold).max(1), count(f.replicas))),
        up: Direction::up_default(),
        down: Direction::down_default(),
    }
    .with_behavior(spec.behavior.as_ref())
}

/// One poll of one autoscaler.
async fn poll(
    cas: Arc<ConsumerAutoscaler>,
    ctx: Arc<AutoscalerContext>,
) -> Result<Action, AutoscalerError> {
    let ns = cas.namespace().ok_or(AutoscalerError::NoNamespace)?;
    let name = cas.name_any();
    let spec = &cas.spec;
    let every = Action::requeue(Duration::from_secs(
        spec.polling_interval_seconds.max(1) as u64
    ));
    let api: Api<ConsumerAutoscaler> = Api::namespaced(ctx.client.clone(), &ns);
    let old = cas.status.clone().unwrap_or_default();
    let generation = cas.metadata.generation;
    let now = Timestamp::now();
    if cas.annotations().get(PAUSE_ANNOTATION).map(String::as_str) == Some("true") {
        let why =
            format!("{PAUSE_ANNOTATION} is \"true\": the target's replicas are left as they are");
        crate::reconcile::apply::apply_status(
            &api,
            &name,
            &held(&old, generation, Hold::Paused, &why, now),
        )
        .await?;
        return Ok(every);
    }
    // What the spec names must be usable: the rules, and the target's kind (discovery).
    let usable = async {
        let rules = rules_of(spec)?;
        let target = target_api(&ctx.client, &ns, spec).await?;
        Ok::<_, String>((rules, target))
    };
    let (rules, target) = match usable.await {
        Ok(u) => u,
        Err(why) => {
            crate::reconcile::apply::apply_status(
                &api,
                &name,
                &held(&old, generation, Hold::InvalidSpec, &why, now),
            )
            .await?;
            return Ok(every);
        }
    };
    // One autoscaler per target: a younger one, or one beside a foreign HPA, holds (and takes
    // its own ScaledObject away, so that KEDA does not scale for it either).
    if let Some(why) = conflict(&ctx.client, &ns, &cas).await? {
        remove_scaled_object(&ctx, &cas).await?;
        crate::reconcile::apply::apply_status(
            &api,
            &name,
            &held(&old, generation, Hold::Conflict, &why, now),
        )
        .await?;
        return Ok(every);
    }
    let scale = target.get_scale(&spec.scale_target_ref.name).await?;
    let current = scale.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as u32;

    let observed = observe(&ctx, &ns, spec).await;
    let (backlog, cap) = match &observed {
        Ok((b, c)) => (Ok(*b), *c),
        Err(why) => (Err(why.as_str()), None),
    };
    if spec.mode == AutoscalerMode::Keda {
        return keda_poll(&ctx, &cas, &api, current, backlog, cap, now).await;
    }
    // Switched from Keda to Native: the ScaledObject (and KEDA's HPA with it) goes first.
    remove_scaled_object(&ctx, &cas).await?;
    let uid = cas.uid().unwrap_or_default();
    let now_ms = now.as_millisecond();
    let (decision, failures, last_active_ms, events) = {
        let mut memories = ctx.memories.lock().unwrap_or_else(|e| e.into_inner());
        memories.retain(|_, (used, _)| now_ms - *used < FORGET_AFTER_MS);
        // A deleted autoscaler's mark goes with its memory.
        ctx.without_scaled_object
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|uid| memories.contains_key(uid));
        // What a restarted operator or a new leader must not forget: the cooldown, the
        // failures, and the recommendations and changes the windows and policies look back on.
        let (used, memory) = memories.entry(uid).or_insert_with(|| {
            let memory = Memory::resumed(
                old.last_active_time.as_ref().map(|t| t.0.as_millisecond()),
                old.consecutive_failures.max(0) as u32,
                events_of(&old),
            );
            (now_ms, memory)
        });
        *used = now_ms;
        let d = decide(&rules, current, backlog, cap, memory, now_ms);
        (d, memory.failures, memory.last_active_ms, memory.events())
    };
    if decision.desired != current {
        let patch = serde_json::json!({ "spec": { "replicas": decision.desired } });
        target
            .patch_scale(
                &spec.scale_target_ref.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await?;
        tracing::info!(autoscaler = %name, namespace = %ns, from = current, to = decision.desired, reason = %decision.reason, "scaled");
        let note = format!(
            "{} {}: {current} → {} replicas ({})",
            spec.scale_target_ref.kind,
            spec.scale_target_ref.name,
            decision.desired,
            decision.reason
        );
        crate::events::record(
            &ctx.client,
            &ctx.instance,
            cas.as_ref(),
            decision.fallback,
            "Scaled",
            "Scale",
            note,
        )
        .await;
    }
    let status = after_poll(
        &old,
        generation,
        &Poll {
            current,
            backlog,
            queue_cap: cap,
            decision: &decision,
            failures,
            last_active: last_active_ms.and_then(|ms| Timestamp::from_millisecond(ms).ok()),
            events,
        },
        now,
    );
    crate::reconcile::apply::apply_status(&api, &name, &status).await?;
    Ok(every)
}

/// A poll in `Keda` mode: the ScaledObject is written (server-side apply) with the current
/// cap, whenever the cap could be read; KEDA scales. The status shows what the operator read.
async fn keda_poll(
    ctx: &AutoscalerContext,
    cas: &ConsumerAutoscaler,
    api: &Api<ConsumerAutoscaler>,
    current: u32,
    backlog: Result<u64, &str>,
    cap: Option<u32>,
    now: Timestamp,
) -> Result<Action, AutoscalerError> {
    let spec = &cas.spec;
    let ns = cas.namespace().ok_or(AutoscalerError::NoNamespace)?;
    let every = Action::requeue(Duration::from_secs(
        spec.polling_interval_seconds.max(1) as u64
    ));
    let old = cas.status.clone().unwrap_or_default();
    if backlog.is_ok() {
        let cluster = spec.cluster_ref.as_ref().map(|c| c.name.as_str());
        let so = super::keda::scaled_object(cas, cap, cluster);
        // Written below: a later Native poll must look for it again.
        ctx.without_scaled_object
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&cas.uid().unwrap_or_default());
        let written = match apply_trigger_authentication(&ctx.client, &ns, cas).await {
            Ok(()) => apply_keda(&scaled_objects(&ctx.client, &ns), &so).await,
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            let why = format!("{e} (is KEDA installed?)");
            crate::reconcile::apply::apply_status(
                api,
                &cas.name_any(),
                &held(&old, cas.metadata.generation, Hold::InvalidSpec, &why, now),
            )
            .await?;
            return Ok(every);
        }
    }
    let decision = Decision {
        desired: current,
        active: backlog.is_ok_and(|b| b > spec.activation_backlog.max(0) as u64),
        capped: None,
        fallback: false,
        reason: "KEDA scales (mode Keda)".into(),
    };
    let status = after_poll(
        &old,
        cas.metadata.generation,
        &Poll {
            current,
            backlog,
            queue_cap: cap,
            decision: &decision,
            failures: u32::from(backlog.is_err()),
            last_active: None,
            // KEDA's HPA decides: no memory of ours to keep.
            events: Default::default(),
        },
        now,
    );
    crate::reconcile::apply::apply_status(api, &cas.name_any(), &status).await?;
    Ok(every)
}

/// Why `cas` must not scale its target ([`super::conflicts::conflict`] over the namespace's
/// ConsumerAutoscalers and HPAs), if it must not.
async fn conflict(
    client: &Client,
    ns: &str,
    cas: &ConsumerAutoscaler,
) -> Result<Option<String>, AutoscalerError> {
    let lp = ListParams::default();
    let autoscalers = Api::<ConsumerAutoscaler>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?;
    let hpas = Api::<HorizontalPodAutoscaler>::namespaced(client.clone(), ns)
        .list(&lp)
        .await?;
    Ok(super::conflicts::conflict(
        cas,
        &autoscalers.items,
        &hpas.items,
    ))
}

/// The KEDA ScaledObject API of `ns`.
fn scaled_objects(client: &Client, ns: &str) -> Api<DynamicObject> {
    keda_api(client, ns, super::keda::KIND, "scaledobjects")
}

fn trigger_authentications(client: &Client, ns: &str) -> Api<DynamicObject> {
    keda_api(client, ns, super::keda::AUTH_KIND, "triggerauthentications")
}

fn keda_api(client: &Client, ns: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("keda.sh", "v1alpha1", kind);
    let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// Writes the TriggerAuthentication of `cas` when its Prometheus wants credentials (before
/// the ScaledObject that names it).
async fn apply_trigger_authentication(
    client: &Client,
    ns: &str,
    cas: &ConsumerAutoscaler,
) -> Result<(), String> {
    let Some(auth) = cas
        .spec
        .prometheus
        .as_ref()
        .and_then(|p| p.authentication.as_ref())
    else {
        return Ok(());
    };
    let has_ca = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
        .get_opt(&auth.secret_name)
        .await
        .map_err(|e| e.to_string())?
        .and_then(|s| s.data)
        .is_some_and(|d| d.contains_key(super::credentials::CA));
    let Some(ta) = super::keda::trigger_authentication(cas, has_ca) else {
        return Ok(());
    };
    apply_keda(&trigger_authentications(client, ns), &ta).await
}

/// Server-side apply of `obj`, one of KEDA's objects, through `api`.
async fn apply_keda(api: &Api<DynamicObject>, obj: &serde_json::Value) -> Result<(), String> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    api.patch(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(obj),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        format!(
            "cannot write the KEDA {}: {e}",
            obj["kind"].as_str().unwrap_or_default()
        )
    })
}

/// Deletes the ScaledObject `cas` wrote in mode Keda, if there is one (it is named after the
/// autoscaler and controlled by it; anything else of that name is left alone). Without KEDA
/// (no such resource) there is nothing to delete.
async fn remove_scaled_object(
    ctx: &AutoscalerContext,
    cas: &ConsumerAutoscaler,
) -> Result<(), AutoscalerError> {
    let ns = cas.namespace().ok_or(AutoscalerError::NoNamespace)?;
    let uid = cas.uid().unwrap_or_default();
    let checked = |ctx: &AutoscalerContext| {
        ctx.without_scaled_object
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.clone());
    };
    if ctx
        .without_scaled_object
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&uid)
    {
        return Ok(());
    }
    let api = scaled_objects(&ctx.client, &ns);
    let name = cas.name_any();
    let Some(so) = api.get_opt(&name).await.or_else(|e| match e {
        kube::Error::Api(ref s) if s.code == 404 => Ok(None),
        e => Err(e),
    })?
    else {
        checked(ctx);
        return Ok(());
    };
    let ours = so
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == uid);
    if !ours {
        checked(ctx);
        return Ok(());
    }
    api.delete(&name, &Default::default()).await?;
    // Its TriggerAuthentication, if it had one (ours: owned by the same autoscaler).
    let auths = trigger_authentications(&ctx.client, &ns);
    if let Ok(Some(ta)) = auths.get_opt(&name).await {
        if ta
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid)
        {
            if let Err(e) = auths.delete(&name, &Default::default()).await {
                tracing::warn!(autoscaler = %name, error = %e, "cannot delete the TriggerAuthentication");
            }
        }
    }
    checked(ctx);
    tracing::info!(autoscaler = %name, namespace = %ns, "removed the KEDA ScaledObject: the operator scales now");
    crate::events::record(
        &ctx.client,
        &ctx.instance,
        cas,
        false,
        "ScaledObjectRemoved",
        "Delete",
        format!("ScaledObject {name} deleted: the autoscaler no longer runs in mode Keda"),
    )
    .await;
    Ok(())
}

/// The backlog and (unless idle consumers are allowed) the queue cap. A cap that cannot be
/// read fails the whole read: scaling past the queues would only add idle consumers.
async fn observe(
    ctx: &AutoscalerContext,
    ns: &str,
    spec: &ConsumerAutoscalerSpec,
) -> Result<(u64, Option<u32>), String> {
    let target = crate::rocketmq::name_servers(
        &ctx.client,
        ns,
        spec.cluster_ref.as_ref(),
        spec.name_server.as_deref(),
    )
    .await?;
    let admin = ctx.admins.get(&target)?;
    let cluster = target.cluster;
    let backlog = match &spec.prometheus {
        Some(p) => {
            let query = p.query.clone().unwrap_or_else(|| {
                default_query(cluster.as_deref(), &spec.consumer_group, &spec.topics)
            });
            let options = match &p.authentication {
                Some(auth) => super::credentials::read(&ctx.client, ns, auth).await?,
                None => Default::default(),
            };
            prometheus_backlog(&p.server_address, &query, &options).await?
        }
        None => tokio::time::timeout(
            super::metrics::READ_TIMEOUT,
            broker_backlog(&admin, &spec.consumer_group, &spec.topics),
        )
        .await
        .map_err(|_| "the brokers did not answer in time".to_string())??,
    };
    let cap = if spec.allow_idle_consumers {
        None
    } else {
        let cap = tokio::time::timeout(
            super::metrics::READ_TIMEOUT,
            queue_cap(&admin, &spec.topics),
        )
        .await
        .map_err(|_| "the name servers did not answer in time".to_string())??;
        Some(cap)
    };
    Ok((backlog, cap))
}

/// The API of the target's kind, found through discovery (any kind with `/scale`).
async fn target_api(
    client: &Client,
    ns: &str,
    spec: &ConsumerAutoscalerSpec,
) -> Result<Api<DynamicObject>, String> {
    let target = &spec.scale_target_ref;
    let (group, version) = match target.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", target.api_version.as_str()),
    };
    let gvk = GroupVersionKind::gvk(group, version, &target.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("scaleTargetRef {}/{}: {e}", target.api_version, target.kind))?;
    Ok(Api::namespaced_with(client.clone(), ns, &resource))
}
