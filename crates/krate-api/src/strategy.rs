//! Per-kind semantics, where kinds differ from the generic registry: name rules,
//! defaulting, status handling, validation, selectable fields, deletion.
//!
//! Upstream's registry strategies are the model. A kind without an entry here gets the
//! generic behaviour, which is right for most.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::Cause;
use crate::validation::NameRule;

/// What deleting an object does beyond removing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteAction {
    /// Remove it now (finalizers permitting).
    Remove,
    /// Keep it, marked as deleting, until something (a controller, the node) finishes.
    Keep,
}

pub trait Strategy: Send + Sync {
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }
    /// Whether metadata.generation is kept (set to 1, bumped on spec changes).
    fn tracks_generation(&self) -> bool {
        false
    }
    /// Whether a create drops the status a client sent (for kinds with a status
    /// subresource; controllers own status).
    fn resets_status_on_create(&self) -> bool {
        true
    }
    /// Defaulting on create, after generic metadata has been set.
    fn prepare_for_create(&self, _obj: &mut Value) {}
    /// Defaulting on update; `old` is what is stored.
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<Cause> {
        Vec::new()
    }
    /// Whether a PUT of a missing object creates it.
    fn allow_create_on_update(&self) -> bool {
        false
    }
    /// Fields usable in field selectors besides metadata.name and metadata.namespace:
    /// (selector label, dotted path in the object).
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }
    /// The fields a subresource write may change (JSON pointers); None: no such
    /// writable subresource. Everything else is kept from the stored object.
    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        (subresource == "status").then_some(&["/status"][..])
    }
    /// Validation of a subresource write (after its fields were applied to the stored object).
    fn validate_subresource_update(&self, _subresource: &str, _new: &Value, _old: &Value) -> Vec<Cause> {
        Vec::new()
    }
    /// Objects of this kind expire after the server's object TTL (Events do).
    fn expires(&self) -> bool {
        false
    }
    /// Called on delete before finalizers are considered; may mark the object.
    fn on_delete(&self, _obj: &mut Value) -> DeleteAction {
        DeleteAction::Remove
    }
}

/// The value of a dotted path, as field selectors compare it ("" when absent).
pub fn field_value(obj: &Value, path: &str) -> String {
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return String::new(),
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

struct Generic;
impl Strategy for Generic {}

/// Kinds that keep metadata.generation.
struct Generational;
impl Strategy for Generational {
    fn tracks_generation(&self) -> bool {
        true
    }
}

struct PathSegmentNames;
impl Strategy for PathSegmentNames {
    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }
}

struct Namespaces;
impl Strategy for Namespaces {
    fn name_rule(&self) -> NameRule {
        NameRule::Label
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.pointer("/spec/finalizers").is_none() {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
        }
        obj["status"] = json!({"phase": "Active"});
        // Upstream labels every namespace with its own name.
        let name = obj.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
        let labels = &mut obj["metadata"]["labels"];
        if !labels.is_object() {
            *labels = json!({});
        }
        labels["kubernetes.io/metadata.name"] = name;
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // spec.finalizers change only through /finalize.
        new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
        let name = new.pointer("/metadata/name").cloned().unwrap_or(Value::Null);
        if !new["metadata"]["labels"].is_object() {
            new["metadata"]["labels"] = json!({});
        }
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = name;
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("status.phase", "status.phase")]
    }
    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        match subresource {
            "status" => Some(&["/status"]),
            "finalize" => Some(&["/spec/finalizers"]),
            _ => None,
        }
    }
    fn on_delete(&self, obj: &mut Value) -> DeleteAction {
        let finalizing = obj.pointer("/spec/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty());
        if finalizing {
            obj["status"]["phase"] = json!("Terminating");
            DeleteAction::Keep
        } else {
            DeleteAction::Remove
        }
    }
}

struct Pods;
impl Strategy for Pods {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        match subresource {
            "status" => Some(&["/status"]),
            "ephemeralcontainers" => Some(&["/spec/ephemeralContainers"]),
            // Written by the registry's bind, never sent by clients as a PUT.
            "binding" => Some(&["/spec/nodeName", "/status", "/metadata/annotations"]),
            _ => None,
        }
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        validate_pod_update(new, old)
    }
    fn validate_subresource_update(&self, subresource: &str, new: &Value, old: &Value) -> Vec<Cause> {
        if subresource != "ephemeralcontainers" {
            return Vec::new();
        }
        let list =
            |v: &Value| v.pointer("/spec/ephemeralContainers").and_then(Value::as_array).cloned().unwrap_or_default();
        let (old_eph, new_eph) = (list(old), list(new));
        let mut causes = Vec::new();
        if new_eph.len() < old_eph.len() || new_eph.iter().zip(&old_eph).any(|(n, o)| n != o) {
            causes.push(Cause::forbidden(
                "spec.ephemeralContainers",
                "existing ephemeral containers may not be changed or removed",
            ));
        }
        for (i, c) in new_eph.iter().enumerate().skip(old_eph.len()) {
            for field in ["name", "image"] {
                if c.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                    causes.push(Cause::required(format!("spec.ephemeralContainers[{i}].{field}"), ""));
                }
            }
        }
        causes
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Pending"});
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("spec.nodeName", "spec.nodeName"),
            ("spec.restartPolicy", "spec.restartPolicy"),
            ("spec.schedulerName", "spec.schedulerName"),
            ("spec.serviceAccountName", "spec.serviceAccountName"),
            ("spec.hostNetwork", "spec.hostNetwork"),
            ("status.phase", "status.phase"),
            ("status.podIP", "status.podIP"),
            ("status.nominatedNodeName", "status.nominatedNodeName"),
        ]
    }
}

/// Upstream's rule: a pod's spec is fixed once created, but for container images, the
/// active deadline, added tolerations and the grace period. Ephemeral containers are
/// added through their own subresource only.
fn validate_pod_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let neutral = |v: &Value| -> Value {
        let mut spec = v.get("spec").cloned().unwrap_or(Value::Null);
        for list in ["containers", "initContainers"] {
            if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs {
                    c.as_object_mut().map(|m| m.remove("image"));
                }
            }
        }
        if let Some(m) = spec.as_object_mut() {
            for f in ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds"] {
                m.remove(f);
            }
        }
        spec
    };
    if neutral(new) != neutral(old) {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
    let old_tol = old.pointer("/spec/tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    let new_tol = new.pointer("/spec/tolerations").and_then(Value::as_array).cloned().unwrap_or_default();
    if old_tol.iter().any(|t| !new_tol.contains(t)) {
        causes.push(Cause::forbidden(
            "spec.tolerations",
            "existing toleration can not be modified except its tolerationSeconds",
        ));
    }
    causes
}

struct Nodes;
impl Strategy for Nodes {
    /// The node agent registers its node with status filled in.
    fn resets_status_on_create(&self) -> bool {
        false
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.unschedulable", "spec.unschedulable")]
    }
}

struct Secrets;
impl Strategy for Secrets {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
            obj["type"] = json!("Opaque");
        }
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if new.get("type") != old.get("type") {
            causes.push(Cause::invalid("type", field_value(new, "type"), "field is immutable"));
        }
        if old.get("immutable") == Some(&Value::Bool(true))
            && (new.get("data") != old.get("data") || new.get("immutable") != old.get("immutable"))
        {
            causes.push(Cause::forbidden("data", "field is immutable when `immutable` is set"));
        }
        causes
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("type", "type")]
    }
}

struct ConfigMaps;
impl Strategy for ConfigMaps {
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        let locked = old.get("immutable") == Some(&Value::Bool(true));
        let changed = ["data", "binaryData", "immutable"].iter().any(|f| new.get(f) != old.get(f));
        if locked && changed {
            vec![Cause::forbidden("data", "field is immutable when `immutable` is set")]
        } else {
            vec![]
        }
    }
}

struct Services;
impl Strategy for Services {
    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035Label
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.pointer("/spec/type").is_none() {
            obj["spec"]["type"] = json!("ClusterIP");
        }
        if obj.pointer("/spec/sessionAffinity").is_none() {
            obj["spec"]["sessionAffinity"] = json!("None");
        }
        // Ports default their protocol and target port, as upstream's defaulting does.
        if let Some(ports) = obj.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for p in ports {
                if p.get("protocol").is_none() {
                    p["protocol"] = json!("TCP");
                }
                if p.get("targetPort").is_none()
                    && let Some(port) = p.get("port").cloned()
                {
                    p["targetPort"] = port;
                }
            }
        }
        obj["status"] = json!({"loadBalancer": {}});
    }
    fn validate(&self, svc: &Value) -> Vec<Cause> {
        validate_service(svc)
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.clusterIP", "spec.clusterIP"), ("spec.type", "spec.type")]
    }
}

/// Upstream's ValidateService, for the fields clients get wrong most.
fn validate_service(svc: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let ty = svc.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP");
    const TYPES: [&str; 4] = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !TYPES.contains(&ty) {
        causes.push(Cause::not_supported("spec.type", ty, &TYPES));
        return causes;
    }
    let headless = svc.pointer("/spec/clusterIP").and_then(Value::as_str) == Some("None");
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array).cloned().unwrap_or_default();
    if ty == "ExternalName" {
        if svc.pointer("/spec/externalName").and_then(Value::as_str).is_none_or(str::is_empty) {
            causes.push(Cause::required("spec.externalName", ""));
        }
    } else if ports.is_empty() && !headless {
        causes.push(Cause::required("spec.ports", ""));
    }
    let mut names = std::collections::HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = |f: &str| format!("spec.ports[{i}].{f}");
        let name = p.get("name").and_then(Value::as_str).unwrap_or("");
        if ports.len() > 1 && name.is_empty() {
            causes.push(Cause::required(at("name"), ""));
        } else if !name.is_empty() && !names.insert(name.to_string()) {
            causes.push(Cause::duplicate(at("name"), name));
        }
        match p.get("port").and_then(Value::as_i64) {
            Some(n) if (1..=65535).contains(&n) => {}
            Some(n) => causes.push(Cause::invalid(at("port"), n, "must be between 1 and 65535, inclusive")),
            None => causes.push(Cause::required(at("port"), "")),
        }
        let proto = p.get("protocol").and_then(Value::as_str).unwrap_or("TCP");
        if !["TCP", "UDP", "SCTP"].contains(&proto) {
            causes.push(Cause::not_supported(at("protocol"), proto, &["SCTP", "TCP", "UDP"]));
        }
        if p.get("nodePort").is_some_and(|n| !n.is_null()) && (ty == "ClusterIP" || ty == "ExternalName") {
            causes.push(Cause::forbidden(at("nodePort"), format!("may not be used when `type` is '{ty}'")));
        }
    }
    causes
}

struct Events;
impl Strategy for Events {
    fn allow_create_on_update(&self) -> bool {
        true
    }
    fn expires(&self) -> bool {
        true
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[
            ("involvedObject.kind", "involvedObject.kind"),
            ("involvedObject.namespace", "involvedObject.namespace"),
            ("involvedObject.name", "involvedObject.name"),
            ("involvedObject.uid", "involvedObject.uid"),
            ("involvedObject.apiVersion", "involvedObject.apiVersion"),
            ("involvedObject.resourceVersion", "involvedObject.resourceVersion"),
            ("involvedObject.fieldPath", "involvedObject.fieldPath"),
            ("reason", "reason"),
            ("reportingComponent", "reportingComponent"),
            ("source", "source.component"),
            ("type", "type"),
        ]
    }
}

struct UpsertOnPut;
impl Strategy for UpsertOnPut {
    fn allow_create_on_update(&self) -> bool {
        true
    }
}

struct ReplicaCounting;
impl Strategy for ReplicaCounting {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("status.replicas", "status.replicas")]
    }
}

struct Jobs;
impl Strategy for Jobs {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("status.successful", "status.successful")]
    }
}

struct Csrs;
impl Strategy for Csrs {
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.signerName", "spec.signerName")]
    }
}

/// The strategy for a built-in kind.
pub fn for_kind(group: &str, kind: &str) -> Arc<dyn Strategy> {
    match (group, kind) {
        ("", "Namespace") => Arc::new(Namespaces),
        ("", "Pod") => Arc::new(Pods),
        ("", "Node") => Arc::new(Nodes),
        ("", "Secret") => Arc::new(Secrets),
        ("", "ConfigMap") => Arc::new(ConfigMaps),
        ("", "Service") => Arc::new(Services),
        ("" | "events.k8s.io", "Event") => Arc::new(Events),
        ("", "Endpoints") | ("coordination.k8s.io", "Lease") => Arc::new(UpsertOnPut),
        ("", "ReplicationController") | ("apps", "ReplicaSet") => Arc::new(ReplicaCounting),
        ("batch", "Job") => Arc::new(Jobs),
        ("certificates.k8s.io", "CertificateSigningRequest") => Arc::new(Csrs),
        ("rbac.authorization.k8s.io", _) => Arc::new(PathSegmentNames),
        ("apps", _)
        | ("batch", _)
        | ("autoscaling", _)
        | ("policy", "PodDisruptionBudget")
        | ("networking.k8s.io", "Ingress" | "NetworkPolicy")
        | ("apiextensions.k8s.io", _)
        | ("admissionregistration.k8s.io", _)
        | ("resource.k8s.io", _) => Arc::new(Generational),
        _ => Arc::new(Generic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_values_render_like_upstream() {
        let pod = json!({"spec": {"nodeName": "n1", "hostNetwork": true}, "status": {"phase": "Running"}});
        assert_eq!(field_value(&pod, "spec.nodeName"), "n1");
        assert_eq!(field_value(&pod, "spec.hostNetwork"), "true");
        assert_eq!(field_value(&pod, "status.podIP"), "");
    }

    #[test]
    fn namespaces_start_active_and_terminate_with_finalizers() {
        let s = for_kind("", "Namespace");
        let mut ns = json!({"metadata": {"name": "team-a"}});
        s.prepare_for_create(&mut ns);
        assert_eq!(ns["status"]["phase"], "Active");
        assert_eq!(ns["metadata"]["labels"]["kubernetes.io/metadata.name"], "team-a");
        assert_eq!(s.on_delete(&mut ns), DeleteAction::Keep);
        assert_eq!(ns["status"]["phase"], "Terminating");
    }
}
