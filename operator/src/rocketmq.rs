//! Reaching a RocketMQ cluster from a resource that names one: by `clusterRef` (a
//! MessageQueueCluster in the resource's namespace) or by `nameServer` (any cluster), and one
//! admin client per set of name servers, whose connections are reused across polls. Shared
//! by the ConsumerAutoscaler and MessageQueueTopic controllers.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use conveyor_client::Admin;
use kube::api::Api;
use kube::Client;

use crate::autoscaler::resource::ClusterRef;
use crate::crd::MessageQueueCluster;

/// The name servers to ask (`host:port;…`) and the RocketMQ cluster's name when the resource
/// names a MessageQueueCluster (its name).
pub async fn name_servers(
    client: &Client,
    ns: &str,
    cluster_ref: Option<&ClusterRef>,
    name_server: Option<&str>,
) -> Result<(String, Option<String>), String> {
    if let Some(addrs) = name_server {
        return Ok((addrs.to_string(), None));
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
    Ok((addrs, Some(cluster.name.clone())))
}

/// Admin clients by name-server list.
#[derive(Default)]
pub struct AdminPool {
    /// One client per `host:port;…` string.
    admins: Mutex<HashMap<String, Arc<Admin>>>,
}

impl AdminPool {
    /// The admin client of `name_servers`, made on first use.
    pub fn get(&self, name_servers: &str) -> Result<Arc<Admin>, String> {
        let mut admins = self.admins.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = admins.get(name_servers) {
            return Ok(a.clone());
        }
        let admin = Arc::new(Admin::new(name_servers).map_err(|e| e.to_string())?);
        admins.insert(name_servers.to_string(), admin.clone());
        Ok(admin)
    }
}
