//! Priority (upstream's admission plugin of that name): a new pod's spec.priority and
//! spec.preemptionPolicy come from its PriorityClass (or the global default class), never
//! from the client; and at most one PriorityClass may be the global default.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{Value, json};

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::{ListOptions, Scope};
use krate_api::{ApiError, ApiResult, Registry, Target};

/// A pod's priority when no class names one and no class is the global default.
const DEFAULT_PRIORITY: i64 = 0;
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

pub struct Priority {
    registry: Weak<Registry>,
}

/// What a pod gets from its class: the class's name (the default's, for a pod naming
/// none), its value and its preemption policy.
#[derive(Debug, PartialEq)]
struct Resolved {
    class: String,
    value: i64,
    preemption_policy: Option<String>,
}

impl Priority {
    pub fn new(registry: &Arc<Registry>) -> Self {
        Priority { registry: Arc::downgrade(registry) }
    }

    async fn classes(&self) -> ApiResult<Vec<Value>> {
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource =
            registry.table.lookup("scheduling.k8s.io", "v1", "priorityclasses").expect("priorityclasses are built in");
        let listed = registry.list(&Scope { resource, namespace: None }, &ListOptions::default()).await?;
        Ok(listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect())
    }
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

fn value_of(v: &Value) -> i64 {
    v.get("value").and_then(Value::as_i64).unwrap_or(0)
}

/// The global default class; should a race have made two, the lower value wins, as
/// upstream picks.
fn global_default(classes: &[Value]) -> Option<&Value> {
    classes.iter().filter(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true)).min_by_key(|c| value_of(c))
}

fn resolve(classes: &[Value], requested: &str) -> Result<Resolved, String> {
    let from = |c: &Value| Resolved {
        class: name_of(c).to_string(),
        value: value_of(c),
        preemption_policy: c.get("preemptionPolicy").and_then(Value::as_str).map(String::from),
    };
    if requested.is_empty() {
        return Ok(global_default(classes).map(from).unwrap_or(Resolved {
            class: String::new(),
            value: DEFAULT_PRIORITY,
            preemption_policy: Some(PREEMPT_LOWER_PRIORITY.into()),
        }));
    }
    classes
        .iter()
        .find(|c| name_of(c) == requested)
        .map(from)
        .ok_or_else(|| format!("no PriorityClass with name {requested} was found"))
}

/// Sets the resolved fields on a new pod's spec, refusing values the client chose that
/// differ from them (upstream's messages).
fn admit_new_pod(spec: &mut serde_json::Map<String, Value>, resolved: Resolved) -> Result<(), String> {
    if let Some(given) = spec.get("priority").and_then(Value::as_i64)
        && given != resolved.value
    {
        return Err(format!(
            "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {} from the given PriorityClass name",
            resolved.value
        ));
    }
    if let Some(policy) = resolved.preemption_policy {
        if let Some(given) = spec.get("preemptionPolicy").and_then(Value::as_str)
            && given != policy
        {
            return Err(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            ));
        }
        spec.insert("preemptionPolicy".into(), json!(policy));
    }
    if !resolved.class.is_empty() {
        spec.insert("priorityClassName".into(), json!(resolved.class));
    }
    spec.insert("priority".into(), json!(resolved.value));
    Ok(())
}

fn forbidden(attrs: &Attributes<'_>, why: &str) -> ApiError {
    let r = attrs.resource;
    ApiError::forbidden_on(&Target::new(&r.group, &r.plural, &r.kind, attrs.name), why)
}

#[async_trait]
impl Admission for Priority {
    async fn mutate(&self, attrs: &Attributes<'_>, pod: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group.is_empty() && r.plural == "pods" && attrs.subresource.is_none()) {
            return Ok(());
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else { return Ok(()) };
        match attrs.operation {
            Operation::Create => {
                let requested = spec.get("priorityClassName").and_then(Value::as_str).unwrap_or("").to_string();
                let resolved = resolve(&self.classes().await?, &requested).map_err(|why| forbidden(attrs, &why))?;
                admit_new_pod(spec, resolved).map_err(|why| forbidden(attrs, &why))
            }
            // An update that leaves the admitted fields out keeps them (validation forbids
            // changing them).
            Operation::Update => {
                let old_spec = old.and_then(|o| o.get("spec"));
                for field in ["priority", "preemptionPolicy"] {
                    if spec.get(field).is_none_or(Value::is_null)
                        && let Some(v) = old_spec.and_then(|s| s.get(field)).filter(|v| !v.is_null())
                    {
                        spec.insert(field.into(), v.clone());
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn validate(&self, attrs: &Attributes<'_>, pc: Option<&Value>, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group == "scheduling.k8s.io" && r.plural == "priorityclasses" && attrs.subresource.is_none()) {
            return Ok(());
        }
        let Some(pc) = pc else { return Ok(()) };
        if !matches!(attrs.operation, Operation::Create | Operation::Update)
            || pc.get("globalDefault").and_then(Value::as_bool) != Some(true)
        {
            return Ok(());
        }
        let classes = self.classes().await?;
        if let Some(existing) = global_default(&classes) {
            let existing = name_of(existing);
            if attrs.operation == Operation::Create || existing != name_of(pc) {
                return Err(forbidden(
                    attrs,
                    &format!("PriorityClass {existing} is already marked as default. Only one default can exist"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, value: i64, default: bool, policy: &str) -> Value {
        json!({"metadata": {"name": name}, "value": value, "globalDefault": default, "preemptionPolicy": policy})
    }

    #[test]
    fn a_pod_without_a_class_gets_the_lowest_global_default_or_zero() {
        assert_eq!(
            resolve(&[], "").unwrap(),
            Resolved { class: String::new(), value: 0, preemption_policy: Some("PreemptLowerPriority".into()) }
        );
        let classes = [
            class("high", 1000, true, "Never"),
            class("low", 10, true, "PreemptLowerPriority"),
            class("other", 5, false, "Never"),
        ];
        let r = resolve(&classes, "").unwrap();
        assert_eq!((r.class.as_str(), r.value), ("low", 10));
        assert_eq!(resolve(&classes, "other").unwrap().preemption_policy.as_deref(), Some("Never"));
        assert_eq!(resolve(&classes, "missing").unwrap_err(), "no PriorityClass with name missing was found");
    }

    #[test]
    fn client_chosen_values_must_match_the_class() {
        let resolved = || Resolved { class: "c".into(), value: 7, preemption_policy: Some("Never".into()) };
        let mut spec = json!({"priority": 7}).as_object().unwrap().clone();
        admit_new_pod(&mut spec, resolved()).unwrap();
        assert_eq!(Value::Object(spec), json!({"priority": 7, "priorityClassName": "c", "preemptionPolicy": "Never"}));
        let mut spec = json!({"priority": 8}).as_object().unwrap().clone();
        assert!(admit_new_pod(&mut spec, resolved()).unwrap_err().contains("computed 7"));
        let mut spec = json!({"preemptionPolicy": "PreemptLowerPriority"}).as_object().unwrap().clone();
        assert!(admit_new_pod(&mut spec, resolved()).unwrap_err().starts_with(
            "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided in pod spec"
        ));
    }
}
