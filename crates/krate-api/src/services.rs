//! Cluster IPs and node ports for Services.
//!
//! As upstream v1.36 does, a cluster IP is taken by creating the IPAddress object named
//! after it (networking.k8s.io/v1): creation is create-if-absent in the store, so two
//! Services never get the same IP, even when created at the same moment. Dynamic
//! allocation prefers the upper part of the range and leaves the lower "static" band for
//! users who pick their own IP (upstream's split: min(max(16, size/16), 256) addresses).
//! Node ports are keys in a private range in the store, create-if-absent too.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;
use serde_json::{Value, json};

use krate_store::StoreError;

use crate::admission::NoAdmission;
use crate::error::{ApiError, ApiResult, Cause, Target};
use crate::hooks::{RestHooks, Undo, Undos};
use crate::object;
use crate::registry::{Context, DeleteOptions, Registry, Scope};
use crate::user::UserInfo;

const NODE_PORT_PREFIX: &str = "/registry/ranges/servicenodeports/";
const RANDOM_ATTEMPTS: usize = 32;

pub struct ServiceAllocator {
    base: u32,
    prefix_len: u8,
    node_ports: (u16, u16),
}

impl ServiceAllocator {
    /// `cidr` like "10.43.0.0/16", `node_ports` like "30000-32767".
    pub fn new(cidr: &str, node_ports: &str) -> Result<Self, String> {
        let (ip, len) = cidr.split_once('/').ok_or_else(|| format!("invalid service CIDR {cidr:?}"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| format!("invalid service CIDR {cidr:?} (IPv4 only)"))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| (8..=30).contains(l))
            .ok_or_else(|| format!("invalid prefix length in {cidr:?}"))?;
        let mask = u32::MAX << (32 - len);
        let (lo, hi) = node_ports.split_once('-').ok_or_else(|| format!("invalid node port range {node_ports:?}"))?;
        let (lo, hi): (u16, u16) = (
            lo.trim().parse().map_err(|_| "invalid node port range")?,
            hi.trim().parse().map_err(|_| "invalid node port range")?,
        );
        if lo == 0 || lo > hi {
            return Err(format!("invalid node port range {node_ports:?}"));
        }
        Ok(ServiceAllocator { base: u32::from(ip) & mask, prefix_len: len, node_ports: (lo, hi) })
    }

    pub fn cidr(&self) -> String {
        format!("{}/{}", Ipv4Addr::from(self.base), self.prefix_len)
    }

    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix_len)
    }

    /// The first usable address: the `kubernetes` Service's.
    pub fn first_ip(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// Usable offsets are 1..size-1 (not the network or broadcast address).
    fn offset_of(&self, ip: Ipv4Addr) -> Option<u32> {
        let v = u32::from(ip);
        (v > self.base && v < self.base + self.size() - 1).then(|| v - self.base)
    }

    fn static_band(&self) -> u32 {
        (self.size() / 16).clamp(16, 256)
    }

    fn out_of_range(&self, ip: &str) -> String {
        format!(
            "failed to allocate IP {ip}: the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
            self.cidr()
        )
    }
}

fn system_user() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

fn service_target(svc: &Value) -> Target {
    Target::new("", "services", "Service", object::name(svc))
}

fn ip_address_scope(registry: &Registry) -> ApiResult<Scope> {
    let r = registry
        .table
        .lookup("networking.k8s.io", "v1", "ipaddresses")
        .ok_or_else(|| ApiError::internal("the IPAddress resource is not served"))?;
    Ok(Scope { resource: r, namespace: None })
}

struct ReleaseIp(String);
#[async_trait]
impl Undo for ReleaseIp {
    async fn undo(&self, registry: &Registry) {
        release_ip(registry, &self.0).await;
    }
}

struct ReleasePort(u16);
#[async_trait]
impl Undo for ReleasePort {
    async fn undo(&self, registry: &Registry) {
        let _ = registry.store.delete(&format!("{NODE_PORT_PREFIX}{}", self.0), None).await;
    }
}

async fn release_ip(registry: &Registry, ip: &str) {
    let Ok(scope) = ip_address_scope(registry) else { return };
    let user = system_user();
    let ctx = Context::internal(&user, &NoAdmission);
    match registry.delete(&scope, ip, &DeleteOptions::default(), &ctx).await {
        Ok(_) => {}
        Err(e) if e.code == 404 => {}
        Err(e) => tracing::warn!(ip, error = %e, "releasing a cluster IP failed"),
    }
}

pub struct ServiceHooks {
    pub alloc: Arc<ServiceAllocator>,
}

impl ServiceHooks {
    /// Takes `ip` for the Service by creating its IPAddress; false if already taken.
    async fn claim(&self, registry: &Registry, ip: Ipv4Addr, svc: &Value, dry_run: bool) -> ApiResult<bool> {
        let scope = ip_address_scope(registry)?;
        if dry_run {
            return match registry.get(&scope, &ip.to_string()).await {
                Ok(_) => Ok(false),
                Err(e) if e.code == 404 => Ok(true),
                Err(e) => Err(e),
            };
        }
        let obj = json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "IPAddress",
            "metadata": {
                "name": ip.to_string(),
                "labels": {
                    "ipaddress.kubernetes.io/ip-family": "IPv4",
                    "ipaddress.kubernetes.io/managed-by": "ipallocator.k8s.io",
                },
            },
            "spec": {"parentRef": {
                "group": "",
                "resource": "services",
                "namespace": object::meta_str(svc, "namespace").unwrap_or(""),
                "name": object::name(svc),
            }},
        });
        let user = system_user();
        let ctx = Context::internal(&user, &NoAdmission);
        match registry.create(&scope, obj, &ctx).await {
            Ok(_) => Ok(true),
            Err(e) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn allocate_ip(
        &self,
        registry: &Registry,
        svc: &Value,
        requested: Option<&str>,
        dry_run: bool,
    ) -> ApiResult<(Ipv4Addr, Option<Box<dyn Undo>>)> {
        let t = service_target(svc);
        let undo = |ip: Ipv4Addr| (!dry_run).then(|| Box::new(ReleaseIp(ip.to_string())) as Box<dyn Undo>);
        if let Some(req) = requested {
            let invalid = |msg: String| {
                ApiError::invalid(&t, vec![Cause::invalid("spec.clusterIPs", format!("[]string{{\"{req}\"}}"), msg)])
            };
            let ip: Ipv4Addr =
                req.parse().map_err(|_| invalid(format!("failed to allocate IP {req}: not a valid IPv4 address")))?;
            self.alloc.offset_of(ip).ok_or_else(|| invalid(self.alloc.out_of_range(req)))?;
            if !self.claim(registry, ip, svc, dry_run).await? {
                return Err(invalid(format!("failed to allocate IP {req}: provided IP is already allocated")));
            }
            return Ok((ip, undo(ip)));
        }
        // Dynamic: what is taken, from the IPAddress watch cache, then random free picks
        // in the upper band, then the static band; a lost race just tries again.
        let scope = ip_address_scope(registry)?;
        let cache = registry.cache(&scope.resource);
        cache.wait_ready(std::time::Duration::from_secs(3)).await;
        let taken: HashSet<String> =
            cache.snapshot(&scope.resource.key_prefix).objects.iter().map(|o| o.name.clone()).collect();
        let (size, band) = (self.alloc.size(), self.alloc.static_band());
        for (lo, hi) in [(band, size - 1), (1, band)] {
            if lo >= hi {
                continue;
            }
            let free: Vec<u32> = if (hi - lo) as usize <= 4096 {
                (lo..hi).filter(|o| !taken.contains(&Ipv4Addr::from(self.alloc.base + o).to_string())).collect()
            } else {
                let mut rng = rand::rng();
                (0..RANDOM_ATTEMPTS * 4)
                    .map(|_| rng.random_range(lo..hi))
                    .filter(|o| !taken.contains(&Ipv4Addr::from(self.alloc.base + o).to_string()))
                    .collect()
            };
            for offset in free.iter().take(RANDOM_ATTEMPTS) {
                let ip = Ipv4Addr::from(self.alloc.base + offset);
                if self.claim(registry, ip, svc, dry_run).await? {
                    return Ok((ip, undo(ip)));
                }
            }
        }
        Err(ApiError::internal(format!("failed to allocate a serviceIP: range is full ({})", self.alloc.cidr())))
    }

    async fn claim_port(&self, registry: &Registry, port: u16, svc: &Value, dry_run: bool) -> ApiResult<bool> {
        let key = format!("{NODE_PORT_PREFIX}{port}");
        if dry_run {
            return Ok(registry.store.get(&key, 0).await.map_err(|e| ApiError::internal(e.to_string()))?.0.is_none());
        }
        let owner = format!("{}/{}", object::meta_str(svc, "namespace").unwrap_or(""), object::name(svc));
        match registry.store.create(&key, Bytes::from(owner), 0).await {
            Ok(_) => Ok(true),
            Err(StoreError::AlreadyExists(_)) => Ok(false),
            Err(e) => Err(ApiError::internal(e.to_string())),
        }
    }

    /// Gives every port of a NodePort/LoadBalancer Service a node port: the one asked
    /// for, the one it had (on update), or a free one.
    async fn allocate_node_ports(
        &self,
        registry: &Registry,
        svc: &mut Value,
        old: Option<&Value>,
        dry_run: bool,
        undos: &mut Undos,
    ) -> ApiResult<()> {
        let t = service_target(svc);
        let (lo, hi) = self.alloc.node_ports;
        let held: HashSet<u16> = old.map(node_ports).unwrap_or_default().into_iter().collect();
        let snapshot = svc.clone();
        let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) else { return Ok(()) };
        let mut used_here = HashSet::new();
        for (i, p) in ports.iter_mut().enumerate() {
            let field = format!("spec.ports[{i}].nodePort");
            match p.get("nodePort").and_then(Value::as_u64) {
                Some(n) => {
                    let n = n as u16;
                    if n < lo || n > hi {
                        return Err(ApiError::invalid(
                            &t,
                            vec![Cause::invalid(
                                field,
                                n,
                                format!(
                                    "provided port is not in the valid range. The range of valid ports is {lo}-{hi}"
                                ),
                            )],
                        ));
                    }
                    if !used_here.insert(n) {
                        return Err(ApiError::invalid(&t, vec![Cause::duplicate(field, n)]));
                    }
                    if held.contains(&n) {
                        continue;
                    }
                    if !self.claim_port(registry, n, &snapshot, dry_run).await? {
                        return Err(ApiError::invalid(
                            &t,
                            vec![Cause::invalid(field, n, "provided port is already allocated")],
                        ));
                    }
                    if !dry_run {
                        undos.push(Box::new(ReleasePort(n)));
                    }
                }
                None => {
                    let mut got = None;
                    for attempt in 0..(RANDOM_ATTEMPTS * 4) {
                        let n = if attempt < RANDOM_ATTEMPTS {
                            rand::rng().random_range(lo..=hi)
                        } else {
                            lo + ((attempt as u32 * 7919) % (hi - lo + 1) as u32) as u16
                        };
                        if used_here.contains(&n) || held.contains(&n) {
                            continue;
                        }
                        if self.claim_port(registry, n, &snapshot, dry_run).await? {
                            got = Some(n);
                            break;
                        }
                    }
                    let n = got.ok_or_else(|| {
                        ApiError::internal(format!("failed to allocate a nodePort: range {lo}-{hi} is full"))
                    })?;
                    used_here.insert(n);
                    if !dry_run {
                        undos.push(Box::new(ReleasePort(n)));
                    }
                    p["nodePort"] = json!(n);
                }
            }
        }
        Ok(())
    }
}

fn svc_type(svc: &Value) -> &str {
    svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP")
}

fn cluster_ip(svc: &Value) -> Option<&str> {
    svc.pointer("/spec/clusterIP").and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn wants_node_ports(svc: &Value) -> bool {
    match svc_type(svc) {
        "NodePort" => true,
        "LoadBalancer" => svc.pointer("/spec/allocateLoadBalancerNodePorts") != Some(&Value::Bool(false)),
        _ => false,
    }
}

fn node_ports(svc: &Value) -> Vec<u16> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .map(|n| n as u16)
        .collect()
}

fn set_ip(svc: &mut Value, ip: &str) {
    svc["spec"]["clusterIP"] = json!(ip);
    svc["spec"]["clusterIPs"] = json!([ip]);
    if svc.pointer("/spec/ipFamilies").is_none() {
        svc["spec"]["ipFamilies"] = json!(["IPv4"]);
    }
    if svc.pointer("/spec/ipFamilyPolicy").is_none() {
        svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
    }
}

#[async_trait]
impl RestHooks for ServiceHooks {
    async fn before_create(&self, registry: &Registry, svc: &mut Value, dry_run: bool) -> ApiResult<Undos> {
        let mut undos: Undos = Vec::new();
        if svc_type(svc) != "ExternalName" {
            let requested =
                cluster_ip(svc).or_else(|| svc.pointer("/spec/clusterIPs/0").and_then(Value::as_str)).map(String::from);
            if requested.as_deref() == Some("None") {
                set_ip(svc, "None");
            } else {
                let (ip, undo) = self.allocate_ip(registry, svc, requested.as_deref(), dry_run).await?;
                undos.extend(undo);
                set_ip(svc, &ip.to_string());
            }
            if svc.pointer("/spec/internalTrafficPolicy").is_none() {
                svc["spec"]["internalTrafficPolicy"] = json!("Cluster");
            }
        }
        if wants_node_ports(svc) {
            if let Err(e) = self.allocate_node_ports(registry, svc, None, dry_run, &mut undos).await {
                crate::hooks::undo_all(registry, undos).await;
                return Err(e);
            }
            if svc.pointer("/spec/externalTrafficPolicy").is_none() {
                svc["spec"]["externalTrafficPolicy"] = json!("Cluster");
            }
        }
        Ok(undos)
    }

    async fn before_update(
        &self,
        registry: &Registry,
        svc: &mut Value,
        old: &Value,
        dry_run: bool,
    ) -> ApiResult<Undos> {
        let t = service_target(svc);
        let mut undos: Undos = Vec::new();
        let external = svc_type(svc) == "ExternalName";
        match (cluster_ip(old), cluster_ip(svc)) {
            // Omitted on update: keep what was allocated.
            (Some(o), None) if !external => set_ip(svc, o),
            (Some(o), Some(n)) if o != n && !external => {
                return Err(ApiError::invalid(
                    &t,
                    vec![Cause::invalid(
                        "spec.clusterIPs[0]",
                        format!("[]string{{\"{n}\"}}"),
                        "may not change once set",
                    )],
                ));
            }
            (None, requested) if !external => {
                let requested = requested.map(String::from);
                let (ip, undo) = self.allocate_ip(registry, svc, requested.as_deref(), dry_run).await?;
                undos.extend(undo);
                set_ip(svc, &ip.to_string());
            }
            _ => {}
        }
        if external {
            for f in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
                svc["spec"].as_object_mut().map(|m| m.remove(f));
            }
        }
        if wants_node_ports(svc) {
            // Ports that keep their number keep their node port.
            let old_ports: Vec<Value> =
                old.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
            if let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
                for p in ports.iter_mut().filter(|p| p.get("nodePort").is_none()) {
                    if let Some(np) = old_ports
                        .iter()
                        .find(|o| o.get("port") == p.get("port") && o.get("protocol") == p.get("protocol"))
                        .and_then(|o| o.get("nodePort"))
                    {
                        p["nodePort"] = np.clone();
                    }
                }
            }
            if let Err(e) = self.allocate_node_ports(registry, svc, Some(old), dry_run, &mut undos).await {
                crate::hooks::undo_all(registry, undos).await;
                return Err(e);
            }
        } else if let Some(ports) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ports {
                p.as_object_mut().map(|m| m.remove("nodePort"));
            }
        }
        Ok(undos)
    }

    async fn after_update(&self, registry: &Registry, new: &Value, old: &Value) {
        if let Some(ip) = cluster_ip(old).filter(|ip| *ip != "None" && cluster_ip(new) != Some(*ip)) {
            release_ip(registry, ip).await;
        }
        let keep: HashSet<u16> = node_ports(new).into_iter().collect();
        for n in node_ports(old).into_iter().filter(|n| !keep.contains(n)) {
            ReleasePort(n).undo(registry).await;
        }
    }

    async fn after_delete(&self, registry: &Registry, old: &Value) {
        if let Some(ip) = cluster_ip(old).filter(|ip| *ip != "None") {
            release_ip(registry, ip).await;
        }
        for n in node_ports(old) {
            ReleasePort(n).undo(registry).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_bands() {
        let a = ServiceAllocator::new("10.43.0.0/16", "30000-32767").unwrap();
        assert_eq!(a.first_ip(), Ipv4Addr::new(10, 43, 0, 1));
        assert_eq!(a.static_band(), 256);
        assert_eq!(a.offset_of("10.43.0.0".parse().unwrap()), None, "network address");
        assert_eq!(a.offset_of("10.43.255.255".parse().unwrap()), None, "broadcast address");
        assert_eq!(a.offset_of("10.43.1.2".parse().unwrap()), Some(258));
        assert_eq!(a.offset_of("10.44.0.1".parse().unwrap()), None);
        let small = ServiceAllocator::new("10.0.0.0/24", "30000-30001").unwrap();
        assert_eq!(small.static_band(), 16);
        assert!(ServiceAllocator::new("10.0.0.0/33", "1-2").is_err());
        assert!(ServiceAllocator::new("10.0.0.0/16", "5-1").is_err());
    }
}
