//! Group endpoints: one stable address per broker group that always leads to the group's
//! current master, so unmodified RocketMQ clients reach a new master within seconds.
//!
//! Why: the Java and Go clients learn a group's master only from their route poll (every
//! 30 s) and never on a failed send; a master that is frozen, or whose host is gone, keeps
//! their sends failing until then. A master registers its group's endpoint address as id 0
//! (`[replication] group-address`), so the route never changes on failover: the endpoint
//! splices each client connection to the master the controller elected, once that master
//! has heartbeated in its new epoch (it takes writes at once), and closes every connection it
//! spliced to a former master as soon as the master changes. The 5.x Java client then fails
//! the request in flight at once and retries it within the same `send`, over a new
//! connection that reaches the new master; older clients retry after their request timeout.
//!
//! It is plain TCP (TLS passes through to the broker) and runs in `conveyor controller`, the
//! process that decides who the master is. On Kubernetes the operator points a Service at the
//! master instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::service::{Controller, Serving};

/// How often the endpoint asks the controller who serves the group (an election, or the new
/// master's first heartbeat in its epoch, is seen within this).
const POLL: Duration = Duration::from_millis(50);
/// How long a new connection waits for a serving master (an election under way) before it
/// is closed: about a client's request timeout.
const WAIT_FOR_MASTER: Duration = Duration::from_secs(3);
/// How long connecting to the master may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A group's endpoint: parse of a `"group=host:port"` setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupEndpoint {
    /// The broker group (`brokerName`).
    pub group: String,
    /// Where the endpoint listens.
    pub listen: SocketAddr,
}

/// Why a `group-endpoints` entry is not one.
#[derive(Debug, thiserror::Error)]
#[error("group endpoint {entry:?}: {why} (expected \"<brokerName>=<ip>:<port>\")")]
pub struct EndpointError {
    /// The entry.
    entry: String,
    /// What is wrong.
    why: String,
}

impl std::str::FromStr for GroupEndpoint {
    type Err = EndpointError;

    fn from_str(entry: &str) -> Result<Self, Self::Err> {
        let err = |why: &str| EndpointError {
            entry: entry.to_string(),
            why: why.to_string(),
        };
        let (group, listen) = entry.split_once('=').ok_or_else(|| err("no '='"))?;
        let group = group.trim();
        if group.is_empty() {
            return Err(err("no group name"));
        }
        let listen = listen
            .trim()
            .parse()
            .map_err(|e: std::net::AddrParseError| err(&e.to_string()))?;
        Ok(Self {
            group: group.to_string(),
            listen,
        })
    }
}

/// Serves `group`'s endpoint on `listener` until `shutdown`.
pub async fn serve(
    controller: Arc<Controller>,
    group: String,
    listener: TcpListener,
    shutdown: CancellationToken,
) {
    let (serving_tx, serving) = watch::channel(controller.serving_master(&group));
    {
        // One watcher per group: every connection follows its answer.
        let (controller, group, shutdown) = (controller.clone(), group.clone(), shutdown.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.cancelled() => return,
                }
                let now = controller.serving_master(&group);
                serving_tx.send_if_modified(|s| {
                    if *s == now {
                        return false;
                    }
                    tracing::info!(group, from = ?s, to = ?now, "group endpoint: master changed");
                    *s = now;
                    true
                });
            }
        });
    }
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = shutdown.cancelled() => return,
        };
        match accepted {
            Ok((client, peer)) => {
                let _ = client.set_nodelay(true);
                tokio::spawn(splice(client, peer, group.clone(), serving.clone()));
            }
            Err(e) => {
                // Out of descriptors, most likely: back off rather than spin.
                tracing::warn!(group, error = %e, "group endpoint: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Leads `client` to the serving master and copies both ways until either side closes or
/// the master changes (then both are closed: the client reconnects, to the new master).
async fn splice(
    mut client: TcpStream,
    peer: SocketAddr,
    group: String,
    mut serving: watch::Receiver<Option<Serving>>,
) {
    let waited = tokio::time::timeout(WAIT_FOR_MASTER, serving.wait_for(Option::is_some)).await;
    let Some(target) = waited.ok().and_then(Result::ok).and_then(|s| s.clone()) else {
        tracing::debug!(group, %peer, "group endpoint: no master to lead to");
        return;
    };
    let mut upstream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&target.addr))
        .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(group, addr = target.addr, error = %e, "group endpoint: master unreachable");
            return;
        }
        Err(_) => {
            tracing::debug!(
                group,
                addr = target.addr,
                "group endpoint: connecting to the master timed out"
            );
            return;
        }
    };
    let _ = upstream.set_nodelay(true);
    let moved = serving.wait_for(|s| s.as_ref() != Some(&target));
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
        _ = moved => {
            tracing::debug!(group, %peer, from = target.addr, "group endpoint: master changed, connection closed");
        }
    }
}
