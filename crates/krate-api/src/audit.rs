//! Audit annotations a request collects on its way (authorization, admission plugins)
//! for its audit events (audit.k8s.io/v1 Event.annotations). The API server creates one
//! per request and hands it down through the registry's `Context`.

use std::collections::BTreeMap;

use parking_lot::Mutex;

#[derive(Debug, Default)]
pub struct AuditAnnotations(Mutex<BTreeMap<String, String>>);

impl AuditAnnotations {
    /// Adds `key`; as upstream, the first value of a key is kept and later ones are
    /// ignored (with a log line), so a plugin cannot overwrite another's annotation.
    pub fn add(&self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let mut map = self.0.lock();
        if let Some(old) = map.get(&key) {
            tracing::debug!(key, old, "audit annotation already set; keeping the first value");
            return;
        }
        map.insert(key, value.into());
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.0.lock().get(key).cloned()
    }

    pub fn take(&self) -> BTreeMap<String, String> {
        std::mem::take(&mut self.0.lock())
    }

    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.0.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_value_wins() {
        let a = AuditAnnotations::default();
        a.add("pod-security.kubernetes.io/enforce-policy", "restricted:latest");
        a.add("pod-security.kubernetes.io/enforce-policy", "baseline:latest");
        assert_eq!(a.snapshot()["pod-security.kubernetes.io/enforce-policy"], "restricted:latest");
    }
}
