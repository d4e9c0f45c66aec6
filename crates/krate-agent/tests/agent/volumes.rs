//! Volumes of real pods: what the container sees inside (read with CRI exec), what the
//! node holds on disk, updates of the sources, and the failures upstream reports.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret};
use krate_testkit::pod_ready;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::common::{BUSYBOX, QUICK, TestNode, create, events_of, eventually_async};

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

async fn running(node: &TestNode, name: &str) -> Pod {
    node.wait_pod(name, "pod Running and Ready", QUICK, |p| (phase(p) == "Running" && pod_ready(p)).then(|| p.clone()))
        .await
}

async fn sh(node: &TestNode, pod: &Pod, container: &str, script: &str) -> String {
    node.exec(&uid(pod), container, &["sh", "-c", script]).await
}

fn volume_dir(node: &TestNode, pod: &Pod, plugin: &str, name: &str) -> PathBuf {
    node.data.path().join(format!("agent/pods/{}/volumes/{plugin}/{name}", uid(pod)))
}

fn is_mount_point(path: &Path) -> bool {
    let meta = std::fs::metadata(path).unwrap();
    let parent = std::fs::metadata(path.parent().unwrap()).unwrap();
    meta.dev() != parent.dev()
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let prefix = dir.to_string_lossy().into_owned();
    info.lines().filter_map(|l| l.split(' ').nth(4)).filter(|p| p.starts_with(&prefix)).map(String::from).collect()
}

fn waiting_reason(pod: &Pod, container: &str) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    let w = statuses.iter().find(|s| s.name == container)?.state.as_ref()?.waiting.clone()?;
    Some((w.reason.unwrap_or_default(), w.message.unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_secret_and_downward_api_files_inside_the_container() {
    let node = TestNode::start().await;
    create::<ConfigMap>(
        &node,
        serde_json::json!({"metadata": {"name": "cfg"},
        "data": {"a": "alpha", "b": "beta"}, "binaryData": {"bin": "AAEC"}}),
    )
    .await;
    create::<Secret>(
        &node,
        serde_json::json!({"metadata": {"name": "sec"},
        "stringData": {"user": "admin", "pass": "s3cret"}}),
    )
    .await;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "files", "labels": {"app": "web", "tier": "front"}, "annotations": {"note": "hi \"there\""}},
        "spec": {"nodeName": crate::common::NODE, "terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "resources": {"limits": {"cpu": "500m", "memory": "64Mi"}},
            "volumeMounts": [
                {"name": "cfg", "mountPath": "/cfg"},
                {"name": "items", "mountPath": "/items"},
                {"name": "sec", "mountPath": "/sec"},
                {"name": "dapi", "mountPath": "/dapi"},
                {"name": "opt", "mountPath": "/opt"},
                {"name": "cfg", "mountPath": "/one/a.txt", "subPath": "a"},
            ]}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "items", "configMap": {"name": "cfg", "defaultMode": 0o440,
                    "items": [{"key": "b", "path": "sub/bee", "mode": 0o400}, {"key": "a", "path": "ay"}]}},
                {"name": "sec", "secret": {"secretName": "sec", "defaultMode": 0o600}},
                {"name": "dapi", "downwardAPI": {"items": [
                    {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                    {"path": "meta/name", "fieldRef": {"fieldPath": "metadata.name"}},
                    {"path": "meta/namespace", "fieldRef": {"fieldPath": "metadata.namespace"}},
                    {"path": "meta/uid", "fieldRef": {"fieldPath": "metadata.uid"}},
                    {"path": "cpu_millis", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
                    {"path": "mem_mib", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
                ]}},
                {"name": "opt", "configMap": {"name": "not-there", "optional": true}},
            ],
        },
    }))
    .unwrap();
    let created = node.pods().create(&PostParams::default(), &pod).await.unwrap();
    let pod = running(&node, "files").await;

    assert_eq!(sh(&node, &pod, "c", "cat /cfg/a; echo; cat /cfg/b").await, "alpha\nbeta");
    assert_eq!(sh(&node, &pod, "c", "cat /cfg/bin | wc -c").await.trim(), "3", "binaryData is a file too");
    assert_eq!(sh(&node, &pod, "c", "ls /cfg").await.split_whitespace().collect::<Vec<_>>(), vec!["a", "b", "bin"]);
    // The atomic writer's layout: names are symlinks through ..data to a timestamped dir.
    assert_eq!(sh(&node, &pod, "c", "readlink /cfg/a").await.trim(), "..data/a");
    assert!(sh(&node, &pod, "c", "readlink /cfg/..data").await.starts_with("..20"));
    assert_eq!(sh(&node, &pod, "c", "stat -L -c %a /cfg/a").await.trim(), "644");
    // Items: only the listed keys, at their paths, with their modes.
    assert_eq!(sh(&node, &pod, "c", "cat /items/sub/bee; echo; cat /items/ay").await, "beta\nalpha");
    assert_eq!(sh(&node, &pod, "c", "stat -L -c %a /items/sub/bee /items/ay").await, "400\n440\n");
    assert_eq!(sh(&node, &pod, "c", "ls /items").await.split_whitespace().collect::<Vec<_>>(), vec!["ay", "sub"]);
    assert_eq!(sh(&node, &pod, "c", "cat /sec/user; echo; cat /sec/pass").await, "admin\ns3cret");
    assert_eq!(sh(&node, &pod, "c", "stat -L -c %a /sec/pass").await.trim(), "600");
    assert_eq!(sh(&node, &pod, "c", "cat /dapi/labels").await, "app=\"web\"\ntier=\"front\"");
    assert_eq!(sh(&node, &pod, "c", "cat /dapi/annotations").await, "note=\"hi \\\"there\\\"\"");
    assert_eq!(
        sh(&node, &pod, "c", "cat /dapi/meta/name; echo; cat /dapi/meta/namespace; echo; cat /dapi/meta/uid").await,
        format!("files\ndefault\n{}", uid(&created))
    );
    assert_eq!(sh(&node, &pod, "c", "cat /dapi/cpu_millis; echo; cat /dapi/mem_mib").await, "500\n64");
    assert_eq!(sh(&node, &pod, "c", "ls /opt | wc -l").await.trim(), "0", "a missing optional config map is empty");
    assert_eq!(sh(&node, &pod, "c", "cat /one/a.txt").await, "alpha", "subPath of a config map key");
    // API data volumes are read-only in the container.
    for dir in ["/cfg", "/sec", "/dapi"] {
        let (code, _, _) = node.exec_result(&uid(&pod), "c", &["touch", &format!("{dir}/new")]).await;
        assert_ne!(code, 0, "writing to {dir} must fail");
    }
    // On the node: the kubelet's layout, secrets on a tmpfs.
    let cfg = volume_dir(&node, &pod, "kubernetes.io~configmap", "cfg");
    assert_eq!(std::fs::read_to_string(cfg.join("a")).unwrap(), "alpha");
    assert!(is_mount_point(&volume_dir(&node, &pod, "kubernetes.io~secret", "sec")), "secret volume on a tmpfs");
    assert!(!is_mount_point(&cfg));

    // Deleting the pod removes its volumes and unmounts them.
    let pod_dir = node.data.path().join(format!("agent/pods/{}", uid(&pod)));
    node.pods().delete("files", &DeleteParams::default()).await.unwrap();
    eventually_async("pod volumes removed", QUICK, || async { (!pod_dir.exists()).then_some(()) }).await;
    assert!(mounts_under(&pod_dir).is_empty(), "{:?}", mounts_under(&pod_dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_and_label_updates_reach_the_mounted_files() {
    let node = TestNode::start().await;
    create::<ConfigMap>(&node, serde_json::json!({"metadata": {"name": "live"}, "data": {"v": "one", "gone": "x"}}))
        .await;
    create::<Secret>(&node, serde_json::json!({"metadata": {"name": "live-s"}, "stringData": {"k": "first"}})).await;
    let created = node
        .create_pod(
            "updates",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "cfg", "mountPath": "/cfg"}, {"name": "all", "mountPath": "/all"}]}],
            "volumes": [
                {"name": "cfg", "configMap": {"name": "live"}},
                {"name": "all", "projected": {"sources": [
                    {"secret": {"name": "live-s"}},
                    {"downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                ]}},
            ]}),
        )
        .await;
    let pod = running(&node, "updates").await;
    assert_eq!(sh(&node, &pod, "c", "cat /cfg/v").await, "one");
    assert_eq!(sh(&node, &pod, "c", "cat /all/k; echo; cat /all/labels").await, "first\n");

    let configs: Api<ConfigMap> = Api::namespaced(node.client.clone(), "default");
    let patch = serde_json::json!({"data": {"v": "two", "gone": null, "added": "new"}});
    configs.patch("live", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(node.client.clone(), "default");
    let patch = serde_json::json!({"stringData": {"k": "second"}});
    secrets.patch("live-s", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    // The sources changed, the pod did not: their watches bring them (well before the
    // 10 s periodic resync).
    let started = std::time::Instant::now();
    let seen = eventually_async("updated files in the container", Duration::from_secs(5), || async {
        let (code, out, _) =
            node.exec_result(&uid(&created), "c", &["sh", "-c", "cat /cfg/v /cfg/added; ls /cfg; cat /all/k"]).await;
        (code == 0 && out.starts_with("twonew") && out.contains("second")).then_some(out)
    })
    .await;
    eprintln!("config map and secret updates seen after {:?}", started.elapsed());
    // A label change updates the downward API file at once (the pod update resyncs).
    let patch = serde_json::json!({"metadata": {"labels": {"color": "green"}}});
    node.pods().patch("updates", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually_async("the new label in the file", Duration::from_secs(5), || async {
        let (code, out, _) = node.exec_result(&uid(&created), "c", &["cat", "/all/labels"]).await;
        (code == 0 && out == "color=\"green\"").then_some(())
    })
    .await;
    assert!(!seen.contains("gone"), "removed key removed: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dirs_are_shared_and_memory_ones_are_tmpfs() {
    let node = TestNode::start().await;
    let created = node
        .create_pod(
            "scratch",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [
                {"name": "writer", "image": BUSYBOX, "command": ["sh", "-c", "echo hello > /shared/f; echo m > /mem/g; sleep 3600"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/shared"}, {"name": "mem", "mountPath": "/mem"}]},
                {"name": "reader", "image": BUSYBOX, "command": ["sleep", "3600"],
                 "volumeMounts": [{"name": "shared", "mountPath": "/in", "readOnly": true}, {"name": "mem", "mountPath": "/mem"}]},
            ],
            "volumes": [{"name": "shared", "emptyDir": {}}, {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]}),
        )
        .await;
    let pod = running(&node, "scratch").await;
    let read = eventually_async("the writer's file seen by the reader", QUICK, || async {
        let (code, out, _) = node.exec_result(&uid(&created), "reader", &["sh", "-c", "cat /in/f /mem/g"]).await;
        (code == 0).then_some(out)
    })
    .await;
    assert_eq!(read, "hello\nm\n");
    let (code, _, _) = node.exec_result(&uid(&pod), "reader", &["touch", "/in/x"]).await;
    assert_ne!(code, 0, "a readOnly mount refuses writes");
    assert_eq!(sh(&node, &pod, "writer", "stat -c %a /shared").await.trim(), "777");
    let mounts = sh(&node, &pod, "reader", "grep ' /mem ' /proc/mounts").await;
    assert!(mounts.starts_with("tmpfs /mem tmpfs") && mounts.contains("size=1024k"), "{mounts}");
    let shared = volume_dir(&node, &pod, "kubernetes.io~empty-dir", "shared");
    assert_eq!(std::fs::read_to_string(shared.join("f")).unwrap(), "hello\n");
    assert!(is_mount_point(&volume_dir(&node, &pod, "kubernetes.io~empty-dir", "mem")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_paths_claims_and_sub_paths() {
    let node = TestNode::start().await;
    let host = node.data.path().join("host");
    std::fs::create_dir_all(host.join("existing")).unwrap();
    std::fs::write(host.join("existing/data.txt"), "from the host").unwrap();
    let pv_dir = node.data.path().join("pv-data");
    std::fs::create_dir_all(&pv_dir).unwrap();
    std::fs::write(pv_dir.join("stored"), "persisted").unwrap();
    let pv: PersistentVolume = serde_json::from_value(serde_json::json!({"metadata": {"name": "pv1"}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "hostPath": {"path": pv_dir.to_string_lossy(), "type": "Directory"}}}))
    .unwrap();
    Api::<PersistentVolume>::all(node.client.clone()).create(&PostParams::default(), &pv).await.unwrap();
    create::<PersistentVolumeClaim>(&node, serde_json::json!({"metadata": {"name": "claim"}, "spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "volumeName": "pv1", "storageClassName": ""}}))
    .await;
    // The PV controller's part: the claim is bound.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(node.client.clone(), "default");
    let bound = serde_json::json!({"status": {"phase": "Bound"}});
    claims.patch_status("claim", &PatchParams::default(), &Patch::Merge(&bound)).await.unwrap();

    let created = node
        .create_pod(
            "hosts",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "volumeMounts": [
                {"name": "made", "mountPath": "/made"},
                {"name": "file", "mountPath": "/file.txt"},
                {"name": "existing", "mountPath": "/existing", "readOnly": true},
                {"name": "claim", "mountPath": "/claim"},
                {"name": "scratch", "mountPath": "/per-pod", "subPathExpr": "logs/$(POD_NAME)"},
                {"name": "scratch", "mountPath": "/fixed", "subPath": "a/b"},
            ]}],
            "volumes": [
                {"name": "made", "hostPath": {"path": host.join("new/dir").to_string_lossy(), "type": "DirectoryOrCreate"}},
                {"name": "file", "hostPath": {"path": host.join("made.txt").to_string_lossy(), "type": "FileOrCreate"}},
                {"name": "existing", "hostPath": {"path": host.join("existing").to_string_lossy(), "type": "Directory"}},
                {"name": "claim", "persistentVolumeClaim": {"claimName": "claim"}},
                {"name": "scratch", "emptyDir": {}},
            ]}),
        )
        .await;
    let pod = running(&node, "hosts").await;
    assert!(host.join("new/dir").is_dir() && host.join("made.txt").is_file(), "the *OrCreate types made them");
    sh(&node, &pod, "c", "echo out > /made/x; echo f > /file.txt; echo pv > /claim/written").await;
    assert_eq!(std::fs::read_to_string(host.join("new/dir/x")).unwrap(), "out\n");
    assert_eq!(std::fs::read_to_string(host.join("made.txt")).unwrap(), "f\n");
    assert_eq!(std::fs::read_to_string(pv_dir.join("written")).unwrap(), "pv\n");
    assert_eq!(sh(&node, &pod, "c", "cat /existing/data.txt; cat /claim/stored").await, "from the hostpersisted");
    let (code, _, _) = node.exec_result(&uid(&pod), "c", &["touch", "/existing/nope"]).await;
    assert_ne!(code, 0, "readOnly hostPath mount");
    sh(&node, &pod, "c", "echo p > /per-pod/log; echo q > /fixed/f").await;
    let scratch = volume_dir(&node, &pod, "kubernetes.io~empty-dir", "scratch");
    assert_eq!(std::fs::read_to_string(scratch.join("logs/hosts/log")).unwrap(), "p\n", "subPathExpr expanded");
    assert_eq!(std::fs::read_to_string(scratch.join("a/b/f")).unwrap(), "q\n");
    let _ = created;

    // A hostPath of the wrong type keeps the pod from starting, with upstream's event.
    let missing = host.join("absent");
    node.create_pod(
        "wrong-type",
        serde_json::json!({"containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "h", "mountPath": "/h"}]}],
        "volumes": [{"name": "h", "hostPath": {"path": missing.to_string_lossy(), "type": "Directory"}}]}),
    )
    .await;
    let want = format!(
        "MountVolume.SetUp failed for volume \"h\" : hostPath type check failed: {} is not a directory",
        missing.display()
    );
    let event = eventually_async("FailedMount event", QUICK, || async {
        events_of(&node, "wrong-type", "FailedMount").await.into_iter().next()
    })
    .await;
    assert_eq!(event.message.as_deref(), Some(want.as_str()));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let stuck = node.pods().get("wrong-type").await.unwrap();
    assert_eq!(phase(&stuck), "Pending");
    assert_eq!(waiting_reason(&stuck, "c").map(|w| w.0).as_deref(), Some("ContainerCreating"));
    assert!(!missing.exists(), "type Directory creates nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_account_token_is_mounted_and_accepted() {
    let node = TestNode::start().await;
    let created = node
        .create_pod(
            "sa",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "aud", "mountPath": "/aud"}]}],
            "volumes": [{"name": "aud", "projected": {"defaultMode": 0o400, "sources": [
                {"serviceAccountToken": {"path": "token", "audience": "vault", "expirationSeconds": 600}}]}}]}),
        )
        .await;
    // ServiceAccount admission added the kube-api-access volume and its mount.
    let volume =
        created.spec.as_ref().unwrap().volumes.iter().flatten().find(|v| v.name.starts_with("kube-api-access-"));
    assert!(volume.is_some(), "the token volume is injected");
    let pod = running(&node, "sa").await;
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let listing = sh(&node, &pod, "c", &format!("ls {dir}")).await;
    assert_eq!(listing.split_whitespace().collect::<Vec<_>>(), vec!["ca.crt", "namespace", "token"]);
    assert_eq!(sh(&node, &pod, "c", &format!("cat {dir}/namespace")).await, "default");
    let ca = sh(&node, &pod, "c", &format!("cat {dir}/ca.crt")).await;
    let root: ConfigMap =
        Api::namespaced(node.client.clone(), "default").get("kube-root-ca.crt").await.expect("root CA published");
    assert_eq!(Some(&ca), root.data.as_ref().unwrap().get("ca.crt"));
    assert!(ca.contains("BEGIN CERTIFICATE"));
    let token = sh(&node, &pod, "c", &format!("cat {dir}/token")).await;

    let review = |token: String, audiences: Vec<&str>| {
        let client = node.client.clone();
        let audiences: Vec<String> = audiences.into_iter().map(String::from).collect();
        async move {
            let review: TokenReview = serde_json::from_value(serde_json::json!({
                "spec": {"token": token, "audiences": audiences}}))
            .unwrap();
            Api::<TokenReview>::all(client).create(&PostParams::default(), &review).await.unwrap().status.unwrap()
        }
    };
    let status = review(token.clone(), vec![]).await;
    assert_eq!(status.authenticated, Some(true), "{status:?}");
    let user = status.user.unwrap();
    assert_eq!(user.username.as_deref(), Some("system:serviceaccount:default:default"));
    let extra = user.extra.unwrap_or_default();
    assert_eq!(extra.get("authentication.kubernetes.io/pod-name"), Some(&vec!["sa".to_string()]));
    assert_eq!(extra.get("authentication.kubernetes.io/pod-uid"), Some(&vec![uid(&created)]));

    // The second token: its own audience, 600 s, mode 0400.
    let aud = sh(&node, &pod, "c", "cat /aud/token").await;
    assert_eq!(sh(&node, &pod, "c", "stat -L -c %a /aud/token").await.trim(), "400");
    assert_eq!(review(aud.clone(), vec!["vault"]).await.authenticated, Some(true));
    assert_ne!(review(aud.clone(), vec![]).await.authenticated, Some(true), "not for the API server's audience");
    use base64::Engine as _;
    let claims = aud.split('.').nth(1).unwrap();
    let claims: serde_json::Value =
        serde_json::from_slice(&base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(claims).unwrap()).unwrap();
    assert_eq!(claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap(), 600, "{claims}");
    assert_eq!(claims["aud"], serde_json::json!(["vault"]));

    // Deleting the pod invalidates its bound tokens.
    node.pods().delete("sa", &DeleteParams::default()).await.unwrap();
    eventually_async("pod object removed", QUICK, || async {
        node.pods().get_opt("sa").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_ne!(review(token, vec![]).await.authenticated, Some(true), "a token bound to a deleted pod is refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_sources_and_unsupported_volumes_report_like_upstream() {
    let node = TestNode::start().await;
    node.create_pod(
        "no-secret",
        serde_json::json!({"containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
        "volumes": [{"name": "s", "secret": {"secretName": "later"}}]}),
    )
    .await;
    node.create_pod(
        "image-vol",
        serde_json::json!({"containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "img", "mountPath": "/img"}]}],
        "volumes": [{"name": "img", "image": {"reference": BUSYBOX}}]}),
    )
    .await;
    let event = eventually_async("FailedMount for the secret", QUICK, || async {
        events_of(&node, "no-secret", "FailedMount").await.into_iter().next()
    })
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some("MountVolume.SetUp failed for volume \"s\" : secret \"later\" not found")
    );
    assert_eq!(event.source.as_ref().and_then(|s| s.component.as_deref()), Some("kubelet"));
    let pod = node
        .wait_pod("no-secret", "ContainerCreating", QUICK, |p| {
            waiting_reason(p, "c").filter(|w| w.0 == "ContainerCreating").map(|_| p.clone())
        })
        .await;
    assert_eq!(phase(&pod), "Pending");
    let image = eventually_async("FailedMount for the image volume", QUICK, || async {
        events_of(&node, "image-vol", "FailedMount").await.into_iter().next()
    })
    .await;
    assert!(image.message.as_deref().unwrap().contains("image volumes are not supported"), "{image:?}");
    node.create_pod(
        "csi-vol",
        serde_json::json!({"containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}],
        "volumes": [{"name": "inline", "csi": {"driver": "example.com/driver"}},
                    {"name": "bundle", "projected": {"sources": [
                        {"clusterTrustBundle": {"signerName": "example.com/signer", "path": "ca.pem"}}]}}]}),
    )
    .await;
    for (volume, says) in [
        ("inline", "volume type csi is not supported by this node"),
        ("bundle", "clusterTrustBundle projections are not supported by this node"),
    ] {
        let want = format!("MountVolume.SetUp failed for volume {volume:?} : {says}");
        eventually_async("FailedMount for an unsupported volume", QUICK, || async {
            events_of(&node, "csi-vol", "FailedMount").await.into_iter().find(|e| e.message.as_deref() == Some(&want))
        })
        .await;
    }

    // Once the secret exists, the pod starts.
    create::<Secret>(&node, serde_json::json!({"metadata": {"name": "later"}, "stringData": {"k": "v"}})).await;
    let pod = running(&node, "no-secret").await;
    assert_eq!(sh(&node, &pod, "c", "cat /s/k").await, "v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_go_with_finished_and_vanished_pods() {
    let mut node = TestNode::start().await;
    let done = node
        .create_pod(
            "done",
            serde_json::json!({"restartPolicy": "Never", "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sh", "-c", "echo x > /m/f"],
            "volumeMounts": [{"name": "m", "mountPath": "/m"}]}],
            "volumes": [{"name": "m", "emptyDir": {"medium": "Memory"}}]}),
        )
        .await;
    node.wait_pod("done", "pod Succeeded", QUICK, |p| (phase(p) == "Succeeded").then_some(())).await;
    let done_dir = node.data.path().join(format!("agent/pods/{}", uid(&done)));
    eventually_async("a finished pod's volumes torn down", QUICK, || async { (!done_dir.exists()).then_some(()) })
        .await;
    assert!(mounts_under(&done_dir).is_empty());

    // A pod that never got a sandbox (its secret is missing), deleted while the agent
    // is down: its volumes go when the agent is back.
    let stuck = node
        .create_pod(
            "stuck",
            serde_json::json!({"containers": [{"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"],
            "volumeMounts": [{"name": "s", "mountPath": "/s"}]}],
            "volumes": [{"name": "s", "secret": {"secretName": "missing"}}]}),
        )
        .await;
    let stuck_dir = node.data.path().join(format!("agent/pods/{}", uid(&stuck)));
    eventually_async("the token volume set up", QUICK, || async {
        (!mounts_under(&stuck_dir).is_empty()).then_some(())
    })
    .await;
    node.stop_agent().await;
    node.pods().delete("stuck", &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await.unwrap();
    assert!(stuck_dir.exists());
    node.start_agent();
    eventually_async("a vanished pod's volumes removed", QUICK, || async { (!stuck_dir.exists()).then_some(()) }).await;
    assert!(mounts_under(&stuck_dir).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_restart_keeps_volumes_and_their_contents() {
    let mut node = TestNode::start().await;
    create::<ConfigMap>(&node, serde_json::json!({"metadata": {"name": "kept"}, "data": {"k": "v1"}})).await;
    let created = node
        .create_pod(
            "keeper",
            serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [{
            "name": "c", "image": BUSYBOX, "command": ["sh", "-c", "echo data > /mem/f; sleep 3600"],
            "volumeMounts": [{"name": "mem", "mountPath": "/mem"}, {"name": "cfg", "mountPath": "/cfg"}]}],
            "volumes": [{"name": "mem", "emptyDir": {"medium": "Memory"}}, {"name": "cfg", "configMap": {"name": "kept"}}]}),
        )
        .await;
    let pod = running(&node, "keeper").await;
    let container_id =
        |p: &Pod| p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0].container_id.clone();
    let before = container_id(&pod);
    eventually_async("the file written", QUICK, || async {
        let (code, out, _) = node.exec_result(&uid(&created), "c", &["cat", "/mem/f"]).await;
        (code == 0 && out == "data\n").then_some(())
    })
    .await;
    let mem = volume_dir(&node, &pod, "kubernetes.io~empty-dir", "mem");
    let mounts_before = mounts_under(&mem).len();

    node.restart_agent().await;
    // The new agent adopts the pod: same container, same tmpfs (not mounted twice).
    let configs: Api<ConfigMap> = Api::namespaced(node.client.clone(), "default");
    let patch = serde_json::json!({"data": {"k": "v2"}});
    configs.patch("kept", &PatchParams::default(), &Patch::Merge(&patch)).await.unwrap();
    eventually_async("the new agent updates the config map volume", QUICK, || async {
        let (code, out, _) = node.exec_result(&uid(&created), "c", &["cat", "/cfg/k"]).await;
        (code == 0 && out == "v2").then_some(())
    })
    .await;
    assert_eq!(sh(&node, &pod, "c", "cat /mem/f").await, "data\n", "memory emptyDir kept");
    assert_eq!(mounts_under(&mem).len(), mounts_before, "the tmpfs is not mounted again");
    let pod = node.pods().get("keeper").await.unwrap();
    assert_eq!(container_id(&pod), before, "the container was not restarted");
}
