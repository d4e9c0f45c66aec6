//! Restarting the agent or containerd loses no pods and restarts no containers.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

use crate::common::{BUSYBOX, QUICK, TestNode};

fn running_container(pod: &Pod) -> Option<(String, i32)> {
    let s = pod.status.as_ref()?.container_statuses.as_ref()?.first()?.clone();
    s.state.as_ref()?.running.as_ref()?;
    Some((s.container_id?, s.restart_count))
}

fn spec() -> serde_json::Value {
    serde_json::json!({"terminationGracePeriodSeconds": 1, "containers": [
        {"name": "c", "image": BUSYBOX, "command": ["sleep", "3600"]}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_adopts_running_containers() {
    let mut node = TestNode::start().await;
    node.create_pod("steady", spec()).await;
    let before = node.wait_pod("steady", "pod running", QUICK, running_container).await;
    node.restart_agent().await;
    // Give the new loop time to look at (and wrongly redo) the pod.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = node.wait_pod("steady", "pod running", QUICK, running_container).await;
    assert_eq!(after, before, "same container, no restart");
    // The new loop owns the pod: deletion still completes.
    node.pods().delete("steady", &Default::default()).await.unwrap();
    let pods = node.pods();
    crate::common::eventually_async("pod removed", QUICK, || async {
        pods.get_opt("steady").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn containerd_restart_keeps_pods_and_serves_again() {
    let node = TestNode::start().await;
    node.create_pod("survivor", spec()).await;
    let before = node.wait_pod("survivor", "pod running", QUICK, running_container).await;
    let old = node.runtime.containerd_pid().expect("supervised containerd");
    // The containerd this test's runtime started, by its pid.
    let killed = std::process::Command::new("sh").args(["-c", &format!("kill -9 {old}")]).status().unwrap();
    assert!(killed.success());
    let new = crate::common::eventually_async("containerd restarted", QUICK, || async {
        node.runtime.containerd_pid().filter(|p| *p != old)
    })
    .await;
    assert_ne!(new, old);
    node.runtime.cri().wait_ready(QUICK).await.expect("containerd serves again");
    node.create_pod("newcomer", spec()).await;
    node.wait_pod("newcomer", "new pod running", QUICK, running_container).await;
    let after = node.wait_pod("survivor", "pod running", QUICK, running_container).await;
    assert_eq!(after, before, "the container survived the containerd restart");
}
