//! TransactionalMessageService: transactional messages (docs/protocol.md §8). Half messages
//! wait, invisible, in `RMQ_SYS_TRANS_HALF_TOPIC`; END_TRANSACTION commits (the message is
//! written to its real topic) or rolls back; each decision is recorded in
//! `RMQ_SYS_TRANS_OP_HALF_TOPIC`. Undecided half messages older than the transaction timeout
//! are checked back with CHECK_TRANSACTION_STATE on a live connection of their producer group,
//! every check interval, until the max check count sends them to `TRANS_CHECK_MAX_TIME_TOPIC`.
//!
//! Both topics live in the store, so after a restart the decided set is rebuilt from the op
//! topic and the undecided ones from the half topic (from a persisted checkpoint on). The send
//! path parks half messages (see `parking`); this service only decides them, and a commit is
//! parked again by the same rules when it carries a timer or a delay level.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::header::message::EndTransactionRequestHeader;
use conveyor_protocol::message::{
    encode_record, keys, offset_msg_id, seal_record, Properties, RecordView, StoredMessage,
};
use conveyor_protocol::sysflag;
use conveyor_protocol::time::now_ms;
use conveyor_store::{AcceptAll, MessageStore};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::clients::ClientManager;
use super::config::BrokerConfig;
use super::config_file::{ConfigFile, ConfigFileError};
use super::durability::Durability;
use super::parking::{unpark, ParkingRules};
use super::reply::{bad_header, error_response, ok, store_error_response, Reply};
use super::topics::{
    TopicConfigManager, TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC,
};

/// Tag of op records ("d" for done, as RocketMQ's REMOVETAG).
const OP_TAG: &str = "d";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Persisted {
    half_checkpoint: i64,
}

/// An undecided half message.
#[derive(Debug, Clone)]
struct Pending {
    /// Its commit-log offset.
    phys: u64,
    /// When it was stored (the check timeout counts from here).
    store_ms: i64,
    /// Its producer group (checks go to a live member).
    group: String,
    /// CHECK_IMMUNITY_TIME_IN_SECONDS, replacing the timeout for this message.
    immunity_ms: Option<i64>,
    /// Checks sent so far.
    checks: u32,
    /// No check before this time.
    next_check_ms: i64,
}

#[derive(Debug, Default)]
struct State {
    /// Half queue offsets below are all decided.
    half_checkpoint: i64,
    /// Next half queue offset to read.
    half_scanned: i64,
    /// Next op queue offset to read.
    op_scanned: i64,
    /// Decided half offsets at or above the checkpoint.
    decided: HashSet<i64>,
    /// Undecided half messages by half queue offset.
    pending: BTreeMap<i64, Pending>,
}

/// The check-back timing (RocketMQ's transaction settings).
#[derive(Debug, Clone, Copy)]
struct CheckPolicy {
    /// Age after which an undecided half message is checked back.
    timeout_ms: i64,
    /// Time between two checks of the same half message.
    interval_ms: i64,
    /// Checks before an undecided half message is discarded.
    max_checks: u32,
}

/// Transactional messages: END_TRANSACTION, the bookkeeping of half messages, check-backs.
pub struct TransactionalMessageService {
    /// `config/transactionProgress.json`.
    file: ConfigFile,
    /// What is decided and what is pending.
    state: Mutex<State>,
    /// Held while a half message is decided (checked, written, marked), so two decisions
    /// racing for one half (END_TRANSACTION vs. a check-back answer or the discard of the
    /// check loop) cannot both act on it.
    deciding: Mutex<()>,
    /// Half, op and committed messages are read and written here.
    store: Arc<MessageStore>,
    /// When a commit and its op record count as written.
    durability: Arc<Durability>,
    /// Live producer connections to check back on.
    clients: Arc<ClientManager>,
    /// TRANS_CHECK_MAX_TIME_TOPIC is created here when first needed.
    topics: Arc<TopicConfigManager>,
    /// A committed message may still be parked (a timer or a delay level).
    parking: ParkingRules,
    /// STOREHOST of op records and the address of offset message ids.
    store_host: SocketAddr,
    /// When and how often undecided half messages are checked.
    policy: CheckPolicy,
}

/// What the transaction service needs from the rest of the broker.
pub struct TransactionDeps {
    /// Half, op and committed messages are read and written here.
    pub store: Arc<MessageStore>,
    /// When a commit and its op record count as written.
    pub durability: Arc<Durability>,
    /// Live producer connections to check back on.
    pub clients: Arc<ClientManager>,
    /// Where TRANS_CHECK_MAX_TIME_TOPIC is created.
    pub topics: Arc<TopicConfigManager>,
}

impl TransactionalMessageService {
    /// Half messages not decided yet: those read and waiting, plus those not read yet (an
    /// upper bound: some of them may be decided already).
    pub fn pending(&self) -> u64 {
        let end = self.store.max_offset(TRANS_HALF_TOPIC, 0);
        let s = self.lock();
        s.pending.len() as u64 + (end - s.half_scanned).max(0) as u64
    }

    /// Loads `config/transactionProgress.json` and rebuilds the bookkeeping from the
    /// recovered store before anything is served: progress saved past a log that a power loss
    /// cut short is pulled back, and the decided set is re-read so that an END_TRANSACTION
    /// arriving first still sees which half messages are decided.
    pub fn load(
        config_dir: &Path,
        config: &BrokerConfig,
        store_host: SocketAddr,
        deps: TransactionDeps,
        parking: ParkingRules,
    ) -> Result<Self, ConfigFileError> {
        let TransactionDeps {
            store,
            durability,
            clients,
            topics,
        } = deps;
        let file = ConfigFile::new(config_dir, "transactionProgress.json");
        let p: Persisted = file.load()?.unwrap_or_default();
        let service = Self {
            file,
            state: Mutex::new(State {
                half_checkpoint: p.half_checkpoint,
                half_scanned: p.half_checkpoint,
                ..Default::default()
            }),
            deciding: Mutex::new(()),
            store,
            durability,
            clients,
            topics,
            parking,
            store_host,
            policy: CheckPolicy {
                timeout_ms: config.transaction_timeout_ms as i64,
                interval_ms: config.transaction_check_interval_ms as i64,
                max_checks: config.transaction_check_max,
            },
        };
        service.clamp(service.store.max_offset(TRANS_HALF_TOPIC, 0));
        service.scan();
        Ok(service)
    }

    fn deciding(&self) -> std::sync::MutexGuard<'_, ()> {
        self.deciding.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when the half message at queue offset `half_offset` is decided: marked so, or
    /// below the checkpoint (which the scan advances past decided offsets and then forgets
    /// them).
    fn is_decided(&self, half_offset: i64) -> bool {
        let s = self.lock();
        s.decided.contains(&half_offset) || half_offset < s.half_checkpoint
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot(&self) -> Persisted {
        Persisted {
            half_checkpoint: self.lock().half_checkpoint,
        }
    }

    fn write(&self, p: &Persisted) -> Result<(), ConfigFileError> {
        self.file.store(p)
    }

    /// Pulls persisted progress back to the half queue's end: after a power loss the log may
    /// be shorter than the progress saved, and new half messages reuse those offsets.
    fn clamp(&self, half_queue_end: i64) {
        let mut s = self.lock();
        s.half_checkpoint = s.half_checkpoint.min(half_queue_end);
        s.half_scanned = s.half_scanned.min(half_queue_end);
    }

    /// The log was cut back (see `Replication::on_truncate`): decisions read from op records
    /// past the cut are gone, and the new master's half messages reuse those offsets. The
    /// bookkeeping is rebuilt from the log as it now is, the checkpoint pulled back to the
    /// half queue's new end.
    pub fn truncated(&self) {
        let checkpoint = self
            .lock()
            .half_checkpoint
            .min(self.store.max_offset(TRANS_HALF_TOPIC, 0));
        *self.lock() = State {
            half_checkpoint: checkpoint,
            half_scanned: checkpoint,
            ..State::default()
        };
        self.scan();
        if let Err(e) = self.write(&self.snapshot()) {
            tracing::error!(error = %e, "saving the transaction progress after a truncation failed");
        }
    }

    /// END_TRANSACTION: commit or roll back a half message.
    pub async fn end_transaction(&self, req: &RemotingCommand) -> Reply {
        let h = EndTransactionRequestHeader::parse(req).map_err(bad_header(req))?;
        let group = h.producer_group.as_str();
        let (queue_offset, phys) = (h.tran_state_table_offset, h.commit_log_offset);
        let commit = match h.commit_or_rollback {
            sysflag::TRANSACTION_COMMIT_TYPE => true,
            sysflag::TRANSACTION_ROLLBACK_TYPE => false,
            // UNKNOW: the producer will be asked again later.
            sysflag::TRANSACTION_NOT_TYPE => return Ok(ok(req)),
            other => {
                return Err(error_response(
                    req,
                    resp::INVALID_PARAMETER,
                    format!("invalid commitOrRollback {other}"),
                ));
            }
        };
        let record = u64::try_from(phys)
            .ok()
            .and_then(|p| self.store.message_at(p))
            .ok_or_else(|| {
                error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    format!(
                        "find prepared transaction message failed: no message at offset {phys}"
                    ),
                )
            })?;
        let half = RecordView::parse(&record)
            .and_then(|v| v.to_message())
            .map_err(|e| error_response(req, resp::SYSTEM_ERROR, e.to_string()))?;
        if half.topic != TRANS_HALF_TOPIC {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                format!("the message at offset {phys} is not a prepared transaction message"),
            ));
        }
        if half
            .properties
            .get(keys::PRODUCER_GROUP)
            .is_some_and(|g| g != group)
        {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                "the producer group wrong",
            ));
        }
        if half.queue_offset != queue_offset {
            return Err(error_response(
                req,
                resp::SYSTEM_ERROR,
                "the transaction state table offset wrong",
            ));
        }
        let _deciding = self.deciding();
        if self.is_decided(queue_offset) {
            // Already decided (a check-back answer racing the first END_TRANSACTION).
            return Ok(ok(req));
        }
        if commit {
            let mut m = half.clone();
            if !unpark(&mut m) {
                return Err(error_response(
                    req,
                    resp::SYSTEM_ERROR,
                    "prepared message lacks its real topic",
                ));
            }
            m.properties.remove(keys::TRANSACTION_PREPARED);
            m.sys_flag =
                (m.sys_flag & !sysflag::TRANSACTION_TYPE_MASK) | sysflag::TRANSACTION_COMMIT_TYPE;
            m.prepared_transaction_offset = phys;
            self.parking
                .prepare(&mut m, now_ms())
                .map_err(|e| error_response(req, resp::MESSAGE_ILLEGAL, e.to_string()))?;
            self.store
                .append(std::slice::from_ref(&m))
                .map_err(|e| store_error_response(req, &e))?;
        }
        self.record_decision(queue_offset)
            .map_err(|e| store_error_response(req, &e))?;
        drop(_deciding);
        // The commit (and its op record) must be durable before the answer.
        if let Err(e) = self
            .durability
            .wait(self.store.commit_log_max_offset())
            .await
        {
            return Err(error_response(
                req,
                e.code(),
                format!("the decision is stored but not durable: {e}"),
            ));
        }
        Ok(ok(req))
    }

    /// Marks the half message decided and writes its op record.
    fn record_decision(&self, half_offset: i64) -> Result<(), conveyor_store::StoreError> {
        let mut props = Properties::new();
        props.insert(keys::TAGS, OP_TAG);
        let op = StoredMessage {
            topic: TRANS_OP_HALF_TOPIC.into(),
            queue_id: 0,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: now_ms(),
            born_host: self.store_host,
            store_timestamp: 0,
            store_host: self.store_host,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Bytes::from(half_offset.to_string()),
            properties: props,
        };
        // Decided in memory first: if the op record cannot be written (disk full) after a
        // commit was stored, a later check-back must still not commit it a second time; the
        // persisted checkpoint then moves past it as well.
        {
            let mut s = self.lock();
            s.decided.insert(half_offset);
            s.pending.remove(&half_offset);
        }
        self.store.append(std::slice::from_ref(&op))?;
        Ok(())
    }

    /// Reads new op and half records into the bookkeeping. Runs once while the broker opens
    /// (before any END_TRANSACTION can arrive), then on every check tick.
    fn scan(&self) {
        let mut s = self.lock();
        loop {
            let r = self.store.get_messages(
                TRANS_OP_HALF_TOPIC,
                0,
                s.op_scanned,
                256,
                1 << 20,
                &AcceptAll,
            );
            if r.messages.is_empty() {
                // Retention may have removed the oldest op records: continue where the store
                // says reading can resume, and stop only at the end of the topic.
                let next = r
                    .next_begin_offset
                    .min(self.store.max_offset(TRANS_OP_HALF_TOPIC, 0));
                if next > s.op_scanned {
                    s.op_scanned = next;
                    continue;
                }
                break;
            }
            for slice in &r.messages {
                if let Some(o) = RecordView::parse(slice)
                    .ok()
                    .and_then(|v| std::str::from_utf8(v.body()).ok()?.parse::<i64>().ok())
                {
                    s.decided.insert(o);
                    s.pending.remove(&o);
                }
            }
            s.op_scanned = r.next_begin_offset;
        }
        let min = self.store.min_offset(TRANS_HALF_TOPIC, 0);
        s.half_scanned = s.half_scanned.max(s.half_checkpoint).max(min);
        loop {
            let r = self.store.get_messages(
                TRANS_HALF_TOPIC,
                0,
                s.half_scanned,
                256,
                4 << 20,
                &AcceptAll,
            );
            if r.messages.is_empty() {
                let next = r
                    .next_begin_offset
                    .min(self.store.max_offset(TRANS_HALF_TOPIC, 0));
                if next > s.half_scanned {
                    s.half_scanned = next;
                    continue;
                }
                break;
            }
            for (slice, qo) in r.messages.iter().zip(&r.queue_offsets) {
                if s.decided.contains(qo) {
                    continue;
                }
                let Ok(v) = RecordView::parse(slice) else {
                    continue;
                };
                let immunity_ms = v
                    .property(keys::CHECK_IMMUNITY_TIME_IN_SECONDS)
                    .and_then(|x| x.parse::<i64>().ok())
                    .map(|s| s * 1000);
                s.pending.insert(
                    *qo,
                    Pending {
                        phys: v.physical_offset() as u64,
                        store_ms: v.store_timestamp(),
                        group: v
                            .property(keys::PRODUCER_GROUP)
                            .unwrap_or_default()
                            .to_string(),
                        immunity_ms,
                        checks: 0,
                        next_check_ms: 0,
                    },
                );
            }
            s.half_scanned = r.next_begin_offset;
        }
        let checkpoint = s.pending.keys().next().copied().unwrap_or(s.half_scanned);
        s.half_checkpoint = checkpoint;
        let below = s.half_checkpoint;
        s.decided.retain(|o| *o >= below);
    }

    /// Checks back or discards undecided half messages that are due.
    fn check(&self) {
        let now = now_ms();
        let timeout = self.policy.timeout_ms;
        let interval = self.policy.interval_ms;
        let due: Vec<(i64, Pending)> = {
            let s = self.lock();
            s.pending
                .iter()
                .filter(|(_, p)| {
                    now - p.store_ms >= p.immunity_ms.unwrap_or(timeout) && now >= p.next_check_ms
                })
                .map(|(o, p)| (*o, p.clone()))
                .collect()
        };
        for (offset, p) in due {
            if p.checks >= self.policy.max_checks {
                if let Err(e) = self.discard_half(offset, p.phys) {
                    tracing::warn!(error = %e, "discarding an undecided half message failed");
                }
                continue;
            }
            let sent = self.send_check(offset, &p);
            let mut s = self.lock();
            if let Some(entry) = s.pending.get_mut(&offset) {
                entry.checks += 1;
                entry.next_check_ms = now + interval;
            }
            if !sent {
                tracing::debug!(
                    group = p.group,
                    offset,
                    "no live producer of the group for a transaction check"
                );
            }
        }
    }

    fn send_check(&self, half_offset: i64, p: &Pending) -> bool {
        let Some(channel) = self.clients.producer_channel(&p.group) else {
            return false;
        };
        let Some(record) = self.store.message_at(p.phys) else {
            return false;
        };
        let Ok(mut m) = RecordView::parse(&record).and_then(|v| v.to_message()) else {
            return false;
        };
        // The producer sees the message as it will be delivered: its real topic and queue.
        if !unpark(&mut m) {
            return false;
        }
        let props = m.properties.encode();
        let mut body = Vec::new();
        if encode_record(&m, &props, m.store_timestamp, m.store_host, &mut body).is_err() {
            return false;
        }
        seal_record(&mut body, half_offset, p.phys as i64);
        let offset_id = offset_msg_id(self.store_host, p.phys as i64);
        let uniq = m
            .properties
            .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            .unwrap_or_default()
            .to_string();
        let request = RemotingCommand::request(rc::CHECK_TRANSACTION_STATE, Default::default())
            .with_ext("tranStateTableOffset", half_offset)
            .with_ext("commitLogOffset", p.phys)
            .with_ext("msgId", &uniq)
            .with_ext("transactionId", &uniq)
            .with_ext("offsetMsgId", offset_id)
            .with_body(body);
        channel.conn.send_oneway(request)
    }

    /// Gives up on a half message checked too often: it goes to TRANS_CHECK_MAX_TIME_TOPIC.
    fn discard_half(&self, half_offset: i64, phys: u64) -> Result<(), conveyor_store::StoreError> {
        let _deciding = self.deciding();
        if self.is_decided(half_offset) {
            // Decided since the check loop looked.
            return Ok(());
        }
        if let Some(record) = self.store.message_at(phys) {
            if let Ok(mut m) = RecordView::parse(&record).and_then(|v| v.to_message()) {
                self.topics.ensure(TRANS_CHECK_MAX_TIME_TOPIC, 1);
                m.topic = TRANS_CHECK_MAX_TIME_TOPIC.into();
                m.queue_id = 0;
                self.store.append(std::slice::from_ref(&m))?;
            }
        }
        tracing::warn!(
            half_offset,
            "transaction checked too often without a decision: discarded"
        );
        self.record_decision(half_offset)
    }

    /// Runs the check loop until `shutdown`.
    pub async fn run_checks(self: Arc<Self>, shutdown: CancellationToken) {
        let tick = Duration::from_millis(self.policy.timeout_ms.clamp(100, 1000) as u64);
        loop {
            self.scan();
            let Some(permit) = self.durability.own_write_permit().await else {
                // No longer master: the service is being stopped.
                return shutdown.cancelled().await;
            };
            self.check();
            drop(permit);
            let snapshot = self.snapshot();
            // Progress is written only once what it counts as decided is durable.
            if self.durability.wait_all().await {
                if let Err(e) = self.write(&snapshot) {
                    tracing::error!(error = %e, "persisting transaction progress failed");
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(tick) => {}
                _ = shutdown.cancelled() => return,
            }
        }
    }
}
