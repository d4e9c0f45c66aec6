//! Per-kind semantics, where kinds differ from the generic registry: name rules,
//! defaulting, status handling, validation, selectable fields, deletion.
//!
//! Upstream's registry strategies are the model. A kind without an entry here gets the
//! generic behaviour, which is right for most.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::Cause;
use crate::kinds;
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
    /// What a create records about its requester (CSRs: spec.username and groups).
    fn prepare_for_create_by(&self, _obj: &mut Value, _user: &crate::user::UserInfo) {}
    /// Whether creates are refused for now (a CustomResourceDefinition being deleted:
    /// upstream answers 405 until its objects are gone).
    fn refuses_creates(&self) -> bool {
        false
    }
    /// Defaulting on update; `old` is what is stored.
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }
    /// Warnings for the client about a valid object (old: the object being updated).
    fn warnings(&self, _obj: &Value, _old: Option<&Value>) -> Vec<String> {
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
    /// Defaulting of a subresource write, after its fields were applied to the stored object.
    fn prepare_subresource_update(&self, _subresource: &str, _new: &mut Value, _old: &Value) {}
    /// Validation of a subresource write (after its fields were applied to the stored object).
    fn validate_subresource_update(&self, _subresource: &str, _new: &Value, _old: &Value) -> Vec<Cause> {
        Vec::new()
    }
    /// Objects of this kind expire after the server's object TTL (Events do).
    fn expires(&self) -> bool {
        false
    }
    /// Called on delete before finalizers are considered; may mark the object.
    /// `grace_period` is the one the request asked for, if any. A kept object may carry
    /// the grace period it gets in metadata.deletionGracePeriodSeconds.
    fn on_delete(&self, _obj: &mut Value, _grace_period: Option<i64>) -> DeleteAction {
        DeleteAction::Remove
    }
    /// The apiVersion objects are stored in, for kinds whose versions are told apart
    /// only by apiVersion (custom resources: `None` conversion). Built-in kinds with
    /// real conversions use `crate::conversion` instead.
    fn storage_api_version(&self) -> Option<&str> {
        None
    }
    /// Changes made to every object read from storage (custom resources: schema
    /// defaults, as upstream defaults on read).
    fn on_read(&self, _obj: &mut Value) {}
    /// Whether `on_read` does anything (reads of other kinds skip the decoding).
    fn changes_on_read(&self) -> bool {
        false
    }
    /// The fields the kind has no place for, for kinds without a generated Rust type
    /// (custom resources: from their schema). None: the generated type decides.
    fn unknown_fields(&self, _obj: &Value) -> Option<Vec<crate::fieldvalidation::UnknownField>> {
        None
    }
    /// Where the scale subresource reads and writes replicas (custom resources name
    /// their paths); None: spec.replicas, status.replicas and spec.selector.
    fn scale_paths(&self) -> Option<&ScalePaths> {
        None
    }
    /// Printer columns of server-side tables, for kinds that declare their own
    /// (custom resources' additionalPrinterColumns). None: `crate::table`'s for the kind.
    fn printer_columns(&self) -> Option<&[crate::table::PrinterColumn]> {
        None
    }
    /// The OpenAPI v3 schema of kinds without a generated one (custom resources'
    /// openAPIV3Schema), for the OpenAPI documents.
    fn openapi_schema(&self) -> Option<&Value> {
        None
    }
    /// The structural schema server-side apply merges by (custom resources' list and
    /// map types); None: the generated schema facts of the kind.
    fn structural_schema(&self) -> Option<&crate::crd::schema::Schema> {
        None
    }
}

/// A custom resource's scale subresource paths, as JSON pointers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
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

/// ResourceSlices: generational, listed by node and driver (kubelets list their own).
struct ResourceSlices;
impl Strategy for ResourceSlices {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.nodeName", "spec.nodeName"), ("spec.driver", "spec.driver")]
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
    fn on_delete(&self, obj: &mut Value, _grace_period: Option<i64>) -> DeleteAction {
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
    fn warnings(&self, obj: &Value, _old: Option<&Value>) -> Vec<String> {
        kinds::warnings::pod("", obj)
    }
    fn tracks_generation(&self) -> bool {
        true
    }
    /// Upstream's graceful deletion: a pod on a node keeps running for its grace period
    /// (the request's, else spec.terminationGracePeriodSeconds, else 30 s) until the node
    /// agent finishes it or a zero-grace delete forces it; unscheduled and finished pods
    /// go at once.
    fn on_delete(&self, pod: &mut Value, grace_period: Option<i64>) -> DeleteAction {
        let on_node = pod.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let finished = matches!(pod.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
        let grace = grace_period
            .or_else(|| pod.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(30);
        if !on_node || finished || grace <= 0 {
            return DeleteAction::Remove;
        }
        let current = pod.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
        // A second delete may shorten the grace period, never lengthen it.
        let grace = current.map_or(grace, |c| c.min(grace));
        crate::object::meta_mut(pod).insert("deletionGracePeriodSeconds".into(), json!(grace));
        DeleteAction::Keep
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
        // The new containers are validated with the defaults they would get applied.
        causes.extend(kinds::pod::validate_with_defaults(new));
        causes
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        kinds::pod::default_pod(obj);
        kinds::pod::admit_new_pod(obj);
        let qos = kinds::pod::qos_class(obj);
        obj["status"] = json!({"phase": "Pending", "qosClass": qos});
    }
    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        kinds::pod::default_pod(new);
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kinds::pod::validate_pod(obj)
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
            for f in ["activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds", "schedulingGates"] {
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
    // Scheduling gates may only be removed (pod scheduling readiness).
    let gates = |v: &Value| v.pointer("/spec/schedulingGates").and_then(Value::as_array).cloned().unwrap_or_default();
    let old_gates = gates(old);
    for gate in gates(new).iter().filter(|g| !old_gates.contains(g)) {
        let name = gate.get("name").and_then(Value::as_str).unwrap_or_default();
        causes.push(Cause::forbidden(
            "spec.schedulingGates",
            format!("only deletion is allowed, but found new scheduling gate '{name}'"),
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
        kinds::config::default_secret(obj);
    }
    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        kinds::config::default_secret(new);
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kinds::config::validate_secret(obj)
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        kinds::config::validate_secret_update(new, old)
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("type", "type")]
    }
}

struct ConfigMaps;
impl Strategy for ConfigMaps {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kinds::config::validate_config_map(obj)
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        kinds::config::validate_config_map_update(new, old)
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
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        drop_type_dependent_fields(new, old);
    }
    fn validate(&self, svc: &Value) -> Vec<Cause> {
        validate_service(svc)
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.clusterIP", "spec.clusterIP"), ("spec.type", "spec.type")]
    }
}

/// Upstream's dropTypeDependentFields: a Service switching to a type that has no use for
/// a field loses it, when the client left it as it was (a value the client changed is
/// theirs, and validation judges it). So `type: ClusterIP` on a former LoadBalancer
/// needs no clearing of its node ports by hand.
fn drop_type_dependent_fields(new: &mut Value, old: &Value) {
    let type_of = |v: &Value| v.pointer("/spec/type").and_then(Value::as_str).unwrap_or("ClusterIP").to_string();
    let (new_type, old_type) = (type_of(new), type_of(old));
    if new_type == old_type {
        return;
    }
    // NodePort and LoadBalancer Services have node ports and are reachable from outside.
    let external = |t: &str| t == "NodePort" || t == "LoadBalancer";
    let node_ports_unchanged = node_port_values(new) == node_port_values(old);
    let before = new.clone();
    let unchanged = |field: &str| before.pointer(field) == old.pointer(field);
    let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) else { return };
    if external(&old_type) && !external(&new_type) && node_ports_unchanged {
        for p in spec.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
            p.as_object_mut().map(|m| m.remove("nodePort"));
        }
    }
    if new_type != "LoadBalancer" {
        for field in ["healthCheckNodePort", "allocateLoadBalancerNodePorts", "loadBalancerClass"] {
            if unchanged(&format!("/spec/{field}")) {
                spec.remove(field);
            }
        }
    }
    if external(&old_type) && !external(&new_type) && unchanged("/spec/externalTrafficPolicy") {
        spec.remove("externalTrafficPolicy");
    }
}

fn node_port_values(svc: &Value) -> Vec<Option<Value>> {
    let ports = svc.pointer("/spec/ports").and_then(Value::as_array);
    ports.into_iter().flatten().map(|p| p.get("nodePort").cloned()).collect()
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

fn no_defaults(_: &mut Value) {}
fn no_update_prep(_: &mut Value, _: &Value) {}
fn no_causes(_: &Value) -> Vec<Cause> {
    Vec::new()
}
fn no_update_causes(_: &Value, _: &Value) -> Vec<Cause> {
    Vec::new()
}

/// A kind whose semantics are its defaults and validation (`crate::kinds`): the
/// defaults apply to every create and update body, as upstream's decoding applies
/// them; `on_create`/`on_update` are the strategy's own preparation.
struct Kind {
    generation: bool,
    name_rule: NameRule,
    upsert: bool,
    selectable: &'static [(&'static str, &'static str)],
    defaults: fn(&mut Value),
    on_create: fn(&mut Value),
    on_update: fn(&mut Value, &Value),
    validate: fn(&Value) -> Vec<Cause>,
    validate_update: fn(&Value, &Value) -> Vec<Cause>,
    /// Where the kind keeps a pod template, for upstream's pod warnings.
    template: Option<&'static str>,
    /// What a status write may change.
    status_fields: &'static [&'static str],
}

impl Kind {
    const BASE: Kind = Kind {
        generation: false,
        name_rule: NameRule::Subdomain,
        upsert: false,
        selectable: &[],
        defaults: no_defaults,
        on_create: no_defaults,
        on_update: no_update_prep,
        validate: no_causes,
        validate_update: no_update_causes,
        template: None,
        status_fields: &["/status"],
    };
    /// A kind that keeps metadata.generation.
    const GENERATIONAL: Kind = Kind { generation: true, ..Kind::BASE };
}

impl Strategy for Kind {
    fn name_rule(&self) -> NameRule {
        self.name_rule
    }
    fn tracks_generation(&self) -> bool {
        self.generation
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        (self.defaults)(obj);
        (self.on_create)(obj);
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        (self.defaults)(new);
        (self.on_update)(new, old);
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        (self.validate)(obj)
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        (self.validate_update)(new, old)
    }
    fn allow_create_on_update(&self) -> bool {
        self.upsert
    }
    fn warnings(&self, obj: &Value, old: Option<&Value>) -> Vec<String> {
        self.template.map(|t| kinds::warnings::template(obj, old, t)).unwrap_or_default()
    }
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        self.selectable
    }
    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        (subresource == "status").then_some(self.status_fields)
    }
}

fn pvc_create(obj: &mut Value) {
    kinds::storage::prepare_pvc_create(obj);
}

fn ingress_validate(obj: &Value) -> Vec<Cause> {
    let mut causes = kinds::networking::validate_ingress(obj);
    causes.extend(kinds::networking::validate_ingress_create(obj));
    causes
}

fn role_binding_validate(obj: &Value) -> Vec<Cause> {
    kinds::rbac::validate_binding(obj, false)
}

fn cluster_role_binding_validate(obj: &Value) -> Vec<Cause> {
    kinds::rbac::validate_binding(obj, true)
}

const REPLICAS: &[(&str, &str)] = &[("status.replicas", "status.replicas")];

/// The strategy of a kind with defaults and validation in `crate::kinds`.
fn validated_kind(group: &str, kind: &str) -> Option<Kind> {
    use kinds::{apps, batch, misc, networking, policy, rbac, storage};
    let k = match (group, kind) {
        ("", "ReplicationController") => Kind {
            selectable: REPLICAS,
            defaults: apps::default_replication_controller,
            validate: apps::validate_replication_controller,
            template: Some("/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("", "PodTemplate") => Kind {
            defaults: apps::default_pod_template_object,
            validate: apps::validate_pod_template_object,
            template: Some("/template"),
            ..Kind::BASE
        },
        ("", "PersistentVolumeClaim") => Kind {
            defaults: storage::default_pvc,
            on_create: pvc_create,
            validate: storage::validate_pvc,
            validate_update: storage::validate_pvc_update,
            ..Kind::BASE
        },
        ("apps", "Deployment") => Kind {
            defaults: apps::default_deployment,
            on_update: apps::deployment_generation,
            validate: apps::validate_deployment,
            validate_update: apps::validate_deployment_update,
            template: Some("/spec/template"),
            // As upstream's deploymentStatusStrategy (only spec and labels are kept): the
            // controller records the revision annotation with its status write.
            status_fields: &["/status", "/metadata/annotations"],
            ..Kind::GENERATIONAL
        },
        ("apps", "ReplicaSet") => Kind {
            selectable: REPLICAS,
            defaults: apps::default_replica_set,
            validate: apps::validate_replica_set,
            validate_update: apps::validate_replica_set_update,
            template: Some("/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("apps", "DaemonSet") => Kind {
            defaults: apps::default_daemon_set,
            validate: apps::validate_daemon_set,
            validate_update: apps::validate_daemon_set_update,
            template: Some("/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("apps", "StatefulSet") => Kind {
            name_rule: NameRule::Label,
            defaults: apps::default_stateful_set,
            validate: apps::validate_stateful_set,
            validate_update: apps::validate_stateful_set_update,
            template: Some("/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("batch", "Job") => Kind {
            selectable: &[("status.successful", "status.successful")],
            defaults: batch::default_job,
            on_create: batch::generate_selector,
            validate: batch::validate_job,
            validate_update: batch::validate_job_update,
            template: Some("/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("batch", "CronJob") => Kind {
            defaults: batch::default_cron_job,
            validate: batch::validate_cron_job,
            template: Some("/spec/jobTemplate/spec/template"),
            ..Kind::GENERATIONAL
        },
        ("policy", "PodDisruptionBudget") => Kind { validate: policy::validate_pdb, ..Kind::GENERATIONAL },
        ("networking.k8s.io", "NetworkPolicy") => Kind {
            defaults: networking::default_network_policy,
            validate: networking::validate_network_policy,
            ..Kind::GENERATIONAL
        },
        ("networking.k8s.io", "Ingress") => Kind { validate: ingress_validate, ..Kind::GENERATIONAL },
        ("rbac.authorization.k8s.io", "Role") => {
            Kind { name_rule: NameRule::PathSegment, validate: rbac::validate_role, ..Kind::BASE }
        }
        ("rbac.authorization.k8s.io", "ClusterRole") => {
            Kind { name_rule: NameRule::PathSegment, validate: rbac::validate_cluster_role, ..Kind::BASE }
        }
        ("rbac.authorization.k8s.io", "RoleBinding") => Kind {
            name_rule: NameRule::PathSegment,
            defaults: rbac::default_binding,
            validate: role_binding_validate,
            validate_update: rbac::validate_binding_update,
            ..Kind::BASE
        },
        ("rbac.authorization.k8s.io", "ClusterRoleBinding") => Kind {
            name_rule: NameRule::PathSegment,
            defaults: rbac::default_binding,
            validate: cluster_role_binding_validate,
            validate_update: rbac::validate_binding_update,
            ..Kind::BASE
        },
        ("coordination.k8s.io", "Lease") => Kind { upsert: true, validate: misc::validate_lease, ..Kind::BASE },
        ("scheduling.k8s.io", "PriorityClass") => Kind {
            defaults: misc::default_priority_class,
            validate: misc::validate_priority_class,
            validate_update: misc::validate_priority_class_update,
            ..Kind::BASE
        },
        ("storage.k8s.io", "StorageClass") => Kind {
            defaults: storage::default_storage_class,
            validate: storage::validate_storage_class,
            validate_update: storage::validate_storage_class_update,
            ..Kind::BASE
        },
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => Kind {
            defaults: kinds::webhooks::default_mutating,
            validate: kinds::webhooks::validate_mutating,
            ..Kind::GENERATIONAL
        },
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => Kind {
            defaults: kinds::webhooks::default_validating,
            validate: kinds::webhooks::validate_validating,
            ..Kind::GENERATIONAL
        },
        _ => return None,
    };
    Some(k)
}

struct Csrs;
impl Strategy for Csrs {
    fn selectable_fields(&self) -> &'static [(&'static str, &'static str)] {
        &[("spec.signerName", "spec.signerName")]
    }
    fn prepare_for_create_by(&self, obj: &mut Value, user: &crate::user::UserInfo) {
        kinds::certificates::set_requester(obj, user);
    }
    /// The spec is fixed once created; status changes through its subresources only.
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        match old.get("spec") {
            Some(spec) => new["spec"] = spec.clone(),
            None => {
                new.as_object_mut().map(|m| m.remove("spec"));
            }
        }
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kinds::certificates::validate_csr(obj)
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        kinds::certificates::validate_csr_update("", new, old)
    }
    fn subresource_fields(&self, subresource: &str) -> Option<&'static [&'static str]> {
        match subresource {
            "status" => Some(&["/status"]),
            // Approve or deny: the conditions, nothing else.
            "approval" => Some(&["/status/conditions"]),
            _ => None,
        }
    }
    fn prepare_subresource_update(&self, _subresource: &str, new: &mut Value, old: &Value) {
        kinds::certificates::condition_timestamps(new, old, &crate::object::now_rfc3339());
    }
    fn validate_subresource_update(&self, subresource: &str, new: &Value, old: &Value) -> Vec<Cause> {
        kinds::certificates::validate_csr_update(subresource, new, old)
    }
}

/// CustomResourceDefinitions: upstream's apiextensions strategy; the API server's CRD
/// loop writes status (names, conditions) through /status.
struct Crds;
impl Strategy for Crds {
    fn tracks_generation(&self) -> bool {
        true
    }
    fn prepare_for_create(&self, obj: &mut Value) {
        kinds::apiextensions::default_crd(obj);
        kinds::apiextensions::prepare_crd_create(obj);
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        kinds::apiextensions::default_crd(new);
        kinds::apiextensions::prepare_crd_update(new, old);
    }
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kinds::apiextensions::validate_crd(obj)
    }
    fn validate_update(&self, new: &Value, old: &Value) -> Vec<Cause> {
        kinds::apiextensions::validate_crd_update(new, old)
    }
    fn on_delete(&self, obj: &mut Value, _grace_period: Option<i64>) -> DeleteAction {
        kinds::apiextensions::on_delete(obj)
    }
}

/// The strategy for a built-in kind.
pub fn for_kind(group: &str, kind: &str) -> Arc<dyn Strategy> {
    if let Some(k) = validated_kind(group, kind) {
        return Arc::new(k);
    }
    match (group, kind) {
        ("", "Namespace") => Arc::new(Namespaces),
        ("", "Pod") => Arc::new(Pods),
        ("", "Node") => Arc::new(Nodes),
        ("", "Secret") => Arc::new(Secrets),
        ("", "ConfigMap") => Arc::new(ConfigMaps),
        ("", "Service") => Arc::new(Services),
        ("" | "events.k8s.io", "Event") => Arc::new(Events),
        ("", "Endpoints") => Arc::new(UpsertOnPut),
        ("certificates.k8s.io", "CertificateSigningRequest") => Arc::new(Csrs),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Arc::new(Crds),
        ("rbac.authorization.k8s.io", _) => Arc::new(PathSegmentNames),
        ("resource.k8s.io", "ResourceSlice") => Arc::new(ResourceSlices),
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
    fn scheduling_gates_may_only_be_removed() {
        let pod = |gates: Value| json!({"spec": {"containers": [], "schedulingGates": gates}});
        let old = pod(json!([{"name": "a"}, {"name": "b"}]));
        assert!(validate_pod_update(&pod(json!([{"name": "b"}])), &old).is_empty());
        assert!(validate_pod_update(&pod(Value::Null), &old).is_empty());
        let causes = validate_pod_update(&pod(json!([{"name": "c"}])), &old);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.schedulingGates");
    }

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
        assert_eq!(s.on_delete(&mut ns, None), DeleteAction::Keep);
        assert_eq!(ns["status"]["phase"], "Terminating");
    }

    #[test]
    fn deployment_status_writes_carry_annotations_as_upstream() {
        assert_eq!(
            for_kind("apps", "Deployment").subresource_fields("status"),
            Some(&["/status", "/metadata/annotations"][..])
        );
        assert_eq!(for_kind("apps", "ReplicaSet").subresource_fields("status"), Some(&["/status"][..]));
    }

    #[test]
    fn a_service_leaving_node_ports_behind_loses_the_ones_it_kept() {
        let old = json!({"spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Cluster",
            "allocateLoadBalancerNodePorts": true, "ports": [{"port": 80, "nodePort": 30080}]}});
        let mut new = old.clone();
        new["spec"]["type"] = json!("ClusterIP");
        drop_type_dependent_fields(&mut new, &old);
        assert_eq!(new, json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}));
        // A node port the client changed stays, for validation to judge.
        let mut changed = old.clone();
        changed["spec"]["type"] = json!("ClusterIP");
        changed["spec"]["ports"][0]["nodePort"] = json!(30081);
        drop_type_dependent_fields(&mut changed, &old);
        assert_eq!(changed["spec"]["ports"][0]["nodePort"], json!(30081));
        // NodePort to LoadBalancer keeps everything.
        let np = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}});
        let mut lb = np.clone();
        lb["spec"]["type"] = json!("LoadBalancer");
        drop_type_dependent_fields(&mut lb, &np);
        assert_eq!(lb["spec"]["ports"][0]["nodePort"], json!(30080));
    }
}
