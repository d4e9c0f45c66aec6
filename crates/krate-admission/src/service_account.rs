//! ServiceAccount admission, as upstream's plugin: a pod runs as a service account that
//! exists ("default" unless named), and gets that account's token, the cluster CA and
//! its namespace through the projected `kube-api-access-*` volume mounted in every
//! container, unless automounting is turned off on the pod or the account. Mirror pods
//! (static pods the kubelet reports) may reference no account, secret or token.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use serde_json::{Value, json};

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::Scope;
use krate_api::{ApiError, ApiResult, Registry, Target, object};

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
pub const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
/// Upstream's bound-token lifetime for the projected volume: an hour and 7 seconds, the
/// 7 seconds marking tokens whose use past an hour is only warned about.
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
/// The default service account is made by a controller right after its namespace;
/// upstream waits for it a little (10 lookups) before refusing a pod.
const DEFAULT_ACCOUNT_ATTEMPTS: usize = 10;

pub struct ServiceAccount {
    registry: Weak<Registry>,
}

fn forbidden(attrs: &Attributes<'_>, pod: &Value, why: &str) -> ApiError {
    let name = if attrs.name.is_empty() { object::meta_str(pod, "generateName").unwrap_or("") } else { attrs.name };
    ApiError::forbidden_on(&Target::new("", "pods", "Pod", name), why)
}

fn is_mirror_pod(pod: &Value) -> bool {
    pod.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_some()
}

/// Whether any container or volume of the pod names a Secret (env, envFrom, volumes,
/// projections, image pull secrets), as upstream's VisitPodSecretNames walks them.
fn references_secrets(pod: &Value) -> bool {
    let spec = &pod["spec"];
    if spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
        return true;
    }
    let containers = ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(|f| spec.get(f).and_then(Value::as_array).into_iter().flatten());
    for c in containers {
        let env = c.get("env").and_then(Value::as_array).into_iter().flatten();
        if env.clone().any(|e| e.pointer("/valueFrom/secretKeyRef").is_some()) {
            return true;
        }
        let env_from = c.get("envFrom").and_then(Value::as_array).into_iter().flatten();
        if env_from.clone().any(|e| e.get("secretRef").is_some()) {
            return true;
        }
    }
    let volumes = spec.get("volumes").and_then(Value::as_array).into_iter().flatten();
    volumes.clone().any(|v| {
        v.get("secret").is_some()
            || v.pointer("/projected/sources")
                .and_then(Value::as_array)
                .is_some_and(|s| s.iter().any(|p| p.get("secret").is_some()))
            || ["azureFile", "cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos", "csi"]
                .iter()
                .any(|k| v.get(*k).is_some_and(|s| s.get("secretRef").is_some() || s.get("secretName").is_some()))
    })
}

fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            // Set explicitly, as upstream does, so the stored pod says what the kubelet uses.
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
            ]
        }
    })
}

/// Adds the token volume and mounts it in every container that has nothing mounted at
/// the token path yet; a pod that already has a `kube-api-access-*` volume keeps it.
pub fn mount_token(pod: &mut Value) {
    let spec = &mut pod["spec"];
    let existing = spec
        .get("volumes")
        .and_then(Value::as_array)
        .and_then(|vs| {
            vs.iter().filter_map(|v| v.get("name").and_then(Value::as_str)).find(|n| n.starts_with(TOKEN_VOLUME_PREFIX))
        })
        .map(String::from);
    let name = existing.clone().unwrap_or_else(|| format!("{TOKEN_VOLUME_PREFIX}{}", object::generate_suffix()));
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needs_volume = false;
    for field in ["initContainers", "containers"] {
        let Some(containers) = spec.get_mut(field).and_then(Value::as_array_mut) else { continue };
        for c in containers {
            let mounted = c.get("volumeMounts").and_then(Value::as_array).is_some_and(|ms| {
                ms.iter().any(|m| m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH))
            });
            if mounted {
                continue;
            }
            let mounts = c.as_object_mut().map(|c| c.entry("volumeMounts").or_insert_with(|| json!([])));
            if let Some(Value::Array(ms)) = mounts {
                ms.push(mount.clone());
                needs_volume = true;
            }
        }
    }
    if existing.is_none() && needs_volume {
        let volumes = spec.as_object_mut().map(|s| s.entry("volumes").or_insert_with(|| json!([])));
        if let Some(Value::Array(vs)) = volumes {
            vs.push(token_volume(&name));
        }
    }
}

fn should_automount(account: &Value, pod: &Value) -> bool {
    if let Some(b) = pod.pointer("/spec/automountServiceAccountToken").and_then(Value::as_bool) {
        return b;
    }
    account.get("automountServiceAccountToken").and_then(Value::as_bool).unwrap_or(true)
}

impl ServiceAccount {
    pub fn new(registry: &Arc<Registry>) -> Self {
        ServiceAccount { registry: Arc::downgrade(registry) }
    }

    async fn account(&self, attrs: &Attributes<'_>, pod: &Value, ns: &str, name: &str) -> ApiResult<Value> {
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource = registry.table.lookup("", "v1", "serviceaccounts").expect("serviceaccounts are built in");
        let scope = Scope { resource, namespace: Some(ns.to_string()) };
        let attempts = if name == DEFAULT_SERVICE_ACCOUNT { DEFAULT_ACCOUNT_ATTEMPTS } else { 1 };
        let pause = Duration::from_millis(rand::rng().random_range(100..200));
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(pause).await;
            }
            let found = if attempt == 0 {
                registry.get_cached_or_live(&scope, name).await
            } else {
                registry.get(&scope, name).await
            };
            match found {
                Ok(sa) => return Ok(sa),
                Err(e) if e.code == 404 => continue,
                Err(e) => {
                    return Err(forbidden(
                        attrs,
                        pod,
                        &format!("error looking up service account {ns}/{name}: {}", e.message),
                    ));
                }
            }
        }
        Err(forbidden(
            attrs,
            pod,
            &format!("error looking up service account {ns}/{name}: serviceaccount \"{name}\" not found"),
        ))
    }
}

fn applies(attrs: &Attributes<'_>) -> bool {
    let r = attrs.resource;
    r.group.is_empty() && r.plural == "pods" && attrs.subresource.is_none() && attrs.operation == Operation::Create
}

#[async_trait]
impl Admission for ServiceAccount {
    async fn mutate(&self, attrs: &Attributes<'_>, pod: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        let (true, Some(ns)) = (applies(attrs), attrs.namespace) else { return Ok(()) };
        // A mirror pod's spec must stay as the kubelet wrote it; validation refuses references.
        if is_mirror_pod(pod) {
            return Ok(());
        }
        let spec = pod.as_object_mut().map(|p| p.entry("spec").or_insert_with(|| json!({})));
        let Some(Value::Object(spec)) = spec else { return Ok(()) };
        let named = spec.get("serviceAccountName").and_then(Value::as_str).filter(|s| !s.is_empty());
        let name = named.unwrap_or(DEFAULT_SERVICE_ACCOUNT).to_string();
        spec.insert("serviceAccountName".into(), json!(name));
        let account = self.account(attrs, pod, ns, &name).await?;
        if should_automount(&account, pod) {
            mount_token(pod);
        }
        let pull = pod.pointer("/spec/imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if let (false, Some(secrets)) =
            (pull, account.get("imagePullSecrets").filter(|s| s.as_array().is_some_and(|a| !a.is_empty())))
        {
            pod["spec"]["imagePullSecrets"] = secrets.clone();
        }
        Ok(())
    }

    async fn validate(&self, attrs: &Attributes<'_>, pod: Option<&Value>, _old: Option<&Value>) -> ApiResult<()> {
        let (true, Some(ns), Some(pod)) = (applies(attrs), attrs.namespace, pod) else { return Ok(()) };
        if is_mirror_pod(pod) {
            if pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
                return Err(forbidden(attrs, pod, "a mirror pod may not reference service accounts"));
            }
            if references_secrets(pod) {
                return Err(forbidden(attrs, pod, "a mirror pod may not reference secrets"));
            }
            let projects_token = pod.pointer("/spec/volumes").and_then(Value::as_array).is_some_and(|vs| {
                vs.iter().any(|v| {
                    v.pointer("/projected/sources")
                        .and_then(Value::as_array)
                        .is_some_and(|s| s.iter().any(|p| p.get("serviceAccountToken").is_some()))
                })
            });
            if projects_token {
                return Err(forbidden(attrs, pod, "a mirror pod may not use ServiceAccountToken volume projections"));
            }
            return Ok(());
        }
        let name = pod.pointer("/spec/serviceAccountName").and_then(Value::as_str).unwrap_or(DEFAULT_SERVICE_ACCOUNT);
        self.account(attrs, pod, ns, name).await.map(|_| ())
    }
}
