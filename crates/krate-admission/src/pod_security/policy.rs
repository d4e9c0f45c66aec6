//! Levels, policy versions, and a namespace's policy read from its labels, as upstream's
//! k8s.io/pod-security-admission/api does it.

use std::fmt;

use serde_json::{Map, Value};

use super::checks::{Violation, checks_for};

/// The newest policy version this server knows: "latest" evaluates as this one.
pub const LATEST_MINOR: u32 = 36;

pub const ENFORCE_LEVEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION: &str = "pod-security.kubernetes.io/warn-version";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "privileged" => Some(Level::Privileged),
            "baseline" => Some(Level::Baseline),
            "restricted" => Some(Level::Restricted),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A policy version: `latest`, or `v1.MINOR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    Minor(u32),
}

impl Version {
    pub fn parse(s: &str) -> Option<Version> {
        if s == "latest" {
            return Some(Version::Latest);
        }
        let minor = s.strip_prefix("v1.")?;
        // Digits only, without a leading zero (v1.05 is not a version).
        if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) || (minor.len() > 1 && minor.starts_with('0'))
        {
            return None;
        }
        minor.parse().ok().map(Version::Minor)
    }
    /// The minor version whose checks apply; versions past the newest known act as it.
    pub fn effective_minor(self) -> u32 {
        match self {
            Version::Latest => LATEST_MINOR,
            Version::Minor(m) => m.min(LATEST_MINOR),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::Minor(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

impl LevelVersion {
    pub const PRIVILEGED: LevelVersion = LevelVersion { level: Level::Privileged, version: Version::Latest };

    /// The violations of the checks this level and version run, in report order.
    pub fn evaluate(&self, meta: &Value, spec: &Value) -> Vec<Violation> {
        checks_for(self.level, self.version.effective_minor()).into_iter().filter_map(|(_, f)| f(meta, spec)).collect()
    }
}

/// "reason (detail), reason": upstream's ForbiddenDetail of a pod's violations.
pub fn detail(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| if v.detail.is_empty() { v.reason.clone() } else { format!("{} ({})", v.reason, v.detail) })
        .collect::<Vec<_>>()
        .join(", ")
}

/// "reason, reason": upstream's ForbiddenReason, used for namespace-wide warnings.
pub fn reasons(violations: &[Violation]) -> String {
    violations.iter().map(|v| v.reason.as_str()).collect::<Vec<_>>().join(", ")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { enforce: LevelVersion::PRIVILEGED, audit: LevelVersion::PRIVILEGED, warn: LevelVersion::PRIVILEGED }
    }
}

/// A label whose value is not valid: (label key, value, why).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelError {
    pub label: &'static str,
    pub value: String,
    pub detail: &'static str,
}

impl Policy {
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn].iter().all(|lv| lv.level == Level::Privileged)
    }

    /// The namespace's policy from its labels, over `defaults`. An invalid level counts
    /// as restricted and an invalid version as latest (failing closed), and is reported.
    pub fn from_labels(labels: Option<&Map<String, Value>>, defaults: &Policy) -> (Policy, Vec<LabelError>) {
        let empty = Map::new();
        let labels = labels.unwrap_or(&empty);
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        let mut errors = Vec::new();
        let mut mode = |level_key: &'static str, version_key: &'static str, default: LevelVersion| {
            let level = match get(level_key) {
                None => default.level,
                Some(v) => Level::parse(v).unwrap_or_else(|| {
                    errors.push(LabelError {
                        label: level_key,
                        value: v.to_string(),
                        detail: "must be one of privileged, baseline, restricted",
                    });
                    Level::Restricted
                }),
            };
            let version = match get(version_key) {
                None => default.version,
                Some(v) => Version::parse(v).unwrap_or_else(|| {
                    errors.push(LabelError {
                        label: version_key,
                        value: v.to_string(),
                        detail: "must be 'latest' or 'v1.x'",
                    });
                    Version::Latest
                }),
            };
            LevelVersion { level, version }
        };
        let enforce = mode(ENFORCE_LEVEL, ENFORCE_VERSION, defaults.enforce);
        let audit = mode(AUDIT_LEVEL, AUDIT_VERSION, defaults.audit);
        let mut warn = mode(WARN_LEVEL, WARN_VERSION, defaults.warn);
        // As upstream: with no warn label, warn at least at the enforce level, so a
        // workload that its pods could never satisfy is flagged when it is written.
        let enforce_labelled = get(ENFORCE_LEVEL).is_some_and(|v| Level::parse(v).is_some());
        if enforce_labelled && get(WARN_LEVEL).is_none() && enforce.level > warn.level {
            warn.level = enforce.level;
            if get(WARN_VERSION).is_none() {
                warn.version = enforce.version;
            }
        }
        (Policy { enforce, audit, warn }, errors)
    }

    /// "enforce=restricted:latest, warn=baseline:v1.25": the modes that are not
    /// privileged, as upstream's CompactString.
    pub fn compact(&self) -> String {
        let modes: Vec<String> = [("enforce", self.enforce), ("audit", self.audit), ("warn", self.warn)]
            .iter()
            .filter(|(_, lv)| lv.level != Level::Privileged)
            .map(|(m, lv)| format!("{m}={lv}"))
            .collect();
        if modes.is_empty() { "privileged".to_string() } else { modes.join(", ") }
    }
}
