//! A broker made read-only at run time (UPDATE_BROKER_CONFIG `brokerPermission`, what
//! `mqadmin updateBrokerConfig -k brokerPermission -v 4` sends, and how the operator drains
//! a broker group): sends are refused with NO_PERMISSION, routes show its topics read-only so
//! producers go elsewhere, pulls still serve what it holds; settings that cannot change at run
//! time are refused by name; write permission comes back the same way.

mod common;

use common::{pull_request, send_request, wait_until, TestServer, DEADLINE};
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;

fn update(body: &str) -> RemotingCommand {
    RemotingCommand::request(rc::UPDATE_BROKER_CONFIG, Default::default())
        .with_body(body.as_bytes().to_vec())
}

async fn routed_perm(server: &TestServer, topic: &str) -> Option<i32> {
    let route = server.admin().topic_route(topic).await.ok()?;
    route.queue_datas.first().map(|q| q.perm)
}

#[tokio::test]
async fn a_read_only_broker_refuses_sends_routes_read_only_and_still_serves_pulls() {
    let server = TestServer::start().await;
    server.create_topic("Drained", 2).await;
    let mut conn = server.raw().await;
    let sent = conn.request(send_request("Drained", 0, "before")).await;
    assert_eq!(sent.code, resp::SUCCESS, "{:?}", sent.remark);

    let r = conn.request(update("brokerPermission=4\n")).await;
    assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    let refused = conn.request(send_request("Drained", 0, "during")).await;
    assert_eq!(refused.code, resp::NO_PERMISSION);
    assert!(
        refused
            .remark
            .as_deref()
            .is_some_and(|r| r.contains("sending message is forbidden")),
        "{:?}",
        refused.remark
    );
    wait_until("the route shows the topic read-only", DEADLINE, || async {
        routed_perm(&server, "Drained").await == Some(4)
    })
    .await;
    let pulled = conn.request(pull_request("g", "Drained", 0, 0)).await;
    assert_eq!(pulled.code, resp::SUCCESS, "{:?}", pulled.remark);
    let config = conn
        .request(RemotingCommand::request(
            rc::GET_BROKER_CONFIG,
            Default::default(),
        ))
        .await;
    assert!(String::from_utf8_lossy(&config.body).contains("brokerPermission=4"));

    // Settings that only a restart changes are refused by name; bad values too.
    let r = conn
        .request(update("flushDiskType=SYNC_FLUSH\nbrokerPermission=6\n"))
        .await;
    assert_eq!(r.code, resp::NO_PERMISSION);
    assert!(r
        .remark
        .as_deref()
        .is_some_and(|m| m.contains("flushDiskType")));
    let r = conn.request(update("brokerPermission=9")).await;
    assert_eq!(r.code, resp::INVALID_PARAMETER, "{:?}", r.remark);
    let still = conn.request(send_request("Drained", 0, "still")).await;
    assert_eq!(still.code, resp::NO_PERMISSION, "nothing changed");

    let r = conn.request(update("brokerPermission=6")).await;
    assert_eq!(r.code, resp::SUCCESS);
    let after = conn.request(send_request("Drained", 0, "after")).await;
    assert_eq!(after.code, resp::SUCCESS, "{:?}", after.remark);
    wait_until("the route is writable again", DEADLINE, || async {
        routed_perm(&server, "Drained").await == Some(6)
    })
    .await;
}
