//! The public API against an in-test mock "cluster": one TCP server answering both name-server
//! and broker codes (they do not overlap), with an in-memory message log and long polling.
//! It checks what the client puts on the wire (header keys, flags, bodies) and that the
//! producer, pull consumer, admin and bench layers work together. The real broker gets its
//! own end-to-end tests elsewhere.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use conveyor_client::admin::TopicSpec;
use conveyor_client::bench::{self, ConsumeConfig, Limit, LongPollConfig, ProduceConfig};
use conveyor_client::consumer::{pull_sys_flag, PullOptions};
use conveyor_client::remoting::RemotingCodec;
use conveyor_client::{
    Admin, Message, Producer, ProducerConfig, PullConsumer, PullConsumerConfig, PullStatus,
    SendStatus, Subscription,
};
use conveyor_protocol::batch::decode_batch;
use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::message::{offset_msg_id, Properties, StoredMessage};
use conveyor_protocol::route::{
    perm, BrokerData, ClusterInfo, HeartbeatData, QueueData, TopicList, TopicRouteData,
};
use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};
use tokio_util::codec::Framed;

#[derive(Default)]
struct State {
    /// topic → (broker names, queues per broker)
    topics: BTreeMap<String, (Vec<String>, i32)>,
    /// (topic, queue) → encoded records
    log: HashMap<(String, i32), Vec<Vec<u8>>>,
    phys: i64,
    offsets: HashMap<(String, String, i32), i64>,
    requests: Vec<RemotingCommand>,
    heartbeats: Vec<HeartbeatData>,
    /// Sends to this broker name fail with SYSTEM_BUSY.
    busy_broker: Option<String>,
}

struct Mock {
    addr: String,
    state: Mutex<State>,
    arrived: Notify,
}

impl Mock {
    fn requests(&self, code: i32) -> Vec<RemotingCommand> {
        let s = self.state.lock().unwrap();
        s.requests
            .iter()
            .filter(|r| r.code == code)
            .cloned()
            .collect()
    }

    fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let s = self.state.lock().unwrap();
        let (brokers, queues) = s.topics.get(topic)?.clone();
        let p = if topic == "TBW102" {
            perm::READ_WRITE | perm::INHERIT
        } else {
            perm::READ_WRITE
        };
        Some(TopicRouteData {
            broker_datas: brokers
                .iter()
                .map(|b| BrokerData {
                    broker_addrs: [(0, self.addr.clone())].into_iter().collect(),
                    broker_name: b.clone(),
                    cluster: "DefaultCluster".into(),
                    ..Default::default()
                })
                .collect(),
            queue_datas: brokers
                .iter()
                .map(|b| QueueData {
                    broker_name: b.clone(),
                    perm: p,
                    read_queue_nums: queues,
                    write_queue_nums: queues,
                    topic_sys_flag: 0,
                })
                .collect(),
            ..Default::default()
        })
    }

    fn store(
        &self,
        topic: &str,
        queue_id: i32,
        flag: i32,
        body: Bytes,
        props: Properties,
        born: SocketAddr,
    ) -> (i64, String) {
        let mut s = self.state.lock().unwrap();
        let phys = s.phys;
        s.phys += 1000;
        let log = s.log.entry((topic.to_string(), queue_id)).or_default();
        let queue_offset = log.len() as i64;
        let store_host: SocketAddr = self.addr.parse().unwrap();
        let msg = StoredMessage {
            topic: topic.into(),
            queue_id,
            flag,
            queue_offset,
            physical_offset: phys,
            sys_flag: 0,
            born_timestamp: 1,
            born_host: born,
            store_timestamp: 2,
            store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body,
            properties: props,
        };
        log.push(msg.encode().unwrap());
        drop(s);
        self.arrived.notify_waiters();
        (queue_offset, offset_msg_id(store_host, phys))
    }

    fn read(&self, topic: &str, queue_id: i32, offset: i64, max: i64) -> (Vec<u8>, i64, i64) {
        let s = self.state.lock().unwrap();
        let log = s.log.get(&(topic.to_string(), queue_id));
        let len = log.map_or(0, |l| l.len() as i64);
        let mut body = Vec::new();
        let mut next = offset;
        if let Some(l) = log {
            while next < len && next < offset + max {
                body.extend_from_slice(&l[next as usize]);
                next += 1;
            }
        }
        (body, next, len)
    }
}

async fn start_mock() -> Arc<Mock> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut state = State::default();
    state
        .topics
        .insert("TBW102".into(), (vec!["broker-a".into()], 8));
    state
        .topics
        .insert("Known".into(), (vec!["broker-a".into()], 2));
    state.topics.insert(
        "TwoBrokers".into(),
        (vec!["broker-a".into(), "broker-b".into()], 2),
    );
    let mock = Arc::new(Mock {
        addr,
        state: Mutex::new(state),
        arrived: Notify::new(),
    });
    let m = mock.clone();
    tokio::spawn(async move {
        while let Ok((sock, peer)) = listener.accept().await {
            tokio::spawn(serve(m.clone(), sock, peer));
        }
    });
    mock
}

async fn serve(mock: Arc<Mock>, sock: TcpStream, peer: SocketAddr) {
    let (mut sink, mut stream) = Framed::new(sock, RemotingCodec::default()).split();
    let (tx, mut rx) = mpsc::unbounded_channel::<RemotingCommand>();
    tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            if sink.send(c).await.is_err() {
                return;
            }
        }
    });
    while let Some(Ok(req)) = stream.next().await {
        mock.state.lock().unwrap().requests.push(req.clone());
        let mock = mock.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            if let Some(resp) = handle(&mock, req, peer).await {
                let _ = tx.send(resp);
            }
        });
    }
}

async fn handle(mock: &Mock, req: RemotingCommand, peer: SocketAddr) -> Option<RemotingCommand> {
    let ok = || RemotingCommand::response_to(&req, 0);
    let resp = match req.code {
        request_code::GET_ROUTEINFO_BY_TOPIC => match mock.route(req.ext("topic").unwrap()) {
            Some(r) => ok().with_body(json::to_vec(&r).unwrap()),
            None => RemotingCommand::response_to(&req, response_code::TOPIC_NOT_EXIST)
                .with_remark("no route"),
        },
        request_code::GET_BROKER_CLUSTER_INFO => {
            let info = ClusterInfo {
                broker_addr_table: [(
                    "broker-a".to_string(),
                    BrokerData {
                        broker_addrs: [(0, mock.addr.clone())].into_iter().collect(),
                        broker_name: "broker-a".into(),
                        cluster: "DefaultCluster".into(),
                        ..Default::default()
                    },
                )]
                .into_iter()
                .collect(),
                cluster_addr_table: [("DefaultCluster".to_string(), vec!["broker-a".to_string()])]
                    .into_iter()
                    .collect(),
            };
            ok().with_body(json::to_vec(&info).unwrap())
        }
        request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => {
            let topics = mock.state.lock().unwrap().topics.keys().cloned().collect();
            ok().with_body(
                json::to_vec(&TopicList {
                    broker_addr: None,
                    topic_list: topics,
                })
                .unwrap(),
            )
        }
        request_code::UPDATE_AND_CREATE_TOPIC => {
            let n: i32 = req.get_i32("writeQueueNums").unwrap();
            mock.state.lock().unwrap().topics.insert(
                req.ext("topic").unwrap().into(),
                (vec!["broker-a".into()], n),
            );
            ok()
        }
        request_code::SEND_MESSAGE_V2 | request_code::SEND_BATCH_MESSAGE => {
            let topic = req.get_str("b").unwrap().to_string();
            let broker = req.get_str("n").unwrap().to_string();
            let queue_id = req.get_i32("e").unwrap();
            if mock.state.lock().unwrap().busy_broker.as_deref() == Some(broker.as_str()) {
                return Some(
                    RemotingCommand::response_to(&req, response_code::SYSTEM_BUSY)
                        .with_remark("busy"),
                );
            }
            if mock.route(&topic).is_none() {
                // auto-create from the default topic, like the broker (§9.6)
                assert_eq!(req.ext("c"), Some("TBW102"));
                let n = req.get_i32("d").unwrap();
                mock.state
                    .lock()
                    .unwrap()
                    .topics
                    .insert(topic.clone(), (vec!["broker-a".into()], n));
            }
            let (offset, ids) = if req.code == request_code::SEND_BATCH_MESSAGE {
                assert_eq!(req.ext("m"), Some("true"));
                let mut first = None;
                let mut ids = Vec::new();
                for e in decode_batch(&req.body).unwrap() {
                    let (o, id) = mock.store(&topic, queue_id, e.flag, e.body, e.properties, peer);
                    first.get_or_insert(o);
                    ids.push(id);
                }
                (first.unwrap(), ids.join(","))
            } else {
                let props = Properties::decode(req.get_str("i").unwrap().as_bytes()).unwrap();
                mock.store(
                    &topic,
                    queue_id,
                    req.get_i32("h").unwrap(),
                    req.body.clone(),
                    props,
                    peer,
                )
            };
            ok().with_ext("msgId", ids)
                .with_ext("queueId", queue_id)
                .with_ext("queueOffset", offset)
                .with_ext("MSG_REGION", "DefaultRegion")
                .with_ext("TRACE_ON", "true")
        }
        request_code::PULL_MESSAGE => {
            let topic = req.get_str("topic").unwrap().to_string();
            let qid = req.get_i32("queueId").unwrap();
            let offset = req.get_i64("queueOffset").unwrap();
            let max = req.get_i64("maxMsgNums").unwrap();
            let flag = req.get_i32("sysFlag").unwrap();
            let suspend =
                Duration::from_millis(req.get_i64("suspendTimeoutMillis").unwrap() as u64);
            assert!(flag & pull_sys_flag::SUBSCRIPTION != 0);
            let sub = Subscription::parse(req.get_str("subscription").unwrap()).unwrap();
            if flag & pull_sys_flag::COMMIT_OFFSET != 0 {
                let group = req.get_str("consumerGroup").unwrap().to_string();
                let c = req.get_i64("commitOffset").unwrap();
                mock.state
                    .lock()
                    .unwrap()
                    .offsets
                    .insert((group, topic.clone(), qid), c);
            }
            let deadline = Instant::now() + suspend;
            loop {
                let notified = mock.arrived.notified();
                let (body, next, max_offset) = mock.read(&topic, qid, offset, max);
                let found = !body.is_empty();
                let hold =
                    !found && flag & pull_sys_flag::SUSPEND != 0 && Instant::now() < deadline;
                if !hold {
                    let code = if found {
                        0
                    } else if offset > max_offset {
                        response_code::PULL_OFFSET_MOVED
                    } else {
                        response_code::PULL_NOT_FOUND
                    };
                    let next = if code == response_code::PULL_OFFSET_MOVED {
                        max_offset
                    } else {
                        next
                    };
                    // tags are filtered by the broker too; the client re-filters (tested in unit tests)
                    let _ = &sub;
                    break RemotingCommand::response_to(&req, code)
                        .with_ext("nextBeginOffset", next)
                        .with_ext("minOffset", 0)
                        .with_ext("maxOffset", max_offset)
                        .with_ext("suggestWhichBrokerId", 0)
                        .with_body(body);
                }
                let _ = tokio::time::timeout_at(deadline.into(), notified).await;
            }
        }
        request_code::GET_MAX_OFFSET | request_code::GET_MIN_OFFSET => {
            let (_, _, len) = mock.read(
                req.get_str("topic").unwrap(),
                req.get_i32("queueId").unwrap(),
                0,
                0,
            );
            let v = if req.code == request_code::GET_MAX_OFFSET {
                len
            } else {
                0
            };
            ok().with_ext("offset", v)
        }
        request_code::SEARCH_OFFSET_BY_TIMESTAMP => {
            ok().with_ext("offset", req.get_i64("timestamp").unwrap() % 7)
        }
        request_code::QUERY_CONSUMER_OFFSET | request_code::UPDATE_CONSUMER_OFFSET => {
            let key = (
                req.get_str("consumerGroup").unwrap().to_string(),
                req.get_str("topic").unwrap().to_string(),
                req.get_i32("queueId").unwrap(),
            );
            let mut s = mock.state.lock().unwrap();
            if req.code == request_code::UPDATE_CONSUMER_OFFSET {
                s.offsets.insert(key, req.get_i64("commitOffset").unwrap());
                ok()
            } else {
                match s.offsets.get(&key) {
                    Some(o) => ok().with_ext("offset", *o),
                    None => RemotingCommand::response_to(&req, response_code::QUERY_NOT_FOUND),
                }
            }
        }
        request_code::HEART_BEAT => {
            let hb: HeartbeatData = json::from_slice(&req.body).unwrap();
            mock.state.lock().unwrap().heartbeats.push(hb);
            ok()
        }
        request_code::VIEW_MESSAGE_BY_ID => {
            let phys = req.get_i64("offset").unwrap();
            let s = mock.state.lock().unwrap();
            let rec = s.log.values().flatten().find(|r| {
                conveyor_protocol::message::RecordView::parse(r)
                    .unwrap()
                    .physical_offset()
                    == phys
            });
            match rec {
                Some(r) => ok().with_body(r.clone()),
                None => RemotingCommand::response_to(&req, response_code::SYSTEM_ERROR),
            }
        }
        request_code::QUERY_MESSAGE => {
            let key = req.get_str("key").unwrap().to_string();
            let s = mock.state.lock().unwrap();
            let mut body = Vec::new();
            for r in s.log.values().flatten() {
                let v = conveyor_protocol::message::RecordView::parse(r).unwrap();
                let keys = v.property("KEYS").unwrap_or("");
                if keys.split(' ').any(|k| k == key) {
                    body.extend_from_slice(r);
                }
            }
            if body.is_empty() {
                RemotingCommand::response_to(&req, response_code::QUERY_NOT_FOUND)
            } else {
                ok().with_body(body)
                    .with_ext("indexLastUpdateTimestamp", 0)
                    .with_ext("indexLastUpdatePhyoffset", 0)
            }
        }
        _ => RemotingCommand::response_to(&req, response_code::REQUEST_CODE_NOT_SUPPORTED),
    };
    (!req.is_oneway()).then_some(resp)
}

fn producer(mock: &Mock) -> Producer {
    // Two name servers, the first one dead: exercises failover on every test.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    Producer::new(ProducerConfig::new(format!("{dead};{}", mock.addr), "PG")).unwrap()
}

#[tokio::test]
async fn send_uses_v2_header_and_round_robin() {
    let mock = start_mock().await;
    let p = producer(&mock);
    let msg = Message::new("Known", "hello")
        .with_tags("TagA")
        .with_keys(["k1", "k2"])
        .with_flag(3);
    let mut queues = Vec::new();
    for _ in 0..4 {
        let r = p.send(&msg).await.unwrap();
        assert_eq!(r.status, SendStatus::SendOk);
        assert_eq!(r.msg_id.len(), 32);
        assert_eq!(r.offset_msg_id.len(), 32);
        queues.push(r.queue.queue_id);
    }
    queues.sort();
    assert_eq!(queues, vec![0, 0, 1, 1], "round robin over the two queues");
    let sends = mock.requests(request_code::SEND_MESSAGE_V2);
    assert_eq!(sends.len(), 4);
    let h = &sends[0];
    let keys: Vec<&str> = h.ext_fields.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "m", "n"]
    );
    assert_eq!(h.ext("a"), Some("PG"));
    assert_eq!(h.ext("b"), Some("Known"));
    assert_eq!(h.ext("h"), Some("3"));
    assert_eq!(h.ext("n"), Some("broker-a"));
    assert_eq!(h.body.as_ref(), b"hello");
    let props = Properties::decode(h.ext("i").unwrap().as_bytes()).unwrap();
    assert_eq!(props.get("TAGS"), Some("TagA"));
    assert_eq!(props.get("KEYS"), Some("k1 k2"));
    assert_eq!(props.get("UNIQ_KEY").map(str::len), Some(32));
}

#[tokio::test]
async fn unknown_topic_goes_through_tbw102_and_gets_created() {
    let mock = start_mock().await;
    let p = producer(&mock);
    let r = p.send(&Message::new("Fresh", "x")).await.unwrap();
    assert_eq!(r.queue.topic, "Fresh");
    assert!(r.queue.queue_id < 4, "at most defaultTopicQueueNums queues");
    let routes: Vec<String> = mock
        .requests(request_code::GET_ROUTEINFO_BY_TOPIC)
        .iter()
        .map(|r| r.ext("topic").unwrap().to_string())
        .collect();
    assert_eq!(routes, vec!["Fresh", "TBW102"]);
    assert!(mock.route("Fresh").is_some());
}

#[tokio::test]
async fn retryable_failure_moves_to_another_broker() {
    let mock = start_mock().await;
    mock.state.lock().unwrap().busy_broker = Some("broker-a".into());
    let p = producer(&mock);
    for _ in 0..4 {
        let r = p.send(&Message::new("TwoBrokers", "x")).await.unwrap();
        assert_eq!(r.queue.broker_name, "broker-b");
    }
    let tried_a = mock
        .requests(request_code::SEND_MESSAGE_V2)
        .iter()
        .filter(|r| r.ext("n") == Some("broker-a"))
        .count();
    assert!(
        tried_a >= 1,
        "round robin must have hit the busy broker at least once"
    );
    // Non-retryable outcome when every broker is busy: the error carries code and remark.
    mock.state.lock().unwrap().busy_broker = Some("broker-a".into());
    let only_a = producer(&mock);
    let err = only_a.send(&Message::new("Known", "x")).await.unwrap_err();
    assert_eq!(err.code(), Some(response_code::SYSTEM_BUSY));
    assert!(err.to_string().contains("busy"));
}

#[tokio::test]
async fn batch_and_oneway() {
    let mock = start_mock().await;
    let p = producer(&mock);
    let msgs: Vec<Message> = (0..3)
        .map(|i| Message::new("Known", format!("m{i}")).with_key(format!("key{i}")))
        .collect();
    let r = p.send_batch(&msgs).await.unwrap();
    assert_eq!(r.msg_id.split(',').count(), 3);
    assert_eq!(r.offset_msg_id.split(',').count(), 3);
    let batch = &mock.requests(request_code::SEND_BATCH_MESSAGE)[0];
    assert_eq!(batch.ext("m"), Some("true"));
    let entries = decode_batch(&batch.body).unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(entries[1].body.as_ref(), b"m1");
    assert_eq!(entries[2].properties.get("KEYS"), Some("key2"));
    assert!(p.send_batch(&[]).await.is_err());
    assert!(p
        .send_batch(&[Message::new("Known", "a"), Message::new("Other", "b")])
        .await
        .is_err());

    p.send_oneway(&Message::new("Known", "fire")).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let sends = mock.requests(request_code::SEND_MESSAGE_V2);
        if let Some(s) = sends.iter().find(|s| s.body.as_ref() == b"fire") {
            assert!(s.is_oneway());
            break;
        }
        assert!(Instant::now() < deadline, "oneway send never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn pull_consumer_end_to_end() {
    let mock = start_mock().await;
    let p = producer(&mock);
    let c = PullConsumer::new(PullConsumerConfig::new(mock.addr.clone(), "CG")).unwrap();
    c.subscribe("Known", "TagA || TagB").unwrap();
    let queues = c.fetch_queues("Known").await.unwrap();
    assert_eq!(queues.len(), 2);
    let q0 = queues[0].clone();
    for (i, tag) in ["TagA", "TagC", "TagB"].iter().enumerate() {
        p.send_to_queue(&Message::new("Known", format!("b{i}")).with_tags(*tag), &q0)
            .await
            .unwrap();
    }
    let r = c.pull(&q0, 0, 32, Duration::ZERO).await.unwrap();
    assert_eq!(r.status, PullStatus::Found);
    assert_eq!(r.next_begin_offset, 3);
    assert_eq!(r.max_offset, 3);
    let bodies: Vec<&[u8]> = r.messages.iter().map(|m| m.body.as_ref()).collect();
    assert_eq!(
        bodies,
        vec![b"b0".as_ref(), b"b2".as_ref()],
        "TagC filtered out"
    );
    let pull = &mock.requests(request_code::PULL_MESSAGE)[0];
    assert_eq!(pull.ext("subscription"), Some("TagA || TagB"));
    assert_eq!(pull.ext("consumerGroup"), Some("CG"));
    assert_eq!(pull.ext("sysFlag"), Some("4"));

    let r = c.pull(&q0, 3, 32, Duration::ZERO).await.unwrap();
    assert_eq!(r.status, PullStatus::NoNewMsg);
    let r = c.pull(&q0, 10, 32, Duration::ZERO).await.unwrap();
    assert_eq!(r.status, PullStatus::OffsetIllegal);
    assert_eq!(r.next_begin_offset, 3);

    // Offsets.
    assert_eq!(c.query_offset(&q0).await.unwrap(), None);
    c.commit_offset(&q0, 2).await.unwrap();
    assert_eq!(c.query_offset(&q0).await.unwrap(), Some(2));
    c.pull_with(
        &q0,
        3,
        PullOptions {
            commit_offset: Some(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(c.query_offset(&q0).await.unwrap(), Some(3));
    assert_eq!(c.max_offset(&q0).await.unwrap(), 3);
    assert_eq!(c.min_offset(&q0).await.unwrap(), 0);
    assert_eq!(c.search_offset(&q0, 15).await.unwrap(), 1);

    // Heartbeat carries the group and the subscription.
    let addrs = c.heartbeat().await.unwrap();
    assert_eq!(addrs, vec![mock.addr.clone()]);
    let hb = mock.state.lock().unwrap().heartbeats[0].clone();
    assert_eq!(hb.client_id, c.client_id());
    let cd = &hb.consumer_data_set[0];
    assert_eq!(cd.group_name, "CG");
    assert_eq!(cd.subscription_data_set[0].topic, "Known");
    assert_eq!(cd.subscription_data_set[0].tags_set, vec!["TagA", "TagB"]);

    // Long poll: the parked pull returns as soon as a message arrives.
    let c = Arc::new(c);
    let c2 = c.clone();
    let q = q0.clone();
    let parked = tokio::spawn(async move { c2.pull(&q, 3, 32, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t0 = Instant::now();
    p.send_to_queue(&Message::new("Known", "late").with_tags("TagA"), &q0)
        .await
        .unwrap();
    let r = parked.await.unwrap().unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(r.status, PullStatus::Found);
    assert_eq!(r.messages[0].body.as_ref(), b"late");
    let pull = mock.requests(request_code::PULL_MESSAGE).pop().unwrap();
    assert_eq!(
        pull.get_i32("sysFlag").unwrap(),
        pull_sys_flag::SUBSCRIPTION | pull_sys_flag::SUSPEND
    );
    assert_eq!(pull.ext("suspendTimeoutMillis"), Some("10000"));
}

#[tokio::test]
async fn admin_calls() {
    let mock = start_mock().await;
    let admin = Admin::new(&mock.addr).unwrap();
    let info = admin.cluster_info().await.unwrap();
    assert!(info.cluster_addr_table.contains_key("DefaultCluster"));
    let created = admin
        .create_topic("DefaultCluster", &TopicSpec::new("Made", 3))
        .await
        .unwrap();
    assert_eq!(created, vec![mock.addr.clone()]);
    assert!(admin
        .topic_list()
        .await
        .unwrap()
        .contains(&"Made".to_string()));
    let route = admin
        .wait_for_route("Made", Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(route.queue_datas[0].write_queue_nums, 3);
    assert!(admin
        .create_topic("Nope", &TopicSpec::new("X", 1))
        .await
        .is_err());

    let p = producer(&mock);
    let sent = p
        .send(&Message::new("Made", "findme").with_key("order-42"))
        .await
        .unwrap();
    let status = admin.topic_status("Made").await.unwrap();
    assert_eq!(status.len(), 3);
    assert_eq!(status.iter().map(|s| s.max_offset).sum::<i64>(), 1);

    let progress = admin.consumer_progress("CG", "Made").await.unwrap();
    assert_eq!(progress.total_diff, 1);
    let c = PullConsumer::new(PullConsumerConfig::new(mock.addr.clone(), "CG")).unwrap();
    c.commit_offset(&sent.queue, 1).await.unwrap();
    let progress = admin.consumer_progress("CG", "Made").await.unwrap();
    assert_eq!(progress.total_diff, 0);
    let q = progress
        .queues
        .iter()
        .find(|q| q.queue == sent.queue)
        .unwrap();
    assert_eq!(
        (q.broker_offset, q.consumer_offset, q.diff),
        (1, Some(1), 0)
    );

    let viewed = admin.view_message(&sent.offset_msg_id).await.unwrap();
    assert_eq!(viewed.body.as_ref(), b"findme");
    assert_eq!(viewed.msg_id(), sent.msg_id);
    let found = admin
        .query_by_key("Made", "order-42", 32, 0, i64::MAX, false)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert!(admin
        .query_by_key("Made", "nothing", 32, 0, i64::MAX, false)
        .await
        .unwrap()
        .is_empty());
    assert!(admin.view_message("not-an-id").await.is_err());
}

#[tokio::test]
async fn bench_generators_run_against_the_mock() {
    let mock = start_mock().await;
    let mut pc = ProduceConfig::new(mock.addr.clone(), "Bench");
    pc.message_size = 100;
    pc.producers = 2;
    pc.in_flight = 4;
    pc.limit = Limit::Count(200);
    let stats = bench::produce(&pc).await.unwrap();
    assert_eq!(stats.msgs, 200, "{stats}");
    assert_eq!(stats.bytes, 20_000);
    assert_eq!(stats.errors, 0);
    assert_eq!(stats.latency.count(), 200);
    assert!(stats.p50() <= stats.p99() && stats.p99() <= stats.p999());

    let mut cc = ConsumeConfig::new(mock.addr.clone(), "Bench");
    cc.consumers = 2;
    cc.batch = 16;
    let stats = bench::consume(&cc).await.unwrap();
    assert_eq!(stats.msgs, 200, "{stats}");
    assert_eq!(stats.bytes, 20_000);

    let mut lc = LongPollConfig::new(mock.addr.clone(), "LongPoll");
    lc.trials = 3;
    lc.settle = Duration::from_millis(50);
    let lp = bench::long_poll_latency(&lc).await.unwrap();
    assert_eq!(lp.samples.len(), 3);
    assert!(lp.min <= lp.median && lp.median <= lp.max);
    assert!(lp.max < Duration::from_secs(5), "{lp}");
}
