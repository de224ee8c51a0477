//! Where this broker and its group's slaves run: the zone (RocketMQ's `ROCKETMQ_ZONE`, a
//! Kubernetes `topology.kubernetes.io/zone`). It exists so that reads can stay in a zone: a
//! consumer that names its zone is sent to a replica of the group in that zone (see the pull
//! processor's `SlaveReads`). A broker learns its own zone from its settings (possibly late:
//! on Kubernetes the operator writes it once the pod is scheduled); a master learns each
//! slave's from the slave's acknowledgements.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// This broker's zone and, on a master, its slaves' zones by broker id.
#[derive(Debug)]
pub struct Zones {
    /// This broker's zone (`None`: not known); watched by the replication stream, which
    /// passes a change on to the master, and by the registrar, which re-registers.
    own: watch::Sender<Option<String>>,
    /// As a master: the zone each slave last reported, by replica id.
    slaves: Mutex<HashMap<i64, String>>,
}

impl Zones {
    /// Zones starting with this broker's `own`.
    pub fn new(own: Option<String>) -> Self {
        Self {
            own: watch::Sender::new(own),
            slaves: Mutex::new(HashMap::new()),
        }
    }

    /// This broker's zone.
    pub fn own(&self) -> Option<String> {
        self.own.borrow().clone()
    }

    /// Sets this broker's zone; true when it changed.
    pub fn set_own(&self, zone: Option<String>) -> bool {
        self.own.send_if_modified(|z| {
            let changed = *z != zone;
            *z = zone;
            changed
        })
    }

    /// Follows this broker's zone.
    pub fn own_changes(&self) -> watch::Receiver<Option<String>> {
        self.own.subscribe()
    }

    /// A slave reported its zone (`None`: it has none).
    pub fn set_slave(&self, replica_id: i64, zone: Option<String>) {
        let mut slaves = self.slaves.lock().unwrap_or_else(|e| e.into_inner());
        match zone {
            Some(z) => slaves.insert(replica_id, z),
            None => slaves.remove(&replica_id),
        };
    }

    /// The slaves (replica ids, lowest first) that last reported `zone`.
    pub fn slaves_in(&self, zone: &str) -> Vec<i64> {
        let slaves = self.slaves.lock().unwrap_or_else(|e| e.into_inner());
        let mut ids: Vec<i64> = slaves
            .iter()
            .filter(|(_, z)| z.as_str() == zone)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_zone_changes_are_reported_once_and_slaves_are_found_by_zone() {
        let zones = Zones::new(None);
        let mut rx = zones.own_changes();
        assert!(zones.set_own(Some("a".into())));
        assert!(!zones.set_own(Some("a".into())));
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), Some("a".into()));
        assert!(!rx.has_changed().unwrap());

        zones.set_slave(2, Some("b".into()));
        zones.set_slave(1, Some("b".into()));
        zones.set_slave(3, Some("c".into()));
        assert_eq!(zones.slaves_in("b"), vec![1, 2]);
        zones.set_slave(1, None);
        assert_eq!(zones.slaves_in("b"), vec![2]);
        assert!(zones.slaves_in("a").is_empty());
    }
}
