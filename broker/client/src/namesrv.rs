//! Name-server calls (docs/protocol.md §9): topic routes (cached, since every send and
//! pull needs one), cluster info and the topic list, against a `"a:9876;b:9876"` list of
//! name servers with failover: the client sticks to the last name server that answered and
//! moves on to the next one when the transport fails.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use conveyor_protocol::code::{request_code, response_code};
use conveyor_protocol::command::{ExtFields, RemotingCommand};
use conveyor_protocol::json;
use conveyor_protocol::route::{ClusterInfo, TopicList, TopicRouteData};
use tracing::{debug, warn};

use crate::error::{ClientError, Result};
use crate::remoting::{expect_success, RemotingClient};

/// Default time a cached route is used before it is fetched again (Java polls every 30 s).
pub const DEFAULT_ROUTE_TTL: Duration = Duration::from_secs(30);

/// Name-server client with route cache and failover.
#[derive(Debug)]
pub struct NameServerClient {
    remoting: RemotingClient,
    addrs: Vec<String>,
    current: AtomicUsize,
    route_ttl: Duration,
    routes: Mutex<HashMap<String, (Arc<TopicRouteData>, Instant)>>,
}

/// Splits `"a:9876;b:9876"` into addresses (blank entries and whitespace ignored).
pub fn parse_addrs(list: &str) -> Vec<String> {
    list.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

impl NameServerClient {
    /// A client for the name servers in `addrs` (`"a:9876;b:9876"`), using `remoting` for
    /// the connections. Fails if the list is empty.
    pub fn new(remoting: RemotingClient, addrs: &str) -> Result<Self> {
        let addrs = parse_addrs(addrs);
        if addrs.is_empty() {
            return Err(ClientError::NoNameServer);
        }
        Ok(Self {
            remoting,
            addrs,
            current: AtomicUsize::new(0),
            route_ttl: DEFAULT_ROUTE_TTL,
            routes: Mutex::new(HashMap::new()),
        })
    }

    /// Builder: how long a cached route is used.
    pub fn with_route_ttl(mut self, ttl: Duration) -> Self {
        self.route_ttl = ttl;
        self
    }

    /// The configured addresses.
    pub fn addrs(&self) -> &[String] {
        &self.addrs
    }

    /// The underlying transport.
    pub fn remoting(&self) -> &RemotingClient {
        &self.remoting
    }

    /// Sends `request` to the current name server, failing over to the others on transport
    /// errors. Returns the response of whichever answered (any code).
    pub async fn invoke(&self, request: RemotingCommand) -> Result<RemotingCommand> {
        let n = self.addrs.len();
        let start = self.current.load(Ordering::Relaxed) % n;
        let mut last_err = ClientError::NoNameServer;
        for i in 0..n {
            let idx = (start + i) % n;
            let addr = &self.addrs[idx];
            match self.remoting.invoke(addr, request.clone()).await {
                Ok(resp) => {
                    if idx != start {
                        debug!(addr, "switched name server");
                        self.current.store(idx, Ordering::Relaxed);
                    }
                    return Ok(resp);
                }
                Err(e) if e.is_transport() => {
                    warn!(addr, error = %e, "name server unreachable; trying the next one");
                    last_err = e.into();
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_err)
    }

    /// The route of `topic`, from the cache when it is younger than the TTL.
    /// A topic without route is [`ClientError::Server`] with code 17 (TOPIC_NOT_EXIST).
    pub async fn topic_route(&self, topic: &str) -> Result<Arc<TopicRouteData>> {
        if let Some(route) = self.cached_route(topic) {
            return Ok(route);
        }
        self.refresh_route(topic).await
    }

    /// The cached route of `topic` if still fresh.
    pub fn cached_route(&self, topic: &str) -> Option<Arc<TopicRouteData>> {
        let routes = self.routes.lock().unwrap_or_else(|p| p.into_inner());
        routes
            .get(topic)
            .filter(|(_, at)| at.elapsed() < self.route_ttl)
            .map(|(r, _)| r.clone())
    }

    /// Fetches the route of `topic` (GET_ROUTEINFO_BY_TOPIC) and caches it. A missing topic
    /// also drops any cached route.
    pub async fn refresh_route(&self, topic: &str) -> Result<Arc<TopicRouteData>> {
        let request =
            RemotingCommand::request(request_code::GET_ROUTEINFO_BY_TOPIC, ExtFields::new())
                .with_ext("topic", topic);
        let response = self.invoke(request).await?;
        if response.code == response_code::TOPIC_NOT_EXIST {
            self.invalidate(topic);
        }
        let response = expect_success(response)?;
        let route: TopicRouteData = json::from_slice(&response.body)?;
        let route = Arc::new(route);
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(topic.to_string(), (route.clone(), Instant::now()));
        Ok(route)
    }

    /// Forgets the cached route of `topic`.
    pub fn invalidate(&self, topic: &str) {
        self.routes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(topic);
    }

    /// Brokers and clusters (GET_BROKER_CLUSTER_INFO).
    pub async fn cluster_info(&self) -> Result<ClusterInfo> {
        let request =
            RemotingCommand::request(request_code::GET_BROKER_CLUSTER_INFO, ExtFields::new());
        let response = expect_success(self.invoke(request).await?)?;
        Ok(json::from_slice(&response.body)?)
    }

    /// Every topic known to the name server (GET_ALL_TOPIC_LIST_FROM_NAMESERVER).
    pub async fn topic_list(&self) -> Result<Vec<String>> {
        let request = RemotingCommand::request(
            request_code::GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            ExtFields::new(),
        );
        let response = expect_success(self.invoke(request).await?)?;
        let list: TopicList = json::from_slice(&response.body)?;
        Ok(list.topic_list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn address_lists() {
        assert_eq!(
            parse_addrs(" a:9876; b:9876 ;;"),
            vec!["a:9876".to_string(), "b:9876".to_string()]
        );
        assert!(parse_addrs(" ; ").is_empty());
        assert!(matches!(
            NameServerClient::new(RemotingClient::default(), ""),
            Err(ClientError::NoNameServer)
        ));
    }
}
