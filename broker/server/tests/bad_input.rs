//! Bad input over raw TCP: unknown codes, missing or malformed header fields, garbage frames,
//! refused topics and oversized messages. A bad request gets an error response with a remark
//! and leaves the connection usable; a bad frame closes only its own connection. A proptest
//! feeds arbitrary frames and checks the server answers a well-formed one (or closes the
//! connection only after a malformed one), and keeps serving.

mod common;

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::{
    opaque, send_header, send_request, wait_max_offset, RawConn, Read, TestServer, DEADLINE,
};
use conveyor_client::{Message, PullStatus, SendStatus};
use conveyor_protocol::code::{request_code, response_code, SerializeType};
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::frame::FrameCodec;
use conveyor_protocol::message::decode_records;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rand::{Rng, SeedableRng};

const UNKNOWN_CODE: i32 = 99_999;

fn pull_request(topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    common::pull_request("CG_raw", topic, queue_id, offset)
}

fn max_offset_request(topic: &str, queue_id: i32) -> RemotingCommand {
    RemotingCommand::request(request_code::GET_MAX_OFFSET, ExtFields::new())
        .with_ext("topic", topic)
        .with_ext("queueId", queue_id)
}

fn remark(r: &RemotingCommand) -> &str {
    r.remark.as_deref().unwrap_or("")
}

/// A raw SEND then PULL of that message on `conn`.
async fn raw_send_and_pull(conn: &mut RawConn, topic: &str, body: &str) {
    let r = conn.request(send_request(topic, 0, body.to_string())).await;
    assert_eq!(r.code, response_code::SUCCESS, "send: {:?}", r.remark);
    let offset: i64 = r.get_i64("queueOffset").expect("queueOffset");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let p = conn.request(pull_request(topic, 0, offset)).await;
        if p.code == response_code::SUCCESS {
            let msgs = decode_records(&p.body).expect("records");
            assert_eq!(msgs[0].body, body.as_bytes());
            return;
        }
        assert_eq!(
            p.code,
            response_code::PULL_NOT_FOUND,
            "pull: {:?}",
            p.remark
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "message never visible"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_code_gets_code_3_with_a_remark() {
    let mut server = TestServer::start().await;
    for addr in [server.broker_addr(), server.namesrv()] {
        let mut conn = RawConn::connect(&addr).await;
        let r = conn
            .request(RemotingCommand::request(UNKNOWN_CODE, ExtFields::new()))
            .await;
        assert!(r.is_response());
        assert_eq!(r.code, response_code::REQUEST_CODE_NOT_SUPPORTED, "{addr}");
        assert!(remark(&r).contains("99999"), "remark: {:?}", r.remark);
        // Still usable.
        let again = conn
            .request(RemotingCommand::request(UNKNOWN_CODE, ExtFields::new()))
            .await;
        assert_eq!(again.code, response_code::REQUEST_CODE_NOT_SUPPORTED);
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_malformed_header_fields_are_named_and_the_connection_survives() {
    let mut server = TestServer::start().await;
    server.create_topic("RawTopic", 1).await;
    let mut conn = RawConn::connect(&server.broker_addr()).await;

    // SEND_MESSAGE_V2 without `b` (the topic).
    let mut req = send_request("RawTopic", 0, "x");
    req.ext_fields.remove("b");
    let r = conn.request(req).await;
    assert_ne!(r.code, response_code::SUCCESS);
    assert_eq!(r.code, response_code::INVALID_PARAMETER);
    assert!(
        remark(&r).contains("<b>"),
        "remark names the field: {:?}",
        r.remark
    );

    // A non-numeric queue id `e`.
    let mut req = send_request("RawTopic", 0, "x");
    req.ext_fields.insert("e".into(), "zero".into());
    let r = conn.request(req).await;
    assert_eq!(r.code, response_code::INVALID_PARAMETER);
    assert!(remark(&r).contains("<e>"), "remark: {:?}", r.remark);

    // PULL without queueOffset.
    let mut req = pull_request("RawTopic", 0, 0);
    req.ext_fields.remove("queueOffset");
    let r = conn.request(req).await;
    assert_eq!(r.code, response_code::INVALID_PARAMETER);
    assert!(remark(&r).contains("queueOffset"), "remark: {:?}", r.remark);

    // The same connection still works.
    raw_send_and_pull(&mut conn, "RawTopic", "after bad headers").await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_get_their_codes() {
    let mut server = TestServer::start().await;
    server.create_topic("RawTopic", 1).await;
    let mut conn = RawConn::connect(&server.broker_addr()).await;

    let r = conn.request(pull_request("NoSuchTopic", 0, 0)).await;
    assert_eq!(r.code, response_code::TOPIC_NOT_EXIST, "{:?}", r.remark);
    assert!(remark(&r).contains("NoSuchTopic"), "{:?}", r.remark);

    let r = conn
        .request(send_request("SCHEDULE_TOPIC_XXXX", 0, "sneaky"))
        .await;
    assert_eq!(r.code, response_code::NO_PERMISSION, "{:?}", r.remark);
    assert!(!remark(&r).is_empty());

    for bad in ["bad topic!", "topic/with/slashes", &"x".repeat(128), ""] {
        let r = conn.request(send_request(bad, 0, "x")).await;
        assert_ne!(r.code, response_code::SUCCESS, "topic {bad:?} accepted");
        assert!(
            matches!(
                r.code,
                response_code::INVALID_PARAMETER | response_code::MESSAGE_ILLEGAL
            ),
            "topic {bad:?}: code {} {:?}",
            r.code,
            r.remark
        );
        assert!(
            !remark(&r).is_empty(),
            "topic {bad:?} refused without a remark"
        );
    }

    // Queue id beyond the topic's queues.
    let r = conn.request(send_request("RawTopic", 7, "x")).await;
    assert_eq!(r.code, response_code::INVALID_PARAMETER, "{:?}", r.remark);

    // Body above the store's max message size (256 KiB for StoreConfig::small).
    let big = vec![b'z'; 300 << 10];
    let r = conn.request(send_request("RawTopic", 0, big)).await;
    assert_eq!(r.code, response_code::MESSAGE_ILLEGAL, "{:?}", r.remark);
    assert!(!remark(&r).is_empty());
    // Properties over RocketMQ's 32,767-byte limit: refused before they are decoded.
    let mut h = send_header("RawTopic", 0);
    h.properties = format!("KEYS\u{1}{}\u{2}", "k".repeat(40_000));
    let req =
        RemotingCommand::request(request_code::SEND_MESSAGE_V2, h.to_ext_fields()).with_body("x");
    let r = conn.request(req).await;
    assert_eq!(r.code, response_code::MESSAGE_ILLEGAL, "{:?}", r.remark);
    assert!(remark(&r).contains("properties"), "{:?}", r.remark);
    // The same through the client: not retried, code 13.
    let producer = server.producer("PG_big");
    let err = producer
        .send(&Message::new("RawTopic", vec![b'z'; 300 << 10]))
        .await
        .expect_err("oversized message refused");
    assert_eq!(err.code(), Some(response_code::MESSAGE_ILLEGAL), "{err}");

    // Nothing above was stored, and the connection is still fine.
    let r = conn.request(max_offset_request("RawTopic", 0)).await;
    assert_eq!(r.get_i64("offset").expect("offset"), 0);
    raw_send_and_pull(&mut conn, "RawTopic", "still fine").await;
    server.stop().await;
}

/// Garbage that must make the server close the connection, by name.
fn garbage_frames() -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut random = vec![0u8; 512];
    rng.fill(&mut random[..]);
    let with_prefix = |type_byte: u8, header: &[u8]| {
        let mut b = BytesMut::new();
        b.put_i32(4 + header.len() as i32);
        b.put_u32(u32::from(type_byte) << 24 | header.len() as u32);
        b.put_slice(header);
        b.to_vec()
    };
    let mut out = vec![
        (
            "http request",
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        ),
        ("negative length", vec![0xFF; 32]),
        ("length below 4", [0u8, 0, 0, 2, 1, 2, 3, 4].to_vec()),
        ("length of 32 MiB", {
            let mut b = (32i32 << 20).to_be_bytes().to_vec();
            b.extend_from_slice(&[0; 64]);
            b
        }),
        ("one byte over 16 MiB", {
            // length excludes its own 4 bytes: total = 16 MiB + 1.
            let mut b = ((16i32 << 20) - 3).to_be_bytes().to_vec();
            b.extend_from_slice(&[0; 64]);
            b
        }),
        ("header length larger than the frame", {
            let mut b = BytesMut::new();
            b.put_i32(12);
            b.put_u32(1000);
            b.put_slice(&[b'{'; 8]);
            b.to_vec()
        }),
        ("unknown serialize type", with_prefix(0x42, b"{}")),
        (
            "JSON header that is not an object",
            with_prefix(0, b"[1,2,3]"),
        ),
        ("random JSON header", with_prefix(0, &random[..200])),
        ("random binary header", with_prefix(1, &random[200..400])),
    ];
    // Fully random bytes behind a prefix that declares exactly their length, so the server
    // has the whole frame and must judge it (type byte forced to an unknown value).
    let mut r = random.clone();
    r[..4].copy_from_slice(&(508i32).to_be_bytes());
    r[4] = 0x99;
    out.push(("random bytes", r));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_frames_close_only_their_own_connection() {
    let mut server = TestServer::start().await;
    let topic = "Bystander";
    let q = server.create_topic(topic, 1).await.remove(0);
    // Bystanders connected before the garbage: a raw connection and the client.
    let mut before = RawConn::connect(&server.broker_addr()).await;
    let producer = server.producer("PG_bystander");
    let consumer = server.consumer("CG_bystander");
    let first = producer
        .send(&Message::new(topic, "before"))
        .await
        .expect("send before");
    assert_eq!(first.status, SendStatus::SendOk);
    let mut expected = 1;

    for (name, bytes) in garbage_frames() {
        let mut bad = RawConn::connect(&server.broker_addr()).await;
        // The server may close before everything is written: a write error is fine.
        let _ = bad.write_raw(&bytes).await;
        match tokio::time::timeout(DEADLINE, bad.expect_closed(DEADLINE)).await {
            Ok(()) => {}
            Err(_) => panic!("{name}: connection not closed"),
        }

        // The connection opened before still works...
        wait_max_offset(&consumer, &q, expected).await;
        let r = before.request(max_offset_request(topic, 0)).await;
        assert_eq!(r.code, response_code::SUCCESS, "{name}");
        assert_eq!(r.get_i64("offset").expect("offset"), expected, "{name}");
        raw_send_and_pull(&mut before, topic, name).await;
        expected += 1;
        // ...so does the client's pooled connection...
        let sent = producer
            .send(&Message::new(topic, format!("client after {name}")))
            .await
            .unwrap_or_else(|e| panic!("{name}: client send failed: {e}"));
        expected += 1;
        wait_max_offset(&consumer, &q, expected).await;
        let got = consumer
            .pull(&q, sent.queue_offset, 1, Duration::ZERO)
            .await
            .expect("pull");
        assert_eq!(got.status, PullStatus::Found, "{name}");
        // ...and a connection opened afterwards.
        let mut after = RawConn::connect(&server.broker_addr()).await;
        raw_send_and_pull(&mut after, topic, name).await;
        expected += 1;
    }
    server.stop().await;
}

/// One fuzzed frame.
#[derive(Debug, Clone)]
enum Fuzz {
    /// A well-formed frame of an arbitrary command.
    Command {
        code: i32,
        flag: i32,
        fields: Vec<(String, String)>,
        body: Vec<u8>,
        binary_header: bool,
    },
    /// A valid length prefix around arbitrary header bytes.
    RawHeader {
        type_byte: u8,
        header: Vec<u8>,
        body: Vec<u8>,
    },
}

fn fuzz_strategy() -> impl Strategy<Value = Fuzz> {
    let known_codes = prop::sample::select(vec![
        request_code::SEND_MESSAGE,
        request_code::SEND_MESSAGE_V2,
        request_code::SEND_BATCH_MESSAGE,
        request_code::PULL_MESSAGE,
        request_code::QUERY_MESSAGE,
        request_code::QUERY_CONSUMER_OFFSET,
        request_code::UPDATE_CONSUMER_OFFSET,
        request_code::UPDATE_AND_CREATE_TOPIC,
        request_code::SEARCH_OFFSET_BY_TIMESTAMP,
        request_code::GET_MAX_OFFSET,
        request_code::GET_MIN_OFFSET,
        request_code::VIEW_MESSAGE_BY_ID,
        request_code::HEART_BEAT,
        request_code::UNREGISTER_CLIENT,
        request_code::GET_CONSUMER_LIST_BY_GROUP,
        request_code::LOCK_BATCH_MQ,
        request_code::CHECK_CLIENT_CONFIG,
        request_code::LITE_PULL_MESSAGE,
    ]);
    let code = prop_oneof![3 => known_codes, 1 => any::<i32>()];
    let key = prop_oneof![
        prop::sample::select(vec![
            "a",
            "b",
            "c",
            "d",
            "e",
            "f",
            "g",
            "h",
            "i",
            "j",
            "k",
            "l",
            "m",
            "n",
            "topic",
            "queueId",
            "queueOffset",
            "consumerGroup",
            "maxMsgNums",
            "sysFlag",
            "suspendTimeoutMillis",
            "subscription",
            "commitOffset",
            "offset",
            "key",
            "maxNum",
            "timestamp",
            "readQueueNums",
            "writeQueueNums",
            "perm",
        ])
        .prop_map(str::to_string),
        "[a-zA-Z]{1,8}",
    ];
    let value = prop_oneof![
        "-?[0-9]{1,12}",
        "[a-zA-Z0-9_%|-]{0,16}",
        any::<String>(),
        Just("RawFuzz".to_string()),
    ];
    let command = (
        code,
        0..4i32,
        prop::collection::vec((key, value), 0..10),
        prop::collection::vec(any::<u8>(), 0..256),
        any::<bool>(),
    )
        .prop_map(|(code, flag, fields, body, binary_header)| Fuzz::Command {
            code,
            flag,
            fields,
            body,
            binary_header,
        });
    let raw = (
        prop_oneof![Just(0u8), Just(1u8), any::<u8>()],
        prop::collection::vec(any::<u8>(), 0..256),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(type_byte, header, body)| Fuzz::RawHeader {
            type_byte,
            header,
            body,
        });
    prop_oneof![command, raw]
}

fn fuzz_bytes(f: &Fuzz) -> Vec<u8> {
    match f {
        Fuzz::Command {
            code,
            flag,
            fields,
            body,
            binary_header,
        } => {
            let mut cmd = RemotingCommand::request(*code, fields.iter().cloned().collect());
            cmd.flag = *flag;
            cmd.opaque = opaque();
            cmd.body = Bytes::copy_from_slice(body);
            let ser = if *binary_header {
                SerializeType::RocketMq
            } else {
                SerializeType::Json
            };
            let mut dst = BytesMut::new();
            if FrameCodec::default()
                .encode_as(&cmd, ser, &mut dst)
                .is_err()
            {
                // The binary header has an int16 code: such commands go as JSON.
                dst.clear();
                FrameCodec::default()
                    .encode(&cmd, &mut dst)
                    .expect("JSON encodes any command");
            }
            dst.to_vec()
        }
        Fuzz::RawHeader {
            type_byte,
            header,
            body,
        } => {
            let mut b = BytesMut::new();
            b.put_i32(4 + header.len() as i32 + body.len() as i32);
            b.put_u32(u32::from(*type_byte) << 24 | header.len() as u32);
            b.put_slice(header);
            b.put_slice(body);
            b.to_vec()
        }
    }
}

/// Sends the fuzzed frame, then a probe; the server must answer the probe, or close the
/// connection — the latter only after a malformed frame: a well-formed command, whatever its
/// code and fields, gets an answer (or none, for a oneway or a response) and the connection
/// stays usable.
async fn fuzz_one(addr: &str, f: &Fuzz) -> Result<(), String> {
    let may_close = matches!(f, Fuzz::RawHeader { .. });
    let closed = || {
        if may_close {
            Ok(())
        } else {
            Err("the server closed the connection after a well-formed frame".to_string())
        }
    };
    let mut conn = RawConn::connect(addr).await;
    let _ = conn.write_raw(&fuzz_bytes(f)).await;
    let mut probe = RemotingCommand::request(UNKNOWN_CODE, ExtFields::new());
    probe.opaque = opaque();
    let want = probe.opaque;
    if conn.send(&probe).await.is_err() {
        return closed(); // already closed
    }
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match conn.read(left).await {
            Read::Closed => return closed(),
            Read::Frame(r) if r.is_response() && r.opaque == want => {
                return if r.code == response_code::REQUEST_CODE_NOT_SUPPORTED {
                    Ok(())
                } else {
                    Err(format!("probe answered with code {}", r.code))
                };
            }
            Read::Frame(_) => continue,
            Read::Timeout => return Err("neither answered nor closed".into()),
        }
    }
}

#[test]
fn arbitrary_frames_are_answered_or_close_the_connection() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let server = rt.block_on(TestServer::start());
    rt.block_on(server.create_topic("RawFuzz", 2));
    let addr = server.broker_addr();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&fuzz_strategy(), |f| {
        rt.block_on(fuzz_one(&addr, &f))
            .map_err(|e| TestCaseError::fail(format!("{e} after {f:?}")))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // A fresh client is still served.
    rt.block_on(async {
        let mut conn = RawConn::connect(&addr).await;
        raw_send_and_pull(&mut conn, "AfterFuzz", "still serving").await;
        let producer = server.producer("PG_after_fuzz");
        let r = producer
            .send(&Message::new("AfterFuzz", "client still served"))
            .await
            .expect("client send after fuzzing");
        assert_eq!(r.status, SendStatus::SendOk);
    });
    // No graceful stop: a fuzzed PULL may be held for up to 60 s and Running::stop waits for
    // held pulls (see restart.rs). Tearing the runtime down ends the server's tasks.
    rt.shutdown_timeout(Duration::from_secs(1));
    drop(server);
}
