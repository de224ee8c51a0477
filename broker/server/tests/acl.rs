//! ACL on (issue 25): each request family — send, pull, offsets, admin, end of transaction,
//! broker registration — from a client without credentials, with a wrong signature, and
//! from a user lacking the permission is refused with NO_PERMISSION and a remark, and changes
//! nothing; the permitted user succeeds. A user deleted from the users file loses access at
//! the next reload. (The real clients' signatures are checked by the compatibility suite.)
//!
//! This test binary's own clients sign as the cluster once the server starts (the process-wide
//! credentials a broker uses): the requests under test are written on a raw connection and
//! signed, or not, explicitly.

mod common;

use std::time::Duration;

use common::{pull_request, send_request, TestServer, DEADLINE};
use conveyor::acl::AclConfig;
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::acl::Credentials;

const USERS: &str = r#"
accounts:
  - accessKey: admin-user
    secretKey: admin-secret
    admin: true
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=PUB]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders=SUB]
    groupPerms: [workers=SUB]
"#;

fn admin() -> Credentials {
    Credentials::new("admin-user", "admin-secret")
}
fn producer() -> Credentials {
    Credentials::new("producer1", "producer-secret")
}
fn consumer() -> Credentials {
    Credentials::new("consumer1", "consumer-secret")
}

fn signed(mut req: RemotingCommand, by: &Credentials) -> RemotingCommand {
    by.sign(&mut req);
    req
}

async fn start(dir: &std::path::Path) -> TestServer {
    std::fs::write(dir.join("plain_acl.yml"), USERS).unwrap();
    std::fs::write(
        dir.join("cluster-secret"),
        "a-cluster-secret-of-some-length\n",
    )
    .unwrap();
    let (users_file, cluster_secret_file) = (dir.join("plain_acl.yml"), dir.join("cluster-secret"));
    TestServer::start_with(move |c| {
        c.acl = Some(AclConfig {
            users_file: users_file.clone(),
            cluster_secret_file: cluster_secret_file.clone(),
            reload_interval: Duration::from_millis(100),
        })
    })
    .await
}

/// Refused with NO_PERMISSION, the remark containing `why`.
fn assert_refused(answer: &RemotingCommand, why: &str) {
    assert_eq!(answer.code, resp::NO_PERMISSION, "{:?}", answer.remark);
    let remark = answer.remark.as_deref().unwrap_or("");
    assert!(remark.contains(why), "remark {remark:?} lacks {why:?}");
}

fn query_offset(group: &str, topic: &str) -> RemotingCommand {
    RemotingCommand::request(rc::QUERY_CONSUMER_OFFSET, Default::default())
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", 0)
}

fn update_offset(group: &str, topic: &str, offset: i64) -> RemotingCommand {
    RemotingCommand::request(rc::UPDATE_CONSUMER_OFFSET, Default::default())
        .with_ext("consumerGroup", group)
        .with_ext("topic", topic)
        .with_ext("queueId", 0)
        .with_ext("commitOffset", offset)
}

#[tokio::test]
async fn every_request_family_is_refused_without_permission_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path()).await;
    let mut conn = server.raw().await;
    // One function per family: as one async function the sequence's future overflows the
    // test thread's stack in a debug build.
    Box::pin(admin_requests(&mut conn)).await;
    Box::pin(sends(&server, &mut conn)).await;
    Box::pin(pulls_and_offsets(&mut conn)).await;
    Box::pin(broker_administration(&mut conn)).await;
    Box::pin(registration(&server)).await;
}

fn topic_config(t: &str) -> RemotingCommand {
    RemotingCommand::request(rc::GET_TOPIC_CONFIG, Default::default()).with_ext("topic", t)
}

async fn admin_requests(conn: &mut common::RawConn) {
    // Admin: creating a topic. Unsigned, wrongly signed, by a user: refused, not created.
    let create = |topic: &str| {
        RemotingCommand::request(rc::UPDATE_AND_CREATE_TOPIC, Default::default())
            .with_ext("topic", topic)
            .with_ext("readQueueNums", 1)
            .with_ext("writeQueueNums", 1)
            .with_ext("perm", 6)
            .with_ext("defaultTopic", "TBW102")
            .with_ext("topicFilterType", "SINGLE_TAG")
            .with_ext("topicSysFlag", 0)
            .with_ext("order", false)
    };
    assert_refused(&conn.request(create("Sneaky")).await, "not signed");
    let wrong = Credentials::new("admin-user", "not-the-secret");
    assert_refused(
        &conn.request(signed(create("Sneaky"), &wrong)).await,
        "check signature failed",
    );
    assert_refused(
        &conn.request(signed(create("Sneaky"), &producer())).await,
        "needs admin permission",
    );
    let unknown = Credentials::new("nobody-at-all", "whatever-secret");
    assert_refused(
        &conn.request(signed(create("Sneaky"), &unknown)).await,
        "no user with AccessKey nobody-at-all",
    );
    let r = conn.request(signed(topic_config("Sneaky"), &admin())).await;
    assert_ne!(r.code, resp::SUCCESS, "a refused create made the topic");
    for topic in ["Orders", "Payments"] {
        let r = conn.request(signed(create(topic), &admin())).await;
        assert_eq!(r.code, resp::SUCCESS, "{:?}", r.remark);
    }
}

async fn sends(server: &TestServer, conn: &mut common::RawConn) {
    // Send: unsigned, wrongly signed, to a topic the user may not write: refused, not stored.
    assert_refused(
        &conn.request(send_request("Orders", 0, "u")).await,
        "not signed",
    );
    let wrong = Credentials::new("producer1", "producer-secreT");
    assert_refused(
        &conn
            .request(signed(send_request("Orders", 0, "w"), &wrong))
            .await,
        "check signature failed",
    );
    assert_refused(
        &conn
            .request(signed(send_request("Payments", 0, "p"), &producer()))
            .await,
        "needs PUB on topic Payments",
    );
    assert_refused(
        &conn
            .request(signed(send_request("Orders", 0, "c"), &consumer()))
            .await,
        "needs PUB on topic Orders",
    );
    assert!(server.stored("Orders", 0).is_empty());
    assert!(server.stored("Payments", 0).is_empty());
    let sent = conn
        .request(signed(send_request("Orders", 0, "ok"), &producer()))
        .await;
    assert_eq!(sent.code, resp::SUCCESS, "{:?}", sent.remark);
    common::wait_until("the permitted send is stored", DEADLINE, || async {
        server.stored("Orders", 0).len() == 1
    })
    .await;
    assert!(server.stored("Payments", 0).is_empty());
}

async fn pulls_and_offsets(conn: &mut common::RawConn) {
    // Pull: the producer may not read; the consumer may, as its group only.
    assert_refused(
        &conn.request(pull_request("workers", "Orders", 0, 0)).await,
        "not signed",
    );
    assert_refused(
        &conn
            .request(signed(pull_request("workers", "Orders", 0, 0), &producer()))
            .await,
        "needs SUB on topic Orders",
    );
    assert_refused(
        &conn
            .request(signed(pull_request("others", "Orders", 0, 0), &consumer()))
            .await,
        "needs SUB as group others",
    );
    let pulled = conn
        .request(signed(pull_request("workers", "Orders", 0, 0), &consumer()))
        .await;
    assert_eq!(pulled.code, resp::SUCCESS, "{:?}", pulled.remark);

    // Offsets: a commit refused leaves the group's offset where it was.
    let committed = conn
        .request(signed(update_offset("workers", "Orders", 1), &consumer()))
        .await;
    assert_eq!(committed.code, resp::SUCCESS, "{:?}", committed.remark);
    assert_refused(
        &conn.request(update_offset("workers", "Orders", 0)).await,
        "not signed",
    );
    assert_refused(
        &conn
            .request(signed(update_offset("workers", "Orders", 0), &producer()))
            .await,
        "needs SUB",
    );
    let offset = conn
        .request(signed(query_offset("workers", "Orders"), &consumer()))
        .await;
    assert_eq!(offset.ext("offset"), Some("1"), "{offset:?}");
}

async fn broker_administration(conn: &mut common::RawConn) {
    // Admin on the broker: deleting a topic, resetting offsets, reading the configuration.
    let delete = RemotingCommand::request(rc::DELETE_TOPIC_IN_BROKER, Default::default())
        .with_ext("topic", "Orders");
    assert_refused(
        &conn.request(signed(delete.clone(), &consumer())).await,
        "needs admin permission",
    );
    let config = RemotingCommand::request(rc::GET_BROKER_CONFIG, Default::default());
    assert_refused(
        &conn.request(signed(config.clone(), &producer())).await,
        "needs admin permission",
    );
    assert_eq!(
        conn.request(signed(config, &admin())).await.code,
        resp::SUCCESS
    );
    assert_eq!(
        conn.request(signed(topic_config("Orders"), &admin()))
            .await
            .code,
        resp::SUCCESS,
        "a refused delete removed the topic"
    );

    // End of a transaction: checked against the prepared message's real topic, whatever
    // the request says.
    let end = RemotingCommand::request(rc::END_TRANSACTION, Default::default())
        .with_ext("producerGroup", "pg")
        .with_ext("tranStateTableOffset", 0)
        .with_ext("commitLogOffset", 0)
        .with_ext("commitOrRollback", 8)
        .with_ext("fromTransactionCheck", false)
        .with_ext("topic", "Orders");
    assert_refused(
        &conn.request(signed(end.clone(), &consumer())).await,
        "needs PUB on topic Orders",
    );
}

async fn registration(server: &TestServer) {
    // Broker registration on the name server: only the cluster secret, not even an admin.
    let mut ns = common::RawConn::connect(&server.namesrv()).await;
    let register = RemotingCommand::request(rc::REGISTER_BROKER, Default::default())
        .with_ext("brokerName", "broker-a")
        .with_ext("brokerAddr", "10.9.9.9:10911")
        .with_ext("clusterName", "DefaultCluster")
        .with_ext("haServerAddr", "10.9.9.9:10912")
        .with_ext("brokerId", 0);
    assert_refused(&ns.request(register.clone()).await, "not signed");
    assert_refused(
        &ns.request(signed(register, &admin())).await,
        "needs the cluster secret",
    );
    let route = server.admin().topic_route("Orders").await.unwrap();
    assert!(
        route
            .broker_datas
            .iter()
            .all(|b| b.master_addr() != Some("10.9.9.9:10911")),
        "a refused registration changed the route: {route:?}"
    );
}

#[tokio::test]
async fn a_deleted_user_loses_access_at_the_next_reload() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path()).await;
    server.create_topic("Orders", 1).await;
    let mut conn = server.raw().await;
    let sent = conn
        .request(signed(send_request("Orders", 0, "a"), &producer()))
        .await;
    assert_eq!(sent.code, resp::SUCCESS, "{:?}", sent.remark);

    let without = USERS.replace("  - accessKey: producer1", "  - accessKey: producer9");
    std::fs::write(tmp.path().join("plain_acl.yml"), without).unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let answer = conn
            .request(signed(send_request("Orders", 0, "b"), &producer()))
            .await;
        if answer.code == resp::NO_PERMISSION {
            assert_refused(&answer, "no user with AccessKey producer1");
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted user can still send"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends a slave's hello carrying `auth` to the replication port; the master's first frame.
async fn hello(server: &TestServer, auth: String) -> conveyor::ha::frame::Frame {
    use conveyor::ha::frame::{Frame, VERSION};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.running.as_ref().unwrap().replication_addr.unwrap();
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let frame = Frame::SlaveHello {
        version: VERSION,
        broker_name: server.broker().replication().broker_name().to_string(),
        broker_id: 1,
        max_offset: 0,
        epochs: vec![],
        auth,
    };
    s.write_all(&frame.encode()).await.unwrap();
    let len = tokio::time::timeout(DEADLINE, s.read_u32())
        .await
        .unwrap()
        .unwrap();
    let mut body = vec![0; len as usize];
    s.read_exact(&mut body).await.unwrap();
    Frame::decode(body.into()).unwrap()
}

#[tokio::test]
async fn the_replication_port_serves_only_slaves_that_know_the_cluster_secret() {
    use conveyor::ha::frame::Frame;
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path()).await;
    let name = server.broker().replication().broker_name().to_string();
    let now = conveyor_protocol::time::now_ms();
    match hello(&server, String::new()).await {
        Frame::Refuse { reason } => assert!(reason.contains("cluster secret"), "{reason}"),
        other => panic!("a slave without proof was served: {other:?}"),
    }
    let forged = conveyor::ha::auth::prove("not-the-cluster-secret", &name, 1, now);
    match hello(&server, forged).await {
        Frame::Refuse { reason } => assert!(reason.contains("does not match"), "{reason}"),
        other => panic!("a slave with a forged proof was served: {other:?}"),
    }
    let proof = conveyor::ha::auth::prove("a-cluster-secret-of-some-length", &name, 1, now);
    assert!(
        matches!(hello(&server, proof).await, Frame::MasterHello { .. }),
        "a member with the secret was refused"
    );
}

/// The request of each family, as a client of it would send it.
fn families_requests() -> Vec<(&'static str, RemotingCommand)> {
    let hb = r#"{"clientID":"c1","consumerDataSet":[{"groupName":"workers","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"topic":"Orders","subString":"*"}],"unitMode":false}],"producerDataSet":[]}"#;
    vec![
        ("send", send_request("Orders", 0, "x")),
        ("pull", pull_request("workers", "Orders", 0, 0)),
        ("offset query", query_offset("workers", "Orders")),
        ("offset commit", update_offset("workers", "Orders", 0)),
        (
            "heartbeat",
            RemotingCommand::request(rc::HEART_BEAT, Default::default())
                .with_body(hb.as_bytes().to_vec()),
        ),
        (
            "send back",
            RemotingCommand::request(rc::CONSUMER_SEND_MSG_BACK, Default::default())
                .with_ext("group", "workers")
                .with_ext("offset", 0)
                .with_ext("delayLevel", 0),
        ),
        (
            "end of transaction",
            RemotingCommand::request(rc::END_TRANSACTION, Default::default())
                .with_ext("producerGroup", "pg")
                .with_ext("tranStateTableOffset", 0)
                .with_ext("commitLogOffset", 0)
                .with_ext("commitOrRollback", 8),
        ),
        (
            "admin",
            RemotingCommand::request(rc::DELETE_TOPIC_IN_BROKER, Default::default())
                .with_ext("topic", "Orders"),
        ),
    ]
}

/// Every family, unsigned and wrongly signed (the right user, another secret), is refused by
/// the broker; registration likewise by the name server, and the controller's requests by a
/// controller with ACL on.
#[tokio::test]
async fn every_family_refuses_unsigned_and_wrongly_signed_requests() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path()).await;
    let mut conn = server.raw().await;
    let forged = Credentials::new("consumer1", "not-consumer-secret");
    for (family, req) in families_requests() {
        let r = conn.request(req.clone()).await;
        assert_eq!(
            r.code,
            resp::NO_PERMISSION,
            "{family} unsigned: {:?}",
            r.remark
        );
        let r = conn.request(signed(req, &forged)).await;
        assert_eq!(
            r.code,
            resp::NO_PERMISSION,
            "{family} forged: {:?}",
            r.remark
        );
        assert!(
            r.remark
                .as_deref()
                .unwrap_or("")
                .contains("check signature failed"),
            "{family}: {:?}",
            r.remark
        );
    }
    // Registration: a forged cluster signature.
    let mut ns = common::RawConn::connect(&server.namesrv()).await;
    let register = RemotingCommand::request(rc::REGISTER_BROKER, Default::default())
        .with_ext("brokerName", "broker-a")
        .with_ext("brokerAddr", "10.9.9.9:10911")
        .with_ext("clusterName", "DefaultCluster")
        .with_ext("brokerId", 0);
    let forged_cluster =
        Credentials::new(conveyor::acl::CLUSTER_ACCESS_KEY, "guessed-secret-123456");
    let r = ns.request(signed(register, &forged_cluster)).await;
    assert_eq!(r.code, resp::NO_PERMISSION, "{:?}", r.remark);

    // The controller: what brokers send needs the cluster secret, whoever else signs.
    let mut cfg = common::config(&tmp.path().join("controller"));
    cfg.role = conveyor::app::Role::Controller;
    cfg.acl = Some(AclConfig {
        users_file: tmp.path().join("plain_acl.yml"),
        cluster_secret_file: tmp.path().join("cluster-secret"),
        reload_interval: Duration::from_millis(100),
    });
    let controller = conveyor::app::start(cfg).await.expect("controller starts");
    let mut c = common::RawConn::connect(&controller.controller_addr.unwrap().to_string()).await;
    let hello = RemotingCommand::request(rc::CONTROLLER_REGISTER_BROKER, Default::default())
        .with_ext("clusterName", "DefaultCluster")
        .with_ext("brokerName", "broker-a")
        .with_ext("brokerId", 0)
        .with_ext("brokerAddress", "10.9.9.9:10911");
    for (who, req) in [
        ("unsigned", hello.clone()),
        ("an admin", signed(hello.clone(), &admin())),
        (
            "a forged cluster signature",
            signed(hello.clone(), &forged_cluster),
        ),
    ] {
        let r = c.request(req).await;
        assert_eq!(r.code, resp::NO_PERMISSION, "{who}: {:?}", r.remark);
    }
    let secret = std::fs::read_to_string(tmp.path().join("cluster-secret")).unwrap();
    let cluster = Credentials::new(conveyor::acl::CLUSTER_ACCESS_KEY, secret.trim());
    let r = c.request(signed(hello, &cluster)).await;
    assert_ne!(
        r.code,
        resp::NO_PERMISSION,
        "the cluster itself: {:?}",
        r.remark
    );
    controller.stop().await;
}
