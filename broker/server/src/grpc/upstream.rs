//! Upstream: where the gRPC endpoint sends the remoting request a gRPC call becomes. A request
//! for this broker's own group goes straight to the in-process broker on the client's
//! session connection (the same processors, checks and relay to a master as any remoting
//! request); one for another broker group goes to that group's master over a remoting link
//! (RocketMQ's proxy in cluster mode). Every endpoint thereby serves every queue of a topic,
//! so clients need only one address, and routes are cached briefly: a send does not ask the
//! name servers each time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conveyor_grpc_api::v2::Code;
use conveyor_protocol::command::RemotingCommand;
use conveyor_protocol::route::TopicRouteData;

use conveyor_grpc_api::v2::Status;

use super::convert::status;
use crate::acl::{Acl, Subject};
use crate::broker::Broker;
use crate::remoting::{Connection, ConnectionId, Link, Processor};

/// How long a route stays cached.
const ROUTE_TTL: Duration = Duration::from_secs(3);

/// The broker this endpoint runs in, and the masters of the other groups.
pub struct Upstream {
    /// This process's broker.
    broker: Arc<Broker>,
    /// Routes by topic, with when they were read.
    routes: Mutex<HashMap<String, (Arc<TopicRouteData>, Instant)>>,
    /// Master address per broker group, from the routes read.
    masters: Mutex<HashMap<String, String>>,
    /// One link per remote master.
    links: Mutex<HashMap<String, Arc<Link>>>,
    /// With ACL on: the rules every request is authorized against before it goes anywhere
    /// (requests to other groups travel signed as the cluster).
    acl: Option<Arc<Acl>>,
    /// With ACL on: who each session's connection was authenticated as.
    subjects: Mutex<HashMap<ConnectionId, Subject>>,
}

impl Upstream {
    /// Over this process's broker.
    pub fn new(broker: Arc<Broker>, acl: Option<Arc<Acl>>) -> Self {
        Self {
            broker,
            routes: Mutex::new(HashMap::new()),
            masters: Mutex::new(HashMap::new()),
            links: Mutex::new(HashMap::new()),
            acl,
            subjects: Mutex::new(HashMap::new()),
        }
    }

    /// The ACL in force, if any.
    pub fn acl(&self) -> Option<&Arc<Acl>> {
        self.acl.as_ref()
    }

    /// Records who the session on `conn` was authenticated as (its latest call).
    pub fn admit(&self, conn: &Connection, subject: Subject) {
        self.subjects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(conn.id(), subject);
    }

    /// Forgets the session on `conn` (it expired).
    pub fn forget(&self, conn: &Connection) {
        self.subjects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&conn.id());
    }

    /// With ACL on, whether the client of `conn` may make `request`.
    fn authorize(&self, conn: &Connection, request: &RemotingCommand) -> Result<(), Status> {
        let Some(acl) = &self.acl else {
            return Ok(());
        };
        let subject = self
            .subjects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&conn.id())
            .cloned()
            .ok_or_else(|| status(Code::Unauthorized, "the session is not authenticated"))?;
        let needs = crate::acl::needs::broker(request, |o| self.broker.record_topic(o));
        acl.authorize(&subject, request.code, &needs)
            .map_err(|why| status(Code::Unauthorized, why))
    }

    /// This process's broker.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The route of `topic` (cached for a few seconds; `fresh` reads it again).
    pub async fn route(&self, topic: &str, fresh: bool) -> Result<Arc<TopicRouteData>, Status> {
        if !fresh {
            let cached = self
                .routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(topic)
                .cloned();
            if let Some((r, at)) = cached {
                if at.elapsed() < ROUTE_TTL {
                    return Ok(r);
                }
            }
        }
        let route = self
            .broker
            .topic_route(topic)
            .await
            .map_err(|e| status(Code::InternalServerError, format!("route of {topic}: {e}")))?
            .ok_or_else(|| status(Code::TopicNotFound, format!("topic {topic} does not exist")))?;
        let route = Arc::new(route);
        {
            let mut masters = self.masters.lock().unwrap_or_else(|e| e.into_inner());
            for b in &route.broker_datas {
                if let Some(addr) = b.master_addr() {
                    masters.insert(b.broker_name.clone(), addr.to_string());
                }
            }
        }
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(topic.to_string(), (route.clone(), Instant::now()));
        Ok(route)
    }

    /// Sends `request` to broker group `broker_name` on behalf of the client of `conn` and
    /// returns its answer.
    pub async fn call(
        &self,
        broker_name: &str,
        conn: &Connection,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand, Status> {
        self.authorize(conn, &request)?;
        if broker_name.is_empty() || broker_name == self.broker.broker_name() {
            return self
                .broker
                .clone()
                .handle(conn.clone(), request)
                .await
                .ok_or_else(|| status(Code::InternalServerError, "the broker gave no answer"));
        }
        let addr = self
            .masters
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(broker_name)
            .cloned()
            .ok_or_else(|| {
                status(
                    Code::BadRequest,
                    format!("broker group {broker_name} has no known master: query the topic's route first"),
                )
            })?;
        let link = self
            .links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr.clone())
            .or_insert_with(|| Arc::new(Link::new(addr.clone())))
            .clone();
        link.call(request, timeout).await.map_err(|e| {
            status(
                Code::ProxyTimeout,
                format!("broker group {broker_name} at {addr}: {e}"),
            )
        })
    }
}
