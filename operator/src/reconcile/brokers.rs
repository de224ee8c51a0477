//! What the operator asks brokers over RocketMQ's remoting protocol, the IO half of a drain
//! (`drain` decides): make a pod read-only or writable again (UPDATE_BROKER_CONFIG
//! `brokerPermission`), and how much its consumer groups have left to read (the committed
//! offsets of GET_ALL_CONSUMER_OFFSET against each queue's GET_MAX_OFFSET), and what it still
//! stores for later delivery (delayed, timer and half messages, GET_BROKER_RUNTIME_INFO). Brokers are
//! reached at their pod IP on the remoting port.

use std::time::Duration;

use conveyor_protocol::code::{request_code as rc, response_code as resp};
use conveyor_protocol::command::RemotingCommand;
use conveyor_remoting::acl::Credentials;
use conveyor_remoting::{RemotingClient, RemotingConfig};

use crate::builders::BROKER_PORT;

/// How long one request to a broker may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Why a broker could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum BrokerCallError {
    /// No answer.
    #[error("{addr}: {source}")]
    Unreachable {
        /// The broker.
        addr: String,
        /// Why.
        #[source]
        source: conveyor_remoting::RemotingError,
    },
    /// An answer other than success.
    #[error("{addr} answered code {code}: {remark}")]
    Refused {
        /// The broker.
        addr: String,
        /// Its response code.
        code: i32,
        /// Its remark.
        remark: String,
    },
    /// A body that is not what RocketMQ sends.
    #[error("{addr}: unexpected answer: {why}")]
    Malformed {
        /// The broker.
        addr: String,
        /// What was wrong.
        why: String,
    },
}

/// A client for the brokers of the clusters this operator manages.
pub struct Brokers {
    /// Connections by address.
    client: RemotingClient,
}

impl Default for Brokers {
    fn default() -> Self {
        Self {
            // Each request is signed with its own cluster's secret (see `call`), never with
            // process-wide credentials.
            client: RemotingClient::new(RemotingConfig {
                credentials: None,
                ..Default::default()
            }),
        }
    }
}

/// The remoting address of a pod.
pub fn address(pod_ip: &str) -> String {
    format!("{pod_ip}:{BROKER_PORT}")
}

/// A body that is not what RocketMQ sends.
fn malformed(addr: &str, why: String) -> BrokerCallError {
    BrokerCallError::Malformed {
        addr: addr.to_string(),
        why,
    }
}

impl Brokers {
    /// The JSON body of the answer to a request `code` without fields.
    async fn json(
        &self,
        addr: &str,
        code: i32,
        signer: Option<&Credentials>,
    ) -> Result<serde_json::Value, BrokerCallError> {
        let r = self
            .call(
                addr,
                RemotingCommand::request(code, Default::default()),
                signer,
            )
            .await?;
        serde_json::from_slice(&r.body).map_err(|e| malformed(addr, e.to_string()))
    }

    /// Sends `req` to `addr`, signed by `signer` (the cluster's secret, under ACL).
    async fn call(
        &self,
        addr: &str,
        mut req: RemotingCommand,
        signer: Option<&Credentials>,
    ) -> Result<RemotingCommand, BrokerCallError> {
        if let Some(signer) = signer {
            signer.sign(&mut req);
        }
        let r = self
            .client
            .invoke_timeout(addr, req, TIMEOUT)
            .await
            .map_err(|source| BrokerCallError::Unreachable {
                addr: addr.to_string(),
                source,
            })?;
        if r.code != resp::SUCCESS {
            return Err(BrokerCallError::Refused {
                addr: addr.to_string(),
                code: r.code,
                remark: r.remark.unwrap_or_default(),
            });
        }
        Ok(r)
    }

    /// Sets the broker's permission: 4 read-only (drained), 6 read and write.
    pub async fn set_permission(
        &self,
        addr: &str,
        perm: i32,
        signer: Option<&Credentials>,
    ) -> Result<(), BrokerCallError> {
        let req = RemotingCommand::request(rc::UPDATE_BROKER_CONFIG, Default::default())
            .with_body(format!("brokerPermission={perm}\n").into_bytes());
        self.call(addr, req, signer).await.map(|_| ())
    }

    /// Messages the broker stores for later delivery, by kind (`delayed`, `timer`,
    /// `undecided transactional`), kinds with none left out: Conveyor's runtime-info keys.
    pub async fn parked(
        &self,
        addr: &str,
        signer: Option<&Credentials>,
    ) -> Result<std::collections::BTreeMap<String, u64>, BrokerCallError> {
        let malformed = |why: String| malformed(addr, why);
        let body = self.json(addr, rc::GET_BROKER_RUNTIME_INFO, signer).await?;
        let mut parked = std::collections::BTreeMap::new();
        for (key, kind) in [
            ("delayedMessagesPending", "delayed"),
            ("timerMessagesPending", "timer"),
            ("halfMessagesPending", "undecided transactional"),
        ] {
            let n = body["table"][key]
                .as_str()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    malformed(format!(
                        "no {key} in its runtime info (an older broker version)"
                    ))
                })?;
            if n > 0 {
                parked.insert(kind.to_string(), n);
            }
        }
        Ok(parked)
    }

    /// Messages the broker's consumer groups have committed offsets for but not consumed, by
    /// group: for every `topic@group` and queue, the queue's end minus the committed offset.
    /// Groups with nothing left are not listed.
    pub async fn backlog(
        &self,
        addr: &str,
        signer: Option<&Credentials>,
    ) -> Result<std::collections::BTreeMap<String, u64>, BrokerCallError> {
        let malformed = |why: String| malformed(addr, why);
        let body = self.json(addr, rc::GET_ALL_CONSUMER_OFFSET, signer).await?;
        let table = body
            .get("offsetTable")
            .and_then(|t| t.as_object())
            .ok_or_else(|| malformed("no offsetTable".into()))?;
        let mut backlog = std::collections::BTreeMap::new();
        for (key, queues) in table {
            let (topic, group) = key.split_once('@').unwrap_or((key, ""));
            let queues = queues
                .as_object()
                .ok_or_else(|| malformed(format!("offsets of {key} are not a map")))?;
            for (queue, committed) in queues {
                let committed = committed.as_i64().unwrap_or(0);
                let req = RemotingCommand::request(rc::GET_MAX_OFFSET, Default::default())
                    .with_ext("topic", topic)
                    .with_ext("queueId", queue);
                let end = self
                    .call(addr, req, signer)
                    .await?
                    .get_i64("offset")
                    .map_err(|e| malformed(e.to_string()))?;
                let left = end.saturating_sub(committed).max(0) as u64;
                if left > 0 {
                    *backlog.entry(group.to_string()).or_insert(0) += left;
                }
            }
        }
        Ok(backlog)
    }
}
