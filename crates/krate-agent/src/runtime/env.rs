//! A container's environment, command and args as the kubelet makes them: env values,
//! basic fieldRefs, and `$(VAR)` expansion (`$$` escapes; unknown references stay).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Expands `$(NAME)` references in `input` from `vars`, as upstream's expansion does:
/// `$$` is a literal `$`, an undefined or unterminated reference is left as written.
pub fn expand(input: &str, vars: &HashMap<String, String>) -> String {
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
                        match vars.get(name) {
                            Some(value) => out.push_str(value),
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

/// The value of a fieldRef path for `pod` (the fields the kubelet resolves itself).
pub fn field_ref(pod: &Pod, path: &str, host_ip: &str, pod_ip: &str) -> Option<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let lookup = |map: &Option<std::collections::BTreeMap<String, String>>, rest: &str| {
        let key = rest.strip_prefix("['")?.strip_suffix("']")?;
        Some(map.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default())
    };
    Some(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "status.podIP" | "status.podIPs" => pod_ip.to_string(),
        _ => {
            if let Some(rest) = path.strip_prefix("metadata.labels") {
                return lookup(&meta.labels, rest);
            }
            if let Some(rest) = path.strip_prefix("metadata.annotations") {
                return lookup(&meta.annotations, rest);
            }
            return None;
        }
    })
}

/// The container's environment in order, each value expanded against those before it.
/// Sources the agent does not resolve yet (configMap/secret keys, resources) are
/// skipped with a log line rather than failing the container.
pub fn container_env(pod: &Pod, container: &Container, host_ip: &str, pod_ip: &str) -> Vec<(String, String)> {
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut out: Vec<(String, String)> = Vec::new();
    for var in container.env.iter().flatten() {
        let value = if let Some(source) = &var.value_from {
            match source.field_ref.as_ref().and_then(|f| field_ref(pod, &f.field_path, host_ip, pod_ip)) {
                Some(v) => v,
                None => {
                    tracing::warn!(container = container.name, env = var.name, "env source not supported yet; skipped");
                    continue;
                }
            }
        } else {
            expand(var.value.as_deref().unwrap_or(""), &vars)
        };
        vars.insert(var.name.clone(), value.clone());
        match out.iter_mut().find(|(k, _)| *k == var.name) {
            Some(slot) => slot.1 = value,
            None => out.push((var.name.clone(), value)),
        }
    }
    out
}

/// The command and args with `$(VAR)` expanded from the container's environment.
pub fn command_and_args(container: &Container, env: &[(String, String)]) -> (Vec<String>, Vec<String>) {
    let vars: HashMap<String, String> = env.iter().cloned().collect();
    let expand_all = |v: &Option<Vec<String>>| v.iter().flatten().map(|s| expand(s, &vars)).collect();
    (expand_all(&container.command), expand_all(&container.args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> HashMap<String, String> {
        HashMap::from([("A".to_string(), "x".to_string()), ("B".to_string(), "y".to_string())])
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
        let env = container_env(&pod, container, "10.0.0.1", "10.42.0.5");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("NAME"), Some("p"));
        assert_eq!(get("APP"), Some("web"));
        assert_eq!(get("GREETING"), Some("hi p on $(NODE)"));
        assert_eq!(get("IP"), Some("10.42.0.5"));
        let (command, _) = command_and_args(container, &env);
        assert_eq!(command, vec!["echo", "hi p on $(NODE)"]);
    }
}
