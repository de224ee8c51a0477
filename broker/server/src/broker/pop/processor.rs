//! PopMessageProcessor: the remoting codes of Pop consumption, as RocketMQ 5's Java client
//! sends them: POP_MESSAGE (200050), ACK_MESSAGE (200051), PEEK_MESSAGE (200052),
//! CHANGE_MESSAGE_INVISIBLETIME (200053) and NOTIFICATION (200054). Headers, response codes
//! and the offset lists the client builds receipt handles from follow RocketMQ's
//! `PopMessageProcessor` (`ExtraInfoUtil` encodings); the state is [`super::PopService`]'s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::message::{encode_message, keys, RecordView};
use conveyor_protocol::route::EXPRESSION_TYPE_SQL92;
use conveyor_protocol::time::now_ms;
use tokio_util::sync::CancellationToken;

use super::super::filter::TagFilter;
use super::super::groups::{SubscriptionGroupConfig, SubscriptionGroupManager};
use super::super::pull;
use super::super::reply::{bad_header, error_response, ok, Reply};
use super::super::topics::TopicConfigManager;
use super::handle::{ReceiptHandle, NORMAL_TOPIC, RETRY_TOPIC};
use super::{InitMode, PopError, PopRequest, PopService, MAX_POP_BATCH};
use crate::remoting::Connection;

/// A pop that arrives this much later than its `bornTime` + `pollTime` is answered
/// POLLING_TIMEOUT at once (RocketMQ's `isTimeoutTooMuch`): its client gave up on it.
const STALE_POP_MS: i64 = 500;
/// Held pops answer this much before the client's poll time ends, so the answer arrives
/// before the client's own timeout (RocketMQ re-runs them 50 ms early).
const POLL_MARGIN: Duration = Duration::from_millis(50);

/// The remoting Pop codes.
pub struct PopMessageProcessor {
    /// The Pop state.
    pop: Arc<PopService>,
    /// Topics (existence, permission, queue counts).
    topics: Arc<TopicConfigManager>,
    /// Groups (created on first use when allowed).
    groups: Arc<SubscriptionGroupManager>,
    /// Cancelled when the broker begins to stop: held pops answer at once.
    stopping: CancellationToken,
}

impl PopMessageProcessor {
    /// A processor over the Pop service.
    pub fn new(
        pop: Arc<PopService>,
        topics: Arc<TopicConfigManager>,
        groups: Arc<SubscriptionGroupManager>,
        stopping: CancellationToken,
    ) -> Self {
        Self {
            pop,
            topics,
            groups,
            stopping,
        }
    }

    /// The group, the topic's read queues and the filter of a consumer request, or the
    /// RocketMQ refusal.
    fn admit(
        &self,
        req: &RemotingCommand,
        group: &str,
        topic: &str,
        queue_id: i32,
    ) -> Result<(SubscriptionGroupConfig, i32), RemotingCommand> {
        let (group_cfg, topic_cfg) =
            pull::admit_consumer(req, &self.groups, &self.topics, group, topic)?;
        if queue_id >= topic_cfg.read_queue_nums {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!(
                    "queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]",
                    topic_cfg.read_queue_nums
                ),
            ));
        }
        Ok((group_cfg, topic_cfg.read_queue_nums))
    }

    /// POP_MESSAGE.
    pub async fn pop(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let group = req
            .get_str("consumerGroup")
            .map_err(bad_header(req))?
            .to_string();
        let topic = req.get_str("topic").map_err(bad_header(req))?.to_string();
        let queue_id = req.get_i32("queueId").map_err(bad_header(req))?;
        let max = req.get_i32("maxMsgNums").map_err(bad_header(req))?;
        let invisible_ms = req.get_i64("invisibleTime").map_err(bad_header(req))?;
        let poll_ms = req
            .get_i64_opt("pollTime")
            .map_err(bad_header(req))?
            .unwrap_or(0);
        let born = req
            .get_i64_opt("bornTime")
            .map_err(bad_header(req))?
            .unwrap_or(0);
        let init_mode = match req.get_i32_opt("initMode").map_err(bad_header(req))? {
            Some(0) => InitMode::Min,
            _ => InitMode::Max,
        };
        let order = req
            .get_bool_opt("order")
            .map_err(bad_header(req))?
            .unwrap_or(false);
        let now = now_ms();
        let born = if born <= 0 { now } else { born };
        if poll_ms > 0 && now - born - poll_ms > STALE_POP_MS {
            return Err(pop_answer(
                req,
                resp::POLLING_TIMEOUT,
                "the pop's poll time passed before it arrived",
            ));
        }
        if max <= 0 || max as usize > MAX_POP_BATCH {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!(
                    "the broker pops at most {MAX_POP_BATCH} messages at a time, maxMsgNums {max}"
                ),
            ));
        }
        if invisible_ms <= 0 || invisible_ms > super::MAX_INVISIBLE_MS {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("invisibleTime {invisible_ms} ms is out of range (1 ms … 12 h)"),
            ));
        }
        let (group_cfg, _) = self.admit(req, &group, &topic, queue_id)?;
        if req
            .get_str_opt("expType")
            .is_some_and(|t| t == EXPRESSION_TYPE_SQL92)
        {
            return Err(error_response(
                req,
                resp::SUBSCRIPTION_PARSE_FAILED,
                "SQL92 filtering is not supported by this broker; subscribe by tag",
            ));
        }
        let filter = TagFilter::parse(req.get_str_opt("exp").unwrap_or("*"));
        let poll =
            Duration::from_millis((born + poll_ms - now).max(0) as u64).saturating_sub(POLL_MARGIN);
        let request = PopRequest {
            group: group_cfg,
            topic: topic.clone(),
            queue_id: (queue_id >= 0).then_some(queue_id),
            max: max as usize,
            invisible_ms,
            poll,
            filter,
            orderly: order,
            init_mode,
        };
        let batch = self
            .pop
            .pop(&request, &self.stopping)
            .await
            .map_err(|e| pop_error(req, &e))?;
        let mut response = ok(req)
            .with_ext("popTime", batch.pop_time)
            .with_ext("invisibleTime", invisible_ms)
            .with_ext(
                "reviveQid",
                batch.messages.first().map_or(0, |m| m.handle.revive_qid),
            )
            .with_ext("restNum", batch.rest);
        if batch.messages.is_empty() {
            response.code = resp::POLLING_TIMEOUT;
            response.remark = Some("no new message".into());
            return Ok(response);
        }
        // ExtraInfoUtil's lists, keyed "retryFlag queueId", in body order.
        let mut starts: BTreeMap<(&str, i32), i64> = BTreeMap::new();
        let mut offsets: BTreeMap<(&str, i32), Vec<i64>> = BTreeMap::new();
        let mut counts: Vec<String> = Vec::new();
        let mut body = BytesMut::new();
        for m in &batch.messages {
            let flag = if m.handle.retry {
                RETRY_TOPIC
            } else {
                NORMAL_TOPIC
            };
            starts
                .entry((flag, m.handle.queue_id))
                .or_insert(m.handle.start_offset);
            offsets
                .entry((flag, m.handle.queue_id))
                .or_default()
                .push(m.handle.offset);
            if m.attempts > 0 {
                counts.push(format!(
                    "{flag} qo{}%{} {}",
                    m.handle.queue_id, m.handle.offset, m.attempts
                ));
            }
            if m.handle.retry {
                // RocketMQ re-encodes retry messages under the topic asked for, their handle
                // inside: the client acknowledges them on the retry topic from it.
                body.extend_from_slice(&retry_record(&m.record, &topic, &m.handle).map_err(
                    |e| {
                        error_response(
                            req,
                            resp::SYSTEM_ERROR,
                            format!("retry message unreadable: {e}"),
                        )
                    },
                )?);
            } else {
                body.extend_from_slice(&m.record);
            }
        }
        let join = |entries: Vec<String>| entries.join(";");
        response = response
            .with_ext(
                "startOffsetInfo",
                join(
                    starts
                        .iter()
                        .map(|((f, q), s)| format!("{f} {q} {s}"))
                        .collect(),
                ),
            )
            .with_ext(
                "msgOffsetInfo",
                join(
                    offsets
                        .iter()
                        .map(|((f, q), o)| {
                            let list: Vec<String> = o.iter().map(i64::to_string).collect();
                            format!("{f} {q} {}", list.join(","))
                        })
                        .collect(),
                ),
            );
        if order {
            response = response.with_ext("orderCountInfo", join(counts));
        }
        if !conn.reserve(req.opaque, body.len()).await {
            return Ok(response);
        }
        response.body = body.freeze();
        Ok(response)
    }

    /// The parsed handle of an ACK or CHANGE_MESSAGE_INVISIBLETIME, after the checks RocketMQ
    /// makes (topic, queue, offset in range).
    fn handle_of(
        &self,
        req: &RemotingCommand,
    ) -> Result<(String, String, ReceiptHandle), RemotingCommand> {
        let group = req
            .get_str("consumerGroup")
            .map_err(bad_header(req))?
            .to_string();
        let topic = req.get_str("topic").map_err(bad_header(req))?.to_string();
        let queue_id = req.get_i32("queueId").map_err(bad_header(req))?;
        let offset = req.get_i64("offset").map_err(bad_header(req))?;
        let extra = req.get_str("extraInfo").map_err(bad_header(req))?;
        let topic_cfg = self.topics.get(&topic).ok_or_else(|| {
            error_response(
                req,
                resp::TOPIC_NOT_EXIST,
                format!("topic[{topic}] not exist, apply first please!"),
            )
        })?;
        if queue_id < 0 || queue_id >= topic_cfg.read_queue_nums.max(topic_cfg.write_queue_nums) {
            return Err(error_response(
                req,
                resp::MESSAGE_ILLEGAL,
                format!("queueId{queue_id} is illegal, topic:{topic}"),
            ));
        }
        let handle = ReceiptHandle::parse(extra, Some(offset))
            .map_err(|e| error_response(req, resp::MESSAGE_ILLEGAL, e.to_string()))?;
        Ok((group, topic, ReceiptHandle { offset, ..handle }))
    }

    /// ACK_MESSAGE: SUCCESS also for a handle whose batch was revived already (RocketMQ does
    /// not check); its message comes again from the retry topic.
    pub async fn ack(&self, req: &RemotingCommand) -> Reply {
        let (group, topic, handle) = self.handle_of(req)?;
        match self.pop.ack(&group, &topic, &handle).await {
            Ok(_) | Err(PopError::Expired(_)) => Ok(ok(req)),
            Err(e) => Err(pop_error(req, &e)),
        }
    }

    /// CHANGE_MESSAGE_INVISIBLETIME.
    pub async fn change_invisible(&self, req: &RemotingCommand) -> Reply {
        let (group, topic, handle) = self.handle_of(req)?;
        let invisible_ms = req.get_i64("invisibleTime").map_err(bad_header(req))?;
        if !(0..=super::MAX_INVISIBLE_MS).contains(&invisible_ms) {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("invisibleTime {invisible_ms} ms is out of range (0 … 12 h)"),
            ));
        }
        let new = self
            .pop
            .change_invisible(&group, &topic, &handle, invisible_ms)
            .await
            .map_err(|e| pop_error(req, &e))?;
        Ok(ok(req)
            .with_ext("popTime", new.pop_time)
            .with_ext("invisibleTime", new.invisible_ms)
            .with_ext("reviveQid", new.revive_qid))
    }

    /// PEEK_MESSAGE: messages from the group's position, without popping them.
    pub async fn peek(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        let group = req
            .get_str("consumerGroup")
            .map_err(bad_header(req))?
            .to_string();
        let topic = req.get_str("topic").map_err(bad_header(req))?.to_string();
        let queue_id = req.get_i32("queueId").map_err(bad_header(req))?;
        let max = req
            .get_i32("maxMsgNums")
            .map_err(bad_header(req))?
            .clamp(1, MAX_POP_BATCH as i32);
        let (_, read_queues) = self.admit(req, &group, &topic, queue_id)?;
        let queues: Vec<i32> = if queue_id >= 0 {
            vec![queue_id]
        } else {
            (0..read_queues).collect()
        };
        let (records, rest) = self
            .pop
            .peek(&group, &topic, &queues, max as usize)
            .await
            .map_err(|e| pop_error(req, &e))?;
        let mut response = ok(req).with_ext("restNum", rest);
        if records.is_empty() {
            response.code = resp::PULL_NOT_FOUND;
            return Ok(response);
        }
        let total = records.iter().map(|r| r.len()).sum();
        if !conn.reserve(req.opaque, total).await {
            return Ok(response);
        }
        let mut body = BytesMut::with_capacity(total);
        for r in &records {
            body.extend_from_slice(r);
        }
        response.body = body.freeze();
        Ok(response)
    }

    /// NOTIFICATION: whether the group has messages to pop, waiting up to `pollTime`.
    pub async fn notification(&self, req: &RemotingCommand) -> Reply {
        let group = req
            .get_str("consumerGroup")
            .map_err(bad_header(req))?
            .to_string();
        let topic = req.get_str("topic").map_err(bad_header(req))?.to_string();
        let queue_id = req.get_i32("queueId").map_err(bad_header(req))?;
        let poll_ms = req
            .get_i64_opt("pollTime")
            .map_err(bad_header(req))?
            .unwrap_or(0);
        let (group_cfg, _) = self.admit(req, &group, &topic, queue_id)?;
        let has = self
            .pop
            .wait_for_messages(
                &group_cfg,
                &topic,
                (queue_id >= 0).then_some(queue_id),
                Duration::from_millis(poll_ms.max(0) as u64),
                &self.stopping,
            )
            .await;
        Ok(ok(req)
            .with_ext("hasMsg", has)
            .with_ext("pollingFull", false))
    }
}

/// A retry record as a Pop answer carries it: under the topic asked for, with its handle
/// (`POP_CK`).
fn retry_record(record: &[u8], topic: &str, handle: &ReceiptHandle) -> Result<Vec<u8>, String> {
    let view = RecordView::parse(record).map_err(|e| e.to_string())?;
    let mut msg = view.to_message().map_err(|e| e.to_string())?;
    msg.topic = topic.to_string();
    if msg.properties.get(keys::POP_CK).is_none() {
        msg.properties.insert(keys::POP_CK, handle.to_string());
    }
    let mut out = Vec::new();
    encode_message(&msg, msg.store_timestamp, msg.store_host, &mut out)
        .map_err(|e| e.to_string())?;
    conveyor_protocol::message::seal_record(&mut out, msg.queue_offset, msg.physical_offset);
    Ok(out)
}

/// A pop answer with the header fields RocketMQ always sends.
fn pop_answer(req: &RemotingCommand, code: i32, remark: &str) -> RemotingCommand {
    let mut r = error_response(req, code, remark)
        .with_ext("popTime", 0)
        .with_ext("invisibleTime", 0)
        .with_ext("reviveQid", 0)
        .with_ext("restNum", 0);
    r.code = code;
    r
}

/// The remoting answer to a Pop failure.
pub fn pop_error(req: &RemotingCommand, e: &PopError) -> RemotingCommand {
    let code = match e {
        PopError::NotServing => resp::SYSTEM_BUSY,
        PopError::Full(_) => resp::POLLING_FULL,
        PopError::Expired(_) => resp::NO_MESSAGE,
        PopError::Handle(_) => resp::MESSAGE_ILLEGAL,
        PopError::Store(_) => resp::SYSTEM_ERROR,
        PopError::NotDurable(n) => n.code(),
    };
    if code == resp::POLLING_FULL {
        return pop_answer(req, code, &e.to_string());
    }
    error_response(req, code, e.to_string())
}
