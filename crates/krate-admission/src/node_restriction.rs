//! NodeRestriction, as upstream's plugin: a kubelet (user system:node:NAME in group
//! system:nodes) may change only its own Node and Lease, create only mirror pods bound
//! to itself, update the status of and evict only pods bound to it, ask for tokens only
//! for pods bound to it, and may not give itself labels that steer workloads to it.

use std::collections::BTreeSet;
use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::{Map, Value};

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::Scope;
use krate_api::user::UserInfo;
use krate_api::{ApiError, ApiResult, Registry, Target, object};

use crate::service_account::MIRROR_POD_ANNOTATION;

const NODE_USER_PREFIX: &str = "system:node:";
const NODES_GROUP: &str = "system:nodes";
const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Labels a kubelet may set on its Node though they are under kubernetes.io.
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
];
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];

/// The node a user acts as, if it is a node identity (the name may be empty).
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix(NODE_USER_PREFIX)?;
    user.in_group(NODES_GROUP).then_some(name)
}

fn label_namespace(label: &str) -> &str {
    label.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn in_namespace(ns: &str, domain: &str) -> bool {
    ns == domain || ns.ends_with(&format!(".{domain}"))
}

fn is_kubelet_label(label: &str) -> bool {
    KUBELET_LABELS.contains(&label) || KUBELET_LABEL_NAMESPACES.iter().any(|d| in_namespace(label_namespace(label), d))
}

/// The labels a node may not add, change or remove on itself.
pub fn forbidden_labels(modified: &BTreeSet<String>) -> Vec<String> {
    modified
        .iter()
        .filter(|l| {
            let ns = label_namespace(l);
            let restricted = in_namespace(ns, "node-restriction.kubernetes.io");
            let kubernetes = in_namespace(ns, "kubernetes.io") || in_namespace(ns, "k8s.io");
            restricted || (kubernetes && !is_kubelet_label(l))
        })
        .cloned()
        .collect()
}

/// Labels added, removed or changed between two label sets.
fn modified_labels(new: Option<&Map<String, Value>>, old: Option<&Map<String, Value>>) -> BTreeSet<String> {
    let empty = Map::new();
    let (new, old) = (new.unwrap_or(&empty), old.unwrap_or(&empty));
    let mut out: BTreeSet<String> =
        new.iter().filter(|(k, v)| old.get(*k) != Some(*v)).map(|(k, _)| k.clone()).collect();
    out.extend(old.keys().filter(|k| !new.contains_key(*k)).cloned());
    out
}

pub struct NodeRestriction {
    registry: Weak<Registry>,
}

fn forbidden(attrs: &Attributes<'_>, obj: Option<&Value>, why: &str) -> ApiError {
    let r = attrs.resource;
    let name = if attrs.name.is_empty() { obj.map(object::name).unwrap_or("") } else { attrs.name };
    ApiError::forbidden_on(&Target::new(&r.group, &r.plural, &r.kind, name), why)
}

impl NodeRestriction {
    pub fn new(registry: &Arc<Registry>) -> Self {
        NodeRestriction { registry: Arc::downgrade(registry) }
    }

    async fn get(&self, plural: &str, ns: Option<&str>, name: &str) -> ApiResult<Value> {
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource = registry.table.lookup("", "v1", plural).expect("built-in resource");
        registry.get(&Scope { resource, namespace: ns.map(String::from) }, name).await
    }

    async fn pod_node(&self, attrs: &Attributes<'_>, name: &str) -> ApiResult<String> {
        let pod = self.get("pods", attrs.namespace, name).await?;
        Ok(pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string())
    }

    async fn admit_pod(
        &self,
        node: &str,
        attrs: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let deny = |why: String| Err(forbidden(attrs, obj, &why));
        match (attrs.subresource, attrs.operation) {
            (None, Operation::Create) => {
                let Some(pod) = obj else { return Ok(()) };
                self.admit_mirror_pod(node, attrs, pod).await
            }
            (None, Operation::Delete) => {
                let bound = match old {
                    Some(pod) => pod.pointer("/spec/nodeName").and_then(Value::as_str).unwrap_or("").to_string(),
                    None => self.pod_node(attrs, attrs.name).await?,
                };
                if bound != node {
                    return deny(format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"));
                }
                Ok(())
            }
            (None, op) => deny(format!(
                "unexpected operation \"{}\", node \"{node}\" can only create and delete mirror pods",
                op_name(op)
            )),
            (Some("status"), Operation::Update) => {
                let (Some(pod), Some(old)) = (obj, old) else { return Ok(()) };
                if old.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
                    return deny(format!(
                        "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                    ));
                }
                if object::labels(pod) != object::labels(old) {
                    return deny(format!("node \"{node}\" cannot update labels through pod status"));
                }
                Ok(())
            }
            (Some("status"), op) => deny(format!("unexpected operation \"{}\"", op_name(op))),
            (Some("eviction"), Operation::Create) => {
                let pod = if attrs.name.is_empty() { obj.map(object::name).unwrap_or("") } else { attrs.name };
                if pod.is_empty() {
                    return deny("could not determine pod from request data".into());
                }
                if self.pod_node(attrs, pod).await? != node {
                    return deny(format!("node {node} can only evict pods with spec.nodeName set to itself"));
                }
                Ok(())
            }
            (Some("eviction"), op) => deny(format!("unexpected operation {}", op_name(op))),
            (Some(other), _) => {
                deny(format!("unexpected pod subresource \"{other}\", only 'status' and 'eviction' are allowed"))
            }
        }
    }

    async fn admit_mirror_pod(&self, node: &str, attrs: &Attributes<'_>, pod: &Value) -> ApiResult<()> {
        let deny = |why: String| Err(forbidden(attrs, Some(pod), &why));
        let mirror = pod.pointer("/metadata/annotations").and_then(|a| a.get(MIRROR_POD_ANNOTATION)).is_some();
        if !mirror {
            return deny(format!(
                "pod does not have \"{MIRROR_POD_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
            ));
        }
        if pod.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
            return deny(format!("node \"{node}\" can only create pods with spec.nodeName set to itself"));
        }
        let owners = pod.pointer("/metadata/ownerReferences").and_then(Value::as_array).cloned().unwrap_or_default();
        match owners.as_slice() {
            [] => return deny(format!("node \"{node}\" can only create pods with an owner reference set to itself")),
            [owner] => {
                let s = |f: &str| owner.get(f).and_then(Value::as_str).unwrap_or("");
                if s("apiVersion") != "v1" || s("kind") != "Node" || s("name") != node {
                    return deny(format!("node \"{node}\" can only create pods with an owner reference set to itself"));
                }
                if owner.get("controller").and_then(Value::as_bool) != Some(true) {
                    return deny(format!(
                        "node \"{node}\" can only create pods with a controller owner reference set to itself"
                    ));
                }
                if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                    return deny(format!("node \"{node}\" must not set blockOwnerDeletion on an owner reference"));
                }
                let node_obj = self.get("nodes", None, node).await?;
                let uid = object::meta_str(&node_obj, "uid").unwrap_or("");
                if s("uid") != uid {
                    return deny(format!("node {node} UID mismatch: expected {uid} got {}", s("uid")));
                }
            }
            _ => {
                return deny(format!(
                    "node \"{node}\" can only create pods with a single owner reference set to itself"
                ));
            }
        }
        let spec = &pod["spec"];
        if spec.get("serviceAccountName").and_then(Value::as_str).is_some_and(|s| !s.is_empty()) {
            return deny(format!("node \"{node}\" can not create pods that reference a service account"));
        }
        let volumes = spec.get("volumes").and_then(Value::as_array).cloned().unwrap_or_default();
        let containers: Vec<&Value> = ["initContainers", "containers", "ephemeralContainers"]
            .iter()
            .flat_map(|f| spec.get(*f).and_then(Value::as_array).into_iter().flatten())
            .collect();
        let env_refs = |key: &str, from: &str| {
            containers.iter().any(|c| {
                c.get("env")
                    .and_then(Value::as_array)
                    .is_some_and(|e| e.iter().any(|e| e.pointer(&format!("/valueFrom/{key}")).is_some()))
                    || c.get("envFrom")
                        .and_then(Value::as_array)
                        .is_some_and(|e| e.iter().any(|e| e.get(from).is_some()))
            })
        };
        let projected = |kind: &str| {
            volumes.iter().any(|v| {
                v.pointer("/projected/sources")
                    .and_then(Value::as_array)
                    .is_some_and(|s| s.iter().any(|p| p.get(kind).is_some()))
            })
        };
        let secrets = env_refs("secretKeyRef", "secretRef")
            || volumes.iter().any(|v| v.get("secret").is_some())
            || projected("secret")
            || spec.get("imagePullSecrets").and_then(Value::as_array).is_some_and(|a| !a.is_empty());
        if secrets {
            return deny(format!("node \"{node}\" can not create pods that reference secrets"));
        }
        if env_refs("configMapKeyRef", "configMapRef")
            || volumes.iter().any(|v| v.get("configMap").is_some())
            || projected("configMap")
        {
            return deny(format!("node \"{node}\" can not create pods that reference configmaps"));
        }
        if volumes.iter().any(|v| v.get("persistentVolumeClaim").is_some() || v.get("ephemeral").is_some()) {
            return deny(format!("node \"{node}\" can not create pods that reference persistentvolumeclaims"));
        }
        if spec.get("resourceClaims").and_then(Value::as_array).is_some_and(|a| !a.is_empty()) {
            return deny(format!("node \"{node}\" can not create pods that reference resourceclaims"));
        }
        if projected("clusterTrustBundle") {
            return deny(format!("node \"{node}\" can not create pods that use clustertrustbundles"));
        }
        Ok(())
    }

    fn admit_node(
        &self,
        node: &str,
        attrs: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let deny = |why: String| Err(forbidden(attrs, obj, &why));
        let requested = if attrs.name.is_empty() { obj.map(object::name).unwrap_or("") } else { attrs.name };
        if requested != node {
            return deny(format!("node \"{node}\" is not allowed to modify node \"{requested}\""));
        }
        let Some(new) = obj else { return Ok(()) };
        match (attrs.operation, old) {
            (Operation::Create, _) => {
                if new.pointer("/spec/configSource").is_some_and(|c| !c.is_null()) {
                    return deny(format!("node \"{node}\" is not allowed to create pods with a non-nil configSource"));
                }
                let bad = forbidden_labels(&modified_labels(object::labels(new), None));
                if !bad.is_empty() {
                    return deny(format!(
                        "node \"{node}\" is not allowed to set the following labels: {}",
                        bad.join(", ")
                    ));
                }
            }
            (Operation::Update, Some(old)) if attrs.subresource.is_none() || attrs.subresource == Some("status") => {
                let source = new.pointer("/spec/configSource").filter(|c| !c.is_null());
                if source.is_some() && source != old.pointer("/spec/configSource") {
                    return deny(format!(
                        "node \"{node}\" is not allowed to update configSource to a new non-nil configSource"
                    ));
                }
                let taints = |o: &Value| {
                    o.pointer("/spec/taints")
                        .filter(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()))
                        .cloned()
                };
                if taints(new) != taints(old) {
                    return deny(format!("node \"{node}\" is not allowed to modify taints"));
                }
                let bad = forbidden_labels(&modified_labels(object::labels(new), object::labels(old)));
                if !bad.is_empty() {
                    return deny(format!("is not allowed to modify labels: {}", bad.join(", ")));
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn admit_lease(&self, node: &str, attrs: &Attributes<'_>, obj: Option<&Value>) -> ApiResult<()> {
        if attrs.namespace != Some(NODE_LEASE_NAMESPACE) {
            return Err(forbidden(
                attrs,
                obj,
                &format!("can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"),
            ));
        }
        let name = match (attrs.operation, obj) {
            (Operation::Create, Some(o)) => object::name(o),
            _ => attrs.name,
        };
        if name != node {
            return Err(forbidden(attrs, obj, "can only access node lease with the same name as the requesting node"));
        }
        Ok(())
    }

    async fn admit_token_request(&self, node: &str, attrs: &Attributes<'_>, obj: Option<&Value>) -> ApiResult<()> {
        if attrs.operation != Operation::Create || attrs.subresource != Some("token") {
            return Ok(());
        }
        let deny = |why: String| Err(forbidden(attrs, obj, &why));
        let reference = obj.and_then(|o| o.pointer("/spec/boundObjectRef")).filter(|r| !r.is_null());
        let s = |f: &str| reference.and_then(|r| r.get(f)).and_then(Value::as_str).unwrap_or("");
        if reference.is_none() || s("apiVersion") != "v1" || s("kind") != "Pod" || s("name").is_empty() {
            return deny("node requested token not bound to a pod".into());
        }
        if s("uid").is_empty() {
            return deny("node requested token with a pod binding without a uid".into());
        }
        let pod = self.get("pods", attrs.namespace, s("name")).await?;
        if object::meta_str(&pod, "uid") != Some(s("uid")) {
            return deny(format!(
                "the UID in the bound object reference ({}) does not match the UID in record. The object might have been deleted and then recreated",
                s("uid")
            ));
        }
        if pod.pointer("/spec/nodeName").and_then(Value::as_str) != Some(node) {
            return deny("node requested token bound to a pod scheduled on a different node".into());
        }
        Ok(())
    }
}

/// A node may change only the status fields a kubelet maintains on a claim (capacity,
/// conditions, and the allocated resources of volume expansion): nothing else of
/// the claim, metadata included.
fn admit_pvc_status(node: &str, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
    if attrs.operation != Operation::Update {
        return Err(forbidden(attrs, obj, &format!("unexpected operation {:?}", op_name(attrs.operation))));
    }
    let comparable = |pvc: Option<&Value>| {
        let mut pvc = pvc.cloned().unwrap_or(Value::Null);
        if let Some(meta) = pvc.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            meta.remove("managedFields");
        }
        if let Some(status) = pvc.get_mut("status").and_then(Value::as_object_mut) {
            for kubelet_owned in ["capacity", "conditions", "allocatedResources", "allocatedResourceStatuses"] {
                status.remove(kubelet_owned);
            }
        }
        pvc
    };
    let (before, after) = (comparable(old), comparable(obj));
    if before != after {
        let changed = changed_paths(&before, &after, "");
        return Err(forbidden(
            attrs,
            obj,
            &format!(
                "node \"{node}\" is not allowed to update fields other than status.capacity and status.conditions: {}",
                changed.join(", ")
            ),
        ));
    }
    Ok(())
}

/// The dotted paths at which two JSON values differ, for a readable refusal.
fn changed_paths(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter()
                .flat_map(|k| {
                    let path = if at.is_empty() { k.clone() } else { format!("{at}.{k}") };
                    changed_paths(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), &path)
                })
                .collect()
        }
        _ if a == b => Vec::new(),
        _ => vec![at.to_string()],
    }
}

/// CSINode objects are named after their node; a node touches only its own.
fn admit_csi_node(node: &str, attrs: &Attributes<'_>, obj: Option<&Value>) -> ApiResult<()> {
    let name = match (attrs.operation, obj) {
        (Operation::Create, Some(o)) => object::name(o),
        _ => attrs.name,
    };
    if name != node {
        return Err(forbidden(attrs, obj, "can only access CSINode with the same name as the requesting node"));
    }
    Ok(())
}

/// A node creates and deletes only the ResourceSlices of its own node; the Node
/// authorizer, which cannot see a create's object, checks the other verbs.
fn admit_resource_slice(node: &str, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
    let slice = match attrs.operation {
        Operation::Create => obj,
        Operation::Delete => old.or(obj),
        _ => return Ok(()),
    };
    let slice_node = slice.and_then(|s| s.pointer("/spec/nodeName")).and_then(Value::as_str);
    if slice_node != Some(node) {
        return Err(forbidden(
            attrs,
            obj,
            "can only create ResourceSlice with the same NodeName as the requesting node",
        ));
    }
    Ok(())
}

fn op_name(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

#[async_trait]
impl Admission for NodeRestriction {
    async fn validate(&self, attrs: &Attributes<'_>, obj: Option<&Value>, old: Option<&Value>) -> ApiResult<()> {
        let Some(node) = node_identity(attrs.user) else { return Ok(()) };
        if node.is_empty() {
            return Err(forbidden(attrs, obj, &format!("could not determine node from user \"{}\"", attrs.user.name)));
        }
        let r = attrs.resource;
        match (r.group.as_str(), r.plural.as_str()) {
            ("", "pods") => self.admit_pod(node, attrs, obj, old).await,
            ("", "nodes") => self.admit_node(node, attrs, obj, old),
            ("", "persistentvolumeclaims") if attrs.subresource != Some("status") => {
                Err(forbidden(attrs, obj, "may only update PVC status"))
            }
            ("", "persistentvolumeclaims") => admit_pvc_status(node, attrs, obj, old),
            ("storage.k8s.io", "csinodes") => admit_csi_node(node, attrs, obj),
            ("resource.k8s.io", "resourceslices") => admit_resource_slice(node, attrs, obj, old),
            ("", "serviceaccounts") => self.admit_token_request(node, attrs, obj).await,
            ("coordination.k8s.io", "leases") => self.admit_lease(node, attrs, obj),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(labels: &[&str]) -> BTreeSet<String> {
        labels.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn kubelet_labels_are_allowed_and_others_under_kubernetes_io_are_not() {
        let allowed = set(&[
            "kubernetes.io/hostname",
            "kubernetes.io/os",
            "topology.kubernetes.io/zone",
            "node.kubernetes.io/instance-type",
            "kubelet.kubernetes.io/anything",
            "foo.node.kubernetes.io/bar",
            "example.com/team",
            "plain",
        ]);
        assert!(forbidden_labels(&allowed).is_empty());
        let refused = set(&[
            "node-restriction.kubernetes.io/pool",
            "a.node-restriction.kubernetes.io/pool",
            "node-role.kubernetes.io/control-plane",
            "kubernetes.io/role",
            "k8s.io/x",
            "sub.k8s.io/x",
        ]);
        assert_eq!(forbidden_labels(&refused).len(), refused.len());
    }

    #[test]
    fn node_identities_need_the_prefix_and_the_group() {
        let user = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        assert_eq!(node_identity(&user("system:node:n1", &["system:nodes"])), Some("n1"));
        assert_eq!(node_identity(&user("system:node:", &["system:nodes"])), Some(""));
        assert_eq!(node_identity(&user("system:node:n1", &[])), None);
        assert_eq!(node_identity(&user("n1", &["system:nodes"])), None);
    }
}
