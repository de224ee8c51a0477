//! `conveyor-operator run` reconciles MessageQueueClusters; `conveyor-operator crd` prints the CRD.
#![forbid(unsafe_code)]

use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use conveyor_operator::controller::FailoverSettings;
use conveyor_operator::controller_endpoint::ControllerEndpoint;
use conveyor_operator::leader::{LeaderElector, LeaseConfig};
use conveyor_operator::telemetry::{self, Listen, Telemetry, DEFAULT_HTTP_LISTEN};

#[derive(Parser)]
#[command(
    name = "conveyor-operator",
    version,
    about = "Kubernetes operator for Conveyor"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a CustomResourceDefinition as YAML (the content of crds/<PLURAL>.conveyor.dev.yaml).
    Crd {
        /// Which: messagequeueclusters, consumerautoscalers or messagequeuetopics.
        #[arg(default_value = "messagequeueclusters")]
        plural: String,
    },
    /// Print the objects the operator would apply for a MessageQueueCluster manifest, as
    /// YAML (a preview for review or GitOps diffs, and what the offline schema checks read).
    /// The cluster secret's value is a placeholder.
    Render {
        /// The MessageQueueCluster manifest.
        file: std::path::PathBuf,
        /// The replication controller's address brokers are given (failover).
        #[arg(
            long,
            default_value = "conveyor-operator-controller.conveyor-system.svc:9878"
        )]
        controller_addr: String,
    },
    /// Run the operator.
    Run(Box<RunArgs>),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    namespace: Option<String>,
    /// Disable leader election (only for a single replica).
    #[arg(long, env = "CONVEYOR_OPERATOR_NO_LEADER_ELECTION")]
    no_leader_election: bool,
    /// Namespace of the leader-election Lease (default: the pod's namespace, else "default").
    #[arg(long, env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "conveyor-operator-leader")]
    lease_name: String,
    /// Identity in the Lease (default: the pod name, else host name and process id).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Seconds a Lease stays valid without renewal.
    #[arg(long, default_value_t = 15)]
    lease_duration_secs: u64,
    /// Seconds between renewals.
    #[arg(long, default_value_t = 4)]
    lease_renew_secs: u64,
    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz, or `off`.
    #[arg(long, env = "CONVEYOR_OPERATOR_HTTP_LISTEN", default_value = DEFAULT_HTTP_LISTEN)]
    http_listen: Listen,
    /// Where the replication controller (failover) listens for brokers, or `off` (then every
    /// group keeps classic, ordinal-based roles).
    #[arg(
        long,
        env = "CONVEYOR_CONTROLLER_LISTEN",
        default_value = "0.0.0.0:9878"
    )]
    controller_listen: Listen,
    /// The controller's address as brokers reach it (`host:port`, usually the operator's
    /// controller Service). Default: `conveyor-operator-controller.<POD_NAMESPACE>.svc:<port>`.
    #[arg(long, env = "CONVEYOR_CONTROLLER_ADVERTISE")]
    controller_advertise: Option<String>,
    /// The controller Service (in POD_NAMESPACE, without a selector) whose EndpointSlice the
    /// leading replica points at itself (POD_IP and the controller port), so that brokers reach
    /// only the leader. Unset: the Service is left alone.
    #[arg(long, env = "CONVEYOR_CONTROLLER_SERVICE")]
    controller_service: Option<String>,
    /// This replica's IP as brokers reach it (the pod IP, from the downward API).
    #[arg(long, env = "POD_IP")]
    pod_ip: Option<std::net::IpAddr>,
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "conveyor-operator".into());
    format!("{host}-{}", std::process::id())
}

/// Starts the HTTP endpoint in the background. A failure to bind is logged, not fatal: the
/// operator keeps reconciling (in a pod the liveness probe then fails and the kubelet restarts
/// it, so the error is visible), and a second local replica does not die on a taken port.
async fn serve_http(listen: Listen, telemetry: &Telemetry) {
    let Listen::On(addr) = listen else {
        tracing::info!("HTTP endpoint off (--http-listen off): no /metrics, /healthz, /readyz");
        return;
    };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(listener) => {
            let local = listener.local_addr().unwrap_or(addr);
            tracing::info!(addr = %local, "serving /metrics, /healthz and /readyz");
            tokio::spawn(telemetry::serve(listener, telemetry.clone()));
        }
        Err(e) => tracing::error!(
            %addr, error = %e,
            "cannot listen for HTTP; running without /metrics, /healthz and /readyz"
        ),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd { plural } => {
            let files = conveyor_operator::crd::crd_files();
            let (_, yaml) = files.iter().find(|(p, _)| *p == plural).with_context(|| {
                let known: Vec<_> = files.iter().map(|(p, _)| *p).collect();
                format!("no CRD {plural:?}; known: {}", known.join(", "))
            })?;
            print!("{yaml}");
            Ok(())
        }
        Command::Render {
            file,
            controller_addr,
        } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let mut mqc: conveyor_operator::crd::MessageQueueCluster =
                serde_yaml::from_str(&text).with_context(|| format!("{}", file.display()))?;
            // Owner references need a uid, which only the API server gives.
            mqc.metadata
                .uid
                .get_or_insert_with(|| "00000000-0000-0000-0000-000000000000".into());
            let env = conveyor_operator::builders::OperatorEnv {
                controller_addr: Some(controller_addr),
                cluster_secret: Some(conveyor_operator::builders::ClusterSecret(
                    "placeholder-rendered-offline".into(),
                )),
                ..Default::default()
            };
            let plan = conveyor_operator::reconcile::plan::plan(&mqc, &Default::default(), &env);
            for stall in &plan.stalls {
                eprintln!("refused: {}", stall.message);
            }
            print!("{}", conveyor_operator::reconcile::plan::to_yaml(&plan)?);
            Ok(())
        }
        Command::Run(args) => {
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info,kube=warn".into()),
                )
                .init();
            let telemetry = Telemetry::new();
            serve_http(args.http_listen, &telemetry).await;
            let client = kube::Client::try_default()
                .await
                .context("cannot build a Kubernetes client (in-cluster or KUBECONFIG)")?;
            let identity = args.identity.clone().unwrap_or_else(default_identity);
            anyhow::ensure!(
                args.lease_renew_secs > 0 && args.lease_renew_secs < args.lease_duration_secs,
                "--lease-renew-secs must be positive and below --lease-duration-secs"
            );
            let elector = (!args.no_leader_election).then(|| {
                LeaderElector::new(
                    client.clone(),
                    LeaseConfig {
                        namespace: args
                            .lease_namespace
                            .clone()
                            .unwrap_or_else(|| "default".into()),
                        name: args.lease_name.clone(),
                        identity: identity.clone(),
                        lease_duration: Duration::from_secs(args.lease_duration_secs),
                        retry_period: Duration::from_secs(args.lease_renew_secs),
                    },
                )
            });
            let endpoint = match (&args.controller_service, &args.lease_namespace, args.pod_ip) {
                (Some(service), Some(namespace), Some(ip)) => Some(ControllerEndpoint {
                    namespace: namespace.clone(),
                    service: service.clone(),
                    ip,
                }),
                (Some(service), _, _) => {
                    tracing::warn!(
                        service,
                        "--controller-service needs POD_NAMESPACE and POD_IP: the Service is left alone"
                    );
                    None
                }
                _ => None,
            };
            let failover = match (args.controller_listen, args.controller_advertise) {
                (Listen::Off, _) => None,
                (Listen::On(listen), Some(advertise)) => Some(FailoverSettings {
                    listen,
                    advertise,
                    endpoint,
                }),
                (Listen::On(listen), None) => match &args.lease_namespace {
                    Some(ns) => Some(FailoverSettings {
                        listen,
                        advertise: format!(
                            "conveyor-operator-controller.{ns}.svc:{}",
                            listen.port()
                        ),
                        endpoint,
                    }),
                    None => {
                        tracing::warn!(
                            "no --controller-advertise and no POD_NAMESPACE: brokers could not \
                             reach the controller, so failover is off (classic roles)"
                        );
                        None
                    }
                },
            };
            tracing::info!(%identity, namespace = ?args.namespace, "conveyor-operator starting");
            conveyor_operator::controller::run_leader_elected(
                client,
                args.namespace,
                Some(identity),
                elector,
                failover,
                telemetry,
            )
            .await;
            tracing::info!("conveyor-operator stopped");
            Ok(())
        }
    }
}
