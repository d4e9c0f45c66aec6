//! PodSecurity admission, as upstream's plugin: each namespace's labels pick a Pod
//! Security Standards level and version to enforce (refuse pods), audit (annotate the
//! audit event) and warn (Warning headers). Workload resources with pod templates only
//! warn and audit; relabelling a namespace warns about its existing pods.

pub mod checks;
mod config;
pub mod policy;

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::{ListOptions, Scope};
use krate_api::{ApiError, ApiResult, Cause, Registry, Target, object};

use crate::metrics;

use checks::Violation;
pub use config::PodSecurityConfig;
use policy::{Level, LevelVersion, Policy, detail, reasons};

/// Audit annotation keys, as upstream's.
pub const ENFORCE_POLICY_ANNOTATION: &str = "pod-security.kubernetes.io/enforce-policy";
pub const AUDIT_VIOLATIONS_ANNOTATION: &str = "pod-security.kubernetes.io/audit-violations";
pub const EXEMPT_ANNOTATION: &str = "pod-security.kubernetes.io/exempt";
pub const ERROR_ANNOTATION: &str = "pod-security.kubernetes.io/error";

/// Upstream checks at most this many pods when a namespace's enforce level tightens.
const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;

/// Pod subresources that do not change what the pod runs as.
const IGNORED_POD_SUBRESOURCES: &[&str] =
    &["attach", "binding", "eviction", "exec", "log", "portforward", "proxy", "status"];

pub struct PodSecurity {
    registry: Weak<Registry>,
    config: PodSecurityConfig,
}

/// Where a workload resource keeps its pod template.
fn template_pointer(group: &str, plural: &str) -> Option<&'static str> {
    match (group, plural) {
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs")
        | ("", "replicationcontrollers") => Some("/spec/template"),
        ("batch", "cronjobs") => Some("/spec/jobTemplate/spec/template"),
        ("", "podtemplates") => Some("/template"),
        _ => None,
    }
}

fn meta_and_spec(template: &Value) -> (&Value, &Value) {
    static NULL: Value = Value::Null;
    (template.get("metadata").unwrap_or(&NULL), template.get("spec").unwrap_or(&NULL))
}

/// Whether a pod update changes anything the checks look at: upstream lets label,
/// annotation and status updates through unchecked, but not new images, new
/// containers, new ephemeral containers, or changed seccomp annotations.
fn significant_pod_update(new: &Value, old: &Value) -> bool {
    let ann = |o: &Value, k: &str| o.pointer("/metadata/annotations").and_then(|a| a.get(k)).cloned();
    if ann(new, "seccomp.security.alpha.kubernetes.io/pod") != ann(old, "seccomp.security.alpha.kubernetes.io/pod") {
        return true;
    }
    let list =
        |o: &Value, f: &str| o.pointer(&format!("/spec/{f}")).and_then(Value::as_array).cloned().unwrap_or_default();
    let container_changed = |c: &Value, oc: &Value| {
        let key = format!(
            "container.seccomp.security.alpha.kubernetes.io/{}",
            c.get("name").and_then(Value::as_str).unwrap_or("")
        );
        c.get("image") != oc.get("image") || ann(new, &key) != ann(old, &key)
    };
    for f in ["containers", "initContainers"] {
        let (n, o) = (list(new, f), list(old, f));
        if n.len() != o.len() || n.iter().zip(&o).any(|(c, oc)| container_changed(c, oc)) {
            return true;
        }
    }
    let old_ephemeral = list(old, "ephemeralContainers");
    list(new, "ephemeralContainers").iter().any(|c| {
        match old_ephemeral.iter().find(|oc| oc.get("name") == c.get("name")) {
            None => true,
            Some(oc) => container_changed(c, oc),
        }
    })
}

fn exempt(attrs: &Attributes<'_>, why: &str) {
    attrs.annotate(EXEMPT_ANNOTATION, why);
    let labels = [metrics::operation(attrs.operation), attrs.resource.plural.as_str(), attrs.subresource.unwrap_or("")];
    metrics::POD_SECURITY_EXEMPTIONS.with_label_values(&labels).inc();
}

/// Counts one evaluation; privileged policies are not evaluations (upstream skips them).
fn record(attrs: &Attributes<'_>, mode: &str, lv: LevelVersion, allowed: bool) {
    if lv.level == Level::Privileged {
        return;
    }
    let version = lv.version.to_string();
    metrics::POD_SECURITY_EVALUATIONS
        .with_label_values(&[
            if allowed { "allow" } else { "deny" },
            mode,
            lv.level.as_str(),
            &version,
            metrics::operation(attrs.operation),
            attrs.resource.plural.as_str(),
            attrs.subresource.unwrap_or(""),
        ])
        .inc();
}

impl PodSecurity {
    pub fn new(registry: &Arc<Registry>, config: PodSecurityConfig) -> Self {
        PodSecurity { registry: Arc::downgrade(registry), config }
    }

    fn exempt_namespace(&self, ns: &str) -> bool {
        self.config.exempt_namespaces.iter().any(|n| n == ns)
    }

    fn exempt_user(&self, user: &str) -> bool {
        self.config.exempt_usernames.iter().any(|u| u == user)
    }

    async fn namespace_policy(&self, ns: &str) -> ApiResult<(Policy, Vec<policy::LabelError>)> {
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let namespaces = registry.table.lookup("", "v1", "namespaces").expect("namespaces are built in");
        let scope = Scope { resource: namespaces, namespace: None };
        let namespace = registry
            .get_cached_or_live(&scope, ns)
            .await
            .map_err(|e| ApiError::internal(format!("failed to lookup namespace \"{ns}\": {}", e.message)))?;
        Ok(Policy::from_labels(object::labels(&namespace), &self.config.defaults))
    }

    /// Enforce (pods only), audit and warn for one pod or pod template.
    fn evaluate(
        &self,
        attrs: &Attributes<'_>,
        policy: &Policy,
        errors: &[policy::LabelError],
        template: (&Value, &Value),
        enforce: bool,
    ) -> ApiResult<()> {
        let (meta, spec) = template;
        if let Some(rc) = spec.get("runtimeClassName").and_then(Value::as_str)
            && self.config.exempt_runtime_classes.iter().any(|c| c == rc)
        {
            exempt(attrs, "runtimeClass");
            return Ok(());
        }
        if !errors.is_empty() {
            let why: Vec<String> =
                errors.iter().map(|e| format!("metadata.labels[{}]: {}", e.label, e.detail)).collect();
            attrs.annotate(ERROR_ANNOTATION, format!("Failed to parse policy: {}", why.join(", ")));
        }
        let mut results: HashMap<LevelVersion, Vec<Violation>> = HashMap::new();
        let mut result = |lv: LevelVersion| results.entry(lv).or_insert_with(|| lv.evaluate(meta, spec)).clone();
        let mut refusal = None;
        if enforce {
            attrs.annotate(ENFORCE_POLICY_ANNOTATION, policy.enforce.to_string());
            let v = result(policy.enforce);
            record(attrs, "enforce", policy.enforce, v.is_empty());
            if !v.is_empty() {
                refusal = Some(format!("violates PodSecurity \"{}\": {}", policy.enforce, detail(&v)));
            }
        }
        let v = result(policy.audit);
        record(attrs, "audit", policy.audit, v.is_empty());
        if !v.is_empty() {
            attrs.annotate(
                AUDIT_VIOLATIONS_ANNOTATION,
                format!("would violate PodSecurity \"{}\": {}", policy.audit, detail(&v)),
            );
        }
        if let Some(why) = refusal {
            let r = attrs.resource;
            return Err(ApiError::forbidden_on(&Target::new(&r.group, &r.plural, &r.kind, attrs.name), &why));
        }
        // No warnings on a request that is refused anyway.
        let v = result(policy.warn);
        record(attrs, "warn", policy.warn, v.is_empty());
        if !v.is_empty() {
            attrs.warn(format!("would violate PodSecurity \"{}\": {}", policy.warn, detail(&v)));
        }
        Ok(())
    }

    async fn validate_pod(&self, attrs: &Attributes<'_>, pod: &Value, old: Option<&Value>) -> ApiResult<()> {
        if attrs.subresource.is_some_and(|s| IGNORED_POD_SUBRESOURCES.contains(&s)) {
            return Ok(());
        }
        let Some(ns) = attrs.namespace else { return Ok(()) };
        if self.exempt_namespace(ns) {
            exempt(attrs, "namespace");
            return Ok(());
        }
        if self.exempt_user(&attrs.user.name) {
            exempt(attrs, "user");
            return Ok(());
        }
        let (policy, errors) = self.namespace_policy(ns).await?;
        if errors.is_empty() && policy.fully_privileged() {
            return Ok(());
        }
        if let Some(old) = old
            && !significant_pod_update(pod, old)
        {
            return Ok(());
        }
        let meta = pod.get("metadata").unwrap_or(&Value::Null);
        let spec = pod.get("spec").unwrap_or(&Value::Null);
        self.evaluate(attrs, &policy, &errors, (meta, spec), true)
    }

    async fn validate_workload(
        &self,
        attrs: &Attributes<'_>,
        pointer: &str,
        obj: &Value,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if attrs.subresource.is_some() {
            return Ok(());
        }
        let Some(ns) = attrs.namespace else { return Ok(()) };
        if self.exempt_namespace(ns) || self.exempt_user(&attrs.user.name) {
            return Ok(());
        }
        let (policy, errors) = self.namespace_policy(ns).await?;
        if errors.is_empty() && policy.warn.level == Level::Privileged && policy.audit.level == Level::Privileged {
            return Ok(());
        }
        let Some(template) = obj.pointer(pointer) else { return Ok(()) };
        // An update that leaves the template alone (scale, labels) is not checked again.
        if old.and_then(|o| o.pointer(pointer)) == Some(template) {
            return Ok(());
        }
        self.evaluate(attrs, &policy, &errors, meta_and_spec(template), false)
    }

    async fn validate_namespace(&self, attrs: &Attributes<'_>, ns: &Value, old: Option<&Value>) -> ApiResult<()> {
        if attrs.subresource.is_some() {
            return Ok(());
        }
        let (policy, errors) = Policy::from_labels(object::labels(ns), &self.config.defaults);
        let invalid = || {
            let causes = errors
                .iter()
                .map(|e| Cause::invalid(format!("metadata.labels[{}]", e.label), &e.value, e.detail))
                .collect();
            Err(ApiError::invalid(&Target::new("", "namespaces", "Namespace", attrs.name), causes))
        };
        let exempt_warning = |policy: &Policy| {
            if self.exempt_namespace(attrs.name) && !policy.fully_privileged() {
                attrs.warn(format!(
                    "namespace \"{}\" is exempt from Pod Security, and the policy ({}) will be ignored",
                    attrs.name,
                    policy.compact()
                ));
                return true;
            }
            false
        };
        let Some(old) = old else {
            if !errors.is_empty() {
                return invalid();
            }
            exempt_warning(&policy);
            return Ok(());
        };
        let (old_policy, old_errors) = Policy::from_labels(object::labels(old), &self.config.defaults);
        if !errors.is_empty() && (old_errors.is_empty() || policy != old_policy) {
            return invalid();
        }
        // Only a tightened enforce policy can leave existing pods in violation.
        let (new, was) = (policy.enforce, old_policy.enforce);
        if new == was || new.level == Level::Privileged || (new.version == was.version && new.level <= was.level) {
            return Ok(());
        }
        if exempt_warning(&policy) {
            return Ok(());
        }
        for w in self.existing_pod_warnings(attrs.name, new).await {
            attrs.warn(w);
        }
        Ok(())
    }

    /// Upstream's warnings for pods already in a namespace whose enforce level tightens:
    /// one line per distinct set of violations, naming the first pod and how many others.
    async fn existing_pod_warnings(&self, ns: &str, enforce: LevelVersion) -> Vec<String> {
        let failed = || vec!["failed to list pods while checking new PodSecurity enforce level".to_string()];
        let Some(registry) = self.registry.upgrade() else { return failed() };
        let pods = registry.table.lookup("", "v1", "pods").expect("pods are built in");
        let scope = Scope { resource: pods, namespace: Some(ns.to_string()) };
        let Ok(listed) = registry.list(&scope, &ListOptions::default()).await else { return failed() };
        let pods: Vec<Value> = listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        let total = pods.len();
        // (reasons, first pod name, count), in the order first seen.
        let mut seen: Vec<(String, String, usize)> = Vec::new();
        for pod in pods.iter().take(NAMESPACE_MAX_PODS_TO_CHECK) {
            let v =
                enforce.evaluate(pod.get("metadata").unwrap_or(&Value::Null), pod.get("spec").unwrap_or(&Value::Null));
            if v.is_empty() {
                continue;
            }
            let why = reasons(&v);
            let name = object::name(pod).to_string();
            match seen.iter_mut().find(|(r, _, _)| *r == why) {
                Some(entry) => {
                    if name < entry.1 {
                        entry.1 = name;
                    }
                    entry.2 += 1;
                }
                None => seen.push((why, name, 1)),
            }
        }
        let mut warnings = Vec::new();
        if total > NAMESPACE_MAX_PODS_TO_CHECK {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {NAMESPACE_MAX_PODS_TO_CHECK} of {total} existing pods"
            ));
        }
        if !seen.is_empty() {
            warnings.push(format!(
                "existing pods in namespace \"{ns}\" violate the new PodSecurity enforce level \"{enforce}\""
            ));
        }
        let mut pod_warnings: Vec<String> = seen
            .into_iter()
            .map(|(why, name, count)| match count {
                1 => format!("{name}: {why}"),
                2 => format!("{name} (and 1 other pod): {why}"),
                n => format!("{name} (and {} other pods): {why}", n - 1),
            })
            .collect();
        pod_warnings.sort();
        warnings.extend(pod_warnings);
        warnings
    }
}

#[async_trait]
impl Admission for PodSecurity {
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        if !matches!(attrs.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(obj) = obj else { return Ok(()) };
        let r = attrs.resource;
        match (r.group.as_str(), r.plural.as_str()) {
            ("", "namespaces") => self.validate_namespace(attrs, obj, old).await,
            ("", "pods") => self.validate_pod(attrs, obj, old).await,
            (group, plural) => match template_pointer(group, plural) {
                Some(pointer) => self.validate_workload(attrs, pointer, obj, old).await,
                None => Ok(()),
            },
        }
    }
}

#[cfg(test)]
mod tests;
