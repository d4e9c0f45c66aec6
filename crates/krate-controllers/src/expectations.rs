//! What a controller has written but its informer may not show yet (upstream's
//! endpointSliceTracker and controller expectations): a reconcile that would act on an
//! older view waits a moment instead of writing duplicates.

use std::collections::HashMap;

use parking_lot::Mutex;

/// Per owner key, per child name: the generation last written, or None once deleted.
#[derive(Default)]
pub struct Expectations {
    written: Mutex<HashMap<String, HashMap<String, Option<i64>>>>,
}

impl Expectations {
    pub fn wrote(&self, owner: &str, child: &str, generation: Option<i64>) {
        self.written
            .lock()
            .entry(owner.to_string())
            .or_default()
            .insert(child.to_string(), Some(generation.unwrap_or(0)));
    }

    pub fn deleted(&self, owner: &str, child: &str) {
        self.written.lock().entry(owner.to_string()).or_default().insert(child.to_string(), None);
    }

    /// Whether the informer's view (`seen`: child name → generation) has caught up with
    /// every write; entries it has caught up with are forgotten.
    pub fn satisfied(&self, owner: &str, seen: &HashMap<String, i64>) -> bool {
        let mut written = self.written.lock();
        let Some(children) = written.get_mut(owner) else { return true };
        children.retain(|name, expected| match (expected, seen.get(name)) {
            (None, None) => false,
            (None, Some(_)) => true,
            (Some(want), Some(have)) => have < want,
            (Some(_), None) => true,
        });
        let done = children.is_empty();
        if done {
            written.remove(owner);
        }
        done
    }

    pub fn forget(&self, owner: &str) {
        self.written.lock().remove(owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_writes_to_show() {
        let e = Expectations::default();
        e.wrote("ns/svc", "a", Some(2));
        e.deleted("ns/svc", "b");
        let mut seen = HashMap::from([("a".to_string(), 1), ("b".to_string(), 1)]);
        assert!(!e.satisfied("ns/svc", &seen));
        seen.insert("a".into(), 2);
        assert!(!e.satisfied("ns/svc", &seen));
        seen.remove("b");
        assert!(e.satisfied("ns/svc", &seen));
        assert!(e.satisfied("other", &seen));
    }
}
