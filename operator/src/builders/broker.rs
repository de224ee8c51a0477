//! One broker group: a ConfigMap (one TOML file per pod), a headless Service, a StatefulSet with a
//! volume claim template, a PodDisruptionBudget and, under failover, the master Service with
//! its EndpointSlice.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    StatefulSet, StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetSpec,
    StatefulSetUpdateStrategy,
};
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapVolumeSource, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource,
    ObjectFieldSelector, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSpec,
    PodTemplateSpec, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::crd::MessageQueueCluster;

use super::common::OperatorEnv;
use super::common::{
    common_pod_spec, container_ports, container_security, field_env, hash, http_probe, labels,
    names, namespace, owner_reference, pod_template_metadata, selector_labels, Component,
    BROKER_PORT, CONFIG_DIR, CONFIG_HASH_ANNOTATION, CONVEYOR_BIN, DATA_DIR, POD_INFO_DIR,
    ZONE_ANNOTATION,
};
use super::config::{render_broker_toml, ConfigError};

fn meta(mqc: &MessageQueueCluster, name: String, group: i32) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace(mqc)),
        labels: Some(labels(mqc, Component::Broker, Some(group))),
        owner_references: Some(vec![owner_reference(mqc)]),
        ..Default::default()
    }
}

/// The group's ConfigMap: key `<pod-name>.toml` for every ordinal.
pub fn broker_config_map(
    mqc: &MessageQueueCluster,
    group: i32,
    env: &OperatorEnv,
) -> Result<ConfigMap, ConfigError> {
    let cluster = mqc.name_any();
    let sts = names::broker_group(&cluster, group);
    let mut data = BTreeMap::new();
    for ordinal in 0..mqc.spec.broker.replicas_per_group.max(1) {
        data.insert(
            format!("{}.toml", names::pod(&sts, ordinal)),
            render_broker_toml(mqc, group, ordinal, env)?,
        );
    }
    Ok(ConfigMap {
        metadata: meta(mqc, names::broker_config(&cluster, group), group),
        data: Some(data),
        ..Default::default()
    })
}

/// Headless Service of a group (stable pod DNS names).
pub fn broker_headless_service(mqc: &MessageQueueCluster, group: i32) -> Service {
    Service {
        metadata: meta(mqc, names::broker_group(&mqc.name_any(), group), group),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(mqc, Component::Broker, Some(group))),
            ports: Some(vec![ServicePort {
                name: Some("remoting".into()),
                port: BROKER_PORT,
                target_port: Some(IntOrString::String("remoting".into())),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Under failover, a group's master Service: a cluster IP that always leads to the group's
/// current master, which its masters register with the name servers as the group's address
/// (id 0), so clients keep their route across failovers. It has no selector: the operator's
/// controller writes its EndpointSlice ([`broker_master_endpoints`]) as soon as a newly
/// elected master takes writes, rather than waiting for pod labels and readiness (a frozen
/// master stays Ready for its probes' whole failure threshold).
pub fn broker_master_service(mqc: &MessageQueueCluster, group: i32) -> Service {
    Service {
        metadata: meta(mqc, names::broker_master(&mqc.name_any(), group), group),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            ports: Some(vec![ServicePort {
                name: Some("remoting".into()),
                port: BROKER_PORT,
                target_port: Some(IntOrString::Int(BROKER_PORT)),
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Who manages the EndpointSlices the operator writes (the EndpointSlice controller leaves
/// them): the master Services' and the operator's own controller Service's.
pub const ENDPOINTS_MANAGER: &str = "operator.conveyor.dev";

/// The EndpointSlice of `group`'s master Service: the master pod's IP, or none.
pub fn broker_master_endpoints(
    mqc: &MessageQueueCluster,
    group: i32,
    master_ip: Option<std::net::IpAddr>,
) -> EndpointSlice {
    let name = names::broker_master(&mqc.name_any(), group);
    service_endpoints(
        meta(mqc, name.clone(), group),
        &name,
        master_ip,
        "remoting",
        BROKER_PORT,
    )
}

/// The EndpointSlice of a selectorless Service `service` that leads to one address (or to
/// none): what the operator writes where it, not a pod selector, decides who serves.
/// `metadata` names the slice; the service-name and managed-by labels are added.
pub fn service_endpoints(
    mut metadata: ObjectMeta,
    service: &str,
    ip: Option<std::net::IpAddr>,
    port_name: &str,
    port: i32,
) -> EndpointSlice {
    let labels = metadata.labels.get_or_insert_with(Default::default);
    labels.insert("kubernetes.io/service-name".into(), service.into());
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        ENDPOINTS_MANAGER.into(),
    );
    EndpointSlice {
        metadata,
        address_type: match ip {
            Some(std::net::IpAddr::V6(_)) => "IPv6".into(),
            _ => "IPv4".into(),
        },
        endpoints: ip
            .map(|ip| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    serving: Some(true),
                    terminating: Some(false),
                }),
                ..Default::default()
            })
            .into_iter()
            .collect(),
        ports: Some(vec![EndpointPort {
            name: Some(port_name.into()),
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    }
}

/// A group's StatefulSet. `config` is the group's ConfigMap (its data goes into the pod
/// template's config hash, so any configuration change rolls the pods). Under failover the
/// operator rolls the pods itself, replication-aware (strategy `OnDelete`, see
/// `reconcile::roll`); with classic roles the StatefulSet's rolling update already restarts
/// the slaves (higher ordinals) before the master (ordinal 0).
pub fn broker_statefulset(
    mqc: &MessageQueueCluster,
    group: i32,
    config: &ConfigMap,
    env: &OperatorEnv,
) -> StatefulSet {
    let cluster = mqc.name_any();
    let spec = &mqc.spec;
    let name = names::broker_group(&cluster, group);
    // Each pod reads its own file; Kubernetes expands $(VAR) in args, so no shell is needed.
    // The broker needs an IP for advertised-addr (it is also the records' STOREHOST).
    let args = vec![
        "broker".to_string(),
        "--config".into(),
        format!("{CONFIG_DIR}/$(POD_NAME).toml"),
        "--advertised-addr".into(),
        format!("$(POD_IP):{BROKER_PORT}"),
        // The node's zone, once the operator has copied it onto the pod (see ZONE_ANNOTATION).
        "--zone-file".into(),
        format!("{POD_INFO_DIR}/zone"),
    ];
    let security = super::security::pod_security(mqc);
    let args: Vec<String> = args.into_iter().chain(security.args).collect();
    let mut hashed: Vec<&str> = vec!["broker", "args"];
    let joined = args.join(" ");
    hashed.push(&joined);
    if let Some(data) = &config.data {
        for (k, v) in data {
            hashed.push(k);
            hashed.push(v);
        }
    }
    let config_hash = hash(&hashed);
    let container = Container {
        name: "broker".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().into()),
        command: Some(vec![CONVEYOR_BIN.into()]),
        args: Some(args),
        env: Some(vec![
            field_env("POD_NAME", "metadata.name"),
            field_env("POD_IP", "status.podIP"),
        ]),
        ports: Some(container_ports(BROKER_PORT)),
        readiness_probe: Some(http_probe(
            "/readyz",
            5,
            3,
            5,
            spec.broker.readiness_probe.as_ref(),
        )),
        liveness_probe: Some(http_probe(
            "/healthz",
            10,
            6,
            30,
            spec.broker.liveness_probe.as_ref(),
        )),
        resources: spec.broker.resources.clone(),
        security_context: Some(container_security()),
        volume_mounts: Some(
            [
                VolumeMount {
                    name: "data".into(),
                    mount_path: DATA_DIR.into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "config".into(),
                    mount_path: CONFIG_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                },
                VolumeMount {
                    name: "pod-info".into(),
                    mount_path: POD_INFO_DIR.into(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ]
            .into_iter()
            .chain(security.mounts)
            .collect(),
        ),
        ..Default::default()
    };
    let storage = &spec.broker.storage;
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some("data".into()),
            labels: Some(selector_labels(mqc, Component::Broker, Some(group))),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: storage.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), Quantity(storage.size.clone()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    StatefulSet {
        metadata: meta(mqc, name.clone(), group),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.broker.replicas_per_group),
            service_name: Some(name),
            pod_management_policy: Some("Parallel".into()),
            update_strategy: Some(StatefulSetUpdateStrategy {
                type_: Some(
                    if env.controller_for(mqc).is_some() {
                        "OnDelete"
                    } else {
                        "RollingUpdate"
                    }
                    .into(),
                ),
                ..Default::default()
            }),
            selector: LabelSelector {
                match_labels: Some(selector_labels(mqc, Component::Broker, Some(group))),
                ..Default::default()
            },
            persistent_volume_claim_retention_policy: Some(
                StatefulSetPersistentVolumeClaimRetentionPolicy {
                    when_deleted: Some(
                        if storage.delete_claim {
                            "Delete"
                        } else {
                            "Retain"
                        }
                        .into(),
                    ),
                    when_scaled: Some("Retain".into()),
                },
            ),
            template: PodTemplateSpec {
                metadata: Some(pod_template_metadata(
                    spec,
                    labels(mqc, Component::Broker, Some(group)),
                    [(CONFIG_HASH_ANNOTATION.to_string(), config_hash)].into(),
                )),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(
                        [
                            Volume {
                                name: "config".into(),
                                config_map: Some(ConfigMapVolumeSource {
                                    name: names::broker_config(&cluster, group),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            },
                            Volume {
                                name: "pod-info".into(),
                                downward_api: Some(DownwardAPIVolumeSource {
                                    items: Some(vec![DownwardAPIVolumeFile {
                                        path: "zone".into(),
                                        field_ref: Some(ObjectFieldSelector {
                                            field_path: format!(
                                                "metadata.annotations['{ZONE_ANNOTATION}']"
                                            ),
                                            ..Default::default()
                                        }),
                                        ..Default::default()
                                    }]),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            },
                        ]
                        .into_iter()
                        .chain(security.volumes)
                        .collect(),
                    ),
                    termination_grace_period_seconds: Some(
                        spec.pod_template
                            .termination_grace_period_seconds
                            .unwrap_or(60),
                    ),
                    ..common_pod_spec(spec, &selector_labels(mqc, Component::Broker, Some(group)))
                }),
            },
            volume_claim_templates: Some(vec![claim]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// At most one pod of a group down by voluntary disruption.
pub fn broker_pdb(mqc: &MessageQueueCluster, group: i32) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(mqc, names::broker_group(&mqc.name_any(), group), group),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(mqc, Component::Broker, Some(group))),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
