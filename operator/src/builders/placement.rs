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
    PodAffinityTerm, PodAntiAffinity, TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::crd::Placement;

/// The node label a pod's zone is read from when the cluster sets no rack topology key.
pub const DEFAULT_ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The node label every Kubernetes node carries with its name.
pub const HOSTNAME_KEY: &str = "kubernetes.io/hostname";

/// The node label a broker's zone is read from (recorded in the broker, for same-zone reads):
/// the rack's topology key, else the well-known zone label.
pub fn zone_label(placement: &Placement) -> &str {
    placement
        .rack
        .as_ref()
        .map_or(DEFAULT_ZONE_LABEL, |r| r.topology_key.as_str())
}

/// `placement.topologySpreadConstraints` plus ours: the pods `peers` selects never share a
/// node while another node could take one (`maxSkew` 1 on `kubernetes.io/hostname`, the
/// scheduler refusing otherwise; nodes whose taints the pods do not tolerate are not counted,
/// so a tainted control-plane node holds nothing up), which on a one-node cluster still runs
/// every pod; with a rack, spread over its zones as far as the scheduler can
/// (`ScheduleAnyway`). A constraint the user already set for a key wins (two for the same
/// key and mode would be refused by the API server).
pub fn spread_constraints(
    placement: &Placement,
    peers: &BTreeMap<String, String>,
) -> Vec<TopologySpreadConstraint> {
    let mut constraints = placement.topology_spread_constraints.clone();
    let ours = std::iter::once((HOSTNAME_KEY.to_string(), "DoNotSchedule")).chain(
        placement
            .rack
            .as_ref()
            .map(|r| (r.topology_key.clone(), "ScheduleAnyway")),
    );
    for (key, mode) in ours {
        if constraints
            .iter()
            .any(|c| c.topology_key == key && c.when_unsatisfiable == mode)
        {
            continue;
        }
        constraints.push(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: key,
            when_unsatisfiable: mode.into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(peers.clone()),
                ..Default::default()
            }),
            node_taints_policy: Some("Honor".into()),
            ..Default::default()
        });
    }
    constraints
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
