//! Client-generated message ids (`UNIQ_KEY`, docs/protocol.md §4.6; made by clients, and by
//! the broker for messages that arrive without one), in the Java layout so
//! that tools which decode them (and humans reading them) see the familiar shape:
//!
//! `HEX_UPPER( ip (4|16 bytes) ‖ int16 pid ‖ int32 random "class loader hash" ‖
//! int32 ms since the start of the current month ‖ int16 counter )`
//!
//! → 32 hex characters for IPv4, 56 for IPv6. The month is taken in UTC (Java uses the local
//! time zone; the value is opaque to every reader, so only uniqueness matters).

use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};

pub use crate::time::month_start_ms;

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Generates UNIQ_KEY ids. Thread-safe; one per producer is typical.
#[derive(Debug)]
pub struct UniqIdGenerator {
    /// Hex of ip ‖ pid ‖ hash (fixed for the generator's life).
    prefix: String,
    counter: AtomicU32,
}

/// The fields of a UNIQ_KEY, for diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UniqIdParts {
    /// Producer IP.
    pub ip: IpAddr,
    /// Low 16 bits of the producer's process id.
    pub pid: u16,
    /// Per-generator random value (Java: class loader hash).
    pub hash: i32,
    /// Milliseconds since the start of the month when the id was made.
    pub ms_in_month: i32,
    /// Per-generator counter (wraps at 2^16).
    pub counter: u16,
}

impl UniqIdGenerator {
    /// A generator for this process with a random hash part.
    pub fn new(ip: IpAddr) -> Self {
        Self::with_parts(ip, std::process::id() as u16, rand::random())
    }

    /// A generator with explicit fixed parts.
    pub fn with_parts(ip: IpAddr, pid: u16, hash: i32) -> Self {
        let mut raw = Vec::with_capacity(22);
        match ip {
            IpAddr::V4(v4) => raw.extend_from_slice(&v4.octets()),
            IpAddr::V6(v6) => raw.extend_from_slice(&v6.octets()),
        }
        raw.extend_from_slice(&pid.to_be_bytes());
        raw.extend_from_slice(&hash.to_be_bytes());
        let mut prefix = String::with_capacity(raw.len() * 2 + 12);
        push_hex(&mut prefix, &raw);
        Self {
            prefix,
            counter: AtomicU32::new(0),
        }
    }

    /// The next id, using the current wall-clock time.
    pub fn next_id(&self) -> String {
        self.next_id_at(crate::time::now_ms())
    }

    /// The next id as if the time were `now_ms` (ms since the Unix epoch).
    pub fn next_id_at(&self, now_ms: i64) -> String {
        let in_month = (now_ms - month_start_ms(now_ms)) as i32;
        let counter = self.counter.fetch_add(1, Ordering::Relaxed) as u16;
        let mut id = String::with_capacity(self.prefix.len() + 12);
        id.push_str(&self.prefix);
        push_hex(&mut id, &in_month.to_be_bytes());
        push_hex(&mut id, &counter.to_be_bytes());
        id
    }
}

/// Parses an id made by [`UniqIdGenerator`] (or by a Java client). `None` if the length is
/// not 32/56 or it is not hex.
pub fn parse_uniq_id(id: &str) -> Option<UniqIdParts> {
    let (raw, ip) = crate::message::decode_id_with_ip(id)?;
    let ip_len = if ip.is_ipv4() { 4 } else { 16 };
    let r = &raw[ip_len..];
    Some(UniqIdParts {
        ip,
        pid: u16::from_be_bytes([r[0], r[1]]),
        hash: i32::from_be_bytes([r[2], r[3], r[4], r[5]]),
        ms_in_month: i32::from_be_bytes([r[6], r[7], r[8], r[9]]),
        counter: u16::from_be_bytes([r[10], r[11]]),
    })
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    for b in bytes {
        out.push(char::from(HEX[(b >> 4) as usize]));
        out.push(char::from(HEX[(b & 15) as usize]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_start() {
        // 2024-03-15T12:34:56.789Z → 2024-03-01T00:00:00Z
        assert_eq!(month_start_ms(1_710_506_096_789), 1_709_251_200_000);
        // exactly at a month start
        assert_eq!(month_start_ms(1_709_251_200_000), 1_709_251_200_000);
        // 2024-02-29T23:59:59.999Z (leap day) → 2024-02-01
        assert_eq!(month_start_ms(1_709_251_199_999), 1_706_745_600_000);
        // epoch
        assert_eq!(month_start_ms(0), 0);
        // 1969-12-31T23:00:00Z → 1969-12-01
        assert_eq!(month_start_ms(-3_600_000), -2_678_400_000);
    }

    #[test]
    fn ipv4_layout_is_java_shape() {
        let g = UniqIdGenerator::with_parts("10.1.2.3".parse().unwrap(), 0x1234, -2);
        // 2024-03-15T12:34:56.789Z: 14 days + 12:34:56.789 into the month
        let now = 1_710_506_096_789;
        let a = g.next_id_at(now);
        let b = g.next_id_at(now);
        assert_eq!(a.len(), 32);
        let in_month: i32 = 14 * 86_400_000 + 45_296_789;
        let expected = String::from("0A010203") // ip
            + "1234" // pid
            + "FFFFFFFE" // hash
            + &format!("{in_month:08X}")
            + "0000";
        assert_eq!(a, expected);
        assert!(b.ends_with("0001"));
        assert!(a
            .chars()
            .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
        let p = parse_uniq_id(&b).unwrap();
        assert_eq!(
            p,
            UniqIdParts {
                ip: "10.1.2.3".parse().unwrap(),
                pid: 0x1234,
                hash: -2,
                ms_in_month: in_month,
                counter: 1
            }
        );
    }

    #[test]
    fn ipv6_and_uniqueness() {
        let g = UniqIdGenerator::new("2001:db8::1".parse().unwrap());
        let id = g.next_id();
        assert_eq!(id.len(), 56);
        assert_eq!(
            parse_uniq_id(&id).unwrap().ip,
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| g.next_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(parse_uniq_id("XYZ").is_none());
        assert!(parse_uniq_id(&id[..30]).is_none());
    }
}
