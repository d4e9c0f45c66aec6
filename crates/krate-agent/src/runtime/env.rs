//! A container's environment, command and args as the kubelet makes them
//! (makeEnvironmentVariables): envFrom config maps and secrets (with prefix), then env
//! values with `$(VAR)` expansion (`$$` escapes; unknown references stay), fieldRefs,
//! resourceFieldRefs and configMap/secret key refs (optional honoured), then the
//! service variables. Pure: the objects are fetched beforehand (`ObjectCache`).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::core::v1::{Container, Pod};

use super::downward_api;
use super::objects::{ObjectCache, not_found};

/// Expands `$(NAME)` references in `input` from `vars`, as upstream's expansion does:
/// `$$` is a literal `$`, an undefined or unterminated reference is left as written.
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
    expand_with(input, |name| vars.get(name).cloned())
}

/// `expand` with a lookup function: None leaves the reference as written.
pub fn expand_with(input: &str, lookup: impl Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut literal_from = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[literal_from..i]);
                    out.push('$');
                    i += 2;
                    literal_from = i;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        out.push_str(&input[literal_from..i]);
                        match lookup(name) {
                            Some(value) => out.push_str(&value),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        literal_from = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[literal_from..]);
    out
}

/// What a container's environment is made from besides the pod.
pub struct EnvContext<'a> {
    pub host_ip: &'a str,
    pub pod_ips: &'a [String],
    /// The node's allocatable, the default of limits a resourceFieldRef reads.
    pub allocatable: &'a BTreeMap<String, String>,
    /// The service variables for the pod (see `service_env`).
    pub service_env: &'a BTreeMap<String, String>,
    pub objects: &'a ObjectCache,
}

/// Why a container's environment cannot be made: the container waits with
/// CreateContainerConfigError and this message, as upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EnvError(pub String);

/// The config maps and secrets the container's env and envFrom name.
pub fn referenced_objects(container: &Container) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut config_maps, mut secrets) = (BTreeSet::new(), BTreeSet::new());
    for from in container.env_from.iter().flatten() {
        config_maps.extend(from.config_map_ref.as_ref().map(|r| r.name.clone()));
        secrets.extend(from.secret_ref.as_ref().map(|r| r.name.clone()));
    }
    for var in container.env.iter().flatten() {
        let source = var.value_from.as_ref();
        config_maps.extend(source.and_then(|s| s.config_map_key_ref.as_ref()).map(|r| r.name.clone()));
        secrets.extend(source.and_then(|s| s.secret_key_ref.as_ref()).map(|r| r.name.clone()));
    }
    (config_maps, secrets)
}

/// Variables in first-set order; setting one again keeps its place.
#[derive(Default)]
struct OrderedEnv {
    order: Vec<String>,
    values: HashMap<String, String>,
}

impl OrderedEnv {
    fn set(&mut self, name: String, value: String) {
        if self.values.insert(name.clone(), value).is_none() {
            self.order.push(name);
        }
    }
}

/// Upstream's string form of a secret value (Go's string([]byte)).
fn bytes_to_string(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The container's environment in order: envFrom, env, then the service variables
/// not set otherwise.
pub fn container_env(pod: &Pod, container: &Container, ctx: &EnvContext) -> Result<Vec<(String, String)>, EnvError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut env = OrderedEnv::default();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let optional = r.optional == Some(true);
            let Some(cm) = ctx.objects.config_map(&r.name).map_err(EnvError)? else {
                if optional {
                    continue;
                }
                return Err(EnvError(not_found("configmap", &r.name)));
            };
            for (k, v) in cm.data.iter().flatten() {
                env.set(format!("{prefix}{k}"), v.clone());
            }
        } else if let Some(r) = &from.secret_ref {
            let optional = r.optional == Some(true);
            let Some(secret) = ctx.objects.secret(&r.name).map_err(EnvError)? else {
                if optional {
                    continue;
                }
                return Err(EnvError(not_found("secret", &r.name)));
            };
            for (k, v) in secret.data.iter().flatten() {
                env.set(format!("{prefix}{k}"), bytes_to_string(&v.0));
            }
        }
    }
    for var in container.env.iter().flatten() {
        let literal = var.value.clone().unwrap_or_default();
        let value = if !literal.is_empty() {
            expand_with(&literal, |name| env.values.get(name).or_else(|| ctx.service_env.get(name)).cloned())
        } else if let Some(source) = &var.value_from {
            if let Some(f) = &source.field_ref {
                downward_api::env_field(pod, &f.field_path, ctx.host_ip, ctx.pod_ips).map_err(EnvError)?
            } else if let Some(r) = &source.resource_field_ref {
                match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                    Some(_) => downward_api::pod_container_resource(pod, r, ctx.allocatable),
                    None => downward_api::container_resource(container, r, ctx.allocatable),
                }
                .map_err(EnvError)?
            } else if let Some(r) = &source.config_map_key_ref {
                let optional = r.optional == Some(true);
                let Some(cm) = ctx.objects.config_map(&r.name).map_err(EnvError)? else {
                    if optional {
                        continue;
                    }
                    return Err(EnvError(not_found("configmap", &r.name)));
                };
                match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                    Some(v) => v.clone(),
                    None if optional => continue,
                    None => {
                        return Err(EnvError(format!(
                            "couldn't find key {} in ConfigMap {namespace}/{}",
                            r.key, r.name
                        )));
                    }
                }
            } else if let Some(r) = &source.secret_key_ref {
                let optional = r.optional == Some(true);
                let Some(secret) = ctx.objects.secret(&r.name).map_err(EnvError)? else {
                    if optional {
                        continue;
                    }
                    return Err(EnvError(not_found("secret", &r.name)));
                };
                match secret.data.as_ref().and_then(|d| d.get(&r.key)) {
                    Some(v) => bytes_to_string(&v.0),
                    None if optional => continue,
                    None => {
                        return Err(EnvError(format!("couldn't find key {} in Secret {namespace}/{}", r.key, r.name)));
                    }
                }
            } else {
                tracing::warn!(container = container.name, env = var.name, "env source not supported; left empty");
                String::new()
            }
        } else {
            String::new()
        };
        env.set(var.name.clone(), value);
    }
    let mut out: Vec<(String, String)> = env.order.iter().map(|k| (k.clone(), env.values[k].clone())).collect();
    for (k, v) in ctx.service_env {
        if !env.values.contains_key(k) {
            out.push((k.clone(), v.clone()));
        }
    }
    Ok(out)
}

/// The command and args with `$(VAR)` expanded from the container's environment.
pub fn command_and_args(container: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let vars: HashMap<String, String> = env.iter().cloned().collect();
    let expand_all = |v: &Option<Vec<String>>| v.iter().flatten().map(|s| expand(s, &vars)).collect();
    (expand_all(&container.command), expand_all(&container.args))
}

/// A volume mount's subPathExpr expanded from the container's environment, as
/// upstream's ExpandContainerVolumeMounts: a reference to an unset or empty variable
/// is an error.
pub fn expand_sub_path(expr: &str, env: &[(String, String)]) -> Result<String, EnvError> {
    let vars: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let missing = std::cell::RefCell::new(BTreeSet::new());
    let expanded = expand_with(expr, |name| {
        let value = vars.get(name).copied().unwrap_or_default();
        if value.is_empty() {
            missing.borrow_mut().insert(name.to_string());
        }
        Some(value.to_string())
    });
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(EnvError(format!("missing value for {}", missing.into_iter().collect::<Vec<_>>().join(", "))));
    }
    Ok(expanded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};

    fn vars() -> HashMap<String, String> {
        HashMap::from([("A".to_string(), "x".to_string()), ("B".to_string(), "y".to_string())])
    }

    fn ctx<'a>(objects: &'a ObjectCache, services: &'a BTreeMap<String, String>) -> EnvContext<'a> {
        static ALLOC: std::sync::LazyLock<BTreeMap<String, String>> =
            std::sync::LazyLock::new(|| BTreeMap::from([("cpu".to_string(), "4".to_string())]));
        static POD_IPS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| vec!["10.42.0.5".to_string()]);
        EnvContext { host_ip: "10.0.0.1", pod_ips: &POD_IPS, allocatable: &ALLOC, service_env: services, objects }
    }

    fn objects() -> ObjectCache {
        let mut o = ObjectCache::default();
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "cm"}, "data": {"color": "blue", "size": "L", "APP_MODE": "cm"}}))
        .unwrap();
        o.insert_config_map("cm", Ok(Some(cm)));
        o.insert_config_map("gone", Ok(None));
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "s"}, "data": {"password": "aHVudGVyMg=="}}))
        .unwrap();
        o.insert_secret("s", Ok(Some(secret)));
        o.insert_secret("gone", Ok(None));
        o
    }

    fn container(spec: serde_json::Value) -> (Pod, Container) {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [spec]},
        }))
        .unwrap();
        let c = pod.spec.as_ref().unwrap().containers[0].clone();
        (pod, c)
    }

    #[test]
    fn env_from_key_refs_and_services_combine_as_upstream() {
        let (pod, c) = container(serde_json::json!({
            "name": "c",
            "resources": {"requests": {"memory": "32Mi"}},
            "envFrom": [{"configMapRef": {"name": "cm"}, "prefix": "CM_"}, {"secretRef": {"name": "s"}},
                        {"configMapRef": {"name": "gone", "optional": true}}],
            "env": [
                {"name": "COLOR", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "color"}}},
                {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "password"}}},
                {"name": "NOPE", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k", "optional": true}}},
                {"name": "NOKEY", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "none", "optional": true}}},
                {"name": "MEM", "valueFrom": {"resourceFieldRef": {"resource": "requests.memory", "divisor": "1Mi"}}},
                {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {"name": "CM_size", "value": "override"},
                {"name": "LINK", "value": "$(WEB_SERVICE_HOST):$(CM_color)"},
                {"name": "WEB_SERVICE_PORT", "value": "mine"},
            ],
        }));
        let objects = objects();
        let services = BTreeMap::from([
            ("WEB_SERVICE_HOST".to_string(), "10.43.0.9".to_string()),
            ("WEB_SERVICE_PORT".to_string(), "80".to_string()),
        ]);
        let env = container_env(&pod, &c, &ctx(&objects, &services)).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CM_color"), Some("blue"));
        assert_eq!(get("CM_size"), Some("override"), "env overrides envFrom");
        assert_eq!(get("CM_APP_MODE"), Some("cm"));
        assert_eq!(get("password"), Some("hunter2"));
        assert_eq!(get("COLOR"), Some("blue"));
        assert_eq!(get("PASS"), Some("hunter2"));
        assert_eq!(get("NOPE"), None);
        assert_eq!(get("NOKEY"), None);
        assert_eq!(get("MEM"), Some("32"));
        assert_eq!(get("CPU"), Some("4"), "no limit: node allocatable");
        assert_eq!(get("LINK"), Some("10.43.0.9:blue"));
        assert_eq!(get("WEB_SERVICE_PORT"), Some("mine"));
        assert_eq!(env.iter().filter(|(k, _)| k == "WEB_SERVICE_PORT").count(), 1);
        assert_eq!(get("WEB_SERVICE_HOST"), Some("10.43.0.9"));
        assert_eq!(env.first().map(|(k, _)| k.as_str()), Some("CM_APP_MODE"), "envFrom first");
    }

    #[test]
    fn missing_non_optional_references_are_errors_with_upstream_messages() {
        let objects = objects();
        let services = BTreeMap::new();
        let cases = [
            (serde_json::json!({"configMapRef": {"name": "gone"}}), None, "configmap \"gone\" not found"),
            (serde_json::json!({"secretRef": {"name": "gone"}}), None, "secret \"gone\" not found"),
            (
                serde_json::json!(null),
                Some(serde_json::json!({"configMapKeyRef": {"name": "cm", "key": "absent"}})),
                "couldn't find key absent in ConfigMap ns/cm",
            ),
            (
                serde_json::json!(null),
                Some(serde_json::json!({"secretKeyRef": {"name": "s", "key": "absent"}})),
                "couldn't find key absent in Secret ns/s",
            ),
            (
                serde_json::json!(null),
                Some(serde_json::json!({"secretKeyRef": {"name": "gone", "key": "k"}})),
                "secret \"gone\" not found",
            ),
        ];
        for (from, value_from, message) in cases {
            let mut spec = serde_json::json!({"name": "c"});
            if !from.is_null() {
                spec["envFrom"] = serde_json::json!([from]);
            }
            if let Some(v) = value_from {
                spec["env"] = serde_json::json!([{"name": "X", "valueFrom": v}]);
            }
            let (pod, c) = container(spec);
            assert_eq!(container_env(&pod, &c, &ctx(&objects, &services)), Err(EnvError(message.into())));
        }
    }

    #[test]
    fn referenced_objects_and_sub_path_expansion() {
        let (_, c) = container(serde_json::json!({"name": "c",
            "envFrom": [{"configMapRef": {"name": "a"}}, {"secretRef": {"name": "b"}}],
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]}));
        let (cms, secrets) = referenced_objects(&c);
        assert_eq!(cms.into_iter().collect::<Vec<_>>(), vec!["a", "c"]);
        assert_eq!(secrets.into_iter().collect::<Vec<_>>(), vec!["b"]);
        let env = vec![("POD".to_string(), "web-1".to_string()), ("EMPTY".to_string(), String::new())];
        assert_eq!(expand_sub_path("logs/$(POD)", &env).unwrap(), "logs/web-1");
        assert_eq!(expand_sub_path("$(EMPTY)/$(NONE)", &env), Err(EnvError("missing value for EMPTY, NONE".into())));
    }

    #[test]
    fn expansion_follows_upstream_rules() {
        assert_eq!(expand("$(A)-$(B)", &vars()), "x-y");
        assert_eq!(expand("$$(A)", &vars()), "$(A)");
        assert_eq!(expand("$(C)", &vars()), "$(C)");
        assert_eq!(expand("$(A", &vars()), "$(A");
        assert_eq!(expand("cost $5 $", &vars()), "cost $5 $");
        assert_eq!(expand("é$(A)é", &vars()), "éxé");
    }

    #[test]
    fn env_values_expand_from_earlier_ones_and_field_refs_resolve() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"nodeName": "n1", "containers": [{
                "name": "c",
                "command": ["echo", "$(GREETING)"],
                "env": [
                    {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                    {"name": "GREETING", "value": "hi $(NAME) on $(NODE)"},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                ],
            }]},
        }))
        .unwrap();
        let container = &pod.spec.as_ref().unwrap().containers[0];
        let objects = ObjectCache::default();
        let env = container_env(&pod, container, &ctx(&objects, &BTreeMap::new())).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("NAME"), Some("p"));
        assert_eq!(get("APP"), Some("web"));
        assert_eq!(get("GREETING"), Some("hi p on $(NODE)"));
        assert_eq!(get("IP"), Some("10.42.0.5"));
        let (command, _) = command_and_args(container, &env);
        assert_eq!(command, vec!["echo", "hi p on $(NODE)"]);
    }
}
