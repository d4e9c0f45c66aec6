//! The downward API: a pod's own fields (fieldRef) and its containers' resources
//! (resourceFieldRef) as strings, for env values and downwardAPI volume files, as
//! upstream's fieldpath and resource helpers give them. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};
use krate_api::kinds::quantity::Quantity;

/// Go's `%q` of a string (strconv.Quote), as upstream's FormatMap writes values.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// upstream's fieldpath.FormatMap: `key="value"` lines in key order, no trailing newline.
pub fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter().flatten().map(|(k, v)| format!("{k}={}", go_quote(v))).collect::<Vec<_>>().join("\n")
}

/// `metadata.labels['key']` → ("metadata.labels", "key").
fn split_subscript(path: &str) -> Option<(&str, &str)> {
    let open = path.find("['")?;
    let key = path[open + 2..].strip_suffix("']")?;
    Some((&path[..open], key))
}

/// upstream's ExtractFieldPathAsString: the metadata fields a downwardAPI volume
/// (and, after the status/spec fields, an env var) may name.
pub fn metadata_field(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    if let Some((base, key)) = split_subscript(path) {
        let map = match base {
            "metadata.annotations" => &meta.annotations,
            "metadata.labels" => &meta.labels,
            _ => return Err(format!("fieldPath {path:?} does not support subscript")),
        };
        return Ok(map.as_ref().and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        _ => return Err(format!("unsupported fieldPath: {path}")),
    })
}

/// An env var's fieldRef, as the kubelet's podFieldSelectorRuntimeValue.
pub fn env_field(pod: &Pod, path: &str, host_ip: &str, pod_ips: &[String]) -> Result<String, String> {
    let spec = pod.spec.as_ref();
    Ok(match path {
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()).unwrap_or_default(),
        "status.hostIP" | "status.hostIPs" => host_ip.to_string(),
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        _ => return metadata_field(pod, path),
    })
}

fn quantity(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    name: &str,
) -> Quantity {
    list.and_then(|l| l.get(name)).and_then(|q| Quantity::parse(&q.0).ok()).unwrap_or_else(Quantity::zero)
}

/// Ceiling of a / b for b > 0, as upstream's math.Ceil over float64.
fn ceil_div(a: i64, b: i64) -> i64 {
    if b <= 0 {
        return 0;
    }
    let (a, b) = (a as i128, b as i128);
    (if a >= 0 { (a + b - 1) / b } else { a / b }) as i64
}

/// A container's resource (`limits.cpu`, `requests.memory`, …) over the divisor,
/// rounded up; limits not set default to the node's allocatable, as upstream's
/// defaultPodLimitsForDownwardAPI.
pub fn container_resource(
    container: &Container,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let divisor = selector
        .divisor
        .as_ref()
        .and_then(|d| Quantity::parse(&d.0).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or_else(|| Quantity::parse("1").expect("1 is a quantity"));
    let resources = container.resources.clone().unwrap_or_default();
    let (kind, name) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", selector.resource))?;
    let value = match kind {
        "limits" => {
            let set = resources.limits.as_ref().is_some_and(|l| l.contains_key(name));
            if set {
                quantity(resources.limits.as_ref(), name)
            } else {
                allocatable.get(name).and_then(|q| Quantity::parse(q).ok()).unwrap_or_else(Quantity::zero)
            }
        }
        "requests" => quantity(resources.requests.as_ref(), name),
        _ => return Err(format!("unsupported container resource : {}", selector.resource)),
    };
    match name {
        "cpu" => Ok(ceil_div(value.milli_value(), divisor.milli_value()).to_string()),
        "memory" | "ephemeral-storage" => Ok(ceil_div(value.value(), divisor.value()).to_string()),
        n if n.starts_with("hugepages-") => Ok(ceil_div(value.value(), divisor.value()).to_string()),
        _ => Err(format!("unsupported container resource : {}", selector.resource)),
    }
}

/// A resourceFieldRef naming its container (downwardAPI volumes always do).
pub fn pod_container_resource(
    pod: &Pod,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let name = selector.container_name.as_deref().unwrap_or_default();
    let spec = pod.spec.as_ref();
    let container = spec
        .iter()
        .flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()))
        .find(|c| c.name == name)
        .ok_or_else(|| format!("container {name} not found"))?;
    container_resource(container, selector, allocatable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1",
                "labels": {"b": "2", "a": "x\"y\n"}, "annotations": {"note": "héllo"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "sa", "containers": [{
                "name": "c", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}]},
        }))
        .unwrap()
    }

    fn selector(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        ResourceFieldSelector {
            container_name: Some("c".into()),
            resource: resource.into(),
            divisor: divisor.map(|d| k8s_openapi::apimachinery::pkg::api::resource::Quantity(d.into())),
        }
    }

    #[test]
    fn maps_format_as_quoted_sorted_lines() {
        let p = pod();
        assert_eq!(metadata_field(&p, "metadata.labels").unwrap(), "a=\"x\\\"y\\n\"\nb=\"2\"");
        assert_eq!(metadata_field(&p, "metadata.annotations").unwrap(), "note=\"héllo\"");
        assert_eq!(metadata_field(&p, "metadata.labels['b']").unwrap(), "2");
        assert_eq!(metadata_field(&p, "metadata.labels['none']").unwrap(), "");
        assert!(metadata_field(&p, "spec.nodeName").is_err());
        assert!(metadata_field(&p, "metadata.name['x']").is_err());
        assert_eq!(go_quote("\u{1}\t"), "\"\\x01\\t\"");
    }

    #[test]
    fn env_fields_cover_spec_and_status() {
        let p = pod();
        let ips = ["10.0.0.5".to_string(), "fd00::5".to_string()];
        assert_eq!(env_field(&p, "spec.nodeName", "1.2.3.4", &ips).unwrap(), "n1");
        assert_eq!(env_field(&p, "spec.serviceAccountName", "1.2.3.4", &ips).unwrap(), "sa");
        assert_eq!(env_field(&p, "status.podIP", "1.2.3.4", &ips).unwrap(), "10.0.0.5");
        assert_eq!(env_field(&p, "status.podIPs", "1.2.3.4", &ips).unwrap(), "10.0.0.5,fd00::5");
        assert_eq!(env_field(&p, "metadata.uid", "1.2.3.4", &ips).unwrap(), "u1");
    }

    #[test]
    fn resources_divide_round_up_and_default_limits_to_allocatable() {
        let p = pod();
        let alloc = BTreeMap::from([("cpu".to_string(), "2".to_string()), ("memory".to_string(), "1Gi".to_string())]);
        let get = |r: &str, d: Option<&str>| pod_container_resource(&p, &selector(r, d), &alloc).unwrap();
        assert_eq!(get("requests.cpu", None), "1", "250m rounds up to 1 core");
        assert_eq!(get("requests.cpu", Some("1m")), "250");
        assert_eq!(get("requests.memory", Some("1Mi")), "64");
        assert_eq!(get("limits.memory", None), (128 * 1024 * 1024).to_string());
        assert_eq!(get("limits.cpu", Some("1m")), "2000", "unset limit: node allocatable");
        assert_eq!(get("limits.memory", Some("1Gi")), "1");
        assert_eq!(get("requests.ephemeral-storage", None), "0");
        assert_eq!(get("requests.cpu", Some("0")), "1", "a zero divisor counts as 1");
        assert!(pod_container_resource(&p, &selector("limits.gpu", None), &alloc).is_err());
        let mut other = selector("limits.cpu", None);
        other.container_name = Some("missing".into());
        assert!(pod_container_resource(&p, &other, &alloc).is_err());
    }
}
