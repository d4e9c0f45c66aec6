//! An EncryptionConfiguration turned into transformers: one prefix chain per
//! configured group-resource, and the KMS providers (for health checks).

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine;

use crate::ConfigError;
use crate::aes::{Cbc, Gcm};
use crate::config::{EncryptionConfiguration, GroupResource, KeysConfiguration, ProviderConfiguration};
use crate::kms::{KmsClient, KmsOptions, KmsV2};
use crate::secretbox::Secretbox;
use crate::transformer::{Identity, PrefixChain, Prefixed, Transformer};

pub struct Providers {
    by_resource: HashMap<GroupResource, Arc<PrefixChain>>,
    kms: Vec<Arc<KmsV2>>,
}

impl Providers {
    /// Builds every provider. No I/O: KMS clients connect on first use.
    pub fn build(config: &EncryptionConfiguration, kms_opts: &KmsOptions) -> Result<Self, ConfigError> {
        let mut chains: HashMap<GroupResource, Vec<Prefixed>> = HashMap::new();
        let mut kms = Vec::new();
        for conf in &config.resources {
            let mut entries = Vec::new();
            for provider in &conf.providers {
                let (entry, k) = build_provider(provider, kms_opts)?;
                entries.push(entry);
                kms.extend(k);
            }
            for res in &conf.resources {
                let list = chains.entry(GroupResource::parse(res)).or_default();
                list.extend(
                    entries.iter().map(|e| Prefixed { prefix: e.prefix.clone(), transformer: e.transformer.clone() }),
                );
            }
        }
        let by_resource = chains.into_iter().map(|(gr, e)| (gr, Arc::new(PrefixChain::for_resource(e)))).collect();
        Ok(Providers { by_resource, kms })
    }

    /// Starts the KMS providers' Status polling.
    pub fn start(&self) {
        self.kms.iter().for_each(KmsV2::start_polling);
    }

    /// The chain of a resource: its own rule, else its group's ("*.apps", "*." for
    /// core), else "*.*"; None: not encrypted.
    pub fn for_resource(&self, gr: &GroupResource) -> Option<&Arc<PrefixChain>> {
        self.by_resource
            .get(gr)
            .or_else(|| self.by_resource.get(&GroupResource::new(&gr.group, "*")))
            .or_else(|| self.by_resource.get(&GroupResource::new("*", "*")))
    }

    pub fn kms(&self) -> &[Arc<KmsV2>] {
        &self.kms
    }
}

fn build_provider(
    p: &ProviderConfiguration,
    kms_opts: &KmsOptions,
) -> Result<(Prefixed, Option<Arc<KmsV2>>), ConfigError> {
    let entry = |prefix: &str, t: Arc<dyn Transformer>| Prefixed { prefix: prefix.as_bytes().to_vec(), transformer: t };
    if let Some(keys) = &p.aescbc {
        let chain = keyed(keys, "no matching key was found for the provided AES transformer", |name, k| {
            Cbc::new(name, k).map(|t| Arc::new(t) as Arc<dyn Transformer>)
        })?;
        return Ok((entry("k8s:enc:aescbc:v1:", chain), None));
    }
    if let Some(keys) = &p.aesgcm {
        let chain = keyed(keys, "no matching key was found for the provided AES transformer", |name, k| {
            Gcm::new(format!("aesgcm key {name}"), k).map(|t| Arc::new(t) as Arc<dyn Transformer>)
        })?;
        return Ok((entry("k8s:enc:aesgcm:v1:", chain), None));
    }
    if let Some(keys) = &p.secretbox {
        let chain = keyed(keys, "no matching key was found for the provided Secretbox transformer", |name, k| {
            Secretbox::new(name, k).map(|t| Arc::new(t) as Arc<dyn Transformer>)
        })?;
        return Ok((entry("k8s:enc:secretbox:v1:", chain), None));
    }
    if let Some(c) = &p.kms {
        let timeout = c.timeout().map_err(ConfigError::Provider)?;
        let socket =
            c.socket_path().ok_or_else(|| ConfigError::Provider(format!("invalid endpoint {:?}", c.endpoint)))?;
        let kms = KmsV2::new(&c.name, KmsClient::new(&c.name, socket, timeout), kms_opts.clone());
        return Ok((entry(&format!("k8s:enc:kms:v2:{}:", c.name), kms.clone()), Some(kms)));
    }
    if p.identity.is_some() {
        return Ok((entry("", Arc::new(Identity)), None));
    }
    Err(ConfigError::Provider(
        "provider does not contain any of the expected providers: KMS, AESGCM, AESCBC, Secretbox, Identity".into(),
    ))
}

/// One transformer per named key, chosen by the "NAME:" prefix; the first writes.
fn keyed(
    keys: &KeysConfiguration,
    no_match: &'static str,
    make: impl Fn(&str, &[u8]) -> Result<Arc<dyn Transformer>, String>,
) -> Result<Arc<dyn Transformer>, ConfigError> {
    let mut entries = Vec::new();
    for key in &keys.keys {
        let secret = base64::engine::general_purpose::STANDARD
            .decode(&key.secret)
            .map_err(|e| ConfigError::Provider(format!("could not obtain secret for named key {}: {e}", key.name)))?;
        let t = make(&key.name, &secret).map_err(|e| {
            ConfigError::Provider(format!("error while creating cipher for named key {}: {e}", key.name))
        })?;
        entries.push(Prefixed { prefix: format!("{}:", key.name).into_bytes(), transformer: t });
    }
    Ok(Arc::new(PrefixChain::new(entries, no_match)))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn b64(len: usize, fill: u8) -> String {
        base64::engine::general_purpose::STANDARD.encode(vec![fill; len])
    }

    fn providers(yaml: &str) -> Providers {
        Providers::build(&EncryptionConfiguration::parse(yaml.as_bytes()).unwrap(), &KmsOptions::default()).unwrap()
    }

    #[tokio::test]
    async fn exact_prefixes_per_provider_and_key() {
        for (kind, len) in [("aescbc", 32), ("aesgcm", 16), ("secretbox", 32)] {
            let p = providers(&format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - {kind}: {{keys: [{{name: key1, secret: \"{}\"}}, {{name: key2, secret: \"{}\"}}]}}\n  - identity: {{}}\n",
                b64(len, 1),
                b64(len, 2)
            ));
            let chain = p.for_resource(&GroupResource::new("", "secrets")).unwrap();
            let stored = chain
                .transform_to_storage(Bytes::from_static(b"{\"data\":\"x\"}"), b"/registry/secrets/a/b")
                .await
                .unwrap();
            let prefix = format!("k8s:enc:{kind}:v1:key1:");
            assert!(stored.starts_with(prefix.as_bytes()), "{kind}: {:?}", &stored[..prefix.len()]);
            let (plain, stale) = chain.transform_from_storage(stored, b"/registry/secrets/a/b").await.unwrap();
            assert_eq!((&plain[..], stale), (&b"{\"data\":\"x\"}"[..], false));
            // Plain data is still readable through identity, and stale.
            let (plain, stale) = chain.transform_from_storage(Bytes::from_static(b"{}"), b"/k").await.unwrap();
            assert_eq!((&plain[..], stale), (&b"{}"[..], true));
        }
    }

    #[tokio::test]
    async fn second_key_reads_and_is_stale_unknown_key_fails() {
        let old = providers(&format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {{keys: [{{name: old, secret: \"{}\"}}]}}\n",
            b64(32, 1)
        ));
        let rotated = providers(&format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {{keys: [{{name: new, secret: \"{}\"}}, {{name: old, secret: \"{}\"}}]}}\n",
            b64(32, 2),
            b64(32, 1)
        ));
        let gr = GroupResource::new("", "secrets");
        let stored = old.for_resource(&gr).unwrap().transform_to_storage(Bytes::from_static(b"v"), b"").await.unwrap();
        let (plain, stale) =
            rotated.for_resource(&gr).unwrap().transform_from_storage(stored.clone(), b"").await.unwrap();
        assert_eq!((&plain[..], stale), (&b"v"[..], true));
        let only_new = providers(&format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc: {{keys: [{{name: new, secret: \"{}\"}}]}}\n",
            b64(32, 2)
        ));
        let err = only_new.for_resource(&gr).unwrap().transform_from_storage(stored, b"").await.unwrap_err();
        assert_eq!(err.to_string(), "no matching key was found for the provided AES transformer");
        // Plain data with no identity listed: refused.
        let err = only_new
            .for_resource(&gr)
            .unwrap()
            .transform_from_storage(Bytes::from_static(b"{}"), b"")
            .await
            .unwrap_err();
        assert_eq!(err.to_string(), "no matching prefix found");
    }

    #[test]
    fn wildcards_resolve_in_upstream_order() {
        let p = providers(&format!(
            "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{{aescbc: {{keys: [{{name: a, secret: \"{k}\"}}]}}}}]\n- resources: [\"*.apps\", widgets.example.com]\n  providers: [{{identity: {{}}}}]\n- resources: [\"*.*\"]\n  providers: [{{secretbox: {{keys: [{{name: s, secret: \"{k}\"}}]}}}}]\n",
            k = b64(32, 1)
        ));
        let secrets = p.for_resource(&GroupResource::new("", "secrets")).unwrap();
        let apps = p.for_resource(&GroupResource::new("apps", "deployments")).unwrap();
        let widgets = p.for_resource(&GroupResource::new("example.com", "widgets")).unwrap();
        let other = p.for_resource(&GroupResource::new("", "configmaps")).unwrap();
        assert!(!Arc::ptr_eq(secrets, apps));
        assert!(Arc::ptr_eq(p.for_resource(&GroupResource::new("apps", "statefulsets")).unwrap(), apps));
        assert!(!Arc::ptr_eq(widgets, apps));
        assert!(Arc::ptr_eq(other, p.for_resource(&GroupResource::new("batch", "jobs")).unwrap()));
    }
}
