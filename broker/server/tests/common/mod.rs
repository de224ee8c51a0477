//! Shared helpers of the end-to-end tests: an in-process standalone Conveyor (name server +
//! broker + HTTP probes) on ephemeral ports over a temporary store, clients pointed at it,
//! a raw remoting connection for malformed input, a tiny HTTP GET, and condition waits with
//! deadlines (no fixed sleeps as synchronisation).
#![allow(dead_code)]

pub mod child;
pub mod grpc;
pub mod netns;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use conveyor::app::{self, AppConfig, Role, Running};
use conveyor::broker::{Broker, BrokerConfig};
use conveyor::remoting::ServeLimits;
use conveyor_client::admin::TopicSpec;
use conveyor_client::{
    Admin, MessageQueue, Producer, ProducerConfig, PullConsumer, PullConsumerConfig,
};
use conveyor_protocol::code::request_code;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::frame::{encode_frame, FrameCodec};
use conveyor_protocol::message::{RecordView, StoredMessage};
use conveyor_protocol::route::{HeartbeatData, ProducerData};
use conveyor_store::{AcceptAll, StoreConfig};
use tempfile::TempDir;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Cluster name of the test broker (BrokerConfig's default).
pub const CLUSTER: &str = "DefaultCluster";

/// Generous limit for anything that should take milliseconds.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// The configuration the tests run: standalone, every port ephemeral, small store.
pub fn config(dir: &Path) -> AppConfig {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    AppConfig {
        role: Role::Standalone,
        controller_listen: any,
        controller: conveyor::controller::ControllerConfig::default(),
        group_endpoints: Vec::new(),
        namesrv_listen: any,
        broker_listen: any,
        replication_listen: any,
        http_listen: Some(any),
        http_resource_labels: true,
        grpc_listen: Some(any),
        grpc: conveyor::grpc::GrpcConfig::default(),
        tls: conveyor::tls::TlsConfig::default(),
        acl: None,
        broker: BrokerConfig {
            namesrv_addrs: vec![],
            advertised_addr: String::new(),
            ..BrokerConfig::default()
        },
        store: StoreConfig::small(dir),
        limits: ServeLimits::default(),
    }
}

/// Adjusts the test configuration (kept across restarts).
pub type Configure = Arc<dyn Fn(&mut AppConfig) + Send + Sync>;

/// A running in-process server and the directory it stores into.
pub struct TestServer {
    pub running: Option<Running>,
    pub dir: PathBuf,
    configure: Option<Configure>,
    _tmp: Option<TempDir>,
}

impl TestServer {
    /// Starts on a fresh temporary directory and waits until the broker is registered.
    pub async fn start() -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut s = Self::start_in(&dir).await;
        s._tmp = Some(tmp);
        s
    }

    /// Like [`TestServer::start`], with `configure` applied to the configuration (also on
    /// every [`TestServer::restart`]), e.g. to set `BrokerConfig` fields.
    pub async fn start_with(configure: impl Fn(&mut AppConfig) + Send + Sync + 'static) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_path_buf();
        let mut s = Self::launch(&dir, Some(Arc::new(configure))).await;
        s._tmp = Some(tmp);
        s
    }

    /// Starts on `dir` (kept by the caller) and waits until the broker is registered.
    pub async fn start_in(dir: &Path) -> Self {
        Self::launch(dir, None).await
    }

    /// [`TestServer::start_in`] with `configure` applied (also on every restart).
    pub async fn start_in_with(
        dir: &Path,
        configure: impl Fn(&mut AppConfig) + Send + Sync + 'static,
    ) -> Self {
        Self::launch(dir, Some(Arc::new(configure))).await
    }

    async fn launch(dir: &Path, configure: Option<Configure>) -> Self {
        let mut cfg = config(dir);
        if let Some(f) = &configure {
            f(&mut cfg);
        }
        let running = app::start(cfg).await.expect("start conveyor");
        let broker = running.broker.clone().expect("standalone runs a broker");
        wait_until("broker registered with the name server", DEADLINE, || {
            let b = broker.clone();
            async move { b.is_registered() }
        })
        .await;
        Self {
            running: Some(running),
            dir: dir.to_path_buf(),
            configure,
            _tmp: None,
        }
    }

    fn running(&self) -> &Running {
        self.running.as_ref().expect("server running")
    }

    /// "127.0.0.1:port" of the name server.
    pub fn namesrv(&self) -> String {
        self.running().namesrv_addr.expect("namesrv").to_string()
    }

    /// "127.0.0.1:port" of the broker.
    pub fn broker_addr(&self) -> String {
        self.running().broker_addr.expect("broker").to_string()
    }

    /// Address of the HTTP probe port.
    pub fn http(&self) -> SocketAddr {
        self.running().http_addr.expect("http")
    }

    /// Graceful stop (the directory stays).
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            tokio::time::timeout(DEADLINE, r.stop())
                .await
                .expect("Running::stop finishes in time");
        }
    }

    /// Stops, then starts again on the same directory (new ports).
    pub async fn restart(&mut self) {
        self.stop().await;
        let again = Self::launch(&self.dir, self.configure.clone()).await;
        self.running = again.running;
    }

    /// The in-process broker.
    pub fn broker(&self) -> Arc<Broker> {
        self.running()
            .broker
            .clone()
            .expect("standalone runs a broker")
    }

    /// Every message stored in `topic`/`queue_id`, read from the store directly (system
    /// topics such as the half or check-max topics are not routed to clients).
    pub fn stored(&self, topic: &str, queue_id: i32) -> Vec<StoredMessage> {
        let broker = self.broker();
        let mut out = Vec::new();
        let mut offset = broker.store().min_offset(topic, queue_id);
        loop {
            let r = broker
                .store()
                .get_messages(topic, queue_id, offset, 256, 4 << 20, &AcceptAll);
            if r.messages.is_empty() {
                return out;
            }
            for slice in &r.messages {
                let m = RecordView::parse(slice)
                    .and_then(|v| v.to_message())
                    .expect("stored record decodes");
                out.push(m);
            }
            offset = r.next_begin_offset;
        }
    }

    /// A raw remoting connection to the broker.
    pub async fn raw(&self) -> RawConn {
        RawConn::connect(&self.broker_addr()).await
    }

    pub fn producer(&self, group: &str) -> Producer {
        Producer::new(ProducerConfig::new(self.namesrv(), group)).expect("producer")
    }

    pub fn consumer(&self, group: &str) -> PullConsumer {
        PullConsumer::new(PullConsumerConfig::new(self.namesrv(), group)).expect("consumer")
    }

    pub fn admin(&self) -> Admin {
        Admin::new(&self.namesrv()).expect("admin")
    }

    /// Creates `topic` with `queues` queues and waits for its route; returns its queues in
    /// queue-id order.
    pub async fn create_topic(&self, topic: &str, queues: i32) -> Vec<MessageQueue> {
        let admin = self.admin();
        admin
            .create_topic(CLUSTER, &TopicSpec::new(topic, queues))
            .await
            .expect("create topic");
        self.wait_route(topic, queues as usize).await
    }

    /// Waits until the name server routes `queues` readable queues of `topic`.
    pub async fn wait_route(&self, topic: &str, queues: usize) -> Vec<MessageQueue> {
        let admin = self.admin();
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Ok(route) = admin.topic_route(topic).await {
                let mut qs = conveyor_client::route::subscribe_queues(topic, &route);
                if qs.len() == queues {
                    qs.sort_by_key(|q| q.queue_id);
                    return qs;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no route with {queues} queues for {topic} in time"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `limit`.
pub async fn wait_until<F, Fut>(what: &str, limit: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if cond().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

static NEXT_OPAQUE: AtomicI32 = AtomicI32::new(1_000);

/// A fresh opaque for raw requests.
pub fn opaque() -> i32 {
    NEXT_OPAQUE.fetch_add(1, Ordering::Relaxed)
}

/// What a raw read produced.
#[derive(Debug)]
pub enum Read {
    Frame(RemotingCommand),
    /// EOF or a reset: the server closed the connection.
    Closed,
    /// Nothing within the limit.
    Timeout,
}

/// A bare remoting connection: frames written and read with `conveyor_protocol::frame`.
pub struct RawConn {
    pub stream: TcpStream,
    buf: BytesMut,
    codec: FrameCodec,
}

impl RawConn {
    pub async fn connect(addr: &str) -> Self {
        let stream = TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        Self {
            stream,
            buf: BytesMut::new(),
            codec: FrameCodec::default(),
        }
    }

    /// Writes raw bytes; a write error (the peer already closed) is returned, not a panic.
    pub async fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Writes one request frame (its opaque as given).
    pub async fn send(&mut self, cmd: &RemotingCommand) -> std::io::Result<()> {
        let frame = encode_frame(cmd).expect("encode");
        self.write_raw(&frame).await
    }

    /// Reads the next frame, or reports the connection closed, or times out.
    pub async fn read(&mut self, limit: Duration) -> Read {
        let deadline = Instant::now() + limit;
        loop {
            match self.codec.decode(&mut self.buf) {
                Ok(Some(cmd)) => return Read::Frame(cmd),
                Ok(None) => {}
                Err(e) => panic!("server sent a malformed frame: {e}"),
            }
            let mut chunk = [0u8; 64 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Read::Timeout,
                Ok(Ok(0)) | Ok(Err(_)) => return Read::Closed,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Sends `cmd` with a fresh opaque and returns the response with that opaque.
    pub async fn request(&mut self, mut cmd: RemotingCommand) -> RemotingCommand {
        cmd.opaque = opaque();
        let want = cmd.opaque;
        self.send(&cmd).await.expect("write request");
        loop {
            match self.read(DEADLINE).await {
                Read::Frame(r) if r.is_response() && r.opaque == want => return r,
                Read::Frame(_) => continue,
                other => panic!("no response to request code {}: {other:?}", cmd.code),
            }
        }
    }

    /// Waits until the server closes this connection (frames read meanwhile are ignored).
    pub async fn expect_closed(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            match self
                .read(deadline.saturating_duration_since(Instant::now()))
                .await
            {
                Read::Closed => return,
                Read::Frame(_) => continue,
                Read::Timeout => panic!("the server did not close the connection in time"),
            }
        }
    }
}

/// The HEART_BEAT (34) request registering `client_id` as a member of producer `group`.
pub fn producer_heartbeat(client_id: &str, group: &str) -> RemotingCommand {
    let data = HeartbeatData {
        client_id: client_id.to_string(),
        producer_data_set: vec![ProducerData {
            group_name: group.to_string(),
        }],
        ..HeartbeatData::default()
    };
    let body = conveyor_protocol::json::to_vec(&data).expect("heartbeat json");
    RemotingCommand::request(request_code::HEART_BEAT, Default::default()).with_body(body)
}

/// Reads frames until a request (not a response) with `code` arrives; `None` after `limit`.
pub async fn next_request(
    conn: &mut RawConn,
    code: i32,
    limit: Duration,
) -> Option<RemotingCommand> {
    let deadline = Instant::now() + limit;
    loop {
        match conn
            .read(deadline.saturating_duration_since(Instant::now()))
            .await
        {
            Read::Frame(f) if !f.is_response() && f.code == code => return Some(f),
            Read::Frame(_) => continue,
            Read::Timeout => return None,
            Read::Closed => panic!("the broker closed the connection"),
        }
    }
}

/// A minimal `GET path` over HTTP/1.1 with `Connection: close`: (status, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "http read"))??;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no header end"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "no status"))?;
    Ok((status, body.to_string()))
}

/// Milliseconds since the epoch.
#[allow(unused_imports)]
pub use conveyor_protocol::time::now_ms;

/// Waits until `queue`'s max offset reaches `at_least`. A send is acknowledged once appended
/// to the commit log; the consume queue is built by the store's dispatcher a moment later
/// (as RocketMQ's reput service does), so a pull right after a send may not see it yet.
pub async fn wait_max_offset(consumer: &PullConsumer, queue: &MessageQueue, at_least: i64) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let max = consumer.max_offset(queue).await.expect("max offset");
        if max >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "queue {} of {} stuck at max offset {max}, expected {at_least}",
            queue.queue_id,
            queue.topic
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Pulls `queue` from `*offset` on (advancing it) and collects what arrives, until `done`
/// holds for everything collected or `limit` passes (then returns what came anyway).
pub async fn pull_until(
    consumer: &PullConsumer,
    queue: &MessageQueue,
    offset: &mut i64,
    limit: Duration,
    mut done: impl FnMut(&[StoredMessage]) -> bool,
) -> Vec<StoredMessage> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    while !done(&got) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let suspend = left.min(Duration::from_millis(300));
        let r = consumer
            .pull(queue, *offset, 32, suspend)
            .await
            .expect("pull");
        *offset = (*offset).max(r.next_begin_offset);
        got.extend(r.messages);
        if got.is_empty() || !done(&got) {
            // Long polling already waited; a short pause only avoids spinning on retries.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    got
}

/// Pulls `queue` from `*offset` on for `window` and returns whatever arrived meanwhile.
pub async fn pull_for(
    consumer: &PullConsumer,
    queue: &MessageQueue,
    offset: &mut i64,
    window: Duration,
) -> Vec<StoredMessage> {
    pull_until(consumer, queue, offset, window, |_| false).await
}

/// Property `key` of `m`, for assertions.
pub fn prop<'a>(m: &'a StoredMessage, key: &str) -> Option<&'a str> {
    m.properties.get(key)
}

/// The SEND_MESSAGE_V2 header a raw test producer sends (group `PG_raw`, TBW102 template).
pub fn send_header(topic: &str, queue_id: i32) -> conveyor_client::producer::SendHeader {
    conveyor_client::producer::SendHeader {
        producer_group: "PG_raw".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 4,
        queue_id,
        sys_flag: 0,
        born_timestamp: now_ms(),
        flag: 0,
        properties: "WAIT\u{1}true\u{2}TAGS\u{1}raw\u{2}".into(),
        reconsume_times: 0,
        unit_mode: false,
        batch: false,
        max_reconsume_times: None,
        broker_name: Some("broker-a".into()),
    }
}

/// A raw SEND_MESSAGE_V2 request for `topic`/`queue_id` with `body`.
pub fn send_request(topic: &str, queue_id: i32, body: impl Into<bytes::Bytes>) -> RemotingCommand {
    RemotingCommand::request(
        request_code::SEND_MESSAGE_V2,
        send_header(topic, queue_id).to_ext_fields(),
    )
    .with_body(body)
}

/// A raw PULL_MESSAGE request of `group` for `topic`/`queue_id` from `offset` (32 messages, tag
/// `*`, no suspension).
pub fn pull_request(group: &str, topic: &str, queue_id: i32, offset: i64) -> RemotingCommand {
    use conveyor_client::consumer::{pull_sys_flag, PullHeader};
    let h = PullHeader {
        consumer_group: group.into(),
        topic: topic.into(),
        queue_id,
        queue_offset: offset,
        max_msg_nums: 32,
        sys_flag: pull_sys_flag::SUBSCRIPTION,
        commit_offset: 0,
        suspend_timeout_millis: 0,
        subscription: Some("*".into()),
        sub_version: 0,
        expression_type: Some("TAG".into()),
        max_msg_bytes: None,
    };
    RemotingCommand::request(request_code::PULL_MESSAGE, h.to_ext_fields())
}

/// Every message body of `topic`/`queue_id` from offset 0 as `group` pulls it, by queue
/// offset (until a pull finds nothing more).
pub async fn read_queue(
    conn: &mut RawConn,
    group: &str,
    topic: &str,
    queue_id: i32,
) -> std::collections::BTreeMap<i64, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut offset = 0;
    loop {
        let r = conn
            .request(pull_request(group, topic, queue_id, offset))
            .await;
        if r.code != conveyor_protocol::code::response_code::SUCCESS {
            return out;
        }
        for m in conveyor_protocol::message::decode_records(&r.body).expect("records") {
            out.insert(m.queue_offset, m.body.to_vec());
        }
        offset = r.get_i64("nextBeginOffset").expect("nextBeginOffset");
    }
}

/// The value of the unlabelled sample `name` in a /metrics text.
pub fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// The values of every `name{...}` series whose labels include all of `labels`.
pub fn series(text: &str, name: &str, labels: &[&str]) -> Vec<f64> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{'))
                && labels.iter().all(|label| l.contains(label))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}
