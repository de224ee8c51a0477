//! Reading the observed state the plan depends on: the broker-group StatefulSets a cluster owns,
//! and (for the replication-aware roll) their pods. The API reads are separate from the pure
//! filters, so the ownership rules are unit-tested.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::context::Error;
use super::roll::PodState;
use crate::builders::{Component, GROUP_LABEL};
use crate::crd::MessageQueueCluster;

/// Existing broker groups of a cluster, by group index.
pub type ExistingGroups = BTreeMap<i32, StatefulSet>;

/// Label selector of a cluster's broker StatefulSets.
pub fn broker_selector(cluster: &str) -> String {
    format!(
        "app.kubernetes.io/instance={cluster},app.kubernetes.io/component={}",
        Component::Broker.as_str()
    )
}

/// Keeps the StatefulSets controlled by `mqc` (owner uid) that carry a group index label.
pub fn owned_groups(
    mqc: &MessageQueueCluster,
    items: impl IntoIterator<Item = StatefulSet>,
) -> ExistingGroups {
    let mut existing = BTreeMap::new();
    for sts in items {
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
    existing
}

/// Lists the broker groups `mqc` owns in namespace `ns`.
pub async fn existing_groups(
    client: &Client,
    ns: &str,
    mqc: &MessageQueueCluster,
) -> Result<ExistingGroups, Error> {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().labels(&broker_selector(&mqc.name_any())))
        .await?;
    Ok(owned_groups(mqc, list.items))
}

/// The broker pods of a cluster, by group index.
pub type GroupPods = BTreeMap<i32, Vec<PodState>>;

/// Sorts pods into their groups by the group label.
pub fn pods_by_group(items: impl IntoIterator<Item = Pod>) -> GroupPods {
    let mut groups: GroupPods = BTreeMap::new();
    for pod in items {
        let group = pod
            .labels()
            .get(GROUP_LABEL)
            .and_then(|g| g.parse::<i32>().ok());
        if let (Some(g), Some(state)) = (group, PodState::of(&pod)) {
            groups.entry(g).or_default().push(state);
        }
    }
    groups
}

/// Lists the broker pods of `mqc` in namespace `ns`.
pub async fn group_pods(
    client: &Client,
    ns: &str,
    mqc: &MessageQueueCluster,
) -> Result<GroupPods, Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&ListParams::default().labels(&broker_selector(&mqc.name_any())))
        .await?;
    Ok(pods_by_group(list.items))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builders::tests::cluster;

    fn group(mqc: &MessageQueueCluster, g: i32) -> StatefulSet {
        let cm =
            crate::builders::broker_config_map(mqc, g, &crate::builders::OperatorEnv::default())
                .unwrap();
        crate::builders::broker_statefulset(mqc, g, &cm, &crate::builders::OperatorEnv::default())
    }

    #[test]
    fn only_owned_statefulsets_with_a_group_label_count() {
        let mqc = cluster(2, 1);
        let mine = group(&mqc, 1);
        let mut foreign = group(&mqc, 0);
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
        let mut unlabelled = group(&mqc, 3);
        unlabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(GROUP_LABEL);
        let existing = owned_groups(&mqc, [mine, foreign, unlabelled]);
        assert_eq!(existing.keys().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(existing[&1].name_any(), "orders-broker-1");
    }

    #[test]
    fn the_selector_names_the_cluster_and_the_broker_component() {
        assert_eq!(
            broker_selector("orders"),
            "app.kubernetes.io/instance=orders,app.kubernetes.io/component=broker"
        );
    }
}
