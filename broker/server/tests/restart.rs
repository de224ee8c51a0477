//! State that must survive a whole-process restart (Running::stop, then start on the same data
//! directory): committed consumer offsets, messages and topic configurations.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_max_offset, TestServer, CLUSTER};
use conveyor_client::admin::TopicSpec;
use conveyor_client::consumer::PullOptions;
use conveyor_client::{Message, PullStatus};
use conveyor_protocol::route::perm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_messages_and_topics_survive_a_restart() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = TestServer::start_in(tmp.path()).await;
    let topic = "Durable";
    let queues = server.create_topic(topic, 3).await;
    // A second topic with non-default settings: 2 read / 5 write queues, read-only.
    let admin = server.admin();
    let odd = TopicSpec {
        topic: "OddTopic".into(),
        read_queue_nums: 2,
        write_queue_nums: 5,
        perm: perm::READ,
        order: false,
        attributes: None,
    };
    admin.create_topic(CLUSTER, &odd).await.expect("create");
    server.wait_route("OddTopic", 2).await;

    let producer = server.producer("PG_durable");
    let mut bodies: Vec<Vec<String>> = vec![Vec::new(); 3];
    for i in 0..12 {
        let q = &queues[i % 3];
        let body = format!("durable-{i}");
        let r = producer
            .send_to_queue(
                &Message::new(topic, body.clone()).with_key(format!("k{i}")),
                q,
            )
            .await
            .expect("send");
        assert_eq!(r.queue.queue_id, q.queue_id);
        bodies[i % 3].push(body);
    }

    let consumer = server.consumer("CG_durable");
    for q in &queues {
        wait_max_offset(&consumer, q, 4).await;
    }
    // Queue 0: explicit UPDATE_CONSUMER_OFFSET; queue 1: the COMMIT_OFFSET flag of a pull;
    // queue 2: never committed.
    consumer.commit_offset(&queues[0], 3).await.expect("commit");
    let r = consumer
        .pull_with(
            &queues[1],
            0,
            PullOptions {
                max_msgs: 32,
                commit_offset: Some(2),
                ..PullOptions::default()
            },
        )
        .await
        .expect("pull with commit");
    assert_eq!(r.status, PullStatus::Found, "{r:?} queues {queues:?}");
    assert_eq!(
        consumer.query_offset(&queues[0]).await.expect("q0"),
        Some(3)
    );
    assert_eq!(
        consumer.query_offset(&queues[1]).await.expect("q1"),
        Some(2)
    );
    // Never committed on a queue that still starts at 0: RocketMQ answers 0 (not 22) so that
    // a new group starts from the beginning.
    assert_eq!(
        consumer.query_offset(&queues[2]).await.expect("q2"),
        Some(0)
    );
    drop((producer, consumer, admin));

    server.restart().await;

    // Topic configs: the route is rebuilt from the persisted configs.
    let queues = server.wait_route(topic, 3).await;
    server.wait_route("OddTopic", 2).await;
    let admin = server.admin();
    let route = admin.topic_route("OddTopic").await.expect("route");
    let qd = &route.queue_datas[0];
    assert_eq!(
        (qd.read_queue_nums, qd.write_queue_nums, qd.perm),
        (2, 5, perm::READ),
        "topic config survives the restart"
    );

    // Offsets.
    let consumer = server.consumer("CG_durable");
    assert_eq!(
        consumer.query_offset(&queues[0]).await.expect("q0"),
        Some(3)
    );
    assert_eq!(
        consumer.query_offset(&queues[1]).await.expect("q1"),
        Some(2)
    );
    assert_eq!(
        consumer.query_offset(&queues[2]).await.expect("q2"),
        Some(0)
    );

    // Messages.
    for (q, want) in queues.iter().zip(&bodies) {
        let r = consumer.pull(q, 0, 32, Duration::ZERO).await.expect("pull");
        assert_eq!(r.status, PullStatus::Found);
        let got: Vec<String> = r
            .messages
            .iter()
            .map(|m| String::from_utf8_lossy(&m.body).into_owned())
            .collect();
        assert_eq!(&got, want, "queue {}", q.queue_id);
        assert_eq!(consumer.max_offset(q).await.expect("max"), 4);
    }

    // The store keeps working after the restart: offsets continue.
    let producer = server.producer("PG_durable");
    let r = producer
        .send_to_queue(&Message::new(topic, "after restart"), &queues[0])
        .await
        .expect("send after restart");
    assert_eq!(r.queue_offset, 4);
    wait_max_offset(&consumer, &queues[0], 5).await;
    // And commits after a restart persist across another one.
    consumer.commit_offset(&queues[2], 2).await.expect("commit");
    drop((producer, consumer, admin));
    server.restart().await;
    let queues = server.wait_route(topic, 3).await;
    let consumer = server.consumer("CG_durable");
    assert_eq!(
        consumer.query_offset(&queues[2]).await.expect("q2"),
        Some(2)
    );
    assert_eq!(
        consumer.query_offset(&queues[0]).await.expect("q0"),
        Some(3)
    );
    assert_eq!(consumer.max_offset(&queues[0]).await.expect("max"), 5);
    server.stop().await;
}

/// A graceful stop should not wait out the suspend timeout of pulls being held: RocketMQ
/// clients hold pulls for 15–30 s, longer than many orchestrators' stop grace periods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_is_not_delayed_by_held_pulls() {
    let mut server = TestServer::start().await;
    let q = server.create_topic("HeldAtStop", 1).await.remove(0);
    let consumer = Arc::new(server.consumer("CG_held"));
    let mut pull = {
        let consumer = consumer.clone();
        tokio::spawn(async move { consumer.pull(&q, 0, 32, Duration::from_secs(30)).await })
    };
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut pull)
            .await
            .is_err(),
        "the pull is held"
    );
    let running = server.running.take().expect("running");
    let started = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(45), running.stop()).await;
    let elapsed = started.elapsed();
    assert!(stopped.is_ok(), "Running::stop never finished");
    assert!(
        elapsed < Duration::from_secs(10),
        "Running::stop took {elapsed:?}: it waited for a pull held for 30 s"
    );
    pull.abort();
}

/// A power loss can cut the CommitLog below a consumer offset that was already persisted
/// (offsets are written on their own schedule). On start the broker pulls such offsets back to
/// the recovered queue end, as it does for delay/timer/transaction progress, so messages
/// written after the restart are delivered instead of being skipped (issue 9, defect 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_offsets_past_the_recovered_queue_end_are_pulled_back() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = TestServer::start_in(tmp.path()).await;
    let topic = "CutLog";
    let q = server.create_topic(topic, 1).await.remove(0);
    let producer = server.producer("PG_cut");
    for i in 0..3 {
        producer
            .send_to_queue(&Message::new(topic, format!("before-{i}")), &q)
            .await
            .expect("send");
    }
    let consumer = server.consumer("CG_cut");
    wait_max_offset(&consumer, &q, 3).await;
    consumer.commit_offset(&q, 3).await.expect("commit");
    drop((producer, consumer));
    server.stop().await;

    // What a power loss leaves when the offsets file reached the disk and the log's tail did
    // not: a saved offset (10) past the queue's recovered end (3).
    let offsets = tmp.path().join("config").join("consumerOffset.json");
    let saved = std::fs::read_to_string(&offsets).expect("offsets file");
    assert!(saved.contains("CutLog@CG_cut"), "{saved}");
    std::fs::write(&offsets, r#"{"offsetTable":{"CutLog@CG_cut":{"0":10}}}"#).expect("write");

    server.restart().await;
    let q = server.wait_route(topic, 1).await.remove(0);
    let consumer = server.consumer("CG_cut");
    assert_eq!(
        consumer.query_offset(&q).await.expect("query"),
        Some(3),
        "the saved offset is pulled back to the queue's end"
    );
    let producer = server.producer("PG_cut");
    producer
        .send_to_queue(&Message::new(topic, "after"), &q)
        .await
        .expect("send after restart");
    wait_max_offset(&consumer, &q, 4).await;
    let from = consumer
        .query_offset(&q)
        .await
        .expect("query")
        .expect("offset");
    let r = consumer
        .pull(&q, from, 32, Duration::ZERO)
        .await
        .expect("pull");
    assert_eq!(r.status, PullStatus::Found, "{r:?}");
    assert_eq!(&r.messages[0].body[..], b"after");
}

/// A deleted topic stays deleted across a restart: its ConsumeQueues go with it (as in
/// RocketMQ), so the broker's restore of topics whose config was not saved (issue 9) cannot
/// bring it back, and a new message to the same name starts the queue at offset 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_topic_stays_deleted_across_a_restart() {
    let mut server = TestServer::start().await;
    server.create_topic("Doomed", 1).await;
    let mut conn = server.raw().await;
    for i in 0..3 {
        let r = conn
            .request(common::send_request("Doomed", 0, format!("d{i}")))
            .await;
        assert_eq!(r.code, conveyor_protocol::code::response_code::SUCCESS);
    }
    let store = server.broker().store().clone();
    let deadline = Instant::now() + common::DEADLINE;
    while store.max_offset("Doomed", 0) < 3 {
        assert!(
            Instant::now() < deadline,
            "the messages were never dispatched"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(store);
    let delete = conveyor_protocol::command::RemotingCommand::request(
        conveyor_protocol::code::request_code::DELETE_TOPIC_IN_BROKER,
        Default::default(),
    )
    .with_ext("topic", "Doomed");
    let r = conn.request(delete).await;
    assert_eq!(
        r.code,
        conveyor_protocol::code::response_code::SUCCESS,
        "{r:?}"
    );
    assert!(
        !server.dir.join("consumequeue/Doomed").exists(),
        "its queues are deleted"
    );
    server.restart().await;
    assert!(
        server
            .broker()
            .store()
            .queues()
            .iter()
            .all(|(t, _)| t != "Doomed"),
        "the deleted topic's queues came back"
    );
    let mut conn = server.raw().await;
    let r = conn
        .request(common::pull_request("CG_doomed", "Doomed", 0, 0))
        .await;
    assert_eq!(
        r.code,
        conveyor_protocol::code::response_code::TOPIC_NOT_EXIST,
        "the deleted topic is back after a restart: {r:?}"
    );
}

/// mqadmin `updateKvConfig` / `updateOrderConf` / `deleteKvConfig`: the name server's KV
/// configuration survives its restart (RocketMQ's kvConfig.json), a deleted key stays deleted.
#[tokio::test]
async fn name_server_kv_configuration_survives_a_restart() {
    use common::RawConn;
    use conveyor_protocol::code::{request_code as rc, response_code as resp};
    use conveyor_protocol::command::RemotingCommand;
    let kv = |code, key: &str, value: Option<&str>| {
        let mut r = RemotingCommand::request(code, Default::default())
            .with_ext("namespace", "ORDER_TOPIC_CONFIG")
            .with_ext("key", key);
        if let Some(v) = value {
            r = r.with_ext("value", v);
        }
        r
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut server = TestServer::start_in(tmp.path()).await;
    let mut conn = RawConn::connect(&server.namesrv()).await;
    for (key, value) in [("Orders", "broker-a:4"), ("Gone", "broker-a:2")] {
        let r = conn.request(kv(rc::PUT_KV_CONFIG, key, Some(value))).await;
        assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    }
    let r = conn.request(kv(rc::DELETE_KV_CONFIG, "Gone", None)).await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    drop(conn);

    server.restart().await;
    let mut conn = RawConn::connect(&server.namesrv()).await;
    let r = conn.request(kv(rc::GET_KV_CONFIG, "Orders", None)).await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    assert_eq!(r.get_str("value").ok(), Some("broker-a:4"));
    let r = conn.request(kv(rc::GET_KV_CONFIG, "Gone", None)).await;
    assert_eq!(r.code, resp::QUERY_NOT_FOUND, "{:?}", r.remark);
}
