//! podFailurePolicy and successPolicy matching (upstream's `matchPodFailurePolicy` and
//! `matchSuccessPolicy`).

use k8s_openapi::api::batch::v1::{PodFailurePolicy, SuccessPolicy};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

use super::indexes::Indexes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    FailJob,
    FailIndex,
    Ignore,
    Count,
}

/// What the policy says about a failed pod.
#[derive(Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Set for FailJob: the Job's failure message.
    pub message: Option<String>,
    /// Whether the failure counts against backoffLimit.
    pub count: bool,
    pub action: Option<Action>,
}

const NO_MATCH: Verdict = Verdict { message: None, count: true, action: None };

pub fn match_pod_failure_policy(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let Some(policy) = policy else { return NO_MATCH };
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    let status = pod.status.clone().unwrap_or_default();
    for (i, rule) in policy.rules.iter().enumerate() {
        let action = match rule.action.as_str() {
            "FailJob" => Action::FailJob,
            "FailIndex" => Action::FailIndex,
            "Ignore" => Action::Ignore,
            "Count" => Action::Count,
            _ => continue,
        };
        let message = if let Some(req) = &rule.on_exit_codes {
            let matches = |statuses: &Option<Vec<ContainerStatus>>| -> Option<(String, i32)> {
                statuses.iter().flatten().find_map(|c| {
                    let code = c.state.as_ref()?.terminated.as_ref()?.exit_code;
                    let name_ok = req.container_name.as_ref().is_none_or(|n| *n == c.name);
                    let listed = req.values.contains(&code);
                    let op_ok = match req.operator.as_str() {
                        "In" => listed,
                        "NotIn" => !listed,
                        _ => false,
                    };
                    (name_ok && code != 0 && op_ok).then(|| (c.name.clone(), code))
                })
            };
            let Some((container, code)) =
                matches(&status.container_statuses).or_else(|| matches(&status.init_container_statuses))
            else {
                continue;
            };
            format!(
                "Container {container} for pod {ns}/{name} failed with exit code {code} matching {action:?} rule at index {i}"
            )
        } else if let Some(patterns) = &rule.on_pod_conditions {
            let found = patterns.iter().find_map(|p| {
                let conditions = status.conditions.iter().flatten();
                conditions.clone().find(|c| c.type_ == p.type_ && c.status == p.status.clone().unwrap_or("True".into()))
            });
            let Some(condition) = found else { continue };
            format!("Pod {ns}/{name} has condition {} matching {action:?} rule at index {i}", condition.type_)
        } else {
            continue;
        };
        return match action {
            Action::Ignore => Verdict { message: None, count: false, action: Some(action) },
            Action::FailJob => Verdict { message: Some(message), count: true, action: Some(action) },
            _ => Verdict { message: None, count: true, action: Some(action) },
        };
    }
    NO_MATCH
}

/// The SuccessCriteriaMet message when a rule of the success policy is met.
pub fn match_success_policy(policy: Option<&SuccessPolicy>, completions: i32, succeeded: &Indexes) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (i, rule) in policy.rules.iter().enumerate() {
        let met = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(text), count) => {
                let required = Indexes::parse(text, completions);
                if required.is_empty() {
                    continue;
                }
                let matched = required.count_in(succeeded);
                match count {
                    None => matched == required.total(),
                    Some(n) => matched >= n as usize,
                }
            }
            (None, Some(n)) => succeeded.total() >= n as usize,
            (None, None) => false,
        };
        if met {
            return Some(format!("Matched rules at index {i}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(code: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions, "containerStatuses": [
                {"name": "main", "image": "x", "ready": false, "restartCount": 0, "imageID": "", "state": {"terminated": {"exitCode": code}}}]}
        }))
        .unwrap()
    }

    fn policy(rules: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({"rules": rules})).unwrap()
    }

    #[test]
    fn exit_codes_and_conditions_pick_the_first_matching_rule() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1, 2]}},
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [2]}},
        ]));
        let v = match_pod_failure_policy(Some(&p), &pod(42, json!([])));
        assert_eq!(v.action, Some(Action::FailJob));
        assert_eq!(
            v.message.unwrap(),
            "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1"
        );
        let disrupted = pod(42, json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert_eq!(
            match_pod_failure_policy(Some(&p), &disrupted),
            Verdict { message: None, count: false, action: Some(Action::Ignore) }
        );
        assert_eq!(match_pod_failure_policy(Some(&p), &pod(7, json!([]))).action, Some(Action::Count));
        assert_eq!(match_pod_failure_policy(Some(&p), &pod(2, json!([]))).action, Some(Action::FailIndex));
        assert_eq!(match_pod_failure_policy(Some(&p), &pod(1, json!([]))), NO_MATCH);
        assert_eq!(match_pod_failure_policy(None, &pod(42, json!([]))), NO_MATCH);
    }

    #[test]
    fn success_policy_rules() {
        let sp: SuccessPolicy = serde_json::from_value(json!({"rules": [
            {"succeededIndexes": "0-2", "succeededCount": 2}, {"succeededCount": 4}]}))
        .unwrap();
        let mut done = Indexes::default();
        done.extend([0, 5, 6]);
        assert_eq!(match_success_policy(Some(&sp), 10, &done), None);
        done.insert(7);
        assert_eq!(match_success_policy(Some(&sp), 10, &done).as_deref(), Some("Matched rules at index 1"));
        let only: SuccessPolicy = serde_json::from_value(json!({"rules": [{"succeededIndexes": "1,3"}]})).unwrap();
        let mut done = Indexes::default();
        done.extend([1, 3]);
        assert_eq!(match_success_policy(Some(&only), 4, &done).as_deref(), Some("Matched rules at index 0"));
    }
}
