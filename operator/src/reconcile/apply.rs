//! Applying, the IO step of a reconcile: server-side apply of a [`Plan`] under the one field
//! manager, the status write through the status subresource, and event publishing. No decisions
//! are made here; they are all in the pure `plan` and `status` modules.

use std::collections::BTreeMap;
use std::fmt::Debug;

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::Event;
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::conditions::Reason;
use super::context::{Context, Error, FIELD_MANAGER};
use super::expand::{expand, Expanded};
use super::observe::ExistingGroups;
use super::plan::{claim_storage, GroupAction, Plan, Stall};
use super::roll::RollStep;
use super::status::{Notice, Observed};
use crate::crd::{MessageQueueCluster, MessageQueueClusterStatus};

/// Server-side apply of one namespaced object under [`FIELD_MANAGER`] (forced: the operator owns
/// every field it sets). Returns the object as the API server stored it.
pub async fn apply<K>(client: &Client, ns: &str, obj: &K) -> Result<K, Error>
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

/// Creates `obj` unless an object of its name exists (whoever keeps it from then on).
pub async fn create_if_absent<K>(client: &Client, ns: &str, obj: &K) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Serialize
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.create(&Default::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Applies `plan` in order (name servers, then each group's ConfigMap, Service, StatefulSet and
/// PDB) and returns the StatefulSets for the status; a group the plan keeps is reported as it
/// was listed in `existing`.
pub async fn apply_plan(
    client: &Client,
    ns: &str,
    plan: &Plan,
    existing: &ExistingGroups,
) -> Result<Observed, Error> {
    let security = &plan.security;
    if let Some(secret) = &security.cluster_secret {
        apply(client, ns, secret).await?;
    }
    if let Some(secret) = &security.users_file {
        create_if_absent(client, ns, secret).await?;
    }
    for policy in &security.network_policies {
        apply(client, ns, policy).await?;
    }
    let ns_objects = &plan.name_server;
    apply(client, ns, &ns_objects.headless_service).await?;
    apply(client, ns, &ns_objects.client_service).await?;
    let name_server = apply(client, ns, &ns_objects.statefulset).await?;
    apply(client, ns, &ns_objects.pdb).await?;

    let mut groups = BTreeMap::new();
    let (mut expansions, mut stalls) = (Vec::new(), Vec::new());
    for g in &plan.groups {
        let sts = match &g.action {
            GroupAction::Keep | GroupAction::Drain => existing.get(&g.index).cloned(),
            GroupAction::Apply(objects) => {
                apply(client, ns, &objects.config_map).await?;
                apply(client, ns, &objects.service).await?;
                let sts = apply(client, ns, &objects.statefulset).await?;
                apply(client, ns, &objects.pdb).await?;
                Some(sts)
            }
            GroupAction::Expand(objects) => {
                // The StatefulSet as it is until the next reconcile creates it again.
                let current = existing.get(&g.index).cloned();
                let size = claim_storage(&objects.statefulset).and_then(|(size, _)| size);
                if let (Some(sts), Some(size)) = (&current, size) {
                    match expand(client, ns, sts, &size).await? {
                        Expanded::Requested(claims) => expansions.push(format!(
                            "{}: claims {} grown to {size}; the StatefulSet is recreated with the \
                             new claim template, its pods kept",
                            g.name,
                            if claims.is_empty() {
                                "(none to grow)".to_string()
                            } else {
                                claims.join(", ")
                            }
                        )),
                        Expanded::Refused(why) => stalls.push(Stall {
                            reason: Reason::StorageExpansionRefused,
                            message: format!("{}: {why}; the group is left unchanged", g.name),
                        }),
                    }
                }
                // Everything but the StatefulSet, which stays as it is until then.
                apply(client, ns, &objects.config_map).await?;
                apply(client, ns, &objects.service).await?;
                apply(client, ns, &objects.pdb).await?;
                current
            }
        };
        if let Some(sts) = sts {
            groups.insert(g.index, sts);
        }
    }
    Ok(Observed {
        name_server,
        groups,
        rollouts: BTreeMap::new(),
        drains: BTreeMap::new(),
        expansions,
        stalls,
    })
}

/// Carries out `step` of the roll of group `group` (its broker name): deletes the pod
/// (conditional on its uid, so a pod recreated meanwhile is spared) or asks `controller` for
/// the switchover. Returns what happened: the step itself, or a wait saying why the
/// controller refused the switchover (the next reconcile plans again).
pub async fn carry_out_roll(
    client: &Client,
    ns: &str,
    controller: &conveyor::controller::Controller,
    group: &str,
    step: RollStep,
) -> Result<RollStep, Error> {
    match &step {
        RollStep::Restart { pod, uid, .. } => {
            let api: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), ns);
            let params = kube::api::DeleteParams {
                preconditions: uid.clone().map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            tracing::info!(group, pod, "rolling restart: deleting the pod");
            match api.delete(pod, &params).await {
                Ok(_) => Ok(step),
                // Already gone or replaced: the next reconcile sees the new pod.
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(RollStep::Wait(
                    format!("{pod} changed before its restart: {}", e.message),
                )),
                Err(e) => Err(e.into()),
            }
        }
        RollStep::Switchover { from, to, to_id } => {
            // A hand-over: the master holds writes until the target has its whole log, then
            // the target is elected (on the master's next heartbeat).
            match controller.switchover(group, *to_id) {
                Ok(conveyor::controller::Switchover::Pending) => Ok(RollStep::Wait(format!(
                    "switchover from {from} to {to} under way"
                ))),
                Ok(_) => {
                    tracing::info!(group, from, to, "rolling restart: switchover");
                    Ok(step)
                }
                Err(e) => {
                    tracing::warn!(group, to, error = %e, "switchover refused");
                    Ok(RollStep::Wait(format!("switchover to {to} refused: {e}")))
                }
            }
        }
        RollStep::UpToDate | RollStep::Wait(_) => Ok(step),
    }
}

/// Removes drained group `index` of `mqc`: its StatefulSet (whose pods unregister from the
/// name servers as they stop), ConfigMap, Service and PodDisruptionBudget. Its volume claims
/// stay (retention policy Retain), as with any StatefulSet scale-in.
pub async fn remove_group(
    client: &Client,
    ns: &str,
    mqc: &MessageQueueCluster,
    index: i32,
) -> Result<(), Error> {
    use k8s_openapi::api::apps::v1::StatefulSet;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let cluster = kube::ResourceExt::name_any(mqc);
    let group = crate::builders::names::broker_group(&cluster, index);
    let config = crate::builders::names::broker_config(&cluster, index);
    delete::<StatefulSet>(client, ns, &group).await?;
    delete::<ConfigMap>(client, ns, &config).await?;
    delete::<Service>(client, ns, &group).await?;
    let master = crate::builders::names::broker_master(&cluster, index);
    delete::<Service>(client, ns, &master).await?;
    delete::<k8s_openapi::api::discovery::v1::EndpointSlice>(client, ns, &master).await?;
    delete::<PodDisruptionBudget>(client, ns, &group).await
}

/// Under failover, applies each group's master Service and returns the groups' stable
/// addresses (`cluster-ip:port`), which the brokers' configuration needs: the cluster IP
/// exists only once the API server has allocated it.
pub async fn master_services(
    client: &Client,
    ns: &str,
    mqc: &MessageQueueCluster,
) -> Result<BTreeMap<i32, String>, Error> {
    let mut out = BTreeMap::new();
    for group in 0..mqc.spec.broker.groups.max(1) {
        let service = apply(
            client,
            ns,
            &crate::builders::broker_master_service(mqc, group),
        )
        .await?;
        if let Some(ip) = service
            .spec
            .and_then(|s| s.cluster_ip)
            .filter(|ip| !ip.is_empty() && ip != "None")
        {
            let addr = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{}", crate::builders::BROKER_PORT),
                _ => format!("{ip}:{}", crate::builders::BROKER_PORT),
            };
            out.insert(group, addr);
        }
    }
    Ok(out)
}

async fn delete<K>(client: &Client, ns: &str, name: &str) -> Result<(), Error>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Writes `status` through the status subresource (server-side apply, forced).
pub async fn patch_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    status: &MessageQueueClusterStatus,
) -> Result<(), Error> {
    let api: Api<MessageQueueCluster> = Api::namespaced(ctx.client.clone(), ns);
    apply_status(&api, name, status).await?;
    Ok(())
}

/// Writes `status` of object `name` of any of the operator's kinds through its status
/// subresource: server-side apply as the operator's field manager, forced (the operator owns
/// its resources' status).
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<(), kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let body = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
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

/// Publishes `notices` as events on `mqc`, in order; a failure to record one is logged, never
/// fatal.
pub async fn publish(ctx: &Context, mqc: &MessageQueueCluster, notices: &[Notice]) {
    for n in notices {
        let ev = Event {
            type_: n.type_,
            reason: n.reason.into(),
            note: Some(n.note.clone()),
            action: n.action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder.publish(&ev, &mqc.object_ref(&())).await {
            tracing::warn!(error = %e, "cannot publish event");
        }
    }
}
