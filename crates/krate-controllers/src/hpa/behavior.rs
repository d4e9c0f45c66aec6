//! From a metric's recommendation to the replica count applied, as upstream's
//! normalizeDesiredReplicas (no spec.behavior: the downscale stabilization window and a
//! scale-up of at most max(2×current, 4)) and normalizeDesiredReplicasWithBehaviors
//! (stabilization windows per direction, then the Pods/Percent policies over their
//! periods chosen by selectPolicy), each with the AbleToScale and ScalingLimited
//! reasons and messages upstream sets.

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscalerBehavior};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Select {
    Max,
    Min,
    Disabled,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PolicyKind {
    Pods,
    Percent,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Policy {
    pub kind: PolicyKind,
    pub value: i32,
    pub period_secs: i32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rules {
    pub window_secs: i32,
    pub select: Select,
    pub policies: Vec<Policy>,
}

/// spec.behavior with upstream's defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Behavior {
    pub up: Rules,
    pub down: Rules,
}

fn rules(spec: Option<&HPAScalingRules>, default: Rules) -> Rules {
    let Some(spec) = spec else { return default };
    let select = match spec.select_policy.as_deref() {
        Some("Min") => Select::Min,
        Some("Disabled") => Select::Disabled,
        _ => Select::Max,
    };
    let policies = match spec.policies.as_deref() {
        Some(p) if !p.is_empty() => p
            .iter()
            .map(|p| Policy {
                kind: if p.type_ == "Pods" { PolicyKind::Pods } else { PolicyKind::Percent },
                value: p.value,
                period_secs: p.period_seconds,
            })
            .collect(),
        _ => default.policies,
    };
    Rules { window_secs: spec.stabilization_window_seconds.unwrap_or(default.window_secs), select, policies }
}

impl Behavior {
    /// Upstream's defaults (autoscaling/v2 SetDefaults): scale up by 100% or 4 pods per
    /// 15 s, whichever is more, at once; scale down by up to 100% per 15 s after the
    /// downscale stabilization window (--horizontal-pod-autoscaler-downscale-stabilization).
    pub fn from_spec(spec: &HorizontalPodAutoscalerBehavior, downscale_window_secs: i32) -> Behavior {
        let percent = |value| Policy { kind: PolicyKind::Percent, value, period_secs: 15 };
        let up = Rules {
            window_secs: 0,
            select: Select::Max,
            policies: vec![percent(100), Policy { kind: PolicyKind::Pods, value: 4, period_secs: 15 }],
        };
        let down = Rules { window_secs: downscale_window_secs, select: Select::Max, policies: vec![percent(100)] };
        Behavior { up: rules(spec.scale_up.as_ref(), up), down: rules(spec.scale_down.as_ref(), down) }
    }
}

#[derive(Clone, Copy, Debug)]
struct Recommendation {
    replicas: i32,
    at_ms: i64,
}

#[derive(Clone, Copy, Debug)]
struct ScaleEvent {
    change: i32,
    at_ms: i64,
    outdated: bool,
}

/// What one autoscaler remembers between syncs (upstream keeps these in memory too).
#[derive(Debug, Default)]
pub struct History {
    recommendations: Vec<Recommendation>,
    up_events: Vec<ScaleEvent>,
    down_events: Vec<ScaleEvent>,
}

/// The replica count to apply and the conditions that explain it.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub replicas: i32,
    /// AbleToScale (True) reason and message.
    pub able: (&'static str, &'static str),
    /// ScalingLimited status, reason and message.
    pub limited: bool,
    pub limit: (&'static str, &'static str),
}

const WITHIN_RANGE: (&str, &str) = ("DesiredWithinRange", "the desired count is within the acceptable range");
const TOO_MANY: (&str, &str) = ("TooManyReplicas", "the desired replica count is more than the maximum replica count");
const TOO_FEW: (&str, &str) = ("TooFewReplicas", "the desired replica count is less than the minimum replica count");
const UP_LIMIT: (&str, &str) =
    ("ScaleUpLimit", "the desired replica count is increasing faster than the maximum scale rate");
const DOWN_LIMIT: (&str, &str) =
    ("ScaleDownLimit", "the desired replica count is decreasing faster than the maximum scale rate");
const READY: (&str, &str) = ("ReadyForNewScale", "recommended size matches current size");
const DOWN_STABILIZED: (&str, &str) = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
);
const UP_STABILIZED: (&str, &str) = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
);

/// Replicas added (or removed) by `events` within the last `period_secs`.
fn change_in_period(events: &[ScaleEvent], period_secs: i32, now_ms: i64) -> i32 {
    let cutoff = now_ms - period_secs as i64 * 1000;
    events.iter().filter(|e| e.at_ms > cutoff).map(|e| e.change).sum()
}

fn clamp_i32(x: f64) -> i32 {
    x.clamp(i32::MIN as f64, i32::MAX as f64) as i32
}

impl History {
    /// The first sync seeds the recommendations with the current size.
    pub fn record_initial(&mut self, current: i32, now_ms: i64) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation { replicas: current, at_ms: now_ms });
        }
    }

    fn remember(&mut self, replicas: i32, now_ms: i64, old: Option<usize>) {
        let rec = Recommendation { replicas, at_ms: now_ms };
        match old {
            Some(i) => self.recommendations[i] = rec,
            None => self.recommendations.push(rec),
        }
    }

    /// Without spec.behavior (upstream's normalizeDesiredReplicas).
    pub fn normalize(
        &mut self,
        now_ms: i64,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        window_secs: i32,
    ) -> Outcome {
        let cutoff = now_ms - window_secs as i64 * 1000;
        let (mut stabilized, mut old) = (desired, None);
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at_ms < cutoff {
                old = Some(i);
            } else if r.replicas > stabilized {
                stabilized = r.replicas;
            }
        }
        self.remember(desired, now_ms, old);
        let able = if stabilized != desired { DOWN_STABILIZED } else { READY };
        let scale_up_limit = (2 * current).max(4);
        let (max_allowed, over) = if max > scale_up_limit { (scale_up_limit, UP_LIMIT) } else { (max, TOO_MANY) };
        let (replicas, limit) = if stabilized < min {
            (min, TOO_FEW)
        } else if stabilized > max_allowed {
            (max_allowed, over)
        } else {
            (stabilized, WITHIN_RANGE)
        };
        Outcome { replicas, able, limited: replicas != stabilized, limit }
    }

    /// With spec.behavior (upstream's normalizeDesiredReplicasWithBehaviors).
    pub fn normalize_with(
        &mut self,
        now_ms: i64,
        b: &Behavior,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
    ) -> Outcome {
        let up_cutoff = now_ms - b.up.window_secs as i64 * 1000;
        let down_cutoff = now_ms - b.down.window_secs as i64 * 1000;
        let (mut up_rec, mut down_rec, mut old) = (desired, desired, None);
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at_ms > up_cutoff {
                up_rec = up_rec.min(r.replicas);
            }
            if r.at_ms > down_cutoff {
                down_rec = down_rec.max(r.replicas);
            }
            if r.at_ms < up_cutoff && r.at_ms < down_cutoff {
                old = Some(i);
            }
        }
        let stabilized = current.max(up_rec).min(down_rec);
        self.remember(desired, now_ms, old);
        let able = if stabilized == desired {
            READY
        } else if desired >= current {
            UP_STABILIZED
        } else {
            DOWN_STABILIZED
        };
        let (replicas, limit) = self.apply_rate(now_ms, b, current, stabilized, min, max);
        Outcome { replicas, able, limited: replicas != stabilized, limit }
    }

    /// Upstream's convertDesiredReplicasWithBehaviorRate.
    fn apply_rate(
        &self,
        now_ms: i64,
        b: &Behavior,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
    ) -> (i32, (&'static str, &'static str)) {
        if desired > current {
            let limit = self.scale_up_limit(now_ms, &b.up, current).max(current);
            let (allowed, why) = if max > limit { (limit, UP_LIMIT) } else { (max, TOO_MANY) };
            if desired > allowed {
                return (allowed, why);
            }
        } else if desired < current {
            let limit = self.scale_down_limit(now_ms, &b.down, current).min(current);
            let (allowed, why) = if min < limit { (limit, DOWN_LIMIT) } else { (min, TOO_FEW) };
            if desired < allowed {
                return (allowed, why);
            }
        }
        (desired, WITHIN_RANGE)
    }

    fn period_start(&self, now_ms: i64, current: i32, period_secs: i32) -> i32 {
        current - change_in_period(&self.up_events, period_secs, now_ms)
            + change_in_period(&self.down_events, period_secs, now_ms)
    }

    fn scale_up_limit(&self, now_ms: i64, r: &Rules, current: i32) -> i32 {
        let pick: fn(i32, i32) -> i32 = match r.select {
            Select::Disabled => return current,
            Select::Min => i32::min,
            Select::Max => i32::max,
        };
        let mut result = if r.select == Select::Min { i32::MAX } else { i32::MIN };
        for p in &r.policies {
            let start = self.period_start(now_ms, current, p.period_secs);
            let proposed = match p.kind {
                PolicyKind::Pods => start.saturating_add(p.value),
                // Rounded up, or a small percentage would never add a pod.
                PolicyKind::Percent => clamp_i32((start as f64 * (1.0 + p.value as f64 / 100.0)).ceil()),
            };
            result = pick(result, proposed);
        }
        result
    }

    fn scale_down_limit(&self, now_ms: i64, r: &Rules, current: i32) -> i32 {
        let pick: fn(i32, i32) -> i32 = match r.select {
            Select::Disabled => return current,
            Select::Min => i32::max,
            Select::Max => i32::min,
        };
        let mut result = if r.select == Select::Min { i32::MIN } else { i32::MAX };
        for p in &r.policies {
            let start = self.period_start(now_ms, current, p.period_secs);
            let proposed = match p.kind {
                PolicyKind::Pods => start - p.value,
                PolicyKind::Percent => clamp_i32(start as f64 * (1.0 - p.value as f64 / 100.0)),
            };
            result = pick(result, proposed);
        }
        result
    }

    /// Remembers a rescale for the policies' periods (only with spec.behavior).
    pub fn store_scale_event(&mut self, b: Option<&Behavior>, now_ms: i64, previous: i32, new: i32) {
        let Some(b) = b else { return };
        let (events, rules, change) = if new > previous {
            (&mut self.up_events, &b.up, new - previous)
        } else {
            (&mut self.down_events, &b.down, previous - new)
        };
        let longest = rules.policies.iter().map(|p| p.period_secs).max().unwrap_or(0);
        let cutoff = now_ms - longest as i64 * 1000;
        for e in events.iter_mut() {
            if e.at_ms < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent { change, at_ms: now_ms, outdated: false };
        match events.iter().rposition(|e| e.outdated) {
            Some(i) => events[i] = event,
            None => events.push(event),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Cases from upstream's horizontal_test.go (TestNormalizeDesiredReplicas,
    //! TestNormalizeDesiredReplicasWithBehavior, TestScalingWithRules), as facts.
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    fn pods(value: i32, period_secs: i32) -> Policy {
        Policy { kind: PolicyKind::Pods, value, period_secs }
    }
    fn percent(value: i32, period_secs: i32) -> Policy {
        Policy { kind: PolicyKind::Percent, value, period_secs }
    }
    fn behavior(up: Vec<Policy>, up_select: Select, down: Vec<Policy>, down_select: Select) -> Behavior {
        Behavior {
            up: Rules { window_secs: 0, select: up_select, policies: up },
            down: Rules { window_secs: 0, select: down_select, policies: down },
        }
    }
    fn defaults() -> Behavior {
        Behavior::from_spec(&Default::default(), 300)
    }

    #[test]
    fn upstream_defaults() {
        let b = defaults();
        assert_eq!(b.up, Rules { window_secs: 0, select: Select::Max, policies: vec![percent(100, 15), pods(4, 15)] });
        assert_eq!(b.down, Rules { window_secs: 300, select: Select::Max, policies: vec![percent(100, 15)] });
        let spec: HorizontalPodAutoscalerBehavior = serde_json::from_value(serde_json::json!({
            "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Disabled"},
        }))
        .unwrap();
        let b = Behavior::from_spec(&spec, 300);
        assert_eq!(b.down, Rules { window_secs: 60, select: Select::Disabled, policies: vec![percent(100, 15)] });
        assert_eq!(b.up, defaults().up);
    }

    #[test]
    fn without_behavior_scale_up_is_at_most_double_or_four() {
        let mut h = History::default();
        let o = h.normalize(NOW, 1, 10, 1, 100, 300);
        assert_eq!((o.replicas, o.limited, o.limit), (4, true, UP_LIMIT));
        let o = History::default().normalize(NOW, 10, 50, 1, 100, 300);
        assert_eq!((o.replicas, o.limit), (20, UP_LIMIT));
        let o = History::default().normalize(NOW, 10, 50, 1, 15, 300);
        assert_eq!((o.replicas, o.limit), (15, TOO_MANY));
        let o = History::default().normalize(NOW, 5, 0, 2, 15, 300);
        assert_eq!((o.replicas, o.limited, o.limit), (2, true, TOO_FEW));
        let o = History::default().normalize(NOW, 5, 7, 2, 15, 300);
        assert_eq!((o.replicas, o.limited, o.limit, o.able), (7, false, WITHIN_RANGE, READY));
    }

    #[test]
    fn without_behavior_scale_down_waits_for_the_window() {
        let mut h = History::default();
        h.record_initial(10, NOW - 200_000);
        // The 10 seen 200 s ago holds the size for the 300 s window.
        let o = h.normalize(NOW, 10, 4, 1, 100, 300);
        assert_eq!((o.replicas, o.able), (10, DOWN_STABILIZED));
        // Once it is older than the window, the lower recommendations win.
        let o = h.normalize(NOW + 101_000, 10, 4, 1, 100, 300);
        assert_eq!((o.replicas, o.able), (4, READY));
    }

    #[test]
    fn policies_limit_the_rate() {
        let b = behavior(vec![pods(100, 60), percent(100, 60)], Select::Max, vec![], Select::Max);
        let o = History::default().normalize_with(NOW, &b, 10, 500, 1, 1000);
        assert_eq!((o.replicas, o.limit), (110, UP_LIMIT), "the pods policy allows more");
        let b = behavior(vec![pods(2, 60), percent(100, 60)], Select::Max, vec![], Select::Max);
        assert_eq!(History::default().normalize_with(NOW, &b, 10, 500, 1, 1000).replicas, 20, "percent allows more");
        let b = behavior(vec![pods(4, 60), percent(100, 60)], Select::Min, vec![], Select::Max);
        assert_eq!(History::default().normalize_with(NOW, &b, 10, 500, 1, 1000).replicas, 14, "selectPolicy Min");
        let b = behavior(vec![pods(100, 60)], Select::Max, vec![], Select::Max);
        let o = History::default().normalize_with(NOW, &b, 100, 500, 1, 200);
        assert_eq!((o.replicas, o.limit), (200, TOO_MANY));
        let b = behavior(vec![pods(4, 60)], Select::Disabled, vec![], Select::Max);
        let o = History::default().normalize_with(NOW, &b, 10, 500, 1, 1000);
        assert_eq!((o.replicas, o.limit), (10, UP_LIMIT), "scaling up disabled");
        // Scaling down: 50% or 3 pods per minute.
        let b = behavior(vec![], Select::Max, vec![percent(50, 60), pods(3, 60)], Select::Max);
        let o = History::default().normalize_with(NOW, &b, 10, 1, 1, 1000);
        assert_eq!((o.replicas, o.limit), (5, DOWN_LIMIT), "Max picks the biggest change");
        let b = behavior(vec![], Select::Max, vec![percent(50, 60), pods(3, 60)], Select::Min);
        assert_eq!(History::default().normalize_with(NOW, &b, 10, 1, 1, 1000).replicas, 7, "Min the smallest");
        let b = behavior(vec![], Select::Max, vec![percent(100, 60)], Select::Max);
        let o = History::default().normalize_with(NOW, &b, 10, 1, 3, 1000);
        assert_eq!((o.replicas, o.limit), (3, TOO_FEW));
        // Percent rounds up when adding: 1% of 10 is still one pod.
        let b = behavior(vec![percent(1, 60)], Select::Max, vec![], Select::Max);
        assert_eq!(History::default().normalize_with(NOW, &b, 10, 500, 1, 1000).replicas, 11);
    }

    #[test]
    fn past_scale_events_count_within_their_period() {
        let b = behavior(vec![pods(4, 60)], Select::Max, vec![pods(2, 60)], Select::Max);
        let mut h = History::default();
        h.store_scale_event(Some(&b), NOW - 30_000, 10, 13);
        // 3 of the 4 pods allowed per minute were added 30 s ago.
        assert_eq!(h.normalize_with(NOW, &b, 13, 50, 1, 100).replicas, 14);
        // A minute later the period starts afresh.
        assert_eq!(h.normalize_with(NOW + 31_000, &b, 13, 50, 1, 100).replicas, 17);
        h.store_scale_event(Some(&b), NOW + 31_000, 17, 16);
        // The period started at 17 pods, one of which went since: one more may go.
        assert_eq!(h.normalize_with(NOW + 32_000, &b, 16, 1, 1, 100).replicas, 15);
        // Without behavior nothing is remembered.
        let mut plain = History::default();
        plain.store_scale_event(None, NOW, 1, 5);
        assert!(plain.up_events.is_empty());
    }

    #[test]
    fn stabilization_windows_per_direction() {
        let mut b = defaults();
        b.up.window_secs = 120;
        b.down.window_secs = 300;
        let mut h = History::default();
        h.record_initial(5, NOW - 60_000);
        // Going up, the lowest recommendation of the last 120 s (5) holds.
        let o = h.normalize_with(NOW, &b, 5, 9, 1, 100);
        assert_eq!((o.replicas, o.able), (5, UP_STABILIZED));
        // Going down, the highest of the last 300 s (9) holds.
        let o = h.normalize_with(NOW + 1_000, &b, 5, 2, 1, 100);
        assert_eq!((o.replicas, o.able), (5, DOWN_STABILIZED));
        let o = h.normalize_with(NOW + 1_000, &b, 5, 5, 1, 100);
        assert_eq!((o.replicas, o.able), (5, READY));
    }
}
