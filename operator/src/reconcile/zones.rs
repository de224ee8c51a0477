//! Recording each broker's zone in the broker (issue 11, Strimzi's rack awareness): a pod
//! cannot read its node's labels, so once a broker pod is scheduled the operator copies the
//! node's zone label (the rack's topology key, else `topology.kubernetes.io/zone`) onto the
//! pod as the `conveyor.dev/zone` annotation; the broker reads it through a downward-API file
//! and registers it, and its master sends consumers of that zone to it. A pod is annotated
//! once (an empty value when its node names no zone), so each new pod costs one node read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};

use super::context::FIELD_MANAGER;
use super::observe::GroupPods;
use crate::builders::ZONE_ANNOTATION;

/// The pods still to annotate, with the node each runs on: scheduled, not annotated yet.
pub fn unannotated(pods: &GroupPods) -> Vec<(String, String)> {
    pods.values()
        .flatten()
        .filter(|p| p.zone.is_none() && !p.terminating)
        .filter_map(|p| Some((p.name.clone(), p.node.clone()?)))
        .collect()
}

/// The zone a node's labels give under `label` (`""`: none).
pub fn node_zone(labels: &BTreeMap<String, String>, label: &str) -> String {
    labels.get(label).cloned().unwrap_or_default()
}

/// Annotates every scheduled broker pod of `pods` that has no zone yet with its node's zone
/// under `label`. Failures (a node that cannot be read, a pod gone) are logged and retried on
/// the next reconcile: the zone only steers reads, so it never holds up a reconcile.
pub async fn annotate(client: &Client, ns: &str, pods: &GroupPods, label: &str) {
    let todo = unannotated(pods);
    if todo.is_empty() {
        return;
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let pod_api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut zones: BTreeMap<String, String> = BTreeMap::new();
    for (pod, node) in todo {
        let zone = match zones.get(&node) {
            Some(z) => z.clone(),
            None => match nodes.get(&node).await {
                Ok(n) => {
                    let z = node_zone(n.labels(), label);
                    zones.insert(node.clone(), z.clone());
                    z
                }
                Err(e) => {
                    tracing::warn!(%node, error = %e, "cannot read the node's zone");
                    continue;
                }
            },
        };
        // Server-side apply of the one annotation, under the operator's field manager.
        let patch = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod, "annotations": {ZONE_ANNOTATION: zone}},
        });
        match pod_api
            .patch(
                &pod,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            Ok(_) => tracing::info!(%pod, %node, %zone, "broker zone recorded"),
            Err(e) => tracing::warn!(%pod, error = %e, "cannot record the broker's zone"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::roll::PodState;

    fn pod(name: &str, node: Option<&str>, zone: Option<&str>) -> PodState {
        PodState {
            name: name.into(),
            uid: None,
            ordinal: 0,
            revision: None,
            ready: false,
            terminating: false,
            ip: None,
            node: node.map(String::from),
            zone: zone.map(String::from),
            stuck: false,
        }
    }

    #[test]
    fn only_scheduled_pods_without_a_zone_are_annotated() {
        let mut pods = GroupPods::new();
        pods.insert(
            0,
            vec![
                pod("g0-0", Some("n1"), None),
                pod("g0-1", None, None),
                pod("g0-2", Some("n2"), Some("zone-b")),
                pod("g0-3", Some("n3"), Some("")),
            ],
        );
        let mut gone = pod("g1-0", Some("n1"), None);
        gone.terminating = true;
        pods.insert(1, vec![gone, pod("g1-1", Some("n2"), None)]);
        assert_eq!(
            unannotated(&pods),
            vec![
                ("g0-0".to_string(), "n1".to_string()),
                ("g1-1".to_string(), "n2".to_string())
            ]
        );
    }

    #[test]
    fn a_node_without_the_label_has_an_empty_zone() {
        let labels: BTreeMap<String, String> = [(
            "topology.kubernetes.io/zone".to_string(),
            "eu-1a".to_string(),
        )]
        .into();
        assert_eq!(node_zone(&labels, "topology.kubernetes.io/zone"), "eu-1a");
        assert_eq!(node_zone(&labels, "rack"), "");
    }
}
