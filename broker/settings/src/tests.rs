//! Unit tests of the model: parsing, unknown keys, layering, serialisation.

use super::*;

#[test]
fn a_full_file_parses_into_typed_sections() {
    let s = Settings::from_toml(
        r#"
[namesrv]
listen = "0.0.0.0:19876"
[broker]
listen = "0.0.0.0:20911"
broker-name = "b"
broker-role = "SLAVE"
namesrv-addrs = ["a:9876", "b:9876"]
auto-create-topic = false
[store]
data-dir = "/d"
flush-mode = "sync"
disk-full-ratio = 0.95
[http]
listen = "off"
"#,
    )
    .unwrap();
    assert_eq!(s.namesrv.listen.unwrap().port(), 19876);
    assert_eq!(s.broker.listen.unwrap().port(), 20911);
    assert_eq!(s.broker.broker_name.as_deref(), Some("b"));
    assert_eq!(s.broker.broker_role, Some(BrokerRole::Slave));
    assert_eq!(
        s.broker.namesrv_addrs,
        Some(vec!["a:9876".to_string(), "b:9876".to_string()])
    );
    assert_eq!(s.broker.auto_create_topic, Some(false));
    assert_eq!(s.broker.cluster_name, None);
    assert_eq!(
        s.store.data_dir.as_deref(),
        Some(std::path::Path::new("/d"))
    );
    assert_eq!(s.store.flush_mode, Some(FlushMode::Sync));
    assert_eq!(s.store.disk_full_ratio, Some(0.95));
    assert_eq!(s.http.listen.as_deref(), Some("off"));
}

#[test]
fn unknown_keys_are_refused_with_section_key_and_line() {
    let err = Settings::from_toml("[broker]\nbroker-name = \"b\"\nbrokr-id = 1\n").unwrap_err();
    assert_eq!(err.section(), Some("broker"));
    assert_eq!(err.key(), Some("brokr-id"));
    assert_eq!(err.line(), Some(3));
    let text = err.to_string();
    assert!(text.starts_with("[broker] brokr-id (line 3): "), "{text}");
    assert!(text.contains("unknown field `brokr-id`"), "{text}");

    let err = Settings::from_toml("[store]\ndata-dir = \"/d\"\nretention = 3\n").unwrap_err();
    assert_eq!(
        (err.section(), err.key()),
        (Some("store"), Some("retention"))
    );
    assert!(
        err.to_string().contains("unknown field `retention`"),
        "{err}"
    );

    let err = Settings::from_toml("[http]\nport = 1\n").unwrap_err();
    assert_eq!((err.section(), err.key()), (Some("http"), Some("port")));
    let err = Settings::from_toml("[namesrv]\nlisten-addr = 1\n").unwrap_err();
    assert_eq!(
        (err.section(), err.key()),
        (Some("namesrv"), Some("listen-addr"))
    );

    let err = Settings::from_toml("[brokers]\nlisten = \"0.0.0.0:1\"\n").unwrap_err();
    assert_eq!((err.section(), err.key()), (None, Some("brokers")));
    assert!(err.to_string().contains("unknown section"), "{err}");
}

#[test]
fn bad_values_name_their_key() {
    let err = Settings::from_toml("[store]\nflush-mode = \"sometimes\"\n").unwrap_err();
    assert_eq!(
        (err.section(), err.key()),
        (Some("store"), Some("flush-mode"))
    );
    assert_eq!(err.line(), Some(2));
    let err = Settings::from_toml("[broker]\nbroker-id = \"one\"\n").unwrap_err();
    assert_eq!(
        (err.section(), err.key()),
        (Some("broker"), Some("broker-id"))
    );
    let err = Settings::from_toml("[broker]\nlisten = \"nowhere\"\n").unwrap_err();
    assert_eq!((err.section(), err.key()), (Some("broker"), Some("listen")));
    let err = Settings::from_toml("[broker\n").unwrap_err();
    assert_eq!((err.section(), err.key()), (None, None));
    assert_eq!(err.line(), Some(1));
}

#[test]
fn or_prefers_the_higher_layer_key_by_key() {
    let high = Settings {
        broker: BrokerSection {
            broker_name: Some("flag".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let low = Settings::from_toml(
        "[broker]\nbroker-name = \"file\"\ncluster-name = \"c\"\n[store]\nsegment-size = 1024\n",
    )
    .unwrap();
    let s = high.or(low);
    assert_eq!(s.broker.broker_name.as_deref(), Some("flag"));
    assert_eq!(s.broker.cluster_name.as_deref(), Some("c"));
    assert_eq!(s.store.segment_size, Some(1024));
    assert!(Settings::default().is_empty());
    assert!(!s.is_empty());
}

#[test]
fn serialisation_writes_set_keys_in_order_and_round_trips() {
    let s = Settings {
        broker: BrokerSection {
            listen: Some("0.0.0.0:10911".parse().unwrap()),
            cluster_name: Some("orders".into()),
            broker_id: Some(1),
            broker_role: Some(BrokerRole::Slave),
            namesrv_addrs: Some(vec!["a:9876".into(), "b:9876".into()]),
            ..Default::default()
        },
        store: StoreSection {
            flush_mode: Some(FlushMode::Async),
            disk_clean_ratio: Some(0.5),
            ..Default::default()
        },
        ..Default::default()
    };
    let text = s.to_toml();
    assert_eq!(
        text,
        r#"[broker]
listen = "0.0.0.0:10911"
cluster-name = "orders"
broker-id = 1
broker-role = "SLAVE"
namesrv-addrs = ["a:9876", "b:9876"]

[store]
flush-mode = "async"
disk-clean-ratio = 0.5
"#
    );
    assert_eq!(Settings::from_toml(&text).unwrap(), s);
    assert_eq!(Settings::default().to_toml(), "");
}
