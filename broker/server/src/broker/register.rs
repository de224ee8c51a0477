//! Registration with the name servers (docs/protocol.md §9.2, §9.3): every interval, right after
//! a topic is created, and an UNREGISTER_BROKER on clean shutdown.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::{RegisterBrokerBody, TopicConfigSerializeWrapper};

use super::Broker;

/// RocketMQ's register timeout.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(24);

impl Broker {
    fn register_request(&self) -> Option<RemotingCommand> {
        let (table, data_version) = self.topics.snapshot();
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
        let ha_addr = format!(
            "{}:{}",
            self.store_host.ip(),
            self.store_host.port().wrapping_add(1)
        );
        Some(
            RemotingCommand::request(rc::REGISTER_BROKER, Default::default())
                .with_ext("brokerName", &self.config.broker_name)
                .with_ext("brokerAddr", &self.config.advertised_addr)
                .with_ext("clusterName", &self.config.cluster_name)
                .with_ext("haServerAddr", ha_addr)
                .with_ext("brokerId", self.config.broker_id)
                .with_ext("compressed", "false")
                .with_ext("bodyCrc32", crc)
                .with_body(body),
        )
    }

    /// Registers with every name server concurrently; logs failures.
    pub async fn register_all(self: &Arc<Self>) {
        let Some(request) = self.register_request() else {
            return;
        };
        let calls = self.namesrvs.iter().map(|link| {
            let request = request.clone();
            async move {
                match link.call(request, REGISTER_TIMEOUT).await {
                    Ok(r) if r.code == resp::SUCCESS => true,
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
            tracing::info!(broker = %self.config.advertised_addr, "registered with the name server(s)");
        }
    }

    /// Registers in the background (after a topic change), without delaying the caller.
    pub fn register_soon(self: &Arc<Self>) {
        let me = self.clone();
        tokio::spawn(async move { me.register_all().await });
    }

    pub(crate) async fn unregister_all(&self) {
        let request = RemotingCommand::request(rc::UNREGISTER_BROKER, Default::default())
            .with_ext("brokerName", &self.config.broker_name)
            .with_ext("brokerAddr", &self.config.advertised_addr)
            .with_ext("clusterName", &self.config.cluster_name)
            .with_ext("brokerId", self.config.broker_id);
        for link in &self.namesrvs {
            if let Err(e) = link.call(request.clone(), Duration::from_secs(3)).await {
                tracing::debug!(namesrv = link.addr(), error = %e, "unregister failed");
            }
            link.close().await;
        }
        self.registered.store(false, Ordering::Release);
    }
}
