//! Auto-creation has limits (issue 9, defect 10): any new topic in a SEND and any new group
//! in a PULL or heartbeat used to be created, each rewriting and fsyncing a whole JSON file,
//! so one client could grow the tables without bound (past what a registration can carry,
//! with a ConsumeQueue per queue of each topic on disk). Now the broker auto-creates up to
//! a number of topics and groups, at a bounded rate, and answers the rest with a clear error;
//! an operator can still create topics explicitly.

mod common;

use common::{send_request, RawConn, TestServer};
use conveyor::broker::AutoCreateLimits;
use conveyor_protocol::code::response_code;
use conveyor_protocol::command::RemotingCommand;

fn pull_request(group: &str, topic: &str) -> RemotingCommand {
    common::pull_request(group, topic, 0, 0)
}

async fn send(conn: &mut RawConn, topic: &str) -> RemotingCommand {
    conn.request(send_request(topic, 0, "x")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_are_auto_created_up_to_the_limit_then_refused_with_a_remark() {
    let server = TestServer::start_with(|c| {
        c.broker.auto_create = AutoCreateLimits {
            max_topics: 20,
            ..AutoCreateLimits::default()
        };
    })
    .await;
    let mut conn = server.raw().await;
    let mut created = 0;
    let refused = loop {
        let r = send(&mut conn, &format!("Auto{created}")).await;
        if r.code != response_code::SUCCESS {
            break r;
        }
        created += 1;
        assert!(created <= 20, "more topics than the limit were created");
    };
    assert!(created > 0, "no topic was auto-created at all");
    assert_eq!(refused.code, response_code::TOPIC_NOT_EXIST, "{refused:?}");
    let remark = refused.remark.clone().unwrap_or_default();
    assert!(remark.contains("limit"), "{remark}");
    // Existing topics keep working, and an operator can still create one explicitly.
    assert_eq!(send(&mut conn, "Auto0").await.code, response_code::SUCCESS);
    server.create_topic("Explicit", 1).await;
    assert_eq!(
        send(&mut conn, "Explicit").await.code,
        response_code::SUCCESS
    );
    // Retry and dead-letter topics count too: a client cannot mint them past the limit.
    let r = send(&mut conn, "%RETRY%NoSuchGroup").await;
    assert_ne!(r.code, response_code::SUCCESS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_are_auto_created_up_to_the_limit_then_refused_with_a_remark() {
    let server = TestServer::start_with(|c| {
        c.broker.auto_create = AutoCreateLimits {
            max_groups: 5,
            ..AutoCreateLimits::default()
        };
    })
    .await;
    server.create_topic("Pulled", 1).await;
    let mut conn = server.raw().await;
    let mut created = 0;
    let refused = loop {
        let r = conn
            .request(pull_request(&format!("CG{created}"), "Pulled"))
            .await;
        if r.code == response_code::SUBSCRIPTION_GROUP_NOT_EXIST {
            break r;
        }
        created += 1;
        assert!(created <= 5, "more groups than the limit were created");
    };
    let remark = refused.remark.clone().unwrap_or_default();
    assert!(remark.contains("limit"), "{remark}");
    let r = conn.request(pull_request("CG0", "Pulled")).await;
    assert_ne!(r.code, response_code::SUBSCRIPTION_GROUP_NOT_EXIST, "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_creation_is_rate_limited() {
    let server = TestServer::start_with(|c| {
        c.broker.auto_create = AutoCreateLimits {
            burst: 3,
            // One more creation per thousand seconds: the test never sees a refill.
            per_second: 0.001,
            ..AutoCreateLimits::default()
        };
    })
    .await;
    let mut conn = server.raw().await;
    for i in 0..3 {
        let r = send(&mut conn, &format!("Rated{i}")).await;
        assert_eq!(r.code, response_code::SUCCESS, "{r:?}");
    }
    let r = send(&mut conn, "Rated3").await;
    assert_eq!(r.code, response_code::SYSTEM_BUSY, "{r:?}");
    assert!(r.remark.unwrap_or_default().contains("rate"));
}
