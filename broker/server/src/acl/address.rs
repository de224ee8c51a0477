//! Remote-address patterns of RocketMQ's `plain_acl.yml` (`globalWhiteRemoteAddresses`, an
//! account's `whiteRemoteAddress`), matched against the client's IP without its port:
//! `*` (everyone), an exact address, a comma list of addresses, `a.b.c.{1,2,3}` (a set in the
//! last segment), and `a.b.*.*` or `a.b.c.1-10` (the first `*` or range segment bounds its
//! segment; RocketMQ ignores the segments after it).

use std::net::IpAddr;

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressPattern {
    /// `*`, `*.*.*.*`: every address.
    Any,
    /// Exact addresses (one, a comma list, or a `{…}` set expanded).
    Exact(Vec<IpAddr>),
    /// IPv4 whose first `prefix.len()` segments are `prefix` and whose next one lies in
    /// `low..=high`.
    Range {
        /// The segments that must match literally.
        prefix: Vec<u8>,
        /// Lowest value of the ranged segment.
        low: u8,
        /// Highest value of the ranged segment.
        high: u8,
    },
}

impl std::str::FromStr for AddressPattern {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = || format!("{s:?} is not a remote address pattern");
        if s.is_empty() {
            return Err(bad());
        }
        if s == "*" || s == "*.*.*.*" {
            return Ok(AddressPattern::Any);
        }
        if let Some(set) = s.strip_suffix('}') {
            let (head, items) = set.rsplit_once('{').ok_or_else(bad)?;
            let addrs = items
                .split(',')
                .map(|i| format!("{head}{}", i.trim()).parse::<IpAddr>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad())?;
            return Ok(AddressPattern::Exact(addrs));
        }
        if s.contains(',') {
            let addrs = s
                .split(',')
                .map(|i| i.trim().parse::<IpAddr>())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad())?;
            return Ok(AddressPattern::Exact(addrs));
        }
        if s.contains('*') || s.contains('-') {
            let segments: Vec<&str> = s.split('.').collect();
            if segments.len() != 4 {
                return Err(bad());
            }
            let mut prefix = Vec::new();
            for seg in &segments {
                if *seg == "*" {
                    return Ok(AddressPattern::Range {
                        prefix,
                        low: 0,
                        high: 255,
                    });
                }
                if let Some((a, b)) = seg.split_once('-') {
                    let (low, high) = (
                        a.parse::<u8>().map_err(|_| bad())?,
                        b.parse::<u8>().map_err(|_| bad())?,
                    );
                    if low > high || prefix.is_empty() {
                        return Err(bad());
                    }
                    return Ok(AddressPattern::Range { prefix, low, high });
                }
                prefix.push(seg.parse::<u8>().map_err(|_| bad())?);
            }
            return Err(bad());
        }
        s.parse::<IpAddr>()
            .map(|a| AddressPattern::Exact(vec![a]))
            .map_err(|_| bad())
    }
}

impl AddressPattern {
    /// True when `ip` matches.
    pub fn matches(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match self {
            AddressPattern::Any => true,
            AddressPattern::Exact(addrs) => addrs.contains(&ip),
            AddressPattern::Range { prefix, low, high } => match ip {
                IpAddr::V4(v4) => {
                    let octets = v4.octets();
                    octets[..prefix.len()] == prefix[..]
                        && (*low..=*high).contains(&octets[prefix.len()])
                }
                IpAddr::V6(_) => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, ip: &str) -> bool {
        pattern
            .parse::<AddressPattern>()
            .unwrap()
            .matches(ip.parse().unwrap())
    }

    #[test]
    fn patterns_match_as_rocketmq_reads_them() {
        assert!(m("*", "10.0.0.1"));
        assert!(m("192.168.0.1", "192.168.0.1"));
        assert!(!m("192.168.0.1", "192.168.0.2"));
        assert!(m("192.168.0.1,10.0.0.1", "10.0.0.1"));
        assert!(m("192.168.1.{1,2,3}", "192.168.1.2"));
        assert!(!m("192.168.1.{1,2,3}", "192.168.1.4"));
        assert!(m("192.168.*.*", "192.168.7.9"));
        assert!(!m("192.168.*.*", "192.169.7.9"));
        assert!(m("192.168.1.1-10", "192.168.1.10"));
        assert!(!m("192.168.1.1-10", "192.168.1.11"));
        assert!(m("127.0.0.1", "::ffff:127.0.0.1"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "",
            "1.2.3",
            "1.2.3.x",
            "10-1.2.3.4",
            "1.2.3.9-2",
            "1.2.{a,b}",
        ] {
            assert!(bad.parse::<AddressPattern>().is_err(), "{bad}");
        }
    }
}
