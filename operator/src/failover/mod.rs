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

use crate::builders::{self, OperatorEnv};
use crate::crd::MessageQueueCluster;

/// A cluster's controller (a change of its spec'd [`ControllerConfig`] reopens it).
struct Entry {
    /// The controller.
    controller: Arc<Controller>,
    /// Stops its detection loop.
    stop: CancellationToken,
}

/// The controllers of every cluster under failover, by scope (`<namespace>/<name>`).
pub struct Failover {
    /// Where the state ConfigMaps are read and written.
    api: store::ApiRuntime,
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
    pub fn new(api: store::ApiRuntime, shutdown: CancellationToken) -> Arc<Self> {
        Arc::new(Self {
            api,
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
        };
        if let Some(e) = self.entries().get(&scope) {
            if *e.controller.config() == config {
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
        let Some(controller) = self.get(&scope) else {
            return Some(error_response(
                &req,
                response_code::CONTROLLER_BROKER_METADATA_NOT_EXIST,
                format!(
                    "no MessageQueueCluster {scope:?} under failover at this operator \
                     (brokers send their cluster as {CONTROLLER_SCOPE})"
                ),
            ));
        };
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
