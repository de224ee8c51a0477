//! Consumer-side bookkeeping requests: HEART_BEAT, UNREGISTER_CLIENT,
//! GET_CONSUMER_LIST_BY_GROUP, QUERY/UPDATE_CONSUMER_OFFSET, LOCK/UNLOCK_BATCH_MQ and
//! CHECK_CLIENT_CONFIG (docs/protocol.md §6.1-§6.4, §6.6, §6.9).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::json;
use conveyor_protocol::route::{
    CheckClientRequestBody, ConsumerListBody, HeartbeatData, LockBatchRequestBody,
    LockBatchResponseBody, MessageModel, MessageQueue, EXPRESSION_TYPE_SQL92,
};

use super::clients::ClientChannel;
use super::topics;
use super::{bad_header, ok, Broker, Reply};
use crate::remoting::{error_response, Connection};

/// How long an orderly consumer's queue lock lives without renewal (RocketMQ: 60 s).
pub const LOCK_LEASE: Duration = Duration::from_secs(60);

/// Owner client id and last renewal of each locked queue.
type LockTable = HashMap<MessageQueue, (String, Instant)>;

/// Queue locks of orderly consumers, per group.
#[derive(Default)]
pub struct QueueLocks {
    table: Mutex<HashMap<String, LockTable>>,
}

impl QueueLocks {
    /// Locks what is free, expired or already held by `client`; returns the queues it holds.
    pub fn lock(
        &self,
        group: &str,
        client: &str,
        queues: &[MessageQueue],
        now: Instant,
    ) -> Vec<MessageQueue> {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let locks = table.entry(group.to_string()).or_default();
        let mut held = Vec::new();
        for mq in queues {
            let free = match locks.get(mq) {
                None => true,
                Some((owner, at)) => owner == client || now.duration_since(*at) > LOCK_LEASE,
            };
            if free {
                locks.insert(mq.clone(), (client.to_string(), now));
                held.push(mq.clone());
            }
        }
        held
    }

    /// Releases the queues `client` holds.
    pub fn unlock(&self, group: &str, client: &str, queues: &[MessageQueue]) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(locks) = table.get_mut(group) {
            for mq in queues {
                if locks.get(mq).is_some_and(|(owner, _)| owner == client) {
                    locks.remove(mq);
                }
            }
        }
    }

    /// True when some live lock of `group` exists (retries then go straight to the DLQ in Java).
    pub fn holder(&self, group: &str, mq: &MessageQueue, now: Instant) -> Option<String> {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table
            .get(group)?
            .get(mq)
            .filter(|(_, at)| now.duration_since(*at) <= LOCK_LEASE)
            .map(|(c, _)| c.clone())
    }
}

impl Broker {
    /// HEART_BEAT: registers the client's producer and consumer groups.
    pub(crate) async fn heartbeat(
        self: &Arc<Self>,
        conn: &Connection,
        req: &RemotingCommand,
    ) -> Reply {
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
            let Some(group) = self
                .groups
                .find_or_create(&consumer.group_name)
                .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?
            else {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                    format!(
                        "subscription group [{}] does not exist",
                        consumer.group_name
                    ),
                ));
            };
            if consumer.message_model == MessageModel::Clustering && group.retry_queue_nums > 0 {
                let (_, created) = self
                    .topics
                    .ensure(
                        &topics::retry_topic(&consumer.group_name),
                        group.retry_queue_nums,
                    )
                    .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
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
            self.register_all().await;
        }
        Ok(ok(req))
    }

    /// UNREGISTER_CLIENT: a client instance shuts down.
    pub(crate) fn unregister_client(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        if let Some(g) = req.get_str_opt("producerGroup").filter(|g| !g.is_empty()) {
            self.clients.unregister_producer(g, conn.id());
        }
        if let Some(g) = req.get_str_opt("consumerGroup").filter(|g| !g.is_empty()) {
            self.clients.unregister_consumer(g, conn.id());
        }
        Ok(ok(req))
    }

    /// GET_CONSUMER_LIST_BY_GROUP.
    pub(crate) fn consumer_list(&self, req: &RemotingCommand) -> Reply {
        let group = req.get_str("consumerGroup").map_err(bad_header(req))?;
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

    /// QUERY_CONSUMER_OFFSET, with RocketMQ's answer for groups that never committed (§6.4).
    pub(crate) fn query_consumer_offset(&self, req: &RemotingCommand) -> Reply {
        let bad = bad_header(req);
        let group = req.get_str("consumerGroup").map_err(&bad)?;
        let topic = req.get_str("topic").map_err(&bad)?;
        let queue_id = req.get_i32("queueId").map_err(&bad)?;
        if let Some(offset) = self.offsets.query(group, topic, queue_id) {
            return Ok(ok(req).with_ext("offset", offset));
        }
        let zero_if_not_found = req
            .get_bool_opt("setZeroIfNotFound")
            .map_err(&bad)?
            .unwrap_or(true);
        let young_queue = self.store.min_offset(topic, queue_id) == 0
            && self.store.max_offset(topic, queue_id) > 0;
        if zero_if_not_found && young_queue {
            return Ok(ok(req).with_ext("offset", 0));
        }
        Err(error_response(
            req,
            resp::QUERY_NOT_FOUND,
            "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first",
        ))
    }

    /// UPDATE_CONSUMER_OFFSET.
    pub(crate) fn update_consumer_offset(&self, req: &RemotingCommand) -> Reply {
        let bad = bad_header(req);
        let group = req.get_str("consumerGroup").map_err(&bad)?;
        let topic = req.get_str("topic").map_err(&bad)?;
        let queue_id = req.get_i32("queueId").map_err(&bad)?;
        let offset = req.get_i64("commitOffset").map_err(&bad)?;
        if self.topics.get(topic).is_none() {
            return Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist"),
            ));
        }
        self.offsets.commit(group, topic, queue_id, offset);
        Ok(ok(req))
    }

    /// LOCK_BATCH_MQ / UNLOCK_BATCH_MQ for orderly consumers.
    pub(crate) fn lock_batch(&self, req: &RemotingCommand) -> Reply {
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
    pub(crate) fn check_client_config(&self, req: &RemotingCommand) -> Reply {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mq(q: i32) -> MessageQueue {
        MessageQueue {
            topic: "T".into(),
            broker_name: "b".into(),
            queue_id: q,
        }
    }

    #[test]
    fn locks_are_exclusive_until_the_lease_expires() {
        let locks = QueueLocks::default();
        let t0 = Instant::now();
        assert_eq!(locks.lock("G", "c1", &[mq(0), mq(1)], t0).len(), 2);
        assert_eq!(locks.lock("G", "c2", &[mq(1), mq(2)], t0), vec![mq(2)]);
        // Renewal by the owner is fine; another client gets it only after expiry.
        assert_eq!(locks.lock("G", "c1", &[mq(1)], t0).len(), 1);
        assert_eq!(
            locks.lock(
                "G",
                "c2",
                &[mq(1)],
                t0 + LOCK_LEASE + Duration::from_secs(1)
            ),
            vec![mq(1)]
        );
        locks.unlock("G", "c1", &[mq(0)]);
        assert_eq!(locks.lock("G", "c2", &[mq(0)], t0), vec![mq(0)]);
        assert_eq!(locks.holder("G", &mq(0), t0).as_deref(), Some("c2"));
    }
}
