//! The admission chain: built-in plugins, run in upstream's order at the registry's
//! admission points. Every plugin's `mutate` runs first (the mutating phase), then every
//! plugin's `validate` (the validating phase); the first refusal ends the request. The
//! registry calls both on dry-run requests too, as upstream does.

pub mod certificate_subject_restriction;
pub mod config;
pub mod default_ingress_class;
pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod metrics;
mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod resource_quota;
pub mod service_account;
pub mod validating_policy;
pub mod webhook;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes};
use krate_api::{ApiResult, Registry};

pub use certificate_subject_restriction::CertificateSubjectRestriction;
pub use config::{AdmissionConfig, ConfigError};
pub use default_ingress_class::DefaultIngressClass;
pub use default_storage_class::DefaultStorageClass;
pub use default_toleration_seconds::DefaultTolerationSeconds;
pub use namespace_lifecycle::NamespaceLifecycle;
pub use node_restriction::NodeRestriction;
pub use pod_security::{PodSecurity, PodSecurityConfig};
pub use priority::Priority;
pub use resource_quota::ResourceQuota;
pub use service_account::ServiceAccount;
pub use validating_policy::ValidatingAdmissionPolicy;
pub use webhook::{MutatingAdmissionWebhook, ValidatingAdmissionWebhook};

/// Upstream's plugin order (kube-apiserver's AllOrderedPlugins), whichever are enabled:
/// later security and extensibility plugins take their place in this list.
pub const PLUGIN_ORDER: &[&str] = &[
    "AlwaysAdmit",
    "NamespaceAutoProvision",
    "NamespaceLifecycle",
    "NamespaceExists",
    "LimitPodHardAntiAffinityTopology",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "ImagePolicyWebhook",
    "PodSecurity",
    "PodNodeSelector",
    "Priority",
    "DefaultTolerationSeconds",
    "PodTolerationRestriction",
    "EventRateLimit",
    "ExtendedResourceToleration",
    "PersistentVolumeLabel",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "denyServiceExternalIPs",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
    "AlwaysDeny",
];

#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    #[error("admission plugin \"{0}\" is not in the ordered plugin list")]
    UnknownPlugin(String),
    #[error("admission plugin \"{plugin}\": {message}")]
    Config { plugin: &'static str, message: String },
}

/// Plugins run in order; the first refusal ends the request.
pub struct Chain {
    plugins: Vec<(&'static str, Arc<dyn Admission>)>,
}

impl Chain {
    /// Plugins in the order given (tests).
    pub fn new(plugins: Vec<Arc<dyn Admission>>) -> Self {
        Chain { plugins: plugins.into_iter().map(|p| ("", p)).collect() }
    }

    /// Named plugins, put in upstream's order whatever order they come in.
    pub fn ordered(plugins: Vec<(&'static str, Arc<dyn Admission>)>) -> Result<Self, ChainError> {
        let position = |name: &str| PLUGIN_ORDER.iter().position(|p| *p == name);
        if let Some((name, _)) = plugins.iter().find(|(n, _)| position(n).is_none()) {
            return Err(ChainError::UnknownPlugin(name.to_string()));
        }
        let mut plugins = plugins;
        plugins.sort_by_key(|(n, _)| position(n));
        Ok(Chain { plugins })
    }

    /// The names of the plugins, in the order they run.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|(n, _)| *n).collect()
    }

    /// The server's default chain: NamespaceLifecycle, then `validators` (plugins of other
    /// components, such as RBAC's escalation check), ServiceAccount, NodeRestriction,
    /// PodSecurity, Priority, DefaultTolerationSeconds, DefaultStorageClass,
    /// CertificateSubjectRestriction, DefaultIngressClass, the admission
    /// webhooks and ResourceQuota, PodSecurity configured from the
    /// admission configuration file.
    pub fn standard(
        registry: &Arc<Registry>,
        config: &AdmissionConfig,
        validators: Vec<(&'static str, Arc<dyn Admission>)>,
    ) -> Result<Self, ChainError> {
        let pod_security = match config.plugin("PodSecurity") {
            Some(v) => PodSecurityConfig::from_value(v)
                .map_err(|message| ChainError::Config { plugin: "PodSecurity", message })?,
            None => PodSecurityConfig::default(),
        };
        let mut chain = Chain::ordered(vec![
            ("NamespaceLifecycle", Arc::new(NamespaceLifecycle::new(registry)) as Arc<dyn Admission>),
            ("ServiceAccount", Arc::new(ServiceAccount::new(registry)) as Arc<dyn Admission>),
            ("NodeRestriction", Arc::new(NodeRestriction::new(registry))),
            ("PodSecurity", Arc::new(PodSecurity::new(registry, pod_security))),
            ("Priority", Arc::new(Priority::new(registry))),
            ("DefaultTolerationSeconds", Arc::new(DefaultTolerationSeconds::default())),
            ("DefaultStorageClass", Arc::new(DefaultStorageClass::new(registry))),
            ("CertificateSubjectRestriction", Arc::new(CertificateSubjectRestriction)),
            ("DefaultIngressClass", Arc::new(DefaultIngressClass::new(registry))),
            ("ResourceQuota", Arc::new(ResourceQuota::new(registry))),
            ("MutatingAdmissionWebhook", Arc::new(MutatingAdmissionWebhook::new(registry))),
            ("ValidatingAdmissionWebhook", Arc::new(ValidatingAdmissionWebhook::new(registry))),
            ("ValidatingAdmissionPolicy", Arc::new(ValidatingAdmissionPolicy::new(registry))),
        ])?;
        // Not upstream admission plugins (RBAC's check lives in its registry there), so
        // outside the ordered list: right after NamespaceLifecycle.
        for (i, v) in validators.into_iter().enumerate() {
            chain.plugins.insert(1 + i, v);
        }
        Ok(chain)
    }
}

fn observe(name: &str, attrs: &Attributes<'_>, phase: &str, rejected: bool, start: Instant) {
    if name.is_empty() {
        return;
    }
    metrics::PLUGIN_DURATION
        .with_label_values(&[name, metrics::operation(attrs.operation), if rejected { "true" } else { "false" }, phase])
        .observe(start.elapsed().as_secs_f64());
}

#[async_trait]
impl Admission for Chain {
    async fn mutate(&self, attrs: &Attributes<'_>, obj: &mut Value, old: Option<&Value>) -> ApiResult<()> {
        for (name, p) in &self.plugins {
            let start = Instant::now();
            let result = p.mutate(attrs, obj, old).await;
            observe(name, attrs, "admit", result.is_err(), start);
            result?;
        }
        Ok(())
    }
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        for (name, p) in &self.plugins {
            let start = Instant::now();
            let result = p.validate(attrs, obj, old).await;
            observe(name, attrs, "validate", result.is_err(), start);
            result?;
        }
        Ok(())
    }
}
