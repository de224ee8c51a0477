//! The ScaledObject of an autoscaler in `Keda` mode, as a pure builder: for clusters that run
//! KEDA, which then owns the HPA. The settings map one to one (KEDA's Prometheus scaler with
//! the same query, threshold and activation; min/max, polling, cooldown, fallback, behavior)
//! with two choices made for the user: `ignoreNullValues: "false"`, so that an empty result
//! is a failure that triggers the fallback rather than a backlog of zero, and the fallback
//! behavior `currentReplicasIfHigher`, so that missing data never lowers the count. The cap
//! on read queues becomes `maxReplicaCount` (KEDA's Kafka scaler caps the metric instead,
//! which stalls one replica short of it).

use kube::{Resource, ResourceExt};
use serde_json::{json, Value};

use super::credentials;
use super::metrics::default_query;
use super::resource::{ConsumerAutoscaler, PrometheusAuthMode};

/// KEDA's API version of ScaledObject.
pub const API_VERSION: &str = "keda.sh/v1alpha1";
/// Its kind.
pub const KIND: &str = "ScaledObject";
/// The kind of KEDA's credentials object (same API version).
pub const AUTH_KIND: &str = "TriggerAuthentication";

/// The metadata of what `cas` writes for KEDA: its name and namespace, owned by it.
fn owned_metadata(cas: &ConsumerAutoscaler) -> Value {
    json!({
        "name": cas.name_any(),
        "namespace": cas.namespace(),
        "labels": {"app.kubernetes.io/managed-by": "conveyor-operator"},
        "ownerReferences": cas.controller_owner_ref(&()).into_iter().collect::<Vec<_>>(),
    })
}

/// The TriggerAuthentication of `cas` (named after it, owned by it) when its Prometheus wants
/// credentials: the Secret's keys as the Prometheus scaler's parameters of the same names,
/// `ca` included when the Secret has one (`has_ca`).
pub fn trigger_authentication(cas: &ConsumerAutoscaler, has_ca: bool) -> Option<Value> {
    let auth = cas.spec.prometheus.as_ref()?.authentication.as_ref()?;
    let mut keys: Vec<&str> = match auth.mode {
        Some(PrometheusAuthMode::Bearer) => vec![credentials::BEARER_TOKEN],
        Some(PrometheusAuthMode::Basic) => vec![credentials::USERNAME, credentials::PASSWORD],
        None => vec![],
    };
    if has_ca {
        keys.push(credentials::CA);
    }
    let refs: Vec<Value> = keys
        .iter()
        .map(|k| json!({"parameter": k, "name": auth.secret_name, "key": k}))
        .collect();
    Some(json!({
        "apiVersion": API_VERSION,
        "kind": AUTH_KIND,
        "metadata": owned_metadata(cas),
        "spec": {"secretTargetRef": refs},
    }))
}

/// The ScaledObject for `cas` (named after it, owned by it) with the replica count capped at
/// `queue_cap` when known; `cluster` is the `cluster` label of the default query.
pub fn scaled_object(
    cas: &ConsumerAutoscaler,
    queue_cap: Option<u32>,
    cluster: Option<&str>,
) -> Value {
    let spec = &cas.spec;
    let prometheus = spec.prometheus.as_ref();
    let query = prometheus
        .and_then(|p| p.query.clone())
        .unwrap_or_else(|| default_query(cluster, &spec.consumer_group, &spec.topics));
    let max = queue_cap.map_or(spec.max_replicas, |c| {
        spec.max_replicas
            .min(c as i32)
            .max(spec.min_replicas)
            .max(1)
    });
    let mut so = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": owned_metadata(cas),
        "spec": {
            "scaleTargetRef": {
                "apiVersion": spec.scale_target_ref.api_version,
                "kind": spec.scale_target_ref.kind,
                "name": spec.scale_target_ref.name,
            },
            "pollingInterval": spec.polling_interval_seconds,
            "cooldownPeriod": spec.cooldown_period_seconds,
            "minReplicaCount": spec.min_replicas,
            "maxReplicaCount": max,
            "triggers": [{
                "type": "prometheus",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": prometheus.map(|p| p.server_address.clone()).unwrap_or_default(),
                    "query": query,
                    "threshold": spec.target_backlog_per_replica.to_string(),
                    "activationThreshold": spec.activation_backlog.to_string(),
                    "ignoreNullValues": "false",
                },
            }],
        },
    });
    if let Some(auth) = prometheus.and_then(|p| p.authentication.as_ref()) {
        let trigger = &mut so["spec"]["triggers"][0];
        trigger["authenticationRef"] = json!({"name": cas.name_any()});
        if let Some(mode) = auth.mode {
            trigger["metadata"]["authModes"] = json!(match mode {
                PrometheusAuthMode::Bearer => "bearer",
                PrometheusAuthMode::Basic => "basic",
            });
        }
    }
    if let Some(f) = &spec.fallback {
        so["spec"]["fallback"] = json!({
            "failureThreshold": f.failure_threshold,
            "replicas": f.replicas,
            "behavior": "currentReplicasIfHigher",
        });
    }
    if let Some(b) = &spec.behavior {
        so["spec"]["advanced"] = json!({"horizontalPodAutoscalerConfig": {"behavior": b}});
    }
    so
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autoscaler::resource::{
        AutoscalerMode, ConsumerAutoscalerSpec, Fallback, PrometheusAuthentication,
        PrometheusSource, ScaleTargetRef,
    };

    fn cas() -> ConsumerAutoscaler {
        let mut cas = ConsumerAutoscaler::new(
            "orders",
            ConsumerAutoscalerSpec {
                scale_target_ref: ScaleTargetRef {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "orders-consumer".into(),
                },
                consumer_group: "orders-cg".into(),
                topics: vec!["orders".into()],
                cluster_ref: None,
                name_server: Some("ns:9876".into()),
                target_backlog_per_replica: 1000,
                activation_backlog: 5,
                min_replicas: 0,
                max_replicas: 50,
                allow_idle_consumers: false,
                polling_interval_seconds: 15,
                cooldown_period_seconds: 300,
                fallback: Some(Fallback {
                    failure_threshold: 3,
                    replicas: 2,
                }),
                behavior: None,
                prometheus: Some(PrometheusSource {
                    server_address: "http://prom:9090".into(),
                    query: None,
                    authentication: None,
                }),
                mode: AutoscalerMode::Keda,
            },
        );
        cas.metadata.namespace = Some("apps".into());
        cas.metadata.uid = Some("u-1".into());
        cas
    }

    #[test]
    fn the_scaled_object_carries_the_settings_and_the_queue_cap() {
        let so = scaled_object(&cas(), Some(8), Some("mq"));
        assert_eq!(so["metadata"]["namespace"], "apps");
        assert_eq!(so["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(
            so["spec"]["maxReplicaCount"], 8,
            "capped at the read queues"
        );
        assert_eq!(so["spec"]["minReplicaCount"], 0);
        let t = &so["spec"]["triggers"][0];
        assert_eq!(t["type"], "prometheus");
        assert_eq!(t["metadata"]["threshold"], "1000");
        assert_eq!(t["metadata"]["activationThreshold"], "5");
        assert_eq!(t["metadata"]["ignoreNullValues"], "false");
        assert!(t["metadata"]["query"]
            .as_str()
            .unwrap()
            .starts_with("sum(max by (cluster, node_id, consumer_group, topic)"));
        assert_eq!(
            so["spec"]["fallback"]["behavior"],
            "currentReplicasIfHigher"
        );
        assert!(so["spec"].get("advanced").is_none());
        // No cap known: maxReplicas.
        assert_eq!(
            scaled_object(&cas(), None, None)["spec"]["maxReplicaCount"],
            50
        );
    }

    #[test]
    fn credentials_go_to_a_trigger_authentication_the_trigger_names() {
        let plain = cas();
        assert!(trigger_authentication(&plain, true).is_none());
        assert!(scaled_object(&plain, None, None)["spec"]["triggers"][0]
            .get("authenticationRef")
            .is_none());
        let mut with = cas();
        with.spec.prometheus.as_mut().unwrap().authentication = Some(PrometheusAuthentication {
            secret_name: "prom-creds".into(),
            mode: Some(PrometheusAuthMode::Basic),
        });
        let t = &scaled_object(&with, None, None)["spec"]["triggers"][0];
        assert_eq!(t["authenticationRef"]["name"], "orders");
        assert_eq!(t["metadata"]["authModes"], "basic");
        let ta = trigger_authentication(&with, true).unwrap();
        assert_eq!(ta["kind"], "TriggerAuthentication");
        assert_eq!(ta["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let refs: Vec<(&str, &str)> = ta["spec"]["secretTargetRef"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["parameter"].as_str().unwrap(), r["key"].as_str().unwrap()))
            .collect();
        assert_eq!(
            refs,
            [
                ("username", "username"),
                ("password", "password"),
                ("ca", "ca")
            ]
        );
        assert!(ta["spec"]["secretTargetRef"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["name"] == "prom-creds"));
    }
}
