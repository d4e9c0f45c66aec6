//! A projected volume's files, from each of its sources in order (upstream's
//! collectData): config map and secret keys, downward API items and service-account
//! tokens; errors of all sources are gathered into one message. Cluster trust bundles
//! and pod certificates are not served by this node and say so.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};

use super::atomic_writer::{FileProjection, Payload};
use super::payload::{self, DEFAULT_MODE};
use super::token::{DEFAULT_EXPIRATION_SECONDS, TokenManager};
use crate::runtime::objects::{ObjectCache, not_found};

/// The config maps and secrets the projected sources name (to fetch beforehand).
pub fn referenced_objects(source: &ProjectedVolumeSource) -> (Vec<String>, Vec<String>) {
    let sources = source.sources.iter().flatten();
    let config_maps = sources.clone().filter_map(|s| s.config_map.as_ref().map(|c| c.name.clone())).collect();
    let secrets = sources.filter_map(|s| s.secret.as_ref().map(|c| c.name.clone())).collect();
    (config_maps, secrets)
}

pub async fn collect(
    pod: &Pod,
    source: &ProjectedVolumeSource,
    objects: &ObjectCache,
    tokens: &TokenManager,
    allocatable: &BTreeMap<String, String>,
) -> Result<Payload, String> {
    let default_mode = source.default_mode.unwrap_or(DEFAULT_MODE);
    let mut out = Payload::new();
    let mut errors = Vec::new();
    for s in source.sources.iter().flatten() {
        let part = if let Some(c) = &s.config_map {
            let optional = c.optional == Some(true);
            match objects.config_map(&c.name) {
                Ok(None) if !optional => Err(not_found("configmap", &c.name)),
                Ok(found) => payload::config_map(found, c.items.as_deref(), default_mode, optional),
                Err(e) => Err(e),
            }
        } else if let Some(c) = &s.secret {
            let optional = c.optional == Some(true);
            match objects.secret(&c.name) {
                Ok(None) if !optional => Err(not_found("secret", &c.name)),
                Ok(found) => payload::secret(found, c.items.as_deref(), default_mode, optional),
                Err(e) => Err(e),
            }
        } else if let Some(d) = &s.downward_api {
            payload::downward_api(pod, d.items.as_deref().unwrap_or_default(), default_mode, allocatable)
        } else if let Some(t) = &s.service_account_token {
            let expiration = t.expiration_seconds.unwrap_or(DEFAULT_EXPIRATION_SECONDS);
            match tokens.token(pod, t.audience.as_deref(), expiration).await {
                Ok(token) => Ok(Payload::from([(
                    t.path.clone(),
                    FileProjection { data: token.into_bytes(), mode: (default_mode as u32) & 0o7777 },
                )])),
                Err(e) => Err(e),
            }
        } else if s.cluster_trust_bundle.is_some() {
            Err("clusterTrustBundle projections are not supported by this node".to_string())
        } else if s.pod_certificate.is_some() {
            Err("podCertificate projections are not supported by this node".to_string())
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(files) => out.extend(files),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() { Ok(out) } else { Err(payload::aggregate(errors)) }
}
