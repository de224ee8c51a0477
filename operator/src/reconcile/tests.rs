//! Controller tests: `reconcile` against a mocked API server (tower-test). The mock records every
//! request and answers like the real server (apply and status patches echo the object).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::client::Body;
use kube::runtime::controller::Action;
use serde_json::{json, Value};

use super::conditions::{ConditionType, Reason, FALSE, TRUE};
use super::*;
use crate::builders::tests::cluster;
use crate::crd::{MessageQueueCluster, MessageQueueClusterStatus, PAUSE_ANNOTATION};

#[derive(Clone, Debug)]
struct Call {
    method: Method,
    path: String,
    body: Value,
}

#[derive(Default, Clone)]
struct Scenario {
    /// StatefulSets the list call returns.
    existing: Vec<StatefulSet>,
    /// Answer StatefulSet applies with a fully rolled-out status.
    statefulsets_ready: bool,
    /// Pods the list call returns.
    pods: Vec<Value>,
    /// Nodes a get returns, by name (with their labels).
    nodes: Vec<Value>,
}

/// Runs `reconcile` once against a mock API server playing `scenario`; returns the result and the
/// calls the reconciler made, in order.
async fn run(
    mqc: MessageQueueCluster,
    scenario: Scenario,
) -> (Result<Action, Error>, Vec<Call>, Arc<Context>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let calls = Arc::new(Mutex::new(Vec::new()));
    let recorded = calls.clone();
    let stored = serde_json::to_value(&mqc).unwrap();
    let server = tokio::spawn(async move {
        while let Some((request, responder)) = handle.next_request().await {
            let method = request.method().clone();
            let path = request.uri().path().to_string();
            let query = request.uri().query().unwrap_or("").to_string();
            let bytes = request.into_body().collect().await.unwrap().to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            recorded.lock().unwrap().push(Call {
                method: method.clone(),
                path: path.clone(),
                body: body.clone(),
            });
            if method == Method::PATCH && !path.ends_with("/status") && !path.contains("/events") {
                assert!(
                    query.contains("fieldManager=conveyor-operator"),
                    "{path}?{query}"
                );
                assert!(query.contains("force=true"), "{path}?{query}");
            }
            let answer = if method == Method::GET && path.ends_with("/pods") {
                // Unless the scenario says, no pod runs: a drain cannot reach any broker.
                json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": scenario.pods})
            } else if method == Method::GET && path.starts_with("/api/v1/nodes/") {
                let name = path.rsplit('/').next().unwrap();
                scenario
                    .nodes
                    .iter()
                    .find(|n| n["metadata"]["name"] == name)
                    .cloned()
                    .unwrap_or_else(|| json!({"kind": "Status", "code": 404}))
            } else if method == Method::GET
                && (path.contains("/persistentvolumeclaims/") || path.contains("/storageclasses/"))
            {
                // No claim exists yet (no pod ever ran).
                json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404})
            } else if method == Method::GET && path.ends_with("/statefulsets") {
                assert!(query.contains("labelSelector="), "{query}");
                json!({"apiVersion": "apps/v1", "kind": "StatefulSetList", "metadata": {}, "items": scenario.existing})
            } else if method == Method::PATCH
                && path.contains("/statefulsets/")
                && scenario.statefulsets_ready
            {
                let mut sts: StatefulSet = serde_json::from_value(body).unwrap();
                let n = sts.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                sts.metadata.generation = Some(1);
                sts.status = Some(StatefulSetStatus {
                    observed_generation: Some(1),
                    replicas: n,
                    ready_replicas: Some(n),
                    updated_replicas: Some(n),
                    ..Default::default()
                });
                serde_json::to_value(sts).unwrap()
            } else if path.ends_with("/status") {
                let mut obj = stored.clone();
                obj["status"] = body["status"].clone();
                obj
            } else {
                let mut b = body;
                if let Some(m) = b.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                    m.entry("name").or_insert(json!("x"));
                } else if let Some(o) = b.as_object_mut() {
                    o.insert(
                        "metadata".into(),
                        json!({"name": "orders", "namespace": "mq"}),
                    );
                }
                b
            };
            let code = if answer["reason"] == "NotFound" {
                404
            } else {
                200
            };
            responder.send_response(
                Response::builder()
                    .status(code)
                    .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                    .unwrap(),
            );
        }
    });
    let ctx = Arc::new(Context::new(client, Some("test".into())));
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        reconcile(Arc::new(mqc), ctx.clone()),
    )
    .await
    .expect("reconcile hangs");
    server.abort();
    let calls = calls.lock().unwrap().clone();
    (result, calls, ctx)
}

fn summary(calls: &[Call]) -> Vec<String> {
    calls
        .iter()
        .map(|c| {
            let p = c
                .path
                .trim_start_matches("/api/v1")
                .trim_start_matches("/apis");
            format!("{} {p}", c.method)
        })
        .collect()
}

fn status_of(calls: &[Call]) -> MessageQueueClusterStatus {
    let c = calls
        .iter()
        .rev()
        .find(|c| c.path.ends_with("/messagequeueclusters/orders/status"))
        .expect("status was patched");
    assert_eq!(c.method, Method::PATCH);
    assert_eq!(c.body["kind"], "MessageQueueCluster");
    serde_json::from_value(c.body["status"].clone()).unwrap()
}

fn cond(s: &MessageQueueClusterStatus, t: ConditionType) -> &Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == t.as_str())
        .unwrap_or_else(|| panic!("no {t} condition"))
}

#[tokio::test]
async fn fresh_cluster_applies_everything_in_order_then_reports_progress() {
    let (result, calls, _) = run(cluster(2, 2), Scenario::default()).await;
    let action = result.unwrap();
    assert_eq!(action, Action::requeue(PROGRESS_REQUEUE));
    let expected = [
        "GET /apps/v1/namespaces/mq/statefulsets",
        "PATCH /namespaces/mq/services/orders-namesrv-headless",
        "PATCH /namespaces/mq/services/orders-namesrv",
        "PATCH /apps/v1/namespaces/mq/statefulsets/orders-namesrv",
        "PATCH /policy/v1/namespaces/mq/poddisruptionbudgets/orders-namesrv",
        "PATCH /namespaces/mq/configmaps/orders-broker-0-config",
        "PATCH /namespaces/mq/services/orders-broker-0",
        "PATCH /apps/v1/namespaces/mq/statefulsets/orders-broker-0",
        "PATCH /policy/v1/namespaces/mq/poddisruptionbudgets/orders-broker-0",
        "PATCH /namespaces/mq/configmaps/orders-broker-1-config",
        "PATCH /namespaces/mq/services/orders-broker-1",
        "PATCH /apps/v1/namespaces/mq/statefulsets/orders-broker-1",
        "PATCH /policy/v1/namespaces/mq/poddisruptionbudgets/orders-broker-1",
        "GET /namespaces/mq/pods",
        "PATCH /conveyor.dev/v1alpha1/namespaces/mq/messagequeueclusters/orders/status",
    ];
    assert_eq!(summary(&calls), expected);
    // Every applied object is owned by the cluster.
    for c in calls
        .iter()
        .filter(|c| c.method == Method::PATCH && !c.path.ends_with("/status"))
    {
        let owners = &c.body["metadata"]["ownerReferences"];
        assert_eq!(owners[0]["uid"], "0b1c-uid", "{}", c.path);
        assert_eq!(owners[0]["controller"], true);
    }
    let status = status_of(&calls);
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(cond(&status, ConditionType::Ready).status, FALSE);
    assert_eq!(cond(&status, ConditionType::Reconciling).status, TRUE);
    assert_eq!(cond(&status, ConditionType::Stalled).status, FALSE);
    assert_eq!(status.groups.len(), 2);
    assert_eq!(
        status.groups[1].pods,
        ["orders-broker-1-0", "orders-broker-1-1"]
    );
    assert_eq!(
        status.groups[1].master.as_deref(),
        Some("orders-broker-1-0")
    );
    assert_eq!(
        status.name_server_service.as_deref(),
        Some("orders-namesrv.mq.svc:9876")
    );
}

#[tokio::test]
async fn rolled_out_cluster_is_ready_and_says_so_once() {
    let scenario = Scenario {
        statefulsets_ready: true,
        ..Default::default()
    };
    let (result, calls, _) = run(cluster(1, 2), scenario.clone()).await;
    assert_eq!(result.unwrap(), Action::requeue(IDLE_REQUEUE));
    let status = status_of(&calls);
    assert_eq!(cond(&status, ConditionType::Ready).status, TRUE);
    assert_eq!(cond(&status, ConditionType::Reconciling).status, FALSE);
    assert_eq!(cond(&status, ConditionType::Stalled).status, FALSE);
    assert_eq!(status.groups[0].ready_replicas, 2);
    let events: Vec<_> = calls
        .iter()
        .filter(|c| c.path.contains("/events"))
        .collect();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].method, Method::POST);
    assert_eq!(events[0].body["reason"], ConditionType::Ready.as_str());

    // Already Ready: no second event, and the transition time is kept.
    let mut again = cluster(1, 2);
    again.status = Some(status.clone());
    let (_, calls2, _) = run(again, scenario).await;
    assert!(!calls2.iter().any(|c| c.path.contains("/events")));
    let s2 = status_of(&calls2);
    assert_eq!(
        cond(&s2, ConditionType::Ready).last_transition_time,
        cond(&status, ConditionType::Ready).last_transition_time
    );
}

fn existing_group(mqc: &MessageQueueCluster, group: i32) -> StatefulSet {
    let cm =
        crate::builders::broker_config_map(mqc, group, &crate::builders::OperatorEnv::default())
            .unwrap();
    crate::builders::broker_statefulset(mqc, group, &cm, &crate::builders::OperatorEnv::default())
}

#[tokio::test]
async fn a_group_past_the_spec_is_drained_not_refused_and_kept_until_empty() {
    let three = cluster(3, 1);
    let scenario = Scenario {
        existing: (0..3).map(|g| existing_group(&three, g)).collect(),
        ..Default::default()
    };
    let (result, calls, _) = run(cluster(2, 1), scenario).await;
    assert_eq!(
        result.unwrap(),
        Action::requeue(PROGRESS_REQUEUE),
        "a drain in progress looks again soon"
    );
    let s = summary(&calls);
    assert!(
        !s.iter()
            .any(|c| c.contains("orders-broker-2") && c.starts_with("PATCH")),
        "the draining group's objects are left as they are: {s:?}"
    );
    assert!(
        !s.iter().any(|c| c.starts_with("DELETE")),
        "no broker could be asked, so nothing is removed: {s:?}"
    );
    let status = status_of(&calls);
    assert_eq!(cond(&status, ConditionType::Stalled).status, FALSE);
    assert_eq!(cond(&status, ConditionType::Ready).status, FALSE);
    let reconciling = cond(&status, ConditionType::Reconciling);
    assert_eq!(reconciling.status, TRUE);
    assert!(
        reconciling.message.contains("draining orders-broker-2"),
        "{}",
        reconciling.message
    );
    let group = status
        .groups
        .iter()
        .find(|g| g.name == "orders-broker-2")
        .expect("the draining group is reported");
    assert!(
        group
            .drain
            .as_deref()
            .is_some_and(|d| d.starts_with("stopping writes")),
        "{group:?}"
    );
}

#[tokio::test]
async fn a_larger_size_recreates_the_statefulset_keeping_its_pods_a_smaller_one_stalls() {
    let old = cluster(1, 1);
    let scenario = Scenario {
        existing: vec![existing_group(&old, 0)],
        ..Default::default()
    };
    let mut bigger = cluster(1, 1);
    bigger.spec.broker.storage.size = "20Gi".into();
    let (result, calls, _) = run(bigger, scenario.clone()).await;
    assert!(result.is_ok(), "{result:?}");
    let sts_calls: Vec<&Call> = calls
        .iter()
        .filter(|c| c.path.ends_with("statefulsets/orders-broker-0"))
        .collect();
    // Deleted with its pods kept, not applied: the next reconcile creates it again.
    assert_eq!(sts_calls.len(), 1, "{:?}", summary(&calls));
    assert_eq!(sts_calls[0].method, Method::DELETE);
    assert_eq!(sts_calls[0].body["propagationPolicy"], "Orphan");
    assert_eq!(
        cond(&status_of(&calls), ConditionType::Stalled).status,
        FALSE
    );

    let mut smaller = cluster(1, 1);
    smaller.spec.broker.storage.size = "1Gi".into();
    let (result, calls, _) = run(smaller, scenario).await;
    assert!(result.is_ok());
    assert!(!summary(&calls)
        .iter()
        .any(|c| c.contains("statefulsets/orders-broker-0")));
    assert_eq!(
        cond(&status_of(&calls), ConditionType::Stalled).reason,
        Reason::StorageChangeRefused.as_str()
    );
}

#[tokio::test]
async fn unparseable_config_override_stalls_without_touching_brokers() {
    let mut mqc = cluster(1, 1);
    mqc.spec
        .broker
        .config
        .insert("broker.delay-levels".into(), "1s 5s".into());
    let (result, calls, _) = run(mqc, Scenario::default()).await;
    assert_eq!(result.unwrap(), Action::requeue(IDLE_REQUEUE));
    assert!(!summary(&calls).iter().any(|c| c.contains("broker-0")));
    let status = status_of(&calls);
    assert_eq!(
        cond(&status, ConditionType::Stalled).reason,
        Reason::InvalidConfig.as_str()
    );
    assert!(cond(&status, ConditionType::Stalled)
        .message
        .contains("broker.delay-levels"));
}

/// Issue 11, zones: a scheduled broker pod without a zone gets its node's zone label as the
/// `conveyor.dev/zone` annotation (server-side apply); one annotated already is left alone.
#[tokio::test]
async fn scheduled_broker_pods_get_their_nodes_zone() {
    let pod = |name: &str, zone: Option<&str>| {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "mq",
                         "labels": {"conveyor.dev/broker-group": "0"}},
            "spec": {"nodeName": "node-a", "containers": []},
        });
        if let Some(z) = zone {
            p["metadata"]["annotations"] = json!({"conveyor.dev/zone": z});
        }
        p
    };
    let scenario = Scenario {
        pods: vec![
            pod("orders-broker-0-0", None),
            pod("orders-broker-0-1", Some("eu-1a")),
        ],
        nodes: vec![json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "node-a", "labels": {"topology.kubernetes.io/zone": "eu-1a"}},
        })],
        ..Scenario::default()
    };
    let (result, calls, _) = run(cluster(1, 2), scenario).await;
    result.unwrap();
    let s = summary(&calls);
    assert_eq!(
        s.iter().filter(|c| c.starts_with("GET /nodes/")).count(),
        1,
        "{s:?}"
    );
    let patches: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == Method::PATCH && c.path.contains("/pods/"))
        .collect();
    assert_eq!(patches.len(), 1, "{s:?}");
    assert!(patches[0].path.ends_with("/pods/orders-broker-0-0"));
    assert_eq!(
        patches[0].body["metadata"]["annotations"]["conveyor.dev/zone"],
        "eu-1a"
    );
}

#[tokio::test]
async fn paused_cluster_changes_nothing_but_its_status() {
    let mut mqc = cluster(2, 1);
    mqc.metadata.annotations = Some([(PAUSE_ANNOTATION.to_string(), "true".to_string())].into());
    let (result, calls, _) = run(mqc, Scenario::default()).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let s = summary(&calls);
    assert_eq!(
        s.iter().filter(|c| c.starts_with("PATCH")).count(),
        1,
        "{s:?}"
    );
    let status = status_of(&calls);
    assert_eq!(cond(&status, ConditionType::Paused).status, TRUE);
    assert_eq!(cond(&status, ConditionType::Reconciling).status, FALSE);
    assert_eq!(status.observed_generation, Some(1));
}

#[tokio::test]
async fn api_errors_back_off_exponentially_and_reset_on_success() {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let server = tokio::spawn(async move {
        while let Some((_request, responder)) = handle.next_request().await {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "etcd unavailable", "reason": "InternalError", "code": 500});
            responder.send_response(
                Response::builder()
                    .status(500)
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
        }
    });
    let ctx = Arc::new(Context::new(client, None));
    let mqc = Arc::new(cluster(1, 1));
    let err = reconcile(mqc.clone(), ctx.clone()).await.unwrap_err();
    let delays: Vec<Action> = (0..8)
        .map(|_| error_policy(mqc.clone(), &err, ctx.clone()))
        .collect();
    let secs = [5, 10, 20, 40, 80, 160, 300, 300];
    for (a, s) in delays.iter().zip(secs) {
        assert_eq!(*a, Action::requeue(Duration::from_secs(s)));
    }
    ctx.reset_backoff(&mqc);
    assert_eq!(error_policy(mqc, &err, ctx), Action::requeue(BASE_BACKOFF));
    server.abort();
}

#[test]
fn statefulset_readiness_needs_current_generation_and_all_pods() {
    let mqc = cluster(1, 2);
    let mut sts = existing_group(&mqc, 0);
    assert!(!statefulset_ready(&sts), "no status yet");
    sts.metadata.generation = Some(2);
    sts.status = Some(StatefulSetStatus {
        observed_generation: Some(1),
        replicas: 2,
        ready_replicas: Some(2),
        updated_replicas: Some(2),
        ..Default::default()
    });
    assert!(!statefulset_ready(&sts), "stale generation");
    sts.status.as_mut().unwrap().observed_generation = Some(2);
    assert!(statefulset_ready(&sts));
    sts.status.as_mut().unwrap().updated_replicas = Some(1);
    assert!(!statefulset_ready(&sts), "rolling");
}

#[tokio::test]
async fn reconciles_are_counted_and_timed_and_errors_labelled() {
    let (result, _, ctx) = run(cluster(1, 1), Scenario::default()).await;
    assert!(result.is_ok());
    let text = ctx.metrics.render();
    assert!(text
        .lines()
        .any(|l| l == "conveyor_operator_reconciliations_total 1"));
    assert!(text
        .lines()
        .any(|l| l == "conveyor_operator_reconcile_duration_seconds_count 1"));
    assert!(!text.contains("conveyor_operator_reconcile_errors_total{"));

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let server = tokio::spawn(async move {
        while let Some((_request, responder)) = handle.next_request().await {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "conflict", "reason": "Conflict", "code": 409});
            responder.send_response(
                Response::builder()
                    .status(409)
                    .body(Body::from(serde_json::to_vec(&status).unwrap()))
                    .unwrap(),
            );
        }
    });
    let metrics = Arc::new(crate::telemetry::Metrics::new());
    let ctx = Arc::new(
        Context::new(kube::Client::new(service, "default"), None).with_metrics(metrics.clone()),
    );
    let err = reconcile(Arc::new(cluster(1, 1)), ctx).await.unwrap_err();
    assert_eq!(err.metric_labels(), ("api", "Conflict".to_string()));
    let text = metrics.render();
    assert!(
        text.lines()
            .any(|l| l
                == "conveyor_operator_reconcile_errors_total{kind=\"api\",reason=\"Conflict\"} 1"),
        "{text}"
    );
    server.abort();
}

#[test]
fn error_labels_come_from_small_fixed_sets() {
    assert_eq!(
        Error::MissingName.metric_labels(),
        ("object", "MissingName".to_string())
    );
    let no_reason = kube::core::Status {
        code: 503,
        ..Default::default()
    };
    assert_eq!(
        Error::Kube(kube::Error::Api(Box::new(no_reason))).metric_labels(),
        ("api", "Code503".to_string())
    );
}
