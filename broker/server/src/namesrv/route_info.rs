//! RouteInfo: the name server's whole state — which brokers are alive, which clusters they
//! form and which topics they serve — as a pure data structure (no IO), so registration,
//! expiry and route building are unit-tested directly.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use conveyor_protocol::route::{
    perm, BrokerData, ClusterInfo, DataVersion, QueueData, TopicConfig, TopicRouteData, MASTER_ID,
};

use crate::remoting::ConnectionId;

/// A broker registration (REGISTER_BROKER header plus body).
#[derive(Debug, Clone)]
pub struct Registration {
    /// Cluster the broker belongs to (`clusterName`).
    pub cluster: String,
    /// Broker group (`brokerName`), shared by a master and its slaves.
    pub broker_name: String,
    /// Address clients use (`brokerAddr`).
    pub broker_addr: String,
    /// 0 for the master, 1+ for slaves (`brokerId`).
    pub broker_id: i64,
    /// Replication address slaves connect to (`haServerAddr`).
    pub ha_server_addr: String,
    /// The zone the broker runs in (`__ZONE_NAME`), if it says.
    pub zone: Option<String>,
    /// How long the registration stays valid without a renewal.
    pub timeout: Duration,
    /// Version of the broker's topic table; an unchanged version skips the merge.
    pub data_version: DataVersion,
    /// The broker's topics.
    pub topics: Vec<TopicConfig>,
    /// The connection it arrived on (its close removes the broker at once).
    pub connection: Option<ConnectionId>,
    /// The master epoch the broker is in (Conveyor's `masterEpoch`; 0 when not sent). A
    /// master registration from an older epoch than the group's current one is ignored.
    pub master_epoch: u32,
}

#[derive(Debug, Clone)]
struct LiveBroker {
    last_update: Instant,
    timeout: Duration,
    broker_name: String,
    broker_id: i64,
    connection: Option<ConnectionId>,
    ha_server_addr: String,
}

/// The route table.
#[derive(Debug, Default)]
pub struct RouteInfo {
    brokers: BTreeMap<String, BrokerData>,
    clusters: BTreeMap<String, BTreeSet<String>>,
    topics: BTreeMap<String, BTreeMap<String, QueueData>>,
    live: HashMap<String, LiveBroker>,
    /// The newest master epoch registered per group.
    master_epochs: HashMap<String, u32>,
    /// Groups whose write permission an admin took off (`mqadmin wipeWritePerm`): their
    /// registrations keep coming, but their topics stay read-only here until
    /// `addWritePerm` (RocketMQ's wipe lasts only until the broker's topics change).
    wiped: BTreeSet<String>,
}

/// What a registration returns to the broker.
#[derive(Debug, Clone, Default)]
pub struct RegisterResult {
    /// For a slave: its group's master address, when one is registered.
    pub master_addr: Option<String>,
    /// For a slave: the master's replication address.
    pub ha_server_addr: Option<String>,
}

impl RouteInfo {
    /// Records a registration: adds the broker to its cluster and group and, for a master,
    /// merges its topics (registrations may be incremental, so topics are never removed here).
    pub fn register(&mut self, reg: Registration, now: Instant) -> RegisterResult {
        if reg.broker_id == MASTER_ID {
            let current = self
                .master_epochs
                .get(&reg.broker_name)
                .copied()
                .unwrap_or(0);
            if reg.master_epoch < current {
                tracing::warn!(
                    broker = %reg.broker_addr,
                    epoch = reg.master_epoch,
                    current,
                    "registration of a deposed master ignored"
                );
                return RegisterResult::default();
            }
            self.master_epochs
                .insert(reg.broker_name.clone(), reg.master_epoch);
        }
        // A broker registering under a new address (a promoted slave now registering its
        // group's address) drops its slave entry, known by its replication address, which
        // would otherwise linger until it expired. Master entries are never dropped here: the
        // group's address stays routable while a deposed master re-registers as a slave.
        if !reg.ha_server_addr.is_empty() {
            let stale: Vec<String> = self
                .live
                .iter()
                .filter(|(addr, l)| {
                    l.broker_name == reg.broker_name
                        && l.broker_id != MASTER_ID
                        && l.ha_server_addr == reg.ha_server_addr
                        && **addr != reg.broker_addr
                })
                .map(|(addr, _)| addr.clone())
                .collect();
            for addr in stale {
                self.unregister(&addr);
            }
        }
        self.clusters
            .entry(reg.cluster.clone())
            .or_default()
            .insert(reg.broker_name.clone());
        let data = self
            .brokers
            .entry(reg.broker_name.clone())
            .or_insert_with(|| BrokerData {
                cluster: reg.cluster.clone(),
                broker_name: reg.broker_name.clone(),
                ..Default::default()
            });
        data.cluster = reg.cluster.clone();
        // A group's zone is where its master runs (where its writes land); until a master
        // says, the first replica that does.
        if reg.zone.is_some() && (reg.broker_id == MASTER_ID || data.zone_name.is_none()) {
            data.zone_name = reg.zone.clone();
        }
        // The same address under another id (a slave promoted to master) replaces the old id.
        data.broker_addrs
            .retain(|id, addr| *addr != reg.broker_addr || *id == reg.broker_id);
        data.broker_addrs
            .insert(reg.broker_id, reg.broker_addr.clone());
        if reg.broker_id == MASTER_ID {
            let wiped = self.wiped.contains(&reg.broker_name);
            for t in &reg.topics {
                self.topics.entry(t.topic_name.clone()).or_default().insert(
                    reg.broker_name.clone(),
                    QueueData {
                        broker_name: reg.broker_name.clone(),
                        perm: if wiped { t.perm & !perm::WRITE } else { t.perm },
                        read_queue_nums: t.read_queue_nums,
                        write_queue_nums: t.write_queue_nums,
                        topic_sys_flag: t.topic_sys_flag,
                    },
                );
            }
        }
        self.live.insert(
            reg.broker_addr.clone(),
            LiveBroker {
                last_update: now,
                timeout: reg.timeout,
                broker_name: reg.broker_name.clone(),
                broker_id: reg.broker_id,
                connection: reg.connection,
                ha_server_addr: reg.ha_server_addr.clone(),
            },
        );
        let mut result = RegisterResult::default();
        if reg.broker_id != MASTER_ID {
            if let Some(master) = self
                .brokers
                .get(&reg.broker_name)
                .and_then(|b| b.master_addr())
                .map(str::to_string)
            {
                result.ha_server_addr = self.live.get(&master).map(|l| l.ha_server_addr.clone());
                result.master_addr = Some(master);
            }
        }
        result
    }

    /// UNREGISTER_BROKER of `broker_addr` over `conn`: ignored when another connection
    /// registered that address since (a group's address, now registered by the group's new
    /// master, is not taken away by its former master shutting down).
    pub fn unregister_by(&mut self, broker_addr: &str, conn: ConnectionId) {
        if let Some(holder) = self.live.get(broker_addr).and_then(|l| l.connection) {
            if holder != conn {
                tracing::info!(
                    broker = broker_addr,
                    "unregistration ignored: another broker registered this address since"
                );
                return;
            }
        }
        self.unregister(broker_addr);
    }

    /// Removes one broker address (UNREGISTER_BROKER, expiry, closed connection).
    pub fn unregister(&mut self, broker_addr: &str) {
        let Some(live) = self.live.remove(broker_addr) else {
            return;
        };
        let mut group_gone = false;
        if let Some(data) = self.brokers.get_mut(&live.broker_name) {
            data.broker_addrs
                .retain(|id, addr| !(addr == broker_addr && *id == live.broker_id));
            group_gone = data.broker_addrs.is_empty();
        }
        if group_gone {
            let name = live.broker_name;
            if let Some(data) = self.brokers.remove(&name) {
                if let Some(set) = self.clusters.get_mut(&data.cluster) {
                    set.remove(&name);
                    if set.is_empty() {
                        self.clusters.remove(&data.cluster);
                    }
                }
            }
            self.topics.retain(|_, by_broker| {
                by_broker.remove(&name);
                !by_broker.is_empty()
            });
        }
        tracing::info!(broker = broker_addr, "broker unregistered");
    }

    /// Drops brokers not heard from within their timeout; returns their addresses.
    pub fn expire(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .live
            .iter()
            .filter(|(_, l)| now.duration_since(l.last_update) > l.timeout)
            .map(|(a, _)| a.clone())
            .collect();
        for addr in &expired {
            tracing::warn!(broker = %addr, "broker registration expired");
            self.unregister(addr);
        }
        expired
    }

    /// Drops brokers registered over a connection that just closed.
    pub fn connection_closed(&mut self, conn: ConnectionId) {
        let gone: Vec<String> = self
            .live
            .iter()
            .filter(|(_, l)| l.connection == Some(conn))
            .map(|(a, _)| a.clone())
            .collect();
        for addr in gone {
            self.unregister(&addr);
        }
    }

    /// The route of `topic`, if some live broker serves it.
    pub fn route(&self, topic: &str) -> Option<TopicRouteData> {
        let by_broker = self.topics.get(topic)?;
        let queue_datas: Vec<QueueData> = by_broker.values().cloned().collect();
        let broker_datas: Vec<BrokerData> = by_broker
            .keys()
            .filter_map(|name| self.brokers.get(name).cloned())
            .collect();
        if broker_datas.is_empty() {
            return None;
        }
        Some(TopicRouteData {
            broker_datas,
            queue_datas,
            ..Default::default()
        })
    }

    /// GET_BROKER_CLUSTER_INFO body.
    pub fn cluster_info(&self) -> ClusterInfo {
        ClusterInfo {
            broker_addr_table: self.brokers.clone(),
            cluster_addr_table: self
                .clusters
                .iter()
                .map(|(c, names)| (c.clone(), names.iter().cloned().collect()))
                .collect(),
        }
    }

    /// All topic names.
    pub fn topics(&self) -> Vec<String> {
        self.topics.keys().cloned().collect()
    }

    /// Topics served by brokers of `cluster`.
    pub fn topics_of_cluster(&self, cluster: &str) -> Vec<String> {
        let Some(names) = self.clusters.get(cluster) else {
            return Vec::new();
        };
        self.topics
            .iter()
            .filter(|(_, by)| by.keys().any(|b| names.contains(b)))
            .map(|(t, _)| t.clone())
            .collect()
    }

    /// Takes the write permission off every topic of broker group `broker_name`
    /// (WIPE_WRITE_PERM_OF_BROKER), and off what it registers later; returns how many topics
    /// it serves.
    pub fn wipe_write_perm(&mut self, broker_name: &str) -> usize {
        self.wiped.insert(broker_name.to_string());
        self.set_perms(broker_name, |p| p & !perm::WRITE)
    }

    /// Gives every topic of broker group `broker_name` read and write permission again
    /// (ADD_WRITE_PERM_OF_BROKER, RocketMQ's `PERM_READ | PERM_WRITE`); returns how many topics
    /// it serves.
    pub fn add_write_perm(&mut self, broker_name: &str) -> usize {
        self.wiped.remove(broker_name);
        self.set_perms(broker_name, |_| perm::READ_WRITE)
    }

    fn set_perms(&mut self, broker_name: &str, change: impl Fn(i32) -> i32) -> usize {
        let mut count = 0;
        for by_broker in self.topics.values_mut() {
            if let Some(q) = by_broker.get_mut(broker_name) {
                q.perm = change(q.perm);
                count += 1;
            }
        }
        count
    }

    /// Removes a topic everywhere (DELETE_TOPIC_IN_NAMESRV).
    /// Forgets `topic` on the broker groups of `cluster` (RocketMQ's DELETE_TOPIC_IN_NAMESRV
    /// with `clusterName`; an unknown cluster changes nothing), or everywhere without one.
    pub fn delete_topic(&mut self, topic: &str, cluster: Option<&str>) {
        let Some(cluster) = cluster else {
            self.topics.remove(topic);
            return;
        };
        let Some(groups) = self.clusters.get(cluster) else {
            return;
        };
        if let Some(queues) = self.topics.get_mut(topic) {
            queues.retain(|broker_name, _| !groups.contains(broker_name));
            if queues.is_empty() {
                self.topics.remove(topic);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(name: &str, addr: &str, id: i64, topics: &[(&str, i32)]) -> Registration {
        Registration {
            master_epoch: 0,
            cluster: "DefaultCluster".into(),
            broker_name: name.into(),
            broker_addr: addr.into(),
            broker_id: id,
            ha_server_addr: format!("{addr}-ha"),
            zone: None,
            timeout: Duration::from_secs(120),
            data_version: DataVersion::default(),
            topics: topics
                .iter()
                .map(|(t, q)| TopicConfig {
                    topic_name: t.to_string(),
                    read_queue_nums: *q,
                    write_queue_nums: *q,
                    perm: 6,
                    ..Default::default()
                })
                .collect(),
            connection: Some(7),
        }
    }

    #[test]
    fn routes_merge_incremental_registrations() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        r.register(reg("a", "10.0.0.1:10911", 0, &[("T1", 4)]), now);
        r.register(reg("a", "10.0.0.1:10911", 0, &[("T2", 8)]), now);
        r.register(reg("b", "10.0.0.2:10911", 0, &[("T1", 2)]), now);
        let route = r.route("T1").unwrap();
        assert_eq!(route.broker_datas.len(), 2);
        assert_eq!(route.queue_datas.len(), 2);
        assert_eq!(r.route("T2").unwrap().queue_datas[0].write_queue_nums, 8);
        assert!(r.route("T3").is_none());
        assert_eq!(
            r.cluster_info().cluster_addr_table["DefaultCluster"],
            vec!["a", "b"]
        );
    }

    #[test]
    fn deleting_a_topic_for_a_cluster_keeps_it_on_other_clusters() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        r.register(reg("a", "m:1", 0, &[("T1", 4), ("T2", 4)]), now);
        let mut other = reg("b", "n:1", 0, &[("T1", 4)]);
        other.cluster = "Other".into();
        r.register(other, now);
        r.delete_topic("T1", Some("Unknown"));
        assert_eq!(
            r.route("T1").unwrap().queue_datas.len(),
            2,
            "unknown cluster"
        );
        r.delete_topic("T1", Some("DefaultCluster"));
        let left = r.route("T1").unwrap();
        assert_eq!(left.queue_datas.len(), 1);
        assert_eq!(left.queue_datas[0].broker_name, "b");
        r.delete_topic("T1", Some("Other"));
        assert!(r.route("T1").is_none(), "gone with its last broker group");
        r.delete_topic("T2", None);
        assert!(r.route("T2").is_none());
    }

    #[test]
    fn a_wiped_group_stays_read_only_through_registrations_until_write_is_added_back() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        r.register(reg("a", "m:1", 0, &[("T1", 4), ("T2", 4)]), now);
        r.register(reg("b", "n:1", 0, &[("T1", 4)]), now);
        let perm_of = |r: &RouteInfo, topic: &str, broker: &str| {
            r.route(topic)
                .unwrap()
                .queue_datas
                .iter()
                .find(|q| q.broker_name == broker)
                .unwrap()
                .perm
        };
        assert_eq!(r.wipe_write_perm("a"), 2);
        assert_eq!(perm_of(&r, "T1", "a"), perm::READ);
        assert_eq!(
            perm_of(&r, "T1", "b"),
            perm::READ_WRITE,
            "other groups untouched"
        );
        r.register(reg("a", "m:1", 0, &[("T1", 4), ("T2", 4)]), now);
        assert_eq!(
            perm_of(&r, "T2", "a"),
            perm::READ,
            "kept through a registration"
        );
        assert_eq!(r.add_write_perm("a"), 2);
        assert_eq!(perm_of(&r, "T2", "a"), perm::READ_WRITE);
        r.register(reg("a", "m:1", 0, &[("T1", 4), ("T2", 4)]), now);
        assert_eq!(perm_of(&r, "T1", "a"), perm::READ_WRITE);
        assert_eq!(r.wipe_write_perm("nobody"), 0);
    }

    #[test]
    fn a_groups_zone_is_its_masters_once_the_master_says() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        let zoned = |addr: &str, id, zone: &str| Registration {
            zone: Some(zone.into()),
            ..reg("a", addr, id, &[("T", 4)])
        };
        r.register(zoned("s:1", 1, "zone-2"), now);
        let zone = |r: &RouteInfo| r.cluster_info().broker_addr_table["a"].zone_name.clone();
        assert_eq!(
            zone(&r).as_deref(),
            Some("zone-2"),
            "the first replica's until then"
        );
        r.register(zoned("m:1", 0, "zone-1"), now);
        r.register(zoned("s:1", 1, "zone-2"), now);
        assert_eq!(zone(&r).as_deref(), Some("zone-1"));
        assert_eq!(
            r.route("T").unwrap().broker_datas[0].zone_name.as_deref(),
            Some("zone-1")
        );
        // A master that says nothing keeps what is known.
        r.register(reg("a", "m:1", 0, &[]), now);
        assert_eq!(zone(&r).as_deref(), Some("zone-1"));
    }

    #[test]
    fn a_deposed_masters_late_registration_is_ignored() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        let master = |addr: &str, epoch| Registration {
            master_epoch: epoch,
            ..reg("broker-a", addr, 0, &[("T", 4)])
        };
        r.register(master("10.0.0.1:10911", 2), now);
        r.register(master("10.0.0.2:10911", 3), now);
        let id0 = |r: &RouteInfo| r.route("T").unwrap().broker_datas[0].broker_addrs[&0].clone();
        assert_eq!(id0(&r), "10.0.0.2:10911", "the newer epoch takes id 0");
        r.register(master("10.0.0.1:10911", 2), now);
        assert_eq!(id0(&r), "10.0.0.2:10911", "the older epoch is ignored");
        // The deposed master comes back as a slave: registered under its own id.
        r.register(reg("broker-a", "10.0.0.1:10911", 2, &[]), now);
        let data = &r.route("T").unwrap().broker_datas[0];
        assert_eq!(data.broker_addrs[&0], "10.0.0.2:10911");
        assert_eq!(data.broker_addrs[&2], "10.0.0.1:10911");
    }

    #[test]
    fn a_promoted_slave_registering_its_groups_address_drops_its_slave_entry() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        let as_member = |addr: &str, id, ha: &str, epoch| Registration {
            ha_server_addr: ha.into(),
            master_epoch: epoch,
            ..reg("broker-a", addr, id, &[("T", 4)])
        };
        // Master 1 registers the group's address; replica 2 its own, as a slave.
        r.register(as_member("group:1", 0, "b1:2", 1), now);
        r.register(as_member("b2:1", 3, "b2:2", 1), now);
        // Replica 2 is promoted: it registers the group's address under id 0.
        r.register(as_member("group:1", 0, "b2:2", 2), now);
        let addrs = &r.route("T").unwrap().broker_datas[0].broker_addrs;
        assert_eq!(addrs.len(), 1, "{addrs:?}");
        assert_eq!(addrs[&0], "group:1");
        // The former master, thawed, re-registers as a slave (its own address) before the new
        // master's next registration: the group's address stays id 0.
        r.register(as_member("b1:1", 2, "b1:2", 2), now);
        let addrs = &r.route("T").unwrap().broker_datas[0].broker_addrs;
        assert_eq!(
            addrs.get(&0).map(String::as_str),
            Some("group:1"),
            "{addrs:?}"
        );
        r.unregister("b1:1");
        // The former master shutting down cannot unregister the group's address, which the
        // new master's connection holds now.
        let mut by_new = as_member("group:1", 0, "b2:2", 3);
        by_new.connection = Some(7);
        r.register(by_new, now);
        r.unregister_by("group:1", 8);
        assert_eq!(
            r.route("T").unwrap().broker_datas[0].broker_addrs[&0],
            "group:1"
        );
        r.unregister_by("group:1", 7);
        assert!(r.route("T").is_none());
    }

    #[test]
    fn slaves_learn_their_master_and_do_not_change_topics() {
        let mut r = RouteInfo::default();
        let now = Instant::now();
        r.register(reg("a", "m:1", 0, &[("T", 4)]), now);
        let res = r.register(reg("a", "s:1", 1, &[("T", 99)]), now);
        assert_eq!(res.master_addr.as_deref(), Some("m:1"));
        assert_eq!(res.ha_server_addr.as_deref(), Some("m:1-ha"));
        assert_eq!(r.route("T").unwrap().queue_datas[0].write_queue_nums, 4);
        assert_eq!(r.route("T").unwrap().broker_datas[0].broker_addrs.len(), 2);
    }

    #[test]
    fn expiry_and_closed_connections_remove_brokers_and_orphan_topics() {
        let mut r = RouteInfo::default();
        let t0 = Instant::now();
        r.register(reg("a", "m:1", 0, &[("T", 4)]), t0);
        let mut other = reg("b", "m:2", 0, &[("U", 4)]);
        other.connection = Some(9);
        r.register(other, t0);
        assert!(r.expire(t0 + Duration::from_secs(60)).is_empty());
        assert_eq!(r.expire(t0 + Duration::from_secs(121)).len(), 2);
        assert!(r.route("T").is_none());
        assert!(r.cluster_info().cluster_addr_table.is_empty());
        r.register(reg("a", "m:1", 0, &[("T", 4)]), t0);
        r.connection_closed(7);
        assert!(r.route("T").is_none());
        assert!(r.topics().is_empty());
    }
}
