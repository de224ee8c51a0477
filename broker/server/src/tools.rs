//! `conveyor bench` and `conveyor admin`: load generators and operator commands, built on the
//! `conveyor-client` crate (binary only).

use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use conveyor_client::admin::{Admin, ResetTo, TopicSpec};
use conveyor_client::bench::{
    self, ConsumeConfig, Limit, LongPollConfig, ProduceConfig, ScrapeConfig, Stats,
};
use conveyor_client::{PullConsumer, PullConsumerConfig};

/// Common connection flags.
#[derive(Debug, Clone, Args)]
pub struct Target {
    /// Name servers, `host:port;host:port`.
    #[arg(long, env = "CONVEYOR_NAMESRV_ADDR", default_value = "127.0.0.1:9876")]
    pub namesrv_addr: String,
    /// Sign requests as this user (a cluster with ACL on; RocketMQ's `accessKey`).
    #[arg(long, env = "CONVEYOR_ACCESS_KEY", requires = "secret_key")]
    pub access_key: Option<String>,
    /// The user's secret key.
    #[arg(
        long,
        env = "CONVEYOR_SECRET_KEY",
        requires = "access_key",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,
    /// Connect over TLS (a cluster whose TLS mode is enforcing; RocketMQ's `tls.enable`).
    #[arg(long, env = "CONVEYOR_TLS")]
    pub tls: bool,
}

impl Target {
    /// Applies the credentials and TLS choice to every connection this process opens, and
    /// returns the name servers' addresses.
    pub fn connect(self) -> String {
        if let (Some(ak), Some(sk)) = (self.access_key, self.secret_key) {
            conveyor_remoting::acl::set_client_credentials(Some(
                conveyor_remoting::acl::Credentials::new(ak, sk),
            ));
        }
        if self.tls {
            conveyor_remoting::tls::set_client_tls(true);
        }
        self.namesrv_addr
    }
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Send messages as fast as the settings allow.
    Produce {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "BenchTopic")]
        topic: String,
        /// Body size in bytes.
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Producers (one connection each).
        #[arg(long, default_value_t = 4)]
        producers: usize,
        /// Concurrent sends per producer.
        #[arg(long, default_value_t = 32)]
        in_flight: usize,
        /// Run time in seconds (ignored with --count).
        #[arg(long, default_value_t = 10)]
        duration: u64,
        /// Number of requests instead of a duration.
        #[arg(long)]
        count: Option<u64>,
        /// Messages per request (more than 1 sends SEND_BATCH_MESSAGE batches).
        #[arg(long, default_value_t = 1)]
        batch: usize,
    },
    /// Drain a topic from the beginning (catch-up read).
    Consume {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "BenchTopic")]
        topic: String,
        /// Consumers (queues are spread over them).
        #[arg(long, default_value_t = 4)]
        consumers: usize,
        /// Messages per pull.
        #[arg(long, default_value_t = 256)]
        batch: i32,
    },
    /// Schedule messages at one delay level, then drain their deliveries (the topic must
    /// exist: `conveyor admin create-topic`).
    Delay {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "BenchDelay")]
        topic: String,
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// Delay level of every message.
        #[arg(long, default_value_t = 1)]
        level: i32,
        /// The broker's delay levels (to know the level's delay).
        #[arg(
            long,
            default_value = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
        )]
        delay_levels: String,
        #[arg(long, default_value_t = 256)]
        size: usize,
        #[arg(long, default_value_t = 4)]
        producers: usize,
        #[arg(long, default_value_t = 32)]
        in_flight: usize,
    },
    /// Transactional sends: half message + commit per unit.
    Transaction {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "BenchTx")]
        topic: String,
        #[arg(long, default_value_t = 50_000)]
        count: u64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        #[arg(long, default_value_t = 4)]
        producers: usize,
        #[arg(long, default_value_t = 32)]
        in_flight: usize,
    },
    /// Time from a send to the return of an idle consumer's long poll.
    LongPoll {
        #[command(flatten)]
        target: Target,
        #[arg(long, default_value = "BenchLongPoll")]
        topic: String,
        #[arg(long, default_value_t = 20)]
        trials: usize,
    },
    /// A member of a consumer group, consuming a topic until SIGTERM or Ctrl-C: it shares the
    /// topic's queues with the group's other members (RocketMQ's average allocation) and
    /// writes the id of every message it handles to `--ledger` (or stdout).
    Member {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        /// Milliseconds between rebalances.
        #[arg(long, default_value_t = 20_000)]
        rebalance_ms: u64,
        /// Milliseconds spent per message (a slow consumer).
        #[arg(long, default_value_t = 0)]
        delay_ms: u64,
        /// File the message ids are appended to.
        #[arg(long)]
        ledger: Option<std::path::PathBuf>,
    },
    /// What a /metrics scrape costs the broker with many consumer groups: scrapes before and
    /// after `groups` groups get offsets on `topics` topics.
    Scrape {
        #[command(flatten)]
        target: Target,
        /// The broker's metrics URL.
        #[arg(long, default_value = "http://127.0.0.1:8080/metrics")]
        metrics_url: String,
        /// The broker's process id (its CPU time per scrape is read from /proc).
        #[arg(long)]
        broker_pid: Option<u32>,
        #[arg(long, default_value = "DefaultCluster")]
        cluster: String,
        #[arg(long, default_value_t = 1000)]
        groups: usize,
        #[arg(long, default_value_t = 10)]
        topics: usize,
        #[arg(long, default_value_t = 4)]
        queues: i32,
        #[arg(long, default_value_t = 20)]
        scrapes: usize,
    },
}

#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Brokers per cluster, with each group's zone.
    Cluster {
        #[command(flatten)]
        target: Target,
    },
    /// Topics with their queues' min/max offsets.
    Topics {
        #[command(flatten)]
        target: Target,
    },
    /// Create or update a topic on every master of a cluster.
    CreateTopic {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        topic: String,
        #[arg(long, default_value_t = 8)]
        queues: i32,
        #[arg(long, default_value = "DefaultCluster")]
        cluster: String,
    },
    /// A consumer group's backlog per queue of a topic.
    Group {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
    },
    /// Move a consumer group's committed offsets on every queue of a topic: to a time
    /// (mqadmin's `resetOffsetByTime -f true`), the start, or the end
    /// (`skipAccumulatedMessage`). The brokers commit the offsets and tell the group's running
    /// consumers, which jump to them.
    ResetOffset {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        group: String,
        #[arg(long)]
        topic: String,
        /// `earliest`, `latest`, or a time in ms since the epoch.
        #[arg(long)]
        to: String,
        /// `table` or `json`.
        #[arg(long, default_value = "table")]
        output: String,
    },
    /// Drain a broker group before it is removed: its topics turn read-only in every name
    /// server (mqadmin's `wipeWritePerm`), so producers move to the other groups within their
    /// route refresh while consumers finish its backlog. `--undo` gives the write permission
    /// back (`addWritePerm`).
    Drain {
        #[command(flatten)]
        target: Target,
        /// The broker group (`broker-name`).
        #[arg(long)]
        broker_name: String,
        /// Give the write permission back instead.
        #[arg(long)]
        undo: bool,
        /// `table` or `json`.
        #[arg(long, default_value = "table")]
        output: String,
    },
    /// One broker's runtime info (GET_BROKER_RUNTIME_INFO, mqadmin's `brokerStatus`): every
    /// key and value, sorted. Works against Apache RocketMQ brokers too.
    BrokerStatus {
        /// The broker, `host:port`.
        #[arg(long)]
        broker_addr: String,
        /// `table` or `json`.
        #[arg(long, default_value = "table")]
        output: String,
    },
    /// A broker group's replication: master, epoch, in-sync set, each replica's log end and
    /// lag behind the master (from the controller and the brokers).
    Replication {
        /// The controller, `host:port`.
        #[arg(
            long,
            env = "CONVEYOR_CONTROLLER_ADDR",
            default_value = "127.0.0.1:9878"
        )]
        controller: String,
        /// The broker group (`broker-name`).
        #[arg(long)]
        group: String,
        /// `table` or `json`.
        #[arg(long, default_value = "table")]
        output: String,
    },
    /// A controlled switchover: make replica `broker-id` of `group` the master in a new
    /// epoch. Only a member of the in-sync set is accepted (it holds every acknowledged
    /// message); the old master steps down and follows it.
    Promote {
        /// The controller, `host:port`.
        #[arg(
            long,
            env = "CONVEYOR_CONTROLLER_ADDR",
            default_value = "127.0.0.1:9878"
        )]
        controller: String,
        /// The broker group (`broker-name`).
        #[arg(long)]
        group: String,
        /// The replica to promote.
        #[arg(long)]
        broker_id: i64,
        /// Elect at once, as RocketMQ's `electMaster` does, instead of a hand-over (the
        /// master stops taking writes until the replica holds its whole log, so nothing it
        /// acknowledged is lost, also under asynchronous replication).
        #[arg(long)]
        immediate: bool,
    },
}

/// One replica's line in `admin replication`.
#[derive(Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaStatus {
    broker_id: i64,
    address: String,
    role: String,
    in_sync: bool,
    commit_log_max_offset: Option<u64>,
    lag_bytes: Option<u64>,
    /// Age of the oldest record the master holds and this replica does not: 0 when caught
    /// up (RocketMQ reports the byte gap only; seconds are what an alert wants).
    lag_seconds: Option<f64>,
}

/// The store time of the record at CommitLog `offset` on the broker at `addr`
/// (VIEW_MESSAGE_BY_ID), if there is one.
async fn store_time_at(
    client: &conveyor_remoting::RemotingClient,
    addr: &str,
    offset: u64,
) -> Option<i64> {
    let req = conveyor_protocol::command::RemotingCommand::request(
        conveyor_protocol::code::request_code::VIEW_MESSAGE_BY_ID,
        Default::default(),
    )
    .with_ext("offset", offset);
    let r = client
        .invoke_timeout(addr, req, Duration::from_secs(3))
        .await
        .ok()?;
    if r.code != conveyor_protocol::code::response_code::SUCCESS {
        return None;
    }
    conveyor_protocol::message::RecordView::parse(&r.body)
        .ok()
        .map(|v| v.store_timestamp())
}

/// Asks the controller about `group` (`code` GET_REPLICA_INFO or ELECT_MASTER).
async fn ask_controller(
    client: &conveyor_remoting::RemotingClient,
    controller: &str,
    request: conveyor_protocol::command::RemotingCommand,
) -> anyhow::Result<conveyor::controller::ReplicaInfo> {
    let r = client
        .invoke_timeout(controller, request, Duration::from_secs(5))
        .await
        .with_context(|| format!("ask the controller at {controller}"))?;
    anyhow::ensure!(
        r.code == conveyor_protocol::code::response_code::SUCCESS,
        "the controller answered {}: {}",
        r.code,
        r.remark.unwrap_or_default()
    );
    conveyor::controller::processor::parse_replica_info(&r).map_err(anyhow::Error::msg)
}

/// What `admin replication` reads of a broker's runtime info.
struct BrokerView {
    /// `commitLogMaxOffset`.
    end: u64,
    /// `brokerRole`.
    role: String,
    /// `slaveAckOffsets` of a master: what each slave acknowledged holding.
    slave_acks: std::collections::BTreeMap<i64, u64>,
}

/// The runtime info table of the broker at `addr`.
async fn runtime_info(
    client: &conveyor_remoting::RemotingClient,
    addr: &str,
) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
    let req = conveyor_protocol::command::RemotingCommand::request(
        conveyor_protocol::code::request_code::GET_BROKER_RUNTIME_INFO,
        Default::default(),
    );
    let r = client
        .invoke_timeout(addr, req, Duration::from_secs(3))
        .await?;
    anyhow::ensure!(
        r.code == conveyor_protocol::code::response_code::SUCCESS,
        "the broker answered {}: {}",
        r.code,
        r.remark.unwrap_or_default()
    );
    let kv: conveyor_protocol::route::KvTable = conveyor_protocol::json::from_slice(&r.body)?;
    Ok(kv.table)
}

/// The runtime info of the broker at `addr`, if it answers.
async fn broker_view(client: &conveyor_remoting::RemotingClient, addr: &str) -> Option<BrokerView> {
    let table = runtime_info(client, addr).await.ok()?;
    let end = table.get("commitLogMaxOffset")?.parse().ok()?;
    let slave_acks = table
        .get("slaveAckOffsets")
        .map(|list| {
            list.split(',')
                .filter_map(|pair| {
                    let (id, offset) = pair.split_once(':')?;
                    Some((id.parse().ok()?, offset.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    Some(BrokerView {
        end,
        role: table.get("brokerRole").cloned().unwrap_or_default(),
        slave_acks,
    })
}

async fn replication_status(controller: &str, group: &str, output: &str) -> anyhow::Result<()> {
    use conveyor_protocol::code::request_code as rc;
    let client = conveyor_remoting::RemotingClient::new(Default::default());
    let req = conveyor_protocol::command::RemotingCommand::request(
        rc::CONTROLLER_GET_REPLICA_INFO,
        Default::default(),
    )
    .with_ext("brokerName", group);
    let info = ask_controller(&client, controller, req).await?;
    let mut replicas = Vec::new();
    let mut views = std::collections::BTreeMap::new();
    for (id, member) in &info.members {
        let seen = broker_view(&client, &member.addr).await;
        replicas.push(ReplicaStatus {
            broker_id: *id,
            address: member.addr.clone(),
            role: seen
                .as_ref()
                .map_or("unreachable".into(), |s| s.role.clone()),
            in_sync: info.sync_state_set.contains(id),
            commit_log_max_offset: seen.as_ref().map(|s| s.end),
            lag_bytes: None,
            lag_seconds: None,
        });
        if let Some(view) = seen {
            views.insert(*id, view);
        }
    }
    let master = info.master.and_then(|m| {
        let addr = info.members.get(&m)?.addr.clone();
        Some((m, addr, views.get(&m)?))
    });
    let now = conveyor_protocol::time::now_ms();
    for r in &mut replicas {
        let Some((master_id, master_addr, master_view)) = &master else {
            continue;
        };
        let master_end = &master_view.end;
        // What the master knows this replica holds (it may not answer itself), else what
        // the replica says.
        let held = if r.broker_id == *master_id {
            Some(*master_end)
        } else {
            master_view
                .slave_acks
                .get(&r.broker_id)
                .copied()
                .or(r.commit_log_max_offset)
        };
        let Some(end) = held else {
            continue;
        };
        r.lag_bytes = Some(master_end.saturating_sub(end));
        r.lag_seconds = if end >= *master_end {
            Some(0.0)
        } else {
            // The first record this replica lacks, as the master stored it.
            store_time_at(&client, master_addr, end)
                .await
                .map(|t| (now - t).max(0) as f64 / 1000.0)
        };
    }
    if output == "json" {
        let doc = serde_json::json!({
            "group": group,
            "master": info.master,
            "masterEpoch": info.master_epoch,
            "syncStateSet": info.sync_state_set,
            "syncStateSetEpoch": info.sync_state_set_epoch,
            "replicas": replicas,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    println!(
        "group {group}: master {}, epoch {}, in-sync set {:?} (epoch {})",
        info.master.map_or("none".into(), |m| m.to_string()),
        info.master_epoch,
        info.sync_state_set,
        info.sync_state_set_epoch
    );
    println!(
        "{:<4} {:<22} {:<13} {:<8} {:>16} {:>12} {:>10}",
        "id", "address", "role", "in-sync", "log end", "lag bytes", "lag s"
    );
    let dash = || "-".to_string();
    for r in &replicas {
        println!(
            "{:<4} {:<22} {:<13} {:<8} {:>16} {:>12} {:>10}",
            r.broker_id,
            r.address,
            r.role,
            if r.in_sync { "yes" } else { "no" },
            r.commit_log_max_offset.map_or_else(dash, |o| o.to_string()),
            r.lag_bytes.map_or_else(dash, |o| o.to_string()),
            r.lag_seconds.map_or_else(dash, |s| format!("{s:.1}")),
        );
    }
    Ok(())
}

fn print_stats(what: &str, s: &Stats) {
    println!(
        "{what}: {} msgs in {:.2} s = {:.0} msgs/s, {:.1} MB/s; latency p50 {:.3} ms, p99 {:.3} ms, p999 {:.3} ms; errors {}{}",
        s.msgs,
        s.elapsed.as_secs_f64(),
        s.msgs_per_sec(),
        s.bytes as f64 / s.elapsed.as_secs_f64().max(1e-9) / 1e6,
        s.p50().as_secs_f64() * 1e3,
        s.p99().as_secs_f64() * 1e3,
        s.p999().as_secs_f64() * 1e3,
        s.errors,
        s.first_error.as_ref().map(|e| format!(" (first: {e})")).unwrap_or_default()
    );
}

pub async fn bench(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Produce {
            target,
            topic,
            size,
            producers,
            in_flight,
            duration,
            count,
            batch,
        } => {
            let mut c = ProduceConfig::new(target.connect(), topic);
            c.batch = batch;
            c.message_size = size;
            c.producers = producers;
            c.in_flight = in_flight;
            c.limit = match count {
                Some(n) => Limit::Count(n),
                None => Limit::Duration(Duration::from_secs(duration)),
            };
            let s = bench::produce(&c).await.context("produce benchmark")?;
            print_stats("produce", &s);
        }
        BenchCommand::Consume {
            target,
            topic,
            consumers,
            batch,
        } => {
            let mut c = ConsumeConfig::new(target.connect(), topic);
            c.consumers = consumers;
            c.batch = batch;
            let s = bench::consume(&c).await.context("consume benchmark")?;
            print_stats("consume", &s);
        }
        BenchCommand::Delay {
            target,
            topic,
            count,
            level,
            delay_levels,
            size,
            producers,
            in_flight,
        } => {
            let levels = conveyor::broker::send::parse_delay_levels(&delay_levels);
            let delay = levels
                .get((level.clamp(1, levels.len().max(1) as i32) - 1) as usize)
                .copied()
                .context("no delay levels given")?;
            let c = bench::DelayConfig {
                load: bench::CountedLoad {
                    namesrv: target.connect(),
                    topic,
                    group: "conveyor-bench-delay".into(),
                    message_size: size,
                    producers,
                    in_flight,
                    count,
                },
                level,
                delay,
                max_wait: Duration::from_secs(120),
            };
            let s = bench::delayed(&c).await.context("delay benchmark")?;
            print_stats("schedule", &s.scheduled);
            println!(
                "delivery: {} of {} delivered over {:.2} s = {:.0} msgs/s; early deliveries {}; max lateness {} ms",
                s.delivered,
                s.scheduled.msgs,
                s.delivery_window.as_secs_f64(),
                s.delivered as f64 / s.delivery_window.as_secs_f64().max(1e-3),
                s.early,
                s.max_lateness.as_millis()
            );
        }
        BenchCommand::Transaction {
            target,
            topic,
            count,
            size,
            producers,
            in_flight,
        } => {
            let c = bench::TransactionConfig {
                namesrv: target.connect(),
                topic,
                group: "conveyor-bench-tx".into(),
                message_size: size,
                producers,
                in_flight,
                count,
            };
            let s = bench::transactions(&c)
                .await
                .context("transaction benchmark")?;
            print_stats("transactions (half + commit)", &s);
        }
        BenchCommand::LongPoll {
            target,
            topic,
            trials,
        } => {
            let mut c = LongPollConfig::new(target.connect(), topic);
            c.trials = trials;
            let s = bench::long_poll_latency(&c)
                .await
                .context("long-poll benchmark")?;
            println!(
                "long poll wake-up over {} trials: min {:.2} ms, median {:.2} ms, max {:.2} ms",
                s.samples.len(),
                s.min.as_secs_f64() * 1e3,
                s.median.as_secs_f64() * 1e3,
                s.max.as_secs_f64() * 1e3
            );
        }
        BenchCommand::Member {
            target,
            group,
            topic,
            rebalance_ms,
            delay_ms,
            ledger,
        } => {
            use std::io::Write;
            let consumer = PullConsumer::new(PullConsumerConfig::new(target.connect(), group))?;
            let mut out: Box<dyn Write + Send> = match &ledger {
                Some(path) => Box::new(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(path)
                        .with_context(|| format!("open {}", path.display()))?,
                ),
                None => Box::new(std::io::stdout()),
            };
            let stop = tokio_util::sync::CancellationToken::new();
            let on_signal = stop.clone();
            tokio::spawn(async move {
                let mut term =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
                tokio::select! {
                    _ = async { if let Some(t) = term.as_mut() { t.recv().await; } } => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
                on_signal.cancel();
            });
            let mut failed = None;
            conveyor_client::group::run_member(
                &consumer,
                &topic,
                conveyor_client::group::MemberConfig {
                    rebalance: Duration::from_millis(rebalance_ms.max(100)),
                    per_message: Duration::from_millis(delay_ms),
                },
                stop,
                |m| {
                    // One write per line: members of a group append to one ledger file
                    // (O_APPEND), and a line written in two calls could interleave.
                    if let Err(e) = out.write_all(format!("{}\n", m.msg_id()).as_bytes()) {
                        failed.get_or_insert(e);
                    }
                },
            )
            .await
            .context("member")?;
            consumer.close();
            if let Some(e) = failed {
                return Err(e).context("write the ledger");
            }
        }
        BenchCommand::Scrape {
            target,
            metrics_url,
            broker_pid,
            cluster,
            groups,
            topics,
            queues,
            scrapes,
        } => {
            let r = bench::scrape_cost(&ScrapeConfig {
                namesrv: target.connect(),
                cluster,
                metrics_url,
                broker_pid,
                groups,
                topics,
                queues,
                scrapes,
            })
            .await
            .context("scrape benchmark")?;
            let line = |what: &str, s: &bench::ScrapeSample| {
                println!(
                    "{what}: scrape p50 {:.2} ms, max {:.2} ms, {} bytes, broker CPU {}",
                    s.p50.as_secs_f64() * 1e3,
                    s.max.as_secs_f64() * 1e3,
                    s.bytes,
                    s.cpu.map_or("not measured".into(), |c| format!(
                        "{:.2} ms per scrape",
                        c.as_secs_f64() * 1e3
                    ))
                );
            };
            line("before", &r.before);
            line(&format!("after {} (group, topic) rows", r.rows), &r.after);
            println!(
                "ratio after/before: wall {:.2}x{}",
                r.after.p50.as_secs_f64() / r.before.p50.as_secs_f64().max(1e-9),
                match (r.before.cpu, r.after.cpu) {
                    (Some(b), Some(a)) =>
                        format!(", CPU {:.2}x", a.as_secs_f64() / b.as_secs_f64().max(1e-9)),
                    _ => String::new(),
                }
            );
        }
    }
    Ok(())
}

pub async fn admin(cmd: AdminCommand) -> anyhow::Result<()> {
    match cmd {
        AdminCommand::Cluster { target } => {
            let admin = Admin::new(&target.connect())?;
            let info = admin.cluster_info().await?;
            println!(
                "{:<20} {:<20} {:<12} {:<6} address",
                "cluster", "broker", "zone", "id"
            );
            for (cluster, names) in &info.cluster_addr_table {
                for name in names {
                    if let Some(b) = info.broker_addr_table.get(name) {
                        let zone = b.zone_name.as_deref().unwrap_or("-");
                        for (id, addr) in &b.broker_addrs {
                            println!("{cluster:<20} {name:<20} {zone:<12} {id:<6} {addr}");
                        }
                    }
                }
            }
        }
        AdminCommand::Topics { target } => {
            let admin = Admin::new(&target.connect())?;
            println!(
                "{:<40} {:<12} {:<6} {:>12} {:>12}",
                "topic", "broker", "queue", "min", "max"
            );
            for topic in admin.topic_list().await? {
                let Ok(status) = admin.topic_status(&topic).await else {
                    continue;
                };
                for q in status {
                    println!(
                        "{topic:<40} {:<12} {:<6} {:>12} {:>12}",
                        q.queue.broker_name, q.queue.queue_id, q.min_offset, q.max_offset
                    );
                }
            }
        }
        AdminCommand::CreateTopic {
            target,
            topic,
            queues,
            cluster,
        } => {
            let admin = Admin::new(&target.connect())?;
            let brokers = admin
                .create_topic(&cluster, &TopicSpec::new(&topic, queues))
                .await?;
            println!(
                "created {topic} with {queues} queues on {}",
                brokers.join(", ")
            );
        }
        AdminCommand::BrokerStatus {
            broker_addr,
            output,
        } => {
            let client = conveyor_remoting::RemotingClient::new(Default::default());
            let table = runtime_info(&client, &broker_addr)
                .await
                .with_context(|| format!("GET_BROKER_RUNTIME_INFO from {broker_addr}"))?;
            let sorted = table;
            if output == "json" {
                println!("{}", serde_json::to_string_pretty(&sorted)?);
            } else {
                let width = sorted.keys().map(String::len).max().unwrap_or(0);
                for (k, v) in &sorted {
                    println!("{k:<width$} : {v}");
                }
            }
        }
        AdminCommand::Replication {
            controller,
            group,
            output,
        } => replication_status(&controller, &group, &output).await?,
        AdminCommand::Promote {
            controller,
            group,
            broker_id,
            immediate,
        } => {
            use conveyor_protocol::code::request_code as rc;
            use conveyor_protocol::command::RemotingCommand;
            let client = conveyor_remoting::RemotingClient::new(Default::default());
            let req = conveyor::controller::processor::elect_master_request(
                &group, broker_id, !immediate,
            );
            let mut info = ask_controller(&client, &controller, req).await?;
            // A hand-over completes on the master's next heartbeats.
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            while info.master != Some(broker_id) {
                if std::time::Instant::now() >= deadline {
                    anyhow::bail!(
                        "the switchover of {group} to broker {broker_id} did not complete \
                         (master: {:?}); see the master's log",
                        info.master
                    );
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                let req =
                    RemotingCommand::request(rc::CONTROLLER_GET_REPLICA_INFO, Default::default())
                        .with_ext("brokerName", &group);
                info = ask_controller(&client, &controller, req).await?;
            }
            println!(
                "group {group}: broker {} is master in epoch {}",
                info.master.map_or("none".into(), |m| m.to_string()),
                info.master_epoch
            );
        }
        AdminCommand::Drain {
            target,
            broker_name,
            undo,
            output,
        } => {
            let admin = Admin::new(&target.connect())?;
            let changed = admin.set_write_permission(&broker_name, undo).await?;
            if output == "json" {
                let doc: Vec<_> = changed
                    .iter()
                    .map(|(ns, n)| serde_json::json!({"nameServer": ns, "topics": n}))
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "brokerName": broker_name,
                        "writable": undo,
                        "nameServers": doc,
                    }))?
                );
            } else {
                let verb = if undo { "writable again" } else { "read-only" };
                for (ns, n) in &changed {
                    println!("{broker_name}: {n} topics {verb} in name server {ns}");
                }
            }
        }
        AdminCommand::ResetOffset {
            target,
            group,
            topic,
            to,
            output,
        } => {
            let to = match to.as_str() {
                "earliest" => ResetTo::Earliest,
                "latest" => ResetTo::Latest,
                t => ResetTo::Time(t.parse().with_context(|| {
                    format!("--to {t:?}: not earliest, latest or a time in ms since the epoch")
                })?),
            };
            let admin = Admin::new(&target.connect())?;
            let resets = admin.reset_offsets(&group, &topic, to).await?;
            if output == "json" {
                let doc: Vec<_> = resets
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "brokerName": r.queue.broker_name,
                            "queueId": r.queue.queue_id,
                            "before": r.before,
                            "after": r.after,
                        })
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&doc)?);
                return Ok(());
            }
            println!(
                "{:<12} {:<6} {:>14} {:>14}",
                "broker", "queue", "before", "after"
            );
            for r in &resets {
                println!(
                    "{:<12} {:<6} {:>14} {:>14}",
                    r.queue.broker_name,
                    r.queue.queue_id,
                    r.before.map_or("-".into(), |o| o.to_string()),
                    r.after
                );
            }
            println!("reset {} queues of {topic} for {group}", resets.len());
        }
        AdminCommand::Group {
            target,
            group,
            topic,
        } => {
            let admin = Admin::new(&target.connect())?;
            let p = admin.consumer_progress(&group, &topic).await?;
            println!(
                "{:<12} {:<6} {:>14} {:>14} {:>10}",
                "broker", "queue", "broker offset", "group offset", "backlog"
            );
            for q in &p.queues {
                println!(
                    "{:<12} {:<6} {:>14} {:>14} {:>10}",
                    q.queue.broker_name,
                    q.queue.queue_id,
                    q.broker_offset,
                    q.consumer_offset.map_or("-".into(), |o| o.to_string()),
                    q.diff
                );
            }
            println!("total backlog of {group} on {topic}: {}", p.total_diff);
        }
    }
    Ok(())
}
