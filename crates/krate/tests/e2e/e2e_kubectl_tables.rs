//! kubectl 1.32's `get` against `krate server --disable-agent`: the server prints upstream's
//! columns (and `-o wide` adds the priority-1 ones) for kinds beyond the everyday ones.

use crate::common::{Server, free_port, squeeze};

/// A CSR for CN=alice (a throwaway P-256 key), base64 as spec.request carries it.
const CSR_REQUEST: &str = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIWk1JR0JBZ0VBTUI4eERqQU1CZ05WQkFNTUJXRnNhV05sTVEwd0N3WURWUVFLREFSa1pYWnpNRmt3RXdZSApLb1pJemowQ0FRWUlLb1pJemowREFRY0RRZ0FFTEsrZWlHbEM4RFF3YjZ5N3NFTjdzSUl3WkRJUG9JRnNnWlV5ClZ1Z21RRFVIWmlwNC80VkFpblJJWWtVVXptdDZZanc0Qmp3NThrelBwdFk5UDUwM3hhQUFNQW9HQ0NxR1NNNDkKQkFNQ0EwY0FNRVFDSUJ3ZzNyVXZOMmZGaVlTd1dIYUN4cndyaW1ic29sc251QmNhNzdub0lqRzFBaUFEQSthSgpVSnhKWjlFQ3U4SE5tN2d0aUlJVjdrL29TamJ6MUNrUTRuU29GZz09Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=";

fn manifests() -> String {
    let docs = [
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: pv1}\nspec:\n  capacity: {storage: 5Gi}\n  accessModes: [ReadWriteOnce]\n  persistentVolumeReclaimPolicy: Retain\n  storageClassName: fast\n  hostPath: {path: /tmp/pv1}\n",
        "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast}\nprovisioner: example.com/fast\nallowVolumeExpansion: true\n",
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: default}\nspec:\n  ingressClassName: nginx\n  rules:\n  - host: web.example.com\n    http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 80}}}}\n",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: web, namespace: default}\nspec:\n  podSelector: {matchLabels: {app: web}}\n",
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web, namespace: default}\nspec:\n  minAvailable: 2\n  selector: {matchLabels: {app: web}}\n",
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: web, namespace: default}\nspec:\n  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}\n  minReplicas: 1\n  maxReplicas: 5\n  metrics:\n  - type: Resource\n    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}\n",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: reader, namespace: default}\nrules:\n- {apiGroups: [''], resources: [pods], verbs: [get]}\n",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {name: readers, namespace: default}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: view}\nsubjects:\n- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}\n- {kind: ServiceAccount, name: builder, namespace: default}\n",
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: table-reader}\nrules:\n- {apiGroups: [''], resources: [pods], verbs: [list]}\n",
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\nglobalDefault: false\n",
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: limits, namespace: default}\nspec:\n  limits:\n  - type: Container\n    default: {cpu: 500m}\n",
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: compute, namespace: default}\nspec:\n  hard: {pods: '10', requests.cpu: '1', limits.cpu: '2'}\n",
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: default}\naddressType: IPv4\nports: [{name: http, port: 80, protocol: TCP}]\nendpoints: [{addresses: [10.0.0.1]}]\n",
    ];
    let csr = format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: alice}}\nspec:\n  request: {CSR_REQUEST}\n  signerName: kubernetes.io/kube-apiserver-client\n  expirationSeconds: 86400\n  usages: [client auth]\n"
    );
    docs.iter().copied().chain([csr.as_str()]).collect::<Vec<_>>().join("---\n")
}

#[test]
fn kubectl_get_prints_upstream_columns() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let file = dir.path().join("objects.yaml");
    std::fs::write(&file, manifests()).unwrap();
    let created = srv.kubectl_ok(&["create", "--validate=false", "-f", &file.display().to_string()]);
    assert!(created.contains("certificatesigningrequest.certificates.k8s.io/alice created"), "{created}");

    // (resource, name, header, header with -o wide)
    let cases = [
        (
            "pv",
            "pv1",
            "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE",
            "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE VOLUMEMODE",
        ),
        (
            "storageclass",
            "fast",
            "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
            "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
        ),
        ("ingress", "web", "NAME CLASS HOSTS ADDRESS PORTS AGE", "NAME CLASS HOSTS ADDRESS PORTS AGE"),
        ("networkpolicy", "web", "NAME POD-SELECTOR AGE", "NAME POD-SELECTOR AGE"),
        (
            "pdb",
            "web",
            "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
            "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE",
        ),
        (
            "hpa",
            "web",
            "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE",
            "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE",
        ),
        ("role", "reader", "NAME CREATED AT", "NAME CREATED AT"),
        ("rolebinding", "readers", "NAME ROLE AGE", "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS"),
        ("clusterrole", "table-reader", "NAME CREATED AT", "NAME CREATED AT"),
        (
            "priorityclass",
            "high",
            "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY",
            "NAME VALUE GLOBAL-DEFAULT AGE PREEMPTIONPOLICY",
        ),
        ("limitrange", "limits", "NAME CREATED AT", "NAME CREATED AT"),
        ("resourcequota", "compute", "NAME REQUEST LIMIT AGE", "NAME REQUEST LIMIT AGE"),
        (
            "csr",
            "alice",
            "NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION",
            "NAME AGE SIGNERNAME REQUESTOR REQUESTEDDURATION CONDITION",
        ),
        ("endpointslice", "web-1", "NAME ADDRESSTYPE PORTS ENDPOINTS AGE", "NAME ADDRESSTYPE PORTS ENDPOINTS AGE"),
    ];
    for (resource, name, header, wide_header) in cases {
        let plain = squeeze(&srv.kubectl_ok(&["get", resource, name]));
        assert_eq!(plain[0], header, "kubectl get {resource}: {plain:?}");
        assert!(plain[1].starts_with(&format!("{name} ")), "{resource}: {plain:?}");
        let wide = squeeze(&srv.kubectl_ok(&["get", resource, name, "-o", "wide"]));
        assert_eq!(wide[0], wide_header, "kubectl get {resource} -o wide: {wide:?}");
    }

    // Cells as upstream computes them.
    let row = |args: &[&str]| squeeze(&srv.kubectl_ok(args))[1].clone();
    let pv = row(&["get", "pv", "pv1"]);
    // (STATUS is whatever phase the volume has reached; CLAIM and REASON are empty.)
    assert!(pv.starts_with("pv1 5Gi RWO Retain ") && pv.contains(" fast <unset> "), "{pv}");
    let r = row(&["get", "storageclass", "fast"]);
    assert!(r.starts_with("fast example.com/fast Delete Immediate true "), "{r}");
    let r = row(&["get", "ingress", "web"]);
    assert!(r.starts_with("web nginx web.example.com 80 "), "{r}");
    let r = row(&["get", "networkpolicy", "web"]);
    assert!(r.starts_with("web app=web "), "{r}");
    let r = row(&["get", "pdb", "web"]);
    assert!(r.starts_with("web 2 N/A 0 "), "{r}");
    let r = row(&["get", "hpa", "web"]);
    assert!(r.starts_with("web Deployment/web cpu: <unknown>/80% 1 5 0 "), "{r}");
    let binding = row(&["get", "rolebinding", "readers", "-o", "wide"]);
    assert!(
        binding.starts_with("readers ClusterRole/view ") && binding.ends_with(" alice default/builder"),
        "{binding}"
    );
    let r = row(&["get", "priorityclass", "high"]);
    assert!(r.starts_with("high 1000 false "), "{r}");
    // (REQUESTOR is the creating user once the CSR strategy records it.)
    let r = row(&["get", "csr", "alice"]);
    assert!(r.contains(" kubernetes.io/kube-apiserver-client ") && r.ends_with(" 24h Pending"), "{r}");
    let r = row(&["get", "endpointslice", "web-1"]);
    assert!(r.starts_with("web-1 IPv4 80 10.0.0.1 "), "{r}");
}

#[test]
fn kubectl_get_prints_upstream_columns_for_cluster_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let srv = Server::start(&dir.path().join("data"), free_port());
    let docs = [
        "apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata: {name: nginx}\nspec: {controller: k8s.io/ingress-nginx}\n",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: replicas}\nspec:\n  matchConstraints:\n    resourceRules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]\n  validations: [{expression: 'object.spec.replicas <= 5'}]\n",
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: replicas}\nspec: {policyName: replicas, validationActions: [Deny]}\n",
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: gvisor}\nhandler: runsc\n",
        "apiVersion: storage.k8s.io/v1\nkind: CSIDriver\nmetadata: {name: csi.example.com}\nspec: {attachRequired: false}\n",
        "apiVersion: v1\nkind: ReplicationController\nmetadata: {name: legacy, namespace: default}\nspec:\n  replicas: 0\n  selector: {app: legacy}\n  template:\n    metadata: {labels: {app: legacy}}\n    spec: {containers: [{name: c, image: busybox}]}\n",
        "apiVersion: v1\nkind: PodTemplate\nmetadata: {name: tpl, namespace: default}\ntemplate:\n  metadata: {labels: {app: tpl}}\n  spec: {containers: [{name: c, image: busybox}]}\n",
    ];
    let file = dir.path().join("cluster.yaml");
    std::fs::write(&file, docs.join("---\n")).unwrap();
    srv.kubectl_ok(&["create", "--validate=false", "-f", &file.display().to_string()]);

    // (resource, name, header, header with -o wide, row prefix)
    let cases = [
        ("ingressclass", "nginx", "NAME CONTROLLER PARAMETERS AGE", "", "nginx k8s.io/ingress-nginx <none> "),
        ("validatingadmissionpolicy", "replicas", "NAME VALIDATIONS PARAMKIND AGE", "", "replicas 1 <unset> "),
        (
            "validatingadmissionpolicybinding",
            "replicas",
            "NAME POLICYNAME PARAMREF AGE",
            "",
            "replicas replicas <unset> ",
        ),
        ("runtimeclass", "gvisor", "NAME HANDLER AGE", "", "gvisor runsc "),
        (
            "csidriver",
            "csi.example.com",
            "NAME ATTACHREQUIRED PODINFOONMOUNT STORAGECAPACITY TOKENREQUESTS REQUIRESREPUBLISH MODES AGE",
            "",
            "csi.example.com false false false <unset> false ",
        ),
        (
            "replicationcontroller",
            "legacy",
            "NAME DESIRED CURRENT READY AGE",
            "NAME DESIRED CURRENT READY AGE CONTAINERS IMAGES SELECTOR",
            "legacy 0 0 0 ",
        ),
        ("podtemplate", "tpl", "NAME CONTAINERS IMAGES POD LABELS", "", "tpl c busybox app=tpl"),
    ];
    for (resource, name, header, wide_header, prefix) in cases {
        let plain = squeeze(&srv.kubectl_ok(&["get", resource, name]));
        assert_eq!(plain[0], header, "kubectl get {resource}: {plain:?}");
        assert!(plain[1].starts_with(prefix), "kubectl get {resource}: {plain:?}");
        let wide = squeeze(&srv.kubectl_ok(&["get", resource, name, "-o", "wide"]));
        assert_eq!(wide[0], if wide_header.is_empty() { header } else { wide_header }, "{resource} -o wide");
    }
    // Kinds the server keeps itself, when it has any.
    for (resource, header) in [
        ("flowschemas", "NAME PRIORITYLEVEL MATCHINGPRECEDENCE DISTINGUISHERMETHOD AGE MISSINGPL"),
        ("prioritylevelconfigurations", "NAME TYPE NOMINALCONCURRENCYSHARES QUEUES HANDSIZE QUEUELENGTHLIMIT AGE"),
        ("apiservices", "NAME SERVICE AVAILABLE AGE"),
        ("customresourcedefinitions", "NAME CREATED AT"),
    ] {
        let out = squeeze(&srv.kubectl_ok(&["get", resource]));
        if out.len() > 1 {
            assert_eq!(out[0], header, "kubectl get {resource}: {out:?}");
        }
    }
}
