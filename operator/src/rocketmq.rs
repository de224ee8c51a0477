//! Reaching a RocketMQ cluster from a resource that names one: by `clusterRef` (a
//! MessageQueueCluster in the resource's namespace) or by `nameServer` (any cluster), and one
//! admin client per set of name servers, whose connections are reused across polls. Shared
//! by the ConsumerAutoscaler and MessageQueueTopic controllers. A named cluster with ACL on
//! is asked with its cluster secret (the operator's requests are the cluster's own).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use conveyor_client::Admin;
use kube::api::Api;
use kube::Client;

use crate::autoscaler::resource::ClusterRef;
use crate::builders::ClusterSecret;
use crate::crd::MessageQueueCluster;

/// A RocketMQ cluster as a resource names it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The name servers to ask (`host:port;…`).
    pub name_servers: String,
    /// The RocketMQ cluster's name when the resource names a MessageQueueCluster (its name).
    pub cluster: Option<String>,
    /// That cluster's secret when it has ACL on: the requests are signed with it.
    pub secret: Option<ClusterSecret>,
}

/// The cluster a resource names by `clusterRef` or `nameServer`.
pub async fn name_servers(
    client: &Client,
    ns: &str,
    cluster_ref: Option<&ClusterRef>,
    name_server: Option<&str>,
) -> Result<Target, String> {
    if let Some(addrs) = name_server {
        return Ok(Target {
            name_servers: addrs.to_string(),
            cluster: None,
            secret: None,
        });
    }
    let Some(cluster) = cluster_ref else {
        return Err("neither clusterRef nor nameServer is set".into());
    };
    let api: Api<MessageQueueCluster> = Api::namespaced(client.clone(), ns);
    let mqc = api
        .get(&cluster.name)
        .await
        .map_err(|e| format!("MessageQueueCluster {}: {e}", cluster.name))?;
    let addrs = mqc
        .status
        .as_ref()
        .and_then(|s| s.name_server_addresses.clone())
        .unwrap_or_else(|| crate::builders::name_server_addresses(&mqc));
    let secret = if mqc.spec.security.acl.enabled {
        crate::cluster_secret::read(client, ns, &cluster.name)
            .await
            .map_err(|e| e.to_string())?
    } else {
        None
    };
    Ok(Target {
        name_servers: addrs,
        cluster: Some(cluster.name.clone()),
        secret,
    })
}

/// Name servers and the secret that signs for them: one admin client each.
type AdminKey = (String, Option<ClusterSecret>);

/// Admin clients by name-server list and secret.
#[derive(Default)]
pub struct AdminPool {
    /// One client per `host:port;…` string and secret.
    admins: Mutex<HashMap<AdminKey, Arc<Admin>>>,
}

impl AdminPool {
    /// The admin client of `target`, made on first use.
    pub fn get(&self, target: &Target) -> Result<Arc<Admin>, String> {
        let key = (target.name_servers.clone(), target.secret.clone());
        let mut admins = self.admins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = admins.get(&key) {
            return Ok(a.clone());
        }
        let config = conveyor_remoting::RemotingConfig {
            credentials: target.secret.as_ref().map(|s| Arc::new(s.credentials())),
            ..Default::default()
        };
        let admin =
            Arc::new(Admin::with_config(&target.name_servers, config).map_err(|e| e.to_string())?);
        admins.insert(key, admin.clone());
        Ok(admin)
    }
}
