//! The back-off before pods of a Job are created again after failures (upstream's
//! `backoffRecord`): the default delay doubles with every failure since the last
//! success, up to a maximum, counted from the last failure.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub failures_after_last_success: u32,
    pub last_failure: Option<Timestamp>,
}

impl Record {
    /// The record after these pods newly finished (each with its finish time).
    pub fn with_finished(&self, mut succeeded: Vec<Timestamp>, mut failed: Vec<Timestamp>) -> Record {
        succeeded.sort();
        failed.sort();
        let Some(last_success) = succeeded.last() else {
            let Some(&last) = failed.last() else { return self.clone() };
            return Record {
                failures_after_last_success: self.failures_after_last_success + failed.len() as u32,
                last_failure: Some(last),
            };
        };
        let after: Vec<_> = failed.iter().filter(|t| *t > last_success).collect();
        Record { failures_after_last_success: after.len() as u32, last_failure: after.last().map(|t| **t) }
    }

    /// How long to wait still before creating pods.
    pub fn remaining(&self, now: Timestamp, base: Duration, max: Duration) -> Duration {
        let Some(last) = self.last_failure.filter(|_| self.failures_after_last_success > 0) else {
            return Duration::ZERO;
        };
        delay(self.failures_after_last_success, base, max).saturating_sub(elapsed(last, now))
    }
}

/// The delay after `failures` consecutive failures.
pub fn delay(failures: u32, base: Duration, max: Duration) -> Duration {
    let mut d = base;
    for _ in 1..failures {
        d = d.saturating_mul(2);
        if d >= max {
            return max;
        }
    }
    d.min(max)
}

pub fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delay_doubles_to_the_maximum_and_success_resets() {
        let (base, max) = (Duration::from_secs(10), Duration::from_secs(360));
        assert_eq!(delay(1, base, max), base);
        assert_eq!(delay(3, base, max), Duration::from_secs(40));
        assert_eq!(delay(30, base, max), max);
        let t0 = Timestamp::now();
        let t = |s: i64| t0 + Duration::from_secs(s as u64);
        let r = Record::default().with_finished(vec![], vec![t(1), t(2)]);
        assert_eq!(r.failures_after_last_success, 2);
        assert_eq!(r.remaining(t(5), base, max), Duration::from_secs(17));
        assert_eq!(r.remaining(t(30), base, max), Duration::ZERO);
        let r = r.with_finished(vec![t(3)], vec![t(4)]);
        assert_eq!((r.failures_after_last_success, r.last_failure), (1, Some(t(4))));
        assert_eq!(r.with_finished(vec![t(9)], vec![]), Record::default());
    }
}
