//! The scaling decision, as a pure function of what was observed and what was decided before:
//! Kubernetes' HPA algorithm for an `AverageValue` metric (the backlog divided by the target
//! per replica, a 10 % tolerance, stabilization windows and rate policies in autoscaling/v2's
//! `behavior` shape and defaults) plus what KEDA adds around it (activation, scale to zero
//! after a cooldown and back, a fallback when the metric fails). Two rules differ from KEDA on
//! purpose:
//! - the queue cap limits the **replica count**, after the tolerance check on the uncapped
//!   ratio, never the metric: capping the metric makes the HPA stall one replica short of the
//!   cap (kedacore/keda#2908);
//! - a missing or failed metric never lowers the count: it holds, and after
//!   `failureThreshold` failures moves up to the fallback count if that is higher.

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};

/// The HPA's default tolerance (`--horizontal-pod-autoscaler-tolerance`): a ratio of backlog
/// to target within 10 % of 1 changes nothing.
pub const TOLERANCE: f64 = 0.1;

/// How a rate policy limits a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyKind {
    /// At most `value` replicas per period.
    Pods,
    /// At most `value` % of the replicas at the period's start.
    Percent,
}

/// One rate policy (autoscaling/v2 `HPAScalingPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Pods or Percent.
    pub kind: PolicyKind,
    /// Replicas or percent.
    pub value: u32,
    /// The period the change is counted over, in seconds.
    pub period_s: u32,
}

/// Which policy wins when several apply (`selectPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// The one allowing the largest change.
    Max,
    /// The one allowing the smallest change.
    Min,
    /// No change in this direction.
    Disabled,
}

/// The rules of one direction (autoscaling/v2 `HPAScalingRules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Direction {
    /// Recommendations of this long are considered (scale-up: the lowest; scale-down: the
    /// highest), in seconds.
    pub window_s: u32,
    /// Which policy wins.
    pub select: Select,
    /// The rate policies (none: no limit).
    pub policies: Vec<Policy>,
}

impl Direction {
    /// The HPA's scale-up default: no window; 4 pods or 100 % per 15 s, whichever is more.
    pub fn up_default() -> Self {
        Self {
            window_s: 0,
            select: Select::Max,
            policies: vec![
                Policy {
                    kind: PolicyKind::Pods,
                    value: 4,
                    period_s: 15,
                },
                Policy {
                    kind: PolicyKind::Percent,
                    value: 100,
                    period_s: 15,
                },
            ],
        }
    }

    /// The HPA's scale-down default: a 300 s window; 100 % per 15 s.
    pub fn down_default() -> Self {
        Self {
            window_s: 300,
            select: Select::Max,
            policies: vec![Policy {
                kind: PolicyKind::Percent,
                value: 100,
                period_s: 15,
            }],
        }
    }

    /// `rules` over `default`: each field given replaces the default's, as the HPA merges them.
    pub fn from_rules(rules: Option<&HPAScalingRules>, default: Self) -> Result<Self, String> {
        let Some(rules) = rules else {
            return Ok(default);
        };
        let window_s = match rules.stabilization_window_seconds {
            Some(w) if !(0..=3600).contains(&w) => {
                return Err(format!(
                    "stabilizationWindowSeconds {w} is not within 0..=3600"
                ))
            }
            Some(w) => w as u32,
            None => default.window_s,
        };
        let select = match rules.select_policy.as_deref() {
            None => default.select,
            Some("Max") => Select::Max,
            Some("Min") => Select::Min,
            Some("Disabled") => Select::Disabled,
            Some(other) => {
                return Err(format!(
                    "selectPolicy {other:?} is not one of Max, Min, Disabled"
                ))
            }
        };
        let policies = match &rules.policies {
            None => default.policies,
            Some(list) => list
                .iter()
                .map(|p| {
                    let kind = match p.type_.as_str() {
                        "Pods" => PolicyKind::Pods,
                        "Percent" => PolicyKind::Percent,
                        other => {
                            return Err(format!("policy type {other:?} is not Pods or Percent"))
                        }
                    };
                    if p.value <= 0 || !(1..=1800).contains(&p.period_seconds) {
                        return Err(format!(
                            "policy {} {} per {} s: the value must be > 0 and the period within 1..=1800 s",
                            p.type_, p.value, p.period_seconds
                        ));
                    }
                    Ok(Policy {
                        kind,
                        value: p.value as u32,
                        period_s: p.period_seconds as u32,
                    })
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(Self {
            window_s,
            select,
            policies,
        })
    }
}

/// Everything that decides the count, taken from the resource's spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Backlog one replica should carry.
    pub target: u64,
    /// Above this backlog the target is active (0 ↔ 1 only).
    pub activation: u64,
    /// Lowest count (0 allows scale to zero).
    pub min: u32,
    /// Highest count.
    pub max: u32,
    /// How long the backlog must stay at or below `activation` before scaling to zero, in
    /// seconds.
    pub cooldown_s: u32,
    /// Failures in a row after which the fallback count applies, and that count.
    pub fallback: Option<(u32, u32)>,
    /// Scale-up rules.
    pub up: Direction,
    /// Scale-down rules.
    pub down: Direction,
}

impl Rules {
    /// The rules with `behavior` over the HPA's defaults.
    pub fn with_behavior(
        mut self,
        behavior: Option<&HorizontalPodAutoscalerBehavior>,
    ) -> Result<Self, String> {
        self.up = Direction::from_rules(
            behavior.and_then(|b| b.scale_up.as_ref()),
            Direction::up_default(),
        )?;
        self.down = Direction::from_rules(
            behavior.and_then(|b| b.scale_down.as_ref()),
            Direction::down_default(),
        )?;
        Ok(self)
    }
}

/// What earlier decisions left behind (the HPA keeps the same in memory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// Recent raw recommendations: (time in ms, replicas).
    recommendations: Vec<(i64, u32)>,
    /// Recent scale-ups: (time in ms, replicas added).
    ups: Vec<(i64, u32)>,
    /// Recent scale-downs: (time in ms, replicas removed).
    downs: Vec<(i64, u32)>,
    /// The last time the backlog was above the activation threshold (ms).
    pub last_active_ms: Option<i64>,
    /// Failed or empty metric reads in a row.
    pub failures: u32,
}

/// A memory's events, as the status keeps them: recommendations, scale-ups and scale-downs,
/// each (time in ms, replicas).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Events {
    /// Recent raw recommendations.
    pub recommendations: Vec<(i64, u32)>,
    /// Recent scale-ups (replicas added).
    pub ups: Vec<(i64, u32)>,
    /// Recent scale-downs (replicas removed).
    pub downs: Vec<(i64, u32)>,
}

impl Memory {
    /// The memory the status kept across a restart or a change of operator leader.
    pub fn resumed(last_active_ms: Option<i64>, failures: u32, events: Events) -> Self {
        Self {
            recommendations: events.recommendations,
            ups: events.ups,
            downs: events.downs,
            last_active_ms,
            failures,
        }
    }

    /// Its events, for the status.
    pub fn events(&self) -> Events {
        Events {
            recommendations: self.recommendations.clone(),
            ups: self.ups.clone(),
            downs: self.downs.clone(),
        }
    }
}

/// Why the count is not higher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cap {
    /// The group cannot use more consumers than the topics' read queues.
    Queues(u32),
    /// `maxReplicas`.
    MaxReplicas(u32),
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The replica count to set.
    pub desired: u32,
    /// The backlog is above the activation threshold (unknown: false).
    pub active: bool,
    /// The count would be higher without this cap.
    pub capped: Option<Cap>,
    /// The fallback count applies.
    pub fallback: bool,
    /// Why, in a sentence (events and status).
    pub reason: String,
}

/// Decides the count for a target at `current` replicas at `now_ms`, from the backlog read
/// (`Err`: why none) and the number of read queues the group can use (`None`: unknown or not
/// capped). Records what the next decisions need in `memory`.
pub fn decide(
    rules: &Rules,
    current: u32,
    backlog: Result<u64, &str>,
    queue_cap: Option<u32>,
    memory: &mut Memory,
    now_ms: i64,
) -> Decision {
    let backlog = match backlog {
        Ok(b) => {
            memory.failures = 0;
            b
        }
        Err(why) => return without_metric(rules, current, why, memory),
    };
    let active = backlog > rules.activation;
    if active {
        memory.last_active_ms = Some(now_ms);
    }
    // The ceiling: maxReplicas, or fewer when the group cannot use more consumers. A
    // `minReplicas` above the queue count still holds: the user asked for it.
    let floor = rules.min.max(1);
    let (ceiling, cap) = match queue_cap {
        Some(q) if q.max(floor) < rules.max => (q.max(floor), Cap::Queues(q)),
        _ => (rules.max, Cap::MaxReplicas(rules.max)),
    };
    let decision = |desired: u32, capped: Option<Cap>, reason: String| Decision {
        desired,
        active,
        capped,
        fallback: false,
        reason,
    };
    if current == 0 {
        // KEDA's activation: 0 → 1 (or minReplicas) once the backlog exceeds the threshold.
        let desired = if active || rules.min > 0 {
            floor.min(ceiling)
        } else {
            0
        };
        memory.recommendations.clear();
        record(memory, 0, desired, now_ms);
        let why = if active {
            format!(
                "backlog {backlog} is above the activation threshold {}",
                rules.activation
            )
        } else {
            format!("backlog {backlog}, idle")
        };
        return decision(desired, None, why);
    }
    if rules.min == 0 && !active {
        let cooled = memory
            .last_active_ms
            .is_none_or(|t| now_ms - t >= i64::from(rules.cooldown_s) * 1000);
        if cooled {
            memory.recommendations.clear();
            record(memory, current, 0, now_ms);
            return decision(
                0,
                None,
                format!(
                    "backlog {backlog} stayed at or below {} for the cooldown of {} s",
                    rules.activation, rules.cooldown_s
                ),
            );
        }
    }
    // Fewer read queues than consumers: an observation, not a decision of the user, and routes
    // shrink for a moment whenever a broker group restarts or fails over. So the drop goes
    // through the down window and rate policies like any recommendation of fewer replicas.
    if current > ceiling && matches!(cap, Cap::Queues(_)) {
        let stabilized = stabilize(rules, memory, current, ceiling, now_ms);
        let desired = stabilized
            .max(down_limit(&rules.down, memory, current, now_ms).min(current))
            .clamp(floor, current);
        record(memory, current, desired, now_ms);
        return decision(
            desired,
            Some(cap),
            format!(
                "the group has {ceiling} read queues for {current} replicas: down to it through \
                 the scale-down window and policies"
            ),
        );
    }
    // A count outside the bounds the user set is brought inside at once, as the HPA does.
    if current > ceiling || current < floor {
        let desired = current.clamp(floor, ceiling);
        record(memory, current, desired, now_ms);
        return decision(
            desired,
            (current > ceiling).then_some(cap),
            format!("{current} replicas is outside {floor}..={ceiling}"),
        );
    }
    // The HPA: ceil(backlog / target), unless within the tolerance of the current count.
    let ratio = backlog as f64 / (rules.target as f64 * f64::from(current));
    let raw = if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else {
        u32::try_from(backlog.div_ceil(rules.target)).unwrap_or(u32::MAX)
    };
    let stabilized = stabilize(rules, memory, current, raw, now_ms);
    let desired = if stabilized > current {
        stabilized.min(up_limit(&rules.up, memory, current, now_ms).max(current))
    } else if stabilized < current {
        stabilized.max(down_limit(&rules.down, memory, current, now_ms).min(current))
    } else {
        current
    };
    let desired = desired.clamp(floor, ceiling);
    let capped = (raw > ceiling && desired == ceiling).then_some(cap);
    record(memory, current, desired, now_ms);
    let reason = format!(
        "backlog {backlog} for a target of {} per replica: {raw} recommended",
        rules.target
    );
    decision(desired, capped, reason)
}

/// The metric failed or is absent: hold, or after enough failures the fallback if higher.
fn without_metric(rules: &Rules, current: u32, why: &str, memory: &mut Memory) -> Decision {
    memory.failures = memory.failures.saturating_add(1);
    let fallback = rules
        .fallback
        .filter(|(threshold, _)| memory.failures >= *threshold)
        .map(|(_, replicas)| replicas.min(rules.max));
    let desired = fallback.map_or(current, |f| f.max(current));
    Decision {
        desired,
        active: false,
        capped: None,
        fallback: fallback.is_some(),
        reason: format!(
            "no backlog ({why}), {} failure(s) in a row{}",
            memory.failures,
            match fallback {
                Some(f) => format!(": fallback to at least {f}"),
                None => ": holding the count".into(),
            }
        ),
    }
}

/// The HPA's stabilization: scale up only to the lowest recommendation of the up window,
/// down only to the highest of the down window.
fn stabilize(rules: &Rules, memory: &mut Memory, current: u32, raw: u32, now_ms: i64) -> u32 {
    let longest = i64::from(rules.up.window_s.max(rules.down.window_s)) * 1000;
    memory.recommendations.retain(|(t, _)| now_ms - t < longest);
    let (mut up, mut down) = (raw, raw);
    for &(t, r) in &memory.recommendations {
        if now_ms - t < i64::from(rules.up.window_s) * 1000 {
            up = up.min(r);
        }
        if now_ms - t < i64::from(rules.down.window_s) * 1000 {
            down = down.max(r);
        }
    }
    memory.recommendations.push((now_ms, raw));
    current.max(up).min(down)
}

/// Replicas the target had at the start of a period of `period_s` seconds ending now.
fn period_start(memory: &Memory, current: u32, period_s: u32, now_ms: i64) -> i64 {
    let within = |events: &[(i64, u32)]| -> i64 {
        events
            .iter()
            .filter(|(t, _)| now_ms - t < i64::from(period_s) * 1000)
            .map(|(_, n)| i64::from(*n))
            .sum()
    };
    i64::from(current) - within(&memory.ups) + within(&memory.downs)
}

/// The highest count the scale-up policies allow now.
fn up_limit(rules: &Direction, memory: &Memory, current: u32, now_ms: i64) -> u32 {
    if rules.select == Select::Disabled {
        return current;
    }
    let proposals = rules.policies.iter().map(|p| {
        let start = period_start(memory, current, p.period_s, now_ms);
        match p.kind {
            PolicyKind::Pods => start + i64::from(p.value),
            PolicyKind::Percent => {
                (start as f64 * (1.0 + f64::from(p.value) / 100.0)).ceil() as i64
            }
        }
    });
    let limit = match rules.select {
        Select::Min => proposals.min(),
        _ => proposals.max(),
    };
    limit.map_or(u32::MAX, |l| l.clamp(0, i64::from(u32::MAX)) as u32)
}

/// The lowest count the scale-down policies allow now.
fn down_limit(rules: &Direction, memory: &Memory, current: u32, now_ms: i64) -> u32 {
    if rules.select == Select::Disabled {
        return current;
    }
    let proposals = rules.policies.iter().map(|p| {
        let start = period_start(memory, current, p.period_s, now_ms);
        match p.kind {
            PolicyKind::Pods => start - i64::from(p.value),
            PolicyKind::Percent => (start as f64 * (1.0 - f64::from(p.value) / 100.0)) as i64,
        }
    });
    // Max allows the largest change: the lowest count.
    let limit = match rules.select {
        Select::Min => proposals.max(),
        _ => proposals.min(),
    };
    limit.map_or(0, |l| l.clamp(0, i64::from(u32::MAX)) as u32)
}

/// Remembers a change from `from` to `to` for the rate policies, forgetting what no policy
/// period (at most 1800 s) can still count.
fn record(memory: &mut Memory, from: u32, to: u32, now_ms: i64) {
    memory.ups.retain(|(t, _)| now_ms - t < 1_800_000);
    memory.downs.retain(|(t, _)| now_ms - t < 1_800_000);
    if to > from {
        memory.ups.push((now_ms, to - from));
    } else if to < from {
        memory.downs.push((now_ms, from - to));
    }
}

#[cfg(test)]
mod tests;
