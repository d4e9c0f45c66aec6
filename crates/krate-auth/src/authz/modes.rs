//! `--authorization-mode`: which authorizers decide, in order, behind the
//! system:masters shortcut (upstream's privileged-group authorizer).

use std::sync::Arc;
use std::time::Duration;

use krate_api::Registry;
use krate_api::user::UserInfo;

use super::metrics::Counted;
use super::node::Node;
use super::rbac::Rbac;
use super::{AlwaysAllow, AlwaysDeny, Authorizer, Privileged, RuleResolver, Rules, Union};

pub const DEFAULT_MODES: &str = "Node,RBAC";
pub const MODES: &[&str] = &["AlwaysAllow", "AlwaysDeny", "Node", "RBAC"];

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModeError {
    #[error("authorization-mode {0:?} is not a valid mode (one of AlwaysAllow, AlwaysDeny, Node, RBAC)")]
    Unknown(String),
    #[error("authorization-mode {0:?} has mentioned multiple times")]
    Repeated(String),
    #[error("at least one authorization-mode must be passed")]
    Empty,
}

/// Parses a comma list of modes.
pub fn parse(list: &str) -> Result<Vec<String>, ModeError> {
    let mut modes: Vec<String> = Vec::new();
    for m in list.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        if !MODES.contains(&m) {
            return Err(ModeError::Unknown(m.into()));
        }
        if modes.iter().any(|x| x == m) {
            return Err(ModeError::Repeated(m.into()));
        }
        modes.push(m.into());
    }
    if modes.is_empty() {
        return Err(ModeError::Empty);
    }
    Ok(modes)
}

/// The assembled authorization stage.
pub struct Authorization {
    /// system:masters first, then the modes in order.
    pub authorizer: Arc<dyn Authorizer>,
    /// The modes' rule listings, in order (SelfSubjectRulesReview).
    pub resolver: Arc<dyn RuleResolver>,
    /// The RBAC copy: the escalation check and aggregation need it whatever the modes.
    pub rbac: Arc<Rbac>,
    node: Option<Arc<Node>>,
}

impl Authorization {
    /// Starts the authorizers of `modes` (their watches) over `registry`.
    pub fn build(modes: &[String], registry: &Arc<Registry>) -> Self {
        let rbac = Rbac::start(registry);
        let mut node = None;
        let mut authorizers: Vec<Arc<dyn Authorizer>> = vec![Arc::new(Privileged)];
        let mut resolvers: Vec<Arc<dyn RuleResolver>> = Vec::new();
        for m in modes {
            match m.as_str() {
                "AlwaysAllow" => {
                    authorizers.push(Arc::new(AlwaysAllow));
                    resolvers.push(Arc::new(AlwaysAllow));
                }
                "AlwaysDeny" => authorizers.push(Arc::new(AlwaysDeny)),
                "Node" => {
                    let n = Node::start(registry);
                    authorizers.push(n.clone());
                    resolvers.push(n.clone());
                    node = Some(n);
                }
                "RBAC" => {
                    authorizers.push(rbac.clone());
                    resolvers.push(rbac.clone());
                }
                other => tracing::warn!(mode = other, "unknown authorization mode skipped"),
            }
        }
        // Every authorizer but an unknown mode's (skipped above) counts its decisions.
        let kinds = std::iter::once("Privileged").chain(modes.iter().map(|m| mode_name(m)).filter(|k| *k != "Unknown"));
        let counted = authorizers
            .into_iter()
            .zip(kinds)
            .map(|(inner, kind)| -> Arc<dyn Authorizer> { Arc::new(Counted { kind, name: mode_label(kind), inner }) })
            .collect();
        Authorization { authorizer: Arc::new(Union(counted)), resolver: Arc::new(ResolverUnion(resolvers)), rbac, node }
    }

    /// Waits until every authorizer's copy holds its first listing.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let node = match &self.node {
            Some(n) => n.wait_synced(timeout).await,
            None => true,
        };
        node && self.rbac.wait_synced(timeout).await
    }
}

/// The static name of a mode (metric labels).
fn mode_name(m: &str) -> &'static str {
    MODES.iter().find(|x| **x == m).copied().unwrap_or("Unknown")
}

/// Upstream's authorizer names in metrics.
fn mode_label(kind: &'static str) -> &'static str {
    match kind {
        "Privileged" => "privileged",
        "Node" => "node",
        "RBAC" => "rbac",
        _ => kind,
    }
}

/// Every resolver's rules together.
pub struct ResolverUnion(pub Vec<Arc<dyn RuleResolver>>);

impl RuleResolver for ResolverUnion {
    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        let mut out = Rules::default();
        for r in &self.0 {
            let rules = r.rules_for(user, namespace);
            out.resource.extend(rules.resource);
            out.non_resource.extend(rules.non_resource);
            out.incomplete |= rules.incomplete;
            out.errors.extend(rules.errors);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_upstream_checks_them() {
        assert_eq!(parse("Node,RBAC").unwrap(), ["Node", "RBAC"]);
        assert_eq!(parse("AlwaysAllow").unwrap(), ["AlwaysAllow"]);
        assert_eq!(parse("RBAC,Webhook"), Err(ModeError::Unknown("Webhook".into())));
        assert_eq!(parse("RBAC,RBAC"), Err(ModeError::Repeated("RBAC".into())));
        assert_eq!(parse(""), Err(ModeError::Empty));
    }
}
