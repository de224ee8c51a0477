//! PullMessageProcessor: PULL_MESSAGE (11) and LITE_PULL_MESSAGE (361). Check the group, topic
//! and subscription, store a piggy-backed offset commit, read from the store with tag filtering
//! and, when nothing is there yet, hold the request until a message arrives or the client's
//! suspend timeout passes (docs/protocol.md §6.5). Each answer suggests which replica of the
//! group to read from next (`suggestWhichBrokerId`, [`SlaveReads`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use conveyor_protocol::code::response_code as resp;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::PullMessageHeader;
use conveyor_protocol::route::{normalize_zone, perm, EXPRESSION_TYPE_SQL92, MASTER_ID, ZONE_NAME};
use conveyor_store::{GetResult, GetStatus, MessageStore, StoreError};
use tokio_util::sync::CancellationToken;

use crate::ha::Replication;
use crate::remoting::Connection;

use super::clients::ClientManager;
use super::filter::TagFilter;
use super::groups::{SubscriptionGroupConfig, SubscriptionGroupManager};
use super::hold::PullHold;
use super::offsets::ConsumerOffsetManager;
use super::reader::QueueReader;
use super::reply::{bad_header, error_response, ok, store_error_response, Reply};
use super::stats::BrokerStats;
use super::topics::TopicConfigManager;

/// PullSysFlag bits.
mod pull_flag {
    pub const COMMIT_OFFSET: i32 = 0x1;
    pub const SUSPEND: i32 = 0x2;
    pub const SUBSCRIPTION: i32 = 0x4;
}

/// Most messages one pull returns.
const MAX_PULL_COUNT: usize = 256;
/// Default and largest pull body.
const DEFAULT_PULL_BYTES: usize = 256 << 10;
const MAX_PULL_BYTES: usize = 4 << 20;
/// How long a former master goes on serving pulls with slave reads off: clients poll the
/// name server every 30 s by default, then read from the new master.
const FORMER_MASTER_READS: Duration = Duration::from_secs(35);

/// Longest hold a client may ask for.
const MAX_SUSPEND: Duration = Duration::from_secs(60);

/// RocketMQ's reads from slaves (`slaveReadEnable`): whether a slave serves pulls, and which
/// replica a pull answer tells the consumer to read from next.
#[derive(Debug, Clone, Copy)]
pub struct SlaveReads {
    /// `slave-read-enable`.
    pub enabled: bool,
    /// A consumer whose last pulled record lies further than this many bytes behind the
    /// CommitLog's end reads from disk, not memory (`accessMessageInMemoryMaxRatio` of RAM):
    /// with slave reads on it is sent to a slave.
    pub in_memory_bytes: u64,
}

impl SlaveReads {
    /// `ratio` percent of this machine's RAM (`/proc/meminfo`; unknown RAM never sends a
    /// consumer to a slave).
    pub fn new(enabled: bool, ratio: u64) -> Self {
        let ram = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                let line = m.lines().find(|l| l.starts_with("MemTotal:"))?;
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map(|kib| kib * 1024);
        Self {
            enabled,
            in_memory_bytes: ram.map_or(u64::MAX, |r| r / 100 * ratio),
        }
    }

    /// `suggestWhichBrokerId` for a consumer of `group` whose pull ended `behind()` bytes
    /// before the CommitLog's end: the master (0) unless slave reads are on; then the group's
    /// `whichBrokerWhenConsumeSlowly` when it reads from disk, else its `brokerId` when the
    /// group names a replica, else the replica in the consumer's zone (`in_zone()`: for a
    /// consumer that says its zone, see [`consumer_zone`]), else the master. `behind` and
    /// `in_zone` run only when slave reads are on: with them off (the default) a pull pays
    /// nothing.
    pub fn suggest(
        &self,
        group: &SubscriptionGroupConfig,
        behind: impl FnOnce() -> u64,
        in_zone: impl FnOnce() -> Option<i64>,
    ) -> i64 {
        if !self.enabled {
            0
        } else if behind() > self.in_memory_bytes {
            group.which_broker_when_consume_slowly
        } else if group.broker_id != MASTER_ID {
            group.broker_id
        } else {
            in_zone().unwrap_or(MASTER_ID)
        }
    }
}

/// The zone a consumer says it runs in: RocketMQ 5's Java client adds `__ZONE_NAME` to every
/// request when `ROCKETMQ_ZONE` (or `-Drocketmq.zone`) is set.
pub fn consumer_zone(req: &RemotingCommand) -> Option<String> {
    req.get_str_opt(ZONE_NAME).and_then(normalize_zone)
}

/// The PULL response code and next offset for a store result (the mapping table of §6.5).
pub fn pull_code(r: &GetResult, requested: i64) -> (i32, i64) {
    match r.status {
        GetStatus::Found => (resp::SUCCESS, r.next_begin_offset),
        GetStatus::NoMatchedMessage | GetStatus::OffsetFoundNull => {
            (resp::PULL_RETRY_IMMEDIATELY, r.next_begin_offset)
        }
        GetStatus::OffsetOverflowOne => (resp::PULL_NOT_FOUND, requested),
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue if requested == 0 => {
            (resp::PULL_NOT_FOUND, 0)
        }
        GetStatus::NoMessageInQueue | GetStatus::NoMatchedLogicQueue => {
            (resp::PULL_OFFSET_MOVED, 0)
        }
        GetStatus::OffsetTooSmall | GetStatus::OffsetOverflowBadly => {
            (resp::PULL_OFFSET_MOVED, r.next_begin_offset)
        }
    }
}

/// The answer to a pull whose read failed (an unreadable block: EIO): SYSTEM_ERROR with the
/// store's message ("read failed at commitlog offset N: Input/output error"), as RocketMQ
/// answers a store failure. Only this pull fails; the connection and other queues go on, and
/// the client retries it (after the disk is repaired it succeeds).
fn read_failed(
    req: &RemotingCommand,
    topic: &str,
    queue_id: i32,
    offset: i64,
    e: &StoreError,
) -> RemotingCommand {
    tracing::error!(topic, queue_id, offset, error = %e, "pull read failed");
    store_error_response(req, e)
}

/// The checks every consumer request passes, pull or pop (RocketMQ's wording): the group
/// exists (or is created) and may consume, the topic exists and is readable.
pub fn admit_consumer(
    req: &RemotingCommand,
    groups: &SubscriptionGroupManager,
    topics: &TopicConfigManager,
    group: &str,
    topic: &str,
) -> Result<
    (
        SubscriptionGroupConfig,
        conveyor_protocol::route::TopicConfig,
    ),
    RemotingCommand,
> {
    let group_cfg = groups.require(req, group)?;
    if !group_cfg.consume_enable {
        return Err(error_response(
            req,
            resp::NO_PERMISSION,
            format!("subscription group no permission, {group}"),
        ));
    }
    let topic_cfg = topics.get(topic).ok_or_else(|| {
        error_response(
            req,
            resp::TOPIC_NOT_EXIST,
            format!("topic[{topic}] not exist, apply first please!"),
        )
    })?;
    if topic_cfg.perm & perm::READ == 0 {
        return Err(error_response(
            req,
            resp::NO_PERMISSION,
            format!("the topic[{topic}] pulling message is forbidden"),
        ));
    }
    Ok((group_cfg, topic_cfg))
}

/// What a PullMessageProcessor needs from the rest of the broker.
pub struct PullDeps {
    /// Where messages are read.
    pub store: Arc<MessageStore>,
    /// Topic permissions and queue counts.
    pub topics: Arc<TopicConfigManager>,
    /// Whether a group may consume.
    pub groups: Arc<SubscriptionGroupManager>,
    /// Subscriptions registered by heartbeats.
    pub clients: Arc<ClientManager>,
    /// Piggy-backed offset commits.
    pub offsets: Arc<ConsumerOffsetManager>,
    /// Where held pulls wait for arrivals.
    pub hold: Arc<PullHold>,
    /// Counts delivered messages.
    pub stats: Arc<BrokerStats>,
    /// Cancelled when the broker begins to stop.
    pub stopping: CancellationToken,
    /// The role: only a master stores piggy-backed offset commits.
    pub replication: Arc<Replication>,
    /// Whether slaves serve pulls, and when consumers are sent to them.
    pub slave_reads: SlaveReads,
    /// Reads the records (shared with Pop).
    pub reader: Arc<QueueReader>,
}

/// PULL_MESSAGE and LITE_PULL_MESSAGE.
pub struct PullMessageProcessor {
    /// Where messages are read.
    store: Arc<MessageStore>,
    /// Topic permissions and queue counts.
    topics: Arc<TopicConfigManager>,
    /// Whether a group may consume (created on first use when allowed).
    groups: Arc<SubscriptionGroupManager>,
    /// Subscriptions registered by heartbeats (pulls without the SUBSCRIPTION flag).
    clients: Arc<ClientManager>,
    /// Piggy-backed offset commits are stored here.
    offsets: Arc<ConsumerOffsetManager>,
    /// Where held pulls wait for arrivals.
    hold: Arc<PullHold>,
    /// Counts delivered messages.
    stats: Arc<BrokerStats>,
    /// Cancelled when the broker begins to stop: held pulls answer at once.
    stopping: CancellationToken,
    /// Only a master stores piggy-backed commits, as in RocketMQ.
    replication: Arc<Replication>,
    /// Whether slaves serve pulls, and when consumers are sent to them.
    slave_reads: SlaveReads,
    /// Reads the records (off the runtime workers).
    reader: Arc<QueueReader>,
}

impl PullMessageProcessor {
    /// A processor over the broker's services.
    pub fn new(deps: PullDeps) -> Self {
        Self {
            store: deps.store,
            topics: deps.topics,
            groups: deps.groups,
            clients: deps.clients,
            offsets: deps.offsets,
            hold: deps.hold,
            stats: deps.stats,
            stopping: deps.stopping,
            replication: deps.replication,
            slave_reads: deps.slave_reads,
            reader: deps.reader,
        }
    }

    /// Handles PULL_MESSAGE and LITE_PULL_MESSAGE.
    pub async fn handle(&self, conn: &Connection, req: &RemotingCommand) -> Reply {
        if !self.slave_reads.enabled && !self.replication.master_within(FORMER_MASTER_READS) {
            // RocketMQ's `rejectRequest`: the client retries later, or reads from the master.
            // A former master still serves its clients until their route poll (what it
            // holds was replicated, and it shows nothing past the high watermark), so a
            // switchover or a failover does not stop consumers for up to 30 s.
            return Err(error_response(
                req,
                resp::SYSTEM_BUSY,
                "[REJECTREQUEST]system busy: this broker is a slave and slave-read-enable is \
                 off; read from the master of its group",
            ));
        }
        let h = PullMessageHeader::parse(req).map_err(bad_header(req))?;
        let (group, topic, queue_id, offset) = (
            h.consumer_group.as_str(),
            h.topic.as_str(),
            h.queue_id,
            h.queue_offset,
        );
        let (sys_flag, commit_offset, sub_version) = (h.sys_flag, h.commit_offset, h.sub_version);
        let suspend_ms = h.suspend_timeout_millis;
        let max_bytes = h
            .max_msg_bytes
            .filter(|b| *b > 0)
            .map_or(DEFAULT_PULL_BYTES, |b| (b as usize).min(MAX_PULL_BYTES));

        let (group_cfg, topic_cfg) = admit_consumer(req, &self.groups, &self.topics, group, topic)?;
        if queue_id < 0 || queue_id >= topic_cfg.read_queue_nums.max(topic_cfg.write_queue_nums) {
            return Err(error_response(
                req,
                resp::INVALID_PARAMETER,
                format!("queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:[{}]", topic_cfg.read_queue_nums),
            ));
        }
        let filter = if sys_flag & pull_flag::SUBSCRIPTION != 0 {
            if h.expression_type.as_deref() == Some(EXPRESSION_TYPE_SQL92) {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_PARSE_FAILED,
                    "SQL92 filtering is not supported by this broker; subscribe by tag",
                ));
            }
            TagFilter::parse(h.subscription.as_deref().unwrap_or("*"))
        } else {
            let sub = self.clients.subscription(group, topic).ok_or_else(|| {
                error_response(
                    req,
                    resp::SUBSCRIPTION_NOT_EXIST,
                    format!("the consumer's subscription not exist, group: {group} topic: {topic}"),
                )
            })?;
            if sub.sub_version < sub_version {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_NOT_LATEST,
                    format!("the consumer's subscription not latest, group: {group}"),
                ));
            }
            if sub.expression_type == EXPRESSION_TYPE_SQL92 {
                return Err(error_response(
                    req,
                    resp::SUBSCRIPTION_PARSE_FAILED,
                    "SQL92 filtering is not supported by this broker; subscribe by tag",
                ));
            }
            TagFilter::parse(&sub.sub_string)
        };
        if sys_flag & pull_flag::COMMIT_OFFSET != 0
            && commit_offset >= 0
            && self.replication.is_master()
        {
            self.offsets.commit(group, topic, queue_id, commit_offset);
        }

        let max_count = (h.max_msg_nums.max(1) as usize).min(MAX_PULL_COUNT);
        let may_hold = sys_flag & pull_flag::SUSPEND != 0 && suspend_ms > 0;
        let deadline =
            Instant::now() + Duration::from_millis(suspend_ms.max(0) as u64).min(MAX_SUSPEND);
        let notifier = self.hold.notifier(topic, queue_id);
        loop {
            let arrived = notifier.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let r = self
                .reader
                .read(topic, queue_id, offset, max_count, max_bytes, &filter)
                .await
                .map_err(|e| read_failed(req, topic, queue_id, offset, &e))?;
            let (code, next) = pull_code(&r, offset);
            if code == resp::PULL_NOT_FOUND && may_hold && Instant::now() < deadline {
                let woken = tokio::select! {
                    r = tokio::time::timeout_at(deadline.into(), arrived) => r.is_ok(),
                    _ = self.stopping.cancelled() => false,
                };
                if woken {
                    continue;
                }
                // Timed out: one last look, then answer.
                let r = self
                    .reader
                    .read(topic, queue_id, offset, max_count, max_bytes, &filter)
                    .await
                    .map_err(|e| read_failed(req, topic, queue_id, offset, &e))?;
                let (code, next) = pull_code(&r, offset);
                return Ok(self
                    .pull_response(conn, req, &h, &group_cfg, (code, next), &r)
                    .await);
            }
            return Ok(self
                .pull_response(conn, req, &h, &group_cfg, (code, next), &r)
                .await);
        }
    }

    /// The answer to pull `h`. The records are copied into the body only once the
    /// connection's response budget has room for them (a consumer that stops reading cannot
    /// make the broker hold its pulls in memory).
    async fn pull_response(
        &self,
        conn: &Connection,
        req: &RemotingCommand,
        h: &PullMessageHeader,
        group: &SubscriptionGroupConfig,
        (code, next): (i32, i64),
        r: &GetResult,
    ) -> RemotingCommand {
        // How far behind the log's end this pull ended (RocketMQ: from the last record read).
        let behind = || {
            r.messages
                .last()
                .and_then(|m| conveyor_protocol::message::RecordView::parse(m).ok())
                .map_or(0, |v| {
                    self.store
                        .commit_log_max_offset()
                        .saturating_sub(v.physical_offset().max(0) as u64)
                })
        };
        let mut response = ok(req)
            .with_ext(
                "suggestWhichBrokerId",
                self.slave_reads.suggest(group, behind, || {
                    self.replication.replica_in_zone(&consumer_zone(req)?)
                }),
            )
            .with_ext("nextBeginOffset", next)
            .with_ext("minOffset", r.min_offset)
            .with_ext("maxOffset", r.max_offset);
        response.code = code;
        response.remark = Some(format!("{:?}", r.status));
        if code == resp::SUCCESS {
            let total: usize = r.messages.iter().map(|m| m.len()).sum();
            if !conn.reserve(req.opaque, total).await {
                return response; // the connection closed: nothing will be sent
            }
            let mut body = BytesMut::with_capacity(total);
            for m in &r.messages {
                body.extend_from_slice(m);
            }
            response.body = body.freeze();
            self.stats
                .record_out(&h.topic, &group.group_name, r.messages.len(), total);
            // What the group now has in flight (RocketMQ's pull offset).
            self.offsets
                .record_pull(&group.group_name, &h.topic, h.queue_id, next);
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pulls_are_sent_to_a_slave_only_when_slave_reads_are_on_and_the_consumer_reads_from_disk() {
        let group = SubscriptionGroupConfig {
            which_broker_when_consume_slowly: 2,
            broker_id: 0,
            ..SubscriptionGroupConfig::default()
        };
        let off = SlaveReads {
            enabled: false,
            in_memory_bytes: 1000,
        };
        assert_eq!(off.suggest(&group, || 5000, || Some(3)), 0);
        let on = SlaveReads {
            enabled: true,
            ..off
        };
        assert_eq!(on.suggest(&group, || 1000, || None), 0);
        assert_eq!(on.suggest(&group, || 1001, || Some(3)), 2);
        let pinned = SubscriptionGroupConfig {
            broker_id: 1,
            ..group
        };
        assert_eq!(on.suggest(&pinned, || 10, || Some(3)), 1);
    }

    #[test]
    fn a_consumer_that_names_its_zone_is_sent_to_the_replica_there_unless_it_reads_from_disk() {
        let group = SubscriptionGroupConfig {
            which_broker_when_consume_slowly: 1,
            ..SubscriptionGroupConfig::default()
        };
        let on = SlaveReads {
            enabled: true,
            in_memory_bytes: 1000,
        };
        assert_eq!(on.suggest(&group, || 10, || Some(2)), 2);
        assert_eq!(on.suggest(&group, || 10, || None), 0, "no replica there");
        assert_eq!(on.suggest(&group, || 5000, || Some(2)), 1, "slow first");
        let req = RemotingCommand::request(11, Default::default()).with_ext(ZONE_NAME, " eu-1b ");
        assert_eq!(consumer_zone(&req), Some("eu-1b".into()));
        let req = RemotingCommand::request(11, Default::default());
        assert_eq!(consumer_zone(&req), None);
    }

    fn result(status: GetStatus, next: i64) -> GetResult {
        GetResult {
            status,
            messages: vec![],
            queue_offsets: vec![],
            next_begin_offset: next,
            min_offset: 3,
            max_offset: 10,
        }
    }

    #[test]
    fn status_mapping_follows_rocketmq() {
        assert_eq!(
            pull_code(&result(GetStatus::OffsetOverflowOne, 10), 10),
            (resp::PULL_NOT_FOUND, 10)
        );
        assert_eq!(
            pull_code(&result(GetStatus::OffsetTooSmall, 3), 1),
            (resp::PULL_OFFSET_MOVED, 3)
        );
        assert_eq!(
            pull_code(&result(GetStatus::OffsetOverflowBadly, 10), 50),
            (resp::PULL_OFFSET_MOVED, 10)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMessageInQueue, 0), 0),
            (resp::PULL_NOT_FOUND, 0)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMessageInQueue, 0), 7),
            (resp::PULL_OFFSET_MOVED, 0)
        );
        assert_eq!(
            pull_code(&result(GetStatus::NoMatchedMessage, 9), 4),
            (resp::PULL_RETRY_IMMEDIATELY, 9)
        );
    }
}
