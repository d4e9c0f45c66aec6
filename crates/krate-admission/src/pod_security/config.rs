//! PodSecurityConfiguration (pod-security.admission.config.k8s.io/v1): the policy for
//! namespaces without labels, and who and what is exempt.

use serde::Deserialize;
use serde_json::Value;

use super::policy::{Level, LevelVersion, Policy, Version};

const API_VERSIONS: &[&str] = &[
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

#[derive(Clone, Debug, Default)]
pub struct PodSecurityConfig {
    pub defaults: Policy,
    pub exempt_usernames: Vec<String>,
    pub exempt_namespaces: Vec<String>,
    pub exempt_runtime_classes: Vec<String>,
}

#[derive(Deserialize, Default)]
struct Defaults {
    enforce: Option<String>,
    #[serde(rename = "enforce-version")]
    enforce_version: Option<String>,
    audit: Option<String>,
    #[serde(rename = "audit-version")]
    audit_version: Option<String>,
    warn: Option<String>,
    #[serde(rename = "warn-version")]
    warn_version: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Exemptions {
    #[serde(default)]
    usernames: Vec<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    runtime_classes: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    defaults: Defaults,
    #[serde(default)]
    exemptions: Exemptions,
}

fn level_version(mode: &str, level: Option<&str>, version: Option<&str>) -> Result<LevelVersion, String> {
    let level = match level {
        None => Level::Privileged,
        Some(l) => Level::parse(l).ok_or_else(|| {
            format!("defaults.{mode}: Unsupported value: \"{l}\": supported values: \"privileged\", \"baseline\", \"restricted\"")
        })?,
    };
    let version = match version {
        None => Version::Latest,
        Some(v) => Version::parse(v)
            .ok_or_else(|| format!("defaults.{mode}-version: Invalid value: \"{v}\": must be 'latest' or 'v1.x'"))?,
    };
    Ok(LevelVersion { level, version })
}

impl PodSecurityConfig {
    /// The PodSecurity plugin's object from the admission configuration file.
    pub fn from_value(v: &Value) -> Result<PodSecurityConfig, String> {
        let raw: Raw = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        if raw.kind != "PodSecurityConfiguration" || !API_VERSIONS.contains(&raw.api_version.as_str()) {
            return Err(format!(
                "expected kind PodSecurityConfiguration of pod-security.admission.config.k8s.io/v1, got {} of {}",
                raw.kind, raw.api_version
            ));
        }
        let d = &raw.defaults;
        let defaults = Policy {
            enforce: level_version("enforce", d.enforce.as_deref(), d.enforce_version.as_deref())?,
            audit: level_version("audit", d.audit.as_deref(), d.audit_version.as_deref())?,
            warn: level_version("warn", d.warn.as_deref(), d.warn_version.as_deref())?,
        };
        Ok(PodSecurityConfig {
            defaults,
            exempt_usernames: raw.exemptions.usernames,
            exempt_namespaces: raw.exemptions.namespaces,
            exempt_runtime_classes: raw.exemptions.runtime_classes,
        })
    }
}
