//! Resource quantities and what a pod requests, computed as upstream's resource helpers
//! do (containers summed, init containers as a maximum, sidecars added, overhead added).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

/// Requests of a container without any, for scoring only (upstream's non-zero defaults).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Parses a Kubernetes quantity into thousandths of its unit (rounded up), saturating.
pub fn parse_milli(q: &str) -> Option<i64> {
    let q = q.trim();
    if q.is_empty() {
        return None;
    }
    let (sign, rest) = match q.as_bytes()[0] {
        b'-' => (-1i128, &q[1..]),
        b'+' => (1, &q[1..]),
        _ => (1, q),
    };
    let number_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(number_end);
    if number.is_empty() || number == "." {
        return None;
    }
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') {
        return None;
    }
    let digits: String = format!("{whole}{fraction}");
    let significant = digits.trim_start_matches('0');
    let mantissa: i128 = match significant.len() {
        0 => 0,
        1..=36 => significant.parse().ok()?,
        _ => i128::MAX >> 64,
    };
    // value = mantissa * 10^-fraction.len() * multiplier; we want value * 1000.
    let (base2, exp10): (u32, i32) = match suffix {
        "" => (0, 0),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        s if s.starts_with(['e', 'E']) => (0, s[1..].parse().ok()?),
        _ => return None,
    };
    let exp = exp10 + 3 - fraction.len() as i32;
    let mut value = mantissa.checked_mul(1i128 << base2).unwrap_or(i128::MAX);
    if exp >= 0 {
        for _ in 0..exp {
            value = value.saturating_mul(10);
        }
    } else {
        let div = 10i128.checked_pow((-exp) as u32).unwrap_or(i128::MAX);
        value = if value == 0 { 0 } else { (value + div - 1) / div };
    }
    Some((sign * value).clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

/// A quantity in its unit, rounded up (memory, storage, extended resources).
pub fn parse_value(q: &str) -> Option<i64> {
    let milli = parse_milli(q)?;
    Some(if milli >= 0 { milli / 1000 + i64::from(milli % 1000 != 0) } else { milli / 1000 })
}

/// Amounts of resources: cpu in millicores, the rest in units. Extended resources
/// (anything else but pods) are kept by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pods: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, &q.0);
        }
        r
    }

    fn set(&mut self, name: &str, q: &str) {
        match name {
            CPU => self.milli_cpu = parse_milli(q).unwrap_or(0),
            MEMORY => self.memory = parse_value(q).unwrap_or(0),
            EPHEMERAL_STORAGE => self.ephemeral_storage = parse_value(q).unwrap_or(0),
            PODS => self.allowed_pods = parse_value(q).unwrap_or(0),
            other if is_scalar(other) => {
                self.scalar.insert(other.to_string(), parse_value(q).unwrap_or(0));
            }
            _ => {}
        }
    }

    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pods,
            other => self.scalar.get(other).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() += v;
        }
    }

    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        for (k, v) in &other.scalar {
            *self.scalar.entry(k.clone()).or_default() -= v;
        }
    }

    fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0 && self.memory == 0 && self.ephemeral_storage == 0 && self.scalar.values().all(|v| *v == 0)
    }
}

/// Extended resources: domain-prefixed names outside kubernetes.io (and hugepages,
/// attachable volumes), which the scheduler tracks as opaque counts.
pub fn is_scalar(name: &str) -> bool {
    name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
        || (name.contains('/') && !name.starts_with("kubernetes.io/") && !name.starts_with("requests."))
}

fn container_requests(c: &Container, non_zero: bool) -> Resources {
    let res = c.resources.as_ref();
    let mut r = Resources::from_list(res.and_then(|r| r.requests.as_ref()));
    // Requests default to limits (API defaulting does this; be safe with clients that skip it).
    if let Some(limits) = res.and_then(|r| r.limits.as_ref()) {
        let requested = res.and_then(|r| r.requests.as_ref());
        for (name, q) in limits {
            if requested.is_none_or(|req| !req.contains_key(name)) {
                r.set(name, &q.0);
            }
        }
    }
    if non_zero {
        let has = |n: &str| res.and_then(|r| r.requests.as_ref()).is_some_and(|m| m.contains_key(n));
        if !has(CPU) && r.milli_cpu == 0 {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if !has(MEMORY) && r.memory == 0 {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
    }
    r
}

/// What `pod` requests (upstream's PodRequests); with `non_zero`, containers without a
/// cpu or memory request count the defaults, as scoring does.
pub fn pod_requests(pod: &Pod, non_zero: bool) -> Resources {
    let Some(spec) = pod.spec.as_ref() else { return Resources::default() };
    let mut reqs = Resources::default();
    for c in &spec.containers {
        reqs.add(&container_requests(c, non_zero));
    }
    let mut restartable = Resources::default();
    let mut init_max = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let mut r = container_requests(c, non_zero);
        if c.restart_policy.as_deref() == Some("Always") {
            // A sidecar runs beside the regular containers and every later init container.
            reqs.add(&r);
            restartable.add(&r);
            r = restartable.clone();
        } else {
            r.add(&restartable);
        }
        init_max.max_with(&r);
    }
    reqs.max_with(&init_max);
    // Pod-level resources, when given, are what the pod asks for cpu and memory.
    if let Some(pod_level) = spec.resources.as_ref().and_then(|r| r.requests.as_ref()) {
        let level = Resources::from_list(Some(pod_level));
        if pod_level.contains_key(CPU) {
            reqs.milli_cpu = level.milli_cpu;
        }
        if pod_level.contains_key(MEMORY) {
            reqs.memory = level.memory;
        }
    }
    if let Some(overhead) = spec.overhead.as_ref() {
        reqs.add(&Resources::from_list(Some(overhead)));
    }
    reqs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn quantities() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("1.5"), Some(1500));
        assert_eq!(parse_milli("0.0001"), Some(1), "rounded up");
        assert_eq!(parse_value("1Gi"), Some(1 << 30));
        assert_eq!(parse_value("1G"), Some(1_000_000_000));
        assert_eq!(parse_value("1e3"), Some(1000));
        assert_eq!(parse_value("500m"), Some(1));
        assert_eq!(parse_value("bogus"), None);
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    fn c(name: &str, cpu: &str) -> serde_json::Value {
        json!({"name": name, "image": "i", "resources": {"requests": {"cpu": cpu}}})
    }

    #[test]
    fn init_containers_and_sidecars_and_overhead() {
        let mut sidecar = c("s", "200m");
        sidecar["restartPolicy"] = json!("Always");
        let p = pod(json!({
            "containers": [c("a", "100m"), c("b", "100m")],
            "initContainers": [c("i1", "1"), sidecar, c("i2", "500m")],
            "overhead": {"cpu": "10m"},
        }));
        // Regular 200m + sidecar 200m = 400m; init max = max(1000, 200, 500+200) = 1000.
        assert_eq!(pod_requests(&p, false).milli_cpu, 1010);
    }

    #[test]
    fn non_zero_defaults_for_scoring() {
        let p = pod(json!({"containers": [{"name": "a", "image": "i"}]}));
        assert_eq!(pod_requests(&p, false), Resources::default());
        let nz = pod_requests(&p, true);
        assert_eq!((nz.milli_cpu, nz.memory), (100, 200 * 1024 * 1024));
    }
}
