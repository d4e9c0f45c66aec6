//! Each kind's row checked against the cells upstream's printer computes for it.
use super::*;
use super::{apps::*, batch::*, core::*};

#[test]
fn ages_like_upstream() {
    for (secs, want) in [
        (5, "5s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (50 * 3600, "2d2h"),
        (10 * 86400, "10d"),
        (800 * 86400, "2y70d"),
    ] {
        assert_eq!(human_duration(secs), want, "{secs}");
    }
}

#[test]
fn pod_status_follows_containers_and_deletion() {
    let mut p = json!({"metadata": {"name": "p"}, "status": {"phase": "Pending", "containerStatuses": [{"state": {"waiting": {"reason": "ContainerCreating"}}}]}});
    assert_eq!(pod_status(&p), "ContainerCreating");
    p["status"]["containerStatuses"][0]["state"] = json!({"terminated": {"reason": "Completed", "exitCode": 0}});
    assert_eq!(pod_status(&p), "Completed");
    p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert_eq!(pod_status(&p), "Terminating");
}

#[test]
fn workload_and_event_rows() {
    let job = json!({"metadata": {"name": "j"}, "spec": {"completions": 3, "parallelism": 1},
        "status": {"succeeded": 2, "startTime": "2026-01-01T00:00:00Z", "completionTime": "2026-01-01T00:01:05Z",
            "conditions": [{"type": "Complete", "status": "True"}]}});
    let row = job_row(&job, "1m");
    assert_eq!((row[1].as_str(), row[2].as_str(), row[3].as_str()), (Some("Complete"), Some("2/3"), Some("65s")));
    let ev = json!({"metadata": {"name": "e"}, "type": "Warning", "reason": "BackOff", "message": "m",
        "involvedObject": {"kind": "Pod", "name": "p"}});
    assert_eq!(event_row(&ev, "3s")[3], "pod/p");
    let ep = json!({"metadata": {"name": "e"}, "subsets": [{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 80}]}]});
    assert_eq!(endpoints_row(&ep, "1s")[1], "10.0.0.1:80,10.0.0.2:80");
    let rs = json!({"metadata": {"name": "r"}, "spec": {"replicas": 3}, "status": {"replicas": 2, "readyReplicas": 1}});
    assert_eq!(&replica_set_row(&rs, "1s")[1..4], &[json!(3), json!(2), json!(1)]);
}

#[test]
fn service_rows_show_ports_and_ips() {
    let svc = json!({"metadata": {"name": "web"}, "spec": {"type": "NodePort", "clusterIP": "10.43.0.9", "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}], "selector": {"app": "web"}}});
    let row = service_row(&svc, "1s");
    assert_eq!(row[2], "10.43.0.9");
    assert_eq!(row[3], "<none>");
    assert_eq!(row[4], "80:30080/TCP");
    assert_eq!(row[6], "app=web");
}

/// A kind's cells for `obj` (aged "5m"), checked to be as many as its columns.
fn row(group: &str, kind: &str, obj: Value) -> Vec<Value> {
    let def = for_kind(group, kind);
    let cells = (def.row)(&obj, "5m");
    assert_eq!(cells.len(), def.columns.len(), "{group}/{kind}: one cell per column");
    cells
}

fn headers(group: &str, kind: &str) -> Vec<(&'static str, bool)> {
    for_kind(group, kind).columns.iter().map(|c| (c.name, c.wide)).collect()
}

fn ago(secs: i64) -> String {
    (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(secs)).to_string()
}

const KINDS: &[(&str, &str)] = &[
    ("", "Pod"),
    ("", "Service"),
    ("", "Node"),
    ("", "Event"),
    ("events.k8s.io", "Event"),
    ("", "Namespace"),
    ("", "ConfigMap"),
    ("", "Secret"),
    ("", "ServiceAccount"),
    ("", "Endpoints"),
    ("", "PersistentVolumeClaim"),
    ("", "PersistentVolume"),
    ("", "ReplicationController"),
    ("", "PodTemplate"),
    ("", "ResourceQuota"),
    ("", "ComponentStatus"),
    ("", "LimitRange"),
    ("apps", "Deployment"),
    ("apps", "ReplicaSet"),
    ("apps", "StatefulSet"),
    ("apps", "DaemonSet"),
    ("apps", "ControllerRevision"),
    ("batch", "Job"),
    ("batch", "CronJob"),
    ("networking.k8s.io", "Ingress"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "NetworkPolicy"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("networking.k8s.io", "IPAddress"),
    ("discovery.k8s.io", "EndpointSlice"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "CSIStorageCapacity"),
    ("rbac.authorization.k8s.io", "Role"),
    ("rbac.authorization.k8s.io", "RoleBinding"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("policy", "PodDisruptionBudget"),
    ("autoscaling", "HorizontalPodAutoscaler"),
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
    ("coordination.k8s.io", "Lease"),
    ("coordination.k8s.io", "LeaseCandidate"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("apiregistration.k8s.io", "APIService"),
    ("internal.apiserver.k8s.io", "StorageVersion"),
    ("storagemigration.k8s.io", "StorageVersionMigration"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "ResourceClaim"),
    ("resource.k8s.io", "ResourceClaimTemplate"),
    ("resource.k8s.io", "ResourceSlice"),
];

#[test]
fn every_kind_prints_any_shape_without_panicking() {
    let shapes = [
        json!({}),
        json!({"metadata": {"name": "x", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {}, "status": {}}),
        json!({"metadata": 5, "spec": "odd", "status": [1], "subsets": {}, "webhooks": "x", "conditions": 3}),
        json!({"spec": {"metrics": [{}, {"type": "Resource"}, {"type": "Pods", "pods": null}], "rules": [null],
            "paramRef": {}, "parameters": {}, "claimRef": null, "limited": {"limitResponse": {"queuing": {}}}},
            "status": {"conditions": [{}], "hard": {"cpu": 5}, "containerStatuses": [{"state": {"terminated": {}}}],
            "initContainerStatuses": [{"state": {}}]}}),
    ];
    for (group, kind) in KINDS {
        for shape in &shapes {
            row(group, kind, shape.clone());
        }
    }
}

#[test]
fn kinds_without_a_printer_keep_name_and_created_at() {
    for (group, kind) in [
        ("rbac.authorization.k8s.io", "Role"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("", "LimitRange"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ] {
        assert_eq!(headers(group, kind), [("Name", false), ("Created At", false)], "{kind}");
        let cells = row(group, kind, json!({"metadata": {"name": "r", "creationTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(cells, [json!("r"), json!("2026-01-01T00:00:00Z")]);
    }
    // DRA's classes and templates print an age instead.
    assert_eq!(headers("resource.k8s.io", "DeviceClass"), [("Name", false), ("Age", false)]);
}

#[test]
fn persistent_volumes() {
    let pv = json!({"metadata": {"name": "pv1"}, "spec": {"capacity": {"storage": "5Gi"},
        "accessModes": ["ReadWriteMany", "ReadWriteOnce"], "persistentVolumeReclaimPolicy": "Retain",
        "claimRef": {"namespace": "default", "name": "data"}, "storageClassName": "fast", "volumeMode": "Filesystem"},
        "status": {"phase": "Bound"}});
    assert_eq!(
        row("", "PersistentVolume", pv),
        [
            json!("pv1"),
            json!("5Gi"),
            json!("RWO,RWX"),
            json!("Retain"),
            json!("Bound"),
            json!("default/data"),
            json!("fast"),
            json!("<unset>"),
            json!(""),
            json!("5m"),
            json!("Filesystem")
        ]
    );
    let headers: Vec<_> = headers("", "PersistentVolume");
    assert_eq!(headers.last(), Some(&("VolumeMode", true)));
    // An unbound claim shows neither capacity nor access modes, whatever its status says.
    let pvc = json!({"metadata": {"name": "data", "annotations": {"volume.beta.kubernetes.io/storage-class": "old"}},
        "spec": {"storageClassName": "new"}, "status": {"phase": "Pending", "capacity": {"storage": "1Gi"}}});
    assert_eq!(
        row("", "PersistentVolumeClaim", pvc),
        ["data", "Pending", "", "", "", "old", "<unset>", "5m", "<unset>"].map(|c| json!(c))
    );
}

#[test]
fn storage_kinds() {
    let sc = json!({"metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
    assert_eq!(
        row("storage.k8s.io", "StorageClass", sc),
        [
            json!("standard (default)"),
            json!("rancher.io/local-path"),
            json!("Delete"),
            json!("WaitForFirstConsumer"),
            json!(false),
            json!("5m")
        ]
    );
    let driver = json!({"metadata": {"name": "csi.example.com"}, "spec": {}});
    assert_eq!(
        row("storage.k8s.io", "CSIDriver", driver),
        [
            json!("csi.example.com"),
            json!(true),
            json!(false),
            json!(false),
            json!("<unset>"),
            json!(false),
            json!("<none>"),
            json!("5m")
        ]
    );
    let driver = json!({"metadata": {"name": "d"}, "spec": {"attachRequired": false, "tokenRequests": [{"audience": "a"}, {"audience": "b"}],
        "volumeLifecycleModes": ["Persistent", "Ephemeral"]}});
    let cells = row("storage.k8s.io", "CSIDriver", driver);
    assert_eq!((&cells[1], &cells[4], &cells[6]), (&json!(false), &json!("a,b"), &json!("Persistent,Ephemeral")));
    let va = json!({"metadata": {"name": "csi-123"}, "spec": {"attacher": "csi.example.com", "nodeName": "n1",
        "source": {"persistentVolumeName": "pv1"}}, "status": {"attached": true}});
    assert_eq!(
        row("storage.k8s.io", "VolumeAttachment", va),
        [json!("csi-123"), json!("csi.example.com"), json!("pv1"), json!("n1"), json!(true), json!("5m")]
    );
    let node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "a"}, {"name": "b"}]}});
    assert_eq!(row("storage.k8s.io", "CSINode", node)[1], json!(2));
    let cap = json!({"metadata": {"name": "c"}, "storageClassName": "fast", "capacity": "1024Mi"});
    assert_eq!(row("storage.k8s.io", "CSIStorageCapacity", cap), ["c", "fast", "1Gi"].map(|c| json!(c)));
    let cap = json!({"metadata": {"name": "c"}, "storageClassName": "fast"});
    assert_eq!(row("storage.k8s.io", "CSIStorageCapacity", cap)[2], json!("<unset>"));
    let vac = json!({"metadata": {"name": "gold"}, "driverName": "csi.example.com"});
    assert_eq!(
        row("storage.k8s.io", "VolumeAttributesClass", vac),
        ["gold", "csi.example.com", "5m"].map(|c| json!(c))
    );
}

#[test]
fn networking_kinds() {
    let ing = json!({"metadata": {"name": "web"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}, {}, {"host": "c.example.com"}, {"host": "d.example.com"}],
        "tls": [{"hosts": ["a.example.com"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"hostname": "lb.example.com"}, {"ip": "10.0.0.1"}]}}});
    assert_eq!(
        row("networking.k8s.io", "Ingress", ing),
        [
            "web",
            "nginx",
            "a.example.com,b.example.com,c.example.com + 2 more...",
            "10.0.0.1,10.0.0.2,lb.example.com",
            "80, 443",
            "5m"
        ]
        .map(|c| json!(c))
    );
    let bare = json!({"metadata": {"name": "bare"}, "spec": {"defaultBackend": {"service": {"name": "s"}}}});
    assert_eq!(row("networking.k8s.io", "Ingress", bare), ["bare", "<none>", "*", "", "80", "5m"].map(|c| json!(c)));
    let class = json!({"metadata": {"name": "external-lb"}, "spec": {"controller": "example.com/ingress-controller",
        "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}});
    assert_eq!(
        row("networking.k8s.io", "IngressClass", class),
        ["external-lb", "example.com/ingress-controller", "IngressParameters.k8s.example.com/external-lb", "5m"]
            .map(|c| json!(c))
    );
    let np = json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}});
    assert_eq!(row("networking.k8s.io", "NetworkPolicy", np)[1], json!("<none>"));
    let np = json!({"metadata": {"name": "web"}, "spec": {"podSelector": {"matchLabels": {"app": "web"}}}});
    assert_eq!(row("networking.k8s.io", "NetworkPolicy", np)[1], json!("app=web"));
    let slice = json!({"metadata": {"name": "web-abc"}, "addressType": "IPv4",
        "ports": [{"port": 80}, {"name": "https"}, {}, {"port": 8080}],
        "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}]});
    assert_eq!(
        row("discovery.k8s.io", "EndpointSlice", slice),
        ["web-abc", "IPv4", "80,https,* + 1 more...", "10.0.0.1,10.0.0.2,10.0.0.3", "5m"].map(|c| json!(c))
    );
    let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv6"});
    assert_eq!(row("discovery.k8s.io", "EndpointSlice", empty)[2..4], [json!("<unset>"), json!("<unset>")]);
    let ip = json!({"metadata": {"name": "10.96.0.1"}, "spec": {"parentRef": {"group": "", "resource": "services",
        "namespace": "default", "name": "kubernetes"}}});
    assert_eq!(
        row("networking.k8s.io", "IPAddress", ip),
        ["10.96.0.1", "services/default/kubernetes"].map(|c| json!(c))
    );
    let cidr = json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/12", "fd00::/108"]}});
    assert_eq!(row("networking.k8s.io", "ServiceCIDR", cidr)[1], json!("10.96.0.0/12,fd00::/108"));
}

#[test]
fn rbac_bindings_show_role_and_subjects() {
    let rb = json!({"metadata": {"name": "rb"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
            {"kind": "ServiceAccount", "namespace": "default", "name": "builder"}, {"kind": "User", "name": "bob"}]});
    let want = ["rb", "ClusterRole/view", "5m", "alice, bob", "devs", "default/builder"].map(|c| json!(c));
    assert_eq!(row("rbac.authorization.k8s.io", "RoleBinding", rb.clone()), want);
    assert_eq!(row("rbac.authorization.k8s.io", "ClusterRoleBinding", rb), want);
    assert_eq!(
        headers("rbac.authorization.k8s.io", "RoleBinding"),
        [
            ("Name", false),
            ("Role", false),
            ("Age", false),
            ("Users", true),
            ("Groups", true),
            ("ServiceAccounts", true)
        ]
    );
}

#[test]
fn pod_disruption_budgets() {
    let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        row("policy", "PodDisruptionBudget", pdb),
        [json!("web"), json!("2"), json!("N/A"), json!(1), json!("5m")]
    );
    let pdb = json!({"metadata": {"name": "db"}, "spec": {"maxUnavailable": "25%"}});
    assert_eq!(
        row("policy", "PodDisruptionBudget", pdb),
        [json!("db"), json!("N/A"), json!("25%"), json!(0), json!("5m")]
    );
}

#[test]
fn horizontal_pod_autoscalers() {
    let cpu = json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}});
    let hpa = json!({"metadata": {"name": "web"}, "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
        "maxReplicas": 10, "metrics": [cpu]}});
    assert_eq!(
        row("autoscaling", "HorizontalPodAutoscaler", hpa.clone()),
        [
            json!("web"),
            json!("Deployment/web"),
            json!("cpu: <unknown>/80%"),
            json!("<unset>"),
            json!(10),
            json!(0),
            json!("5m")
        ]
    );
    let mut measured = hpa.clone();
    measured["spec"]["minReplicas"] = json!(2);
    measured["status"] = json!({"currentReplicas": 3, "currentMetrics": [{"type": "Resource",
        "resource": {"name": "cpu", "current": {"averageUtilization": 45, "averageValue": "100m"}}}]});
    let cells = row("autoscaling", "HorizontalPodAutoscaler", measured);
    assert_eq!((&cells[2], &cells[3], &cells[5]), (&json!("cpu: 45%/80%"), &json!("2"), &json!(3)));
    let mut many = hpa.clone();
    many["spec"]["metrics"] = json!([
        {"type": "Pods", "pods": {"metric": {"name": "packets"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
        {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "AverageValue", "averageValue": "30"}}},
        {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "512Mi"}}},
    ]);
    assert_eq!(
        row("autoscaling", "HorizontalPodAutoscaler", many)[2],
        json!("<unknown>/1k, <unknown>/30 (avg) + 1 more...")
    );
    // An object still in autoscaling/v1's shape prints as the CPU metric it converts to.
    let v1 = json!({"metadata": {"name": "old"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "old"},
        "minReplicas": 1, "maxReplicas": 5, "targetCPUUtilizationPercentage": 50},
        "status": {"currentReplicas": 1, "currentCPUUtilizationPercentage": 30}});
    assert_eq!(row("autoscaling", "HorizontalPodAutoscaler", v1)[2], json!("cpu: 30%/50%"));
    let none = json!({"metadata": {"name": "n"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "n"}, "maxReplicas": 1}});
    assert_eq!(row("autoscaling", "HorizontalPodAutoscaler", none)[2], json!("<none>"));
}

#[test]
fn quotas_split_requests_from_limits() {
    let quota = json!({"metadata": {"name": "compute"}, "status": {
        "hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "2Gi", "requests.memory": "1Gi", "limits.cpu": "2"},
        "used": {"pods": "3", "requests.cpu": "500m", "requests.memory": "512Mi", "limits.cpu": "1"}}});
    assert_eq!(
        row("", "ResourceQuota", quota),
        [
            "compute",
            "pods: 3/10, requests.cpu: 500m/1, requests.memory: 512Mi/1Gi",
            "limits.cpu: 1/2, limits.memory: 0/2Gi",
            "5m"
        ]
        .map(|c| json!(c))
    );
}

#[test]
fn cluster_kinds() {
    let pc = json!({"metadata": {"name": "high"}, "value": 1000000, "globalDefault": false, "preemptionPolicy": "PreemptLowerPriority"});
    assert_eq!(
        row("scheduling.k8s.io", "PriorityClass", pc),
        [json!("high"), json!(1000000), json!(false), json!("5m"), json!("PreemptLowerPriority")]
    );
    let rc = json!({"metadata": {"name": "gvisor"}, "handler": "runsc"});
    assert_eq!(row("node.k8s.io", "RuntimeClass", rc), ["gvisor", "runsc", "5m"].map(|c| json!(c)));
    let csr = json!({"metadata": {"name": "alice"}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client",
        "username": "admin", "expirationSeconds": 3600}, "status": {"conditions": [{"type": "Approved", "status": "True"}],
        "certificate": "LS0tLS1CRUdJTg=="}});
    assert_eq!(
        row("certificates.k8s.io", "CertificateSigningRequest", csr),
        ["alice", "5m", "kubernetes.io/kube-apiserver-client", "admin", "60m", "Approved,Issued"].map(|c| json!(c))
    );
    let denied = json!({"metadata": {"name": "d"}, "status": {"conditions": [{"type": "Approved"}, {"type": "Denied"}, {"type": "Failed"}]}});
    let cells = row("certificates.k8s.io", "CertificateSigningRequest", denied);
    assert_eq!((&cells[2], &cells[4], &cells[5]), (&json!("<none>"), &json!("<none>"), &json!("Denied,Failed")));
    let pending = json!({"metadata": {"name": "p"}});
    assert_eq!(row("certificates.k8s.io", "CertificateSigningRequest", pending)[5], json!("Pending"));
    let fs = json!({"metadata": {"name": "workload-leader-election"}, "spec": {"priorityLevelConfiguration": {"name": "leader-election"},
        "matchingPrecedence": 200, "distinguisherMethod": {"type": "ByUser"}},
        "status": {"conditions": [{"type": "Dangling", "status": "False"}]}});
    assert_eq!(
        row("flowcontrol.apiserver.k8s.io", "FlowSchema", fs),
        [
            json!("workload-leader-election"),
            json!("leader-election"),
            json!(200),
            json!("ByUser"),
            json!("5m"),
            json!("False")
        ]
    );
    let fs = json!({"metadata": {"name": "f"}, "spec": {"priorityLevelConfiguration": {"name": "p"}, "matchingPrecedence": 1}});
    let cells = row("flowcontrol.apiserver.k8s.io", "FlowSchema", fs);
    assert_eq!((&cells[3], &cells[5]), (&json!("<none>"), &json!("?")));
    let exempt = json!({"metadata": {"name": "exempt"}, "spec": {"type": "Exempt", "exempt": {}}});
    assert_eq!(
        row("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration", exempt),
        ["exempt", "Exempt", "<none>", "<none>", "<none>", "<none>", "5m"].map(|c| json!(c))
    );
    let limited = json!({"metadata": {"name": "workload-low"}, "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 100,
        "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}});
    assert_eq!(
        row("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration", limited),
        [json!("workload-low"), json!("Limited"), json!(100), json!(128), json!(6), json!(50), json!("5m")]
    );
    let local = json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
    assert_eq!(
        row("apiregistration.k8s.io", "APIService", local),
        ["v1.apps", "Local", "True", "5m"].map(|c| json!(c))
    );
    let remote = json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
    assert_eq!(
        row("apiregistration.k8s.io", "APIService", remote),
        ["v1beta1.metrics.k8s.io", "kube-system/metrics-server", "False (MissingEndpoints)", "5m"].map(|c| json!(c))
    );
    let lease = json!({"metadata": {"name": "kube-scheduler"}, "spec": {"holderIdentity": "node1_abc"}});
    assert_eq!(row("coordination.k8s.io", "Lease", lease), ["kube-scheduler", "node1_abc", "5m"].map(|c| json!(c)));
}

#[test]
fn admission_kinds() {
    let hooks = json!({"metadata": {"name": "h"}, "webhooks": [{"name": "a"}, {"name": "b"}]});
    assert_eq!(
        row("admissionregistration.k8s.io", "ValidatingWebhookConfiguration", hooks.clone()),
        [json!("h"), json!(2), json!("5m")]
    );
    assert_eq!(
        row("admissionregistration.k8s.io", "MutatingWebhookConfiguration", json!({"metadata": {"name": "m"}}))[1],
        json!(0)
    );
    let vap = json!({"metadata": {"name": "replicas"}, "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [{"expression": "true"}, {"expression": "false"}]}});
    assert_eq!(
        row("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", vap),
        [json!("replicas"), json!(2), json!("v1/ConfigMap"), json!("5m")]
    );
    let vap = json!({"metadata": {"name": "p"}, "spec": {}});
    assert_eq!(row("admissionregistration.k8s.io", "ValidatingAdmissionPolicy", vap)[2], json!("<unset>"));
    let map = json!({"metadata": {"name": "m"}, "spec": {"mutations": [{"patchType": "ApplyConfiguration"}]}});
    assert_eq!(row("admissionregistration.k8s.io", "MutatingAdmissionPolicy", map)[1], json!(1));
    let binding = |param: Value| {
        let b = json!({"metadata": {"name": "b"}, "spec": {"policyName": "replicas", "paramRef": param}});
        row("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding", b)[2].clone()
    };
    assert_eq!(binding(json!({"name": "limits", "namespace": "prod"})), json!("prod/limits"));
    assert_eq!(binding(json!({"name": "limits"})), json!("*/limits"));
    assert_eq!(
        binding(json!({"selector": {"matchLabels": {"env": "prod"}}})),
        json!(
            "&LabelSelector{MatchLabels:map[string]string{env: prod,},MatchExpressions:[]LabelSelectorRequirement{},}"
        )
    );
    assert_eq!(binding(Value::Null), json!("<unset>"));
    assert_eq!(
        headers("admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"),
        [("Name", false), ("PolicyName", false), ("ParamRef", false), ("Age", false)]
    );
}

#[test]
fn dra_kinds() {
    let claim = json!({"metadata": {"name": "gpu"}, "status": {}});
    assert_eq!(row("resource.k8s.io", "ResourceClaim", claim), ["gpu", "pending", "5m"].map(|c| json!(c)));
    let claim = json!({"metadata": {"name": "gpu"}, "status": {"allocation": {"devices": {}}, "reservedFor": [{"resource": "pods", "name": "p"}]}});
    assert_eq!(row("resource.k8s.io", "ResourceClaim", claim)[1], json!("allocated,reserved"));
    let claim = json!({"metadata": {"name": "gpu", "deletionTimestamp": "2026-01-01T00:00:00Z"}});
    assert_eq!(row("resource.k8s.io", "ResourceClaim", claim)[1], json!("deleted"));
    let slice = json!({"metadata": {"name": "n1-gpu"}, "spec": {"nodeName": "n1", "driver": "gpu.example.com", "pool": {"name": "n1"}}});
    assert_eq!(
        row("resource.k8s.io", "ResourceSlice", slice),
        ["n1-gpu", "n1", "gpu.example.com", "n1", "5m"].map(|c| json!(c))
    );
}

#[test]
fn core_and_apps_kinds() {
    let rc = json!({"metadata": {"name": "rc"}, "spec": {"replicas": 3, "selector": {"b": "2", "a": "1"},
        "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}, {"name": "log", "image": "busybox"}]}}},
        "status": {"replicas": 3, "readyReplicas": 2}});
    assert_eq!(
        row("", "ReplicationController", rc),
        [
            json!("rc"),
            json!(3),
            json!(3),
            json!(2),
            json!("5m"),
            json!("web,log"),
            json!("nginx,busybox"),
            json!("a=1,b=2")
        ]
    );
    let pt = json!({"metadata": {"name": "pt"}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}});
    assert_eq!(row("", "PodTemplate", pt), ["pt", "c", "i", "app=web"].map(|c| json!(c)));
    let cs =
        json!({"metadata": {"name": "etcd-0"}, "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
    assert_eq!(row("", "ComponentStatus", cs), ["etcd-0", "Healthy", "ok", ""].map(|c| json!(c)));
    let cr = json!({"metadata": {"name": "fluentd-5d8f", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": "fluentd", "controller": true}]}, "revision": 3});
    assert_eq!(
        row("apps", "ControllerRevision", cr),
        [json!("fluentd-5d8f"), json!("daemonset.apps/fluentd"), json!(3), json!("5m")]
    );
    let orphan = json!({"metadata": {"name": "x"}, "revision": 1});
    assert_eq!(row("apps", "ControllerRevision", orphan)[1], json!("<none>"));
    let ds = json!({"metadata": {"name": "ds"}, "spec": {"selector": {"matchLabels": {"app": "ds"}},
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}});
    assert_eq!(row("apps", "DaemonSet", ds)[6..], ["<none>", "5m", "c", "i", "app=ds"].map(|c| json!(c)));
    let cj = json!({"metadata": {"name": "cj"}, "spec": {"schedule": "*/5 * * * *", "suspend": false}});
    let cells = row("batch", "CronJob", cj);
    assert_eq!(cells[1..6], [json!("*/5 * * * *"), json!("<none>"), json!("False"), json!(0), json!("<none>")]);
}

#[test]
fn pods_count_sidecars_and_show_restart_age() {
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.42.0.5"}], "containerStatuses": [{"name": "a", "ready": true,
            "restartCount": 2, "state": {"running": {}}, "lastState": {"terminated": {"finishedAt": ago(300)}}}]}});
    let cells = row("", "Pod", pod);
    assert_eq!(cells[..5], [json!("p"), json!("1/1"), json!("Running"), json!("2 (5m ago)"), json!("5m")]);
    assert_eq!(cells[5..], ["10.42.0.5", "<none>", "<none>", "<none>"].map(|c| json!(c)));
    let init = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "a"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [{"name": "init", "state": {"waiting": {"reason": "PodInitializing"}}}],
            "containerStatuses": [{"name": "a", "state": {"waiting": {"reason": "PodInitializing"}}}]}});
    assert_eq!(row("", "Pod", init)[1..3], [json!("0/1"), json!("Init:0/1")]);
    let sidecar = json!({"metadata": {"name": "p"}, "spec": {"initContainers": [{"name": "side", "restartPolicy": "Always"}],
        "containers": [{"name": "a"}], "readinessGates": [{"conditionType": "example.com/ready"}]},
        "status": {"phase": "Running", "conditions": [{"type": "example.com/ready", "status": "True"}],
            "initContainerStatuses": [{"name": "side", "started": true, "ready": true, "state": {"running": {}}}],
            "containerStatuses": [{"name": "a", "ready": true, "state": {"running": {}}}]}});
    let cells = row("", "Pod", sidecar);
    assert_eq!((&cells[1], &cells[2], &cells[8]), (&json!("2/2"), &json!("Running"), &json!("1/1")));
    let gated = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
    assert_eq!(row("", "Pod", gated)[2], json!("SchedulingGated"));
    let signal = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]},
        "status": {"phase": "Running", "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}});
    assert_eq!(row("", "Pod", signal)[2], json!("Signal:9"));
}

#[test]
fn nodes_and_events_fill_wide_cells() {
    let node = json!({"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "worker"}},
        "spec": {"unschedulable": true},
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "addresses": [{"type": "InternalIP", "address": "192.168.1.5"}],
            "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "Debian"}}});
    assert_eq!(
        row("", "Node", node),
        [
            "n1",
            "Ready,SchedulingDisabled",
            "control-plane,worker",
            "5m",
            "v1.36.0",
            "192.168.1.5",
            "<none>",
            "Debian",
            "<unknown>",
            "<unknown>"
        ]
        .map(|c| json!(c))
    );
    let ev = json!({"metadata": {"name": "p.17a"}, "type": "Normal", "reason": "Pulled", "message": " pulled \n",
        "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"},
        "source": {"component": "kubelet", "host": "n1"}, "firstTimestamp": ago(600), "lastTimestamp": ago(65), "count": 3});
    assert_eq!(
        row("", "Event", ev),
        [
            json!("65s"),
            json!("Normal"),
            json!("Pulled"),
            json!("pod/p"),
            json!("spec.containers{a}"),
            json!("kubelet, n1"),
            json!("pulled"),
            json!("10m"),
            json!(3),
            json!("p.17a")
        ]
    );
    assert_eq!(headers("events.k8s.io", "Event"), headers("", "Event"));
    let new_api = json!({"metadata": {"name": "e"}, "involvedObject": {"kind": "Node"}, "eventTime": ago(30),
        "reportingComponent": "scheduler"});
    let cells = row("", "Event", new_api);
    assert_eq!(
        (&cells[0], &cells[3], &cells[5], &cells[8]),
        (&json!("30s"), &json!("node"), &json!("scheduler"), &json!(1))
    );
}

#[test]
fn selectors_print_sorted_like_labels_selector() {
    let sel = json!({"matchLabels": {"tier": "web", "app": "shop"},
        "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}, {"key": "legacy", "operator": "DoesNotExist"}]});
    assert_eq!(format_selector(Some(&sel)), "app=shop,env in (dev,prod),!legacy,tier=web");
    assert_eq!(format_selector(Some(&json!({}))), "<none>");
    assert_eq!(format_selector(None), "<none>");
    let deploy = json!({"metadata": {"name": "d"}, "spec": {"replicas": 2, "selector": sel,
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}, "status": {"readyReplicas": 1}});
    let cells = row("apps", "Deployment", deploy);
    assert_eq!(cells[1], json!("1/2"));
    assert_eq!(cells[7], json!("app=shop,env in (dev,prod),!legacy,tier=web"));
}

#[test]
fn finished_pods_carry_upstreams_row_condition() {
    let pod = json!({"metadata": {"name": "done"}, "spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Succeeded"}});
    let t = table("", "Pod", &[pod], None, "None");
    assert_eq!(
        t["rows"][0]["conditions"],
        json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}])
    );
    let running = json!({"metadata": {"name": "r"}, "status": {"phase": "Running"}});
    assert!(table("", "Pod", &[running], None, "None")["rows"][0].get("conditions").is_none());
}

/// Cases from upstream's TestPrintHPA: each metric source, with and without a current value.
#[test]
fn hpa_targets_as_upstreams_tests() {
    let hpa = |metric: Value, current: Option<Value>| {
        let mut o = json!({"metadata": {"name": "some-hpa"}, "spec": {"scaleTargetRef": {"name": "some-rc", "kind": "ReplicationController"},
            "minReplicas": 2, "maxReplicas": 10, "metrics": [metric]}, "status": {"currentReplicas": 4, "desiredReplicas": 5}});
        if let Some(c) = current {
            o["status"]["currentMetrics"] = json!([c]);
        }
        let cells = row("autoscaling", "HorizontalPodAutoscaler", o);
        assert_eq!(
            (&cells[1], &cells[3], &cells[4], &cells[5]),
            (&json!("ReplicationController/some-rc"), &json!("2"), &json!(10), &json!(4))
        );
        cells[2].as_str().unwrap().to_string()
    };
    let external = |target: Value| json!({"type": "External", "external": {"metric": {"name": "m"}, "target": target}});
    let avg = json!({"type": "AverageValue", "averageValue": "100m"});
    let val = json!({"type": "Value", "value": "100m"});
    assert_eq!(hpa(external(avg.clone()), None), "<unknown>/100m (avg)");
    assert_eq!(
        hpa(
            external(avg.clone()),
            Some(
                json!({"type": "External", "external": {"metric": {"name": "m"}, "current": {"averageValue": "50m"}}})
            )
        ),
        "50m/100m (avg)"
    );
    assert_eq!(hpa(external(val.clone()), None), "<unknown>/100m");
    assert_eq!(
        hpa(
            external(val.clone()),
            Some(json!({"type": "External", "external": {"metric": {"name": "m"}, "current": {"value": "50m"}}}))
        ),
        "50m/100m"
    );
    let pods = json!({"type": "Pods", "pods": {"metric": {"name": "m"}, "target": avg}});
    assert_eq!(hpa(pods.clone(), None), "<unknown>/100m");
    assert_eq!(
        hpa(pods, Some(json!({"type": "Pods", "pods": {"metric": {"name": "m"}, "current": {"averageValue": "50m"}}}))),
        "50m/100m"
    );
    let object = json!({"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"}, "metric": {"name": "m"}, "target": val}});
    assert_eq!(hpa(object.clone(), None), "<unknown>/100m");
    assert_eq!(
        hpa(object, Some(json!({"type": "Object", "object": {"metric": {"name": "m"}, "current": {"value": "50m"}}}))),
        "50m/100m"
    );
    let cpu = json!({"type": "Resource", "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "100m"}}});
    assert_eq!(hpa(cpu.clone(), None), "cpu: <unknown>/100m");
    assert_eq!(
        hpa(cpu, Some(json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageValue": "50m"}}}))),
        "cpu: 50m/100m"
    );
    let util = json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
        "target": {"type": "Utilization", "averageUtilization": 80}}});
    assert_eq!(
        hpa(
            util,
            Some(json!({"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
            "current": {"averageUtilization": 50, "averageValue": "10m"}}}))
        ),
        "cpu: 50%/80%"
    );
}
