//! audit.k8s.io/v1 Policy: which requests are audited, at which level, and which
//! stages are left out. Rules are tried in order; the first that matches decides, and a
//! request no rule matches is not audited (level None), as upstream's policy checker.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("reading the audit policy {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("decoding the audit policy: {0}")]
    Decode(String),
    #[error("invalid audit policy: {0}")]
    Invalid(String),
}

/// How much of a request is recorded, from least to most.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    #[default]
    None,
    Metadata,
    Request,
    RequestResponse,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub enum Stage {
    RequestReceived,
    ResponseStarted,
    ResponseComplete,
    Panic,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRule {
    pub level: Level,
    #[serde(default)]
    pub users: Vec<String>,
    #[serde(default)]
    pub user_groups: Vec<String>,
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    #[serde(default)]
    pub namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    pub omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub rules: Vec<PolicyRule>,
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// What the policy says about one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestConfig {
    pub level: Level,
    pub omit_stages: BTreeSet<Stage>,
    pub omit_managed_fields: bool,
}

/// The request attributes rules match on: the authorizers' (upstream's audit policy
/// matches on authorizer.Attributes too).
pub use krate_auth::authz::Attributes;

impl Policy {
    /// Parses a policy file's contents (YAML or JSON; JSON is YAML).
    pub fn parse(text: &str) -> Result<Policy, PolicyError> {
        let policy: Policy = serde_yaml_ng::from_str(text).map_err(|e| PolicyError::Decode(e.to_string()))?;
        policy.check()?;
        Ok(policy)
    }

    pub fn load(path: &std::path::Path) -> Result<Policy, PolicyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| PolicyError::Read { path: path.display().to_string(), source })?;
        Policy::parse(&text)
    }

    fn check(&self) -> Result<(), PolicyError> {
        if self.kind != "Policy" {
            return Err(PolicyError::Invalid(format!("kind must be Policy, got {:?}", self.kind)));
        }
        if !matches!(self.api_version.as_str(), "audit.k8s.io/v1") {
            return Err(PolicyError::Invalid(format!(
                "apiVersion must be audit.k8s.io/v1, got {:?}",
                self.api_version
            )));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            let resourceful = !rule.resources.is_empty() || !rule.namespaces.is_empty();
            if resourceful && !rule.non_resource_urls.is_empty() {
                return Err(PolicyError::Invalid(format!(
                    "rules[{i}].nonResourceURLs: rules cannot apply to both regular resources and non-resource URLs"
                )));
            }
            for url in &rule.non_resource_urls {
                if url.is_empty() || url[..url.len() - 1].contains('*') {
                    return Err(PolicyError::Invalid(format!(
                        "rules[{i}].nonResourceURLs: {url:?}: only a trailing * is allowed"
                    )));
                }
            }
            for (j, gr) in rule.resources.iter().enumerate() {
                if !gr.resource_names.is_empty() && gr.resources.is_empty() {
                    return Err(PolicyError::Invalid(format!(
                        "rules[{i}].resources[{j}].resourceNames: resourceNames require resources"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The level, stages to leave out and managedFields handling for a request.
    pub fn evaluate(&self, attrs: &Attributes<'_>) -> RequestConfig {
        let mut omit: BTreeSet<Stage> = self.omit_stages.iter().copied().collect();
        match self.rules.iter().find(|r| rule_matches(r, attrs)) {
            Some(rule) => {
                omit.extend(rule.omit_stages.iter().copied());
                RequestConfig {
                    level: rule.level,
                    omit_stages: omit,
                    omit_managed_fields: rule.omit_managed_fields.unwrap_or(self.omit_managed_fields),
                }
            }
            None => RequestConfig { level: Level::None, omit_stages: omit, omit_managed_fields: false },
        }
    }
}

fn rule_matches(r: &PolicyRule, a: &Attributes<'_>) -> bool {
    if !r.users.is_empty() && !r.users.iter().any(|u| u == &a.user.name) {
        return false;
    }
    if !r.user_groups.is_empty() && !a.user.groups.iter().any(|g| r.user_groups.contains(g)) {
        return false;
    }
    if !r.verbs.is_empty() && !r.verbs.iter().any(|v| v == a.verb) {
        return false;
    }
    if !r.namespaces.is_empty() || !r.resources.is_empty() {
        return matches_resource(r, a);
    }
    if !r.non_resource_urls.is_empty() {
        return !a.resource_request && r.non_resource_urls.iter().any(|u| url_matches(u, a.path));
    }
    true
}

fn url_matches(pattern: &str, path: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => path.starts_with(prefix),
        None => pattern == path,
    }
}

fn matches_resource(r: &PolicyRule, a: &Attributes<'_>) -> bool {
    if !a.resource_request {
        return false;
    }
    // "" in namespaces stands for cluster-scoped requests.
    if !r.namespaces.is_empty() && !r.namespaces.iter().any(|n| n == a.namespace) {
        return false;
    }
    if r.resources.is_empty() {
        return true;
    }
    let combined =
        if a.subresource.is_empty() { a.resource.to_string() } else { format!("{}/{}", a.resource, a.subresource) };
    r.resources.iter().filter(|gr| gr.group == a.api_group).any(|gr| {
        if gr.resources.is_empty() {
            return true;
        }
        let named = gr.resource_names.is_empty() || gr.resource_names.iter().any(|n| n == a.name);
        named
            && gr.resources.iter().any(|res| {
                res == &combined
                    || res == "*"
                    || (!a.subresource.is_empty() && res.strip_prefix("*/") == Some(a.subresource))
                    || res.strip_suffix("/*") == Some(a.resource)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use krate_api::user::UserInfo;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect(), ..Default::default() }
    }

    fn res<'a>(
        u: &'a UserInfo,
        verb: &'a str,
        ns: &'a str,
        group: &'a str,
        r: &'a str,
        sub: &'a str,
    ) -> Attributes<'a> {
        Attributes {
            user: u,
            verb,
            resource_request: true,
            path: "/api/v1/x",
            namespace: ns,
            api_group: group,
            api_version: "v1",
            resource: r,
            subresource: sub,
            name: "n1",
            field_selector: "",
        }
    }

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-proxy"]
  verbs: ["watch"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets", "configmaps/status"]
- level: Request
  resources:
  - group: ""
    resources: ["pods/*"]
- level: RequestResponse
  userGroups: ["ops"]
  resources:
  - group: "apps"
  omitStages: ["ResponseStarted"]
  omitManagedFields: true
- level: Request
  namespaces: [""]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["n1"]
  - group: ""
    resources: ["*/scale"]
- level: Metadata
"#;

    #[test]
    fn first_matching_rule_decides() {
        let p = Policy::parse(POLICY).unwrap();
        let proxy = user("system:kube-proxy", &[]);
        let jane = user("jane", &["dev"]);
        let ops = user("olga", &["ops"]);
        assert_eq!(p.evaluate(&res(&proxy, "watch", "default", "", "pods", "")).level, Level::None);
        // Same user, another verb: falls through; "pods/*" covers pods and all its subresources.
        assert_eq!(p.evaluate(&res(&proxy, "get", "default", "", "pods", "")).level, Level::Request);
        assert_eq!(p.evaluate(&res(&jane, "get", "default", "", "pods", "log")).level, Level::Request);
        assert_eq!(p.evaluate(&res(&jane, "get", "default", "", "secrets", "")).level, Level::Metadata);
        assert_eq!(p.evaluate(&res(&jane, "update", "default", "", "configmaps", "status")).level, Level::Metadata);
        let c = p.evaluate(&res(&ops, "create", "default", "apps", "deployments", ""));
        assert_eq!(c.level, Level::RequestResponse);
        assert!(c.omit_managed_fields);
        assert_eq!(c.omit_stages, [Stage::RequestReceived, Stage::ResponseStarted].into_iter().collect());
        // Not in group ops: the apps rule does not apply.
        assert_eq!(p.evaluate(&res(&jane, "create", "default", "apps", "deployments", "")).level, Level::Metadata);
        // "" namespace: cluster-scoped requests.
        let c = p.evaluate(&res(&jane, "get", "", "", "nodes", ""));
        assert_eq!((c.level, c.omit_managed_fields), (Level::Request, false));
        // resourceNames and */subresource.
        assert_eq!(p.evaluate(&res(&jane, "get", "a", "", "configmaps", "")).level, Level::RequestResponse);
        let mut other = res(&jane, "get", "a", "", "configmaps", "");
        other.name = "n2";
        assert_eq!(p.evaluate(&other).level, Level::Metadata);
        assert_eq!(p.evaluate(&res(&jane, "update", "a", "apps", "deployments", "scale")).level, Level::Metadata);
        assert_eq!(
            p.evaluate(&res(&jane, "update", "a", "", "replicationcontrollers", "scale")).level,
            Level::RequestResponse
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let p = Policy::parse(POLICY).unwrap();
        let jane = user("jane", &[]);
        let nr = |path| Attributes {
            user: &jane,
            verb: "get",
            resource_request: false,
            path,
            namespace: "",
            api_group: "",
            api_version: "",
            resource: "",
            subresource: "",
            name: "",
            field_selector: "",
        };
        assert_eq!(p.evaluate(&nr("/healthz")).level, Level::None);
        assert_eq!(p.evaluate(&nr("/healthz/etcd")).level, Level::None);
        assert_eq!(p.evaluate(&nr("/version")).level, Level::None);
        assert_eq!(p.evaluate(&nr("/version/x")).level, Level::Metadata);
        // A resource rule never matches a non-resource request and vice versa.
        assert_eq!(p.evaluate(&nr("/api")).level, Level::Metadata);
    }

    #[test]
    fn no_rule_means_none_and_bad_policies_are_refused() {
        let p = Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n").unwrap();
        let u = user("a", &[]);
        assert_eq!(p.evaluate(&res(&u, "get", "", "", "pods", "")).level, Level::None);
        assert!(Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n").is_err());
        assert!(Policy::parse("apiVersion: v1\nkind: Policy\nrules: []\n").is_err());
        let both = "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: None\n  namespaces: [a]\n  nonResourceURLs: [/x]\n";
        assert!(matches!(Policy::parse(both), Err(PolicyError::Invalid(_))));
        // JSON is accepted too.
        let json = r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","rules":[{"level":"RequestResponse"}]}"#;
        assert_eq!(
            Policy::parse(json).unwrap().evaluate(&res(&u, "get", "", "", "pods", "")).level,
            Level::RequestResponse
        );
    }
}
