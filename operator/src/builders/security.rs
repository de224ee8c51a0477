//! `spec.security` in the pods and beside them: the TLS certificate, the users file and the
//! cluster secret mounted from Secrets and named on the command line, the cluster secret's
//! Secret, an empty users file until the users controller writes one, and the NetworkPolicy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Secret, SecretVolumeSource, Volume, VolumeMount};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::ResourceExt;

use super::common::{
    labels, names, namespace, owner_reference, selector_labels, Component, OperatorEnv,
    BROKER_PORT, GRPC_PORT, HTTP_PORT, NAMESRV_PORT,
};
use crate::crd::MessageQueueCluster;

/// Where the TLS Secret is mounted.
pub const TLS_DIR: &str = "/etc/conveyor-tls";
/// Where the users file Secret is mounted.
pub const ACL_DIR: &str = "/etc/conveyor-acl";
/// Where the cluster secret is mounted.
pub const CLUSTER_SECRET_DIR: &str = "/etc/conveyor-cluster";
/// The key (and file name) of the cluster secret.
pub const CLUSTER_SECRET_KEY: &str = "secret";
/// The key (and file name) of the users file.
pub const USERS_FILE_KEY: &str = "plain_acl.yml";

/// The flags, volumes and mounts `spec.security` adds to a server container.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct PodSecurity {
    /// Command-line flags.
    pub args: Vec<String>,
    /// Pod volumes.
    pub volumes: Vec<Volume>,
    /// Container mounts.
    pub mounts: Vec<VolumeMount>,
}

fn secret_volume(name: &str, secret: String, dir: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: name.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret),
                ..Default::default()
            }),
            ..Default::default()
        },
        VolumeMount {
            name: name.into(),
            mount_path: dir.into(),
            read_only: Some(true),
            ..Default::default()
        },
    )
}

/// What `spec.security` adds to name-server and broker containers. Secrets are mounted as
/// volumes (not environment variables): the kubelet updates their files, which the servers
/// re-read (a renewed certificate, a changed users file) without a restart.
pub fn pod_security(mqc: &MessageQueueCluster) -> PodSecurity {
    let security = &mqc.spec.security;
    let cluster = mqc.name_any();
    let mut out = PodSecurity::default();
    let mut add = |(v, m): (Volume, VolumeMount)| {
        out.volumes.push(v);
        out.mounts.push(m);
    };
    let tls_secret = tls_secret_name(mqc);
    if let Some(secret) = &tls_secret {
        add(secret_volume("tls", secret.clone(), TLS_DIR));
    }
    if security.acl.enabled {
        add(secret_volume(
            "acl-users",
            names::acl_users(&cluster),
            ACL_DIR,
        ));
        add(secret_volume(
            "cluster-secret",
            names::cluster_secret(&cluster),
            CLUSTER_SECRET_DIR,
        ));
    }
    if security.tls != Default::default() {
        out.args
            .extend(["--tls-mode".into(), security.tls.mode.as_flag().into()]);
        if tls_secret.is_some() {
            out.args.extend([
                "--tls-cert-file".into(),
                format!("{TLS_DIR}/tls.crt"),
                "--tls-key-file".into(),
                format!("{TLS_DIR}/tls.key"),
            ]);
        }
    }
    if security.acl.enabled {
        out.args.extend([
            "--acl-enabled".into(),
            "true".into(),
            "--acl-users-file".into(),
            format!("{ACL_DIR}/{USERS_FILE_KEY}"),
            "--acl-cluster-secret-file".into(),
            format!("{CLUSTER_SECRET_DIR}/{CLUSTER_SECRET_KEY}"),
        ]);
    }
    out
}

/// The Secret the servers' certificate comes from: the one given, or the one the operator
/// makes (`generateCertificates`), or none (each server generates its own).
pub fn tls_secret_name(mqc: &MessageQueueCluster) -> Option<String> {
    let tls = &mqc.spec.security.tls;
    tls.secret_name.clone().or_else(|| {
        tls.generate_certificates
            .then(|| names::tls(&mqc.name_any()))
    })
}

/// A Secret of cluster `cluster` playing part `component` (the `app.kubernetes.io` labels every
/// owned object has), owned by `owner` (deleted with it), holding `data`.
pub fn owned_secret<'a>(
    name: String,
    namespace: &str,
    cluster: &str,
    component: &str,
    owner: OwnerReference,
    data: impl IntoIterator<Item = (&'a str, String)>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            labels: Some(
                [
                    ("app.kubernetes.io/name", "conveyor"),
                    ("app.kubernetes.io/instance", cluster),
                    ("app.kubernetes.io/component", component),
                    ("app.kubernetes.io/managed-by", "conveyor-operator"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.into_bytes())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn secret(mqc: &MessageQueueCluster, name: String, key: &str, value: &str) -> Secret {
    owned_secret(
        name,
        &namespace(mqc),
        &mqc.name_any(),
        "acl",
        owner_reference(mqc),
        [(key, value.to_string())],
    )
}

/// The cluster secret's Secret, under ACL (`None` without ACL or without a secret).
pub fn cluster_secret(mqc: &MessageQueueCluster, env: &OperatorEnv) -> Option<Secret> {
    let value = env.cluster_secret.as_ref()?;
    mqc.spec.security.acl.enabled.then(|| {
        secret(
            mqc,
            names::cluster_secret(&mqc.name_any()),
            CLUSTER_SECRET_KEY,
            &value.0,
        )
    })
}

/// An empty users file, created once so the pods can start before any user exists (the
/// users controller owns it from then on).
pub fn empty_users_secret(mqc: &MessageQueueCluster) -> Option<Secret> {
    mqc.spec.security.acl.enabled.then(|| {
        secret(
            mqc,
            names::acl_users(&mqc.name_any()),
            USERS_FILE_KEY,
            "# No MessageQueueUser of this cluster yet.\naccounts: []\n",
        )
    })
}

fn port(p: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    }
}

fn policy(
    mqc: &MessageQueueCluster,
    name: String,
    pods: BTreeMap<String, String>,
    rule: NetworkPolicyIngressRule,
) -> NetworkPolicy {
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace(mqc)),
            labels: Some(labels(mqc, Component::Broker, None)),
            owner_references: Some(vec![owner_reference(mqc)]),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(pods),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![rule]),
            ..Default::default()
        }),
    }
}

/// The NetworkPolicies of `mqc`'s pods, when enabled: one lets clients reach the name
/// servers' and brokers' client, gRPC and HTTP ports from anywhere; one per broker group lets
/// only that group's pods reach its replication port (policies add up, so no other pod
/// reaches it).
pub fn network_policies(mqc: &MessageQueueCluster) -> Vec<NetworkPolicy> {
    if !mqc.spec.security.network_policy.enabled {
        return Vec::new();
    }
    let cluster = mqc.name_any();
    let mut cluster_pods = BTreeMap::new();
    cluster_pods.insert("app.kubernetes.io/name".to_string(), "conveyor".to_string());
    cluster_pods.insert("app.kubernetes.io/instance".to_string(), cluster.clone());
    let clients = NetworkPolicyIngressRule {
        from: None, // anywhere
        ports: Some(
            [NAMESRV_PORT, BROKER_PORT, GRPC_PORT, HTTP_PORT]
                .into_iter()
                .map(port)
                .collect(),
        ),
    };
    let mut out = vec![policy(
        mqc,
        names::network_policy(&cluster),
        cluster_pods,
        clients,
    )];
    for g in 0..mqc.spec.broker.groups {
        let group = selector_labels(mqc, Component::Broker, Some(g));
        let members = NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(group.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            }]),
            ports: Some(vec![port(BROKER_PORT + 1)]),
        };
        out.push(policy(
            mqc,
            format!("{}-replication", names::broker_group(&cluster, g)),
            group,
            members,
        ));
    }
    out
}
