//! Upstream's bootstrap RBAC policy (plugin/pkg/auth/authorizer/rbac/bootstrappolicy),
//! as data: the cluster roles and bindings every cluster starts with, the controllers'
//! roles, and the namespaced roles in kube-system and kube-public.

use crate::authz::rbac::rule::PolicyRule;

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ_WRITE: &[&str] = &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"];
const READ_UPDATE: &[&str] = &["get", "list", "watch", "update", "patch"];

const CORE: &str = "";
const APPS: &str = "apps";
const AUTHN: &str = "authentication.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";
const AUTOSCALING: &str = "autoscaling";
const BATCH: &str = "batch";
const CERTS: &str = "certificates.k8s.io";
const COORD: &str = "coordination.k8s.io";
const DISCOVERY: &str = "discovery.k8s.io";
const EXTENSIONS: &str = "extensions";
const NETWORKING: &str = "networking.k8s.io";
const POLICY: &str = "policy";
const RBAC: &str = "rbac.authorization.k8s.io";
const STORAGE: &str = "storage.k8s.io";
const EVENTS: &str = "events.k8s.io";
const RESOURCE: &str = "resource.k8s.io";

pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

fn r(verbs: &[&str], groups: &[&str], resources: &[&str]) -> PolicyRule {
    PolicyRule::resource(verbs, groups, resources)
}

fn urls(verbs: &[&str], paths: &[&str]) -> PolicyRule {
    PolicyRule::urls(verbs, paths)
}

fn events_rule() -> PolicyRule {
    r(&["create", "update", "patch"], &[CORE, EVENTS], &["events"])
}

/// A bootstrap Role or ClusterRole.
pub struct Role {
    pub name: &'static str,
    /// Empty for ClusterRoles.
    pub namespace: &'static str,
    pub labels: Vec<(&'static str, &'static str)>,
    /// Label keys whose "true" value aggregates other ClusterRoles into this one.
    pub aggregate_from: Option<&'static str>,
    pub rules: Vec<PolicyRule>,
}

fn cluster_role(name: &'static str, rules: Vec<PolicyRule>) -> Role {
    Role { name, namespace: "", labels: vec![], aggregate_from: None, rules }
}

/// A subject of a bootstrap binding: (kind, name, namespace).
pub type Subject = (&'static str, &'static str, &'static str);

pub struct Binding {
    pub name: &'static str,
    pub namespace: &'static str,
    pub role_kind: &'static str,
    pub role_name: &'static str,
    pub subjects: Vec<Subject>,
}

fn group(name: &'static str) -> Subject {
    ("Group", name, "")
}
fn user(name: &'static str) -> Subject {
    ("User", name, "")
}
fn sa(namespace: &'static str, name: &'static str) -> Subject {
    ("ServiceAccount", name, namespace)
}

fn cluster_binding(role: &'static str, subjects: Vec<Subject>) -> Binding {
    Binding { name: role, namespace: "", role_kind: "ClusterRole", role_name: role, subjects }
}

/// The rules of system:node, which the Node authorizer also applies to every node.
pub fn node_rules() -> Vec<PolicyRule> {
    vec![
        r(&["create"], &[AUTHN], &["tokenreviews"]),
        r(&["create"], &[AUTHZ], &["subjectaccessreviews", "localsubjectaccessreviews"]),
        r(READ, &[CORE], &["services"]),
        r(&["create", "get", "list", "watch"], &[CORE], &["nodes"]),
        r(&["update", "patch"], &[CORE], &["nodes/status"]),
        r(&["update", "patch"], &[CORE], &["nodes"]),
        events_rule(),
        r(READ, &[CORE], &["pods"]),
        r(&["create", "delete"], &[CORE], &["pods"]),
        r(&["update", "patch"], &[CORE], &["pods/status"]),
        r(&["create"], &[CORE], &["pods/eviction"]),
        r(READ, &[CORE], &["secrets", "configmaps"]),
        r(&["get"], &[CORE], &["persistentvolumeclaims", "persistentvolumes"]),
        r(&["get"], &[CORE], &["endpoints"]),
        r(&["create", "get", "list", "watch"], &[CERTS], &["certificatesigningrequests"]),
        r(&["get", "create", "update", "patch", "delete"], &[COORD], &["leases"]),
        r(&["get"], &[STORAGE], &["volumeattachments"]),
        r(&["get", "update", "patch"], &[CORE], &["persistentvolumeclaims/status"]),
        r(&["create"], &[CORE], &["serviceaccounts/token"]),
        r(&["get", "watch", "list"], &[STORAGE], &["csidrivers"]),
        r(&["get", "create", "update", "patch", "delete"], &[STORAGE], &["csinodes"]),
        r(READ, &["node.k8s.io"], &["runtimeclasses"]),
        r(&["get"], &[RESOURCE], &["resourceclaims"]),
        r(&["deletecollection"], &[RESOURCE], &["resourceslices"]),
        r(&["get", "list", "watch", "create", "update", "patch", "delete"], &[RESOURCE], &["resourceslices"]),
    ]
}

pub fn cluster_roles() -> Vec<Role> {
    let mut roles = vec![
        cluster_role("cluster-admin", vec![r(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])]),
        cluster_role(
            "system:discovery",
            vec![urls(
                &["get"],
                &[
                    "/livez",
                    "/readyz",
                    "/healthz",
                    "/version",
                    "/version/",
                    "/openapi",
                    "/openapi/*",
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                ],
            )],
        ),
        cluster_role(
            "system:monitoring",
            vec![
                urls(
                    &["get"],
                    &[
                        "/metrics",
                        "/metrics/slis",
                        "/livez",
                        "/readyz",
                        "/healthz",
                        "/livez/*",
                        "/readyz/*",
                        "/healthz/*",
                    ],
                ),
                r(&["get"], &[CORE], &["nodes/metrics"]),
            ],
        ),
        cluster_role(
            "system:basic-user",
            vec![
                r(&["create"], &[AUTHZ], &["selfsubjectaccessreviews", "selfsubjectrulesreviews"]),
                r(&["create"], &[AUTHN], &["selfsubjectreviews"]),
            ],
        ),
        cluster_role(
            "system:public-info-viewer",
            vec![urls(&["get"], &["/livez", "/readyz", "/healthz", "/version", "/version/"])],
        ),
        Role { name: "admin", namespace: "", labels: vec![], aggregate_from: Some(AGGREGATE_TO_ADMIN), rules: vec![] },
        Role {
            name: "edit",
            namespace: "",
            labels: vec![(AGGREGATE_TO_ADMIN, "true")],
            aggregate_from: Some(AGGREGATE_TO_EDIT),
            rules: vec![],
        },
        Role {
            name: "view",
            namespace: "",
            labels: vec![(AGGREGATE_TO_EDIT, "true")],
            aggregate_from: Some(AGGREGATE_TO_VIEW),
            rules: vec![],
        },
        Role {
            name: "system:aggregate-to-admin",
            namespace: "",
            labels: vec![(AGGREGATE_TO_ADMIN, "true")],
            aggregate_from: None,
            rules: vec![
                r(&["create"], &[AUTHZ], &["localsubjectaccessreviews"]),
                r(READ_WRITE, &[RBAC], &["roles", "rolebindings"]),
            ],
        },
        Role {
            name: "system:aggregate-to-edit",
            namespace: "",
            labels: vec![(AGGREGATE_TO_EDIT, "true")],
            aggregate_from: None,
            rules: vec![
                r(
                    READ,
                    &[CORE],
                    &["pods/attach", "pods/proxy", "pods/exec", "pods/portforward", "secrets", "services/proxy"],
                ),
                r(&["impersonate"], &[CORE], &["serviceaccounts"]),
                r(WRITE, &[CORE], &["pods", "pods/attach", "pods/proxy", "pods/exec", "pods/portforward"]),
                r(&["create"], &[CORE], &["pods/eviction"]),
                r(
                    WRITE,
                    &[CORE],
                    &[
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets",
                        "events",
                    ],
                ),
                r(&["create"], &[CORE], &["serviceaccounts/token"]),
                r(
                    WRITE,
                    &[APPS],
                    &[
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale",
                    ],
                ),
                r(WRITE, &[AUTOSCALING], &["horizontalpodautoscalers"]),
                r(WRITE, &[BATCH], &["jobs", "cronjobs"]),
                r(
                    WRITE,
                    &[EXTENSIONS],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "ingresses",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ],
                ),
                r(WRITE, &[POLICY], &["poddisruptionbudgets"]),
                r(WRITE, &[NETWORKING], &["networkpolicies", "ingresses"]),
                r(READ_WRITE, &[COORD], &["leases"]),
                r(WRITE, &[RESOURCE], &["resourceclaims", "resourceclaimtemplates"]),
            ],
        },
        Role {
            name: "system:aggregate-to-view",
            namespace: "",
            labels: vec![(AGGREGATE_TO_VIEW, "true")],
            aggregate_from: None,
            rules: vec![
                r(
                    READ,
                    &[CORE],
                    &[
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps",
                    ],
                ),
                r(
                    READ,
                    &[CORE],
                    &[
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log",
                    ],
                ),
                r(READ, &[CORE], &["namespaces"]),
                r(READ, &[DISCOVERY], &["endpointslices"]),
                r(
                    READ,
                    &[APPS],
                    &[
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                    ],
                ),
                r(READ, &[AUTOSCALING], &["horizontalpodautoscalers", "horizontalpodautoscalers/status"]),
                r(READ, &[BATCH], &["jobs", "cronjobs", "cronjobs/status", "jobs/status"]),
                r(
                    READ,
                    &[EXTENSIONS],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                        "networkpolicies",
                    ],
                ),
                r(READ, &[POLICY], &["poddisruptionbudgets", "poddisruptionbudgets/status"]),
                r(READ, &[NETWORKING], &["networkpolicies", "ingresses", "ingresses/status"]),
                r(READ, &[RESOURCE], &["resourceclaims", "resourceclaims/status", "resourceclaimtemplates"]),
            ],
        },
        cluster_role("system:node", node_rules()),
        cluster_role(
            "system:node-proxier",
            vec![
                r(&["list", "watch"], &[CORE], &["services", "endpoints"]),
                r(READ, &[CORE], &["nodes"]),
                events_rule(),
                r(&["list", "watch"], &[NETWORKING], &["servicecidrs"]),
                r(&["list", "watch"], &[DISCOVERY], &["endpointslices"]),
            ],
        ),
        cluster_role(
            "system:auth-delegator",
            vec![r(&["create"], &[AUTHN], &["tokenreviews"]), r(&["create"], &[AUTHZ], &["subjectaccessreviews"])],
        ),
        cluster_role("system:kube-aggregator", vec![r(READ, &[CORE], &["services", "endpoints"])]),
        cluster_role(
            "system:kube-controller-manager",
            vec![
                events_rule(),
                r(&["create"], &[COORD], &["leases"]),
                r(&["get", "update"], &[COORD], &["leases"]).names(&["kube-controller-manager"]),
                r(&["create"], &[CORE], &["secrets", "serviceaccounts"]),
                r(&["delete"], &[CORE], &["secrets"]),
                r(&["get"], &[CORE], &["configmaps", "namespaces", "secrets", "serviceaccounts"]),
                r(&["update"], &[CORE], &["secrets", "serviceaccounts"]),
                r(&["create"], &[AUTHN], &["tokenreviews"]),
                r(&["create"], &[AUTHZ], &["subjectaccessreviews"]),
                r(&["list", "watch"], &["*"], &["*"]),
                r(&["create"], &[CORE], &["serviceaccounts/token"]),
            ],
        ),
        cluster_role("system:kube-dns", vec![r(&["list", "watch"], &[CORE], &["endpoints", "services"])]),
        cluster_role(
            "system:kube-scheduler",
            vec![
                events_rule(),
                r(&["create"], &[COORD], &["leases"]),
                r(&["get", "update", "list", "watch"], &[COORD], &["leases"]).names(&["kube-scheduler"]),
                r(READ_WRITE, &[COORD], &["leasecandidates"]),
                r(READ, &[CORE], &["nodes"]),
                r(&["get", "list", "watch", "delete"], &[CORE], &["pods"]),
                r(&["create"], &[CORE], &["pods/binding", "bindings"]),
                r(&["patch", "update"], &[CORE], &["pods/status"]),
                r(READ, &[CORE], &["replicationcontrollers", "services"]),
                r(READ, &[APPS, EXTENSIONS], &["replicasets"]),
                r(READ, &[APPS], &["statefulsets"]),
                r(READ, &[POLICY], &["poddisruptionbudgets"]),
                r(READ, &[CORE], &["persistentvolumeclaims", "persistentvolumes"]),
                r(&["create"], &[AUTHN], &["tokenreviews"]),
                r(&["create"], &[AUTHZ], &["subjectaccessreviews"]),
                r(READ, &[STORAGE], &["csinodes"]),
                r(READ, &[STORAGE], &["volumeattachments"]),
                r(READ, &[CORE], &["namespaces"]),
                r(READ, &[STORAGE], &["csidrivers"]),
                r(READ, &[STORAGE], &["csistoragecapacities"]),
                r(READ, &[RESOURCE], &["deviceclasses"]),
                r(READ_UPDATE, &[RESOURCE], &["resourceclaims"]),
                r(READ_UPDATE, &[RESOURCE], &["resourceclaims/status"]),
                r(&["update"], &[CORE], &["pods/finalizers"]),
                r(READ, &[RESOURCE], &["resourceslices"]),
            ],
        ),
        cluster_role(
            "system:volume-scheduler",
            vec![
                r(READ_UPDATE, &[CORE], &["persistentvolumes"]),
                r(READ, &[STORAGE], &["storageclasses"]),
                r(READ_UPDATE, &[CORE], &["persistentvolumeclaims"]),
            ],
        ),
        cluster_role(
            "system:heapster",
            vec![
                r(READ, &[CORE], &["events", "namespaces", "nodes", "pods"]),
                r(READ, &[EXTENSIONS], &["deployments"]),
            ],
        ),
        cluster_role(
            "system:node-problem-detector",
            vec![r(&["get"], &[CORE], &["nodes"]), r(&["patch"], &[CORE], &["nodes/status"]), events_rule()],
        ),
        cluster_role(
            "system:node-bootstrapper",
            vec![r(&["create", "get", "list", "watch"], &[CERTS], &["certificatesigningrequests"])],
        ),
        cluster_role(
            "system:kubelet-api-admin",
            vec![
                r(&["get", "list", "watch"], &[CORE], &["nodes"]),
                r(&["proxy"], &[CORE], &["nodes"]),
                r(&["*"], &[CORE], &["nodes/proxy", "nodes/metrics", "nodes/stats", "nodes/log"]),
                r(&["*"], &[CORE], &["nodes/pods", "nodes/healthz", "nodes/configz"]),
            ],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            vec![r(&["create"], &[CERTS], &["certificatesigningrequests/nodeclient"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            vec![r(&["create"], &[CERTS], &["certificatesigningrequests/selfnodeclient"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-approver",
            vec![r(&["approve"], &[CERTS], &["signers"]).names(&["kubernetes.io/kube-apiserver-client"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:kube-apiserver-client-kubelet-approver",
            vec![r(&["approve"], &[CERTS], &["signers"]).names(&["kubernetes.io/kube-apiserver-client-kubelet"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:kubelet-serving-approver",
            vec![r(&["approve"], &[CERTS], &["signers"]).names(&["kubernetes.io/kubelet-serving"])],
        ),
        cluster_role(
            "system:certificates.k8s.io:legacy-unknown-approver",
            vec![r(&["approve"], &[CERTS], &["signers"]).names(&["kubernetes.io/legacy-unknown"])],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            vec![urls(
                &["get"],
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
            )],
        ),
        cluster_role(
            "system:persistent-volume-provisioner",
            vec![
                r(&["get", "list", "watch", "create", "delete"], &[CORE], &["persistentvolumes"]),
                r(&["get", "list", "watch", "update"], &[CORE], &["persistentvolumeclaims"]),
                r(READ, &[STORAGE], &["storageclasses"]),
                r(&["watch"], &[CORE], &["events"]),
                events_rule(),
            ],
        ),
    ];
    roles.extend(controller_roles());
    roles
}

/// The controllers' roles (system:controller:NAME), each bound to the service account
/// kube-system/NAME. Only the controllers krate runs or will run.
fn controller_roles() -> Vec<Role> {
    // Upstream gives every controller role the events rule but these four.
    const WITHOUT_EVENTS: [&str; 4] = [
        "system:controller:clusterrole-aggregation-controller",
        "system:controller:namespace-controller",
        "system:controller:pod-garbage-collector",
        "system:controller:legacy-service-account-token-cleaner",
    ];
    let c = |name: &'static str, rules: Vec<PolicyRule>| {
        let mut rules = rules;
        if !WITHOUT_EVENTS.contains(&name) {
            rules.push(events_rule());
        }
        cluster_role(name, rules)
    };
    vec![
        c(
            "system:controller:clusterrole-aggregation-controller",
            vec![r(&["escalate", "get", "list", "watch", "update", "patch"], &[RBAC], &["clusterroles"])],
        ),
        c(
            "system:controller:deployment-controller",
            vec![
                r(&["get", "list", "watch", "update"], &[APPS, EXTENSIONS], &["deployments"]),
                r(&["update"], &[APPS, EXTENSIONS], &["deployments/status"]),
                r(&["update"], &[APPS, EXTENSIONS], &["deployments/finalizers"]),
                r(
                    &["get", "list", "watch", "create", "update", "patch", "delete"],
                    &[APPS, EXTENSIONS],
                    &["replicasets"],
                ),
                r(&["get", "list", "watch", "update"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:replicaset-controller",
            vec![
                r(&["get", "list", "watch", "update"], &[APPS, EXTENSIONS], &["replicasets"]),
                r(&["update"], &[APPS, EXTENSIONS], &["replicasets/status"]),
                r(&["update"], &[APPS, EXTENSIONS], &["replicasets/finalizers"]),
                r(&["list", "watch", "patch", "create", "delete"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:replication-controller",
            vec![
                r(&["get", "list", "watch", "update"], &[CORE], &["replicationcontrollers"]),
                r(&["update"], &[CORE], &["replicationcontrollers/status"]),
                r(&["update"], &[CORE], &["replicationcontrollers/finalizers"]),
                r(&["list", "watch", "patch", "create", "delete"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:daemon-set-controller",
            vec![
                r(READ, &[APPS, EXTENSIONS], &["daemonsets"]),
                r(&["update"], &[APPS, EXTENSIONS], &["daemonsets/status"]),
                r(&["update"], &[APPS, EXTENSIONS], &["daemonsets/finalizers"]),
                r(&["list", "watch"], &[CORE], &["nodes"]),
                r(&["list", "watch", "create", "delete", "patch"], &[CORE], &["pods"]),
                r(&["create"], &[CORE], &["pods/binding"]),
                r(&["get", "list", "watch", "create", "delete", "update", "patch"], &[APPS], &["controllerrevisions"]),
            ],
        ),
        c(
            "system:controller:statefulset-controller",
            vec![
                r(&["list", "watch"], &[CORE], &["pods"]),
                r(READ, &[APPS], &["statefulsets"]),
                r(&["update"], &[APPS], &["statefulsets/status"]),
                r(&["update"], &[APPS], &["statefulsets/finalizers"]),
                r(&["get", "create", "delete", "update", "patch"], &[CORE], &["pods"]),
                r(&["get", "create", "delete", "update", "patch", "list", "watch"], &[APPS], &["controllerrevisions"]),
                r(&["create", "get", "list", "watch"], &[CORE], &["persistentvolumeclaims"]),
                r(&["update", "delete"], &[CORE], &["persistentvolumeclaims"]),
                r(&["update"], &[CORE], &["pods/finalizers"]),
            ],
        ),
        c(
            "system:controller:job-controller",
            vec![
                r(&["get", "list", "watch", "update", "patch"], &[BATCH], &["jobs"]),
                r(&["update"], &[BATCH], &["jobs/status"]),
                r(&["update"], &[BATCH], &["jobs/finalizers"]),
                r(&["list", "watch", "create", "delete", "patch"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:cronjob-controller",
            vec![
                r(&["get", "list", "watch", "update"], &[BATCH], &["cronjobs"]),
                r(&["get", "list", "watch", "create", "update", "delete", "patch"], &[BATCH], &["jobs"]),
                r(&["update"], &[BATCH], &["cronjobs/status"]),
                r(&["update"], &[BATCH], &["cronjobs/finalizers"]),
                r(&["delete", "list", "watch"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:namespace-controller",
            vec![
                r(&["get", "list", "watch", "delete"], &[CORE], &["namespaces"]),
                r(&["update"], &[CORE], &["namespaces/finalize", "namespaces/status"]),
                r(&["delete", "deletecollection", "get", "list", "watch"], &["*"], &["*"]),
            ],
        ),
        c(
            "system:controller:generic-garbage-collector",
            vec![r(&["get", "list", "watch", "patch", "update", "delete"], &["*"], &["*"])],
        ),
        c(
            "system:controller:endpoint-controller",
            vec![
                r(READ, &[CORE], &["services", "pods"]),
                r(&["get", "list", "watch", "create", "update", "delete"], &[CORE], &["endpoints"]),
                r(&["create"], &[CORE], &["endpoints/restricted"]),
            ],
        ),
        c(
            "system:controller:endpointslice-controller",
            vec![
                r(&["get", "list", "watch"], &[CORE], &["services", "pods", "nodes"]),
                r(&["update"], &[CORE], &["services/finalizers"]),
                r(&["get", "list", "watch", "create", "update", "delete"], &[DISCOVERY], &["endpointslices"]),
            ],
        ),
        c("system:controller:service-account-controller", vec![r(&["create"], &[CORE], &["serviceaccounts"])]),
        c("system:controller:root-ca-cert-publisher", vec![r(&["create", "update"], &[CORE], &["configmaps"])]),
        c(
            "system:controller:node-controller",
            vec![
                r(&["delete", "get", "list", "patch", "update", "watch"], &[CORE], &["nodes"]),
                r(&["patch", "update"], &[CORE], &["nodes/status"]),
                r(&["patch", "update"], &[CORE], &["pods/status"]),
                r(&["delete", "get", "list", "watch"], &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:pod-garbage-collector",
            vec![
                r(&["list", "watch", "delete"], &[CORE], &["pods"]),
                r(READ, &[CORE], &["nodes"]),
                r(&["patch"], &[CORE], &["pods/status"]),
            ],
        ),
        c(
            "system:controller:ttl-after-finished-controller",
            vec![r(&["get", "list", "watch", "delete"], &[BATCH], &["jobs"])],
        ),
        c(
            "system:controller:attachdetach-controller",
            vec![
                r(&["list", "watch"], &[CORE], &["persistentvolumeclaims", "persistentvolumes"]),
                r(READ, &[CORE], &["nodes"]),
                r(&["patch", "update"], &[CORE], &["nodes/status"]),
                r(&["list", "watch"], &[CORE], &["pods"]),
                r(&["create", "delete", "get", "list", "watch"], &[STORAGE], &["volumeattachments"]),
                r(READ, &[STORAGE], &["csidrivers"]),
                r(READ, &[STORAGE], &["csinodes"]),
            ],
        ),
        c(
            "system:controller:certificate-controller",
            vec![
                r(&["delete", "get", "list", "watch"], &[CERTS], &["certificatesigningrequests"]),
                r(&["update"], &[CERTS], &["certificatesigningrequests/approval", "certificatesigningrequests/status"]),
                // krate's csrapproving also approves kubelet serving certificates whose
                // names match the requesting node's addresses (upstream leaves them to an
                // external approver).
                r(&["approve"], &[CERTS], &["signers"])
                    .names(&["kubernetes.io/kube-apiserver-client-kubelet", "kubernetes.io/kubelet-serving"]),
                r(&["sign"], &[CERTS], &["signers"]).names(&[
                    "kubernetes.io/kube-apiserver-client",
                    "kubernetes.io/kube-apiserver-client-kubelet",
                    "kubernetes.io/kubelet-serving",
                    "kubernetes.io/legacy-unknown",
                ]),
                r(&["create"], &[AUTHZ], &["subjectaccessreviews"]),
            ],
        ),
        c(
            "system:controller:device-taint-eviction-controller",
            vec![
                r(&["delete", "get", "list", "watch"], &[CORE], &["pods"]),
                r(&["patch", "update"], &[CORE], &["pods/status"]),
                r(READ, &[RESOURCE], &["resourceclaims"]),
                r(READ, &[RESOURCE], &["resourceslices"]),
                r(READ, &[RESOURCE], &["deviceclasses"]),
            ],
        ),
        c(
            "system:controller:disruption-controller",
            vec![
                r(READ, &[APPS, EXTENSIONS], &["deployments"]),
                r(READ, &[APPS, EXTENSIONS], &["replicasets"]),
                r(READ, &[CORE], &["replicationcontrollers"]),
                r(READ, &[POLICY], &["poddisruptionbudgets"]),
                r(READ, &[APPS], &["statefulsets"]),
                r(&["update"], &[POLICY], &["poddisruptionbudgets/status"]),
                r(&["patch", "update"], &[CORE], &["pods/status"]),
                r(&["get"], &["*"], &["*/scale"]),
            ],
        ),
        c(
            "system:controller:endpointslicemirroring-controller",
            vec![
                r(READ, &[CORE], &["endpoints", "services"]),
                r(&["update"], &[CORE], &["services/finalizers"]),
                r(&["update"], &[CORE], &["endpoints/finalizers"]),
                r(&["create", "delete", "get", "list", "update", "watch"], &[DISCOVERY], &["endpointslices"]),
            ],
        ),
        c(
            "system:controller:ephemeral-volume-controller",
            vec![
                r(READ, &[CORE], &["pods"]),
                r(&["update"], &[CORE], &["pods/finalizers"]),
                r(&["create", "get", "list", "watch"], &[CORE], &["persistentvolumeclaims"]),
            ],
        ),
        c(
            "system:controller:expand-controller",
            vec![
                r(&["get", "list", "patch", "update", "watch"], &[CORE], &["persistentvolumes"]),
                r(&["patch", "update"], &[CORE], &["persistentvolumeclaims/status"]),
                r(READ, &[CORE], &["persistentvolumeclaims"]),
            ],
        ),
        c(
            "system:controller:horizontal-pod-autoscaler",
            vec![
                r(READ, &[AUTOSCALING], &["horizontalpodautoscalers"]),
                r(&["update"], &[AUTOSCALING], &["horizontalpodautoscalers/status"]),
                r(&["get", "update"], &["*"], &["*/scale"]),
                r(&["list", "watch"], &[CORE], &["pods"]),
                r(&["list", "watch"], &["metrics.k8s.io"], &["pods"]),
                r(READ, &["custom.metrics.k8s.io"], &["*"]),
                r(READ, &["external.metrics.k8s.io"], &["*"]),
            ],
        ),
        c(
            "system:controller:legacy-service-account-token-cleaner",
            vec![
                r(&["get"], &[CORE], &["configmaps"]).names(&["kube-apiserver-legacy-service-account-token-tracking"]),
                r(&["delete", "patch"], &[CORE], &["secrets"]),
            ],
        ),
        c(
            "system:controller:persistent-volume-binder",
            vec![
                r(&["create", "delete", "get", "list", "update", "watch"], &[CORE], &["persistentvolumes"]),
                r(&["update"], &[CORE], &["persistentvolumes/status"]),
                r(&["get", "list", "update", "watch"], &[CORE], &["persistentvolumeclaims"]),
                r(&["update"], &[CORE], &["persistentvolumeclaims/status"]),
                r(&["create", "delete", "get", "list", "watch"], &[CORE], &["pods"]),
                r(READ, &[STORAGE], &["storageclasses"]),
                r(&["list", "watch"], &[CORE], &["nodes"]),
                r(&["watch"], &[CORE], &["events"]),
            ],
        ),
        c(
            "system:controller:pv-protection-controller",
            vec![r(&["get", "list", "update", "watch"], &[CORE], &["persistentvolumes"])],
        ),
        c(
            "system:controller:pvc-protection-controller",
            vec![
                r(&["get", "list", "update", "watch"], &[CORE], &["persistentvolumeclaims"]),
                r(&["update"], &[CORE], &["persistentvolumeclaims/status"]),
                r(READ, &[CORE], &["pods"]),
            ],
        ),
        c(
            "system:controller:resource-claim-controller",
            vec![
                r(READ, &[CORE], &["pods"]),
                r(&["update"], &[CORE], &["pods/finalizers"]),
                r(&["create", "delete", "get", "list", "watch"], &[RESOURCE], &["resourceclaims"]),
                r(&["patch", "update"], &[RESOURCE], &["resourceclaims", "resourceclaims/status"]),
                r(&["patch", "update"], &[CORE], &["pods/status"]),
                r(&["patch", "update"], &[RESOURCE], &["resourceclaims/binding"]),
            ],
        ),
        c(
            "system:controller:resourcequota-controller",
            vec![r(&["list", "watch"], &["*"], &["*"]), r(&["update"], &[CORE], &["resourcequotas/status"])],
        ),
        c(
            "system:controller:route-controller",
            vec![r(&["list", "watch"], &[CORE], &["nodes"]), r(&["patch"], &[CORE], &["nodes/status"])],
        ),
        c(
            "system:controller:selinux-warning-controller",
            vec![
                r(READ, &[CORE], &["persistentvolumes"]),
                r(READ, &[CORE], &["persistentvolumeclaims"]),
                r(READ, &[CORE], &["pods"]),
                r(READ, &[STORAGE], &["csidrivers"]),
            ],
        ),
        c(
            "system:controller:service-cidrs-controller",
            vec![
                r(&["get", "list", "patch", "update", "watch"], &[NETWORKING], &["servicecidrs"]),
                r(&["patch", "update"], &[NETWORKING], &["servicecidrs/finalizers"]),
                r(&["patch", "update"], &[NETWORKING], &["servicecidrs/status"]),
                r(READ, &[NETWORKING], &["ipaddresses"]),
            ],
        ),
        c(
            "system:controller:service-controller",
            vec![
                r(READ, &[CORE], &["services"]),
                r(&["patch", "update"], &[CORE], &["services/status"]),
                r(&["list", "watch"], &[CORE], &["nodes"]),
            ],
        ),
        c("system:controller:ttl-controller", vec![r(&["list", "patch", "update", "watch"], &[CORE], &["nodes"])]),
        c(
            "system:controller:validatingadmissionpolicy-status-controller",
            vec![
                r(READ, &["admissionregistration.k8s.io"], &["validatingadmissionpolicies"]),
                r(
                    &["get", "patch", "update"],
                    &["admissionregistration.k8s.io"],
                    &["validatingadmissionpolicies/status"],
                ),
            ],
        ),
        c(
            "system:controller:volumeattributesclass-protection-controller",
            vec![
                r(READ, &[CORE], &["persistentvolumeclaims"]),
                r(READ, &[CORE], &["persistentvolumes"]),
                r(&["get", "list", "update", "watch"], &[STORAGE], &["volumeattributesclasses"]),
            ],
        ),
    ]
}

pub fn cluster_role_bindings() -> Vec<Binding> {
    let mut out = vec![
        cluster_binding("cluster-admin", vec![group("system:masters")]),
        cluster_binding("system:monitoring", vec![group("system:monitoring")]),
        cluster_binding("system:discovery", vec![group("system:authenticated")]),
        cluster_binding("system:basic-user", vec![group("system:authenticated")]),
        cluster_binding(
            "system:public-info-viewer",
            vec![group("system:authenticated"), group("system:unauthenticated")],
        ),
        cluster_binding("system:node-proxier", vec![user("system:kube-proxy")]),
        cluster_binding("system:kube-controller-manager", vec![user("system:kube-controller-manager")]),
        cluster_binding("system:kube-dns", vec![sa("kube-system", "kube-dns")]),
        cluster_binding("system:kube-scheduler", vec![user("system:kube-scheduler")]),
        cluster_binding("system:volume-scheduler", vec![user("system:kube-scheduler")]),
        // Nodes are authorized by the Node authorizer; the binding exists without subjects.
        cluster_binding("system:node", vec![]),
        cluster_binding("system:service-account-issuer-discovery", vec![group("system:serviceaccounts")]),
    ];
    for role in controller_roles() {
        let sa_name = role.name.trim_start_matches("system:controller:");
        out.push(Binding {
            name: role.name,
            namespace: "",
            role_kind: "ClusterRole",
            role_name: role.name,
            subjects: vec![("ServiceAccount", sa_name, "kube-system")],
        });
    }
    out
}

pub fn namespaced_roles() -> Vec<Role> {
    let ns = |namespace: &'static str, name: &'static str, rules: Vec<PolicyRule>| Role {
        name,
        namespace,
        labels: vec![],
        aggregate_from: None,
        rules,
    };
    // Upstream's leader-locking roles are about Leases only since the ConfigMap lock went.
    let leader_locking = vec![
        r(&["create", "get", "list", "update", "watch"], &[COORD], &["leases"]),
        r(&["create", "get", "list", "update", "watch"], &[COORD], &["leasecandidates"]),
    ];
    vec![
        ns(
            "kube-system",
            "extension-apiserver-authentication-reader",
            vec![r(READ, &[CORE], &["configmaps"]).names(&["extension-apiserver-authentication"])],
        ),
        ns("kube-system", "system::leader-locking-kube-controller-manager", leader_locking.clone()),
        ns("kube-system", "system::leader-locking-kube-scheduler", leader_locking),
        ns("kube-system", "system:controller:bootstrap-signer", vec![r(READ, &[CORE], &["secrets"])]),
        ns(
            "kube-system",
            "system:controller:cloud-provider",
            vec![r(&["create", "get", "list", "watch"], &[CORE], &["configmaps"])],
        ),
        ns(
            "kube-system",
            "system:controller:token-cleaner",
            vec![r(&["delete", "get", "list", "watch"], &[CORE], &["secrets"]), events_rule()],
        ),
        ns(
            "kube-public",
            "system:controller:bootstrap-signer",
            vec![
                r(READ, &[CORE], &["configmaps"]),
                r(&["update"], &[CORE], &["configmaps"]).names(&["cluster-info"]),
                events_rule(),
            ],
        ),
    ]
}

pub fn namespaced_role_bindings() -> Vec<Binding> {
    let b = |namespace: &'static str, name: &'static str, role: &'static str, subjects: Vec<Subject>| Binding {
        name,
        namespace,
        role_kind: "Role",
        role_name: role,
        subjects,
    };
    vec![
        b(
            "kube-system",
            "system::extension-apiserver-authentication-reader",
            "extension-apiserver-authentication-reader",
            vec![user("system:kube-controller-manager"), user("system:kube-scheduler")],
        ),
        b(
            "kube-system",
            "system::leader-locking-kube-controller-manager",
            "system::leader-locking-kube-controller-manager",
            vec![
                user("system:kube-controller-manager"),
                sa("kube-system", "kube-controller-manager"),
                sa("kube-system", "leader-election-controller"),
            ],
        ),
        b(
            "kube-system",
            "system::leader-locking-kube-scheduler",
            "system::leader-locking-kube-scheduler",
            vec![user("system:kube-scheduler"), sa("kube-system", "kube-scheduler")],
        ),
        b(
            "kube-system",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![sa("kube-system", "bootstrap-signer")],
        ),
        b(
            "kube-system",
            "system:controller:cloud-provider",
            "system:controller:cloud-provider",
            vec![sa("kube-system", "cloud-provider")],
        ),
        b(
            "kube-system",
            "system:controller:token-cleaner",
            "system:controller:token-cleaner",
            vec![sa("kube-system", "token-cleaner")],
        ),
        b(
            "kube-public",
            "system:controller:bootstrap-signer",
            "system:controller:bootstrap-signer",
            vec![sa("kube-system", "bootstrap-signer")],
        ),
    ]
}
