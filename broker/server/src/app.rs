//! Starting and stopping a Conveyor process: a name server, a broker, or both
//! (`standalone`), with the HTTP probe port. The binary and the integration tests both use
//! this, so tests run the exact code `conveyor standalone` runs, on ephemeral ports.

use std::net::SocketAddr;
use std::sync::Arc;

use conveyor_protocol::command::RemotingCommand;
use conveyor_store::StoreConfig;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::broker::{Broker, BrokerConfig, BrokerError};
use crate::health::{self, HealthState};
use crate::namesrv::kv_config::KvConfig;
use crate::namesrv::NameServer;
use crate::remoting::{serve, ServeLimits};

/// Which servers this process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A name server only.
    NameServer,
    /// A broker only (registering with external name servers).
    Broker,
    /// A name server and a broker in one process (`conveyor standalone`).
    Standalone,
    /// The replication controller (`conveyor controller`).
    Controller,
}

/// Everything needed to start.
#[derive(Debug, Clone)]
pub struct AppConfig {
    /// Which servers to run.
    pub role: Role,
    /// Controller listen address (Controller).
    pub controller_listen: SocketAddr,
    /// How the controller decides (Controller); its state goes to the store's data dir.
    pub controller: crate::controller::ControllerConfig,
    /// Group endpoints the controller serves (Controller).
    pub group_endpoints: Vec<crate::controller::endpoint::GroupEndpoint>,
    /// Name server listen address (NameServer, Standalone).
    pub namesrv_listen: SocketAddr,
    /// Broker listen address (Broker, Standalone).
    pub broker_listen: SocketAddr,
    /// Replication stream listen address (Broker, Standalone).
    pub replication_listen: SocketAddr,
    /// HTTP probe/metrics listen address; `None` disables it.
    pub http_listen: Option<SocketAddr>,
    /// Whether `/metrics` names topics and consumer groups.
    pub http_resource_labels: bool,
    /// gRPC endpoint listen address (Broker, Standalone); `None` disables it.
    pub grpc_listen: Option<SocketAddr>,
    /// How the gRPC endpoint serves.
    pub grpc: crate::grpc::GrpcConfig,
    /// TLS on the client ports (today the gRPC endpoint).
    pub tls: crate::tls::TlsConfig,
    /// Access control (`None`: every request allowed, as RocketMQ without `aclEnable`).
    pub acl: Option<crate::acl::AclConfig>,
    /// Broker settings. An empty `advertised_addr` means "derive from the listen address";
    /// in standalone mode empty `namesrv_addrs` means "the embedded name server".
    pub broker: BrokerConfig,
    /// Store settings (root = data dir).
    pub store: StoreConfig,
    /// What the remoting servers accept from one client and in all (both servers).
    pub limits: ServeLimits,
}

/// Why the process could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The broker could not open.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// Opening the broker panicked (on the blocking pool).
    #[error("opening the broker panicked")]
    Panicked,
    /// The controller's state could not be read.
    #[error("controller state: {0}")]
    Controller(crate::controller::state_store::StateStoreError),
    /// The name server's KV configuration could not be read.
    #[error("name server KV configuration: {0}")]
    NameServer(crate::broker::config_file::ConfigFileError),
    /// The TLS certificate could not be loaded or generated.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// The ACL users file or cluster secret could not be read.
    #[error("ACL: {0}")]
    Acl(#[from] crate::acl::AclError),
}

/// A running process.
pub struct Running {
    /// Where the name server listens, when this process runs one.
    pub namesrv_addr: Option<SocketAddr>,
    /// Where the controller listens, when this process runs one.
    pub controller_addr: Option<SocketAddr>,
    /// Where the broker listens, when this process runs one.
    pub broker_addr: Option<SocketAddr>,
    /// Where the broker's replication stream listens, when this process runs a broker.
    pub replication_addr: Option<SocketAddr>,
    /// Where the HTTP probes listen, when enabled.
    pub http_addr: Option<SocketAddr>,
    /// Where the gRPC endpoint listens, when this process runs a broker and it is enabled.
    pub grpc_addr: Option<SocketAddr>,
    /// The broker, when this process runs one (tests look inside through its small API).
    pub broker: Option<Arc<Broker>>,
    /// Cancelled to stop every task.
    shutdown: CancellationToken,
    /// The servers and background loops.
    tasks: JoinSet<()>,
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, StartError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Bind { addr, source })
}

/// The address clients should use for a listener bound to `local`.
fn advertise(local: SocketAddr) -> String {
    if local.ip().is_unspecified() {
        format!("127.0.0.1:{}", local.port())
    } else {
        local.to_string()
    }
}

/// Serves `processor` on `listener`, behind `acl` when there is one (its requests needing
/// what `needs` says).
fn serve_behind<P: crate::remoting::Processor>(
    acl: &Option<Arc<crate::acl::Acl>>,
    needs: crate::acl::guard::NeedsOf<P>,
    listener: TcpListener,
    tls: crate::tls::Acceptor,
    processor: Arc<P>,
    shutdown: CancellationToken,
    limits: ServeLimits,
) -> futures_util::future::BoxFuture<'static, ()> {
    use futures_util::FutureExt;
    match acl {
        Some(acl) => {
            let guarded = crate::acl::guard::Guarded::new(processor, acl.clone(), needs);
            serve(listener, tls, Arc::new(guarded), shutdown, limits).boxed()
        }
        None => serve(listener, tls, processor, shutdown, limits).boxed(),
    }
}

/// Starts the configured servers.
pub async fn start(mut cfg: AppConfig) -> Result<Running, StartError> {
    let shutdown = CancellationToken::new();
    let mut tasks = JoinSet::new();
    // The name server's and broker's remoting ports: TLS beside plaintext unless told
    // otherwise (RocketMQ's default `tls.server.mode`); loaded now, so a bad certificate
    // fails the start.
    let remoting_tls = crate::tls::Acceptor::new(&cfg.tls, &[])?;
    if cfg.tls.mode == crate::tls::TlsMode::Enforcing {
        // Peers enforce it too: this process's own connections (registration, controller,
        // relays, slave synchronisation) go over TLS, as RocketMQ's `tls.enable`. Never
        // turned off here: another server of this process may need it.
        conveyor_remoting::tls::set_client_tls(true);
    }
    // ACL: loaded now, so a bad users file fails the start; this process's own requests to
    // its peers are signed with the cluster secret from here on.
    let acl = match &cfg.acl {
        Some(config) => {
            let acl = Arc::new(crate::acl::Acl::load(config.clone())?);
            conveyor_remoting::acl::set_client_credentials(Some(crate::acl::cluster_credentials(
                &config.cluster_secret_file,
            )?));
            tasks.spawn(acl.clone().run_reload(shutdown.clone()));
            Some(acl)
        }
        None => None,
    };
    let mut running = Running {
        namesrv_addr: None,
        controller_addr: None,
        broker_addr: None,
        replication_addr: None,
        http_addr: None,
        grpc_addr: None,
        broker: None,
        shutdown: shutdown.clone(),
        tasks: JoinSet::new(),
    };
    // The probes' port opens first: a broker's store recovery can take minutes (a large log
    // after a crash), and meanwhile /healthz says the process is alive and /readyz that it is
    // still recovering, so no liveness probe kills a recovery that would have finished.
    let opened = matches!(cfg.role, Role::Broker | Role::Standalone)
        .then(|| Arc::new(std::sync::OnceLock::new()));
    if let Some(http) = cfg.http_listen {
        let listener = bind(http).await?;
        running.http_addr = listener.local_addr().ok();
        let state = HealthState {
            broker: opened.clone(),
            resource_labels: cfg.http_resource_labels,
        };
        tasks.spawn(health::serve(listener, state, shutdown.clone()));
    }
    if cfg.role == Role::Controller {
        let listener = bind(cfg.controller_listen).await?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: cfg.controller_listen,
            source,
        })?;
        let store = crate::controller::state_store::FileStateStore::new(&cfg.store.root)
            .map_err(|e| StartError::Controller(e.into()))?;
        let controller = Arc::new(
            crate::controller::Controller::open(cfg.controller.clone(), Box::new(store))
                .map_err(StartError::Controller)?,
        );
        running.controller_addr = Some(addr);
        {
            let (c, stop) = (controller.clone(), shutdown.clone());
            tasks.spawn(async move { c.run_detection(stop).await });
        }
        for e in &cfg.group_endpoints {
            let listener = bind(e.listen).await?;
            tracing::info!(group = e.group, listen = %e.listen, "group endpoint listening");
            tasks.spawn(crate::controller::endpoint::serve(
                controller.clone(),
                e.group.clone(),
                listener,
                shutdown.clone(),
            ));
        }
        tasks.spawn(serve_behind(
            &acl,
            Arc::new(|_: &crate::controller::Controller, r: &RemotingCommand| {
                crate::acl::needs::controller(r)
            }),
            listener,
            remoting_tls.clone(),
            controller,
            shutdown.clone(),
            cfg.limits,
        ));
        tracing::info!(%addr, "controller listening");
    }
    if matches!(cfg.role, Role::NameServer | Role::Standalone) {
        let listener = bind(cfg.namesrv_listen).await?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: cfg.namesrv_listen,
            source,
        })?;
        running.namesrv_addr = Some(addr);
        // RocketMQ keeps it in ~/namesrv/kvConfig.json.
        let kv = KvConfig::load(&cfg.store.root.join("namesrv")).map_err(StartError::NameServer)?;
        let ns = NameServer::new(addr.port(), kv);
        tasks.spawn(ns.clone().run_expiry(shutdown.clone()));
        tasks.spawn(serve_behind(
            &acl,
            Arc::new(|_: &NameServer, r: &RemotingCommand| crate::acl::needs::name_server(r)),
            listener,
            remoting_tls.clone(),
            ns,
            shutdown.clone(),
            cfg.limits,
        ));
        tracing::info!(%addr, "name server listening");
        if cfg.role == Role::Standalone && cfg.broker.namesrv_addrs.is_empty() {
            cfg.broker.namesrv_addrs = vec![advertise(addr)];
        }
    }
    if matches!(cfg.role, Role::Broker | Role::Standalone) {
        let listener = bind(cfg.broker_listen).await?;
        let addr = listener.local_addr().map_err(|source| StartError::Bind {
            addr: cfg.broker_listen,
            source,
        })?;
        if cfg.broker.advertised_addr.is_empty() {
            cfg.broker.advertised_addr = advertise(addr);
        }
        let ha_listener = bind(cfg.replication_listen).await?;
        let ha_addr = ha_listener
            .local_addr()
            .map_err(|source| StartError::Bind {
                addr: cfg.replication_listen,
                source,
            })?;
        if cfg.broker.replication.advertised_addr.is_empty() {
            // The broker's advertised host with the replication port.
            let host = cfg
                .broker
                .advertised_addr
                .rsplit_once(':')
                .map_or("127.0.0.1", |(h, _)| h)
                .to_string();
            cfg.broker.replication.advertised_addr = format!("{host}:{}", ha_addr.port());
        }
        if let Some(acl) = &cfg.acl {
            // Replication too only between the cluster's own brokers.
            cfg.broker.replication.cluster_secret =
                Some(crate::acl::read_cluster_secret(&acl.cluster_secret_file)?);
        }
        let (broker_cfg, store_cfg) = (cfg.broker.clone(), cfg.store.clone());
        // Opening recovers the store: blocking work, off the async threads.
        let broker = tokio::task::spawn_blocking(move || Broker::open(broker_cfg, store_cfg))
            .await
            .map_err(|_| StartError::Panicked)??;
        running.broker_addr = Some(addr);
        running.broker = Some(broker.clone());
        if let Some(opened) = &opened {
            let _ = opened.set(broker.clone());
        }
        tasks.spawn(broker.clone().run_background(shutdown.clone()));
        tasks.spawn(broker.clone().run_schedule(shutdown.clone()));
        tasks.spawn(broker.clone().run_timer(shutdown.clone()));
        tasks.spawn(broker.clone().run_transaction_checks(shutdown.clone()));
        tasks.spawn(broker.clone().run_pop(shutdown.clone()));
        tasks.spawn(broker.replication().clone().run(
            ha_listener,
            remoting_tls.clone(),
            shutdown.clone(),
        ));
        tasks.spawn(broker.clone().run_slave_sync(shutdown.clone()));
        running.replication_addr = Some(ha_addr);
        tasks.spawn(serve_behind(
            &acl,
            Arc::new(|b: &Broker, r: &RemotingCommand| {
                crate::acl::needs::broker(r, |offset| b.record_topic(offset))
            }),
            listener,
            remoting_tls.clone(),
            broker,
            shutdown.clone(),
            cfg.limits,
        ));
        tracing::info!(%addr, advertised = %cfg.broker.advertised_addr, "broker listening");
        if let (Some(grpc), Some(broker)) = (cfg.grpc_listen, running.broker.clone()) {
            // gRPC over TLS needs HTTP/2 chosen by ALPN (grpc-java refuses the connection
            // otherwise).
            let acceptor = crate::tls::Acceptor::new(&cfg.tls, &[b"h2"])?;
            let listener = bind(grpc).await?;
            running.grpc_addr = listener.local_addr().ok();
            tracing::info!(addr = ?running.grpc_addr, tls = ?acceptor.mode(), "gRPC endpoint listening");
            tasks.spawn(crate::grpc::serve(
                listener,
                acceptor,
                broker,
                cfg.grpc.clone(),
                acl.clone(),
                shutdown.clone(),
            ));
        }
    }
    running.tasks = tasks;
    Ok(running)
}

impl Running {
    /// Graceful stop: a controller-mode master first hands its group over to an in-sync
    /// slave; then stop accepting, finish requests in flight, unregister, persist offsets,
    /// flush and close the store.
    pub async fn stop(mut self) {
        if let Some(broker) = &self.broker {
            broker.replication().hand_over_before_stop().await;
            broker.begin_stop();
        }
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
        if let Some(broker) = self.broker.take() {
            let _ = tokio::task::spawn_blocking(move || broker.close()).await;
        }
        tracing::info!("stopped");
    }

    /// Resolves when the process was asked to stop by [`Running::shutdown_token`].
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }
}
