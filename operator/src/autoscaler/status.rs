//! The autoscaler's status as a pure function of what one poll saw and decided: the numbers
//! users and `kubectl get cas` read, and the conditions `Active`, `Capped`,
//! `MetricsAvailable`, `FallbackActive` (plus `Paused`), spelled here once.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

use super::recommend::{Cap, Decision, Events};
use super::resource::{ConsumerAutoscalerStatus, HistoryEntry, ScalingHistory};
use crate::reconcile::status::condition_of;

/// The backlog is above the activation threshold.
pub const ACTIVE: &str = "Active";
/// The count would be higher without the queue cap or `maxReplicas`.
pub const CAPPED: &str = "Capped";
/// The last backlog read succeeded.
pub const METRICS_AVAILABLE: &str = "MetricsAvailable";
/// The fallback count applies.
pub const FALLBACK_ACTIVE: &str = "FallbackActive";
/// The pause annotation is set: the target's count is left alone.
pub const PAUSED: &str = "Paused";

/// What one poll observed besides the decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Poll<'a> {
    /// The target's replicas when read.
    pub current: u32,
    /// The backlog, or why it could not be read.
    pub backlog: Result<u64, &'a str>,
    /// The queue cap, when read.
    pub queue_cap: Option<u32>,
    /// The decision.
    pub decision: &'a Decision,
    /// Failed reads in a row, after this poll.
    pub failures: u32,
    /// The last time the backlog was above the activation threshold.
    pub last_active: Option<Timestamp>,
    /// The memory's events after the decision.
    pub events: Events,
}

/// The events a status kept (none when it kept none).
pub fn events_of(status: &ConsumerAutoscalerStatus) -> Events {
    let read = |entries: &[HistoryEntry]| -> Vec<(i64, u32)> {
        entries
            .iter()
            .map(|e| (e.at_ms, e.replicas.max(0) as u32))
            .collect()
    };
    status
        .history
        .as_ref()
        .map(|h| Events {
            recommendations: read(&h.recommendations),
            ups: read(&h.scale_ups),
            downs: read(&h.scale_downs),
        })
        .unwrap_or_default()
}

/// The status form of a memory's events.
fn history_of(events: &Events) -> ScalingHistory {
    let write = |events: &[(i64, u32)]| -> Vec<HistoryEntry> {
        events
            .iter()
            .map(|&(at_ms, n)| HistoryEntry {
                at_ms,
                replicas: i32::try_from(n).unwrap_or(i32::MAX),
            })
            .collect()
    };
    ScalingHistory {
        recommendations: write(&events.recommendations),
        scale_ups: write(&events.ups),
        scale_downs: write(&events.downs),
    }
}

/// The status after a poll.
pub fn after_poll(
    old: &ConsumerAutoscalerStatus,
    generation: Option<i64>,
    poll: &Poll<'_>,
    now: Timestamp,
) -> ConsumerAutoscalerStatus {
    let cond = |type_: &str, holds: bool, reason: &str, message: String| {
        condition_of(
            &old.conditions,
            type_,
            holds,
            reason,
            message,
            generation,
            now,
        )
    };
    let d = poll.decision;
    let (active_reason, active_message) = match poll.backlog {
        Ok(b) if d.active => ("BacklogAboveActivation", format!("backlog {b}")),
        Ok(b) => ("BacklogAtOrBelowActivation", format!("backlog {b}")),
        Err(_) => ("MetricsUnavailable", "the backlog is not known".to_string()),
    };
    let capped = match d.capped {
        Some(Cap::Queues(n)) => cond(
            CAPPED,
            true,
            "QueueLimit",
            format!("the group can use {n} read queues; more consumers would idle"),
        ),
        Some(Cap::MaxReplicas(n)) => cond(CAPPED, true, "MaxReplicas", format!("maxReplicas {n}")),
        None => cond(CAPPED, false, "BelowCap", String::new()),
    };
    let metrics = match poll.backlog {
        Ok(_) => cond(METRICS_AVAILABLE, true, "BacklogRead", String::new()),
        Err(why) => cond(METRICS_AVAILABLE, false, "ReadFailed", why.to_string()),
    };
    let fallback = if d.fallback {
        cond(
            FALLBACK_ACTIVE,
            true,
            "FailureThresholdReached",
            d.reason.clone(),
        )
    } else {
        cond(FALLBACK_ACTIVE, false, "NotNeeded", String::new())
    };
    let scaled = d.desired != poll.current;
    ConsumerAutoscalerStatus {
        observed_generation: generation,
        current_replicas: Some(poll.current as i32),
        desired_replicas: Some(d.desired as i32),
        observed_backlog: poll.backlog.ok().map(|b| b as i64),
        queue_cap: poll.queue_cap.map(|c| c as i32),
        last_scale_time: if scaled {
            Some(Time(now))
        } else {
            old.last_scale_time.clone()
        },
        last_active_time: poll.last_active.map(Time),
        consecutive_failures: poll.failures as i32,
        history: Some(history_of(&poll.events)),
        conditions: vec![
            cond(ACTIVE, d.active, active_reason, active_message),
            capped,
            metrics,
            fallback,
        ],
    }
}

/// Why an autoscaler leaves its target alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The pause annotation is set.
    Paused,
    /// The spec cannot be carried out (bad rules, an unknown target kind, no ScaledObject).
    InvalidSpec,
    /// Another autoscaler scales the same target ([`super::conflicts`]).
    Conflict,
}

/// The status while held (see [`Hold`]): the numbers stay, and the `Active` condition says
/// why nothing happens.
pub fn held(
    old: &ConsumerAutoscalerStatus,
    generation: Option<i64>,
    hold: Hold,
    why: &str,
    now: Timestamp,
) -> ConsumerAutoscalerStatus {
    let paused = hold == Hold::Paused;
    let mut conditions: Vec<Condition> = old
        .conditions
        .iter()
        .filter(|c| c.type_ != PAUSED && c.type_ != ACTIVE)
        .cloned()
        .collect();
    let active_reason = match hold {
        Hold::Paused => "Paused",
        Hold::InvalidSpec => "InvalidSpec",
        Hold::Conflict => super::conflicts::CONFLICTING,
    };
    conditions.insert(
        0,
        condition_of(
            &old.conditions,
            ACTIVE,
            false,
            active_reason,
            why.to_string(),
            generation,
            now,
        ),
    );
    if paused {
        conditions.push(condition_of(
            &old.conditions,
            PAUSED,
            true,
            "PauseAnnotation",
            why.to_string(),
            generation,
            now,
        ));
    }
    ConsumerAutoscalerStatus {
        observed_generation: generation,
        conditions,
        ..old.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(desired: u32, capped: Option<Cap>, fallback: bool) -> Decision {
        Decision {
            desired,
            active: desired > 0,
            capped,
            fallback,
            reason: "why".into(),
        }
    }

    fn get<'a>(s: &'a ConsumerAutoscalerStatus, t: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn a_capped_scale_up_reports_the_cap_and_the_time() {
        let now = Timestamp::from_second(1_000).unwrap();
        let d = decision(8, Some(Cap::Queues(8)), false);
        let s = after_poll(
            &Default::default(),
            Some(2),
            &Poll {
                current: 3,
                backlog: Ok(90_000),
                queue_cap: Some(8),
                decision: &d,
                failures: 0,
                last_active: Some(now),
                events: Default::default(),
            },
            now,
        );
        assert_eq!(
            (
                s.current_replicas,
                s.desired_replicas,
                s.observed_backlog,
                s.queue_cap
            ),
            (Some(3), Some(8), Some(90_000), Some(8))
        );
        assert_eq!(s.last_scale_time, Some(Time(now)));
        assert_eq!(get(&s, CAPPED).status, "True");
        assert_eq!(get(&s, CAPPED).reason, "QueueLimit");
        assert_eq!(get(&s, ACTIVE).status, "True");
        assert_eq!(get(&s, METRICS_AVAILABLE).status, "True");
        assert_eq!(get(&s, FALLBACK_ACTIVE).status, "False");
    }

    #[test]
    fn the_memory_of_recent_decisions_is_kept_in_the_status_and_read_back() {
        let events = Events {
            recommendations: vec![(1_000_500, 8), (1_015_500, 4)],
            ups: vec![(1_000_500, 7)],
            downs: vec![],
        };
        let d = decision(8, None, false);
        let s = after_poll(
            &Default::default(),
            None,
            &Poll {
                current: 8,
                backlog: Ok(800),
                queue_cap: None,
                decision: &d,
                failures: 0,
                last_active: None,
                events: events.clone(),
            },
            Timestamp::from_second(1_016).unwrap(),
        );
        // Through JSON, as the API server stores it.
        let stored: ConsumerAutoscalerStatus =
            serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
        assert_eq!(events_of(&stored), events);
        assert_eq!(
            events_of(&ConsumerAutoscalerStatus::default()),
            Events::default()
        );
    }

    #[test]
    fn a_failed_read_shows_why_and_keeps_the_last_scale_time() {
        let t0 = Timestamp::from_second(1_000).unwrap();
        let old = ConsumerAutoscalerStatus {
            last_scale_time: Some(Time(t0)),
            ..Default::default()
        };
        let d = decision(4, None, true);
        let s = after_poll(
            &old,
            None,
            &Poll {
                current: 4,
                backlog: Err("the query returned no series"),
                queue_cap: None,
                decision: &d,
                failures: 3,
                last_active: None,
                events: Default::default(),
            },
            Timestamp::from_second(2_000).unwrap(),
        );
        assert_eq!(s.observed_backlog, None);
        assert_eq!(s.last_scale_time, Some(Time(t0)));
        assert_eq!(s.consecutive_failures, 3);
        let m = get(&s, METRICS_AVAILABLE);
        assert_eq!(
            (m.status.as_str(), m.message.as_str()),
            ("False", "the query returned no series")
        );
        assert_eq!(get(&s, FALLBACK_ACTIVE).status, "True");
        assert_eq!(get(&s, ACTIVE).reason, "MetricsUnavailable");
    }

    #[test]
    fn pausing_keeps_the_numbers_and_says_so() {
        let old = ConsumerAutoscalerStatus {
            desired_replicas: Some(5),
            ..Default::default()
        };
        let now = Timestamp::from_second(1).unwrap();
        let s = held(&old, Some(1), Hold::Paused, "paused by annotation", now);
        assert_eq!(s.desired_replicas, Some(5));
        assert_eq!(get(&s, PAUSED).status, "True");
        assert_eq!(get(&s, ACTIVE).reason, "Paused");
        let s = held(&s, Some(1), Hold::InvalidSpec, "bad behavior", now);
        assert!(s.conditions.iter().all(|c| c.type_ != PAUSED));
        assert_eq!(get(&s, ACTIVE).reason, "InvalidSpec");
    }
}
