//! One target, one autoscaler. Two ConsumerAutoscalers on the same workload, or one beside a
//! HorizontalPodAutoscaler (KEDA's included), would each set its replicas to their own count
//! and fight. As the HPA controller refuses a second HPA on one target (`AmbiguousSelector`),
//! the oldest ConsumerAutoscaler keeps the target, and a younger one, or any with a foreign HPA
//! on its target, holds (`Active=False`, reason `ConflictingAutoscaler`) and changes nothing.

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;

use super::resource::ConsumerAutoscaler;

/// The reason of the `Active` condition of an autoscaler that holds for a conflict.
pub const CONFLICTING: &str = "ConflictingAutoscaler";

/// A scale target as compared here: API group (not version), kind, name.
fn target(api_version: &str, kind: &str, name: &str) -> (String, String, String) {
    let group = api_version
        .split_once('/')
        .map_or("", |(group, _)| group)
        .to_string();
    (group, kind.to_string(), name.to_string())
}

fn target_of(cas: &ConsumerAutoscaler) -> (String, String, String) {
    let t = &cas.spec.scale_target_ref;
    target(&t.api_version, &t.kind, &t.name)
}

/// Whether `a` was created before `b` (the name breaks a tie of the seconds-precision time).
fn older(a: &ConsumerAutoscaler, b: &ConsumerAutoscaler) -> bool {
    let key = |c: &ConsumerAutoscaler| {
        (
            c.metadata.creation_timestamp.as_ref().map(|t| t.0),
            c.name_any(),
        )
    };
    key(a) < key(b)
}

/// Why `this` must not scale its target, if it must not: an older ConsumerAutoscaler of the
/// namespace (`autoscalers`, `this` among them or not) has the same target, or an HPA of the
/// namespace scales it that is not the one KEDA made for `this`'s own ScaledObject.
pub fn conflict(
    this: &ConsumerAutoscaler,
    autoscalers: &[ConsumerAutoscaler],
    hpas: &[HorizontalPodAutoscaler],
) -> Option<String> {
    let mine = target_of(this);
    let (_, kind, name) = &mine;
    if let Some(other) = autoscalers.iter().find(|o| {
        o.uid() != this.uid()
            && o.metadata.deletion_timestamp.is_none()
            && target_of(o) == mine
            && older(o, this)
    }) {
        return Some(format!(
            "ConsumerAutoscaler {} already scales {kind} {name}: one autoscaler per target",
            other.name_any()
        ));
    }
    let own_scaled_object = |hpa: &HorizontalPodAutoscaler| {
        hpa.owner_references()
            .iter()
            .any(|o| o.kind == "ScaledObject" && o.name == this.name_any())
    };
    hpas.iter()
        .find(|hpa| {
            let Some(spec) = hpa.spec.as_ref() else {
                return false;
            };
            let t = &spec.scale_target_ref;
            target(t.api_version.as_deref().unwrap_or(""), &t.kind, &t.name) == mine
                && !own_scaled_object(hpa)
        })
        .map(|hpa| {
            format!(
                "HorizontalPodAutoscaler {} already scales {kind} {name}: one autoscaler per target",
                hpa.name_any()
            )
        })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::autoscaling::v2::{
        CrossVersionObjectReference, HorizontalPodAutoscalerSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::autoscaler::resource::ConsumerAutoscalerSpec;

    fn cas(name: &str, created_s: i64, deployment: &str) -> ConsumerAutoscaler {
        let spec: ConsumerAutoscalerSpec = serde_json::from_value(serde_json::json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "consumerGroup": "g",
            "topics": ["t"],
            "nameServer": "ns:9876",
            "targetBacklogPerReplica": 100,
        }))
        .unwrap();
        let mut c = ConsumerAutoscaler::new(name, spec);
        c.metadata.uid = Some(format!("uid-{name}"));
        c.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created_s).unwrap()));
        c
    }

    fn hpa(
        name: &str,
        api_version: &str,
        deployment: &str,
        owner: Option<&str>,
    ) -> HorizontalPodAutoscaler {
        HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some(name.into()),
                owner_references: owner.map(|so| {
                    vec![OwnerReference {
                        api_version: "keda.sh/v1alpha1".into(),
                        kind: "ScaledObject".into(),
                        name: so.into(),
                        uid: "so".into(),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(HorizontalPodAutoscalerSpec {
                scale_target_ref: CrossVersionObjectReference {
                    api_version: Some(api_version.into()),
                    kind: "Deployment".into(),
                    name: deployment.into(),
                },
                max_replicas: 10,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_oldest_autoscaler_keeps_the_target_and_a_younger_one_holds() {
        let (first, second) = (cas("first", 100, "web"), cas("second", 200, "web"));
        let all = [first.clone(), second.clone()];
        assert_eq!(conflict(&first, &all, &[]), None);
        let why = conflict(&second, &all, &[]).unwrap();
        assert!(
            why.contains("ConsumerAutoscaler first already scales Deployment web"),
            "{why}"
        );
    }

    #[test]
    fn created_in_the_same_second_the_name_decides() {
        let (a, b) = (cas("a", 100, "web"), cas("b", 100, "web"));
        let all = [b.clone(), a.clone()];
        assert_eq!(conflict(&a, &all, &[]), None);
        assert!(conflict(&b, &all, &[]).is_some());
    }

    #[test]
    fn other_targets_and_deleted_autoscalers_do_not_conflict() {
        let this = cas("this", 200, "web");
        let other_target = cas("other", 100, "api");
        let mut leaving = cas("leaving", 100, "web");
        leaving.metadata.deletion_timestamp = Some(Time(Timestamp::from_second(300).unwrap()));
        assert_eq!(
            conflict(&this, &[other_target, leaving, this.clone()], &[]),
            None
        );
    }

    #[test]
    fn a_foreign_hpa_on_the_target_conflicts_but_kedas_for_this_autoscaler_does_not() {
        let this = cas("orders", 100, "web");
        // Another API version of the same group is the same target.
        let foreign = hpa("web-hpa", "apps/v1beta2", "web", None);
        let why = conflict(&this, &[], &[foreign]).unwrap();
        assert!(why.contains("HorizontalPodAutoscaler web-hpa"), "{why}");
        let kedas = hpa("keda-hpa-orders", "apps/v1", "web", Some("orders"));
        assert_eq!(conflict(&this, &[], &[kedas]), None);
        let another_so = hpa("keda-hpa-x", "apps/v1", "web", Some("x"));
        assert!(conflict(&this, &[], &[another_so]).is_some());
        let elsewhere = hpa("api-hpa", "apps/v1", "api", None);
        assert_eq!(conflict(&this, &[], &[elsewhere]), None);
    }
}
