//! `apiserver.config.k8s.io/v1` EncryptionConfiguration: parsing and upstream's
//! validation rules (validation_encryption.go), with its messages.

use std::collections::HashSet;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;

use crate::ConfigError;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub resources: Vec<ResourceConfiguration>,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ResourceConfiguration {
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub providers: Vec<ProviderConfiguration>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct ProviderConfiguration {
    pub aesgcm: Option<KeysConfiguration>,
    pub aescbc: Option<KeysConfiguration>,
    pub secretbox: Option<KeysConfiguration>,
    pub identity: Option<serde_yaml_ng::Value>,
    pub kms: Option<KmsConfiguration>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct KeysConfiguration {
    #[serde(default)]
    pub keys: Vec<Key>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Key {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub secret: String,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KmsConfiguration {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub endpoint: String,
    pub cachesize: Option<i32>,
    /// A Go duration ("3s"); 3s when absent.
    pub timeout: Option<String>,
}

impl KmsConfiguration {
    /// The configured timeout, defaulted as upstream (3s).
    pub fn timeout(&self) -> Result<Duration, String> {
        self.timeout.as_deref().map(parse_duration).unwrap_or(Ok(Duration::from_secs(3)))
    }

    /// The socket path of a `unix://` endpoint.
    pub fn socket_path(&self) -> Option<&str> {
        self.endpoint.strip_prefix("unix://").map(|p| p.trim_start_matches("//"))
    }
}

/// A group and resource as written in the configuration ("secrets", "*.apps",
/// "widgets.example.com", "*.", "*.*"); the core group is "".
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct GroupResource {
    pub group: String,
    pub resource: String,
}

impl GroupResource {
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource { group: group.into(), resource: resource.into() }
    }

    /// Like schema.ParseGroupResource: the resource is before the first '.'.
    pub fn parse(s: &str) -> Self {
        match s.split_once('.') {
            Some((resource, group)) => GroupResource::new(group, resource),
            None => GroupResource::new("", s),
        }
    }

    /// How upstream's messages spell it: "*." for every core resource, "*.*", else
    /// "resource.group" or the bare core resource.
    pub fn display(&self) -> String {
        match (self.group.as_str(), self.resource.as_str()) {
            ("", "*") => "*.".into(),
            ("", r) => r.into(),
            (g, r) => format!("{r}.{g}"),
        }
    }
}

impl EncryptionConfiguration {
    pub fn parse(data: &[u8]) -> Result<Self, ConfigError> {
        let config: EncryptionConfiguration =
            serde_yaml_ng::from_slice(data).map_err(|e| ConfigError::Parse(e.to_string()))?;
        match (config.api_version.as_str(), config.kind.as_str()) {
            ("apiserver.config.k8s.io/v1", "EncryptionConfiguration") => {}
            (v, k) => {
                return Err(ConfigError::Parse(format!(
                    "no kind {k:?} is registered for version {v:?}: expected apiserver.config.k8s.io/v1 EncryptionConfiguration"
                )));
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Upstream's validation. KMS provider names are unique across the file (upstream
    /// requires it of every v2 provider, and krate has only v2).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut errs = Vec::new();
        if self.resources.is_empty() {
            errs.push("resources: Required value: at least one resources is required".to_string());
            return Err(ConfigError::Invalid(errs));
        }
        let mut kms_names = HashSet::new();
        for (i, conf) in self.resources.iter().enumerate() {
            let r = format!("resources[{i}].resources");
            let p = format!("resources[{i}].providers");
            if conf.resources.is_empty() {
                errs.push(format!("{r}: Required value: at least one {r} is required"));
            }
            validate_overlap(&conf.resources, &r, &mut errs);
            validate_names(&conf.resources, &r, &mut errs);
            if conf.providers.is_empty() {
                errs.push(format!("{p}: Required value: at least one {p} is required"));
            }
            for (j, provider) in conf.providers.iter().enumerate() {
                let path = format!("{p}[{j}]");
                let found = [
                    provider.kms.is_some(),
                    provider.aesgcm.is_some(),
                    provider.aescbc.is_some(),
                    provider.secretbox.is_some(),
                    provider.identity.is_some(),
                ]
                .iter()
                .filter(|b| **b)
                .count();
                if found == 0 {
                    errs.push(format!("{path}: Invalid value: provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity"));
                    continue;
                }
                if found > 1 {
                    errs.push(format!("{path}: Invalid value: more than one provider specified in a single element, should split into different list elements"));
                    continue;
                }
                if let Some(kms) = &provider.kms {
                    validate_kms(kms, &format!("{path}.kms"), &kms_names, &mut errs);
                    kms_names.insert(kms.name.clone());
                }
                let aes_sizes: &[usize] = &[16, 24, 32];
                if let Some(c) = &provider.aesgcm {
                    validate_keys(&c.keys, &format!("{path}.aesgcm.keys"), aes_sizes, &mut errs);
                }
                if let Some(c) = &provider.aescbc {
                    validate_keys(&c.keys, &format!("{path}.aescbc.keys"), aes_sizes, &mut errs);
                }
                if let Some(c) = &provider.secretbox {
                    validate_keys(&c.keys, &format!("{path}.secretbox.keys"), &[32], &mut errs);
                }
            }
        }
        validate_masking(self, &mut errs);
        if errs.is_empty() { Ok(()) } else { Err(ConfigError::Invalid(errs)) }
    }
}

fn validate_overlap(resources: &[String], path: &str, errs: &mut Vec<String>) {
    if resources.len() < 2 {
        return;
    }
    let grs: Vec<GroupResource> = resources.iter().map(|r| GroupResource::parse(r)).collect();
    let (mut duplicate, mut overlap) = (false, false);
    for (i, a) in grs.iter().enumerate() {
        for (j, b) in grs.iter().enumerate() {
            if i == j {
                continue;
            }
            if a == b {
                duplicate = true;
                continue;
            }
            if (a.group == "*" && a.resource == "*") || (a.group == b.group && (a.resource == "*" || b.resource == "*"))
            {
                overlap = true;
            }
        }
    }
    let list = format!("{resources:?}");
    if duplicate {
        errs.push(format!("{path}: Invalid value: {list}: the same resource cannot be specified multiple times"));
    }
    if overlap {
        errs.push(format!("{path}: Invalid value: {list}: using overlapping resources such as 'secrets' and '*.' in the same resource list is not allowed as they will be masked"));
    }
}

fn validate_names(resources: &[String], path: &str, errs: &mut Vec<String>) {
    for (j, res) in resources.iter().enumerate() {
        let invalid = |msg: &str| format!("{path}[{j}]: Invalid value: {res:?}: {msg}");
        let gr = GroupResource::parse(res);
        let msg = if res.to_lowercase() != *res {
            "resource name should not contain capital letters"
        } else if res == "*" {
            "use '*.' to encrypt all the resources from core API group or *.* to encrypt all resources"
        } else if matches!(res.as_str(), "apiserveripinfo" | "serviceipallocations" | "servicenodeportallocations") {
            "resources which do not have REST API/s cannot be encrypted"
        } else if gr.group == "events.k8s.io" {
            "'*.events.k8s.io' objects are stored using the 'events' API group in etcd. Use 'events' instead in the config file"
        } else if gr.group == "extensions" {
            "'extensions' group has been removed and cannot be used for encryption"
        } else if gr.group == "*" && gr.resource != "*" {
            "encrypting the same resource across groups is not supported"
        } else {
            continue;
        };
        errs.push(invalid(msg));
    }
}

fn validate_keys(keys: &[Key], path: &str, sizes: &[usize], errs: &mut Vec<String>) {
    if keys.is_empty() {
        errs.push(format!("{path}: Required value: at least one keys is required"));
        return;
    }
    for (i, key) in keys.iter().enumerate() {
        let p = format!("{path}[{i}]");
        if key.name.is_empty() {
            errs.push(format!("{p}.name: Required value: name is a mandatory field for a key"));
        }
        if key.secret.is_empty() {
            errs.push(format!("{p}.secret: Required value: secret is a mandatory field for a key"));
            continue;
        }
        match base64::engine::general_purpose::STANDARD.decode(&key.secret) {
            Err(_) => errs.push(format!("{p}.secret: Invalid value: \"REDACTED\": secrets must be base64 encoded")),
            Ok(secret) if !sizes.contains(&secret.len()) => errs.push(format!(
                "{p}.secret: Invalid value: \"REDACTED\": secret is not of the expected length, got {}, expected one of {sizes:?}",
                secret.len()
            )),
            Ok(_) => {}
        }
    }
}

fn validate_kms(c: &KmsConfiguration, path: &str, names: &HashSet<String>, errs: &mut Vec<String>) {
    if c.name.is_empty() {
        errs.push(format!("{path}.name: Required value: name is a mandatory field for a provider"));
    }
    if c.name.contains(':') {
        errs.push(format!(
            "{path}.name: Invalid value: {:?}: invalid KMS provider name {}, must not contain ':'",
            c.name, c.name
        ));
    }
    if names.contains(&c.name) {
        errs.push(format!(
            "{path}.name: Invalid value: {:?}: duplicate KMS provider name {}, names must be unique",
            c.name, c.name
        ));
    }
    match c.timeout() {
        Ok(d) if d.is_zero() => errs.push(format!(
            "{path}.timeout: Invalid value: {:?}: timeout should be a positive value",
            c.timeout.as_deref().unwrap_or("")
        )),
        Ok(_) => {}
        Err(e) => errs.push(format!("{path}.timeout: Invalid value: {e}")),
    }
    if c.endpoint.is_empty() {
        errs.push(format!("{path}.endpoint: Invalid value: \"\": endpoint is a mandatory field for a kms"));
    } else if let Some((scheme, _)) = c.endpoint.split_once("://").filter(|(s, _)| *s != "unix") {
        errs.push(format!("{path}.endpoint: Invalid value: {:?}: unsupported scheme {scheme:?} for KMS provider, only unix is supported", c.endpoint));
    } else if c.socket_path().is_none_or(str::is_empty) {
        errs.push(format!(
            "{path}.endpoint: Invalid value: {:?}: unsupported scheme \"\" for KMS provider, only unix is supported",
            c.endpoint
        ));
    }
    if c.cachesize.is_some() && c.api_version == "v2" {
        errs.push(format!(
            "{path}.cachesize: Invalid value: {}: cachesize is not supported in v2",
            c.cachesize.unwrap_or(0)
        ));
    }
    match c.api_version.as_str() {
        "v2" => {}
        // Upstream's default; KMS v1 is deprecated and off by default since 1.29, and krate has none.
        "" | "v1" => errs.push(format!("{path}.apiVersion: Invalid value: {:?}: KMSv1 is deprecated and not supported, use apiVersion v2", c.api_version)),
        v => errs.push(format!("{path}.apiVersion: Invalid value: {v:?}: unsupported apiVersion apiVersion for KMS provider, only v1 and v2 are supported")),
    }
}

/// A rule listed after "*.group" or "*.*" would never apply: upstream refuses it.
fn validate_masking(config: &EncryptionConfiguration, errs: &mut Vec<String>) {
    let mut seen: HashSet<GroupResource> = HashSet::new();
    for conf in &config.resources {
        for res in &conf.resources {
            let gr = GroupResource::parse(res);
            for mask in [GroupResource::new(&gr.group, "*"), GroupResource::new("*", "*")] {
                if seen.contains(&mask) {
                    errs.push(format!("resource {:?} is masked by earlier rule {:?}", gr.display(), mask.display()));
                    break;
                }
            }
        }
        // Rules mask only later entries, not their own list (checked as overlap above).
        seen.extend(conf.resources.iter().map(|r| GroupResource::parse(r)));
    }
}

/// A Go duration: "3s", "1m30s", "500ms", "1h".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("time: invalid duration {s:?}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).ok_or_else(bad)?;
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<EncryptionConfiguration, ConfigError> {
        EncryptionConfiguration::parse(yaml.as_bytes())
    }

    fn key(len: usize) -> String {
        base64::engine::general_purpose::STANDARD.encode(vec![1u8; len])
    }

    #[test]
    fn parses_every_provider_kind() {
        let yaml = format!(
            r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets, configmaps]
    providers:
      - kms: {{apiVersion: v2, name: kms1, endpoint: "unix:///tmp/kms.sock", timeout: 2s}}
      - aescbc: {{keys: [{{name: key1, secret: "{k32}"}}]}}
      - aesgcm: {{keys: [{{name: g, secret: "{k16}"}}]}}
      - secretbox: {{keys: [{{name: s, secret: "{k32}"}}]}}
      - identity: {{}}
  - resources: ["*.apps", widgets.example.com]
    providers: [{{identity: {{}}}}]
  - resources: ["*.*"]
    providers: [{{identity: {{}}}}]
"#,
            k32 = key(32),
            k16 = key(16)
        );
        let c = parse(&yaml).unwrap();
        let kms = c.resources[0].providers[0].kms.as_ref().unwrap();
        assert_eq!(kms.socket_path(), Some("/tmp/kms.sock"));
        assert_eq!(kms.timeout().unwrap(), Duration::from_secs(2));
        assert_eq!(GroupResource::parse("widgets.example.com"), GroupResource::new("example.com", "widgets"));
        assert_eq!(GroupResource::parse("*."), GroupResource::new("", "*"));
    }

    fn invalid(yaml: &str) -> String {
        match parse(yaml) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted:\n{yaml}"),
        }
    }

    fn with(resources: &str, providers: &str) -> String {
        format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: {resources}\n    providers: {providers}\n"
        )
    }

    #[test]
    fn upstream_rules_refuse_bad_configs() {
        let id = "[{identity: {}}]";
        assert!(invalid(&with("[\"*\"]", id)).contains("use '*.' to encrypt all the resources"));
        assert!(invalid(&with("[Secrets]", id)).contains("should not contain capital letters"));
        assert!(invalid(&with("[secrets, \"*.\"]", id)).contains("overlapping resources"));
        assert!(invalid(&with("[secrets, secrets]", id)).contains("cannot be specified multiple times"));
        assert!(invalid(&with("[\"*.events.k8s.io\"]", id)).contains("Use 'events' instead"));
        assert!(invalid(&with("[deployments.extensions]", id)).contains("'extensions' group has been removed"));
        assert!(invalid(&with("[\"secrets.*\"]", id)).contains("across groups is not supported"));
        assert!(invalid(&with("[serviceipallocations]", id)).contains("do not have REST API/s"));
        assert!(invalid(&with("[]", id)).contains("resources[0].resources: Required value"));
        assert!(invalid(&with("[secrets]", "[]")).contains("at least one resources[0].providers is required"));
        assert!(invalid(&with("[secrets]", "[{}]")).contains("does not contain any of the expected providers"));
        let two = format!("[{{identity: {{}}, aescbc: {{keys: [{{name: k, secret: \"{}\"}}]}}}}]", key(32));
        assert!(invalid(&with("[secrets]", &two)).contains("more than one provider"));
        let short = format!("[{{aescbc: {{keys: [{{name: k, secret: \"{}\"}}]}}}}]", key(20));
        assert!(invalid(&with("[secrets]", &short)).contains("got 20, expected one of [16, 24, 32]"));
        assert!(invalid(&with("[secrets]", "[{aesgcm: {keys: [{name: k, secret: \"!!\"}]}}]")).contains("base64"));
        let sb = format!("[{{secretbox: {{keys: [{{name: k, secret: \"{}\"}}]}}}}]", key(16));
        assert!(invalid(&with("[secrets]", &sb)).contains("expected one of [32]"));
        assert!(invalid(&with("[secrets]", "[{aescbc: {keys: []}}]")).contains("at least one keys is required"));
    }

    #[test]
    fn kms_rules() {
        let kms = |body: &str| with("[secrets]", &format!("[{{kms: {{{body}}}}}]"));
        assert!(invalid(&kms("apiVersion: v2, name: a, endpoint: \"tcp://x\"")).contains("only unix is supported"));
        assert!(invalid(&kms("apiVersion: v2, endpoint: \"unix:///x\"")).contains("name is a mandatory field"));
        assert!(
            invalid(&kms("apiVersion: v2, name: \"a:b\", endpoint: \"unix:///x\"")).contains("must not contain ':'")
        );
        assert!(invalid(&kms("name: a, endpoint: \"unix:///x\"")).contains("KMSv1 is deprecated"));
        assert!(
            invalid(&kms("apiVersion: v2, name: a, endpoint: \"unix:///x\", cachesize: 10"))
                .contains("not supported in v2")
        );
        assert!(invalid(&kms("apiVersion: v2, name: a, endpoint: \"unix:///x\", timeout: 0s")).contains("positive"));
        let dup = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [secrets]\n    providers:\n      - kms: {apiVersion: v2, name: a, endpoint: \"unix:///x\"}\n      - kms: {apiVersion: v2, name: a, endpoint: \"unix:///y\"}\n";
        assert!(invalid(dup).contains("duplicate KMS provider name a, names must be unique"));
    }

    #[test]
    fn star_star_must_come_last() {
        let yaml = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [\"*.*\"]\n    providers: [{identity: {}}]\n  - resources: [secrets]\n    providers: [{identity: {}}]\n";
        assert_eq!(invalid(yaml), "resource \"secrets\" is masked by earlier rule \"*.*\"");
        let yaml = "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: [\"*.apps\"]\n    providers: [{identity: {}}]\n  - resources: [deployments.apps]\n    providers: [{identity: {}}]\n";
        assert_eq!(invalid(yaml), "resource \"deployments.apps\" is masked by earlier rule \"*.apps\"");
    }

    #[test]
    fn wrong_kind_or_version_is_refused() {
        assert!(matches!(parse("apiVersion: v1\nkind: ConfigMap\n"), Err(ConfigError::Parse(_))));
        assert!(matches!(parse("resources: ["), Err(ConfigError::Parse(_))));
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("3").is_err());
        assert!(parse_duration("x").is_err());
    }
}
