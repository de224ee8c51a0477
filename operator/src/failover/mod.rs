//! Failover: the replication controller runs inside the operator. Brokers of clusters with
//! `spec.broker.failover` register and heartbeat to it over RocketMQ's controller requests
//! (the `conveyor controller` logic, [`conveyor::controller`]), each request naming its
//! cluster in the `controllerScope` field; the operator keeps one [`Controller`] per cluster,
//! with its state in that cluster's ConfigMap ([`store`]) and its own detection loop. Only
//! the leading operator replica serves (the controller runs inside the leader-elected part),
//! and every decision is a compare-and-set in the API, so a second replica or a restarted
//! operator never hands out a second master for an epoch.

pub mod store;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use conveyor::controller::processor::CONTROLLER_SCOPE;
use conveyor::controller::{Controller, ControllerConfig};
use conveyor::remoting::{error_response, Connection, Processor, ServeLimits};
use conveyor_protocol::code::response_code;
use conveyor_protocol::command::RemotingCommand;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use crate::builders::{self, ClusterSecret, OperatorEnv};
use crate::crd::MessageQueueCluster;

/// How long a cluster's brokers have to reach this operator replica after it opened the
/// cluster's controller (it became leader, or restarted) before a master it has not heard from
/// is replaced: the controller Service moving to this replica (kube-proxy syncs at most once a
/// second) and the brokers' next heartbeat, with room for a loaded node.
const TAKEOVER_GRACE: Duration = Duration::from_secs(10);

/// A cluster's controller (a change of its spec'd [`ControllerConfig`] reopens it).
struct Entry {
    /// The controller.
    controller: Arc<Controller>,
    /// Stops its detection loop.
    stop: CancellationToken,
    /// The cluster's secret when it has ACL on: every request must be signed with it.
    secret: Option<ClusterSecret>,
}

/// The controllers of every cluster under failover, by scope (`<namespace>/<name>`).
pub struct Failover {
    /// Where the state ConfigMaps are read and written.
    api: store::ApiRuntime,
    /// Where the master Services' EndpointSlices are written.
    client: kube::Client,
    /// Controllers by scope.
    controllers: Mutex<HashMap<String, Entry>>,
    /// Cancelled when the operator stops leading: every detection loop ends.
    shutdown: CancellationToken,
    /// Bumped whenever any controller saves a decision: the reconciler reports it.
    changed: tokio::sync::watch::Sender<u64>,
}

/// Why a cluster's controller could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("controller of {scope}: {source}")]
pub struct FailoverError {
    /// The cluster.
    scope: String,
    /// Why.
    #[source]
    source: conveyor::controller::state_store::StateStoreError,
}

impl Failover {
    /// No controllers yet; `shutdown` ends their detection loops.
    pub fn new(
        api: store::ApiRuntime,
        client: kube::Client,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            api,
            client,
            controllers: Mutex::new(HashMap::new()),
            shutdown,
            changed: tokio::sync::watch::Sender::new(0),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.controllers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Makes sure `mqc` has a controller when failover applies to it under `env`, and none
    /// when it does not; returns it. Opening one loads the cluster's saved state.
    pub fn ensure(
        &self,
        mqc: &MessageQueueCluster,
        env: &OperatorEnv,
    ) -> Result<Option<Arc<Controller>>, FailoverError> {
        let scope = builders::scope(mqc);
        if env.controller_for(mqc).is_none() {
            if let Some(old) = self.entries().remove(&scope) {
                old.stop.cancel();
            }
            return Ok(None);
        }
        let spec = &mqc.spec.broker.failover;
        let config = ControllerConfig {
            detection: Duration::from_secs(spec.detection_seconds.max(1).into()),
            allow_unclean: spec.allow_unclean_promotion,
            takeover_grace: TAKEOVER_GRACE,
        };
        let secret = env.cluster_secret.clone();
        if let Some(e) = self.entries().get_mut(&scope) {
            if *e.controller.config() == config {
                e.secret = secret;
                return Ok(Some(e.controller.clone()));
            }
        }
        let store = store::ConfigMapStateStore::new(
            &self.api,
            &builders::namespace(mqc),
            &store::config_map_name(&mqc.name_any()),
            Some(builders::owner_reference(mqc)),
        );
        tracing::info!(%scope, ?config, "opening the cluster's controller");
        let controller = Arc::new(Controller::open(config, Box::new(store)).map_err(|source| {
            FailoverError {
                scope: scope.clone(),
                source,
            }
        })?);
        let stop = self.shutdown.child_token();
        {
            let (c, stop) = (controller.clone(), stop.clone());
            tokio::spawn(async move { c.run_detection(stop).await });
        }
        tokio::spawn(publish_masters(
            controller.clone(),
            self.client.clone(),
            mqc.clone(),
            stop.clone(),
        ));
        {
            let (mut decided, stop, changed) =
                (controller.subscribe(), stop.clone(), self.changed.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        r = decided.changed() => if r.is_err() { return },
                        _ = stop.cancelled() => return,
                    }
                    changed.send_modify(|n| *n += 1);
                }
            });
        }
        if let Some(old) = self.entries().insert(
            scope,
            Entry {
                controller: controller.clone(),
                stop,
                secret,
            },
        ) {
            old.stop.cancel();
        }
        Ok(Some(controller))
    }

    /// Forgets the controller of a deleted cluster.
    pub fn forget(&self, scope: &str) {
        if let Some(old) = self.entries().remove(scope) {
            old.stop.cancel();
        }
    }

    /// Yields whenever a controller saved a decision (a promotion, a new in-sync set, a new
    /// replica): the reconciler then reports it in the clusters' status at once.
    pub fn changes(&self) -> impl futures::Stream<Item = ()> + Send + Sync + 'static {
        futures::stream::unfold(self.changed.subscribe(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }

    /// The controller of `scope`, if that cluster is under failover.
    pub fn get(&self, scope: &str) -> Option<Arc<Controller>> {
        self.entries().get(scope).map(|e| e.controller.clone())
    }

    /// The controller of `scope` and the secret its requests must be signed with.
    fn entry(&self, scope: &str) -> Option<(Arc<Controller>, Option<ClusterSecret>)> {
        self.entries()
            .get(scope)
            .map(|e| (e.controller.clone(), e.secret.clone()))
    }

    /// Serves brokers' controller requests on `listener` until `shutdown`, TLS or plaintext
    /// (brokers whose ports enforce TLS connect with TLS; the certificate is generated, as
    /// brokers do not check it).
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        let shutdown = self.shutdown.clone();
        let tls = |mode| conveyor::tls::TlsConfig {
            mode,
            ..Default::default()
        };
        let acceptor = conveyor::tls::Acceptor::new(&tls(conveyor::tls::TlsMode::Permissive), &[])
            .or_else(|e| {
                // Plaintext brokers still reach it; only brokers that enforce TLS cannot.
                tracing::error!(error = %e, "the controller's TLS could not be set up; plaintext only");
                conveyor::tls::Acceptor::new(&tls(conveyor::tls::TlsMode::Off), &[])
            });
        let Ok(acceptor) = acceptor else {
            return; // the Off mode loads no certificate: it does not fail
        };
        conveyor::remoting::serve(listener, acceptor, self, shutdown, ServeLimits::default()).await;
    }
}

/// How often the master Services' endpoints are compared with the controller's decisions.
const PUBLISH_POLL: Duration = Duration::from_millis(50);

/// Keeps each group's master Service leading to the master that takes writes: whenever the
/// controller's serving master of a group changes (elected, and heartbeating in its epoch),
/// its EndpointSlice is rewritten with that pod's IP. Nothing is written while a group has no
/// serving master (an election under way, or a restarted operator that has not heard from
/// the brokers yet): the last master stays, rather than no endpoint at all.
async fn publish_masters(
    controller: Arc<Controller>,
    client: kube::Client,
    mqc: MessageQueueCluster,
    stop: CancellationToken,
) {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use kube::api::{Api, Patch, PatchParams};
    let cluster = mqc.name_any();
    let api: Api<EndpointSlice> = Api::namespaced(client, &builders::namespace(&mqc));
    let mut published: HashMap<String, conveyor::controller::Serving> = HashMap::new();
    // A refused write is tried again after a pause, not on every tick.
    let mut refused: HashMap<String, tokio::time::Instant> = HashMap::new();
    let mut tick = tokio::time::interval(PUBLISH_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let groups: Vec<String> = controller.state().groups.keys().cloned().collect();
        for group in groups {
            let Some(index) = group
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<i32>().ok())
                .filter(|i| builders::names::broker_group(&cluster, *i) == group)
            else {
                continue;
            };
            let Some(serving) = controller.serving_master(&group) else {
                continue;
            };
            if published.get(&group) == Some(&serving)
                || refused
                    .get(&group)
                    .is_some_and(|until| tokio::time::Instant::now() < *until)
            {
                continue;
            }
            let Ok(addr) = serving.addr.parse::<std::net::SocketAddr>() else {
                tracing::warn!(group, addr = serving.addr, "master address is not ip:port");
                continue;
            };
            let slice = builders::broker_master_endpoints(&mqc, index, Some(addr.ip()));
            let name = builders::names::broker_master(&cluster, index);
            match api
                .patch(
                    &name,
                    &PatchParams::apply(PUBLISH_MANAGER).force(),
                    &Patch::Apply(&slice),
                )
                .await
            {
                Ok(_) => {
                    tracing::info!(
                        group,
                        master = serving.broker_id,
                        epoch = serving.epoch,
                        addr = serving.addr,
                        "master Service leads to the new master"
                    );
                    refused.remove(&group);
                    published.insert(group, serving);
                }
                Err(e) => {
                    tracing::warn!(group, error = %e, "cannot point the master Service at the master");
                    refused.insert(group, tokio::time::Instant::now() + PUBLISH_RETRY);
                }
            }
        }
    }
}

/// How long after a refused EndpointSlice write it is tried again.
const PUBLISH_RETRY: Duration = Duration::from_secs(5);

/// The field manager of the master Services' EndpointSlices.
const PUBLISH_MANAGER: &str = "conveyor-operator-failover";

/// Whether `req` is signed with the cluster's secret, when the cluster has one (ACL on): only
/// the cluster's own brokers may register, heartbeat or be elected in its scope.
fn signed_by_cluster(secret: Option<&ClusterSecret>, req: &RemotingCommand) -> Result<(), String> {
    let Some(secret) = secret else {
        return Ok(());
    };
    use conveyor_remoting::acl as signing;
    if req.ext(signing::ACCESS_KEY) != Some(conveyor::acl::CLUSTER_ACCESS_KEY) {
        return Err(format!(
            "ACL is on for this cluster: controller requests must be signed with its cluster \
             secret (AccessKey {})",
            conveyor::acl::CLUSTER_ACCESS_KEY
        ));
    }
    conveyor::acl::check_signature(&secret.0, req)
        .map_err(|e| format!("{e}: not this cluster's secret"))
}

impl Processor for Failover {
    async fn handle(
        self: Arc<Self>,
        conn: Connection,
        req: RemotingCommand,
    ) -> Option<RemotingCommand> {
        let scope = req
            .get_str_opt(CONTROLLER_SCOPE)
            .unwrap_or_default()
            .to_string();
        let Some((controller, secret)) = self.entry(&scope) else {
            return Some(error_response(
                &req,
                response_code::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                format!(
                    "no MessageQueueCluster {scope:?} under failover at this operator \
                     (brokers send their cluster as {CONTROLLER_SCOPE})"
                ),
            ));
        };
        if let Err(remark) = signed_by_cluster(secret.as_ref(), &req) {
            tracing::debug!(%scope, code = req.code, remark, "controller request refused");
            return Some(error_response(&req, response_code::NO_PERMISSION, remark));
        }
        // A change is saved through the API server before the answer (the store waits with
        // block_in_place, so this worker's other tasks move on meanwhile).
        Some(controller.answer(&conn, &req).unwrap_or_else(|e| e))
    }

    fn on_disconnect(&self, conn: &Connection) {
        let controllers: Vec<_> = self
            .entries()
            .values()
            .map(|e| e.controller.clone())
            .collect();
        for c in controllers {
            c.connection_closed(conn.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_signed_with_the_clusters_secret_reach_its_controller() {
        let secret = ClusterSecret("a-cluster-secret-of-48-characters".into());
        let request = || {
            RemotingCommand::request(1001, Default::default())
                .with_ext(CONTROLLER_SCOPE, "mq/orders")
                .with_ext("brokerName", "orders-broker-0")
        };
        // ACL off: nothing to check.
        assert!(signed_by_cluster(None, &request()).is_ok());
        let unsigned = request();
        assert!(signed_by_cluster(Some(&secret), &unsigned)
            .unwrap_err()
            .contains("must be signed"));
        let mut signed = request();
        secret.credentials().sign(&mut signed);
        assert!(signed_by_cluster(Some(&secret), &signed).is_ok());
        // Another cluster's secret, or a user's credentials: refused.
        let mut forged = request();
        ClusterSecret("another-cluster-secret-0123456789".into())
            .credentials()
            .sign(&mut forged);
        assert!(signed_by_cluster(Some(&secret), &forged)
            .unwrap_err()
            .contains("check signature failed"));
        let mut user = request();
        conveyor_remoting::acl::Credentials::new("admin", &secret.0).sign(&mut user);
        assert!(signed_by_cluster(Some(&secret), &user).is_err());
        // A field changed after signing: refused.
        let mut tampered = request();
        secret.credentials().sign(&mut tampered);
        tampered.set_ext("brokerName", "orders-broker-1");
        assert!(signed_by_cluster(Some(&secret), &tampered).is_err());
    }
}
