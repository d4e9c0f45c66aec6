//! `--admission-control-config-file`: upstream's AdmissionConfiguration
//! (apiserver.config.k8s.io/v1), naming each plugin's own configuration either inline
//! (`configuration`) or in a file (`path`, relative to the configuration file).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("decoding {path}: {message}")]
    Decode { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

const API_VERSIONS: &[&str] =
    &["apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1", "apiserver.k8s.io/v1alpha1"];

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AdmissionConfiguration {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    plugins: Vec<PluginEntry>,
}

#[derive(Deserialize)]
struct PluginEntry {
    name: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    configuration: Option<Value>,
}

/// Each plugin's configuration object, by plugin name.
#[derive(Clone, Debug, Default)]
pub struct AdmissionConfig {
    plugins: BTreeMap<String, Value>,
}

fn decode(path: &Path, text: &str) -> Result<Value, ConfigError> {
    // YAML is a superset of JSON: one decoder reads both.
    serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Decode { path: path.to_path_buf(), message: e.to_string() })
}

impl AdmissionConfig {
    pub async fn load(path: &Path) -> Result<AdmissionConfig, ConfigError> {
        let read = |p: PathBuf| async move {
            tokio::fs::read_to_string(&p).await.map_err(|source| ConfigError::Read { path: p.clone(), source })
        };
        let doc = decode(path, &read(path.to_path_buf()).await?)?;
        let invalid = |message: String| ConfigError::Invalid { path: path.to_path_buf(), message };
        let parsed: AdmissionConfiguration = serde_json::from_value(doc).map_err(|e| invalid(e.to_string()))?;
        if parsed.kind != "AdmissionConfiguration" || !API_VERSIONS.contains(&parsed.api_version.as_str()) {
            return Err(invalid(format!(
                "expected kind AdmissionConfiguration of apiserver.config.k8s.io/v1, got {} of {}",
                parsed.kind, parsed.api_version
            )));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut plugins = BTreeMap::new();
        for p in parsed.plugins {
            let config = match (p.configuration, p.path) {
                (Some(c), _) => c,
                (None, Some(file)) => {
                    let file = base.join(file);
                    let text = read(file.clone()).await?;
                    decode(&file, &text)?
                }
                (None, None) => continue,
            };
            plugins.insert(p.name, config);
        }
        Ok(AdmissionConfig { plugins })
    }

    pub fn from_plugins(plugins: impl IntoIterator<Item = (String, Value)>) -> AdmissionConfig {
        AdmissionConfig { plugins: plugins.into_iter().collect() }
    }

    /// The configuration object given for `plugin`, if any.
    pub fn plugin(&self, plugin: &str) -> Option<&Value> {
        self.plugins.get(plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_inline_and_path_configurations() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("psa.yaml"), "kind: PodSecurityConfiguration\ndefaults:\n  enforce: baseline\n")
            .unwrap();
        let main = dir.path().join("admission.yaml");
        std::fs::write(
            &main,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n\
             - name: PodSecurity\n  path: psa.yaml\n\
             - name: Other\n  configuration:\n    a: 1\n",
        )
        .unwrap();
        let c = AdmissionConfig::load(&main).await.unwrap();
        assert_eq!(c.plugin("PodSecurity").unwrap()["defaults"]["enforce"], "baseline");
        assert_eq!(c.plugin("Other").unwrap()["a"], 1);
        assert!(c.plugin("Missing").is_none());
    }

    #[tokio::test]
    async fn refuses_other_kinds_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("admission.yaml");
        std::fs::write(&main, "apiVersion: v1\nkind: ConfigMap\n").unwrap();
        assert!(matches!(AdmissionConfig::load(&main).await, Err(ConfigError::Invalid { .. })));
        assert!(matches!(AdmissionConfig::load(&dir.path().join("nope")).await, Err(ConfigError::Read { .. })));
        std::fs::write(
            &main,
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: X\n  path: gone.yaml\n",
        )
        .unwrap();
        assert!(matches!(AdmissionConfig::load(&main).await, Err(ConfigError::Read { .. })));
    }
}
