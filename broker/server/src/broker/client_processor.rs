//! ClientManageProcessor: the requests by which clients say who they are — HEART_BEAT (producer
//! and consumer groups, subscriptions), UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP (what
//! rebalancing reads), LOCK/UNLOCK_BATCH_MQ for orderly consumers and CHECK_CLIENT_CONFIG
//! (docs/protocol.md §6.1-§6.3, §6.6, §6.9).

use std::sync::Arc;
use std::time::Instant;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::consumer::{
    GetConsumerListByGroupRequestHeader, UnregisterClientRequestHeader,
};
use conveyor_protocol::json;
use conveyor_protocol::route::{
    CheckClientRequestBody, ConsumerListBody, HeartbeatData, LockBatchRequestBody,
    LockBatchResponseBody, MessageModel, EXPRESSION_TYPE_SQL92,
};

use super::clients::{ClientChannel, ClientManager};
use super::groups::SubscriptionGroupManager;
use super::locks::RebalanceLockManager;
use super::register::NameServerRegistrar;
use super::reply::{bad_header, error_response, ok, Reply};
use super::topics::{self, TopicConfigManager};
use crate::remoting::Connection;

/// Client registration, group membership and orderly locks.
pub struct ClientManageProcessor {
    /// Live producers and consumers.
    clients: Arc<ClientManager>,
    /// Queue locks of orderly consumers.
    locks: Arc<RebalanceLockManager>,
    /// A heartbeat creates unknown groups (when allowed).
    groups: Arc<SubscriptionGroupManager>,
    /// A clustering consumer's heartbeat creates its retry topic.
    topics: Arc<TopicConfigManager>,
    /// Told when a heartbeat created a retry topic.
    registrar: Arc<NameServerRegistrar>,
}

impl ClientManageProcessor {
    /// A processor over the broker's services.
    pub fn new(
        clients: Arc<ClientManager>,
        locks: Arc<RebalanceLockManager>,
        groups: Arc<SubscriptionGroupManager>,
        topics: Arc<TopicConfigManager>,
        registrar: Arc<NameServerRegistrar>,
    ) -> Self {
        Self {
            clients,
            locks,
            groups,
            topics,
            registrar,
        }
    }

    /// HEART_BEAT: registers the client's producer and consumer groups.
    pub async fn heartbeat(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let data: HeartbeatData = json::from_slice(&req.body).map_err(|e| {
            error_response(req, resp::SYSTEM_ERROR, format!("bad heartbeat body: {e}"))
        })?;
        let channel = ClientChannel {
            client_id: data.client_id.clone(),
            conn: conn.clone(),
            language: req.language.name().to_string(),
            version: req.version,
            last_update: Instant::now(),
        };
        let mut topics_changed = false;
        for consumer in &data.consumer_data_set {
            let group = self.groups.require(req, &consumer.group_name)?;
            if consumer.message_model == MessageModel::Clustering && group.retry_queue_nums > 0 {
                let (_, created) = self.topics.ensure(
                    &topics::retry_topic(&consumer.group_name),
                    group.retry_queue_nums,
                );
                topics_changed |= created;
            }
            self.clients.register_consumer(
                consumer,
                channel.clone(),
                group.notify_consumer_ids_changed_enable,
            );
        }
        for producer in &data.producer_data_set {
            self.clients
                .register_producer(&producer.group_name, channel.clone());
        }
        if topics_changed {
            self.registrar.register_all().await;
        }
        Ok(ok(req))
    }

    /// UNREGISTER_CLIENT: a client instance shuts down.
    pub fn unregister_client(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let h = UnregisterClientRequestHeader::parse(req).map_err(bad_header(req))?;
        if let Some(g) = &h.producer_group {
            self.clients.unregister_producer(g, conn.id());
        }
        if let Some(g) = &h.consumer_group {
            self.clients.unregister_consumer(g, conn.id());
        }
        Ok(ok(req))
    }

    /// GET_CONSUMER_LIST_BY_GROUP.
    pub fn consumer_list(&self, req: &RemotingCommand) -> Reply {
        let h = GetConsumerListByGroupRequestHeader::parse(req).map_err(bad_header(req))?;
        let group = h.consumer_group.as_str();
        let ids = self.clients.consumer_ids(group);
        if ids.is_empty() {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("no consumer for this group, {group}"),
            ));
        }
        let body = json::to_vec(&ConsumerListBody {
            consumer_id_list: ids,
        })
        .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        Ok(ok(req).with_body(body))
    }

    /// LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers.
    pub fn lock_batch(&self, req: &RemotingCommand) -> Reply {
        let body: LockBatchRequestBody = json::from_slice(&req.body)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, format!("bad lock body: {e}")))?;
        if body.consumer_group.is_empty() || body.client_id.is_empty() {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                "consumerGroup and clientId are required",
            ));
        }
        if req.code == rc::UNLOCK_BATCH_MQ {
            self.locks
                .unlock(&body.consumer_group, &body.client_id, &body.mq_set);
            return Ok(ok(req));
        }
        // A lock is a lease for a live member of the group: an unknown client (never sent a
        // heartbeat for the group, or expired) gets none. After a broker restart, clients
        // get their locks back with their next heartbeat.
        if !self
            .clients
            .consumer_ids(&body.consumer_group)
            .contains(&body.client_id)
        {
            return Err(error_response(
                req,
                resp::CONSUMER_NOT_ONLINE,
                format!(
                    "client {} is not a live consumer of group {}; send a heartbeat first",
                    body.client_id, body.consumer_group
                ),
            ));
        }
        let held = self.locks.lock(
            &body.consumer_group,
            &body.client_id,
            &body.mq_set,
            Instant::now(),
        );
        let out = json::to_vec(&LockBatchResponseBody {
            lock_ok_mq_set: held,
        })
        .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        Ok(ok(req).with_body(out))
    }

    /// CHECK_CLIENT_CONFIG: only tag subscriptions are supported.
    pub fn check_client_config(&self, req: &RemotingCommand) -> Reply {
        let body: CheckClientRequestBody = json::from_slice(&req.body)
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, format!("bad body: {e}")))?;
        if body.subscription_data.expression_type == EXPRESSION_TYPE_SQL92 {
            return Err(error_response(
                req,
                resp::SUBSCRIPTION_PARSE_FAILED,
                "SQL92 filtering is not supported by this broker; subscribe by tag",
            ));
        }
        Ok(ok(req))
    }
}
