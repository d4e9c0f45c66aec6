// Creation/deletion expectations per owner (upstream's ControllerExpectations), for the ReplicaSet controller.
//! Expectations (upstream's UIDTrackingControllerExpectations): after creating or
//! deleting pods a controller waits until its informer has seen those changes before it
//! counts pods again, so a lagging cache never makes it create or delete twice.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Upstream's ExpectationsTimeout: past it, pending expectations are given up.
const TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Default)]
struct Pending {
    /// Names of created pods not yet seen.
    creates: HashSet<String>,
    /// Uids of pods asked to be deleted and still seen alive.
    deletes: HashSet<String>,
    since: Option<Instant>,
}

/// Expectations of every owner, by "namespace/name".
#[derive(Default)]
pub struct Expectations {
    by_owner: Mutex<HashMap<String, Pending>>,
}

impl Expectations {
    pub fn expect_creates(&self, owner: &str, names: impl IntoIterator<Item = String>) {
        let mut map = self.by_owner.lock();
        let p = map.entry(owner.to_string()).or_default();
        p.creates.extend(names);
        p.since = Some(Instant::now());
    }

    pub fn expect_deletes(&self, owner: &str, uids: impl IntoIterator<Item = String>) {
        let mut map = self.by_owner.lock();
        let p = map.entry(owner.to_string()).or_default();
        p.deletes.extend(uids);
        p.since = Some(Instant::now());
    }

    /// A delete that found nothing to delete: expect nothing more of it.
    pub fn forget_delete(&self, owner: &str, uid: &str) {
        if let Some(p) = self.by_owner.lock().get_mut(owner) {
            p.deletes.remove(uid);
        }
    }

    /// Whether everything expected of `owner` has been observed: `seen(name)` says a
    /// created pod is in the cache, `alive(uid)` that a pod to delete is still there
    /// and not yet being deleted.
    pub fn satisfied(&self, owner: &str, seen: impl Fn(&str) -> bool, alive: impl Fn(&str) -> bool) -> bool {
        let mut map = self.by_owner.lock();
        let Some(p) = map.get_mut(owner) else { return true };
        p.creates.retain(|n| !seen(n));
        p.deletes.retain(|u| alive(u));
        let expired = p.since.is_some_and(|s| s.elapsed() > TIMEOUT);
        if expired {
            tracing::warn!(owner, "expectations timed out; syncing anyway");
        }
        if (p.creates.is_empty() && p.deletes.is_empty()) || expired {
            map.remove(owner);
            return true;
        }
        false
    }

    /// The owner is gone: drop what was expected of it.
    pub fn forget(&self, owner: &str) {
        self.by_owner.lock().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn satisfied_once_creates_seen_and_deletes_gone() {
        let e = Expectations::default();
        assert!(e.satisfied("ns/a", |_| false, |_| true));
        e.expect_creates("ns/a", ["p1".to_string()]);
        e.expect_deletes("ns/a", ["u2".to_string()]);
        assert!(!e.satisfied("ns/a", |_| false, |_| true));
        assert!(!e.satisfied("ns/a", |n| n == "p1", |_| true));
        assert!(e.satisfied("ns/a", |_| false, |_| false), "p1 was already seen");
    }
}
