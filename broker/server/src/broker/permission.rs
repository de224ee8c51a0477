//! The broker's own permission, RocketMQ's `brokerPermission`: read and write bits that cap
//! every topic's. Set read-only at run time (UPDATE_BROKER_CONFIG, `mqadmin
//! updateBrokerConfig -k brokerPermission -v 4`) to drain a broker: sends are refused, and
//! registrations report every topic with the broker's permission, so producers move to other
//! groups on their next route poll while consumers finish what it holds. Not persisted: a
//! restart comes back with the configured permission.

use std::sync::atomic::{AtomicI32, Ordering};

use conveyor_protocol::route::perm;

/// The broker's permission bits.
#[derive(Debug)]
pub struct BrokerPermission(AtomicI32);

impl Default for BrokerPermission {
    fn default() -> Self {
        Self(AtomicI32::new(perm::READ | perm::WRITE))
    }
}

/// A permission value that is not a combination of read (4), write (2) and inherit (1).
#[derive(Debug, thiserror::Error)]
#[error("brokerPermission must be a number from 0 to 7 (read 4, write 2, inherit 1), not {0:?}")]
pub struct InvalidPermission(pub String);

/// Permission bits from their decimal text.
pub fn parse(text: &str) -> Result<i32, InvalidPermission> {
    text.trim()
        .parse()
        .ok()
        .filter(|b| (0..=7).contains(b))
        .ok_or_else(|| InvalidPermission(text.to_string()))
}

impl BrokerPermission {
    /// The current bits.
    pub fn get(&self) -> i32 {
        self.0.load(Ordering::Acquire)
    }

    /// Sets the bits from their decimal text; returns whether they changed.
    pub fn set(&self, text: &str) -> Result<bool, InvalidPermission> {
        let bits = parse(text)?;
        Ok(self.0.swap(bits, Ordering::AcqRel) != bits)
    }

    /// Sends are taken.
    pub fn writable(&self) -> bool {
        self.get() & perm::WRITE != 0
    }

    /// Pulls are served.
    pub fn readable(&self) -> bool {
        self.get() & perm::READ != 0
    }

    /// A topic's permission as registered: its own while the broker is readable and
    /// writable, the broker's otherwise (RocketMQ's rule in `registerBrokerAll`).
    pub fn registered(&self, topic_perm: i32) -> i32 {
        if self.writable() && self.readable() {
            topic_perm
        } else {
            self.get()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_caps_every_topic_and_bad_values_are_refused() {
        let p = BrokerPermission::default();
        assert_eq!(p.registered(perm::READ | perm::WRITE | perm::INHERIT), 7);
        assert!(p.set("4").unwrap());
        assert!(!p.set(" 4 ").unwrap(), "unchanged");
        assert!(!p.writable() && p.readable());
        assert_eq!(p.registered(6), 4);
        for bad in ["8", "-1", "rw", ""] {
            assert!(p.set(bad).is_err(), "{bad}");
        }
        assert_eq!(p.get(), 4);
    }
}
