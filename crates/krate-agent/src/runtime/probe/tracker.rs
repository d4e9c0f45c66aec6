//! Threshold bookkeeping of one probe (upstream's worker lastResult/resultRun): a
//! result counts only once it has come `successThreshold` or `failureThreshold` times
//! in a row.

use super::{Outcome, Settings};

#[derive(Debug, Clone)]
pub struct Tracker {
    last: Option<Outcome>,
    run: u32,
    success_threshold: u32,
    failure_threshold: u32,
}

impl Tracker {
    pub fn new(s: &Settings) -> Tracker {
        Tracker {
            last: None,
            run: 0,
            success_threshold: s.success_threshold.max(1),
            failure_threshold: s.failure_threshold.max(1),
        }
    }

    /// Records one run's result; returns it once its threshold is reached in a row.
    pub fn record(&mut self, result: Outcome) -> Option<Outcome> {
        if self.last == Some(result) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(result);
            self.run = 1;
        }
        let threshold = match result {
            Outcome::Success => self.success_threshold,
            Outcome::Failure => self.failure_threshold,
        };
        (self.run >= threshold).then_some(result)
    }

    /// Starts counting afresh (after a liveness or startup failure, as upstream).
    pub fn reset(&mut self) {
        self.last = None;
        self.run = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Kind, Settings};
    use super::*;
    use k8s_openapi::api::core::v1::Probe;

    fn tracker(success: i32, failure: i32) -> Tracker {
        let p = Probe { success_threshold: Some(success), failure_threshold: Some(failure), ..Default::default() };
        Tracker::new(&Settings::of(Kind::Readiness, &p))
    }

    #[test]
    fn failures_count_only_in_a_row() {
        let mut t = tracker(1, 3);
        assert_eq!(t.record(Outcome::Failure), None);
        assert_eq!(t.record(Outcome::Failure), None);
        assert_eq!(t.record(Outcome::Success), Some(Outcome::Success));
        assert_eq!(t.record(Outcome::Failure), None);
        assert_eq!(t.record(Outcome::Failure), None);
        assert_eq!(t.record(Outcome::Failure), Some(Outcome::Failure));
        // Past the threshold the result stands.
        assert_eq!(t.record(Outcome::Failure), Some(Outcome::Failure));
    }

    #[test]
    fn successes_need_their_threshold() {
        let mut t = tracker(2, 1);
        assert_eq!(t.record(Outcome::Success), None);
        assert_eq!(t.record(Outcome::Success), Some(Outcome::Success));
        assert_eq!(t.record(Outcome::Failure), Some(Outcome::Failure));
        assert_eq!(t.record(Outcome::Success), None);
    }

    #[test]
    fn reset_starts_over() {
        let mut t = tracker(1, 2);
        t.record(Outcome::Failure);
        t.reset();
        assert_eq!(t.record(Outcome::Failure), None);
        assert_eq!(t.record(Outcome::Failure), Some(Outcome::Failure));
    }
}
