//! TaintToleration: NoSchedule and NoExecute taints must be tolerated (filter); fewer
//! untolerated PreferNoSchedule taints score higher.

use k8s_openapi::api::core::v1::Toleration;

use super::{Failure, FilterResult};
use crate::node_info::NodeInfo;

pub use krate_client::v1helpers::tolerates;

pub fn filter(tolerations: &[Toleration], node: &NodeInfo) -> FilterResult {
    let untolerated = node
        .taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|taint| !tolerations.iter().any(|t| tolerates(t, taint)));
    match untolerated {
        None => Ok(()),
        Some(t) => Err(Failure::unresolvable(format!(
            "node(s) had untolerated taint {{{}: {}}}",
            t.key,
            t.value.as_deref().unwrap_or("")
        ))),
    }
}

/// How many PreferNoSchedule taints the pod does not tolerate (lower is better).
pub fn score(tolerations: &[Toleration], node: &NodeInfo) -> i64 {
    let prefer: Vec<&Toleration> = tolerations
        .iter()
        .filter(|t| t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "PreferNoSchedule"))
        .collect();
    node.taints
        .iter()
        .filter(|t| t.effect == "PreferNoSchedule")
        .filter(|taint| !prefer.iter().any(|t| tolerates(t, taint)))
        .count() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Taint;
    use serde_json::json;

    fn tol(v: serde_json::Value) -> Toleration {
        serde_json::from_value(v).unwrap()
    }

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint { key: key.into(), value: Some(value.into()), effect: effect.into(), ..Default::default() }
    }

    #[test]
    fn toleration_matching() {
        let t = taint("gpu", "yes", "NoSchedule");
        assert!(tolerates(&tol(json!({"key": "gpu", "value": "yes"})), &t));
        assert!(!tolerates(&tol(json!({"key": "gpu", "value": "no"})), &t));
        assert!(tolerates(&tol(json!({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"})), &t));
        assert!(!tolerates(&tol(json!({"key": "gpu", "operator": "Exists", "effect": "NoExecute"})), &t));
        assert!(tolerates(&tol(json!({"operator": "Exists"})), &t), "empty key with Exists tolerates all");
    }

    #[test]
    fn filter_names_the_taint_and_score_counts_preferences() {
        let mut node = NodeInfo::empty("n");
        node.taints = vec![taint("dedicated", "infra", "NoSchedule"), taint("soft", "x", "PreferNoSchedule")];
        let err = filter(&[], &node).unwrap_err();
        assert_eq!(err.reasons, ["node(s) had untolerated taint {dedicated: infra}"]);
        assert!(err.unresolvable);
        assert!(filter(&[tol(json!({"key": "dedicated", "value": "infra"}))], &node).is_ok());
        assert_eq!(score(&[], &node), 1);
        assert_eq!(score(&[tol(json!({"key": "soft", "operator": "Exists"}))], &node), 0);
    }
}
