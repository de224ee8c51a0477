//! QueryAssignmentProcessor: server-side load balancing for RocketMQ 5 consumers started
//! with `clientRebalance=false` (QUERY_ASSIGNMENT, 400) and the per topic and group consume
//! mode `mqadmin setConsumeMode` sets (SET_MESSAGE_REQUEST_MODE, 401), saved as
//! `config/messageRequestMode.json` in RocketMQ's shape. In POP mode every consumer of the
//! group is given "any queue" (-1) of every broker group, and the brokers hand out messages
//! ([`super::pop`]); in PULL mode (the default) the broker splits the queues among the group's
//! consumers as AllocateMessageQueueAveragely does.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::route::{perm, MessageQueue};
use serde::{Deserialize, Serialize};

use super::clients::ClientManager;
use super::config_file::{ConfigFile, ConfigFileError};
use super::groups::SubscriptionGroupManager;
use super::register::NameServerRegistrar;
use super::reply::{error_response, ok, Reply};
use super::topics::{self, TopicConfigManager};

/// How a group consumes a topic (RocketMQ's `MessageRequestMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MessageRequestMode {
    /// Consumers pull the queues assigned to them.
    #[default]
    #[serde(rename = "PULL")]
    Pull,
    /// Consumers pop from any queue; the broker balances.
    #[serde(rename = "POP")]
    Pop,
}

/// SET_MESSAGE_REQUEST_MODE's body, and an entry of the saved table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetMessageRequestModeBody {
    /// The topic.
    pub topic: String,
    /// The group.
    pub consumer_group: String,
    /// PULL or POP.
    #[serde(default)]
    pub mode: MessageRequestMode,
    /// With POP: how many consumers share a queue (0: every consumer reads every queue).
    #[serde(default)]
    pub pop_share_queue_num: i32,
}

/// QUERY_ASSIGNMENT's body.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueryAssignmentBody {
    topic: String,
    consumer_group: String,
    client_id: String,
    #[serde(default)]
    strategy_name: Option<String>,
    #[serde(default)]
    message_model: Option<String>,
}

/// One assignment of QUERY_ASSIGNMENT's answer.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Assignment {
    message_queue: MessageQueue,
    mode: MessageRequestMode,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Persisted {
    /// topic → group → mode.
    #[serde(default)]
    message_request_mode_map: BTreeMap<String, BTreeMap<String, SetMessageRequestModeBody>>,
}

/// QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE.
pub struct QueryAssignmentProcessor {
    /// `config/messageRequestMode.json`.
    file: ConfigFile,
    /// The modes set.
    modes: RwLock<Persisted>,
    /// Topics must exist.
    topics: Arc<TopicConfigManager>,
    /// Groups must exist.
    groups: Arc<SubscriptionGroupManager>,
    /// The group's consumers (for PULL splits).
    clients: Arc<ClientManager>,
    /// Every broker group's queues come from the name servers.
    registrar: Arc<NameServerRegistrar>,
}

impl QueryAssignmentProcessor {
    /// Loads the saved modes.
    pub fn load(
        config_dir: &Path,
        topics: Arc<TopicConfigManager>,
        groups: Arc<SubscriptionGroupManager>,
        clients: Arc<ClientManager>,
        registrar: Arc<NameServerRegistrar>,
    ) -> Result<Self, ConfigFileError> {
        let file = ConfigFile::new(config_dir, "messageRequestMode.json");
        let modes = file.load()?.unwrap_or_default();
        Ok(Self {
            file,
            modes: RwLock::new(modes),
            topics,
            groups,
            clients,
            registrar,
        })
    }

    /// The mode of a group on a topic (PULL unless set; always PULL for retry topics).
    pub fn mode(&self, topic: &str, group: &str) -> (MessageRequestMode, i32) {
        if topic.starts_with(topics::RETRY_GROUP_TOPIC_PREFIX) {
            return (MessageRequestMode::Pull, 0);
        }
        self.modes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .message_request_mode_map
            .get(topic)
            .and_then(|g| g.get(group))
            .map_or((MessageRequestMode::Pull, 0), |b| {
                (b.mode, b.pop_share_queue_num)
            })
    }

    /// SET_MESSAGE_REQUEST_MODE.
    pub fn set_mode(&self, req: &RemotingCommand) -> Reply {
        let body: SetMessageRequestModeBody = serde_json::from_slice(&req.body).map_err(|e| {
            error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("bad SetMessageRequestModeRequestBody: {e}"),
            )
        })?;
        if body.topic.starts_with(topics::RETRY_GROUP_TOPIC_PREFIX) {
            return Err(error_response(
                req,
                resp::NO_PERMISSION,
                "retry topic is not allowed to set mode",
            ));
        }
        if self.topics.get(&body.topic).is_none() {
            return Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{}] not exist", body.topic),
            ));
        }
        if self.groups.get(&body.consumer_group).is_none() {
            return Err(error_response(
                req,
                resp::SUBSCRIPTION_GROUP_NOT_EXIST,
                format!("subscription group[{}] not exist", body.consumer_group),
            ));
        }
        let mut modes = self.modes.write().unwrap_or_else(|e| e.into_inner());
        let previous = modes
            .message_request_mode_map
            .entry(body.topic.clone())
            .or_default()
            .insert(body.consumer_group.clone(), body.clone());
        if let Err(e) = self.file.store(&*modes) {
            // Keep the table as saved: a mode that is not persisted would change at restart.
            let groups = modes
                .message_request_mode_map
                .entry(body.topic.clone())
                .or_default();
            match previous {
                Some(p) => groups.insert(body.consumer_group.clone(), p),
                None => groups.remove(&body.consumer_group),
            };
            return Err(error_response(req, resp::SYSTEM_ERROR, e.to_string()));
        }
        tracing::info!(topic = body.topic, group = body.consumer_group, mode = ?body.mode, "consume mode set");
        Ok(ok(req))
    }

    /// QUERY_ASSIGNMENT.
    pub async fn query(&self, req: &RemotingCommand) -> Reply {
        let body: QueryAssignmentBody = serde_json::from_slice(&req.body).map_err(|e| {
            error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("bad QueryAssignmentRequestBody: {e}"),
            )
        })?;
        let route = self.registrar.topic_route(&body.topic).await.map_err(|e| {
            error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("no route for {}: {e}", body.topic),
            )
        })?;
        let Some(route) = route else {
            return Err(error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{}] not exist", body.topic),
            ));
        };
        let readable: Vec<(String, i32)> = route
            .queue_datas
            .iter()
            .filter(|q| q.perm & perm::READ != 0 && q.read_queue_nums > 0)
            .map(|q| (q.broker_name.clone(), q.read_queue_nums))
            .collect();
        let (mode, _share) = self.mode(&body.topic, &body.consumer_group);
        let broadcasting = body.message_model.as_deref() == Some("BROADCASTING");
        let queues: Vec<MessageQueue> = readable
            .iter()
            .flat_map(|(broker, n)| {
                (0..*n).map(|q| MessageQueue {
                    broker_name: broker.clone(),
                    queue_id: q,
                    topic: body.topic.clone(),
                })
            })
            .collect();
        let assigned: Vec<MessageQueue> = if mode == MessageRequestMode::Pop && !broadcasting {
            readable
                .iter()
                .map(|(broker, _)| MessageQueue {
                    broker_name: broker.clone(),
                    queue_id: -1,
                    topic: body.topic.clone(),
                })
                .collect()
        } else if broadcasting {
            queues
        } else {
            let _strategy = body.strategy_name;
            let mut ids = self.clients.consumer_ids(&body.consumer_group);
            if !ids.contains(&body.client_id) {
                ids.push(body.client_id.clone());
            }
            conveyor_client::group::allocate_averagely(&queues, &ids, &body.client_id)
        };
        let assignments: Vec<Assignment> = assigned
            .into_iter()
            .map(|message_queue| Assignment {
                message_queue,
                mode,
            })
            .collect();
        let json = serde_json::json!({ "messageQueueAssignments": assignments });
        let mut response = ok(req);
        response.body = serde_json::to_vec(&json).unwrap_or_default().into();
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_and_write_as_rocketmq_writes_them() {
        let b: SetMessageRequestModeBody = serde_json::from_str(
            r#"{"consumerGroup":"g","mode":"POP","popShareQueueNum":0,"topic":"t"}"#,
        )
        .unwrap();
        assert_eq!(b.mode, MessageRequestMode::Pop);
        let p = Persisted {
            message_request_mode_map: [("t".to_string(), [("g".to_string(), b)].into())].into(),
        };
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.starts_with(r#"{"messageRequestModeMap":{"t":{"g":{"topic":"t","consumerGroup":"g","mode":"POP""#), "{text}");
        let a = Assignment {
            message_queue: MessageQueue {
                broker_name: "b".into(),
                queue_id: -1,
                topic: "t".into(),
            },
            mode: MessageRequestMode::Pop,
        };
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"messageQueue":{"brokerName":"b","queueId":-1,"topic":"t"},"mode":"POP"}"#
        );
    }
}
