//! Images on the node: tarballs imported at start and by `krate images import`, and
//! the agent's own pause image.

use krate_agent::runtime::{ImportOutcome, import_images, pause_image};

use crate::common::{QUICK, TestNode, image_tarball};

async fn present(node: &TestNode, image: &str) -> bool {
    let spec = k8s_cri::v1::ImageSpec { image: image.into(), ..Default::default() };
    let request = k8s_cri::v1::ImageStatusRequest { image: Some(spec), verbose: false };
    node.runtime.cri().images.clone().image_status(request).await.unwrap().into_inner().image.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tarballs_import_at_start_and_into_a_running_agent() {
    let node = TestNode::start().await;
    // Imported at start from DATA_DIR/agent/images, and the locally built pause image.
    assert!(present(&node, crate::common::BUSYBOX).await);
    assert!(present(&node, pause_image::PAUSE_IMAGE).await);
    let names: Vec<String> = node.runtime.images().await.unwrap().into_iter().flat_map(|i| i.names.unwrap()).collect();
    assert!(names.iter().any(|n| n.ends_with(crate::common::BUSYBOX)), "{names:?}");
    assert!(node.runtime.runtime_version().await.unwrap().starts_with("containerd://"));

    // `krate images import` while the agent runs goes straight into containerd.
    let other = "krate.test/other:2";
    assert!(!present(&node, other).await);
    let outcome = import_images(node.data.path(), &[image_tarball(other)]).await.unwrap();
    assert_eq!(outcome, ImportOutcome::Imported);
    assert!(present(&node, other).await);

    // A pod can then use it with pull policy Never.
    node.create_pod(
        "other",
        serde_json::json!({"containers": [
        {"name": "c", "image": other, "imagePullPolicy": "Never", "command": ["sleep", "3600"]}]}),
    )
    .await;
    node.wait_pod("other", "pod Running", QUICK, |p| {
        (p.status.as_ref()?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_without_a_running_agent_stages_the_tarball() {
    let data = tempfile::tempdir().unwrap();
    let outcome = import_images(data.path(), &[image_tarball("krate.test/staged:1")]).await.unwrap();
    let dir = data.path().join("agent/images");
    assert_eq!(outcome, ImportOutcome::Staged(dir.clone()));
    assert!(dir.join("krate.test_staged_1.tar").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_cri_endpoint_is_used_as_is() {
    let node = TestNode::start().await;
    let data = tempfile::tempdir().unwrap();
    let mut config = krate_agent::runtime::RuntimeConfig::new(data.path());
    config.container_runtime_endpoint = Some(format!("unix://{}", node.runtime.endpoint().display()).into());
    let external = krate_agent::runtime::PodRuntime::start(config).await.expect("runtime on the given endpoint");
    assert_eq!(external.containerd_pid(), None, "no containerd of its own");
    assert_eq!(external.endpoint(), node.runtime.endpoint());
    assert!(external.runtime_version().await.unwrap().starts_with("containerd://"));
    assert!(!data.path().join("agent/containerd").exists(), "no containerd config written");
}
