//! mqadmin `cleanUnusedTopic` (CLEAN_UNUSED_TOPIC) deletes the ConsumeQueues of topics missing
//! from the broker's topic table. A table restored from an older backup lacks the topics created
//! since: RocketMQ's cleanUnusedTopic would then delete their queues; Conveyor restores their
//! config from the stored queues when it starts, so the command keeps them and their messages
//! stay readable.

mod common;

use common::{send_request, wait_until, TestServer, DEADLINE};
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;

#[tokio::test]
async fn a_topic_missing_from_a_restored_table_comes_back_and_cleaning_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = TestServer::start_in(tmp.path()).await;
    for topic in ["Orphan", "Kept"] {
        server.create_topic(topic, 1).await;
        let mut conn = server.raw().await;
        let r = conn.request(send_request(topic, 0, "m")).await;
        assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    }
    let store = server.broker().store().clone();
    wait_until("both queues built", DEADLINE, || {
        let store = store.clone();
        async move { store.max_offset("Orphan", 0) == 1 && store.max_offset("Kept", 0) == 1 }
    })
    .await;
    drop(store);
    server.stop().await;

    let table = tmp.path().join("config").join("topics.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&table).unwrap()).unwrap();
    doc["topicConfigTable"]
        .as_object_mut()
        .unwrap()
        .remove("Orphan")
        .expect("Orphan was in the table");
    std::fs::write(&table, serde_json::to_vec(&doc).unwrap()).unwrap();
    server.restart().await;
    let broker = server.broker();
    assert_eq!(broker.store().max_offset("Orphan", 0), 1, "still on disk");

    let mut conn = server.raw().await;
    let r = conn
        .request(RemotingCommand::request(
            rc::CLEAN_UNUSED_TOPIC,
            Default::default(),
        ))
        .await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    for topic in ["Orphan", "Kept"] {
        assert_eq!(broker.store().max_offset(topic, 0), 1, "{topic}'s queue");
        assert_eq!(server.stored(topic, 0).len(), 1, "{topic} still reads");
    }
    let route = server.admin().topic_route("Orphan").await.expect("route");
    assert_eq!(route.queue_datas.len(), 1, "Orphan is routed again");
}
