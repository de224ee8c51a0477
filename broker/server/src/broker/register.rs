//! NameServerRegistrar (RocketMQ's BrokerOuterAPI registration): tells every name server
//! which topics this broker serves (docs/protocol.md §9.2, §9.3) — every interval, right
//! after a topic is created or deleted, and an UNREGISTER_BROKER on clean shutdown. Routes
//! clients see come from here, so whoever changes the topic table asks for a registration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::{
    RegisterBrokerBody, TopicConfigSerializeWrapper, TopicRouteData, ZONE_NAME,
};

use super::config::BrokerConfig;
use super::permission::BrokerPermission;
use super::topics::TopicConfigManager;
use crate::ha::Replication;
use crate::remoting::Link;

/// RocketMQ's register timeout.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(24);

/// Registration with the name servers.
pub struct NameServerRegistrar {
    /// `clusterName`.
    cluster_name: String,
    /// `brokerName`.
    broker_name: String,
    /// `brokerAddr`: the address clients use.
    advertised_addr: String,
    /// `haServerAddr`: where slaves reach this broker's replication stream.
    ha_addr: String,
    /// Told the master's replication address the name server answers a slave with.
    replication: Arc<Replication>,
    /// One link per name server.
    namesrvs: Vec<Link>,
    /// The table whose topics are registered.
    topics: Arc<TopicConfigManager>,
    /// Caps the registered topics' permissions (a drained broker is read-only).
    permission: Arc<BrokerPermission>,
    /// True once a registration with some name server succeeded (readiness).
    registered: AtomicBool,
    /// A background registration is queued and has not started yet: topic changes meanwhile
    /// ride on it instead of starting one registration each.
    pending: AtomicBool,
}

impl NameServerRegistrar {
    /// A registrar for this broker's identity; links connect on first use.
    pub fn new(
        config: &BrokerConfig,
        topics: Arc<TopicConfigManager>,
        replication: Arc<Replication>,
        permission: Arc<BrokerPermission>,
    ) -> Self {
        Self {
            cluster_name: config.cluster_name.clone(),
            broker_name: config.broker_name.clone(),
            advertised_addr: config.advertised_addr.clone(),
            ha_addr: config.replication.advertised_addr.clone(),
            replication,
            namesrvs: config.namesrv_addrs.iter().map(Link::new).collect(),
            topics,
            permission,
            registered: AtomicBool::new(false),
            pending: AtomicBool::new(false),
        }
    }

    /// The route of `topic` as the name servers have it (the first that answers):
    /// `Ok(None)` when they know no such topic. Pop load balancing and the gRPC endpoint's
    /// routes span every broker group, which only the name servers know.
    pub async fn topic_route(&self, topic: &str) -> Result<Option<TopicRouteData>, String> {
        let mut last = String::from("no name server configured");
        for link in &self.namesrvs {
            let request = RemotingCommand::request(rc::GET_ROUTEINFO_BY_TOPIC, Default::default())
                .with_ext("topic", topic);
            match link.call(request, Duration::from_secs(3)).await {
                Ok(r) if r.code == resp::SUCCESS => {
                    return json::from_slice(&r.body)
                        .map(Some)
                        .map_err(|e| format!("route of {topic} from {}: {e}", link.addr()));
                }
                Ok(r) if r.code == resp::TOPIC_NOT_EXIST => return Ok(None),
                Ok(r) => last = format!("{}: code {} {:?}", link.addr(), r.code, r.remark),
                Err(e) => last = format!("{}: {e}", link.addr()),
            }
        }
        Err(last)
    }

    /// True once a registration with some name server succeeded.
    pub fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    fn register_request(&self) -> Option<RemotingCommand> {
        let (mut table, data_version) = self.topics.snapshot();
        for topic in table.values_mut() {
            topic.perm = self.permission.registered(topic.perm);
        }
        let body = RegisterBrokerBody {
            filter_server_list: Vec::new(),
            topic_config_serialize_wrapper: TopicConfigSerializeWrapper {
                data_version,
                topic_config_table: table,
                ..Default::default()
            },
        };
        let body = match json::to_vec(&body) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode the registration body");
                return None;
            }
        };
        let crc = conveyor_protocol::message::body_crc(&body);
        let mut request = RemotingCommand::request(rc::REGISTER_BROKER, Default::default());
        if let Some(zone) = self.replication.zones().own() {
            request = request.with_ext(ZONE_NAME, zone);
        }
        Some(
            request
                .with_ext("brokerName", &self.broker_name)
                .with_ext(
                    "brokerAddr",
                    self.replication.registration_addr(&self.advertised_addr),
                )
                .with_ext("clusterName", &self.cluster_name)
                .with_ext("haServerAddr", &self.ha_addr)
                .with_ext("brokerId", self.replication.registration_id())
                // Conveyor: the master epoch, so that the name server ignores a deposed
                // master's late registrations.
                .with_ext("masterEpoch", self.replication.epoch())
                .with_ext("compressed", "false")
                .with_ext("bodyCrc32", crc)
                .with_body(body),
        )
    }

    /// Registers with every name server concurrently; logs failures.
    pub async fn register_all(&self) {
        let Some(request) = self.register_request() else {
            return;
        };
        let calls = self.namesrvs.iter().map(|link| {
            let request = request.clone();
            async move {
                match link.call(request, REGISTER_TIMEOUT).await {
                    Ok(r) if r.code == resp::SUCCESS => {
                        // A slave learns where its master's replication stream is.
                        self.replication.learn_master(
                            r.get_str_opt("masterAddr").unwrap_or_default(),
                            r.get_str_opt("haServerAddr").unwrap_or_default(),
                        );
                        true
                    }
                    Ok(r) => {
                        tracing::warn!(namesrv = link.addr(), code = r.code, remark = ?r.remark, "registration refused");
                        false
                    }
                    Err(e) => {
                        tracing::warn!(namesrv = link.addr(), error = %e, "registration failed");
                        false
                    }
                }
            }
        });
        let results = futures_util::future::join_all(calls).await;
        if results.iter().any(|ok| *ok) && !self.registered.swap(true, Ordering::AcqRel) {
            tracing::info!(broker = %self.advertised_addr, "registered with the name server(s)");
        }
    }

    /// Registers in the background (after a topic change), without delaying the caller. A
    /// burst of changes (many auto-created topics) costs one registration, not one each: a
    /// registration already queued carries every change made before it starts.
    pub fn register_soon(self: &Arc<Self>) {
        if self.pending.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            // Let the rest of a burst join this registration.
            tokio::time::sleep(Duration::from_millis(50)).await;
            me.pending.store(false, Ordering::Release);
            me.register_all().await
        });
    }

    /// Unregisters from every name server and closes the links (clean shutdown).
    pub async fn unregister_all(&self) {
        let request = RemotingCommand::request(rc::UNREGISTER_BROKER, Default::default())
            .with_ext("brokerName", &self.broker_name)
            .with_ext(
                "brokerAddr",
                self.replication.registration_addr(&self.advertised_addr),
            )
            .with_ext("clusterName", &self.cluster_name)
            .with_ext("brokerId", self.replication.registration_id());
        for link in &self.namesrvs {
            if let Err(e) = link.call(request.clone(), Duration::from_secs(3)).await {
                tracing::debug!(namesrv = link.addr(), error = %e, "unregister failed");
            }
            link.close().await;
        }
        self.registered.store(false, Ordering::Release);
    }
}
