//! Planning, the pure first step of a reconcile: from a `MessageQueueCluster` and the broker
//! groups that exist to the objects to apply and the refusals to report. No IO, so every
//! decision (what is applied, what is left alone and why) is unit-tested without an API server.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::ResourceExt;

use super::conditions::Reason;
use super::expand::{storage_change, StorageChange};
use super::observe::ExistingGroups;
use crate::builders::{self, names, OperatorEnv};
use crate::crd::MessageQueueCluster;

/// What kind of reconcile a cluster gets, decided from the object alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Being deleted: owner references let the garbage collector remove the owned objects and
    /// PVCs are kept (retention policy Retain), so there is nothing to do and no finalizer.
    Deleting,
    /// The pause annotation is set: only the status is written.
    Paused,
    /// Observe, plan, apply and report.
    Active,
}

/// Decides the [`Gate`] of `mqc`.
pub fn gate(mqc: &MessageQueueCluster) -> Gate {
    if mqc.metadata.deletion_timestamp.is_some() {
        Gate::Deleting
    } else if mqc.paused() {
        Gate::Paused
    } else {
        Gate::Active
    }
}

/// Why a spec cannot be carried out as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// Reason of the `Stalled` condition and of the Warning event.
    pub reason: Reason,
    /// What is wrong and how to fix it, for people.
    pub message: String,
}

/// The name servers' objects, in apply order.
#[derive(Debug, Clone)]
pub struct NameServerObjects {
    /// Headless Service giving each pod a stable DNS name.
    pub headless_service: Service,
    /// Service clients connect to.
    pub client_service: Service,
    /// The name-server StatefulSet.
    pub statefulset: StatefulSet,
    /// Disruption budget of the name servers.
    pub pdb: PodDisruptionBudget,
}

/// `spec.security`'s objects, applied first (the pods mount the Secrets).
#[derive(Debug, Clone, Default)]
pub struct SecurityObjects {
    /// The cluster secret, under ACL.
    pub cluster_secret: Option<Secret>,
    /// An empty users file, created only if there is none (the users controller keeps it).
    pub users_file: Option<Secret>,
    /// NetworkPolicies, when enabled.
    pub network_policies: Vec<NetworkPolicy>,
}

/// One broker group's objects, in apply order.
#[derive(Debug, Clone)]
pub struct BrokerGroupObjects {
    /// The rendered per-pod configuration.
    pub config_map: ConfigMap,
    /// Headless Service of the group.
    pub service: Service,
    /// The group's StatefulSet (its pod template carries the configuration hash).
    pub statefulset: StatefulSet,
    /// Disruption budget of the group.
    pub pdb: PodDisruptionBudget,
}

/// What happens to one broker group.
#[derive(Debug, Clone)]
pub enum GroupAction {
    /// Apply these objects.
    Apply(Box<BrokerGroupObjects>),
    /// Leave the existing group unchanged (its storage cannot change; see [`Plan::stalls`]).
    Keep,
    /// Grow the group's claims to the spec's size (see `expand`), then apply these objects:
    /// the StatefulSet, whose claim template cannot change, is deleted with its pods kept and
    /// created again by the next reconcile.
    Expand(Box<BrokerGroupObjects>),
    /// A group past `spec.broker.groups`: leave its objects, drain it (see `drain`) and remove
    /// it once empty.
    Drain,
}

/// One broker group in the plan.
#[derive(Debug, Clone)]
pub struct GroupPlan {
    /// Group index (`0..spec.broker.groups`).
    pub index: i32,
    /// The group's name: StatefulSet, Service, PDB and RocketMQ broker name.
    pub name: String,
    /// Apply or keep.
    pub action: GroupAction,
}

/// Everything one reconcile of an active cluster applies, and what it refuses.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Secrets and NetworkPolicies of `spec.security`.
    pub security: SecurityObjects,
    /// Name servers (always applied: they never depend on a refused change).
    pub name_server: NameServerObjects,
    /// Broker groups by index; empty when the broker configuration does not render, since a
    /// bad override stalls the brokers as a whole.
    pub groups: Vec<GroupPlan>,
    /// Refusals, in the order they are reported.
    pub stalls: Vec<Stall>,
}

impl Plan {
    /// True when some part of the spec is refused.
    pub fn stalled(&self) -> bool {
        !self.stalls.is_empty()
    }
}

/// The storage request and class of a StatefulSet's `data` claim template.
pub(super) fn claim_storage(sts: &StatefulSet) -> Option<(Option<String>, Option<String>)> {
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

/// Checks the spec against what exists: a claim template can only grow (see `expand`);
/// a smaller size or another class is refused. Returns the refusals, the indices of the
/// groups to leave unchanged, and those whose claims grow. (Groups past the spec are drained,
/// not refused: see [`plan`].)
pub fn find_stalls(
    mqc: &MessageQueueCluster,
    existing: &ExistingGroups,
) -> (Vec<Stall>, Vec<i32>, Vec<i32>) {
    let mut stalls = Vec::new();
    let mut frozen = Vec::new();
    let mut growing = Vec::new();
    let groups = mqc.spec.broker.groups;
    let storage = &mqc.spec.broker.storage;
    for (g, sts) in existing.iter().filter(|(g, _)| **g < groups) {
        let Some((size, class)) = claim_storage(sts) else {
            continue;
        };
        match storage_change(
            size.as_deref(),
            class.as_deref(),
            &storage.size,
            storage.storage_class_name.as_deref(),
        ) {
            StorageChange::Same => {}
            StorageChange::Grow => growing.push(*g),
            StorageChange::Refused(why) => {
                frozen.push(*g);
                stalls.push(Stall {
                    reason: Reason::StorageChangeRefused,
                    message: format!("{}: {why}; the group is left unchanged", sts.name_any()),
                });
            }
        }
    }
    (stalls, frozen, growing)
}

/// Plans the reconcile of an active cluster given the broker groups that exist.
pub fn plan(mqc: &MessageQueueCluster, existing: &ExistingGroups, env: &OperatorEnv) -> Plan {
    let (mut stalls, frozen, growing) = find_stalls(mqc, existing);

    // Render every group's configuration first: a bad override stalls the brokers as a whole.
    let mut configs = Vec::new();
    for g in 0..mqc.spec.broker.groups {
        match builders::broker_config_map(mqc, g, env) {
            Ok(cm) => configs.push((g, cm)),
            Err(e) => {
                stalls.push(Stall {
                    reason: Reason::InvalidConfig,
                    message: e.to_string(),
                });
                configs.clear();
                break;
            }
        }
    }

    let cluster = mqc.name_any();
    let mut groups: Vec<GroupPlan> = configs
        .into_iter()
        .map(|(index, config_map)| GroupPlan {
            index,
            name: names::broker_group(&cluster, index),
            action: if frozen.contains(&index) {
                GroupAction::Keep
            } else {
                let objects = Box::new(BrokerGroupObjects {
                    service: builders::broker_headless_service(mqc, index),
                    statefulset: builders::broker_statefulset(mqc, index, &config_map, env),
                    pdb: builders::broker_pdb(mqc, index),
                    config_map,
                });
                if growing.contains(&index) {
                    GroupAction::Expand(objects)
                } else {
                    GroupAction::Apply(objects)
                }
            },
        })
        .collect();
    // Groups past the spec are drained, highest first, and removed once empty (only when the
    // configuration renders: a bad override stalls the brokers as a whole).
    if !groups.is_empty() || mqc.spec.broker.groups == 0 {
        for index in existing
            .keys()
            .rev()
            .filter(|g| **g >= mqc.spec.broker.groups)
        {
            groups.push(GroupPlan {
                index: *index,
                name: names::broker_group(&cluster, *index),
                action: GroupAction::Drain,
            });
        }
    }

    let security = SecurityObjects {
        cluster_secret: builders::cluster_secret(mqc, env),
        users_file: builders::empty_users_secret(mqc),
        network_policies: builders::network_policies(mqc),
    };
    if mqc.spec.security.acl.enabled && env.cluster_secret.is_none() {
        // Without the secret the pods would wait for a Secret that never comes.
        stalls.push(Stall {
            reason: Reason::NoClusterSecret,
            message: format!(
                "security.acl.enabled needs the cluster's secret, which the operator could not \
                 read or create (Secret {} with key {}, 16 characters or more: check the \
                 operator's RBAC for secrets and its log)",
                names::cluster_secret(&cluster),
                builders::CLUSTER_SECRET_KEY
            ),
        });
        return Plan {
            security: SecurityObjects::default(),
            name_server: NameServerObjects {
                headless_service: builders::name_server_headless_service(mqc),
                client_service: builders::name_server_client_service(mqc),
                statefulset: builders::name_server_statefulset(mqc),
                pdb: builders::name_server_pdb(mqc),
            },
            groups: Vec::new(),
            stalls,
        };
    }
    Plan {
        security,
        name_server: NameServerObjects {
            headless_service: builders::name_server_headless_service(mqc),
            client_service: builders::name_server_client_service(mqc),
            statefulset: builders::name_server_statefulset(mqc),
            pdb: builders::name_server_pdb(mqc),
        },
        groups,
        stalls,
    }
}

/// Every object of `plan` as multi-document YAML, in apply order (`conveyor-operator render`).
pub fn to_yaml(plan: &Plan) -> Result<String, serde_yaml::Error> {
    let mut docs = Vec::new();
    let mut push = |v: Result<String, serde_yaml::Error>| -> Result<(), serde_yaml::Error> {
        docs.push(v?);
        Ok(())
    };
    let s = &plan.security;
    if let Some(x) = &s.cluster_secret {
        push(serde_yaml::to_string(x))?;
    }
    if let Some(x) = &s.users_file {
        push(serde_yaml::to_string(x))?;
    }
    for x in &s.network_policies {
        push(serde_yaml::to_string(x))?;
    }
    let n = &plan.name_server;
    push(serde_yaml::to_string(&n.headless_service))?;
    push(serde_yaml::to_string(&n.client_service))?;
    push(serde_yaml::to_string(&n.statefulset))?;
    push(serde_yaml::to_string(&n.pdb))?;
    for g in &plan.groups {
        if let GroupAction::Apply(o) | GroupAction::Expand(o) = &g.action {
            push(serde_yaml::to_string(&o.config_map))?;
            push(serde_yaml::to_string(&o.service))?;
            push(serde_yaml::to_string(&o.statefulset))?;
            push(serde_yaml::to_string(&o.pdb))?;
        }
    }
    Ok(docs.iter().map(|d| format!("---\n{d}")).collect::<String>())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::builders::tests::cluster;
    use crate::crd::PAUSE_ANNOTATION;

    fn group(mqc: &MessageQueueCluster, g: i32) -> StatefulSet {
        let cm =
            builders::broker_config_map(mqc, g, &crate::builders::OperatorEnv::default()).unwrap();
        builders::broker_statefulset(mqc, g, &cm, &crate::builders::OperatorEnv::default())
    }

    fn existing(mqc: &MessageQueueCluster, groups: i32) -> ExistingGroups {
        (0..groups).map(|g| (g, group(mqc, g))).collect()
    }

    fn applied(p: &Plan) -> Vec<(i32, bool)> {
        p.groups
            .iter()
            .map(|g| (g.index, matches!(g.action, GroupAction::Apply(_))))
            .collect()
    }

    #[test]
    fn gate_orders_deletion_before_pause() {
        let mut mqc = cluster(1, 1);
        assert_eq!(gate(&mqc), Gate::Active);
        mqc.metadata.annotations =
            Some([(PAUSE_ANNOTATION.to_string(), "True".to_string())].into());
        assert_eq!(gate(&mqc), Gate::Paused);
        mqc.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(gate(&mqc), Gate::Deleting);
    }

    #[test]
    fn a_fresh_cluster_applies_every_group() {
        let mqc = cluster(3, 2);
        let p = plan(&mqc, &BTreeMap::new(), &OperatorEnv::default());
        assert!(!p.stalled());
        assert_eq!(applied(&p), [(0, true), (1, true), (2, true)]);
        assert_eq!(p.groups[2].name, "orders-broker-2");
        let GroupAction::Apply(objects) = &p.groups[1].action else {
            unreachable!()
        };
        assert_eq!(objects.config_map.name_any(), "orders-broker-1-config");
        assert_eq!(objects.statefulset.name_any(), "orders-broker-1");
        assert_eq!(p.name_server.statefulset.name_any(), "orders-namesrv");
        assert_eq!(
            p.name_server.headless_service.name_any(),
            "orders-namesrv-headless"
        );
    }

    #[test]
    fn groups_past_the_spec_are_drained_highest_first_not_refused() {
        let p = plan(
            &cluster(1, 1),
            &existing(&cluster(3, 1), 3),
            &OperatorEnv::default(),
        );
        assert!(p.stalls.is_empty(), "{:?}", p.stalls);
        let actions: Vec<(i32, &str)> = p
            .groups
            .iter()
            .map(|g| {
                let a = match g.action {
                    GroupAction::Apply(_) => "apply",
                    GroupAction::Keep => "keep",
                    GroupAction::Expand(_) => "expand",
                    GroupAction::Drain => "drain",
                };
                (g.index, a)
            })
            .collect();
        assert_eq!(actions, [(0, "apply"), (2, "drain"), (1, "drain")]);
    }

    #[test]
    fn a_larger_size_expands_the_existing_groups_a_smaller_one_keeps_them() {
        let old = cluster(2, 1);
        let mut bigger = cluster(3, 1);
        bigger.spec.broker.storage.size = "20Gi".into();
        let p = plan(&bigger, &existing(&old, 2), &OperatorEnv::default());
        assert!(p.stalls.is_empty(), "{:?}", p.stalls);
        let actions: Vec<_> = p
            .groups
            .iter()
            .map(|g| matches!(g.action, GroupAction::Expand(_)))
            .collect();
        assert_eq!(actions, [true, true, false]);
        assert_eq!(applied(&p), [(0, false), (1, false), (2, true)]);

        let mut smaller = cluster(3, 1);
        smaller.spec.broker.storage.size = "1Gi".into();
        let p = plan(&smaller, &existing(&old, 2), &OperatorEnv::default());
        let reasons: Vec<_> = p.stalls.iter().map(|s| s.reason).collect();
        assert_eq!(
            reasons,
            [Reason::StorageChangeRefused, Reason::StorageChangeRefused]
        );
        assert!(p.stalls[0].message.starts_with("orders-broker-0: "));
        assert!(p.stalls[0].message.contains("cannot shrink"));
        assert_eq!(applied(&p), [(0, false), (1, false), (2, true)]);
    }

    #[test]
    fn an_unset_storage_class_is_not_a_change() {
        let old = cluster(1, 1);
        let mut unset = cluster(1, 1);
        unset.spec.broker.storage.storage_class_name = None;
        assert!(!plan(&unset, &existing(&old, 1), &OperatorEnv::default()).stalled());
    }

    #[test]
    fn a_bad_override_plans_no_broker_group_but_still_the_name_servers() {
        let mut mqc = cluster(2, 1);
        mqc.spec
            .broker
            .config
            .insert("broker.delay-levels".into(), "1s 5s".into());
        let p = plan(&mqc, &BTreeMap::new(), &OperatorEnv::default());
        assert!(p.groups.is_empty());
        assert_eq!(p.stalls[0].reason, Reason::InvalidConfig);
        assert!(p.stalls[0].message.contains("broker.delay-levels"));
        assert_eq!(p.name_server.pdb.name_any(), "orders-namesrv");
    }
}
