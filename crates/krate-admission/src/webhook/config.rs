//! The webhooks of the stored configurations, parsed once per change: every admission
//! reads the configurations through the registry's watch cache (as the other plugins
//! read objects) and re-parses only when a configuration's resourceVersion differs.
//! Configurations are taken in name order and webhooks in their listed order, as
//! upstream's sorted configuration lister gives them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use base64::Engine;
use parking_lot::Mutex;
use serde_json::Value;

use krate_api::registry::{ListOptions, Scope};
use krate_api::{ApiError, ApiResult, Registry, object};

pub const GROUP: &str = "admissionregistration.k8s.io";

/// One rule of a webhook (RuleWithOperations).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    /// "*", "Cluster" or "Namespaced".
    pub scope: String,
}

/// Where a webhook is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    Url(String),
    Service { namespace: String, name: String, path: String, port: u16 },
}

/// One webhook of a configuration, with upstream's defaults applied.
#[derive(Clone, Debug)]
pub struct Hook {
    /// The configuration object's name.
    pub configuration: String,
    pub name: String,
    /// Identity for reinvocation: configuration and position.
    pub id: String,
    pub rules: Vec<Rule>,
    pub ignore_failures: bool,
    pub equivalent_match: bool,
    pub namespace_selector: Value,
    pub object_selector: Value,
    /// None, NoneOnDryRun, Some or Unknown; empty when unset.
    pub side_effects: String,
    pub timeout: Duration,
    pub review_versions: Vec<String>,
    pub endpoint: Endpoint,
    pub ca_bundle: Vec<u8>,
    pub reinvoke_if_needed: bool,
    pub match_conditions: super::conditions::MatchConditions,
}

impl Hook {
    /// Whether a dry-run request may reach it.
    pub fn dry_run_safe(&self) -> bool {
        matches!(self.side_effects.as_str(), "None" | "NoneOnDryRun")
    }

    /// The AdmissionReview version to send: the first listed that this server speaks.
    pub fn review_version(&self) -> Option<&'static str> {
        self.review_versions.iter().find_map(|v| match v.as_str() {
            "v1" => Some("v1"),
            "v1beta1" => Some("v1beta1"),
            _ => None,
        })
    }
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(String::from).collect()
}

fn str_or<'a>(v: &'a Value, key: &str, default: &'a str) -> &'a str {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).unwrap_or(default)
}

/// The webhooks of one configuration object, in order.
pub fn parse(configuration: &Value, mutating: bool) -> Vec<Hook> {
    let config_name = object::name(configuration).to_string();
    let uid = object::meta_str(configuration, "uid").unwrap_or("");
    let hooks = configuration.get("webhooks").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    hooks
        .iter()
        .enumerate()
        .filter_map(|(i, h)| {
            let cc = h.get("clientConfig")?;
            let endpoint = match (cc.get("url").and_then(Value::as_str), cc.get("service")) {
                (Some(url), _) => Endpoint::Url(url.to_string()),
                (None, Some(s)) if s.is_object() => Endpoint::Service {
                    namespace: str_or(s, "namespace", "").to_string(),
                    name: str_or(s, "name", "").to_string(),
                    path: str_or(s, "path", "/").to_string(),
                    port: s.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()).unwrap_or(443),
                },
                _ => return None,
            };
            let ca_bundle = cc
                .get("caBundle")
                .and_then(Value::as_str)
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .unwrap_or_default();
            let rules = h
                .get("rules")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|r| Rule {
                    operations: strings(r, "operations"),
                    groups: strings(r, "apiGroups"),
                    versions: strings(r, "apiVersions"),
                    resources: strings(r, "resources"),
                    scope: str_or(r, "scope", "*").to_string(),
                })
                .collect();
            let timeout = h.get("timeoutSeconds").and_then(Value::as_u64).unwrap_or(10).clamp(1, 30);
            Some(Hook {
                configuration: config_name.clone(),
                name: str_or(h, "name", "").to_string(),
                id: format!("{uid}/{i}"),
                rules,
                ignore_failures: str_or(h, "failurePolicy", "Fail") == "Ignore",
                equivalent_match: str_or(h, "matchPolicy", "Equivalent") == "Equivalent",
                namespace_selector: h
                    .get("namespaceSelector")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Default::default())),
                object_selector: h.get("objectSelector").cloned().unwrap_or_else(|| Value::Object(Default::default())),
                side_effects: str_or(h, "sideEffects", "").to_string(),
                timeout: Duration::from_secs(timeout),
                review_versions: strings(h, "admissionReviewVersions"),
                endpoint,
                ca_bundle,
                reinvoke_if_needed: mutating && str_or(h, "reinvocationPolicy", "Never") == "IfNeeded",
                match_conditions: super::conditions::MatchConditions::parse(h),
            })
        })
        .collect()
}

/// Every webhook of one configuration resource, in order.
pub type Hooks = Arc<Vec<Arc<Hook>>>;

/// The parsed webhooks of one configuration resource, kept up to date.
pub struct Source {
    registry: Weak<Registry>,
    plural: &'static str,
    mutating: bool,
    /// (name, resourceVersion) of each configuration parsed, and the result.
    cached: Mutex<(Vec<(String, String)>, Hooks)>,
}

impl Source {
    pub fn new(registry: &Arc<Registry>, mutating: bool) -> Self {
        Source {
            registry: Arc::downgrade(registry),
            plural: if mutating { "mutatingwebhookconfigurations" } else { "validatingwebhookconfigurations" },
            mutating,
            cached: Mutex::new((Vec::new(), Arc::new(Vec::new()))),
        }
    }

    pub fn registry(&self) -> Option<Arc<Registry>> {
        self.registry.upgrade()
    }

    /// Every webhook, in upstream's order.
    pub async fn hooks(&self) -> ApiResult<Hooks> {
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let Some(resource) = registry.table.lookup(GROUP, "v1", self.plural) else {
            return Ok(Arc::new(Vec::new()));
        };
        // From the watch cache, as upstream's plugins read an informer: no store read per
        // request, and a new configuration takes effect as soon as the cache has it.
        let opts = ListOptions { resource_version: Some("0".into()), ..Default::default() };
        let listed = registry.list(&Scope { resource, namespace: None }, &opts).await?;
        let mut configs: Vec<Value> = listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        configs.sort_by(|a, b| object::name(a).cmp(object::name(b)));
        let versions: Vec<(String, String)> = configs
            .iter()
            .map(|c| (object::name(c).to_string(), object::meta_str(c, "resourceVersion").unwrap_or("").to_string()))
            .collect();
        {
            let cached = self.cached.lock();
            if cached.0 == versions {
                return Ok(cached.1.clone());
            }
        }
        let hooks: Hooks = Arc::new(configs.iter().flat_map(|c| parse(c, self.mutating)).map(Arc::new).collect());
        tracing::debug!(resource = self.plural, webhooks = hooks.len(), "webhook configurations reloaded");
        *self.cached.lock() = (versions, hooks.clone());
        Ok(hooks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn webhooks_parse_with_upstreams_defaults() {
        let cfg = json!({"metadata": {"name": "cfg", "uid": "u1"}, "webhooks": [
            {"name": "a.example.com", "clientConfig": {"url": "https://h/x", "caBundle": "Zm9v"},
             "admissionReviewVersions": ["v2", "v1beta1", "v1"], "sideEffects": "None",
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]},
            {"name": "b.example.com", "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
             "failurePolicy": "Ignore", "matchPolicy": "Exact", "timeoutSeconds": 3, "reinvocationPolicy": "IfNeeded"}
        ]});
        let hooks = parse(&cfg, true);
        assert_eq!(hooks.len(), 2);
        assert_eq!(hooks[0].ca_bundle, b"foo");
        assert_eq!(hooks[0].review_version(), Some("v1beta1"));
        assert!(!hooks[0].ignore_failures && hooks[0].equivalent_match && hooks[0].dry_run_safe());
        assert_eq!(hooks[0].timeout, Duration::from_secs(10));
        assert_eq!(hooks[0].rules[0].scope, "*");
        assert_eq!(
            hooks[1].endpoint,
            Endpoint::Service { namespace: "ns".into(), name: "svc".into(), path: "/".into(), port: 443 }
        );
        assert!(hooks[1].ignore_failures && !hooks[1].equivalent_match && hooks[1].reinvoke_if_needed);
        assert_eq!(hooks[1].timeout, Duration::from_secs(3));
        assert_eq!(hooks[1].id, "u1/1");
        assert!(!parse(&cfg, false)[1].reinvoke_if_needed);
    }
}
