//! AutoCreateGuard: the one rule for what a client may create just by naming it.
//!
//! RocketMQ creates an unknown topic on its first SEND (from the TBW102 template) and an
//! unknown consumer group on its first PULL or heartbeat. Unbounded, that lets one client grow
//! the tables past what a name-server registration can carry and put a ConsumeQueue per queue
//! of every made-up topic on the disk, until force-clean deletes everyone's oldest data. So
//! auto-creation stops at a table size, and runs at a bounded rate (a token bucket shared by
//! topics and groups); a refused creation gets a remark saying which limit and what to do.
//! Explicit creation by an operator (UPDATE_AND_CREATE_TOPIC, ...) is never limited here.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Limits on auto-creation (`[broker]` settings `auto-create-max-topics`, …).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct AutoCreateLimits {
    /// Topics the broker may hold before auto-creating another is refused.
    pub max_topics: usize,
    /// Subscription groups the broker may hold before auto-creating another is refused.
    pub max_groups: usize,
    /// Creations allowed in a burst.
    pub burst: u32,
    /// Creations per second refilled after a burst.
    pub per_second: f64,
}

impl Default for AutoCreateLimits {
    fn default() -> Self {
        Self {
            max_topics: 4096,
            max_groups: 16_384,
            burst: 200,
            per_second: 50.0,
        }
    }
}

/// What is being created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A topic (from a SEND).
    Topic,
    /// A subscription group (from a PULL, heartbeat or send-back).
    Group,
}

/// Why a creation was refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// The table already holds the most entries auto-creation may reach.
    TableFull {
        /// Topic or group.
        kind: Kind,
        /// The limit.
        limit: usize,
    },
    /// Too many creations in a short time.
    Rate {
        /// The sustained rate allowed.
        per_second: f64,
    },
}

impl Refusal {
    /// The remark sent to the client.
    pub fn remark(&self, name: &str) -> String {
        match self {
            Refusal::TableFull { kind, limit } => {
                let (what, tool) = match kind {
                    Kind::Topic => ("topics", "mqadmin updateTopic"),
                    Kind::Group => ("subscription groups", "mqadmin updateSubGroup"),
                };
                format!(
                    "{name} was not auto-created: the broker holds its limit of {limit} {what} \
                     (auto-create limit); create it explicitly with {tool}"
                )
            }
            Refusal::Rate { per_second } => format!(
                "[OVERLOAD] {name} was not auto-created: auto-creation rate limit of \
                 {per_second}/s reached, try again later"
            ),
        }
    }
}

/// Token bucket state.
#[derive(Debug)]
struct Bucket {
    /// Creations available now.
    tokens: f64,
    /// When `tokens` was last refilled.
    at: Instant,
}

/// Admits or refuses auto-creations.
#[derive(Debug)]
pub struct AutoCreateGuard {
    /// The limits.
    limits: AutoCreateLimits,
    /// The shared rate bucket.
    bucket: Mutex<Bucket>,
}

impl AutoCreateGuard {
    /// A guard with a full bucket.
    pub fn new(limits: AutoCreateLimits) -> Self {
        Self {
            bucket: Mutex::new(Bucket {
                tokens: f64::from(limits.burst),
                at: Instant::now(),
            }),
            limits,
        }
    }

    /// Whether one more `kind` may be created while its table holds `existing` entries
    /// (takes a token when it may). Callers hold their table's write lock, so the count
    /// cannot change between this check and the insert.
    pub fn admit(&self, kind: Kind, existing: usize) -> Result<(), Refusal> {
        self.admit_at(kind, existing, Instant::now())
    }

    fn admit_at(&self, kind: Kind, existing: usize, now: Instant) -> Result<(), Refusal> {
        let limit = match kind {
            Kind::Topic => self.limits.max_topics,
            Kind::Group => self.limits.max_groups,
        };
        if existing >= limit {
            return Err(Refusal::TableFull { kind, limit });
        }
        let mut b = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.limits.per_second).min(f64::from(self.limits.burst));
        b.at = now;
        if b.tokens < 1.0 {
            return Err(Refusal::Rate {
                per_second: self.limits.per_second,
            });
        }
        b.tokens -= 1.0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn table_limit_and_rate_refill() {
        let guard = AutoCreateGuard::new(AutoCreateLimits {
            max_topics: 10,
            max_groups: 2,
            burst: 2,
            per_second: 1.0,
        });
        let t0 = Instant::now();
        assert!(guard.admit_at(Kind::Topic, 3, t0).is_ok());
        assert_eq!(
            guard.admit_at(Kind::Group, 2, t0),
            Err(Refusal::TableFull {
                kind: Kind::Group,
                limit: 2
            })
        );
        assert!(guard.admit_at(Kind::Group, 1, t0).is_ok());
        assert!(matches!(
            guard.admit_at(Kind::Topic, 3, t0),
            Err(Refusal::Rate { .. })
        ));
        // One second refills one token, never more than the burst.
        let t1 = t0 + Duration::from_secs(1);
        assert!(guard.admit_at(Kind::Topic, 3, t1).is_ok());
        assert!(guard.admit_at(Kind::Topic, 3, t1).is_err());
        let t2 = t1 + Duration::from_secs(100);
        assert!(guard.admit_at(Kind::Topic, 3, t2).is_ok());
        assert!(guard.admit_at(Kind::Topic, 3, t2).is_ok());
        assert!(guard.admit_at(Kind::Topic, 3, t2).is_err());
    }

    #[test]
    fn remarks_name_the_limit_and_the_way_out() {
        let r = Refusal::TableFull {
            kind: Kind::Topic,
            limit: 7,
        };
        let text = r.remark("T");
        assert!(
            text.contains("limit of 7 topics") && text.contains("updateTopic"),
            "{text}"
        );
        assert!(Refusal::Rate { per_second: 5.0 }
            .remark("G")
            .contains("rate limit"));
    }
}
