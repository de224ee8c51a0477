//! Name servers: a headless Service (stable per-pod DNS names, which brokers register with), a
//! client Service, a StatefulSet and a PodDisruptionBudget.

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
    Volume, VolumeMount,
};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::crd::MessageQueueCluster;

use super::common::{
    common_pod_spec, container_ports, container_security, field_env, hash, http_probe, labels,
    names, namespace, owner_reference, pod_template_metadata, selector_labels, Component,
    CONFIG_HASH_ANNOTATION, CONVEYOR_BIN, DATA_DIR, HTTP_PORT, NAMESRV_PORT,
};

/// The name server's data volume: an emptyDir (its KV configuration, `kvConfig.json`, survives
/// a container restart; a name server holds no other state, so no PersistentVolume), small.
const NAMESRV_DATA_LIMIT: &str = "64Mi";

fn meta(mqc: &MessageQueueCluster, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace(mqc)),
        labels: Some(labels(mqc, Component::NameServer, None)),
        owner_references: Some(vec![owner_reference(mqc)]),
        ..Default::default()
    }
}

/// The name servers as RocketMQ clients and brokers list them: `host:port;host:port`, one stable
/// DNS name per pod (never a pod IP).
pub fn name_server_addresses(mqc: &MessageQueueCluster) -> String {
    let cluster = mqc.name_any();
    let sts = names::name_server(&cluster);
    let headless = names::name_server_headless(&cluster);
    let ns = namespace(mqc);
    (0..mqc.spec.name_server.replicas.max(1))
        .map(|i| format!("{}.{headless}.{ns}.svc:{NAMESRV_PORT}", names::pod(&sts, i)))
        .collect::<Vec<_>>()
        .join(";")
}

/// The client Service's address.
pub fn name_server_service_address(mqc: &MessageQueueCluster) -> String {
    format!(
        "{}.{}.svc:{NAMESRV_PORT}",
        names::name_server(&mqc.name_any()),
        namespace(mqc)
    )
}

fn ports() -> Vec<ServicePort> {
    vec![ServicePort {
        name: Some("remoting".into()),
        port: NAMESRV_PORT,
        target_port: Some(IntOrString::String("remoting".into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    }]
}

/// Headless Service of the name-server StatefulSet. Addresses are published before readiness so
/// brokers can resolve a starting name server.
pub fn name_server_headless_service(mqc: &MessageQueueCluster) -> Service {
    Service {
        metadata: meta(mqc, names::name_server_headless(&mqc.name_any())),
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            publish_not_ready_addresses: Some(true),
            selector: Some(selector_labels(mqc, Component::NameServer, None)),
            ports: Some(ports()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Client Service of the name servers (type and annotations from `spec.service`).
pub fn name_server_client_service(mqc: &MessageQueueCluster) -> Service {
    let mut metadata = meta(mqc, names::name_server(&mqc.name_any()));
    if !mqc.spec.service.annotations.is_empty() {
        metadata.annotations = Some(mqc.spec.service.annotations.clone());
    }
    Service {
        metadata,
        spec: Some(ServiceSpec {
            type_: Some(mqc.spec.service.type_.as_str().into()),
            selector: Some(selector_labels(mqc, Component::NameServer, None)),
            ports: Some(ports()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The name-server StatefulSet.
pub fn name_server_statefulset(mqc: &MessageQueueCluster) -> StatefulSet {
    let cluster = mqc.name_any();
    let spec = &mqc.spec;
    let args = vec![
        "namesrv".to_string(),
        "--listen".into(),
        format!("0.0.0.0:{NAMESRV_PORT}"),
        "--http-listen".into(),
        format!("0.0.0.0:{HTTP_PORT}"),
        "--data-dir".into(),
        DATA_DIR.into(),
    ];
    let security = super::security::pod_security(mqc);
    let args: Vec<String> = args.into_iter().chain(security.args).collect();
    let container = Container {
        name: "namesrv".into(),
        volume_mounts: Some(
            std::iter::once(VolumeMount {
                name: "data".into(),
                mount_path: DATA_DIR.into(),
                ..Default::default()
            })
            .chain(security.mounts)
            .collect(),
        ),
        image: Some(spec.image.clone()),
        image_pull_policy: spec.image_pull_policy.map(|p| p.as_str().into()),
        command: Some(vec![CONVEYOR_BIN.into()]),
        args: Some(args.clone()),
        env: Some(vec![field_env("POD_NAME", "metadata.name")]),
        ports: Some(container_ports(NAMESRV_PORT)),
        readiness_probe: Some(http_probe(
            "/readyz",
            5,
            3,
            2,
            mqc.spec.name_server.readiness_probe.as_ref(),
        )),
        liveness_probe: Some(http_probe(
            "/healthz",
            10,
            6,
            10,
            mqc.spec.name_server.liveness_probe.as_ref(),
        )),
        resources: spec.name_server.resources.clone(),
        security_context: Some(container_security()),
        ..Default::default()
    };
    let config_hash = hash(&["namesrv", &args.join(" ")]);
    let mut template_labels = labels(mqc, Component::NameServer, None);
    template_labels.extend(selector_labels(mqc, Component::NameServer, None));
    StatefulSet {
        metadata: meta(mqc, names::name_server(&cluster)),
        spec: Some(StatefulSetSpec {
            replicas: Some(spec.name_server.replicas),
            service_name: Some(names::name_server_headless(&cluster)),
            pod_management_policy: Some("Parallel".into()),
            selector: LabelSelector {
                match_labels: Some(selector_labels(mqc, Component::NameServer, None)),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(pod_template_metadata(
                    spec,
                    template_labels,
                    [(CONFIG_HASH_ANNOTATION.to_string(), config_hash)].into(),
                )),
                spec: Some(PodSpec {
                    containers: vec![container],
                    volumes: Some(
                        std::iter::once(Volume {
                            name: "data".into(),
                            empty_dir: Some(EmptyDirVolumeSource {
                                size_limit: Some(Quantity(NAMESRV_DATA_LIMIT.into())),
                                ..Default::default()
                            }),
                            ..Default::default()
                        })
                        .chain(security.volumes)
                        .collect(),
                    ),
                    termination_grace_period_seconds: Some(
                        spec.pod_template
                            .termination_grace_period_seconds
                            .unwrap_or(30),
                    ),
                    ..common_pod_spec(spec, &selector_labels(mqc, Component::NameServer, None))
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// At most one name server down by voluntary disruption.
pub fn name_server_pdb(mqc: &MessageQueueCluster) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: meta(mqc, names::name_server(&mqc.name_any())),
        spec: Some(PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(1)),
            selector: Some(LabelSelector {
                match_labels: Some(selector_labels(mqc, Component::NameServer, None)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}
