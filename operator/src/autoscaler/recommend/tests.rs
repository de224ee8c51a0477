use k8s_openapi::api::autoscaling::v2::HPAScalingPolicy;

use super::*;

fn rules() -> Rules {
    Rules {
        target: 100,
        activation: 0,
        min: 0,
        max: 100,
        cooldown_s: 300,
        fallback: Some((3, 4)),
        up: Direction::up_default(),
        down: Direction::down_default(),
    }
}

/// Scale-up in one step (a 1000 % policy), as tests of the count alone want.
fn fast_up() -> Direction {
    Direction {
        window_s: 0,
        select: Select::Max,
        policies: vec![Policy {
            kind: PolicyKind::Percent,
            value: 100_000,
            period_s: 15,
        }],
    }
}

/// Scale-down with no window, at most `value` pods per `period_s`.
fn pods_down(value: u32, period_s: u32) -> Direction {
    Direction {
        window_s: 0,
        select: Select::Max,
        policies: vec![Policy {
            kind: PolicyKind::Pods,
            value,
            period_s,
        }],
    }
}

const S: i64 = 1000;

#[test]
fn the_count_is_the_backlog_over_the_target_rounded_up() {
    let r = Rules {
        up: fast_up(),
        ..rules()
    };
    let mut m = Memory::default();
    let d = decide(&r, 1, Ok(1_001), None, &mut m, 0);
    assert_eq!(d.desired, 11, "{d:?}");
    assert!(d.active && d.capped.is_none() && !d.fallback);
}

#[test]
fn default_scale_up_adds_at_most_four_pods_or_doubles_per_15_s() {
    let mut m = Memory::default();
    let d = decide(&rules(), 1, Ok(2_000), None, &mut m, 0);
    assert_eq!(d.desired, 5, "max(1 + 4, 1 × 2)");
    // Still within the same 15 s: the period started at 1 replica.
    assert_eq!(
        decide(&rules(), 5, Ok(2_000), None, &mut m, 5 * S).desired,
        5
    );
    // A new period: from 5, doubling (10) beats +4 (9).
    assert_eq!(
        decide(&rules(), 5, Ok(2_000), None, &mut m, 16 * S).desired,
        10
    );
    assert_eq!(
        decide(&rules(), 10, Ok(2_000), None, &mut m, 32 * S).desired,
        20
    );
}

#[test]
fn within_the_tolerance_nothing_changes() {
    let mut m = Memory::default();
    for backlog in [361, 400, 439] {
        assert_eq!(
            decide(&rules(), 4, Ok(backlog), None, &mut m, 0).desired,
            4,
            "{backlog}"
        );
    }
    let mut m = Memory::default();
    assert_eq!(decide(&rules(), 4, Ok(450), None, &mut m, 0).desired, 5);
}

#[test]
fn the_queue_cap_limits_the_count_not_the_metric() {
    let r = Rules {
        up: fast_up(),
        ..rules()
    };
    // kedacore/keda#2908: 63 replicas, 64 queues and a huge backlog reach 64.
    let mut m = Memory::default();
    let d = decide(&r, 63, Ok(10_000_000), Some(64), &mut m, 0);
    assert_eq!((d.desired, d.capped), (64, Some(Cap::Queues(64))));
    // Two broker groups × 4 read queues: exactly 8, and it stays there.
    let mut m = Memory::default();
    let d = decide(&r, 1, Ok(10_000_000), Some(8), &mut m, 0);
    assert_eq!((d.desired, d.capped), (8, Some(Cap::Queues(8))));
    let d = decide(&r, 8, Ok(10_000_000), Some(8), &mut m, 15 * S);
    assert_eq!((d.desired, d.capped), (8, Some(Cap::Queues(8))));
    // maxReplicas below the queue count is the cap then.
    let r = Rules { max: 6, ..r };
    let d = decide(&r, 1, Ok(10_000_000), Some(8), &mut Memory::default(), 0);
    assert_eq!((d.desired, d.capped), (6, Some(Cap::MaxReplicas(6))));
    // Not capped when the backlog needs fewer.
    let d = decide(&r, 1, Ok(300), Some(8), &mut Memory::default(), 0);
    assert_eq!((d.desired, d.capped), (3, None));
}

#[test]
fn scale_down_takes_the_highest_recommendation_of_the_window() {
    let mut m = Memory::default();
    let r = rules();
    assert_eq!(decide(&r, 10, Ok(1_000), None, &mut m, 0).desired, 10);
    // The backlog falls: within 300 s the earlier 10 still holds.
    for t in [15, 60, 150, 299] {
        assert_eq!(
            decide(&r, 10, Ok(200), None, &mut m, t * S).desired,
            10,
            "at {t} s"
        );
    }
    // Once 10 left the window, the highest left is 2.
    assert_eq!(decide(&r, 10, Ok(200), None, &mut m, 300 * S).desired, 2);
}

#[test]
fn scale_down_policies_limit_the_rate() {
    let r = Rules {
        down: pods_down(2, 60),
        ..rules()
    };
    let mut m = Memory::default();
    assert_eq!(decide(&r, 10, Ok(100), None, &mut m, 0).desired, 8);
    assert_eq!(
        decide(&r, 8, Ok(100), None, &mut m, 30 * S).desired,
        8,
        "same period"
    );
    assert_eq!(decide(&r, 8, Ok(100), None, &mut m, 60 * S).desired, 6);
    // Disabled: never down.
    let r = Rules {
        down: Direction {
            select: Select::Disabled,
            ..r.down
        },
        ..r
    };
    assert_eq!(
        decide(&r, 8, Ok(100), None, &mut Memory::default(), 0).desired,
        8
    );
}

#[test]
fn zero_after_the_cooldown_and_one_again_above_the_activation() {
    let r = Rules {
        activation: 5,
        ..rules()
    };
    let mut m = Memory::default();
    assert_eq!(decide(&r, 2, Ok(200), None, &mut m, 0).desired, 2);
    // At or below the activation threshold: the count holds until the cooldown ends.
    let d = decide(&r, 2, Ok(5), None, &mut m, 100 * S);
    assert_eq!((d.desired, d.active), (2, false));
    let d = decide(&r, 2, Ok(0), None, &mut m, 300 * S);
    assert_eq!(d.desired, 0, "{d:?}");
    assert_eq!(decide(&r, 0, Ok(5), None, &mut m, 310 * S).desired, 0);
    // Above the threshold, also with no consumer online: one replica.
    let d = decide(&r, 0, Ok(6), None, &mut m, 320 * S);
    assert_eq!((d.desired, d.active), (1, true));
    // minReplicas 2: the activation brings it to 2, and it never goes to zero.
    let r = Rules { min: 2, ..r };
    assert_eq!(
        decide(&r, 0, Ok(0), None, &mut Memory::default(), 0).desired,
        2
    );
    assert_eq!(decide(&r, 2, Ok(0), None, &mut m, 9_999 * S).desired, 2);
}

#[test]
fn a_missing_metric_holds_then_falls_back_but_never_lowers() {
    let r = rules();
    let mut m = Memory::default();
    for failure in 1..=2 {
        let d = decide(&r, 2, Err("no series"), None, &mut m, failure * S);
        assert_eq!((d.desired, d.fallback), (2, false), "failure {failure}");
    }
    let d = decide(&r, 2, Err("no series"), None, &mut m, 3 * S);
    assert_eq!((d.desired, d.fallback), (4, true));
    assert!(d.reason.contains("no series"), "{}", d.reason);
    // Above the fallback count: it stays.
    let d = decide(&r, 7, Err("refused"), None, &mut m, 4 * S);
    assert_eq!((d.desired, d.fallback), (7, true));
    // At zero too: never zero because data vanished, but the fallback count.
    let d = decide(&r, 0, Err("refused"), None, &mut m, 5 * S);
    assert_eq!(d.desired, 4);
    // A good read resets the count of failures.
    decide(&r, 4, Ok(400), None, &mut m, 6 * S);
    assert_eq!(m.failures, 0);
    let d = decide(&r, 4, Err("refused"), None, &mut m, 7 * S);
    assert_eq!((d.desired, d.fallback), (4, false));
    // Without a fallback the count holds forever.
    let r = Rules {
        fallback: None,
        ..rules()
    };
    let mut m = Memory::default();
    for t in 0..10 {
        assert_eq!(decide(&r, 3, Err("down"), None, &mut m, t * S).desired, 3);
    }
}

#[test]
fn a_count_outside_new_bounds_moves_inside_at_once() {
    let r = Rules { max: 5, ..rules() };
    let d = decide(&r, 9, Ok(100_000), None, &mut Memory::default(), 0);
    assert_eq!((d.desired, d.capped), (5, Some(Cap::MaxReplicas(5))));
    let d = decide(&r, 9, Ok(100_000), Some(3), &mut Memory::default(), 0);
    assert_eq!((d.desired, d.capped), (3, Some(Cap::Queues(3))));
}

#[test]
fn a_drop_of_the_queue_count_goes_through_the_down_window() {
    let r = Rules {
        up: fast_up(),
        ..rules()
    };
    let mut m = Memory::default();
    // 8 queues, 8 busy consumers.
    assert_eq!(decide(&r, 8, Ok(100_000), Some(8), &mut m, 0).desired, 8);
    // A group restarts: the route shows 4 queues for a while. Within the 300 s window the
    // earlier 8 holds, whatever the route says.
    for t in [15, 60, 299] {
        let d = decide(&r, 8, Ok(100_000), Some(4), &mut m, t * S);
        assert_eq!((d.desired, d.capped), (8, Some(Cap::Queues(4))), "at {t} s");
    }
    // The queues came back: nothing happened.
    assert_eq!(
        decide(&r, 8, Ok(100_000), Some(8), &mut m, 310 * S).desired,
        8
    );
    // A lasting drop: once the window holds only the lower count, the consumers follow.
    let mut m = Memory::default();
    decide(&r, 8, Ok(100_000), Some(8), &mut m, 0);
    for t in [15, 150, 299] {
        assert_eq!(
            decide(&r, 8, Ok(100_000), Some(4), &mut m, t * S).desired,
            8
        );
    }
    let d = decide(&r, 8, Ok(100_000), Some(4), &mut m, 301 * S);
    assert_eq!((d.desired, d.capped), (4, Some(Cap::Queues(4))));
    // Within the down rate too: at most one pod per 15 s here.
    let r = Rules {
        down: pods_down(1, 15),
        ..r
    };
    let mut m = Memory::default();
    assert_eq!(decide(&r, 8, Ok(100_000), Some(4), &mut m, 0).desired, 7);
    assert_eq!(
        decide(&r, 7, Ok(100_000), Some(4), &mut m, 5 * S).desired,
        7
    );
    assert_eq!(
        decide(&r, 7, Ok(100_000), Some(4), &mut m, 16 * S).desired,
        6
    );
}

#[test]
fn a_resumed_memory_keeps_the_window_of_the_previous_leader() {
    let r = rules();
    let mut m = Memory::default();
    assert_eq!(decide(&r, 10, Ok(1_000), None, &mut m, 0).desired, 10);
    assert_eq!(decide(&r, 10, Ok(200), None, &mut m, 15 * S).desired, 10);
    // A new leader starts from what the status kept: the earlier 10 still holds.
    let mut resumed = Memory::resumed(m.last_active_ms, m.failures, m.events());
    assert_eq!(
        decide(&r, 10, Ok(200), None, &mut resumed, 30 * S).desired,
        10
    );
    // Without it, it would have dropped at once.
    assert_eq!(
        decide(&r, 10, Ok(200), None, &mut Memory::default(), 30 * S).desired,
        2
    );
}

#[test]
fn behavior_merges_over_the_defaults_and_bad_values_are_refused() {
    let behavior = HorizontalPodAutoscalerBehavior {
        scale_down: Some(HPAScalingRules {
            stabilization_window_seconds: Some(10),
            ..Default::default()
        }),
        scale_up: Some(HPAScalingRules {
            select_policy: Some("Disabled".into()),
            ..Default::default()
        }),
    };
    let r = rules().with_behavior(Some(&behavior)).unwrap();
    assert_eq!(r.down.window_s, 10);
    assert_eq!(r.down.policies, Direction::down_default().policies);
    assert_eq!(r.up.select, Select::Disabled);
    assert_eq!(
        decide(&r, 2, Ok(100_000), None, &mut Memory::default(), 0).desired,
        2
    );

    let bad = |rules: HPAScalingRules| {
        rules_error(HorizontalPodAutoscalerBehavior {
            scale_up: Some(rules),
            scale_down: None,
        })
    };
    let policy = |type_: &str, value, period_seconds| HPAScalingPolicy {
        type_: type_.into(),
        value,
        period_seconds,
    };
    assert!(bad(HPAScalingRules {
        policies: Some(vec![policy("Replicas", 1, 15)]),
        ..Default::default()
    })
    .contains("Replicas"));
    assert!(bad(HPAScalingRules {
        policies: Some(vec![policy("Pods", 0, 15)]),
        ..Default::default()
    })
    .contains("value"));
    assert!(bad(HPAScalingRules {
        select_policy: Some("Largest".into()),
        ..Default::default()
    })
    .contains("Largest"));
    assert!(bad(HPAScalingRules {
        stabilization_window_seconds: Some(7200),
        ..Default::default()
    })
    .contains("7200"));
}

fn rules_error(behavior: HorizontalPodAutoscalerBehavior) -> String {
    rules().with_behavior(Some(&behavior)).unwrap_err()
}
