//! Unit tests of the pure builders.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec,
    ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;
use crate::crd::{
    BrokerSpec, FlushMode, MessageQueueCluster, MessageQueueClusterSpec, NameServerSpec, Placement,
    Rack, ReplicationMode, ServiceExposure, ServiceType, StorageSpec,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub(crate) fn cluster(groups: i32, replicas: i32) -> MessageQueueCluster {
    let mut mqc = MessageQueueCluster::new(
        "orders",
        MessageQueueClusterSpec {
            image: "localhost/conveyor:dev".into(),
            image_pull_policy: None,
            image_pull_secrets: vec![],
            name_server: NameServerSpec::default(),
            broker: BrokerSpec {
                groups,
                replicas_per_group: replicas,
                storage: StorageSpec {
                    size: "10Gi".into(),
                    storage_class_name: Some("fast".into()),
                    delete_claim: false,
                },
                flush_mode: FlushMode::Async,
                replication_mode: ReplicationMode::Async,
                failover: Default::default(),
                resources: None,
                config: BTreeMap::new(),
                liveness_probe: None,
                readiness_probe: None,
            },
            placement: Placement::default(),
            service: ServiceExposure::default(),
            security: Default::default(),
            pod_template: Default::default(),
        },
    );
    mqc.metadata.namespace = Some("mq".into());
    mqc.metadata.uid = Some("0b1c-uid".into());
    mqc.metadata.generation = Some(1);
    mqc
}

fn parse(toml_text: &str) -> toml::Table {
    toml::from_str(toml_text).expect("rendered config is valid TOML")
}

fn pod_config(mqc: &MessageQueueCluster, group: i32, ordinal: i32) -> toml::Table {
    let cm = broker_config_map(mqc, group, &crate::builders::OperatorEnv::default()).unwrap();
    let key = format!("orders-broker-{group}-{ordinal}.toml");
    parse(&cm.data.unwrap()[&key])
}

#[test]
fn flush_mode_reaches_the_broker_config() {
    let mut mqc = cluster(1, 1);
    assert_eq!(
        pod_config(&mqc, 0, 0)["store"]["flush-mode"].as_str(),
        Some("async")
    );
    mqc.spec.broker.flush_mode = FlushMode::Sync;
    assert_eq!(
        pod_config(&mqc, 0, 0)["store"]["flush-mode"].as_str(),
        Some("sync")
    );
}

#[test]
fn replication_mode_reaches_the_master_role() {
    let mut mqc = cluster(1, 2);
    assert_eq!(
        pod_config(&mqc, 0, 0)["broker"]["broker-role"].as_str(),
        Some("ASYNC_MASTER")
    );
    mqc.spec.broker.replication_mode = ReplicationMode::Sync;
    assert_eq!(
        pod_config(&mqc, 0, 0)["broker"]["broker-role"].as_str(),
        Some("SYNC_MASTER")
    );
    assert_eq!(
        pod_config(&mqc, 0, 1)["broker"]["broker-role"].as_str(),
        Some("SLAVE")
    );
}

#[test]
fn ordinals_map_to_broker_ids_and_roles() {
    let mqc = cluster(2, 3);
    for group in 0..2 {
        let cm = broker_config_map(&mqc, group, &crate::builders::OperatorEnv::default()).unwrap();
        assert_eq!(cm.data.as_ref().unwrap().len(), 3, "one file per pod");
        for ordinal in 0..3 {
            let c = pod_config(&mqc, group, ordinal);
            assert_eq!(c["broker"]["broker-id"].as_integer(), Some(ordinal as i64));
            assert_eq!(
                c["broker"]["broker-name"].as_str(),
                Some(format!("orders-broker-{group}").as_str())
            );
            assert_eq!(c["broker"]["cluster-name"].as_str(), Some("orders"));
            let role = c["broker"]["broker-role"].as_str().unwrap();
            assert_eq!(role == "SLAVE", ordinal != 0, "ordinal {ordinal}: {role}");
        }
    }
    assert_eq!(
        BrokerRole::for_ordinal(0, ReplicationMode::Async),
        BrokerRole::AsyncMaster
    );
    assert_eq!(
        BrokerRole::for_ordinal(4, ReplicationMode::Sync),
        BrokerRole::Slave
    );
}

#[test]
fn brokers_register_with_every_name_server_by_dns_name() {
    let mqc = cluster(1, 1);
    let c = pod_config(&mqc, 0, 0);
    let addrs: Vec<&str> = c["broker"]["namesrv-addrs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        addrs,
        [
            "orders-namesrv-0.orders-namesrv-headless.mq.svc:9876",
            "orders-namesrv-1.orders-namesrv-headless.mq.svc:9876"
        ]
    );
    assert_eq!(name_server_addresses(&mqc), addrs.join(";"));
    assert_eq!(
        name_server_service_address(&mqc),
        "orders-namesrv.mq.svc:9876"
    );
    assert_eq!(c["store"]["data-dir"].as_str(), Some(DATA_DIR));
    assert_eq!(c["http"]["listen"].as_str(), Some("0.0.0.0:8080"));
}

#[test]
fn config_overrides_are_rendered_and_bad_values_rejected() {
    let mut mqc = cluster(1, 1);
    mqc.spec
        .broker
        .config
        .insert("broker.auto-create-topic".into(), "false".into());
    mqc.spec
        .broker
        .config
        .insert("store.retention-hours".into(), "72".into());
    mqc.spec
        .broker
        .config
        .insert("broker.delay-levels".into(), "\"1s 5s\"".into());
    let c = pod_config(&mqc, 0, 0);
    assert_eq!(c["broker"]["auto-create-topic"].as_bool(), Some(false));
    assert_eq!(c["store"]["retention-hours"].as_integer(), Some(72));
    assert_eq!(c["broker"]["delay-levels"].as_str(), Some("1s 5s"));

    mqc.spec
        .broker
        .config
        .insert("broker.delay-levels".into(), "1s 5s".into());
    let err = broker_config_map(&mqc, 0, &crate::builders::OperatorEnv::default()).unwrap_err();
    assert!(
        matches!(err, ConfigError::BadValue { ref key, .. } if key == "broker.delay-levels"),
        "{err}"
    );
}

#[test]
fn config_hash_changes_with_the_config_and_only_then() {
    let mqc = cluster(1, 1);
    let hash_of = |m: &MessageQueueCluster| {
        let cm = broker_config_map(m, 0, &crate::builders::OperatorEnv::default()).unwrap();
        broker_statefulset(m, 0, &cm, &crate::builders::OperatorEnv::default())
            .spec
            .unwrap()
            .template
            .metadata
            .unwrap()
            .annotations
            .unwrap()[CONFIG_HASH_ANNOTATION]
            .clone()
    };
    let h1 = hash_of(&mqc);
    assert_eq!(h1, hash_of(&mqc.clone()), "deterministic");
    assert_eq!(h1.len(), 64);
    let mut sync = mqc.clone();
    sync.spec.broker.flush_mode = FlushMode::Sync;
    assert_ne!(h1, hash_of(&sync));
    let mut more = mqc.clone();
    more.spec.broker.replicas_per_group = 2;
    assert_ne!(h1, hash_of(&more));
}

#[test]
fn broker_statefulset_has_storage_probes_and_security() {
    let mut mqc = cluster(2, 2);
    mqc.spec.broker.resources = Some(ResourceRequirements {
        limits: Some([("memory".to_string(), Quantity("2Gi".into()))].into()),
        requests: Some([("cpu".to_string(), Quantity("500m".into()))].into()),
        ..Default::default()
    });
    let cm = broker_config_map(&mqc, 1, &crate::builders::OperatorEnv::default()).unwrap();
    let sts = broker_statefulset(&mqc, 1, &cm, &crate::builders::OperatorEnv::default());
    assert_eq!(sts.metadata.name.as_deref(), Some("orders-broker-1"));
    assert_eq!(sts.metadata.namespace.as_deref(), Some("mq"));
    let spec = sts.spec.unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.service_name.as_deref(), Some("orders-broker-1"));
    let claim = &spec.volume_claim_templates.unwrap()[0];
    let cs = claim.spec.as_ref().unwrap();
    assert_eq!(cs.storage_class_name.as_deref(), Some("fast"));
    assert_eq!(
        cs.resources.as_ref().unwrap().requests.as_ref().unwrap()["storage"].0,
        "10Gi"
    );
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.resources, mqc.spec.broker.resources);
    assert_eq!(
        c.readiness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/readyz")
    );
    assert_eq!(
        c.liveness_probe
            .as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .as_deref(),
        Some("/healthz")
    );
    let args = c.args.clone().unwrap();
    assert!(
        args.contains(&"/etc/conveyor/$(POD_NAME).toml".to_string()),
        "{args:?}"
    );
    assert!(args.contains(&"$(POD_IP):10911".to_string()), "{args:?}");
    // The zone: a downward-API file of the annotation the operator sets once scheduled.
    let at = args.iter().position(|a| a == "--zone-file").unwrap();
    assert_eq!(args[at + 1], "/var/run/conveyor/zone");
    let mounts = c.volume_mounts.as_ref().unwrap();
    assert!(mounts
        .iter()
        .any(|m| m.name == "pod-info" && m.mount_path == "/var/run/conveyor"));
    let volumes = pod.volumes.clone().unwrap();
    let info = volumes.iter().find(|v| v.name == "pod-info").unwrap();
    let item = &info.downward_api.as_ref().unwrap().items.as_ref().unwrap()[0];
    assert_eq!(item.path, "zone");
    assert_eq!(
        item.field_ref.as_ref().unwrap().field_path,
        "metadata.annotations['conveyor.dev/zone']"
    );
    let sc = c.security_context.as_ref().unwrap();
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(
        pod.volumes.unwrap()[0].config_map.as_ref().unwrap().name,
        "orders-broker-1-config"
    );
}

#[test]
fn probe_settings_and_delete_claim_reach_the_statefulsets() {
    let mut mqc = cluster(1, 2);
    let sts = |m: &MessageQueueCluster| {
        let cm = broker_config_map(m, 0, &crate::builders::OperatorEnv::default()).unwrap();
        broker_statefulset(m, 0, &cm, &crate::builders::OperatorEnv::default())
            .spec
            .unwrap()
    };
    // Defaults: the operator's timings, claims kept.
    let spec = sts(&mqc);
    let live = spec.template.spec.as_ref().unwrap().containers[0]
        .liveness_probe
        .clone()
        .unwrap();
    assert_eq!(
        (
            live.initial_delay_seconds,
            live.period_seconds,
            live.timeout_seconds,
            live.failure_threshold
        ),
        (Some(30), Some(10), Some(3), Some(6))
    );
    let retention = spec.persistent_volume_claim_retention_policy.unwrap();
    assert_eq!(retention.when_deleted.as_deref(), Some("Retain"));
    assert_eq!(retention.when_scaled.as_deref(), Some("Retain"));

    // A field set replaces its default only; deleteClaim deletes claims with the StatefulSet.
    mqc.spec.broker.liveness_probe = Some(crate::crd::ProbeSpec {
        failure_threshold: Some(60),
        ..Default::default()
    });
    mqc.spec.broker.readiness_probe = Some(crate::crd::ProbeSpec {
        period_seconds: Some(2),
        timeout_seconds: Some(1),
        ..Default::default()
    });
    mqc.spec.name_server.liveness_probe = Some(crate::crd::ProbeSpec {
        initial_delay_seconds: Some(90),
        ..Default::default()
    });
    mqc.spec.broker.storage.delete_claim = true;
    let spec = sts(&mqc);
    let c = &spec.template.spec.as_ref().unwrap().containers[0];
    let live = c.liveness_probe.clone().unwrap();
    assert_eq!(
        (
            live.initial_delay_seconds,
            live.period_seconds,
            live.failure_threshold
        ),
        (Some(30), Some(10), Some(60))
    );
    let ready = c.readiness_probe.clone().unwrap();
    assert_eq!(
        (
            ready.period_seconds,
            ready.timeout_seconds,
            ready.failure_threshold
        ),
        (Some(2), Some(1), Some(3))
    );
    let retention = spec.persistent_volume_claim_retention_policy.unwrap();
    assert_eq!(retention.when_deleted.as_deref(), Some("Delete"));
    assert_eq!(retention.when_scaled.as_deref(), Some("Retain"));
    let ns = crate::builders::name_server_statefulset(&mqc).spec.unwrap();
    let ns_live = ns.template.spec.unwrap().containers[0]
        .liveness_probe
        .clone()
        .unwrap();
    assert_eq!(
        (ns_live.initial_delay_seconds, ns_live.period_seconds),
        (Some(90), Some(10))
    );
}

#[test]
fn placement_passes_through_to_every_pod() {
    let mut mqc = cluster(1, 1);
    mqc.spec.placement = Placement {
        affinity: Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "disk".into(),
                            operator: "In".into(),
                            values: Some(vec!["ssd".into()]),
                        }]),
                        ..Default::default()
                    }],
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        tolerations: vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("mq".into()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        }],
        topology_spread_constraints: vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "topology.kubernetes.io/zone".into(),
            when_unsatisfiable: "ScheduleAnyway".into(),
            ..Default::default()
        }],
        node_selector: [("pool".to_string(), "mq".to_string())].into(),
        rack: None,
    };
    let cm = broker_config_map(&mqc, 0, &crate::builders::OperatorEnv::default()).unwrap();
    for pod in [
        broker_statefulset(&mqc, 0, &cm, &crate::builders::OperatorEnv::default())
            .spec
            .unwrap()
            .template
            .spec
            .unwrap(),
        name_server_statefulset(&mqc)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap(),
    ] {
        let affinity = pod.affinity.unwrap();
        let user = mqc.spec.placement.affinity.clone().unwrap();
        assert_eq!(affinity.node_affinity, user.node_affinity);
        assert_eq!(pod.tolerations.unwrap(), mqc.spec.placement.tolerations);
        // The user's first, then the operator's own (hostname).
        let constraints = pod.topology_spread_constraints.unwrap();
        assert_eq!(
            constraints[..1],
            mqc.spec.placement.topology_spread_constraints[..]
        );
        assert_eq!(constraints[1].topology_key, "kubernetes.io/hostname");
        assert_eq!(pod.node_selector.unwrap(), mqc.spec.placement.node_selector);
    }
}

/// The preferred anti-affinity terms of a pod spec: (topology key, selected labels).
fn spread_terms(pod: &PodSpec) -> Vec<(String, BTreeMap<String, String>)> {
    pod.affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .clone()
        })
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            (
                t.pod_affinity_term.topology_key,
                t.pod_affinity_term
                    .label_selector
                    .and_then(|s| s.match_labels)
                    .unwrap_or_default(),
            )
        })
        .collect()
}

/// The topology spread constraints of a pod spec: (key, mode, selected labels).
fn spread_constraints(pod: &PodSpec) -> Vec<(String, String, BTreeMap<String, String>)> {
    pod.topology_spread_constraints
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            (
                c.topology_key,
                c.when_unsatisfiable,
                c.label_selector
                    .and_then(|s| s.match_labels)
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[test]
fn a_groups_replicas_never_share_a_node_another_node_could_take_and_spread_over_zones() {
    let mut mqc = cluster(2, 2);
    let cm = broker_config_map(&mqc, 1, &crate::builders::OperatorEnv::default()).unwrap();
    let pod = |mqc: &MessageQueueCluster| {
        broker_statefulset(mqc, 1, &cm, &crate::builders::OperatorEnv::default())
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
    };
    let peers = selector_labels(&mqc, Component::Broker, Some(1));
    let hostname = (
        "kubernetes.io/hostname".to_string(),
        "DoNotSchedule".to_string(),
        peers.clone(),
    );
    let plain = pod(&mqc);
    assert_eq!(spread_constraints(&plain), vec![hostname.clone()]);
    let c = &plain.topology_spread_constraints.unwrap()[0];
    assert_eq!(
        (c.max_skew, c.node_taints_policy.as_deref()),
        (1, Some("Honor"))
    );
    mqc.spec.placement.rack = Some(Rack {
        topology_key: "topology.kubernetes.io/zone".into(),
    });
    assert_eq!(
        spread_constraints(&pod(&mqc)),
        vec![
            hostname.clone(),
            (
                "topology.kubernetes.io/zone".to_string(),
                "ScheduleAnyway".to_string(),
                peers.clone()
            )
        ]
    );
    // A user's constraint for the same key and mode wins (the API refuses duplicates).
    mqc.spec.placement.rack = None;
    mqc.spec.placement.topology_spread_constraints = vec![TopologySpreadConstraint {
        max_skew: 2,
        topology_key: "kubernetes.io/hostname".into(),
        when_unsatisfiable: "DoNotSchedule".into(),
        ..Default::default()
    }];
    let own = pod(&mqc).topology_spread_constraints.unwrap();
    assert_eq!(own.len(), 1);
    assert_eq!(own[0].max_skew, 2);
}

#[test]
fn a_groups_replicas_prefer_different_nodes_and_with_rack_awareness_different_zones() {
    let mut mqc = cluster(2, 2);
    let cm = broker_config_map(&mqc, 1, &crate::builders::OperatorEnv::default()).unwrap();
    let pod = |mqc: &MessageQueueCluster| {
        broker_statefulset(mqc, 1, &cm, &crate::builders::OperatorEnv::default())
            .spec
            .unwrap()
            .template
            .spec
            .unwrap()
    };
    let peers = selector_labels(&mqc, Component::Broker, Some(1));
    assert_eq!(
        spread_terms(&pod(&mqc)),
        vec![("kubernetes.io/hostname".to_string(), peers.clone())],
        "only the replicas of group 1 repel each other"
    );
    let ns = name_server_statefulset(&mqc)
        .spec
        .unwrap()
        .template
        .spec
        .unwrap();
    assert_eq!(
        spread_terms(&ns),
        vec![(
            "kubernetes.io/hostname".to_string(),
            selector_labels(&mqc, Component::NameServer, None)
        )]
    );
    mqc.spec.placement.rack = Some(Rack {
        topology_key: "topology.kubernetes.io/zone".into(),
    });
    let racked = pod(&mqc);
    assert_eq!(
        spread_terms(&racked),
        vec![
            ("kubernetes.io/hostname".to_string(), peers.clone()),
            ("topology.kubernetes.io/zone".to_string(), peers)
        ]
    );
    let terms = racked
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert_eq!(terms.len(), 1);
    let exprs = terms[0].match_expressions.clone().unwrap();
    assert_eq!(
        (exprs[0].key.as_str(), exprs[0].operator.as_str()),
        ("topology.kubernetes.io/zone", "Exists"),
        "only nodes that say which zone they are in"
    );
}

#[test]
fn names_labels_and_owner_references_are_stable() {
    let mqc = cluster(3, 1);
    let cm = broker_config_map(&mqc, 2, &crate::builders::OperatorEnv::default()).unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("orders-broker-2-config"));
    let sts = broker_statefulset(&mqc, 2, &cm, &crate::builders::OperatorEnv::default());
    let sel = sts
        .spec
        .as_ref()
        .unwrap()
        .selector
        .match_labels
        .clone()
        .unwrap();
    let expected: BTreeMap<String, String> = [
        ("app.kubernetes.io/name", "conveyor"),
        ("app.kubernetes.io/instance", "orders"),
        ("app.kubernetes.io/component", "broker"),
        ("conveyor.dev/broker-group", "2"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(sel, expected);
    let template_labels = sts
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .clone()
        .unwrap();
    assert!(expected
        .iter()
        .all(|(k, v)| template_labels.get(k) == Some(v)));
    assert_eq!(
        sts.metadata.labels.as_ref().unwrap()["app.kubernetes.io/managed-by"],
        "conveyor-operator"
    );
    // The spec does not leak into names or selectors: changing it keeps them.
    let mut changed = mqc.clone();
    changed.spec.broker.flush_mode = FlushMode::Sync;
    changed.spec.image = "localhost/conveyor:next".into();
    let cm2 = broker_config_map(&changed, 2, &crate::builders::OperatorEnv::default()).unwrap();
    let sts2 = broker_statefulset(&changed, 2, &cm2, &crate::builders::OperatorEnv::default());
    assert_eq!(
        sts2.spec.unwrap().selector,
        sts.spec.clone().unwrap().selector
    );

    for owner in [
        sts.metadata.owner_references.clone().unwrap(),
        cm.metadata.owner_references.clone().unwrap(),
        broker_pdb(&mqc, 2).metadata.owner_references.unwrap(),
        broker_headless_service(&mqc, 2)
            .metadata
            .owner_references
            .unwrap(),
        name_server_statefulset(&mqc)
            .metadata
            .owner_references
            .unwrap(),
        name_server_pdb(&mqc).metadata.owner_references.unwrap(),
        name_server_client_service(&mqc)
            .metadata
            .owner_references
            .unwrap(),
        name_server_headless_service(&mqc)
            .metadata
            .owner_references
            .unwrap(),
    ] {
        assert_eq!(owner.len(), 1);
        assert_eq!(owner[0].kind, "MessageQueueCluster");
        assert_eq!(owner[0].api_version, "conveyor.dev/v1alpha1");
        assert_eq!(owner[0].name, "orders");
        assert_eq!(owner[0].uid, "0b1c-uid");
        assert_eq!(owner[0].controller, Some(true));
    }
}

#[test]
fn name_server_services_and_statefulset() {
    let mut mqc = cluster(1, 1);
    mqc.spec.name_server.replicas = 3;
    mqc.spec.service = ServiceExposure {
        type_: ServiceType::LoadBalancer,
        annotations: [("lb/internal".to_string(), "true".to_string())].into(),
    };
    let headless = name_server_headless_service(&mqc);
    assert_eq!(
        headless.metadata.name.as_deref(),
        Some("orders-namesrv-headless")
    );
    let hs = headless.spec.unwrap();
    assert_eq!(hs.cluster_ip.as_deref(), Some("None"));
    assert_eq!(hs.publish_not_ready_addresses, Some(true));
    let client = name_server_client_service(&mqc);
    assert_eq!(client.metadata.name.as_deref(), Some("orders-namesrv"));
    assert_eq!(client.metadata.annotations.unwrap()["lb/internal"], "true");
    assert_eq!(client.spec.unwrap().type_.as_deref(), Some("LoadBalancer"));
    let sts = name_server_statefulset(&mqc).spec.unwrap();
    assert_eq!(sts.replicas, Some(3));
    assert_eq!(sts.service_name.as_deref(), Some("orders-namesrv-headless"));
    assert_eq!(name_server_addresses(&mqc).split(';').count(), 3);
    // The KV configuration (kvConfig.json) is written under --data-dir, on a writable volume:
    // the root file system is read-only.
    let pod = sts.template.spec.unwrap();
    let c = &pod.containers[0];
    let args = c.args.clone().unwrap();
    let at = args.iter().position(|a| a == "--data-dir").unwrap();
    assert_eq!(args[at + 1], DATA_DIR);
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(mount.mount_path, DATA_DIR);
    let volume = &pod.volumes.unwrap()[0];
    assert_eq!(volume.name, mount.name);
    assert!(volume.empty_dir.is_some());
    let pdb = name_server_pdb(&mqc).spec.unwrap();
    assert_eq!(pdb.max_unavailable, Some(IntOrString::Int(1)));
}

#[test]
fn config_overrides_must_be_broker_settings() {
    let with = |key: &str, value: &str| {
        let mut mqc = cluster(1, 1);
        mqc.spec.broker.config.insert(key.into(), value.into());
        broker_config_map(&mqc, 0, &crate::builders::OperatorEnv::default())
    };
    let err = with("broker.auto-create-topics", "false").unwrap_err();
    assert!(
        matches!(err, ConfigError::UnknownKey { ref key, .. } if key == "broker.auto-create-topics"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("broker.config key \"broker.auto-create-topics\" is not a broker setting"),
        "{text}"
    );
    assert!(
        text.contains("unknown field `auto-create-topics`"),
        "{text}"
    );
    let err = with("store.retention", "72").unwrap_err();
    assert!(
        matches!(err, ConfigError::UnknownKey { ref key, .. } if key == "store.retention"),
        "{err}"
    );
    let err = with("store.retention-hours", "\"three days\"").unwrap_err();
    assert!(
        matches!(err, ConfigError::BadValue { ref key, .. } if key == "store.retention-hours"),
        "{err}"
    );
    let err = with("store.flush-mode", "\"sync\"").unwrap_err();
    assert_eq!(err, ConfigError::Managed("store.flush-mode".into()));
    let err = with("broker.broker-id", "3").unwrap_err();
    assert_eq!(err, ConfigError::Managed("broker.broker-id".into()));
    let err = with("broker.advertised-addr", "\"10.0.0.1:10911\"").unwrap_err();
    assert_eq!(err, ConfigError::Managed("broker.advertised-addr".into()));
    let err = with("broker.zone-file", "\"/tmp/z\"").unwrap_err();
    assert_eq!(err, ConfigError::Managed("broker.zone-file".into()));
    let err = with("http.listen", "\"0.0.0.0:1\"").unwrap_err();
    assert_eq!(err, ConfigError::BadKey("http.listen".into()));
    assert!(with("store.disk-full-ratio", "0.95").is_ok());
}

#[test]
fn rendered_config_is_the_documented_text() {
    let text = render_broker_toml(
        &cluster(1, 2),
        0,
        1,
        &crate::builders::OperatorEnv::default(),
    )
    .unwrap();
    assert_eq!(
        text,
        r#"# Rendered by conveyor-operator for MessageQueueCluster mq/orders; changes are overwritten.
# Pod orders-broker-0-1 (ordinal 1): SLAVE. advertised-addr is passed as a flag (the pod IP).
[broker]
listen = "0.0.0.0:10911"
cluster-name = "orders"
broker-name = "orders-broker-0"
broker-id = 1
broker-role = "SLAVE"
namesrv-addrs = ["orders-namesrv-0.orders-namesrv-headless.mq.svc:9876", "orders-namesrv-1.orders-namesrv-headless.mq.svc:9876"]

[store]
data-dir = "/var/lib/conveyor"
flush-mode = "async"

[http]
listen = "0.0.0.0:8080"

[grpc]
listen = "0.0.0.0:8081"
"#
    );
}

#[test]
fn failover_renders_the_controller_and_no_fixed_role() {
    let env = crate::builders::OperatorEnv {
        controller_addr: Some("conveyor-operator-controller.ops.svc:9878".into()),
        ..Default::default()
    };
    let settings = broker_settings(&cluster(1, 2), 0, 1, &env).unwrap();
    assert_eq!(settings.broker.broker_role, None);
    assert_eq!(settings.broker.broker_id, Some(1));
    assert_eq!(
        settings.replication.controller_addrs,
        Some(vec!["conveyor-operator-controller.ops.svc:9878".to_string()])
    );
    assert_eq!(
        settings.replication.controller_scope.as_deref(),
        Some("mq/orders")
    );
    assert_eq!(settings.replication.synchronous, Some(false));
    // One replica per group, failover off, or no controller: classic roles by ordinal.
    let mut off = cluster(1, 2);
    off.spec.broker.failover.enabled = false;
    for (mqc, env) in [
        (cluster(1, 1), env.clone()),
        (off, env.clone()),
        (cluster(1, 2), crate::builders::OperatorEnv::default()),
    ] {
        let s = broker_settings(&mqc, 0, 0, &env).unwrap();
        assert!(s.broker.broker_role.is_some());
        assert_eq!(s.replication.controller_addrs, None);
    }
}

#[test]
fn failover_groups_are_rolled_by_the_operator_and_classic_ones_by_the_statefulset() {
    let env = crate::builders::OperatorEnv {
        controller_addr: Some("conveyor-operator-controller.ops.svc:9878".into()),
        ..Default::default()
    };
    let strategy = |mqc: &MessageQueueCluster, env: &crate::builders::OperatorEnv| {
        let cm = broker_config_map(mqc, 0, env).unwrap();
        broker_statefulset(mqc, 0, &cm, env)
            .spec
            .unwrap()
            .update_strategy
            .unwrap()
            .type_
            .unwrap()
    };
    assert_eq!(strategy(&cluster(1, 2), &env), "OnDelete");
    // Classic roles: the StatefulSet restarts the highest ordinals (slaves) first anyway.
    assert_eq!(
        strategy(&cluster(1, 2), &crate::builders::OperatorEnv::default()),
        "RollingUpdate"
    );
    assert_eq!(strategy(&cluster(1, 1), &env), "RollingUpdate");
}

/// The flags and mounted paths of a pod template's first container.
fn container_view(
    pod: &k8s_openapi::api::core::v1::PodTemplateSpec,
) -> (Vec<String>, Vec<String>, Vec<String>) {
    let spec = pod.spec.as_ref().unwrap();
    let c = &spec.containers[0];
    let mounts = c
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.mount_path.clone())
        .collect();
    let secrets = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.secret.as_ref()?.secret_name.clone())
        .collect();
    (c.args.clone().unwrap_or_default(), mounts, secrets)
}

#[test]
fn acl_and_tls_mount_their_secrets_and_name_them_on_the_command_line() {
    let env = crate::builders::OperatorEnv {
        cluster_secret: Some(crate::builders::ClusterSecret("s".repeat(20))),
        ..Default::default()
    };
    let mut mqc = cluster(1, 2);
    let cm = broker_config_map(&mqc, 0, &env).unwrap();
    let plain = broker_statefulset(&mqc, 0, &cm, &env);
    let (args, _, secrets) = container_view(&plain.spec.as_ref().unwrap().template);
    assert!(!args
        .iter()
        .any(|a| a.starts_with("--acl") || a.starts_with("--tls")));
    assert!(secrets.is_empty());
    assert!(crate::builders::cluster_secret(&mqc, &env).is_none());
    assert!(crate::builders::network_policies(&mqc).is_empty());

    mqc.spec.security.acl.enabled = true;
    mqc.spec.security.tls.mode = crate::crd::TlsMode::Enforcing;
    mqc.spec.security.tls.secret_name = Some("orders-tls".into());
    let cm = broker_config_map(&mqc, 0, &env).unwrap();
    let broker = broker_statefulset(&mqc, 0, &cm, &env);
    let namesrv = name_server_statefulset(&mqc);
    for sts in [&broker, &namesrv] {
        let (args, mounts, secrets) = container_view(&sts.spec.as_ref().unwrap().template);
        let flag = |f: &str| {
            args.iter()
                .position(|a| a == f)
                .map(|i| args[i + 1].clone())
        };
        assert_eq!(flag("--acl-enabled").as_deref(), Some("true"));
        assert_eq!(
            flag("--acl-users-file").as_deref(),
            Some("/etc/conveyor-acl/plain_acl.yml")
        );
        assert_eq!(
            flag("--acl-cluster-secret-file").as_deref(),
            Some("/etc/conveyor-cluster/secret")
        );
        assert_eq!(flag("--tls-mode").as_deref(), Some("enforcing"));
        assert_eq!(
            flag("--tls-cert-file").as_deref(),
            Some("/etc/conveyor-tls/tls.crt")
        );
        for dir in [
            "/etc/conveyor-acl",
            "/etc/conveyor-cluster",
            "/etc/conveyor-tls",
        ] {
            assert!(
                mounts.iter().any(|m| m == dir),
                "{dir} not mounted: {mounts:?}"
            );
        }
        assert_eq!(
            secrets,
            vec!["orders-tls", "orders-acl-users", "orders-cluster-secret"]
        );
    }
    // Turning ACL on rolls the pods (the flags are in the template's hash).
    let hash = |sts: &k8s_openapi::api::apps::v1::StatefulSet| {
        sts.spec
            .as_ref()
            .unwrap()
            .template
            .metadata
            .as_ref()
            .unwrap()
            .annotations
            .as_ref()
            .unwrap()[CONFIG_HASH_ANNOTATION]
            .clone()
    };
    assert_ne!(hash(&broker), hash(&plain));
    let secret = crate::builders::cluster_secret(&mqc, &env).unwrap();
    assert_eq!(
        secret.metadata.name.as_deref(),
        Some("orders-cluster-secret")
    );
    assert_eq!(
        secret.data.unwrap()["secret"].0,
        "s".repeat(20).into_bytes()
    );
    assert!(format!("{env:?}").contains("***") && !format!("{env:?}").contains("ssss"));
    // No secret in the operator: nothing to copy.
    assert!(crate::builders::cluster_secret(&mqc, &Default::default()).is_none());
}

#[test]
fn the_network_policies_open_client_ports_and_the_replication_port_only_to_the_group() {
    let mut mqc = cluster(2, 2);
    mqc.spec.security.network_policy.enabled = true;
    let policies = crate::builders::network_policies(&mqc);
    assert_eq!(policies.len(), 3);
    let clients = policies[0].spec.as_ref().unwrap();
    let rule = &clients.ingress.as_ref().unwrap()[0];
    assert!(rule.from.is_none(), "client ports are open to every peer");
    let ports: Vec<_> = rule
        .ports
        .iter()
        .flatten()
        .map(|p| p.port.clone().unwrap())
        .collect();
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert!(!ports.contains(&IntOrString::Int(10912)));
    assert!(ports.contains(&IntOrString::Int(10911)) && ports.contains(&IntOrString::Int(9876)));
    for (g, policy) in policies[1..].iter().enumerate() {
        let spec = policy.spec.as_ref().unwrap();
        let group = spec
            .pod_selector
            .as_ref()
            .unwrap()
            .match_labels
            .clone()
            .unwrap();
        assert_eq!(group["conveyor.dev/broker-group"], g.to_string());
        let rule = &spec.ingress.as_ref().unwrap()[0];
        let from = rule.from.as_ref().unwrap()[0].pod_selector.clone().unwrap();
        assert_eq!(
            from.match_labels.unwrap(),
            group,
            "only the group's own pods"
        );
        assert_eq!(
            rule.ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(10912))
        );
    }
}

#[test]
fn generated_certificates_are_mounted_from_the_operators_secret() {
    let env = crate::builders::OperatorEnv::default();
    let mut mqc = cluster(1, 2);
    mqc.spec.security.tls.generate_certificates = true;
    let cm = broker_config_map(&mqc, 0, &env).unwrap();
    let broker = broker_statefulset(&mqc, 0, &cm, &env);
    let (args, _, secrets) = container_view(&broker.spec.as_ref().unwrap().template);
    assert_eq!(secrets, vec!["orders-tls"]);
    assert!(
        args.iter().any(|a| a == "/etc/conveyor-tls/tls.key"),
        "{args:?}"
    );
    // A Secret given wins over generating one.
    mqc.spec.security.tls.secret_name = Some("mine".into());
    assert_eq!(
        crate::builders::tls_secret_name(&mqc).as_deref(),
        Some("mine")
    );
}

#[test]
fn under_failover_each_group_has_a_master_service_whose_address_its_masters_register() {
    let mqc = cluster(2, 2);
    let service = crate::builders::broker_master_service(&mqc, 1);
    assert_eq!(
        service.metadata.name.as_deref(),
        Some("orders-broker-1-master")
    );
    let spec = service.spec.unwrap();
    assert_eq!(spec.selector, None, "the operator writes its endpoints");
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.ports.unwrap()[0].port, crate::builders::BROKER_PORT);

    let slice =
        crate::builders::broker_master_endpoints(&mqc, 1, Some("10.1.2.3".parse().unwrap()));
    let labels = slice.metadata.labels.clone().unwrap();
    assert_eq!(
        labels["kubernetes.io/service-name"],
        "orders-broker-1-master"
    );
    assert_eq!(
        labels["endpointslice.kubernetes.io/managed-by"],
        crate::builders::ENDPOINTS_MANAGER
    );
    // Label values: alphanumerics, '-', '_', '.' (the API server refuses a '/').
    for v in labels.values() {
        assert!(
            v.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && v.starts_with(|c: char| c.is_ascii_alphanumeric())
                && v.ends_with(|c: char| c.is_ascii_alphanumeric()),
            "label value {v:?}"
        );
    }
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.endpoints[0].addresses, vec!["10.1.2.3".to_string()]);
    assert_eq!(
        slice.ports.unwrap()[0].name.as_deref(),
        Some("remoting"),
        "the Service's port name"
    );
    let v6 = crate::builders::broker_master_endpoints(&mqc, 1, Some("fd00::7".parse().unwrap()));
    assert_eq!(v6.address_type, "IPv6");

    // The group's address goes into its brokers' settings under failover only.
    let mut env = crate::builders::OperatorEnv {
        controller_addr: Some("conveyor-operator-controller.ops.svc:9878".into()),
        ..Default::default()
    };
    env.group_addresses.insert(1, "10.0.0.17:10911".into());
    let settings = crate::builders::broker_settings(&mqc, 1, 0, &env).unwrap();
    assert_eq!(
        settings.replication.group_address.as_deref(),
        Some("10.0.0.17:10911")
    );
    let other = crate::builders::broker_settings(&mqc, 0, 0, &env).unwrap();
    assert_eq!(
        other.replication.group_address, None,
        "group 0 has no address yet"
    );
    env.controller_addr = None;
    let classic = crate::builders::broker_settings(&mqc, 1, 0, &env).unwrap();
    assert_eq!(classic.replication.group_address, None);
}

#[test]
fn the_pod_template_reaches_every_pod_and_the_operators_labels_win() {
    let mut mqc = cluster(1, 2);
    mqc.spec.pod_template = crate::crd::PodTemplate {
        labels: [
            ("team".to_string(), "payments".to_string()),
            // Would break the selector: the operator's value wins.
            (
                "app.kubernetes.io/component".to_string(),
                "mine".to_string(),
            ),
        ]
        .into(),
        annotations: [
            ("policy.example.com/tier".to_string(), "gold".to_string()),
            (CONFIG_HASH_ANNOTATION.to_string(), "forged".to_string()),
        ]
        .into(),
        priority_class_name: Some("mq-critical".into()),
        termination_grace_period_seconds: Some(120),
    };
    let env = crate::builders::OperatorEnv::default();
    let cm = broker_config_map(&mqc, 0, &env).unwrap();
    let broker = broker_statefulset(&mqc, 0, &cm, &env);
    let namesrv = name_server_statefulset(&mqc);
    let plain = cluster(1, 2);
    let plain_broker = broker_statefulset(
        &plain,
        0,
        &broker_config_map(&plain, 0, &env).unwrap(),
        &env,
    );
    for (sts, component) in [(&broker, "broker"), (&namesrv, "namesrv")] {
        let template = &sts.spec.as_ref().unwrap().template;
        let meta = template.metadata.as_ref().unwrap();
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "payments");
        assert_ne!(labels["app.kubernetes.io/component"], "mine", "{component}");
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations["policy.example.com/tier"], "gold");
        assert_ne!(annotations[CONFIG_HASH_ANNOTATION], "forged", "{component}");
        let pod = template.spec.as_ref().unwrap();
        assert_eq!(pod.priority_class_name.as_deref(), Some("mq-critical"));
        assert_eq!(pod.termination_grace_period_seconds, Some(120));
    }
    // Without one, the defaults: 60 s for brokers (30 s for name servers), no class.
    let pod = plain_broker.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.termination_grace_period_seconds, Some(60));
    assert_eq!(pod.priority_class_name, None);
}
