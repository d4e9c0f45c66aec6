//! The Node authorizer, as upstream's: a kubelet (user system:node:NAME in group
//! system:nodes) may read the secrets, config maps, persistent volume claims and
//! volumes, resource claims and service-account tokens of the pods bound to its node —
//! found through a graph kept from watches of pods, PVCs and PVs — and its own Lease
//! and CSINode; everything else is judged by the static system:node rules.
//!
//! As upstream with AuthorizeNodeWithSelectors (on by default since v1.32), a node reads
//! only its own Node, lists and watches only the pods and ResourceSlices its field
//! selector narrows to itself (spec.nodeName / nodeName), and gets only pods bound to it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use krate_api::Registry;
use krate_api::user::UserInfo;
use serde_json::Value;

use super::bootstrap::policy::node_rules;
use super::informer::Informer;
use super::rbac::rule::PolicyRule;
use super::{Attributes, Authorizer, Decision, RuleResolver, Rules};

/// What a pod bound to a node lets that node read.
#[derive(Debug, Default)]
pub struct PodRefs {
    pub node: String,
    pub secrets: BTreeSet<String>,
    pub configmaps: BTreeSet<String>,
    pub claims: BTreeSet<String>,
    pub resource_claims: BTreeSet<String>,
    pub service_account: String,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn array<'a>(v: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(pointer).and_then(Value::as_array).into_iter().flatten()
}

impl PodRefs {
    pub fn parse(pod: &Value) -> Self {
        let mut refs = PodRefs {
            node: str_at(pod, "/spec/nodeName").unwrap_or("").to_string(),
            service_account: str_at(pod, "/spec/serviceAccountName").unwrap_or("default").to_string(),
            ..Default::default()
        };
        let pod_name = krate_api::object::name(pod);
        let add = |set: &mut BTreeSet<String>, v: Option<&str>| {
            if let Some(v) = v {
                set.insert(v.to_string());
            }
        };
        for s in array(pod, "/spec/imagePullSecrets") {
            add(&mut refs.secrets, str_at(s, "/name"));
        }
        for vol in array(pod, "/spec/volumes") {
            add(&mut refs.secrets, str_at(vol, "/secret/secretName"));
            add(&mut refs.configmaps, str_at(vol, "/configMap/name"));
            add(&mut refs.claims, str_at(vol, "/persistentVolumeClaim/claimName"));
            if vol.get("ephemeral").is_some() {
                // A generic ephemeral volume's claim is named POD-VOLUME.
                let claim = format!("{pod_name}-{}", str_at(vol, "/name").unwrap_or(""));
                refs.claims.insert(claim);
            }
            add(&mut refs.secrets, str_at(vol, "/azureFile/secretName"));
            for plugin in ["cephfs", "cinder", "flexVolume", "iscsi", "rbd", "scaleIO", "storageos"] {
                add(&mut refs.secrets, str_at(vol, &format!("/{plugin}/secretRef/name")));
            }
            add(&mut refs.secrets, str_at(vol, "/csi/nodePublishSecretRef/name"));
            for src in array(vol, "/projected/sources") {
                add(&mut refs.secrets, str_at(src, "/secret/name"));
                add(&mut refs.configmaps, str_at(src, "/configMap/name"));
            }
        }
        for list in ["/spec/containers", "/spec/initContainers", "/spec/ephemeralContainers"] {
            for c in array(pod, list) {
                for e in array(c, "/env") {
                    add(&mut refs.secrets, str_at(e, "/valueFrom/secretKeyRef/name"));
                    add(&mut refs.configmaps, str_at(e, "/valueFrom/configMapKeyRef/name"));
                }
                for e in array(c, "/envFrom") {
                    add(&mut refs.secrets, str_at(e, "/secretRef/name"));
                    add(&mut refs.configmaps, str_at(e, "/configMapRef/name"));
                }
            }
        }
        for c in array(pod, "/spec/resourceClaims") {
            add(&mut refs.resource_claims, str_at(c, "/resourceClaimName"));
        }
        for c in array(pod, "/status/resourceClaimStatuses") {
            add(&mut refs.resource_claims, str_at(c, "/resourceClaimName"));
        }
        refs
    }
}

/// A PersistentVolume: the secrets (namespace, name) its plugin reads on the node.
#[derive(Debug, Default)]
pub struct PvRefs {
    pub secrets: BTreeSet<(String, String)>,
}

impl PvRefs {
    pub fn parse(pv: &Value) -> Self {
        let mut secrets = BTreeSet::new();
        let refs = [
            "/spec/csi/nodePublishSecretRef",
            "/spec/csi/nodeStageSecretRef",
            "/spec/csi/nodeExpandSecretRef",
            "/spec/csi/controllerPublishSecretRef",
            "/spec/cephfs/secretRef",
            "/spec/flexVolume/secretRef",
            "/spec/iscsi/secretRef",
            "/spec/rbd/secretRef",
            "/spec/scaleIO/secretRef",
            "/spec/storageos/secretRef",
        ];
        for p in refs {
            if let Some(r) = pv.pointer(p)
                && let Some(name) = str_at(r, "/name")
            {
                secrets.insert((str_at(r, "/namespace").unwrap_or("").to_string(), name.to_string()));
            }
        }
        PvRefs { secrets }
    }
}

/// Which kind of object a node asks about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vertex {
    Pod,
    Secret,
    ConfigMap,
    Pvc,
    Pv,
    ResourceClaim,
    ServiceAccount,
    VolumeAttachment,
    ResourceSlice,
}

/// The node ↔ object relationships, from watches.
pub struct Graph {
    pods: Arc<Informer<PodRefs>>,
    /// PVC (namespace, name) → the bound volume's name.
    pvcs: Arc<Informer<String>>,
    pvs: Arc<Informer<PvRefs>>,
    /// VolumeAttachments and ResourceSlices → the node they are for.
    attachments: Arc<Informer<String>>,
    slices: Arc<Informer<String>>,
}

fn spec_node_name(object: &Value) -> String {
    str_at(object, "/spec/nodeName").unwrap_or("").to_string()
}

fn volume_name(pvc: &Value) -> String {
    str_at(pvc, "/spec/volumeName").unwrap_or("").to_string()
}

impl Graph {
    pub fn start(registry: &Arc<Registry>) -> Self {
        Graph {
            pods: Informer::start(registry, "", "v1", "pods", PodRefs::parse),
            pvcs: Informer::start(registry, "", "v1", "persistentvolumeclaims", volume_name),
            pvs: Informer::start(registry, "", "v1", "persistentvolumes", PvRefs::parse),
            attachments: Informer::start(registry, "storage.k8s.io", "v1", "volumeattachments", spec_node_name),
            slices: Informer::start(registry, "resource.k8s.io", "v1", "resourceslices", spec_node_name),
        }
    }

    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        self.pods.wait_synced(timeout).await
            && self.pvcs.wait_synced(timeout).await
            && self.pvs.wait_synced(timeout).await
            && self.attachments.wait_synced(timeout).await
            && self.slices.wait_synced(timeout).await
    }

    /// Whether a path leads from the object to the node.
    pub fn related(&self, node: &str, vertex: Vertex, namespace: &str, name: &str) -> bool {
        let on_node = |(ns, _): &(String, String), p: &PodRefs| p.node == node && ns == namespace;
        match vertex {
            Vertex::Pod => self.pods.get(namespace, name).is_some_and(|p| p.node == node),
            Vertex::ConfigMap => self.pods.any(|k, p| on_node(k, p) && p.configmaps.contains(name)),
            Vertex::Pvc => self.pods.any(|k, p| on_node(k, p) && p.claims.contains(name)),
            Vertex::ResourceClaim => self.pods.any(|k, p| on_node(k, p) && p.resource_claims.contains(name)),
            Vertex::ServiceAccount => self.pods.any(|k, p| on_node(k, p) && p.service_account == name),
            Vertex::Secret => {
                self.pods.any(|k, p| on_node(k, p) && p.secrets.contains(name))
                    || self.volumes_of(node).iter().any(|pv| {
                        self.pvs
                            .get("", pv)
                            .is_some_and(|r| r.secrets.contains(&(namespace.to_string(), name.to_string())))
                    })
            }
            Vertex::Pv => self.volumes_of(node).iter().any(|pv| pv == name),
            Vertex::VolumeAttachment => self.attachments.get("", name).is_some_and(|n| *n == node),
            Vertex::ResourceSlice => self.slices.get("", name).is_some_and(|n| *n == node),
        }
    }

    /// The volumes bound to the claims of the node's pods.
    fn volumes_of(&self, node: &str) -> Vec<String> {
        let mut claims = Vec::new();
        self.pods.any(|(ns, _), p| {
            if p.node == node {
                claims.extend(p.claims.iter().map(|c| (ns.clone(), c.clone())));
            }
            false
        });
        claims
            .iter()
            .filter_map(|(ns, c)| self.pvcs.get(ns, c))
            .map(|v| v.to_string())
            .filter(|v| !v.is_empty())
            .collect()
    }
}

pub struct Node {
    graph: Graph,
    rules: Vec<PolicyRule>,
}

/// The node a user is, if it is one (upstream's NodeIdentity): Some("") for a node
/// identity without a name.
pub fn node_identity(user: &UserInfo) -> Option<&str> {
    if !user.in_group("system:nodes") {
        return None;
    }
    user.name.strip_prefix("system:node:")
}

fn no_opinion(reason: impl Into<String>) -> Decision {
    Decision::NoOpinion(reason.into())
}

/// Whether the request's field selector requires `field` to equal `node`.
fn selects_node(a: &Attributes<'_>, field: &str, node: &str) -> bool {
    krate_api::selector::FieldSelector::parse(a.field_selector).is_ok_and(|sel| sel.required_value(field) == Some(node))
}

impl Node {
    pub fn start(registry: &Arc<Registry>) -> Arc<Self> {
        Arc::new(Node { graph: Graph::start(registry), rules: node_rules() })
    }

    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        self.graph.wait_synced(timeout).await
    }

    fn related(&self, node: &str, vertex: Vertex, a: &Attributes<'_>) -> Decision {
        if a.name.is_empty() {
            return no_opinion("No Object name found");
        }
        if self.graph.related(node, vertex, a.namespace, a.name) {
            Decision::Allow
        } else {
            no_opinion(format!("no relationship found between node '{node}' and this object"))
        }
    }

    fn get_only(&self, node: &str, vertex: Vertex, a: &Attributes<'_>) -> Decision {
        if a.verb != "get" {
            return no_opinion("can only get individual resources of this type");
        }
        if !a.subresource.is_empty() {
            return no_opinion("cannot get subresource");
        }
        self.related(node, vertex, a)
    }

    fn read_namespaced(&self, node: &str, vertex: Vertex, a: &Attributes<'_>) -> Decision {
        if !matches!(a.verb, "get" | "list" | "watch") {
            return no_opinion("can only read resources of this type");
        }
        if !a.subresource.is_empty() {
            return no_opinion("cannot read subresource");
        }
        if a.namespace.is_empty() {
            return no_opinion("can only read namespaced object of this type");
        }
        self.related(node, vertex, a)
    }

    fn own_object(&self, node: &str, a: &Attributes<'_>, what: &str) -> Decision {
        if !matches!(a.verb, "get" | "create" | "update" | "patch" | "delete") {
            return no_opinion(format!("can only get, create, update, patch, or delete a {what}"));
        }
        // The name of a create is not known here; NodeRestriction admission checks it.
        if a.verb != "create" && a.name != node {
            return no_opinion(format!("can only access {what} with the same name as the requesting node"));
        }
        Decision::Allow
    }

    /// A node publishes its devices as ResourceSlices: it may create them (NodeRestriction
    /// checks the node named inside), read, change and delete its own, and list, watch
    /// and delete collections of them only narrowed to itself by `nodeName`.
    fn resource_slice(&self, node: &str, a: &Attributes<'_>) -> Decision {
        if !a.subresource.is_empty() {
            return no_opinion("cannot authorize ResourceSlice subresources");
        }
        match a.verb {
            "create" => Decision::Allow,
            "get" | "update" | "patch" | "delete" => self.related(node, Vertex::ResourceSlice, a),
            "list" | "watch" | "deletecollection" if selects_node(a, "spec.nodeName", node) => Decision::Allow,
            "list" | "watch" | "deletecollection" => {
                no_opinion("can only list/watch/deletecollection resourceslices with nodeName field selector")
            }
            _ => no_opinion(
                "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
            ),
        }
    }

    /// Its own Node only: read by name (before it exists too), created and changed
    /// (NodeRestriction checks which), and its status.
    fn node_object(&self, node: &str, a: &Attributes<'_>) -> Decision {
        match (a.subresource, a.verb) {
            ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Decision::Allow,
            ("", "get" | "list" | "watch") if a.name == node => Decision::Allow,
            ("", "get" | "list" | "watch") if a.name.is_empty() => {
                no_opinion(format!("node '{node}' cannot read all nodes, only its own Node object"))
            }
            ("", "get" | "list" | "watch") => {
                no_opinion(format!("node '{node}' cannot read '{}', only its own Node object", a.name))
            }
            _ => no_opinion(""),
        }
    }

    /// Pods bound to it: get, list and watch narrowed by spec.nodeName; mirror pods
    /// created and deleted, statuses written and evictions asked (NodeRestriction checks
    /// that they are its own).
    fn pod(&self, node: &str, a: &Attributes<'_>) -> Decision {
        match (a.subresource, a.verb) {
            ("", "get") => self.get_only(node, Vertex::Pod, a),
            ("", "list" | "watch") if selects_node(a, "spec.nodeName", node) => Decision::Allow,
            ("", "list" | "watch") if !a.name.is_empty() => self.related(node, Vertex::Pod, a),
            ("", "list" | "watch") => no_opinion("can only list/watch pods with spec.nodeName field selector"),
            ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => Decision::Allow,
            _ => no_opinion(""),
        }
    }

    pub fn decide(&self, a: &Attributes<'_>) -> Decision {
        let Some(node) = node_identity(a.user) else { return no_opinion("") };
        if node.is_empty() {
            return no_opinion(format!("unknown node for user {:?}", a.user.name));
        }
        if a.resource_request {
            match (a.api_group, a.resource) {
                ("", "secrets") => return self.read_namespaced(node, Vertex::Secret, a),
                ("", "configmaps") => return self.read_namespaced(node, Vertex::ConfigMap, a),
                ("", "persistentvolumeclaims") => {
                    if a.subresource == "status" {
                        if !matches!(a.verb, "update" | "patch") {
                            return no_opinion("can only get/update/patch this type");
                        }
                        return self.related(node, Vertex::Pvc, a);
                    }
                    return self.get_only(node, Vertex::Pvc, a);
                }
                ("", "persistentvolumes") => return self.get_only(node, Vertex::Pv, a),
                ("resource.k8s.io", "resourceclaims") => return self.get_only(node, Vertex::ResourceClaim, a),
                ("storage.k8s.io", "volumeattachments") => return self.get_only(node, Vertex::VolumeAttachment, a),
                ("resource.k8s.io", "resourceslices") => return self.resource_slice(node, a),
                ("", "serviceaccounts") => {
                    if a.verb != "create" || a.name.is_empty() {
                        return no_opinion("can only create tokens for individual service accounts");
                    }
                    if a.subresource != "token" {
                        return no_opinion("can only create token subresource of serviceaccount");
                    }
                    return self.related(node, Vertex::ServiceAccount, a);
                }
                ("coordination.k8s.io", "leases") => {
                    if !matches!(a.verb, "get" | "create" | "update" | "patch" | "delete") {
                        return no_opinion("can only get, create, update, patch, or delete a node lease");
                    }
                    if a.namespace != "kube-node-lease" {
                        return no_opinion("can only access leases in the \"kube-node-lease\" system namespace");
                    }
                    if a.verb != "create" && a.name != node {
                        return no_opinion("can only access node lease with the same name as the requesting node");
                    }
                    return Decision::Allow;
                }
                ("", "nodes") => return self.node_object(node, a),
                ("", "pods") => return self.pod(node, a),
                ("storage.k8s.io", "csinodes") => {
                    if !a.subresource.is_empty() {
                        return no_opinion("cannot authorize CSINode subresources");
                    }
                    return self.own_object(node, a, "CSINode");
                }
                _ => {}
            }
        }
        if self.rules.iter().any(|r| r.allows(a)) { Decision::Allow } else { no_opinion("") }
    }
}

#[async_trait]
impl Authorizer for Node {
    async fn authorize(&self, a: &Attributes<'_>) -> Decision {
        self.decide(a)
    }
}

impl RuleResolver for Node {
    fn rules_for(&self, user: &UserInfo, _namespace: &str) -> Rules {
        match node_identity(user) {
            // Nodes' permissions depend on the graph: they cannot be listed.
            Some(_) => Rules {
                incomplete: true,
                errors: vec!["node authorizer does not support user rule resolution".into()],
                ..Default::default()
            },
            None => Rules::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pod_references_are_collected_from_volumes_env_and_claims() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "runner",
                "imagePullSecrets": [{"name": "pull"}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": "vol-secret"}},
                    {"name": "b", "configMap": {"name": "vol-cm"}},
                    {"name": "c", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "d", "projected": {"sources": [{"secret": {"name": "proj-secret"}}, {"configMap": {"name": "proj-cm"}}]}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                ],
                "containers": [{"name": "c", "env": [
                    {"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}},
                    {"name": "Y", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                ], "envFrom": [{"secretRef": {"name": "from-secret"}}]}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
            },
        });
        let refs = PodRefs::parse(&pod);
        assert_eq!(refs.node, "n1");
        assert_eq!(refs.service_account, "runner");
        let s: Vec<&str> = refs.secrets.iter().map(String::as_str).collect();
        assert_eq!(s, ["env-secret", "from-secret", "proj-secret", "pull", "vol-secret"]);
        let c: Vec<&str> = refs.configmaps.iter().map(String::as_str).collect();
        assert_eq!(c, ["env-cm", "proj-cm", "vol-cm"]);
        let claims: Vec<&str> = refs.claims.iter().map(String::as_str).collect();
        assert_eq!(claims, ["data", "web-scratch"]);
        assert!(refs.resource_claims.contains("gpu-claim"));
        assert_eq!(PodRefs::parse(&json!({"spec": {}})).service_account, "default");
    }

    #[test]
    fn node_identities_need_the_group_and_the_prefix() {
        let u = |name: &str, groups: &[&str]| UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| g.to_string()).collect(),
            ..Default::default()
        };
        assert_eq!(node_identity(&u("system:node:n1", &["system:nodes"])), Some("n1"));
        assert_eq!(node_identity(&u("system:node:n1", &[])), None);
        assert_eq!(node_identity(&u("jane", &["system:nodes"])), None);
        assert_eq!(node_identity(&u("system:node:", &["system:nodes"])), Some(""));
    }

    #[test]
    fn persistent_volume_secret_references() {
        let pv = json!({"spec": {"csi": {"nodePublishSecretRef": {"name": "s", "namespace": "ns"}}}});
        assert!(PvRefs::parse(&pv).secrets.contains(&("ns".into(), "s".into())));
    }
}
