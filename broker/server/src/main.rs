//! The `conveyor` binary: `standalone`, `namesrv`, `broker` (and, with the client crate,
//! `bench` and `admin`).
#![forbid(unsafe_code)]

use anyhow::Context;
use clap::{Parser, Subcommand};
use conveyor::app::{self, Role};
use conveyor::settings::{self, ServerArgs};

mod tools;

#[derive(Parser)]
#[command(
    name = "conveyor",
    version,
    about = "Conveyor: a RocketMQ-compatible message queue"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Name server and broker in one process (the local and CI default).
    Standalone(ServerArgs),
    /// A name server.
    Namesrv(ServerArgs),
    /// A broker.
    Broker(ServerArgs),
    /// The replication controller (who is master of each broker group).
    Controller(ServerArgs),
    /// Load generators against a running cluster.
    #[command(subcommand)]
    Bench(tools::BenchCommand),
    /// Topics, groups and cluster information.
    #[command(subcommand)]
    Admin(tools::AdminCommand),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CONVEYOR_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start the async runtime")?;
    runtime.block_on(async move {
        let (role, args) = match cli.command {
            Command::Standalone(a) => (Role::Standalone, a),
            Command::Namesrv(a) => (Role::NameServer, a),
            Command::Broker(a) => (Role::Broker, a),
            Command::Controller(a) => (Role::Controller, a),
            Command::Bench(cmd) => return tools::bench(cmd).await,
            Command::Admin(cmd) => return tools::admin(cmd).await,
        };
        let config = settings::build(role, &args)?;
        let running = app::start(config).await?;
        wait_for_signal().await?;
        tracing::info!("shutting down");
        running.stop().await;
        Ok(())
    })
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("install SIGTERM handler")?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r.context("wait for Ctrl-C")?,
    }
    Ok(())
}
