//! Warnings for pods and pod templates, as upstream's pkg/api/pod/warnings.go gives
//! them: valid but suspicious or deprecated settings, returned to the client as
//! Warning headers (kubectl prints them) without refusing the write.

use std::collections::HashSet;

use serde_json::Value;

use super::quantity::Quantity;

/// Node labels upstream deprecated, and what to use instead.
const DEPRECATED_NODE_LABELS: &[(&str, &str)] = &[
    ("beta.kubernetes.io/arch", "deprecated since v1.14; use \"kubernetes.io/arch\" instead"),
    ("beta.kubernetes.io/os", "deprecated since v1.14; use \"kubernetes.io/os\" instead"),
    (
        "failure-domain.beta.kubernetes.io/region",
        "deprecated since v1.17; use \"topology.kubernetes.io/region\" instead",
    ),
    ("failure-domain.beta.kubernetes.io/zone", "deprecated since v1.17; use \"topology.kubernetes.io/zone\" instead"),
    ("beta.kubernetes.io/instance-type", "deprecated since v1.17; use \"node.kubernetes.io/instance-type\" instead"),
];

const DEPRECATED_ANNOTATIONS: &[(&str, &str)] = &[
    (
        "scheduler.alpha.kubernetes.io/critical-pod",
        "non-functional in v1.16+; use the \"priorityClassName\" field instead",
    ),
    ("security.alpha.kubernetes.io/sysctls", "non-functional in v1.11+; use the \"sysctls\" field instead"),
    ("security.alpha.kubernetes.io/unsafe-sysctls", "non-functional in v1.11+; use the \"sysctls\" field instead"),
];

const DEPRECATED_VOLUMES: &[(&str, &str)] = &[
    ("photonPersistentDisk", "deprecated in v1.11, non-functional in v1.16+"),
    ("gitRepo", "deprecated in v1.11"),
    ("scaleIO", "deprecated in v1.16, non-functional in v1.22+"),
    ("flocker", "deprecated in v1.22, non-functional in v1.25+"),
    ("storageOS", "deprecated in v1.22, non-functional in v1.25+"),
    ("quobyte", "deprecated in v1.22, non-functional in v1.25+"),
    ("glusterfs", "deprecated in v1.25, non-functional in v1.26+"),
    ("cephfs", "deprecated in v1.28, non-functional in v1.31+"),
    ("rbd", "deprecated in v1.28, non-functional in v1.31+"),
];

const SECCOMP_POD_ANNOTATION: &str = "seccomp.security.alpha.kubernetes.io/pod";
const SECCOMP_CONTAINER_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";
const APPARMOR_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

fn node_label_message(key: &str) -> Option<&'static str> {
    DEPRECATED_NODE_LABELS.iter().find(|(k, _)| *k == key).map(|(_, m)| *m)
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Warnings for a pod, or for a pod template at `prefix` ("spec.template.").
pub fn pod(prefix: &str, pod: &Value) -> Vec<String> {
    let mut w = Vec::new();
    let empty = Value::Null;
    let spec = pod.get("spec").unwrap_or(&empty);
    let annotations = pod.pointer("/metadata/annotations").and_then(Value::as_object);
    let has_annotation = |k: &str| annotations.is_some_and(|a| a.contains_key(k));
    let p = |rest: &str| format!("{prefix}{rest}");

    for k in spec.get("nodeSelector").and_then(Value::as_object).into_iter().flat_map(|m| m.keys()) {
        if let Some(msg) = node_label_message(k) {
            w.push(format!("{}: {msg}", p(&format!("spec.nodeSelector[{k}]"))));
        }
    }
    let node_affinity = spec.pointer("/affinity/nodeAffinity");
    let required =
        node_affinity.and_then(|n| n.pointer("/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"));
    for (i, term) in items(required).iter().enumerate() {
        let path = p(&format!(
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        ));
        node_selector_term(&mut w, term, &path);
    }
    let preferred = node_affinity.and_then(|n| n.get("preferredDuringSchedulingIgnoredDuringExecution"));
    for (i, term) in items(preferred).iter().enumerate() {
        let path =
            p(&format!("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"));
        node_selector_term(&mut w, term.get("preference").unwrap_or(&empty), &path);
    }
    for (i, t) in items(spec.get("topologySpreadConstraints")).iter().enumerate() {
        let key = str_of(t, "topologyKey");
        if let Some(msg) = node_label_message(key) {
            w.push(format!("{}: {key} is {msg}", p(&format!("spec.topologySpreadConstraints[{i}].topologyKey"))));
        }
        if t.get("labelSelector").is_none_or(Value::is_null) {
            w.push(format!(
                "{}: a null labelSelector results in matching no pod",
                p(&format!("spec.topologySpreadConstraints[{i}].labelSelector"))
            ));
        }
    }
    for (key, msg) in DEPRECATED_ANNOTATIONS {
        if has_annotation(key) {
            w.push(format!("{}: {msg}", p(&format!("metadata.annotations[{key}]"))));
        }
    }
    for (i, v) in items(spec.get("volumes")).iter().enumerate() {
        for (source, msg) in DEPRECATED_VOLUMES {
            if v.get(*source).is_some_and(|s| !s.is_null()) {
                w.push(format!("{}: {msg}", p(&format!("spec.volumes[{i}].{source}"))));
            }
        }
    }
    duplicates(&mut w, items(spec.get("hostAliases")), "ip", &p("spec.hostAliases"), "duplicate ip");
    duplicates(&mut w, items(spec.get("imagePullSecrets")), "name", &p("spec.imagePullSecrets"), "duplicate name");
    for (i, s) in items(spec.get("imagePullSecrets")).iter().enumerate() {
        if str_of(s, "name").is_empty() {
            w.push(format!("{}: invalid empty name \"\"", p(&format!("spec.imagePullSecrets[{i}].name"))));
        }
    }
    for res in ["memory", "ephemeral-storage"] {
        fractional_bytes(&mut w, spec.pointer(&format!("/overhead/{res}")), &p(&format!("spec.overhead[{res}]")));
    }
    if spec.pointer("/securityContext/seccompProfile").is_none_or(Value::is_null)
        && has_annotation(SECCOMP_POD_ANNOTATION)
    {
        w.push(format!(
            "{}: non-functional in v1.27+; use the \"seccompProfile\" field instead",
            p(&format!("metadata.annotations[{SECCOMP_POD_ANNOTATION}]"))
        ));
    }
    let pod_apparmor = spec.pointer("/securityContext/appArmorProfile").is_some_and(|v| !v.is_null());
    let mut ports: Vec<(String, &Value)> = Vec::new();
    for (c_path, c) in containers(spec, &p("spec")) {
        let name = str_of(c, "name");
        let container_field = |f: &str| c.pointer(f).is_some_and(|v| !v.is_null());
        if !container_field("/securityContext/seccompProfile")
            && has_annotation(&format!("{SECCOMP_CONTAINER_PREFIX}{name}"))
        {
            w.push(format!(
                "{}: non-functional in v1.27+; use the \"seccompProfile\" field instead",
                p(&format!("metadata.annotations[{SECCOMP_CONTAINER_PREFIX}{name}]"))
            ));
        }
        // Pods report the AppArmor annotation through their own path upstream; templates warn here.
        let key = format!("{APPARMOR_PREFIX}{name}");
        if !prefix.is_empty()
            && !pod_apparmor
            && !container_field("/securityContext/appArmorProfile")
            && has_annotation(&key)
        {
            w.push(format!(
                "{}: deprecated since v1.30; use the \"appArmorProfile\" field instead",
                p(&format!("metadata.annotations[{key}]"))
            ));
        }
        for kind in ["limits", "requests"] {
            for res in ["memory", "ephemeral-storage"] {
                fractional_bytes(
                    &mut w,
                    c.pointer(&format!("/resources/{kind}/{res}")),
                    &format!("{c_path}.resources.{kind}[{res}]"),
                );
            }
        }
        env_shadowing(&mut w, items(c.get("env")), &c_path);
        for (i, port) in items(c.get("ports")).iter().enumerate() {
            ports.push((format!("{c_path}.ports[{i}]"), port));
        }
    }
    port_warnings(&mut w, &ports);
    if spec.get("terminationGracePeriodSeconds").and_then(Value::as_i64).is_some_and(|g| g < 0) {
        w.push(format!(
            "{}: must be >= 0; negative values are invalid and will be treated as 1",
            p("spec.terminationGracePeriodSeconds")
        ));
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(a) = spec.pointer(&format!("/affinity/{kind}")) else { continue };
        for (i, t) in items(a.get("requiredDuringSchedulingIgnoredDuringExecution")).iter().enumerate() {
            if t.get("labelSelector").is_none_or(Value::is_null) {
                w.push(format!(
                    "{}: a null labelSelector results in matching no pod",
                    p(&format!(
                        "spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution[{i}].labelSelector"
                    ))
                ));
            }
        }
        for (i, t) in items(a.get("preferredDuringSchedulingIgnoredDuringExecution")).iter().enumerate() {
            if t.pointer("/podAffinityTerm/labelSelector").is_none_or(Value::is_null) {
                w.push(format!(
                    "{}: a null labelSelector results in matching no pod",
                    p(&format!(
                        "spec.affinity.{kind}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm.labelSelector"
                    ))
                ));
            }
        }
    }
    w
}

/// Every container with its field path, in upstream's visiting order.
fn containers<'a>(spec: &'a Value, spec_path: &str) -> Vec<(String, &'a Value)> {
    let mut out = Vec::new();
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        for (i, c) in items(spec.get(list)).iter().enumerate() {
            out.push((format!("{spec_path}.{list}[{i}]"), c));
        }
    }
    out
}

fn node_selector_term(w: &mut Vec<String>, term: &Value, path: &str) {
    for field in ["matchExpressions", "matchFields"] {
        for (i, e) in items(term.get(field)).iter().enumerate() {
            let key = str_of(e, "key");
            if let Some(msg) = node_label_message(key) {
                w.push(format!("{path}.{field}[{i}].key: {key} is {msg}"));
            }
        }
    }
}

fn duplicates(w: &mut Vec<String>, list: &[Value], key: &str, path: &str, what: &str) {
    let mut seen = HashSet::new();
    for (i, item) in list.iter().enumerate() {
        let v = str_of(item, key);
        if !seen.insert(v) {
            w.push(format!("{path}[{i}].{key}: {what} \"{v}\""));
        }
    }
}

fn fractional_bytes(w: &mut Vec<String>, value: Option<&Value>, path: &str) {
    let Some(v) = value else { return };
    if let Ok(q) = Quantity::from_json(v)
        && !q.is_integer()
    {
        let shown = v.as_str().map(String::from).unwrap_or_else(|| v.to_string());
        w.push(format!("{path}: fractional byte value \"{shown}\" is invalid, must be an integer"));
    }
}

/// A later env var of the same name hides the earlier one unless it refers to it.
fn env_shadowing(w: &mut Vec<String>, env: &[Value], c_path: &str) {
    let mut seen = HashSet::new();
    for (i, e) in env.iter().enumerate() {
        let name = str_of(e, "name");
        if seen.insert(name) {
            continue;
        }
        let reference = format!("$({name})");
        let value = str_of(e, "value");
        let from = e.get("valueFrom").is_some_and(|v| !v.is_null());
        if from || value == reference || !value.contains(&reference) {
            w.push(format!(
                "{c_path}.env[{i}]: hides previous definition of \"{name}\", which may be dropped when using apply"
            ));
        }
    }
}

fn port_warnings(w: &mut Vec<String>, ports: &[(String, &Value)]) {
    let field = |p: &Value, k: &str| p.get(k).cloned().unwrap_or(Value::Null);
    let host_port = |p: &Value| p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
    let host_ip = |p: &Value| str_of(p, "hostIP").to_string();
    for (i, (path, port)) in ports.iter().enumerate() {
        if !host_ip(port).is_empty() && host_port(port) == 0 {
            w.push(format!("{path}: hostIP set without hostPort: {}", go_struct(port)));
        }
        let key = (field(port, "containerPort"), port.get("protocol").and_then(Value::as_str).unwrap_or("TCP"));
        for (other_path, other) in &ports[..i] {
            let other_key =
                (field(other, "containerPort"), other.get("protocol").and_then(Value::as_str).unwrap_or("TCP"));
            if key != other_key {
                continue;
            }
            let (a, b) = (host_ip(port).is_empty(), host_ip(other).is_empty());
            if host_ip(port) == host_ip(other) && host_port(port) == host_port(other) {
                w.push(format!("{path}: duplicate port definition with {other_path}"));
            } else if host_port(port) == 0 || host_port(other) == 0 {
                w.push(format!("{path}: overlapping port definition with {other_path}"));
            } else if host_port(port) == host_port(other) && (a || b) && !(a && b) {
                w.push(format!("{path}: dangerously ambiguous port definition with {other_path}"));
            }
        }
    }
}

/// A ContainerPort as Go's %+v prints it.
fn go_struct(port: &Value) -> String {
    format!(
        "{{Name:{} HostPort:{} ContainerPort:{} Protocol:{} HostIP:{}}}",
        str_of(port, "name"),
        port.get("hostPort").and_then(Value::as_i64).unwrap_or(0),
        port.get("containerPort").and_then(Value::as_i64).unwrap_or(0),
        port.get("protocol").and_then(Value::as_str).unwrap_or("TCP"),
        str_of(port, "hostIP")
    )
}

/// Warnings for the pod template at `pointer` (e.g. "/spec/template") of a workload; on
/// update only when the template changed, as upstream's workload strategies do.
pub fn template(obj: &Value, old: Option<&Value>, pointer: &str) -> Vec<String> {
    let Some(t) = obj.pointer(pointer).filter(|t| t.is_object()) else { return Vec::new() };
    if old.is_some_and(|o| o.pointer(pointer) == Some(t)) {
        return Vec::new();
    }
    let prefix = format!("{}.", pointer.trim_start_matches('/').replace('/', "."));
    pod(&prefix, t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn deprecated_and_suspicious_settings_warn_like_upstream() {
        let p = json!({
            "metadata": {"annotations": {"scheduler.alpha.kubernetes.io/critical-pod": "", "seccomp.security.alpha.kubernetes.io/pod": "runtime/default"}},
            "spec": {
                "nodeSelector": {"beta.kubernetes.io/os": "linux"},
                "terminationGracePeriodSeconds": -1,
                "volumes": [{"name": "v", "gitRepo": {"repository": "x"}}],
                "imagePullSecrets": [{"name": "a"}, {"name": "a"}],
                "containers": [{"name": "c", "image": "i",
                    "resources": {"limits": {"memory": "1.5"}},
                    "env": [{"name": "X", "value": "1"}, {"name": "X", "value": "2"}, {"name": "Y", "value": "1"}, {"name": "Y", "value": "$(Y)-more"}],
                    "ports": [{"containerPort": 80}, {"containerPort": 80}]}]
            }
        });
        let w = pod("", &p);
        let expect = [
            "spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead",
            "metadata.annotations[scheduler.alpha.kubernetes.io/critical-pod]: non-functional in v1.16+; use the \"priorityClassName\" field instead",
            "spec.volumes[0].gitRepo: deprecated in v1.11",
            "spec.imagePullSecrets[1].name: duplicate name \"a\"",
            "metadata.annotations[seccomp.security.alpha.kubernetes.io/pod]: non-functional in v1.27+; use the \"seccompProfile\" field instead",
            "spec.containers[0].resources.limits[memory]: fractional byte value \"1.5\" is invalid, must be an integer",
            "spec.containers[0].env[1]: hides previous definition of \"X\", which may be dropped when using apply",
            "spec.containers[0].ports[1]: duplicate port definition with spec.containers[0].ports[0]",
            "spec.terminationGracePeriodSeconds: must be >= 0; negative values are invalid and will be treated as 1",
        ];
        assert_eq!(w, expect);
    }

    #[test]
    fn templates_carry_their_path_and_clean_pods_have_none() {
        let t = json!({"spec": {"topologySpreadConstraints": [{"topologyKey": "failure-domain.beta.kubernetes.io/zone", "maxSkew": 1}]}});
        assert_eq!(
            pod("spec.template.", &t),
            [
                "spec.template.spec.topologySpreadConstraints[0].topologyKey: failure-domain.beta.kubernetes.io/zone is deprecated since v1.17; use \"topology.kubernetes.io/zone\" instead",
                "spec.template.spec.topologySpreadConstraints[0].labelSelector: a null labelSelector results in matching no pod",
            ]
        );
        let clean = json!({"spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}, {"containerPort": 81}]}]}});
        assert!(pod("", &clean).is_empty());
    }
}
