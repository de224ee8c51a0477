//! Wires the reconciler into a kube-runtime `Controller` watching the clusters and the objects
//! they own, behind leader election, and reports the replica's state to the telemetry.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::{watcher, Controller};
use kube::Client;

use crate::crd::MessageQueueCluster;
use crate::failover::Failover;
use crate::leader::{Attempt, LeaderElector};
use crate::reconcile::{error_policy, reconcile, Context};
use crate::telemetry::{State, Telemetry};

/// Label every owned object carries; the owned-object watches filter on it.
const MANAGED: &str = "app.kubernetes.io/managed-by=conveyor-operator";

/// Where the operator's replication controller listens, and the address brokers are given.
#[derive(Debug, Clone)]
pub struct FailoverSettings {
    /// The listening address.
    pub listen: std::net::SocketAddr,
    /// `host:port` rendered into the brokers' configuration.
    pub advertise: String,
    /// The controller Service this replica points at itself while it leads, if any.
    pub endpoint: Option<crate::controller_endpoint::ControllerEndpoint>,
}

fn api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Runs the controller until the future is dropped. `namespace` limits it to one namespace.
/// Reports [`State::Syncing`] at once and [`State::Running`] when the MessageQueueCluster watch
/// has completed its initial list.
pub async fn run_controller(
    client: Client,
    namespace: Option<String>,
    instance: Option<String>,
    failover: Option<FailoverSettings>,
    telemetry: Telemetry,
) {
    telemetry.set_state(State::Syncing);
    let ns = namespace.as_deref();
    let mut ctx =
        Context::new(client.clone(), instance.clone()).with_metrics(telemetry.metrics.clone());
    // The replication controller serves only while this replica leads: it stops (and its
    // detection loops with it) when this function's future is dropped.
    let stop = tokio_util::sync::CancellationToken::new();
    let _stop_on_drop = stop.clone().drop_guard();
    if let Some(settings) = failover {
        let bound = match tokio::net::TcpListener::bind(settings.listen).await {
            Ok(listener) => {
                match tokio::task::spawn_blocking(crate::failover::store::ApiRuntime::start).await {
                    Ok(Ok(api)) => Ok((listener, api)),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match bound {
            Ok((listener, api)) => {
                let failover = Failover::new(api, client.clone(), stop.clone());
                tracing::info!(listen = %settings.listen, advertise = %settings.advertise, "replication controller listening");
                if let (Some(endpoint), Ok(local)) = (settings.endpoint, listener.local_addr()) {
                    tokio::spawn(crate::controller_endpoint::publish(
                        client.clone(),
                        endpoint,
                        local.port(),
                        stop.clone(),
                    ));
                }
                tokio::spawn(failover.clone().serve(listener));
                ctx = ctx.with_failover(failover, settings.advertise);
            }
            Err(e) => tracing::error!(
                listen = %settings.listen, error = %e,
                "cannot serve brokers' controller requests; failover is off (classic roles)"
            ),
        }
    }
    let ctx = Arc::new(ctx);
    let owned = watcher::Config::default().labels(MANAGED);
    let decisions = ctx.failover.as_ref().map(|f| f.changes());
    let controller = Controller::new(
        api::<MessageQueueCluster>(&client, ns),
        watcher::Config::default(),
    )
    .owns(api::<StatefulSet>(&client, ns), owned.clone())
    .owns(api::<ConfigMap>(&client, ns), owned.clone())
    .owns(api::<Service>(&client, ns), owned.clone())
    .owns(api::<PodDisruptionBudget>(&client, ns), owned);
    // A controller decision (a promotion above all) is reported without waiting for a requeue.
    let controller = match decisions {
        Some(d) => controller.reconcile_all_on(d),
        None => controller,
    };
    let clusters = controller.store();
    let run = controller
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::debug!(cluster = %obj.name, "reconciled"),
                Err(e) => tracing::debug!(error = %e, "reconcile error"),
            }
        });
    // The consumer autoscalers and the declared topics run beside, under the same leadership.
    let autoscalers =
        crate::autoscaler::run::run(client.clone(), namespace.clone(), instance.clone());
    let topics = crate::topics::run::run(client.clone(), namespace.clone(), instance);
    let users = crate::users::run::run(client.clone(), namespace.clone());
    let run = async move {
        tokio::select! {
            _ = run => {}
            _ = autoscalers => {}
            _ = topics => {}
            _ = users => {}
        }
    };
    let mut run = std::pin::pin!(run);
    tokio::select! {
        _ = &mut run => return,
        synced = clusters.wait_until_ready() => {
            if synced.is_ok() {
                telemetry.set_state(State::Running);
            }
        }
    }
    run.await;
}

/// Leader-elected operation: wait for the lease, reconcile while holding it, and go back to
/// waiting if it is lost (the controller is dropped first, so two replicas never write at once).
/// Every lease answer is reported to `telemetry` (standby, leading, unreachable) for `/readyz`.
/// Returns on SIGTERM/SIGINT.
pub async fn run_leader_elected(
    client: Client,
    namespace: Option<String>,
    instance: Option<String>,
    elector: Option<LeaderElector>,
    failover: Option<FailoverSettings>,
    telemetry: Telemetry,
) {
    let Some(elector) = elector else {
        run_controller(client, namespace, instance, failover, telemetry).await;
        return;
    };
    loop {
        let report = |attempt: Result<&Attempt, &kube::Error>| {
            telemetry.set_state(match attempt {
                Ok(Attempt::Leading) => State::Syncing,
                Ok(Attempt::Following(_)) => State::Standby,
                Err(_) => State::LeaseUnreachable,
            })
        };
        tokio::select! {
            _ = elector.acquire_reporting(report) => {}
            _ = shutdown_signal() => return,
        }
        tokio::select! {
            _ = run_controller(client.clone(), namespace.clone(), instance.clone(), failover.clone(), telemetry.clone()) => {
                elector.release().await;
                return;
            }
            _ = elector.hold() => {
                telemetry.set_state(State::Starting);
                tracing::warn!("leadership lost; controller stopped, waiting to re-acquire");
            }
        }
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
