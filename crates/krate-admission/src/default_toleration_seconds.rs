//! DefaultTolerationSeconds (upstream's admission plugin of that name): a new pod that
//! does not already tolerate the node.kubernetes.io/not-ready and unreachable NoExecute
//! taints gets tolerations for them with tolerationSeconds 300, so taint-based eviction
//! moves its pods off a lost node after five minutes rather than at once.

use async_trait::async_trait;
use serde_json::{Value, json};

use krate_api::ApiResult;
use krate_api::admission::{Admission, Attributes, Operation};

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Upstream's --default-not-ready-toleration-seconds and --default-unreachable-toleration-seconds.
pub const DEFAULT_SECONDS: i64 = 300;

pub struct DefaultTolerationSeconds {
    pub not_ready_seconds: i64,
    pub unreachable_seconds: i64,
}

impl Default for DefaultTolerationSeconds {
    fn default() -> Self {
        DefaultTolerationSeconds { not_ready_seconds: DEFAULT_SECONDS, unreachable_seconds: DEFAULT_SECONDS }
    }
}

/// Whether one of the tolerations covers `key`'s NoExecute taint (an empty key or
/// effect matches any).
fn tolerates(tolerations: &[Value], key: &str) -> bool {
    tolerations.iter().any(|t| {
        let k = t.get("key").and_then(Value::as_str).unwrap_or("");
        let effect = t.get("effect").and_then(Value::as_str).unwrap_or("");
        (k == key || k.is_empty()) && (effect == "NoExecute" || effect.is_empty())
    })
}

#[async_trait]
impl Admission for DefaultTolerationSeconds {
    async fn mutate(&self, attrs: &Attributes<'_>, pod: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group.is_empty()
            && r.plural == "pods"
            && attrs.subresource.is_none()
            && attrs.operation == Operation::Create)
        {
            return Ok(());
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
        if tolerations.is_null() {
            *tolerations = json!([]);
        }
        let Some(list) = tolerations.as_array_mut() else { return Ok(()) };
        for (key, seconds) in [(NOT_READY, self.not_ready_seconds), (UNREACHABLE, self.unreachable_seconds)] {
            if !tolerates(list, key) {
                list.push(
                    json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn existing_tolerations_are_respected() {
        let own = vec![json!({"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5})];
        assert!(tolerates(&own, NOT_READY));
        assert!(!tolerates(&own, UNREACHABLE));
        let everything = vec![json!({"operator": "Exists"})];
        assert!(tolerates(&everything, UNREACHABLE));
        let no_schedule = vec![json!({"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"})];
        assert!(!tolerates(&no_schedule, UNREACHABLE));
    }
}
