//! Who this client is on the wire: the local IP (used in client ids and UNIQ_KEY message ids)
//! and the client id that heartbeats carry. Brokers group connections by client id, so two
//! consumers in one process must not share one.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};

/// The IP used when no connection has revealed the local address yet.
pub const FALLBACK_IP: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

static INSTANCE_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new client id `ip@pid#n#random`: unique per call within the process (counter) and
/// across processes (pid and random part), in the `ip@instance` shape Java uses.
pub fn new_client_id(ip: IpAddr) -> String {
    let n = INSTANCE_COUNTER.fetch_add(1, Ordering::Relaxed);
    let salt: u32 = rand::random();
    format!("{ip}@{}#{n}#{salt}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_distinct_and_shaped() {
        let a = new_client_id(FALLBACK_IP);
        let b = new_client_id(FALLBACK_IP);
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("127.0.0.1@{}#", std::process::id())));
    }
}
