//! What the operator writes is what the broker reads: every CRD setting that reaches a broker
//! pod (names, ids, roles, name servers, flush and replication modes, every user override) is
//! rendered by the operator's builders, then loaded by the broker's own startup path (the pod's
//! container args parsed as `conveyor` parses them, then `conveyor::settings::build`), and the
//! resulting runtime configuration must be exactly what the CRD asked for.

use std::collections::BTreeMap;
use std::path::Path;

use clap::Parser;
use conveyor::app::{AppConfig, Role};
use conveyor::broker::BrokerConfig;
use conveyor::settings::{self, ServerArgs, SettingsError};
use conveyor_operator::builders::{
    broker_config_map, broker_settings, broker_statefulset, ConfigError, CONFIG_DIR,
};
use conveyor_operator::crd::{
    BrokerSpec, FlushMode, MessageQueueCluster, MessageQueueClusterSpec, NameServerSpec, Placement,
    ReplicationMode, ServiceExposure, StorageSpec,
};
use conveyor_store::StoreConfig;

/// The broker's command line, as the `conveyor` binary declares it.
#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Broker(ServerArgs),
}

/// Every `broker.<key>` / `store.<key>` a user may set (all keys of the model the operator does
/// not manage), with a non-default value.
fn every_override() -> BTreeMap<String, String> {
    [
        ("broker.auto-create-topic", "false"),
        ("broker.auto-create-subscription-group", "false"),
        ("broker.default-topic-queue-nums", "4"),
        ("broker.register-interval-ms", "15000"),
        ("broker.offset-persist-interval-ms", "2500"),
        ("broker.send-queue-wait-ms", "150"),
        ("broker.max-sends-in-flight", "5000"),
        ("broker.delay-levels", "\"1s 5s 10s\""),
        ("broker.timer-max-delay-ms", "3600000"),
        ("broker.transaction-timeout-ms", "7000"),
        ("broker.transaction-check-interval-ms", "20000"),
        ("broker.transaction-check-max", "5"),
        ("store.segment-size", "268435456"),
        ("store.max-message-size", "1048576"),
        ("store.retention-hours", "48"),
        ("store.disk-clean-ratio", "0.7"),
        ("store.disk-force-clean-ratio", "0.8"),
        ("store.disk-full-ratio", "0.95"),
        ("store.sync-flush-timeout-ms", "3000"),
        ("store.flush-interval-ms", "250"),
        ("store.flush-thorough-interval-ms", "5000"),
        ("replication.slave-timeout-ms", "2000"),
        ("replication.slave-ack", "\"flush\""),
        ("replication.metadata-sync-interval-ms", "5000"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn cluster(
    flush: FlushMode,
    replication: ReplicationMode,
    config: BTreeMap<String, String>,
) -> MessageQueueCluster {
    let mut mqc = MessageQueueCluster::new(
        "orders",
        MessageQueueClusterSpec {
            image: "localhost/conveyor:dev".into(),
            image_pull_policy: None,
            image_pull_secrets: vec![],
            name_server: NameServerSpec {
                replicas: 3,
                resources: None,
                liveness_probe: None,
                readiness_probe: None,
            },
            broker: BrokerSpec {
                groups: 2,
                replicas_per_group: 3,
                storage: StorageSpec {
                    size: "10Gi".into(),
                    storage_class_name: None,
                    delete_claim: false,
                },
                flush_mode: flush,
                replication_mode: replication,
                failover: Default::default(),
                resources: None,
                config,
                liveness_probe: None,
                readiness_probe: None,
            },
            placement: Placement::default(),
            service: ServiceExposure::default(),
            security: Default::default(),
            pod_template: Default::default(),
        },
    );
    mqc.metadata.namespace = Some("mq".into());
    mqc.metadata.uid = Some("uid".into());
    mqc
}

/// What the CRD asks of pod `ordinal` of group `group`, written out independently of the
/// operator's builders: the broker's defaults except where the spec says otherwise.
fn expected(mqc: &MessageQueueCluster, group: i32, ordinal: i32, pod_ip: &str) -> AppConfig {
    let spec = &mqc.spec.broker;
    let o = |k: &str| spec.config.get(k).map(String::as_str);
    let num = |k: &str| o(k).map(|v| v.parse::<u64>().unwrap());
    let ratio = |k: &str| o(k).map(|v| v.parse::<f64>().unwrap());
    let d = BrokerConfig::default();
    let broker = BrokerConfig {
        cluster_name: "orders".into(),
        broker_name: format!("orders-broker-{group}"),
        broker_id: ordinal.into(),
        advertised_addr: format!("{pod_ip}:10911"),
        namesrv_addrs: (0..3)
            .map(|i| format!("orders-namesrv-{i}.orders-namesrv-headless.mq.svc:9876"))
            .collect(),
        auto_create_topic: o("broker.auto-create-topic")
            .map_or(d.auto_create_topic, |v| v == "true"),
        auto_create_subscription_group: o("broker.auto-create-subscription-group")
            .map_or(d.auto_create_subscription_group, |v| v == "true"),
        default_topic_queue_nums: num("broker.default-topic-queue-nums")
            .map_or(d.default_topic_queue_nums, |v| v as i32),
        auto_create: conveyor::broker::AutoCreateLimits {
            max_topics: num("broker.auto-create-max-topics")
                .map_or(d.auto_create.max_topics, |v| v as usize),
            max_groups: num("broker.auto-create-max-groups")
                .map_or(d.auto_create.max_groups, |v| v as usize),
            burst: num("broker.auto-create-burst").map_or(d.auto_create.burst, |v| v as u32),
            per_second: ratio("broker.auto-create-per-second").unwrap_or(d.auto_create.per_second),
        },
        register_interval_ms: num("broker.register-interval-ms").unwrap_or(d.register_interval_ms),
        offset_persist_interval_ms: num("broker.offset-persist-interval-ms")
            .unwrap_or(d.offset_persist_interval_ms),
        send_queue_wait_ms: num("broker.send-queue-wait-ms").unwrap_or(d.send_queue_wait_ms),
        max_sends_in_flight: num("broker.max-sends-in-flight")
            .map_or(d.max_sends_in_flight, |v| v as usize),
        delay_levels: o("broker.delay-levels")
            .map_or(d.delay_levels, |v| v.trim_matches('"').to_string()),
        timer_max_delay_ms: num("broker.timer-max-delay-ms").unwrap_or(d.timer_max_delay_ms),
        transaction_timeout_ms: num("broker.transaction-timeout-ms")
            .unwrap_or(d.transaction_timeout_ms),
        transaction_check_interval_ms: num("broker.transaction-check-interval-ms")
            .unwrap_or(d.transaction_check_interval_ms),
        transaction_check_max: num("broker.transaction-check-max")
            .map_or(d.transaction_check_max, |v| v as u32),
        slave_read_enable: o("broker.slave-read-enable")
            .map_or(d.slave_read_enable, |v| v == "true"),
        metrics_per_queue: o("broker.metrics-per-queue")
            .map_or(d.metrics_per_queue, |v| v == "true"),
        access_message_in_memory_max_ratio: num("broker.access-message-in-memory-max-ratio")
            .unwrap_or(d.access_message_in_memory_max_ratio),
        // The node's zone, from the file the operator's annotation fills (a flag).
        zone: conveyor::broker::zone::ZoneSource {
            fixed: o("broker.zone").map(|v| v.trim_matches('"').to_string()),
            file: Some("/var/run/conveyor/zone".into()),
        },
        replication: {
            let role = match (ordinal, spec.replication_mode) {
                (0, ReplicationMode::Sync) => conveyor_settings::BrokerRole::SyncMaster,
                (0, ReplicationMode::Async) => conveyor_settings::BrokerRole::AsyncMaster,
                _ => conveyor_settings::BrokerRole::Slave,
            };
            let d = conveyor::ha::ReplicationConfig::default();
            conveyor::ha::ReplicationConfig {
                role,
                // A SYNC_MASTER waits for every replica of its group.
                in_sync_replicas: if role == conveyor_settings::BrokerRole::SyncMaster {
                    spec.replicas_per_group as usize
                } else {
                    d.in_sync_replicas
                },
                slave_timeout_ms: num("replication.slave-timeout-ms").unwrap_or(d.slave_timeout_ms),
                slave_ack: match o("replication.slave-ack") {
                    Some("\"flush\"") => conveyor_settings::SlaveAck::Flush,
                    _ => d.slave_ack,
                },
                metadata_sync_interval_ms: num("replication.metadata-sync-interval-ms")
                    .unwrap_or(d.metadata_sync_interval_ms),
                ..d
            }
        },
    };
    let d = StoreConfig::new("/var/lib/conveyor");
    let store = StoreConfig {
        flush_mode: match spec.flush_mode {
            FlushMode::Sync => conveyor_store::FlushMode::Sync,
            FlushMode::Async => conveyor_store::FlushMode::Async,
        },
        commit_log_segment_size: num("store.segment-size").unwrap_or(d.commit_log_segment_size),
        max_message_size: num("store.max-message-size").map_or(d.max_message_size, |v| v as usize),
        retention: num("store.retention-hours")
            .map_or(d.retention, |h| std::time::Duration::from_secs(h * 3600)),
        disk_clean_ratio: ratio("store.disk-clean-ratio").unwrap_or(d.disk_clean_ratio),
        disk_force_clean_ratio: ratio("store.disk-force-clean-ratio")
            .unwrap_or(d.disk_force_clean_ratio),
        disk_full_ratio: ratio("store.disk-full-ratio").unwrap_or(d.disk_full_ratio),
        sync_flush_timeout: num("store.sync-flush-timeout-ms")
            .map_or(d.sync_flush_timeout, std::time::Duration::from_millis),
        flush_interval: num("store.flush-interval-ms")
            .map_or(d.flush_interval, std::time::Duration::from_millis),
        flush_thorough_interval: num("store.flush-thorough-interval-ms")
            .map_or(d.flush_thorough_interval, std::time::Duration::from_millis),
        ..d
    };
    AppConfig {
        role: Role::Broker,
        controller_listen: "0.0.0.0:9878".parse().unwrap(),
        controller: conveyor::controller::ControllerConfig::default(),
        group_endpoints: Vec::new(),
        namesrv_listen: "0.0.0.0:9876".parse().unwrap(),
        broker_listen: "0.0.0.0:10911".parse().unwrap(),
        replication_listen: "0.0.0.0:10912".parse().unwrap(),
        http_listen: Some("0.0.0.0:8080".parse().unwrap()),
        http_resource_labels: true,
        grpc_listen: Some("0.0.0.0:8081".parse().unwrap()),
        grpc: conveyor::grpc::GrpcConfig::default(),
        tls: conveyor::tls::TlsConfig::default(),
        acl: None,
        broker,
        store,
        limits: conveyor::remoting::ServeLimits::default(),
    }
}

/// Starts pod `ordinal` of `group` the way Kubernetes would: the ConfigMap's files in a
/// directory standing in for the mount, `$(POD_NAME)`/`$(POD_IP)` expanded in the container
/// args, the args parsed by the broker's CLI and loaded by `settings::build`.
fn load_as_the_pod(
    mqc: &MessageQueueCluster,
    group: i32,
    ordinal: i32,
    pod_ip: &str,
    mount: &Path,
) -> Result<(AppConfig, conveyor_settings::Settings), SettingsError> {
    let cm = broker_config_map(
        mqc,
        group,
        &conveyor_operator::builders::OperatorEnv::default(),
    )
    .expect("renders");
    for (file, text) in cm.data.as_ref().unwrap() {
        std::fs::write(mount.join(file), text).unwrap();
    }
    let pod = format!("orders-broker-{group}-{ordinal}");
    let sts = broker_statefulset(
        mqc,
        group,
        &cm,
        &conveyor_operator::builders::OperatorEnv::default(),
    );
    let container = &sts.spec.unwrap().template.spec.unwrap().containers[0];
    let args = container.args.clone().unwrap().into_iter().map(|a| {
        a.replace("$(POD_NAME)", &pod)
            .replace("$(POD_IP)", pod_ip)
            .replace(CONFIG_DIR, mount.to_str().unwrap())
    });
    let cli = Cli::try_parse_from(std::iter::once("conveyor".to_string()).chain(args))
        .expect("the broker accepts the operator's args");
    let Command::Broker(args) = cli.command;
    let file = settings::load_file(args.config.as_deref().unwrap())?;
    Ok((settings::build(Role::Broker, &args)?, file))
}

#[test]
fn every_crd_setting_reaches_the_broker_runtime_config() {
    let mount = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for flush in [FlushMode::Sync, FlushMode::Async] {
        for replication in [ReplicationMode::Sync, ReplicationMode::Async] {
            for overrides in [BTreeMap::new(), every_override()] {
                let mqc = cluster(flush, replication, overrides);
                for group in 0..mqc.spec.broker.groups {
                    for ordinal in 0..mqc.spec.broker.replicas_per_group {
                        let ip = format!("10.1.{group}.{ordinal}");
                        let (got, file) = load_as_the_pod(&mqc, group, ordinal, &ip, mount.path())
                            .unwrap_or_else(|e| panic!("the broker refuses its file: {e}"));
                        let want = expected(&mqc, group, ordinal, &ip);
                        assert_eq!(
                            format!("{got:#?}"),
                            format!("{want:#?}"),
                            "group {group} ordinal {ordinal}, {flush:?} flush, {replication:?} replication"
                        );
                        let role = match (ordinal, replication) {
                            (0, ReplicationMode::Sync) => conveyor_settings::BrokerRole::SyncMaster,
                            (0, ReplicationMode::Async) => {
                                conveyor_settings::BrokerRole::AsyncMaster
                            }
                            _ => conveyor_settings::BrokerRole::Slave,
                        };
                        assert_eq!(file.broker.broker_role, Some(role));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2 * 2 * 3);
}

#[test]
fn the_operators_model_is_the_brokers_file() {
    // The settings the operator builds serialise to exactly what the broker's loader parses.
    let mqc = cluster(FlushMode::Sync, ReplicationMode::Sync, every_override());
    let mount = tempfile::tempdir().unwrap();
    let (_, file) = load_as_the_pod(&mqc, 1, 2, "10.0.0.1", mount.path()).unwrap();
    assert_eq!(
        file,
        broker_settings(
            &mqc,
            1,
            2,
            &conveyor_operator::builders::OperatorEnv::default()
        )
        .unwrap()
    );
}

#[test]
fn unknown_keys_are_refused_by_operator_and_broker() {
    for (key, section, name) in [
        ("broker.auto-create-topics", "broker", "auto-create-topics"),
        ("store.retention-days", "store", "retention-days"),
    ] {
        // The operator will not render it...
        let mut config = BTreeMap::new();
        config.insert(key.to_string(), "3".to_string());
        let mqc = cluster(FlushMode::Async, ReplicationMode::Async, config);
        let err = broker_config_map(
            &mqc,
            0,
            &conveyor_operator::builders::OperatorEnv::default(),
        )
        .unwrap_err();
        assert!(
            matches!(err, ConfigError::UnknownKey { key: ref k, .. } if k == key),
            "{err}"
        );
        assert!(err.to_string().contains(key), "{err}");

        // ...and the broker will not start with it written into its file by hand.
        let mqc = cluster(FlushMode::Async, ReplicationMode::Async, BTreeMap::new());
        let cm = broker_config_map(
            &mqc,
            0,
            &conveyor_operator::builders::OperatorEnv::default(),
        )
        .unwrap();
        let text = &cm.data.as_ref().unwrap()["orders-broker-0-0.toml"];
        let needle = format!("[{section}]\n");
        let edited = text.replacen(&needle, &format!("{needle}{name} = 3\n"), 1);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orders-broker-0-0.toml");
        std::fs::write(&path, edited).unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            ..Default::default()
        };
        let err = settings::build(Role::Broker, &args)
            .unwrap_err()
            .to_string();
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(&format!("[{section}] {name}")), "{err}");
        assert!(err.contains(&format!("unknown field `{name}`")), "{err}");
    }
}
