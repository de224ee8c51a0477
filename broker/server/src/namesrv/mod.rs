//! The name server: brokers register their topics here, clients ask it for routes
//! (docs/protocol.md §9). All state lives in [`route_info::RouteInfo`]; this module is
//! the request handling and the expiry timer around it.

pub mod kv_config;
pub mod route_info;
pub mod settings;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::{
    normalize_zone, KvTable, RegisterBrokerBody, TopicList, ZONE_MODE, ZONE_NAME,
};
use tokio_util::sync::CancellationToken;

use crate::remoting::{error_response, Connection, Processor};
use kv_config::KvConfig;
use route_info::{Registration, RouteInfo};
use settings::NamesrvSettings;

/// Default time after which a broker that stopped registering is dropped.
pub const BROKER_TIMEOUT: Duration = Duration::from_secs(120);
/// How often expired brokers are looked for (RocketMQ 5.x: 5 s).
const SCAN_INTERVAL: Duration = Duration::from_secs(5);

/// The KV namespace of order-topic configurations (mqadmin `updateOrderConf`).
const ORDER_TOPIC_CONFIG: &str = "ORDER_TOPIC_CONFIG";

/// The name server's request processor.
pub struct NameServer {
    /// Brokers, clusters and topic routes.
    routes: Mutex<RouteInfo>,
    /// RocketMQ's KV configuration, saved with every change.
    kv: KvConfig,
    /// Settings changed at run time by UPDATE_NAMESRV_CONFIG.
    settings: Mutex<NamesrvSettings>,
}

impl NameServer {
    /// A name server with an empty route table, listening on `listen_port`, with the KV
    /// configuration `kv`.
    pub fn new(listen_port: u16, kv: KvConfig) -> Arc<Self> {
        Arc::new(Self {
            routes: Mutex::default(),
            kv,
            settings: Mutex::new(NamesrvSettings::new(listen_port)),
        })
    }

    fn settings(&self) -> NamesrvSettings {
        self.settings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn routes(&self) -> MutexGuard<'_, RouteInfo> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Expires silent brokers until `shutdown`.
    pub async fn run_expiry(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tick = tokio::time::interval(SCAN_INTERVAL);
        loop {
            tokio::select! {
                _ = tick.tick() => { self.routes().expire(Instant::now()); }
                _ = shutdown.cancelled() => return,
            }
        }
    }

    fn register(
        &self,
        conn: &Connection,
        req: &RemotingCommand,
    ) -> Result<RemotingCommand, RemotingCommand> {
        let bad =
            |e: &dyn std::fmt::Display| error_response(req, resp::SYSTEM_ERROR, e.to_string());
        let broker_name = req.get_str("brokerName").map_err(|e| bad(&e))?.to_string();
        let broker_addr = req.get_str("brokerAddr").map_err(|e| bad(&e))?.to_string();
        let cluster = req.get_str("clusterName").map_err(|e| bad(&e))?.to_string();
        let broker_id = req.get_i64("brokerId").map_err(|e| bad(&e))?;
        let ha_server_addr = req
            .get_str_opt("haServerAddr")
            .unwrap_or_default()
            .to_string();
        let timeout = req
            .get_i64_opt("heartbeatTimeoutMillis")
            .map_err(|e| bad(&e))?
            .filter(|t| *t > 0)
            .map_or(BROKER_TIMEOUT, |t| Duration::from_millis(t as u64));
        if req.get_bool_opt("compressed").map_err(|e| bad(&e))? == Some(true) {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                "compressed broker registration bodies are not supported; set compressedRegister=false",
            ));
        }
        let crc = req
            .get_i64_opt("bodyCrc32")
            .map_err(|e| bad(&e))?
            .unwrap_or(0);
        if crc != 0 && i64::from(conveyor_protocol::message::body_crc(&req.body)) != crc {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                "registration body CRC mismatch",
            ));
        }
        let body: RegisterBrokerBody = if req.body.is_empty() {
            RegisterBrokerBody::default()
        } else {
            json::from_slice(&req.body).map_err(|e| bad(&format!("bad registration body: {e}")))?
        };
        let wrapper = body.topic_config_serialize_wrapper;
        let result = self.routes().register(
            Registration {
                master_epoch: req
                    .get_i64_opt("masterEpoch")
                    .map_err(|e| bad(&e))?
                    .unwrap_or(0)
                    .clamp(0, i64::from(u32::MAX)) as u32,
                cluster,
                broker_name,
                broker_addr,
                broker_id,
                ha_server_addr,
                zone: req.get_str_opt(ZONE_NAME).and_then(normalize_zone),
                timeout,
                data_version: wrapper.data_version,
                topics: wrapper.topic_config_table.into_values().collect(),
                connection: Some(conn.id()),
            },
            Instant::now(),
        );
        let mut response = RemotingCommand::response_to(req, resp::SUCCESS)
            .with_ext("haServerAddr", result.ha_server_addr.unwrap_or_default())
            .with_ext("masterAddr", result.master_addr.unwrap_or_default());
        if self.settings().return_order_topic_config_to_broker {
            let order_conf = self.kv.namespace(ORDER_TOPIC_CONFIG);
            response.body = json::to_vec(&KvTable { table: order_conf })
                .map_err(|e| bad(&e))?
                .into();
        }
        Ok(response)
    }

    fn answer(
        &self,
        conn: &Connection,
        req: &RemotingCommand,
    ) -> Result<RemotingCommand, RemotingCommand> {
        let bad =
            |e: &dyn std::fmt::Display| error_response(req, resp::SYSTEM_ERROR, e.to_string());
        let ok = || RemotingCommand::response_to(req, resp::SUCCESS);
        let with_json = |value: &dyn erased::Json| -> Result<RemotingCommand, RemotingCommand> {
            Ok(ok().with_body(value.to_json().map_err(|e| bad(&e))?))
        };
        match req.code {
            rc::REGISTER_BROKER => self.register(conn, req),
            rc::UNREGISTER_BROKER => {
                let addr = req.get_str("brokerAddr").map_err(|e| bad(&e))?;
                self.routes().unregister_by(addr, conn.id());
                Ok(ok())
            }
            rc::GET_ROUTEINFO_BY_TOPIC => {
                let topic = req.get_str("topic").map_err(|e| bad(&e))?;
                let mut route = self.routes().route(topic);
                if let Some(route) = route
                    .as_mut()
                    .filter(|_| self.settings().order_message_enable)
                {
                    route.order_topic_conf = self.kv.namespace(ORDER_TOPIC_CONFIG).remove(topic);
                }
                match route {
                    // A client asking for its zone's route only (RocketMQ's ZoneRouteRPCHook).
                    Some(route) if req.get_bool_opt(ZONE_MODE).ok().flatten() == Some(true) => {
                        match req.get_str_opt(ZONE_NAME).and_then(normalize_zone) {
                            Some(zone) => with_json(&route.in_zone(&zone)),
                            None => with_json(&route),
                        }
                    }
                    Some(route) => with_json(&route),
                    None => Err(error_response(
                        req,
                        resp::TOPIC_NOT_EXIST,
                        format!("No topic route info in name server for the topic: {topic}"),
                    )),
                }
            }
            rc::GET_BROKER_CLUSTER_INFO => with_json(&self.routes().cluster_info()),
            rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER if !self.settings().enable_topic_list => {
                Err(error_response(req, resp::SYSTEM_ERROR, "disable"))
            }
            rc::GET_ALL_TOPIC_LIST_FROM_NAMESERVER => with_json(&TopicList {
                broker_addr: None,
                topic_list: self.routes().topics(),
            }),
            rc::GET_TOPICS_BY_CLUSTER => {
                let cluster = req.get_str("cluster").map_err(|e| bad(&e))?;
                with_json(&TopicList {
                    broker_addr: None,
                    topic_list: self.routes().topics_of_cluster(cluster),
                })
            }
            rc::WIPE_WRITE_PERM_OF_BROKER => {
                let name = req.get_str("brokerName").map_err(|e| bad(&e))?;
                let n = self.routes().wipe_write_perm(name);
                tracing::warn!(broker = name, topics = n, "write permission wiped");
                Ok(ok().with_ext("wipeTopicCount", n))
            }
            rc::ADD_WRITE_PERM_OF_BROKER => {
                let name = req.get_str("brokerName").map_err(|e| bad(&e))?;
                let n = self.routes().add_write_perm(name);
                tracing::info!(broker = name, topics = n, "write permission added back");
                Ok(ok().with_ext("addTopicCount", n))
            }
            rc::DELETE_TOPIC_IN_NAMESRV => {
                let topic = req.get_str("topic").map_err(|e| bad(&e))?;
                let cluster = req.get_str_opt("clusterName").filter(|c| !c.is_empty());
                self.routes().delete_topic(topic, cluster);
                Ok(ok())
            }
            rc::PUT_KV_CONFIG => {
                let ns = req.get_str("namespace").map_err(|e| bad(&e))?;
                let key = req.get_str("key").map_err(|e| bad(&e))?;
                let value = req.get_str("value").map_err(|e| bad(&e))?;
                self.kv
                    .put(ns, key, value)
                    .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
                Ok(ok())
            }
            rc::GET_KV_CONFIG => {
                let ns = req.get_str("namespace").map_err(|e| bad(&e))?;
                let key = req.get_str("key").map_err(|e| bad(&e))?;
                match self.kv.get(ns, key) {
                    Some(v) => Ok(ok().with_ext("value", v)),
                    None => Err(error_response(
                        req,
                        resp::QUERY_NOT_FOUND,
                        format!("No config item, Namespace: {ns} Key: {key}"),
                    )),
                }
            }
            rc::DELETE_KV_CONFIG => {
                let ns = req.get_str("namespace").map_err(|e| bad(&e))?;
                let key = req.get_str("key").map_err(|e| bad(&e))?;
                self.kv
                    .delete(ns, key)
                    .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
                Ok(ok())
            }
            rc::GET_NAMESRV_CONFIG => Ok(ok().with_body(self.settings().to_properties())),
            rc::UPDATE_NAMESRV_CONFIG => {
                let body = String::from_utf8_lossy(&req.body);
                let mut settings = self.settings.lock().unwrap_or_else(|e| e.into_inner());
                settings
                    .update(&body)
                    .map_err(|e| error_response(req, resp::NO_PERMISSION, e.to_string()))?;
                tracing::warn!(settings = ?*settings, "name server settings changed");
                Ok(ok())
            }
            rc::QUERY_DATA_VERSION => Ok(ok().with_ext("changed", "true")),
            _ => Err(crate::remoting::not_supported(req)),
        }
    }
}

/// Lets `answer` serialise route types through one closure.
mod erased {
    pub trait Json {
        fn to_json(&self) -> Result<Vec<u8>, conveyor_protocol::json::JsonError>;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> Result<Vec<u8>, conveyor_protocol::json::JsonError> {
            conveyor_protocol::json::to_vec(self)
        }
    }
}

impl Processor for NameServer {
    async fn handle(
        self: Arc<Self>,
        conn: Connection,
        request: RemotingCommand,
    ) -> Option<RemotingCommand> {
        Some(self.answer(&conn, &request).unwrap_or_else(|e| e))
    }

    fn on_disconnect(&self, conn: &Connection) {
        self.routes().connection_closed(conn.id());
    }
}
