//! The RocketMQ 5.x gRPC endpoint (`apache.rocketmq.v2.MessagingService`, default port
//! 8081 as Apache's proxy), so the 5.x SDKs (Java, Go, Python, Node, Rust, C#) work with
//! Conveyor unchanged. It runs inside the broker process, as the Java proxy's local mode: each
//! call becomes the remoting request the proxy would send (SEND_MESSAGE, POP_MESSAGE,
//! ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, END_TRANSACTION, HEART_BEAT, …) and goes to the
//! broker group that owns the queue ([`upstream`]): this broker in process, another group's
//! master over remoting. So sends, Pop state, retries and dead letters are the remoting
//! clients' own, and remoting and gRPC clients of one group share offsets and in-flight state.
//!
//! Errors are answered in-band (`Status` in the response, gRPC OK), as the proxy does;
//! transport errors only for RPCs not served (PullMessage, offsets, SyncLiteSubscription:
//! UNIMPLEMENTED, as the Java proxy 5.3).

pub mod convert;
pub mod handles;
pub mod incoming;
pub mod renewal;
pub mod renewer;
pub mod session;
pub mod upstream;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use conveyor_grpc_api::tonic::{self, Request, Response};
use conveyor_grpc_api::v2::messaging_service_server::{MessagingService, MessagingServiceServer};
use conveyor_grpc_api::v2::{
    self as pb, settings::PubSub, telemetry_command, Code, FilterType, Status,
};
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::SendMessageHeader;
use conveyor_protocol::message::{decode_records, keys, parse_offset_msg_id, tag_hash_code};
use conveyor_protocol::recall::RecallHandle;
use conveyor_protocol::route::{
    ConsumeFromWhere, ConsumeType, ConsumerData, HeartbeatData, MessageModel, ProducerData,
    SubscriptionData, EXPRESSION_TYPE_SQL92, EXPRESSION_TYPE_TAG,
};
use conveyor_protocol::sysflag;
use conveyor_protocol::time::now_ms;
use futures_util::stream::{self, BoxStream};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use crate::remoting::Processor;
use convert::{checked, name, status};
use handles::{grpc_handle, parse_handle, CALL_TIMEOUT};
use session::{Session, Sessions};
use upstream::Upstream;

/// Default gRPC port (the Java proxy's).
pub const GRPC_PORT: u16 = 8081;
/// Largest request the endpoint decodes: a batch of 4 MiB bodies (the proxy allows 130 MiB).
const MAX_DECODING: usize = 130 << 20;
/// Shortest invisible time a receive may ask for, and the longest (the proxy's limits).
const MIN_INVISIBLE_MS: i64 = 10_000;
const MAX_INVISIBLE_MS: i64 = 12 * 3600 * 1000;
/// Longest long-poll of one receive.
const MAX_LONG_POLL_MS: i64 = 30_000;
/// How long before the client's deadline a held receive answers.
const RECEIVE_MARGIN_MS: i64 = 2_000;
/// Default long-poll when the client says none.
const DEFAULT_LONG_POLL_MS: i64 = 20_000;
/// Where producers without a topic of their own send RocketMQ's default topic template from.
const DEFAULT_TOPIC: &str = "TBW102";

/// How the endpoint serves (`[grpc]` beyond its listen address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcConfig {
    /// Invisible time of a push consumer's message per renewal (ms).
    pub push_invisible_ms: i64,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            push_invisible_ms: renewal::RENEW_INVISIBLE_MS,
        }
    }
}

/// The `MessagingService` implementation.
pub struct MessagingEndpoint {
    /// The broker and the other groups' masters.
    upstream: Arc<Upstream>,
    /// The clients.
    sessions: Arc<Sessions>,
    /// Spreads sends over the queues.
    next_queue: AtomicUsize,
    /// The endpoint's own address (the local side of connections, for the sessions).
    local: SocketAddr,
    /// Its settings.
    config: GrpcConfig,
}

/// Serves the gRPC endpoint on `listener` until `shutdown`.
pub async fn serve(
    listener: TcpListener,
    acceptor: crate::tls::Acceptor,
    broker: Arc<Broker>,
    config: GrpcConfig,
    acl: Option<Arc<crate::acl::Acl>>,
    shutdown: CancellationToken,
) {
    let local = listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], GRPC_PORT)));
    let sessions = Arc::new(Sessions::default());
    let upstream = Arc::new(Upstream::new(broker.clone(), acl));
    let endpoint = MessagingEndpoint {
        upstream: upstream.clone(),
        sessions: sessions.clone(),
        next_queue: AtomicUsize::new(0),
        local,
        config: config.clone(),
    };
    let expiry = {
        let (sessions, upstream, shutdown) = (sessions.clone(), upstream.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        for s in sessions.expire(Instant::now()) {
                            renewer::release(&s, &upstream).await;
                            upstream.broker().on_disconnect(&s.conn);
                            upstream.forget(&s.conn);
                        }
                    }
                    _ = shutdown.cancelled() => return,
                }
            }
        })
    };
    let renewals = tokio::spawn(renewer::run(
        sessions.clone(),
        upstream.clone(),
        config.push_invisible_ms,
        shutdown.clone(),
    ));
    let service = MessagingServiceServer::new(endpoint)
        .max_decoding_message_size(MAX_DECODING)
        .max_encoding_message_size(MAX_DECODING);
    let result = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(60)))
        .add_service(service)
        .serve_with_incoming_shutdown(
            incoming::connections(listener, acceptor, shutdown.clone()),
            shutdown.cancelled_owned(),
        )
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "gRPC endpoint failed");
    }
    expiry.abort();
    renewals.abort();
}

/// The `x-mq-client-id` header, required on every call (CLIENT_ID_REQUIRED otherwise).
fn client_id<T>(req: &Request<T>) -> Result<String, Status> {
    req.metadata()
        .get("x-mq-client-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .ok_or_else(|| status(Code::ClientIdRequired, "x-mq-client-id is required"))
}

/// The time left before the client's deadline (`grpc-timeout`), if it set one.
fn deadline<T>(req: &Request<T>) -> Option<Duration> {
    let v = req.metadata().get("grpc-timeout")?.to_str().ok()?;
    let (n, unit) = v.split_at(v.len().checked_sub(1)?);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// How long a receive may hold before it answers: what the client asked for, but always
/// answered before its deadline (a pop answered after the client gave up would leave its
/// messages invisible until their time passes).
fn hold_ms(asked: i64, deadline: Option<Duration>) -> i64 {
    let room = deadline.map_or(i64::MAX, |d| d.as_millis() as i64 - RECEIVE_MARGIN_MS);
    asked.min(room).clamp(0, MAX_LONG_POLL_MS)
}

fn peer<T>(req: &Request<T>) -> SocketAddr {
    req.remote_addr()
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 0)))
}

/// The handle an answer for a message goes out with: the one its last renewal gave if the
/// endpoint renewed it (which then stops), else the client's.
async fn latest_handle(session: &Session, group: &str, message_id: &str, given: &str) -> String {
    session
        .renewals()
        .lock()
        .await
        .take(group, message_id)
        .map_or_else(|| given.to_string(), |r| r.handle)
}

/// Starts renewing the messages a push consumer just received.
async fn track_renewals(session: &Session, group: &str, topic: &str, messages: &[pb::Message]) {
    let now = now_ms();
    let mut renewals = session.renewals().lock().await;
    for m in messages {
        let Some(sp) = &m.system_properties else {
            continue;
        };
        let Some(handle) = sp.receipt_handle.as_deref() else {
            continue;
        };
        let Ok((h, _)) = parse_handle(handle) else {
            continue;
        };
        renewals.track(
            group,
            &sp.message_id,
            renewal::Renewal {
                topic: topic.to_string(),
                handle: handle.to_string(),
                revive_at: h.revive_time(),
                delivered_at: now,
            },
        );
    }
}

type Reply<T> = Result<Response<T>, tonic::Status>;

impl MessagingEndpoint {
    /// The caller's session; with ACL on, only once its credentials hold (each call is
    /// authenticated, and the session's requests are authorized as that user).
    fn session<T>(&self, req: &Request<T>) -> Result<Arc<Session>, Status> {
        let id = client_id(req)?;
        let subject = match self.upstream.acl() {
            Some(acl) => {
                let header = |name: &str| req.metadata().get(name).and_then(|v| v.to_str().ok());
                let subject = acl
                    .authenticate_grpc(
                        peer(req).ip(),
                        header("authorization"),
                        header("x-mq-date-time"),
                    )
                    .map_err(|why| status(Code::Unauthorized, why))?;
                Some(subject)
            }
            None => None,
        };
        let session = self.sessions.get_or_create(
            &id,
            peer(req),
            self.local,
            self.upstream.broker().broker_name(),
        );
        if let Some(subject) = subject {
            self.upstream.admit(&session.conn, subject);
        }
        Ok(session)
    }

    fn group_settings(&self, group: &str) -> (bool, i32) {
        group_settings(self.upstream.broker(), group)
    }

    /// Registers the session's groups with the broker (HEART_BEAT), as its settings say.
    async fn heartbeat(&self, session: &Session) -> Result<(), Status> {
        let Some(settings) = session.settings() else {
            return Err(status(
                Code::UnrecognizedClientType,
                "no settings were sent on the Telemetry stream yet",
            ));
        };
        let mut data = HeartbeatData {
            client_id: session.client_id.clone(),
            ..Default::default()
        };
        match settings.pub_sub {
            Some(PubSub::Publishing(p)) => {
                // The proxy's producer group of a gRPC producer is the topic (transactions
                // are checked back with a producer of that group).
                data.producer_data_set = p
                    .topics
                    .iter()
                    .map(|t| ProducerData {
                        group_name: t.name.clone(),
                    })
                    .collect();
            }
            Some(PubSub::Subscription(s)) => {
                let group = name(&s.group).to_string();
                // The group's retry topic too, as every remoting clustering consumer
                // subscribes it: a heartbeat replaces the group's subscriptions, and a group
                // shared with remoting consumers must keep what they consume.
                let subscription_data_set = s
                    .subscriptions
                    .iter()
                    .map(|e| subscription(name(&e.topic), e.expression.as_ref()))
                    .chain(std::iter::once(subscription(
                        &format!("%RETRY%{group}"),
                        None,
                    )))
                    .collect();
                data.consumer_data_set = vec![ConsumerData {
                    consume_from_where: ConsumeFromWhere::LastOffset,
                    consume_type: ConsumeType::Pop,
                    group_name: group,
                    message_model: MessageModel::Clustering,
                    subscription_data_set,
                    unit_mode: false,
                }];
            }
            None => return Ok(()),
        }
        let body = serde_json::to_vec(&data).unwrap_or_default();
        let r = self
            .upstream
            .call(
                "",
                &session.conn,
                RemotingCommand::request(rc::HEART_BEAT, Default::default()).with_body(body),
                CALL_TIMEOUT,
            )
            .await?;
        checked(&r)
    }

    /// The queue a message is sent to: a group's messages always to the same queue, others
    /// spread; this broker's own queues first (no hop), else those of the route.
    async fn send_target(&self, topic: &str, group: Option<&str>) -> Result<(String, i32), Status> {
        let broker = self.upstream.broker();
        let pick = |n: i32| -> i32 {
            match group {
                Some(g) => (convert::java_hash(g).unsigned_abs() % n.max(1) as u32) as i32,
                None => {
                    (self.next_queue.fetch_add(1, Ordering::Relaxed) % n.max(1) as usize) as i32
                }
            }
        };
        if let Some(c) = broker.topic_config(topic) {
            if c.perm & conveyor_protocol::route::perm::WRITE != 0 && c.write_queue_nums > 0 {
                return Ok((broker.broker_name().to_string(), pick(c.write_queue_nums)));
            }
        }
        let route = self.upstream.route(topic, false).await?;
        let writable: Vec<(String, i32)> = route
            .queue_datas
            .iter()
            .filter(|q| {
                q.perm & conveyor_protocol::route::perm::WRITE != 0 && q.write_queue_nums > 0
            })
            .map(|q| (q.broker_name.clone(), q.write_queue_nums))
            .collect();
        if writable.is_empty() {
            return Err(status(
                Code::Forbidden,
                format!("topic {topic} has no writable queue"),
            ));
        }
        let (b, n) = &writable[pick(writable.len() as i32) as usize % writable.len()];
        Ok((b.clone(), pick(*n)))
    }

    async fn send_one(&self, session: &Session, m: &pb::Message) -> pb::SendResultEntry {
        let message_id = m
            .system_properties
            .as_ref()
            .map(|s| s.message_id.clone())
            .unwrap_or_default();
        let entry = |st: Status| pb::SendResultEntry {
            status: Some(st),
            message_id: message_id.clone(),
            ..Default::default()
        };
        let out = match convert::outbound(m, now_ms()) {
            Ok(o) => o,
            Err(st) => return entry(st),
        };
        let topic = name(&m.topic).to_string();
        let (broker_name, queue_id) =
            match self.send_target(&topic, out.message_group.as_deref()).await {
                Ok(t) => t,
                Err(st) => return entry(st),
            };
        let properties = String::from_utf8_lossy(&out.properties.encode()).into_owned();
        let header = SendMessageHeader {
            producer_group: topic.clone(),
            topic: topic.clone(),
            default_topic: DEFAULT_TOPIC.to_string(),
            default_topic_queue_nums: 4,
            queue_id,
            sys_flag: out.sys_flag,
            born_timestamp: out.born_timestamp,
            flag: 0,
            properties,
            reconsume_times: 0,
            unit_mode: false,
            max_reconsume_times: None,
            batch: false,
            broker_name: None,
        };
        let request = RemotingCommand::request(rc::SEND_MESSAGE_V2, header.to_ext_fields())
            .with_body(m.body.clone());
        let r = match self
            .upstream
            .call(&broker_name, &session.conn, request, CALL_TIMEOUT)
            .await
        {
            Ok(r) => r,
            Err(st) => return entry(st),
        };
        if let Err(st) = checked(&r) {
            return entry(st);
        }
        let offset = r
            .get_str_opt("queueOffset")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let transaction_id = if out.transactional {
            let phys = r
                .get_str_opt("msgId")
                .and_then(parse_offset_msg_id)
                .map_or(0, |(_, o)| o);
            convert::transaction_id(&broker_name, phys, offset)
        } else {
            String::new()
        };
        pb::SendResultEntry {
            status: Some(convert::ok()),
            message_id: message_id.clone(),
            transaction_id,
            offset,
            recall_handle: r
                .get_str_opt("recallHandle")
                .unwrap_or_default()
                .to_string(),
        }
    }
}

/// A subscription as a remoting heartbeat carries it.
fn subscription(topic: &str, e: Option<&pb::FilterExpression>) -> SubscriptionData {
    let sql = e.is_some_and(|e| e.r#type == FilterType::Sql as i32);
    let expression = e.map_or("*", |e| e.expression.as_str()).trim();
    let expression = if expression.is_empty() {
        "*"
    } else {
        expression
    };
    let tags: Vec<String> = if sql || expression == "*" {
        Vec::new()
    } else {
        expression
            .split("||")
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect()
    };
    SubscriptionData {
        class_filter_mode: false,
        code_set: tags.iter().map(|t| tag_hash_code(t) as i32).collect(),
        expression_type: if sql {
            EXPRESSION_TYPE_SQL92
        } else {
            EXPRESSION_TYPE_TAG
        }
        .to_string(),
        sub_string: expression.to_string(),
        sub_version: now_ms(),
        tags_set: tags,
        topic: topic.to_string(),
    }
}

/// A one-shot stream.
fn once<T: Send + 'static>(items: Vec<T>) -> BoxStream<'static, Result<T, tonic::Status>> {
    Box::pin(stream::iter(items.into_iter().map(Ok)))
}

#[tonic::async_trait]
impl MessagingService for MessagingEndpoint {
    async fn query_route(
        &self,
        request: Request<pb::QueryRouteRequest>,
    ) -> Reply<pb::QueryRouteResponse> {
        let answer = async {
            let _session = self.session(&request)?;
            let req = request.get_ref();
            let topic = name(&req.topic);
            let route = self.upstream.route(topic, true).await?;
            let endpoints = req
                .endpoints
                .clone()
                .filter(|e| !e.addresses.is_empty())
                .unwrap_or_else(|| {
                    convert::endpoints(&[(self.local.ip().to_string(), self.local.port())])
                });
            let broker = self.upstream.broker();
            let attribute = broker
                .topic_config(topic)
                .and_then(|c| c.attributes.get(convert::MESSAGE_TYPE_ATTRIBUTE).cloned());
            let attribute = attribute.as_deref().map(|a| a.trim_start_matches('+'));
            let queues = convert::message_queues(topic, &route, &endpoints, &|_| {
                convert::accepted_types(attribute)
            });
            Ok::<_, Status>(queues)
        }
        .await;
        Ok(Response::new(match answer {
            Ok(message_queues) => pb::QueryRouteResponse {
                status: Some(convert::ok()),
                message_queues,
            },
            Err(st) => pb::QueryRouteResponse {
                status: Some(st),
                message_queues: Vec::new(),
            },
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<pb::HeartbeatRequest>,
    ) -> Reply<pb::HeartbeatResponse> {
        let answer = async {
            let session = self.session(&request)?;
            self.heartbeat(&session).await
        }
        .await;
        Ok(Response::new(pb::HeartbeatResponse {
            status: Some(answer.err().unwrap_or_else(convert::ok)),
        }))
    }

    async fn send_message(
        &self,
        request: Request<pb::SendMessageRequest>,
    ) -> Reply<pb::SendMessageResponse> {
        let session = match self.session(&request) {
            Ok(s) => s,
            Err(st) => {
                return Ok(Response::new(pb::SendMessageResponse {
                    status: Some(st),
                    entries: Vec::new(),
                }))
            }
        };
        let messages = &request.get_ref().messages;
        let topics: std::collections::HashSet<&str> =
            messages.iter().map(|m| name(&m.topic)).collect();
        if messages.is_empty() || topics.len() != 1 {
            return Ok(Response::new(pb::SendMessageResponse {
                status: Some(status(
                    Code::MessageCorrupted,
                    "a send needs messages, all of one topic",
                )),
                entries: Vec::new(),
            }));
        }
        let mut entries = Vec::with_capacity(messages.len());
        for m in messages {
            entries.push(self.send_one(&session, m).await);
        }
        let codes: std::collections::HashSet<i32> = entries
            .iter()
            .map(|e| e.status.as_ref().map_or(0, |s| s.code))
            .collect();
        let overall = if codes.len() == 1 {
            entries[0].status.clone()
        } else {
            Some(status(Code::MultipleResults, "entries differ"))
        };
        Ok(Response::new(pb::SendMessageResponse {
            status: overall,
            entries,
        }))
    }

    async fn query_assignment(
        &self,
        request: Request<pb::QueryAssignmentRequest>,
    ) -> Reply<pb::QueryAssignmentResponse> {
        let answer = async {
            let _session = self.session(&request)?;
            let req = request.get_ref();
            let (topic, group) = (name(&req.topic), name(&req.group));
            let route = self.upstream.route(topic, false).await?;
            let endpoints = req
                .endpoints
                .clone()
                .filter(|e| !e.addresses.is_empty())
                .unwrap_or_else(|| {
                    convert::endpoints(&[(self.local.ip().to_string(), self.local.port())])
                });
            let (fifo, _) = self.group_settings(group);
            let queues = convert::message_queues(topic, &route, &endpoints, &|_| Vec::new());
            let readable: Vec<pb::MessageQueue> = queues
                .into_iter()
                .filter(|q| {
                    q.permission == pb::Permission::Read as i32
                        || q.permission == pb::Permission::ReadWrite as i32
                })
                .collect();
            if readable.is_empty() {
                return Err(status(
                    Code::Forbidden,
                    format!("topic {topic} has no readable queue"),
                ));
            }
            let assignments: Vec<pb::Assignment> = if fifo {
                readable
                    .into_iter()
                    .map(|q| pb::Assignment {
                        message_queue: Some(q),
                    })
                    .collect()
            } else {
                let mut seen = std::collections::HashSet::new();
                readable
                    .into_iter()
                    .filter(|q| seen.insert(q.broker.as_ref().map(|b| b.name.clone())))
                    .map(|q| pb::Assignment {
                        message_queue: Some(pb::MessageQueue {
                            id: -1,
                            permission: pb::Permission::ReadWrite as i32,
                            ..q
                        }),
                    })
                    .collect()
            };
            Ok(assignments)
        }
        .await;
        Ok(Response::new(match answer {
            Ok(assignments) => pb::QueryAssignmentResponse {
                status: Some(convert::ok()),
                assignments,
            },
            Err(st) => pb::QueryAssignmentResponse {
                status: Some(st),
                assignments: Vec::new(),
            },
        }))
    }

    type ReceiveMessageStream =
        BoxStream<'static, Result<pb::ReceiveMessageResponse, tonic::Status>>;

    async fn receive_message(
        &self,
        request: Request<pb::ReceiveMessageRequest>,
    ) -> Reply<Self::ReceiveMessageStream> {
        use pb::receive_message_response::Content;
        let answer = async {
            let session = self.session(&request)?;
            let req = request.get_ref();
            let group = name(&req.group).to_string();
            let mq = req.message_queue.clone().unwrap_or_default();
            let topic = name(&mq.topic).to_string();
            let broker_name = mq.broker.as_ref().map_or(String::new(), |b| b.name.clone());
            let invisible_ms = match &req.invisible_duration {
                Some(d) => convert::duration_ms(d),
                None if req.auto_renew => self.config.push_invisible_ms,
                None => {
                    return Err(status(
                        Code::IllegalInvisibleTime,
                        "invisible duration is required",
                    ))
                }
            };
            if !req.auto_renew && !(MIN_INVISIBLE_MS..=MAX_INVISIBLE_MS).contains(&invisible_ms) {
                return Err(status(
                    Code::IllegalInvisibleTime,
                    format!("invisible duration {invisible_ms} ms is outside 10 s … 12 h"),
                ));
            }
            let long_poll = req
                .long_polling_timeout
                .as_ref()
                .map(convert::duration_ms)
                .or_else(|| match session.settings().and_then(|s| s.pub_sub) {
                    Some(PubSub::Subscription(s)) => {
                        s.long_polling_timeout.as_ref().map(convert::duration_ms)
                    }
                    _ => None,
                })
                .unwrap_or(DEFAULT_LONG_POLL_MS);
            let long_poll = hold_ms(long_poll, deadline(&request));
            let (exp, sql) = match &req.filter_expression {
                Some(f) => (f.expression.clone(), f.r#type == FilterType::Sql as i32),
                None => ("*".to_string(), false),
            };
            if sql {
                return Err(status(
                    Code::IllegalFilterExpression,
                    "SQL92 filtering is not supported by this broker; filter by tag",
                ));
            }
            let (fifo, _) = self.group_settings(&group);
            let batch = req
                .batch_size
                .clamp(1, crate::broker::pop::MAX_POP_BATCH as i32);
            let pop = RemotingCommand::request(rc::POP_MESSAGE, Default::default())
                .with_ext("consumerGroup", group.as_str())
                .with_ext("topic", topic.as_str())
                // Like the Apache proxy (its "broker acting" queue), a receive pops every queue
                // of the broker, whatever queue of the route the client picked: a SimpleConsumer
                // round-robins over the route's queues, and a pop of only that one queue would
                // wait its whole long poll while messages sit in the others.
                .with_ext("queueId", -1)
                .with_ext("maxMsgNums", batch)
                .with_ext("invisibleTime", invisible_ms)
                .with_ext("pollTime", long_poll)
                .with_ext("bornTime", now_ms())
                .with_ext("initMode", 1)
                .with_ext("expType", EXPRESSION_TYPE_TAG)
                .with_ext(
                    "exp",
                    if exp.trim().is_empty() {
                        "*"
                    } else {
                        exp.trim()
                    },
                )
                .with_ext("order", fifo);
            let timeout = Duration::from_millis(long_poll as u64) + CALL_TIMEOUT;
            let r = self
                .upstream
                .call(&broker_name, &session.conn, pop, timeout)
                .await?;
            if r.code == resp::POLLING_TIMEOUT {
                return Ok(Vec::new());
            }
            checked(&r)?;
            let messages = popped(&r, &topic, &broker_name, invisible_ms)?;
            if req.auto_renew {
                track_renewals(&session, &group, &topic, &messages).await;
            }
            Ok(messages)
        }
        .await;
        let now = Content::DeliveryTimestamp(convert::timestamp(now_ms()));
        let items: Vec<pb::ReceiveMessageResponse> = match answer {
            Ok(messages) if messages.is_empty() => vec![
                Content::Status(status(Code::MessageNotFound, "no new message")),
                now,
            ]
            .into_iter()
            .map(|c| pb::ReceiveMessageResponse { content: Some(c) })
            .collect(),
            Ok(messages) => std::iter::once(Content::Status(convert::ok()))
                .chain(messages.into_iter().map(Content::Message))
                .chain(std::iter::once(now))
                .map(|c| pb::ReceiveMessageResponse { content: Some(c) })
                .collect(),
            Err(st) => vec![pb::ReceiveMessageResponse {
                content: Some(Content::Status(st)),
            }],
        };
        Ok(Response::new(once(items)))
    }

    async fn ack_message(
        &self,
        request: Request<pb::AckMessageRequest>,
    ) -> Reply<pb::AckMessageResponse> {
        let session = match self.session(&request) {
            Ok(s) => s,
            Err(st) => {
                return Ok(Response::new(pb::AckMessageResponse {
                    status: Some(st),
                    entries: Vec::new(),
                }))
            }
        };
        let req = request.get_ref();
        let (group, topic) = (name(&req.group), name(&req.topic));
        let mut entries = Vec::with_capacity(req.entries.len());
        for e in &req.entries {
            let handle = latest_handle(&session, group, &e.message_id, &e.receipt_handle).await;
            let outcome = handles::ack(&self.upstream, &session.conn, group, topic, &handle).await;
            entries.push(pb::AckMessageResultEntry {
                message_id: e.message_id.clone(),
                receipt_handle: e.receipt_handle.clone(),
                status: Some(outcome.err().unwrap_or_else(convert::ok)),
            });
        }
        let codes: std::collections::HashSet<i32> = entries
            .iter()
            .map(|e| e.status.as_ref().map_or(0, |s| s.code))
            .collect();
        let overall = match (codes.len(), entries.first()) {
            (1, Some(e)) => e.status.clone(),
            (0, _) => Some(convert::ok()),
            _ => Some(status(Code::MultipleResults, "entries differ")),
        };
        Ok(Response::new(pb::AckMessageResponse {
            status: overall,
            entries,
        }))
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<pb::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Reply<pb::ForwardMessageToDeadLetterQueueResponse> {
        let answer = async {
            let session = self.session(&request)?;
            let req = request.get_ref();
            let (group, topic) = (name(&req.group), name(&req.topic));
            let handle = latest_handle(&session, group, &req.message_id, &req.receipt_handle).await;
            let (h, phys) = parse_handle(&handle)?;
            let phys = phys.ok_or_else(|| {
                status(
                    Code::InvalidReceiptHandle,
                    "the receipt handle carries no commit-log offset",
                )
            })?;
            let back = RemotingCommand::request(rc::CONSUMER_SEND_MSG_BACK, Default::default())
                .with_ext("offset", phys)
                .with_ext("group", group)
                .with_ext("delayLevel", -1)
                .with_ext("originMsgId", req.message_id.as_str())
                .with_ext("maxReconsumeTimes", (req.max_delivery_attempts - 1).max(0));
            let r = self
                .upstream
                .call(&h.broker_name, &session.conn, back, CALL_TIMEOUT)
                .await?;
            checked(&r)?;
            handles::ack(&self.upstream, &session.conn, group, topic, &handle).await
        }
        .await;
        Ok(Response::new(pb::ForwardMessageToDeadLetterQueueResponse {
            status: Some(answer.err().unwrap_or_else(convert::ok)),
        }))
    }

    type PullMessageStream = BoxStream<'static, Result<pb::PullMessageResponse, tonic::Status>>;

    async fn pull_message(
        &self,
        _: Request<pb::PullMessageRequest>,
    ) -> Reply<Self::PullMessageStream> {
        Err(tonic::Status::unimplemented("PullMessage is not served (as by RocketMQ's proxy): use SimpleConsumer or PushConsumer"))
    }

    async fn update_offset(
        &self,
        _: Request<pb::UpdateOffsetRequest>,
    ) -> Reply<pb::UpdateOffsetResponse> {
        Err(tonic::Status::unimplemented(
            "UpdateOffset is not served (as by RocketMQ's proxy)",
        ))
    }

    async fn get_offset(&self, _: Request<pb::GetOffsetRequest>) -> Reply<pb::GetOffsetResponse> {
        Err(tonic::Status::unimplemented(
            "GetOffset is not served (as by RocketMQ's proxy)",
        ))
    }

    async fn query_offset(
        &self,
        _: Request<pb::QueryOffsetRequest>,
    ) -> Reply<pb::QueryOffsetResponse> {
        Err(tonic::Status::unimplemented(
            "QueryOffset is not served (as by RocketMQ's proxy)",
        ))
    }

    async fn end_transaction(
        &self,
        request: Request<pb::EndTransactionRequest>,
    ) -> Reply<pb::EndTransactionResponse> {
        let answer = async {
            let session = self.session(&request)?;
            let req = request.get_ref();
            let (broker_name, phys, half) = convert::parse_transaction_id(&req.transaction_id)
                .ok_or_else(|| {
                    status(
                        Code::InvalidTransactionId,
                        format!(
                            "transaction id {:?} is not one of this endpoint's",
                            req.transaction_id
                        ),
                    )
                })?;
            let decision = match pb::TransactionResolution::try_from(req.resolution) {
                Ok(pb::TransactionResolution::Commit) => sysflag::TRANSACTION_COMMIT_TYPE,
                Ok(pb::TransactionResolution::Rollback) => sysflag::TRANSACTION_ROLLBACK_TYPE,
                _ => sysflag::TRANSACTION_NOT_TYPE,
            };
            let from_check = req.source == pb::TransactionSource::SourceServerCheck as i32;
            let end = RemotingCommand::request(rc::END_TRANSACTION, Default::default())
                .with_ext("producerGroup", name(&req.topic))
                .with_ext("tranStateTableOffset", half)
                .with_ext("commitLogOffset", phys)
                .with_ext("commitOrRollback", decision)
                .with_ext("fromTransactionCheck", from_check)
                .with_ext("msgId", req.message_id.as_str())
                .with_ext("transactionId", req.message_id.as_str());
            let r = self
                .upstream
                .call(broker_name, &session.conn, end, CALL_TIMEOUT)
                .await?;
            checked(&r)
        }
        .await;
        Ok(Response::new(pb::EndTransactionResponse {
            status: Some(answer.err().unwrap_or_else(convert::ok)),
        }))
    }

    type TelemetryStream = BoxStream<'static, Result<pb::TelemetryCommand, tonic::Status>>;

    async fn telemetry(
        &self,
        request: Request<tonic::Streaming<pb::TelemetryCommand>>,
    ) -> Reply<Self::TelemetryStream> {
        let session = self
            .session(&request)
            .map_err(|st| tonic::Status::invalid_argument(st.message))?;
        let (tx, rx) = mpsc::channel(64);
        session.set_telemetry(tx.clone());
        let mut inbound = request.into_inner();
        let broker = self.upstream.broker().clone();
        tokio::spawn(async move {
            while let Ok(Some(cmd)) = inbound.message().await {
                session.touch();
                match cmd.command {
                    Some(telemetry_command::Command::Settings(s)) => {
                        let (orderly, attempts) = match &s.pub_sub {
                            Some(PubSub::Subscription(sub)) => {
                                group_settings(&broker, name(&sub.group))
                            }
                            _ => (false, 17),
                        };
                        let answer = convert::answer_settings(&s, orderly, attempts);
                        session.set_settings(s);
                        let reply = pb::TelemetryCommand {
                            status: Some(convert::ok()),
                            command: Some(telemetry_command::Command::Settings(answer)),
                        };
                        if tx.send(Ok(reply)).await.is_err() {
                            return;
                        }
                    }
                    Some(other) => tracing::debug!(
                        client = session.client_id,
                        ?other,
                        "telemetry command from a client"
                    ),
                    None => {}
                }
            }
        });
        Ok(Response::new(Box::pin(stream::unfold(
            rx,
            |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
        ))))
    }

    async fn notify_client_termination(
        &self,
        request: Request<pb::NotifyClientTerminationRequest>,
    ) -> Reply<pb::NotifyClientTerminationResponse> {
        let answer = match client_id(&request) {
            Ok(id) => {
                if let Some(s) = self.sessions.remove(&id) {
                    renewer::release(&s, &self.upstream).await;
                    self.upstream.broker().on_disconnect(&s.conn);
                }
                Ok(())
            }
            Err(st) => Err(st),
        };
        Ok(Response::new(pb::NotifyClientTerminationResponse {
            status: Some(answer.err().unwrap_or_else(convert::ok)),
        }))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<pb::ChangeInvisibleDurationRequest>,
    ) -> Reply<pb::ChangeInvisibleDurationResponse> {
        let answer = async {
            let session = self.session(&request)?;
            let req = request.get_ref();
            let (group, topic) = (name(&req.group), name(&req.topic));
            let handle = latest_handle(&session, group, &req.message_id, &req.receipt_handle).await;
            let (h, _) = parse_handle(&handle)?;
            if h.revive_time() < now_ms() {
                return Err(status(
                    Code::InvalidReceiptHandle,
                    "the receipt handle is expired",
                ));
            }
            let invisible = req
                .invisible_duration
                .as_ref()
                .map_or(0, convert::duration_ms);
            if !(0..=MAX_INVISIBLE_MS).contains(&invisible) {
                return Err(status(
                    Code::IllegalInvisibleTime,
                    format!("invisible duration {invisible} ms is outside 0 … 12 h"),
                ));
            }
            handles::change_invisible(
                &self.upstream,
                &session.conn,
                group,
                topic,
                &handle,
                invisible,
            )
            .await
            .map(|(handle, _)| handle)
        }
        .await;
        Ok(Response::new(match answer {
            Ok(receipt_handle) => pb::ChangeInvisibleDurationResponse {
                status: Some(convert::ok()),
                receipt_handle,
            },
            Err(st) => pb::ChangeInvisibleDurationResponse {
                status: Some(st),
                receipt_handle: String::new(),
            },
        }))
    }

    async fn recall_message(
        &self,
        request: Request<pb::RecallMessageRequest>,
    ) -> Reply<pb::RecallMessageResponse> {
        let answer = async {
            let session = self.session(&request)?;
            let req = request.get_ref();
            // The handle names the group that holds the message (as the proxy routes it).
            let handle = RecallHandle::decode(&req.recall_handle)
                .map_err(|e| status(Code::BadRequest, e.to_string()))?;
            let recall = RemotingCommand::request(rc::RECALL_MESSAGE, Default::default())
                .with_ext("topic", name(&req.topic))
                .with_ext("producerGroup", name(&req.topic))
                .with_ext("recallHandle", req.recall_handle.as_str());
            let r = self
                .upstream
                .call(&handle.broker_name, &session.conn, recall, CALL_TIMEOUT)
                .await?;
            checked(&r)?;
            Ok::<_, Status>(r.get_str_opt("msgId").unwrap_or_default().to_string())
        }
        .await;
        Ok(Response::new(match answer {
            Ok(message_id) => pb::RecallMessageResponse {
                status: Some(convert::ok()),
                message_id,
            },
            Err(st) => pb::RecallMessageResponse {
                status: Some(st),
                message_id: String::new(),
            },
        }))
    }

    async fn sync_lite_subscription(
        &self,
        _: Request<pb::SyncLiteSubscriptionRequest>,
    ) -> Reply<pb::SyncLiteSubscriptionResponse> {
        Err(tonic::Status::unimplemented("lite topics are not served"))
    }
}

/// A group's order flag and max delivery attempts (retryMaxTimes + 1), RocketMQ's defaults
/// for a group that does not exist.
fn group_settings(broker: &Broker, group: &str) -> (bool, i32) {
    broker.group_config(group).map_or((false, 17), |g| {
        (g.consume_message_orderly, g.retry_max_times + 1)
    })
}

/// The gRPC messages of a POP answer, each with its receipt handle (built from the answer's
/// offset lists as RocketMQ's client builds it, or the record's POP_CK for retried ones).
fn popped(
    r: &RemotingCommand,
    topic: &str,
    broker_name: &str,
    invisible_ms: i64,
) -> Result<Vec<pb::Message>, Status> {
    let field = |k: &str| r.get_str_opt(k).unwrap_or_default().to_string();
    let info = |k: &str| -> std::collections::HashMap<String, String> {
        field(k)
            .split(';')
            .filter_map(|e| {
                let p: Vec<&str> = e.split(' ').collect();
                (p.len() == 3).then(|| (format!("{}@{}", p[0], p[1]), p[2].to_string()))
            })
            .collect()
    };
    let (starts, offsets) = (info("startOffsetInfo"), info("msgOffsetInfo"));
    let (pop_time, invisible, revive) =
        (field("popTime"), field("invisibleTime"), field("reviveQid"));
    let records = decode_records(&r.body)
        .map_err(|e| status(Code::InternalServerError, format!("pop answer: {e}")))?;
    let mut out = Vec::with_capacity(records.len());
    for m in records {
        let handle = match m.properties.get(keys::POP_CK) {
            Some(ck) => ck.to_string(),
            None => {
                let key = format!("0@{}", m.queue_id);
                let start = starts.get(&key).ok_or_else(|| {
                    status(
                        Code::InternalServerError,
                        "pop answer without start offsets",
                    )
                })?;
                if offsets
                    .get(&key)
                    .is_none_or(|l| !l.split(',').any(|o| o == m.queue_offset.to_string()))
                {
                    return Err(status(
                        Code::InternalServerError,
                        "pop answer without the message's offset",
                    ));
                }
                format!(
                    "{start} {pop_time} {invisible} {revive} 0 {broker_name} {} {}",
                    m.queue_id, m.queue_offset
                )
            }
        };
        let handle = grpc_handle(&handle, m.physical_offset);
        out.push(convert::inbound(
            &m,
            topic,
            Some(handle),
            Some(invisible_ms),
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_end_before_the_deadline_and_tag_filters_become_subscriptions() {
        assert_eq!(hold_ms(20_000, Some(Duration::from_millis(9_999))), 7_999);
        assert_eq!(hold_ms(5_000, None), 5_000);
        assert_eq!(hold_ms(5_000, Some(Duration::from_millis(500))), 0);
        let s = subscription(
            "T",
            Some(&pb::FilterExpression {
                r#type: FilterType::Tag as i32,
                expression: "A || B".into(),
            }),
        );
        assert_eq!(s.tags_set, ["A", "B"]);
        assert_eq!(s.sub_string, "A || B");
        let all = subscription("T", None);
        assert!(all.tags_set.is_empty() && all.sub_string == "*");
    }
}
