//! The pod garbage collector (upstream's podgc), every check period:
//! - terminated pods beyond --terminated-pod-gc-threshold are deleted, oldest first;
//! - pods being deleted on a NotReady node tainted node.kubernetes.io/out-of-service are
//!   marked Failed and deleted at once;
//! - pods bound to a node that no longer exists (confirmed by the API after a
//!   quarantine, as the informer may lag) are marked Failed with the DisruptionTarget
//!   condition (reason DeletionByPodGC) and deleted at once;
//! - pods being deleted that were never scheduled are marked Failed and deleted at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use crate::{Context, Error};

const CONTROLLER: &str = "podgc";
pub const OUT_OF_SERVICE_TAINT: &str = "node.kubernetes.io/out-of-service";

#[derive(Clone, Debug)]
pub struct Tuning {
    /// How often pods are collected (upstream's gcCheckPeriod).
    pub check_period: Duration,
    /// How long a node must be missing from the informer before it is looked up
    /// (upstream's quarantineTime).
    pub orphan_quarantine: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { check_period: Duration::from_secs(20), orphan_quarantine: Duration::from_secs(40) }
    }
}

/// Why and how a pod is collected.
#[derive(Debug, PartialEq)]
enum Collect {
    /// Over the threshold: deleted as it is.
    Terminated,
    /// Marked Failed (with the DisruptionTarget condition if orphaned), then deleted.
    Fail { orphaned: bool },
}

pub async fn run(ctx: Context) {
    let client = (ctx.client_for)("pod-garbage-collector").write;
    let pods = ctx.informers.get::<Pod>();
    let nodes = ctx.informers.get::<Node>();
    pods.ready().await;
    nodes.ready().await;
    let (threshold, tuning) = (ctx.settings.terminated_pod_gc_threshold, ctx.settings.podgc.clone());
    let mut missing_since: HashMap<String, Instant> = HashMap::new();
    let mut ticks = tokio::time::interval(tuning.check_period);
    loop {
        ticks.tick().await;
        let all_pods = pods.store().state();
        let all_nodes = nodes.store().state();
        let gone = confirm_missing_nodes(&client, &all_pods, &all_nodes, &mut missing_since, &tuning).await;
        let plan = plan(&all_pods, &all_nodes, &gone, threshold);
        let mut ok = true;
        for (pod, how) in plan {
            if let Err(error) = collect(&client, &pod, &how).await {
                ok = false;
                tracing::warn!(controller = CONTROLLER, pod = %pod.name_any(), %error, "deleting pod failed");
            }
        }
        crate::metrics::record(CONTROLLER, ok);
    }
}

fn phase(pod: &Pod) -> &str {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
}

fn is_terminated(pod: &Pod) -> bool {
    !matches!(phase(pod), "" | "Pending" | "Running" | "Unknown")
}

fn node_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
}

/// Nodes pods are bound to that the informer has not shown for the quarantine and the
/// API confirms are gone.
async fn confirm_missing_nodes(
    client: &kube::Client,
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    missing_since: &mut HashMap<String, Instant>,
    tuning: &Tuning,
) -> HashSet<String> {
    let known: HashSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    let wanted: HashSet<&str> = pods.iter().map(|p| node_name(p)).filter(|n| !n.is_empty()).collect();
    missing_since.retain(|n, _| wanted.contains(n.as_str()) && !known.contains(n));
    let now = Instant::now();
    for name in wanted.iter().filter(|n| !known.contains(**n)) {
        missing_since.entry(name.to_string()).or_insert(now);
    }
    let api: Api<Node> = Api::all(client.clone());
    let mut gone = HashSet::new();
    for (name, since) in missing_since.iter() {
        if now.duration_since(*since) < tuning.orphan_quarantine {
            continue;
        }
        if let Ok(None) = api.get_opt(name).await {
            gone.insert(name.clone());
        }
    }
    gone
}

fn plan(
    pods: &[Arc<Pod>],
    nodes: &[Arc<Node>],
    gone_nodes: &HashSet<String>,
    threshold: i32,
) -> Vec<(Arc<Pod>, Collect)> {
    let mut out = Vec::new();
    if threshold > 0 {
        let mut terminated: Vec<&Arc<Pod>> = pods.iter().filter(|p| is_terminated(p)).collect();
        let excess = terminated.len().saturating_sub(threshold as usize);
        if excess > 0 {
            // Evicted pods first, then oldest first.
            terminated.sort_by_key(|p| {
                let evicted = p.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted");
                (!evicted, p.metadata.creation_timestamp.clone().map(|t| t.0))
            });
            out.extend(terminated.into_iter().take(excess).map(|p| (p.clone(), Collect::Terminated)));
        }
    }
    let out_of_service: HashSet<String> = nodes.iter().filter(|n| is_out_of_service(n)).map(|n| n.name_any()).collect();
    let chosen: HashSet<String> = out.iter().map(|(p, _)| p.uid().unwrap_or_default()).collect();
    for pod in pods.iter().filter(|p| !chosen.contains(&p.uid().unwrap_or_default())) {
        let terminating = pod.metadata.deletion_timestamp.is_some() && !is_terminated(pod);
        let node = node_name(pod);
        if gone_nodes.contains(node) {
            out.push((pod.clone(), Collect::Fail { orphaned: true }));
        } else if terminating && (node.is_empty() || out_of_service.contains(node)) {
            out.push((pod.clone(), Collect::Fail { orphaned: false }));
        }
    }
    out
}

fn is_out_of_service(node: &Node) -> bool {
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    let tainted = taints.is_some_and(|t| t.iter().any(|t| t.key == OUT_OF_SERVICE_TAINT && t.effect == "NoExecute"));
    let conditions = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let ready = conditions.is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    tainted && !ready
}

async fn collect(client: &kube::Client, pod: &Pod, how: &Collect) -> Result<(), Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let name = pod.name_any();
    if let Collect::Fail { orphaned } = how
        && !is_terminated(pod)
    {
        let mut status = json!({"phase": "Failed"});
        if *orphaned {
            tracing::info!(controller = CONTROLLER, pod = %name, node = node_name(pod), "found orphaned pod assigned to a node that no longer exists, deleting");
            let mut conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            conditions.retain(|c| c.type_ != "DisruptionTarget");
            let mut value = serde_json::to_value(&conditions).unwrap_or_else(|_| json!([]));
            if let Some(list) = value.as_array_mut() {
                list.push(json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                    "message": "PodGC: node no longer exists", "lastTransitionTime": Time(Timestamp::now())}));
            }
            status["conditions"] = value;
        }
        let patch = json!({"metadata": {"uid": pod.uid()}, "status": status});
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    match api.delete(&name, &DeleteParams { grace_period_seconds: Some(0), ..Default::default() }).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, node: &str, created: &str, deleting: bool) -> Arc<Pod> {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase},
        }))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        }
        Arc::new(p)
    }

    #[test]
    fn plans_terminated_over_threshold_orphans_and_unscheduled_terminating() {
        let pods = vec![
            pod("old-done", "Succeeded", "n1", "2026-01-01T00:00:00Z", false),
            pod("new-done", "Failed", "n1", "2026-01-01T00:05:00Z", false),
            pod("mid-done", "Succeeded", "n1", "2026-01-01T00:02:00Z", false),
            pod("orphan", "Running", "gone", "2026-01-01T00:00:00Z", false),
            pod("unscheduled", "Pending", "", "2026-01-01T00:00:00Z", true),
            pod("running", "Running", "n1", "2026-01-01T00:00:00Z", false),
            pod("oos", "Running", "n2", "2026-01-01T00:00:00Z", true),
        ];
        let n2: Node = serde_json::from_value(json!({"metadata": {"name": "n2"},
            "spec": {"taints": [{"key": OUT_OF_SERVICE_TAINT, "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}))
        .unwrap();
        let gone: HashSet<String> = ["gone".to_string()].into();
        let planned = plan(&pods, &[Arc::new(n2)], &gone, 1);
        let names: Vec<(String, &Collect)> = planned.iter().map(|(p, c)| (p.name_any(), c)).collect();
        assert_eq!(
            names,
            [
                ("old-done".to_string(), &Collect::Terminated),
                ("mid-done".to_string(), &Collect::Terminated),
                ("orphan".to_string(), &Collect::Fail { orphaned: true }),
                ("unscheduled".to_string(), &Collect::Fail { orphaned: false }),
                ("oos".to_string(), &Collect::Fail { orphaned: false }),
            ]
        );
        assert!(plan(&pods, &[], &HashSet::new(), 0).iter().all(|(_, c)| *c != Collect::Terminated));
    }
}
