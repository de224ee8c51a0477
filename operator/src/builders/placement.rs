//! Where the replicas of one broker group (and the name servers) run: apart, so that losing a
//! node (or a zone) never takes a group's master and its slaves at once. Each set of pods
//! prefers nodes none of its peers is on (pod anti-affinity on `kubernetes.io/hostname`);
//! with `spec.placement.rack` (Strimzi's rack awareness) the pods go only to nodes that carry
//! the rack's topology key and prefer a zone none of their peers is in. Preferred rather than
//! required: a cluster with fewer nodes than replicas still runs every pod. The user's own
//! affinity is kept; these terms are added to it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::crd::Placement;

/// The node label every Kubernetes node carries with its name.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

/// The node label a broker's zone is read from (recorded in the broker, for same-zone reads):
/// the rack's topology key, else the well-known zone label.
pub fn zone_label(placement: &Placement) -> &str {
    placement
        .rack
        .as_ref()
        .map_or(super::common::DEFAULT_ZONE_LABEL, |r| {
            r.topology_key.as_str()
        })
}

/// `placement.affinity` plus the terms that keep the pods selected by `peers` apart.
pub fn spread_affinity(placement: &Placement, peers: &BTreeMap<String, String>) -> Affinity {
    let mut affinity = placement.affinity.clone().unwrap_or_default();
    let keys = std::iter::once(HOSTNAME_KEY.to_string())
        .chain(placement.rack.as_ref().map(|r| r.topology_key.clone()));
    let anti = affinity
        .pod_anti_affinity
        .get_or_insert_with(PodAntiAffinity::default);
    let preferred = anti
        .preferred_during_scheduling_ignored_during_execution
        .get_or_insert_with(Vec::new);
    for key in keys {
        preferred.push(WeightedPodAffinityTerm {
            weight: 100,
            pod_affinity_term: PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_labels: Some(peers.clone()),
                    ..Default::default()
                }),
                topology_key: key,
                ..Default::default()
            },
        });
    }
    if let Some(rack) = &placement.rack {
        // Only nodes that say which rack they are in: every term of the user's required node
        // affinity gets the requirement (terms are ORed, their expressions ANDed).
        let has_key = NodeSelectorRequirement {
            key: rack.topology_key.clone(),
            operator: "Exists".into(),
            values: None,
        };
        let required = affinity
            .node_affinity
            .get_or_insert_with(NodeAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm::default()],
            });
        if required.node_selector_terms.is_empty() {
            required
                .node_selector_terms
                .push(NodeSelectorTerm::default());
        }
        for term in &mut required.node_selector_terms {
            term.match_expressions
                .get_or_insert_with(Vec::new)
                .push(has_key.clone());
        }
    }
    affinity
}
