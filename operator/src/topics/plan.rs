//! How a topic's queues change, as pure functions: the target count (declared, or following
//! the consumers when autoscaling) and the next configuration to apply on the way there, one
//! safe step at a time in RocketMQ's order. Producers write to write queues, consumers read
//! read queues, and a queue readable by nobody loses its messages, so write never exceeds
//! read: a grow raises read first and write after; a shrink lowers write first, waits until
//! every consumer group has consumed the queues being removed, and lowers read last.

/// A topic's queues per broker group as the brokers have them: the fewest read queues and
/// the most write queues over the groups (a half-applied change counts as not applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueConfig {
    /// Read queues.
    pub read: i32,
    /// Write queues.
    pub write: i32,
}

/// Where a change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// As targeted.
    Stable,
    /// Read raised (or being raised); write follows.
    Growing,
    /// Write lowered; read waits until the groups consumed the queues being removed.
    Draining,
    /// Read being lowered.
    Shrinking,
}

impl Phase {
    /// The name in `status.phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Stable => "Stable",
            Phase::Growing => "Growing",
            Phase::Draining => "Draining",
            Phase::Shrinking => "Shrinking",
        }
    }
}

/// What to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Apply this configuration on every broker group.
    Apply(QueueConfig, Phase),
    /// Write is down to the target; read waits for the drain.
    WaitForDrain,
    /// The brokers have the target.
    Done,
}

/// The next step from `current` (`None`: the topic does not exist) to `target` queues;
/// `drained`: every consumer group has consumed the read queues at and above `target`.
pub fn next_step(current: Option<QueueConfig>, target: i32, drained: bool) -> Step {
    let Some(c) = current else {
        return Step::Apply(
            QueueConfig {
                read: target,
                write: target,
            },
            Phase::Stable,
        );
    };
    if c.read == target && c.write == target {
        return Step::Done;
    }
    // Read first: it must cover what is written now and the target.
    let read_needed = target.max(c.write);
    if c.read < read_needed {
        let phase = if read_needed == target && c.write == target {
            Phase::Stable
        } else {
            Phase::Growing
        };
        return Step::Apply(
            QueueConfig {
                read: read_needed,
                write: c.write,
            },
            phase,
        );
    }
    if c.write != target {
        let phase = if c.write < target {
            Phase::Growing
        } else {
            Phase::Draining
        };
        return Step::Apply(
            QueueConfig {
                read: c.read,
                write: target,
            },
            phase,
        );
    }
    // Write is at the target, read above it: lower read once nothing is left there.
    if drained {
        Step::Apply(
            QueueConfig {
                read: target,
                write: target,
            },
            Phase::Shrinking,
        )
    } else {
        Step::WaitForDrain
    }
}

/// What the topic's consumers ask of it, from the ConsumerAutoscalers that consume it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Demand {
    /// Since when (ms) an autoscaler of the topic has been capped by its read queues (the
    /// earliest, if several).
    pub capped_since_ms: Option<i64>,
    /// The most replicas any of them wants (`None`: no autoscaler).
    pub most_wanted: Option<u32>,
}

/// The queue-autoscaling rules of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// Fewest queues per broker group.
    pub min: i32,
    /// Most queues per broker group.
    pub max: i32,
    /// Queues per broker group per step.
    pub step: i32,
    /// Capped this long (ms) before growing.
    pub grow_after_ms: i64,
    /// Needing fewer this long (ms) before shrinking.
    pub shrink_after_ms: i64,
}

/// The next target when the topic is stable at `current` queues per group on `groups`
/// broker groups: one step up once consumers were capped for the grow window, one step down
/// once every consumer fit in a step fewer queues for the shrink window (`shrink_since`
/// keeps when that began).
pub fn autoscaled_target(
    rules: &Rules,
    current: i32,
    groups: u32,
    demand: &Demand,
    shrink_since: &mut Option<i64>,
    now_ms: i64,
) -> i32 {
    let current = current.clamp(rules.min, rules.max);
    if let Some(since) = demand.capped_since_ms {
        *shrink_since = None;
        if current < rules.max && now_ms - since >= rules.grow_after_ms {
            return (current + rules.step).min(rules.max);
        }
        return current;
    }
    let smaller = (current - rules.step).max(rules.min);
    let fits = demand
        .most_wanted
        .is_some_and(|w| i64::from(w) <= i64::from(smaller) * i64::from(groups.max(1)));
    if smaller < current && fits {
        let since = *shrink_since.get_or_insert(now_ms);
        if now_ms - since >= rules.shrink_after_ms {
            *shrink_since = None;
            return smaller;
        }
    } else {
        *shrink_since = None;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(read: i32, write: i32) -> Option<QueueConfig> {
        Some(QueueConfig { read, write })
    }

    fn apply(read: i32, write: i32, phase: Phase) -> Step {
        Step::Apply(QueueConfig { read, write }, phase)
    }

    #[test]
    fn a_new_topic_is_created_at_the_target() {
        assert_eq!(next_step(None, 8, false), apply(8, 8, Phase::Stable));
        assert_eq!(next_step(q(8, 8), 8, false), Step::Done);
    }

    #[test]
    fn a_grow_raises_read_then_write() {
        assert_eq!(next_step(q(4, 4), 8, false), apply(8, 4, Phase::Growing));
        assert_eq!(next_step(q(8, 4), 8, false), apply(8, 8, Phase::Growing));
        assert_eq!(next_step(q(8, 8), 8, false), Step::Done);
    }

    #[test]
    fn a_shrink_lowers_write_waits_for_the_drain_then_lowers_read() {
        assert_eq!(next_step(q(8, 8), 4, false), apply(8, 4, Phase::Draining));
        assert_eq!(next_step(q(8, 4), 4, false), Step::WaitForDrain);
        assert_eq!(next_step(q(8, 4), 4, true), apply(4, 4, Phase::Shrinking));
    }

    #[test]
    fn write_never_exceeds_read_even_from_a_bad_start() {
        // Someone set write above read: read is raised to cover it first.
        assert_eq!(next_step(q(4, 6), 4, false), apply(6, 6, Phase::Growing));
        assert_eq!(next_step(q(4, 6), 8, false), apply(8, 6, Phase::Growing));
        // Every step of every walk keeps write <= read.
        for start in [q(2, 2), q(8, 8), q(4, 6), q(16, 4)] {
            for target in [1, 4, 8, 12] {
                let mut c = start;
                for _ in 0..8 {
                    match next_step(c, target, true) {
                        Step::Apply(next, _) => {
                            assert!(next.write <= next.read, "{start:?} → {target}: {next:?}");
                            c = Some(next);
                        }
                        Step::Done => break,
                        Step::WaitForDrain => unreachable!("drained"),
                    }
                }
                assert_eq!(c, q(target, target), "{start:?} → {target}");
            }
        }
    }

    const RULES: Rules = Rules {
        min: 2,
        max: 8,
        step: 2,
        grow_after_ms: 10_000,
        shrink_after_ms: 60_000,
    };

    #[test]
    fn capped_consumers_grow_the_topic_after_the_window() {
        let mut since = None;
        let capped = Demand {
            capped_since_ms: Some(0),
            most_wanted: Some(8),
        };
        assert_eq!(
            autoscaled_target(&RULES, 4, 2, &capped, &mut since, 5_000),
            4
        );
        assert_eq!(
            autoscaled_target(&RULES, 4, 2, &capped, &mut since, 10_000),
            6
        );
        assert_eq!(
            autoscaled_target(&RULES, 8, 2, &capped, &mut since, 99_000),
            8,
            "at max"
        );
    }

    #[test]
    fn consumers_needing_a_step_fewer_shrink_it_after_the_window() {
        let mut since = None;
        // 2 broker groups × (6 − 2) queues = 8 consumers fit a step down.
        let low = Demand {
            capped_since_ms: None,
            most_wanted: Some(8),
        };
        assert_eq!(autoscaled_target(&RULES, 6, 2, &low, &mut since, 0), 6);
        assert_eq!(since, Some(0));
        assert_eq!(autoscaled_target(&RULES, 6, 2, &low, &mut since, 59_999), 6);
        assert_eq!(autoscaled_target(&RULES, 6, 2, &low, &mut since, 60_000), 4);
        // A need above a step down resets the window.
        let mut since = Some(0);
        let high = Demand {
            capped_since_ms: None,
            most_wanted: Some(9),
        };
        assert_eq!(
            autoscaled_target(&RULES, 6, 2, &high, &mut since, 90_000),
            6
        );
        assert_eq!(since, None);
        // Never below min; no autoscaler: no shrink.
        assert_eq!(autoscaled_target(&RULES, 2, 2, &low, &mut None, 999_999), 2);
        assert_eq!(
            autoscaled_target(&RULES, 6, 2, &Demand::default(), &mut Some(0), 999_999),
            6
        );
    }
}
