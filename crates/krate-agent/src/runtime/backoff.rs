//! Upstream's per-key exponential back-off (client-go flowcontrol.Backoff): the first
//! retry is immediate, then 10 s doubling to 5 min, measured from the failure; an
//! entry idle for twice the maximum starts over.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

pub const INITIAL: Duration = Duration::from_secs(10);
pub const MAX: Duration = Duration::from_secs(300);

#[derive(Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

struct Entry {
    delay: Duration,
    last_update: SystemTime,
}

impl Backoff {
    /// How long until `key` may be retried after a failure at `failed_at`; None if now.
    pub fn remaining(&self, key: &str, failed_at: SystemTime, now: SystemTime) -> Option<Duration> {
        let entry = self.entries.get(key)?;
        if now.duration_since(entry.last_update).unwrap_or_default() > 2 * MAX {
            return None;
        }
        let since = now.duration_since(failed_at).unwrap_or_default();
        entry.delay.checked_sub(since).filter(|d| !d.is_zero())
    }

    /// Records a retry of `key` now, lengthening its next wait.
    pub fn next(&mut self, key: &str, now: SystemTime) {
        let delay = match self.entries.get(key) {
            Some(e) if now.duration_since(e.last_update).unwrap_or_default() <= 2 * MAX => (e.delay * 2).min(MAX),
            _ => INITIAL,
        };
        self.entries.insert(key.to_string(), Entry { delay, last_update: now });
    }

    /// The wait the next failure of `key` will get (for messages).
    pub fn current(&self, key: &str) -> Duration {
        self.entries.get(key).map_or(INITIAL, |e| e.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_retry_is_immediate_then_doubles_to_the_cap() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut b = Backoff::default();
        assert_eq!(b.remaining("c", t0, t0), None);
        b.next("c", t0);
        // A failure right after the first retry waits 10 s from the failure.
        let failed = t0 + Duration::from_secs(1);
        assert_eq!(b.remaining("c", failed, failed + Duration::from_secs(4)), Some(Duration::from_secs(6)));
        assert_eq!(b.remaining("c", failed, failed + Duration::from_secs(10)), None);
        let mut now = failed + Duration::from_secs(10);
        let mut seen = Vec::new();
        for _ in 0..7 {
            b.next("c", now);
            seen.push(b.current("c").as_secs());
            now += b.current("c");
        }
        assert_eq!(seen, vec![20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn idle_entries_start_over() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut b = Backoff::default();
        b.next("c", t0);
        b.next("c", t0);
        assert_eq!(b.current("c"), Duration::from_secs(20));
        let later = t0 + 2 * MAX + Duration::from_secs(1);
        assert_eq!(b.remaining("c", later, later), None);
        b.next("c", later);
        assert_eq!(b.current("c"), INITIAL);
    }
}
