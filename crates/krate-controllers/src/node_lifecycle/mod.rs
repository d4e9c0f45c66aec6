//! The node lifecycle controller (upstream's node-lifecycle-controller, identity
//! node-controller): a node whose kubelet neither renews its Lease in kube-node-lease nor
//! posts status within the grace period gets its conditions set to Unknown and its pods
//! marked not ready; nodes are tainted by their conditions (NoSchedule at once,
//! not-ready/unreachable NoExecute at a rate-limited pace per zone, none while every
//! zone is fully disrupted), and spec.unschedulable nodes get the unschedulable taint.
//! Evicting pods from NoExecute-tainted nodes is the taint eviction controller's job.

pub mod taints;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::{Context, Error};
use taints::{ZoneState, zone_state};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
const NAME: &str = "node-lifecycle";
/// The conditions the controller sets to Unknown when the kubelet goes silent.
const WATCHED_CONDITIONS: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// When we last saw a node's kubelet do something: its Lease renew time and Ready
/// heartbeat as last seen, and the local instant they last changed (local time, so
/// clock skew between machines does not matter, as upstream's probeTimestamp).
struct Health {
    renew: Option<String>,
    heartbeat: Option<String>,
    observed: Instant,
}

/// A token bucket with burst 1 (upstream's per-zone eviction limiter).
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn take(&mut self, rate: f64) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * rate).min(1.0);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Controller {
    nodes_api: Api<Node>,
    write: kube::Client,
    nodes: Store<Node>,
    leases: Store<Lease>,
    pods: Store<Pod>,
    grace: Duration,
    eviction_rate: f64,
    health: HashMap<String, Health>,
    buckets: HashMap<String, Bucket>,
    recorder: Recorder,
}

pub async fn run(ctx: Context) {
    let clients = (ctx.client_for)("node-controller");
    let (nodes, leases, pods) = (ctx.informers.get::<Node>(), ctx.informers.get::<Lease>(), ctx.informers.get::<Pod>());
    futures::join!(nodes.ready(), leases.ready(), pods.ready());
    let grace = ctx.settings.node_monitor_grace_period;
    let mut controller = Controller {
        nodes_api: Api::all(clients.write.clone()),
        write: clients.write.clone(),
        nodes: nodes.store(),
        leases: leases.store(),
        pods: pods.store(),
        grace,
        eviction_rate: ctx.settings.node_eviction_rate,
        health: HashMap::new(),
        buckets: HashMap::new(),
        recorder: Recorder::new(clients.write, Reporter { controller: "node-controller".into(), instance: None }),
    };
    // Upstream's --node-monitor-period is 5s against a 40s grace period; keep the ratio
    // for the short grace periods of tests.
    let period = (grace / 8).clamp(Duration::from_millis(200), Duration::from_secs(5));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let result = controller.monitor().await;
        crate::metrics::record(NAME, result.is_ok());
        if let Err(error) = result {
            tracing::warn!(controller = NAME, %error, "node monitoring pass failed; retrying");
        }
    }
}

fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == type_)
}

pub fn zone_of(node: &Node) -> String {
    let labels = node.labels();
    let region = labels.get("topology.kubernetes.io/region").map(String::as_str).unwrap_or("");
    let zone = labels.get("topology.kubernetes.io/zone").map(String::as_str).unwrap_or("");
    format!("{region}:\0:{zone}")
}

impl Controller {
    async fn monitor(&mut self) -> Result<(), Error> {
        let mut nodes: Vec<Arc<Node>> = self.nodes.state();
        nodes.sort_by_key(|n| n.name_any());
        let names: Vec<String> = nodes.iter().map(|n| n.name_any()).collect();
        self.health.retain(|n, _| names.contains(n));

        // 1. Kubelets gone silent: conditions to Unknown, their pods not ready.
        let mut ready_status: BTreeMap<String, String> = BTreeMap::new();
        for node in &nodes {
            let name = node.name_any();
            let renew = self
                .leases
                .get(&ObjectRef::new(&name).within(LEASE_NAMESPACE))
                .and_then(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0.to_string()));
            let heartbeat =
                condition(node, "Ready").and_then(|c| c.last_heartbeat_time.as_ref().map(|t| t.0.to_string()));
            let health = self.health.entry(name.clone()).or_insert(Health {
                renew: renew.clone(),
                heartbeat: heartbeat.clone(),
                observed: Instant::now(),
            });
            if health.renew != renew || health.heartbeat != heartbeat {
                *health = Health { renew, heartbeat, observed: Instant::now() };
            }
            let silent = health.observed.elapsed() > self.grace;
            let mut status = condition(node, "Ready").map(|c| c.status.clone()).unwrap_or_else(|| "Unknown".into());
            if silent && status != "Unknown" {
                self.mark_unknown(node).await?;
                self.mark_pods_not_ready(&name).await;
                status = "Unknown".into();
            }
            ready_status.insert(name, status);
        }

        // 2. Zone health decides how fast NoExecute taints go on.
        let mut zones: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for node in &nodes {
            let entry = zones.entry(zone_of(node)).or_default();
            if ready_status.get(&node.name_any()).map(String::as_str) == Some("True") {
                entry.0 += 1;
            } else {
                entry.1 += 1;
            }
        }
        let states: BTreeMap<String, ZoneState> =
            zones.iter().map(|(z, (ready, not_ready))| (z.clone(), zone_state(*ready, *not_ready))).collect();
        let all_down = !states.is_empty() && states.values().all(|s| *s == ZoneState::FullDisruption);

        // 3. Taints.
        for node in &nodes {
            let name = node.name_any();
            let ready = ready_status.get(&name).cloned().unwrap_or_default();
            let zone = zone_of(node);
            let (ready_count, not_ready_count) = zones.get(&zone).copied().unwrap_or_default();
            let rate = taints::eviction_rate(
                states.get(&zone).copied().unwrap_or(ZoneState::Normal),
                all_down,
                ready_count + not_ready_count,
                self.eviction_rate,
            );
            let existing = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
            let wanted_no_execute = taints::no_execute_key(&ready);
            let has_it = wanted_no_execute.is_some_and(|k| taints::has(&existing, k, "NoExecute"));
            let swapping = wanted_no_execute.is_some()
                && !has_it
                && (taints::has(&existing, taints::NOT_READY, "NoExecute")
                    || taints::has(&existing, taints::UNREACHABLE, "NoExecute"));
            // Adding a NoExecute taint spends a token; swapping one for the other or
            // keeping one does not (upstream swaps at once too).
            let no_execute = if all_down {
                None
            } else if wanted_no_execute.is_some() && !has_it && !swapping {
                let bucket = self.buckets.entry(zone.clone()).or_insert(Bucket { tokens: 1.0, last: Instant::now() });
                if rate > 0.0 && bucket.take(rate) { wanted_no_execute } else { None }
            } else {
                wanted_no_execute
            };
            let want = taints::desired(node, &ready, no_execute, Timestamp::now());
            if want != existing {
                let patch = json!({"metadata": {"resourceVersion": node.resource_version()}, "spec": {"taints": want}});
                match self.nodes_api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) => {}
                    // Changed meanwhile: the next pass sees the new version.
                    Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Upstream's tryUpdateNodeHealth for a silent kubelet.
    async fn mark_unknown(&self, node: &Node) -> Result<(), Error> {
        let now = Time(Timestamp::now());
        let mut conditions = node.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        for type_ in WATCHED_CONDITIONS {
            match conditions.iter_mut().find(|c| c.type_ == type_) {
                Some(c) if c.status != "Unknown" => {
                    c.status = "Unknown".into();
                    c.reason = Some("NodeStatusUnknown".into());
                    c.message = Some("Kubelet stopped posting node status.".into());
                    c.last_transition_time = Some(now.clone());
                }
                Some(_) => {}
                None => conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(now.clone()),
                }),
            }
        }
        let name = node.name_any();
        let patch =
            json!({"metadata": {"resourceVersion": node.resource_version()}, "status": {"conditions": conditions}});
        match self.nodes_api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        tracing::info!(controller = NAME, node = %name, "node stopped posting status; marked Unknown");
        let event = Event {
            type_: EventType::Normal,
            reason: "NodeNotReady".into(),
            note: Some(format!("Node {name} status is now: NodeNotReady")),
            action: "NodeNotReady".into(),
            secondary: None,
        };
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.clone()),
            uid: Some(name.clone()),
            ..Default::default()
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::debug!(controller = NAME, %error, "recording NodeNotReady");
        }
        Ok(())
    }

    /// Upstream's MarkPodsNotReady: the pods of an unreachable node are no longer Ready,
    /// so Services stop sending them traffic before they are evicted.
    async fn mark_pods_not_ready(&self, node: &str) {
        let now = Time(Timestamp::now());
        for pod in self.pods.state() {
            if pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(node) {
                continue;
            }
            let Some(mut conditions) = pod.status.as_ref().and_then(|s| s.conditions.clone()) else { continue };
            let Some(ready) = conditions.iter_mut().find(|c| c.type_ == "Ready" && c.status == "True") else {
                continue;
            };
            ready.status = "False".into();
            ready.last_transition_time = Some(now.clone());
            let api: Api<Pod> = Api::namespaced(self.write.clone(), &pod.namespace().unwrap_or_default());
            let patch =
                json!({"metadata": {"resourceVersion": pod.resource_version()}, "status": {"conditions": conditions}});
            if let Err(error) = api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await
            {
                tracing::debug!(controller = NAME, pod = %pod.name_any(), %error, "marking pod not ready");
            }
        }
    }
}
