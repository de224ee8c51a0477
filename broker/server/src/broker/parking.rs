//! Parking: where a message waits before it may be delivered. A prepared transactional
//! message waits in the half topic for END_TRANSACTION, a timer message in the timer topic
//! until its due time, a delay-level message in the schedule topic's queue for its level;
//! everything else is stored where it was sent. Parked messages keep their destination in
//! REAL_TOPIC/REAL_QID.
//!
//! The decision is one pure function, [`placement`], so the send path, the retry path and a
//! transaction commit all park by the same rules, and the services that later deliver the
//! parked messages (schedule, timer, transaction) never call back into sending.

use std::time::Duration;

use conveyor_protocol::message::{keys, Properties, StoredMessage};
use conveyor_protocol::sysflag;

use super::topics::{SCHEDULE_TOPIC, TIMER_TOPIC, TRANS_HALF_TOPIC};

/// Property holding a parked timer message's due time (ms).
pub const TIMER_OUT_MS: &str = "TIMER_OUT_MS";

/// Where a message is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destination {
    /// Its own topic and queue: visible at once.
    Deliver,
    /// A prepared transactional message: the half topic, until END_TRANSACTION decides.
    TransactionHalf,
    /// A timer message: the timer topic, until `due_ms`.
    Timer {
        /// Wall-clock due time (ms).
        due_ms: i64,
    },
    /// A delay-level message: queue `level - 1` of the schedule topic.
    DelayLevel {
        /// The level, already clamped to the configured levels (1-based).
        level: i32,
    },
}

/// Why a message may not be stored at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// A timer property that is no integer (RocketMQ's WHEEL_TIMER_MSG_ILLEGAL).
    #[error("timer message illegal: {property}={value:?} is not an integer")]
    TimerIllegal {
        /// The property that decided (the first present of the timer properties).
        property: &'static str,
        /// Its value (at most 64 characters of it).
        value: String,
    },
    /// The timer asks for more than the broker allows.
    #[error("timer message delay of {delay_ms} ms exceeds the maximum of {max_ms} ms")]
    TimerTooLong {
        /// Requested delay.
        delay_ms: i64,
        /// The broker's `timer_max_delay_ms`.
        max_ms: i64,
    },
}

/// The broker settings parking depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParkingRules {
    /// Number of configured delay levels (`messageDelayLevel`).
    pub delay_levels: usize,
    /// Longest delay a timer message may ask for.
    pub timer_max_delay_ms: i64,
}

impl ParkingRules {
    /// Decides where `m` goes at `now_ms` and moves it there (see [`placement`], [`park_at`]).
    pub fn prepare(&self, m: &mut StoredMessage, now_ms: i64) -> Result<(), PlacementError> {
        let destination = placement(
            &m.properties,
            m.sys_flag,
            now_ms,
            self.delay_levels,
            self.timer_max_delay_ms,
        )?;
        park_at(m, destination);
        Ok(())
    }
}

/// Decides where a message with these properties and SYSFLAG is stored, in RocketMQ's
/// precedence (`HookUtils.handleScheduleMessage` / `checkIfTimerMessage` /
/// `transformTimerMessage`, broker/src/main/java/org/apache/rocketmq/broker/util/HookUtils.java):
///
/// 1. SYSFLAG says PREPARED: the transaction half topic, before any delay or timer (those
///    apply when the transaction is committed: the commit is placed again, as a COMMIT). A
///    TRAN_MSG=true property without that SYSFLAG is stored as it is, unparked. (RocketMQ
///    decides by the property and puts the half message as NOT_TYPE, which lets a timer or a
///    delay park the half message itself; the Java client drops a transactional message's
///    delay level before sending.)
/// 2. A ROLLBACK SYSFLAG: stored as it is (RocketMQ parks only NOT_TYPE and COMMIT).
/// 3. A DELAY level > 0 wins over the timer properties, which are then ignored (RocketMQ clears
///    them, and so does [`park_at`]): the schedule topic, the level clamped to the highest
///    configured one; delivered as it is when no levels are configured.
/// 4. Otherwise the first present of TIMER_DELAY_SEC, TIMER_DELAY_MS, TIMER_DELIVER_MS (that
///    order): the timer topic if due in the future (an error past `timer_max_delay_ms`), else
///    stored as it is. A value that is no integer is refused, not skipped.
pub fn placement(
    props: &Properties,
    sys_flag: i32,
    now_ms: i64,
    delay_levels: usize,
    timer_max_delay_ms: i64,
) -> Result<Destination, PlacementError> {
    let ty = sysflag::transaction_type(sys_flag);
    if ty == sysflag::TRANSACTION_PREPARED_TYPE {
        return Ok(Destination::TransactionHalf);
    }
    if props.get(keys::TRANSACTION_PREPARED) == Some("true") {
        return Ok(Destination::Deliver);
    }
    if ty != sysflag::TRANSACTION_NOT_TYPE && ty != sysflag::TRANSACTION_COMMIT_TYPE {
        return Ok(Destination::Deliver);
    }
    if let Some(level) = delay_level(props) {
        if delay_levels == 0 {
            return Ok(Destination::Deliver);
        }
        return Ok(Destination::DelayLevel {
            level: level.min(delay_levels as i32),
        });
    }
    let Some(due) = timer_due(props, now_ms)? else {
        return Ok(Destination::Deliver);
    };
    let delay_ms = due.saturating_sub(now_ms);
    if delay_ms > timer_max_delay_ms {
        return Err(PlacementError::TimerTooLong {
            delay_ms,
            max_ms: timer_max_delay_ms,
        });
    }
    Ok(if due > now_ms {
        Destination::Timer { due_ms: due }
    } else {
        Destination::Deliver
    })
}

/// The DELAY level if it asks for a delay (an integer > 0); anything else asks for none.
fn delay_level(props: &Properties) -> Option<i32> {
    props
        .get(keys::DELAY_TIME_LEVEL)
        .and_then(|l| l.trim().parse::<i32>().ok())
        .filter(|l| *l > 0)
}

/// The timer properties, in the order RocketMQ reads them (`transformTimerMessage`).
const TIMER_KEYS: [&str; 3] = [
    keys::TIMER_DELAY_SEC,
    keys::TIMER_DELAY_MS,
    keys::TIMER_DELIVER_MS,
];

/// Moves `m` to `destination`, recording its real topic and queue when it is parked.
pub fn park_at(m: &mut StoredMessage, destination: Destination) {
    match destination {
        Destination::Deliver => {}
        Destination::TransactionHalf => {
            if let Some(uniq) = m
                .properties
                .get(keys::UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                .map(str::to_string)
            {
                m.properties.insert(keys::TRANSACTION_ID, uniq);
            }
            // NOT_TYPE so the half message gets a queue entry in the half topic.
            m.sys_flag &= !sysflag::TRANSACTION_TYPE_MASK;
            park(m, TRANS_HALF_TOPIC, 0);
        }
        Destination::Timer { due_ms } => {
            m.properties.insert(TIMER_OUT_MS, due_ms.to_string());
            park(m, TIMER_TOPIC, 0);
        }
        Destination::DelayLevel { level } => {
            // The delay level won: its timer properties are void (RocketMQ clears them too),
            // so nothing downstream reads them as a timer.
            for key in TIMER_KEYS {
                m.properties.remove(key);
            }
            m.properties
                .insert(keys::DELAY_TIME_LEVEL, level.to_string());
            park(m, SCHEDULE_TOPIC, level - 1);
        }
    }
}

/// Due time of a message from its timer properties, relative ones counted from `now_ms`: the
/// first present of [`TIMER_KEYS`] decides (`None` without any); a value that is no integer is
/// [`PlacementError::TimerIllegal`], as RocketMQ's WHEEL_TIMER_MSG_ILLEGAL.
pub fn timer_due(props: &Properties, now_ms: i64) -> Result<Option<i64>, PlacementError> {
    let Some((key, value)) = TIMER_KEYS
        .iter()
        .find_map(|k| props.get(k).map(|v| (*k, v)))
    else {
        return Ok(None);
    };
    let n = value
        .trim()
        .parse::<i64>()
        .map_err(|_| PlacementError::TimerIllegal {
            property: key,
            value: value.chars().take(64).collect(),
        })?;
    Ok(Some(match key {
        keys::TIMER_DELAY_SEC => now_ms.saturating_add(n.saturating_mul(1000)),
        keys::TIMER_DELAY_MS => now_ms.saturating_add(n),
        _ => n,
    }))
}

/// Parses RocketMQ's delay level string ("1s 5s 10s 30s 1m … 2h") into durations.
pub fn parse_delay_levels(levels: &str) -> Vec<Duration> {
    levels
        .split_whitespace()
        .filter_map(|l| {
            let (num, unit) = l.split_at(l.find(|c: char| !c.is_ascii_digit())?);
            let n: u64 = num.parse().ok()?;
            let secs = match unit {
                "s" => n,
                "m" => n * 60,
                "h" => n * 3600,
                "d" => n * 86_400,
                _ => return None,
            };
            Some(Duration::from_secs(secs))
        })
        .collect()
}

/// Moves a message into a system topic, keeping its destination in REAL_TOPIC/REAL_QID.
fn park(m: &mut StoredMessage, system_topic: &str, queue_id: i32) {
    m.properties.insert(keys::REAL_TOPIC, m.topic.clone());
    m.properties
        .insert(keys::REAL_QUEUE_ID, m.queue_id.to_string());
    m.topic = system_topic.to_string();
    m.queue_id = queue_id;
}

/// Restores a parked message's real topic and queue; `false` if it carries none.
pub fn unpark(m: &mut StoredMessage) -> bool {
    let (Some(topic), Some(queue)) = (
        m.properties.get(keys::REAL_TOPIC).map(str::to_string),
        m.properties
            .get(keys::REAL_QUEUE_ID)
            .and_then(|q| q.parse::<i32>().ok()),
    ) else {
        return false;
    };
    m.properties.remove(keys::REAL_TOPIC);
    m.properties.remove(keys::REAL_QUEUE_ID);
    m.topic = topic;
    m.queue_id = queue;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_000_000;
    const MAX: i64 = 10_000;

    fn props(pairs: &[(&str, &str)]) -> Properties {
        let mut p = Properties::new();
        for (k, v) in pairs {
            p.insert(*k, *v);
        }
        p
    }

    fn place(pairs: &[(&str, &str)], sys_flag: i32) -> Result<Destination, PlacementError> {
        placement(&props(pairs), sys_flag, NOW, 18, MAX)
    }

    #[test]
    fn plain_messages_are_delivered() {
        assert_eq!(place(&[], 0), Ok(Destination::Deliver));
        assert_eq!(
            place(&[(keys::DELAY_TIME_LEVEL, "0")], 0),
            Ok(Destination::Deliver)
        );
        assert_eq!(
            place(&[(keys::DELAY_TIME_LEVEL, "x")], 0),
            Ok(Destination::Deliver)
        );
    }

    #[test]
    fn prepared_sysflag_parks_as_half_before_anything_else() {
        let prepared = sysflag::TRANSACTION_PREPARED_TYPE;
        assert_eq!(
            place(
                &[(keys::DELAY_TIME_LEVEL, "3"), (keys::TIMER_DELAY_SEC, "5")],
                prepared
            ),
            Ok(Destination::TransactionHalf)
        );
        // The property alone does not park, nor let a delay or timer park it.
        assert_eq!(
            place(
                &[
                    (keys::TRANSACTION_PREPARED, "true"),
                    (keys::DELAY_TIME_LEVEL, "3")
                ],
                0
            ),
            Ok(Destination::Deliver)
        );
        // Rolled back: never parked.
        assert_eq!(
            place(
                &[(keys::DELAY_TIME_LEVEL, "3")],
                sysflag::TRANSACTION_ROLLBACK_TYPE
            ),
            Ok(Destination::Deliver)
        );
    }

    /// RocketMQ's HookUtils.checkIfTimerMessage: a delay level > 0 wins and the timer
    /// properties are ignored, whichever of them is set, even one that would be refused.
    #[test]
    fn delay_levels_win_over_timers() {
        let timers = [
            (keys::TIMER_DELAY_SEC, "3"),
            (keys::TIMER_DELAY_MS, "3000"),
            (keys::TIMER_DELIVER_MS, "1003000"),
        ];
        for timer in timers {
            assert_eq!(
                place(&[timer], 0),
                Ok(Destination::Timer { due_ms: NOW + 3000 }),
                "{timer:?} alone"
            );
            assert_eq!(
                place(&[timer, (keys::DELAY_TIME_LEVEL, "2")], 0),
                Ok(Destination::DelayLevel { level: 2 }),
                "{timer:?} with a delay level"
            );
            // A committed transaction is placed by the same rule.
            assert_eq!(
                place(
                    &[timer, (keys::DELAY_TIME_LEVEL, "2")],
                    sysflag::TRANSACTION_COMMIT_TYPE
                ),
                Ok(Destination::DelayLevel { level: 2 })
            );
            assert_eq!(
                place(&[timer], sysflag::TRANSACTION_COMMIT_TYPE),
                Ok(Destination::Timer { due_ms: NOW + 3000 })
            );
        }
        // A timer that alone is refused (too long, not a number) or already due changes nothing.
        for timer in [
            (keys::TIMER_DELAY_MS, "20000"),
            (keys::TIMER_DELAY_SEC, "soon"),
            (keys::TIMER_DELIVER_MS, "5"),
        ] {
            assert_eq!(
                place(&[timer, (keys::DELAY_TIME_LEVEL, "99")], 0),
                Ok(Destination::DelayLevel { level: 18 }),
                "{timer:?} with a delay level"
            );
        }
        // No levels configured: the delay asks for none that can be given, the timer is still
        // void.
        assert_eq!(
            placement(
                &props(&[(keys::TIMER_DELAY_SEC, "3"), (keys::DELAY_TIME_LEVEL, "2")]),
                0,
                NOW,
                0,
                MAX
            ),
            Ok(Destination::Deliver)
        );
    }

    /// A DELAY that asks for no delay (0, negative — the DLQ's -1 — or no number) leaves the
    /// timer in force.
    #[test]
    fn a_delay_of_no_level_leaves_the_timer() {
        for level in ["0", "-1", "x"] {
            assert_eq!(
                place(
                    &[
                        (keys::DELAY_TIME_LEVEL, level),
                        (keys::TIMER_DELAY_MS, "100")
                    ],
                    0
                ),
                Ok(Destination::Timer { due_ms: NOW + 100 }),
                "DELAY={level}"
            );
        }
    }

    /// Timers alone: already due is delivered, too long and not a number are refused.
    #[test]
    fn timers_alone() {
        assert_eq!(
            place(&[(keys::TIMER_DELIVER_MS, "5")], 0),
            Ok(Destination::Deliver)
        );
        assert_eq!(
            place(&[(keys::TIMER_DELAY_MS, "20000")], 0),
            Err(PlacementError::TimerTooLong {
                delay_ms: 20_000,
                max_ms: MAX
            })
        );
        assert_eq!(
            place(&[(keys::TIMER_DELAY_SEC, "3s")], 0),
            Err(PlacementError::TimerIllegal {
                property: keys::TIMER_DELAY_SEC,
                value: "3s".into()
            })
        );
        // The first present property decides: a bad one is not skipped for the next.
        assert_eq!(
            place(
                &[
                    (keys::TIMER_DELAY_MS, "x"),
                    (keys::TIMER_DELIVER_MS, "1000100")
                ],
                0
            ),
            Err(PlacementError::TimerIllegal {
                property: keys::TIMER_DELAY_MS,
                value: "x".into()
            })
        );
    }

    /// Transactions: PREPARED parks as half before any delay or timer; ROLLBACK is never
    /// parked; the TRAN_MSG property alone parks nothing.
    #[test]
    fn transactions_with_delays_and_timers() {
        let both = [(keys::DELAY_TIME_LEVEL, "3"), (keys::TIMER_DELAY_SEC, "5")];
        for (pairs, expected) in [
            (&both[..], Destination::TransactionHalf),
            (&both[..1], Destination::TransactionHalf),
            (&both[1..], Destination::TransactionHalf),
        ] {
            assert_eq!(
                place(pairs, sysflag::TRANSACTION_PREPARED_TYPE),
                Ok(expected)
            );
            assert_eq!(
                place(pairs, sysflag::TRANSACTION_ROLLBACK_TYPE),
                Ok(Destination::Deliver)
            );
            let mut with_property = pairs.to_vec();
            with_property.push((keys::TRANSACTION_PREPARED, "true"));
            assert_eq!(place(&with_property, 0), Ok(Destination::Deliver));
        }
    }

    #[test]
    fn delay_levels_are_clamped_and_need_levels() {
        assert_eq!(
            place(&[(keys::DELAY_TIME_LEVEL, " 99 ")], 0),
            Ok(Destination::DelayLevel { level: 18 })
        );
        assert_eq!(
            placement(&props(&[(keys::DELAY_TIME_LEVEL, "2")]), 0, NOW, 0, MAX),
            Ok(Destination::Deliver)
        );
    }

    #[test]
    fn due_time_from_properties_in_rocketmqs_order() {
        let mut p = Properties::new();
        assert_eq!(timer_due(&p, 1000), Ok(None));
        p.insert(keys::TIMER_DELIVER_MS, "99999");
        assert_eq!(timer_due(&p, 1000), Ok(Some(99999)));
        p.insert(keys::TIMER_DELAY_MS, "20");
        assert_eq!(timer_due(&p, 1000), Ok(Some(1020)));
        p.insert(keys::TIMER_DELAY_SEC, "3");
        assert_eq!(timer_due(&p, 1000), Ok(Some(4000)));
    }

    #[test]
    fn delay_levels_parse() {
        let l = parse_delay_levels("1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h");
        assert_eq!(l.len(), 18);
        assert_eq!(l[4], Duration::from_secs(60));
        assert_eq!(l[17], Duration::from_secs(7200));
    }

    #[test]
    fn parking_keeps_the_destination_and_unparking_restores_it() {
        let addr = "127.0.0.1:10911".parse().unwrap();
        let mut m = StoredMessage {
            topic: "T".into(),
            queue_id: 3,
            flag: 0,
            queue_offset: 0,
            physical_offset: 0,
            sys_flag: 0,
            born_timestamp: 0,
            born_host: addr,
            store_timestamp: 0,
            store_host: addr,
            reconsume_times: 0,
            prepared_transaction_offset: 0,
            body: Default::default(),
            properties: Properties::new(),
        };
        for key in TIMER_KEYS {
            m.properties.insert(key, "1");
        }
        park_at(&mut m, Destination::DelayLevel { level: 2 });
        assert_eq!((m.topic.as_str(), m.queue_id), (SCHEDULE_TOPIC, 1));
        assert_eq!(m.properties.get(keys::DELAY_TIME_LEVEL), Some("2"));
        for key in TIMER_KEYS {
            assert_eq!(m.properties.get(key), None, "{key} cleared: the delay won");
        }
        assert!(unpark(&mut m));
        assert_eq!((m.topic.as_str(), m.queue_id), ("T", 3));
        assert!(!unpark(&mut m));
    }
}
