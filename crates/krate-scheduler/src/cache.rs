//! The scheduler's view of the cluster: every node with the pods bound or assumed on it,
//! changed incrementally by informer events and by the scheduler's own decisions (an
//! assumed pod counts on its node from the moment it is chosen, before the binding lands).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::node_info::{NodeInfo, PodInfo};

struct PodState {
    node: String,
    assumed: bool,
}

#[derive(Default)]
pub struct Cache {
    /// Nodes in a stable order (the scheduler walks them round-robin), pods' phantom
    /// nodes included.
    nodes: Vec<NodeInfo>,
    index: HashMap<String, usize>,
    pods: HashMap<String, PodState>,
    /// How many (real) nodes hold each image, for ImageLocality's spread.
    image_nodes: HashMap<String, usize>,
    real_nodes: usize,
    /// Pending pods nominated to a node (preemption made room for them there), by node,
    /// and each nominated pod's node by uid.
    nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    nominated_node: HashMap<String, String>,
}

impl Cache {
    pub fn nodes(&self) -> &[NodeInfo] {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.index.get(name).map(|i| &self.nodes[*i])
    }

    pub fn node_count(&self) -> usize {
        self.real_nodes
    }

    pub fn image_node_count(&self, image: &str) -> usize {
        self.image_nodes.get(image).copied().unwrap_or(0)
    }

    fn slot(&mut self, name: &str) -> &mut NodeInfo {
        let i = match self.index.get(name) {
            Some(i) => *i,
            None => {
                self.nodes.push(NodeInfo::empty(name));
                self.index.insert(name.to_string(), self.nodes.len() - 1);
                self.nodes.len() - 1
            }
        };
        &mut self.nodes[i]
    }

    fn count_images(&mut self, name: &str, delta: isize) {
        let Some(i) = self.index.get(name) else { return };
        for image in self.nodes[*i].images.keys() {
            let n = self.image_nodes.entry(image.clone()).or_default();
            *n = n.saturating_add_signed(delta);
        }
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let known = self.node(&name).is_some_and(|n| n.node.is_some());
        self.count_images(&name, -1);
        self.slot(&name).set_node(node);
        self.count_images(&name, 1);
        self.real_nodes += usize::from(!known);
    }

    pub fn remove_node(&mut self, name: &str) {
        let Some(&i) = self.index.get(name) else { return };
        if self.nodes[i].node.is_none() {
            return;
        }
        self.count_images(name, -1);
        self.real_nodes -= 1;
        if !self.nodes[i].pods.is_empty() {
            // Its pods are still bound there until they are deleted.
            self.nodes[i].node = None;
            return;
        }
        self.drop_slot(i);
    }

    fn drop_slot(&mut self, i: usize) {
        let removed = self.nodes.swap_remove(i);
        self.index.remove(&removed.name);
        if let Some(moved) = self.nodes.get(i) {
            self.index.insert(moved.name.clone(), i);
        }
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|p| p.assumed)
    }

    pub fn contains_pod(&self, uid: &str) -> bool {
        self.pods.contains_key(uid)
    }

    /// Counts a pod on `node`: a bound pod from the informer, or (`assumed`) one the
    /// scheduler has just placed there.
    pub fn add_pod(&mut self, info: Arc<PodInfo>, node: &str, assumed: bool) {
        let uid = info.uid().to_string();
        self.remove_pod(&uid);
        self.slot(node).add_pod(info);
        self.pods.insert(uid, PodState { node: node.to_string(), assumed });
    }

    /// A bound pod as the informer reports it (replacing any assumed or older version).
    pub fn update_bound_pod(&mut self, pod: Arc<Pod>) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        self.add_pod(Arc::new(PodInfo::new(pod)), &node, false);
    }

    /// Records (or, with None, forgets) where a pending pod is nominated.
    pub fn nominate(&mut self, info: Arc<PodInfo>, node: Option<&str>) {
        self.unnominate(info.uid());
        if let Some(node) = node.filter(|n| !n.is_empty()) {
            self.nominated_node.insert(info.uid().to_string(), node.to_string());
            self.nominated.entry(node.to_string()).or_default().push(info);
        }
    }

    pub fn unnominate(&mut self, uid: &str) {
        let Some(node) = self.nominated_node.remove(uid) else { return };
        if let Some(list) = self.nominated.get_mut(&node) {
            list.retain(|p| p.uid() != uid);
            if list.is_empty() {
                self.nominated.remove(&node);
            }
        }
    }

    pub fn nominated_to(&self, node: &str) -> &[Arc<PodInfo>] {
        self.nominated.get(node).map(Vec::as_slice).unwrap_or_default()
    }

    /// `node` as a pod of priority `priority` must see it: with the pods nominated there
    /// of at least that priority counted as if running (upstream's
    /// RunFilterPluginsWithNominatedPods), or None when there are none.
    pub fn with_nominated(&self, node: &NodeInfo, uid: &str, priority: i32) -> Option<NodeInfo> {
        let mut extra = self
            .nominated_to(&node.name)
            .iter()
            .filter(|p| p.uid() != uid && crate::preemption::priority(&p.pod) >= priority)
            .peekable();
        extra.peek()?;
        let mut trial = node.clone();
        for p in extra {
            trial.add_pod(p.clone());
        }
        Some(trial)
    }

    pub fn remove_pod(&mut self, uid: &str) {
        let Some(state) = self.pods.remove(uid) else { return };
        let Some(&i) = self.index.get(&state.node) else { return };
        self.nodes[i].remove_pod(uid);
        if self.nodes[i].node.is_none() && self.nodes[i].pods.is_empty() {
            self.drop_slot(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                "images": [{"names": ["nginx:1.27"], "sizeBytes": 100}]}}))
            .unwrap(),
        )
    }

    fn pod(uid: &str, node: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": uid, "uid": uid},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"requests": {"cpu": "1"}}}]}}))
            .unwrap(),
        )
    }

    #[test]
    fn pods_move_requests_and_nodes_come_and_go() {
        let mut cache = Cache::default();
        cache.set_node(node("a"));
        cache.set_node(node("b"));
        assert_eq!(cache.image_node_count("nginx:1.27"), 2);
        cache.update_bound_pod(pod("p1", "a"));
        cache.add_pod(Arc::new(PodInfo::new(pod("p2", "b"))), "b", true);
        assert!(cache.is_assumed("p2"));
        assert_eq!(cache.node("a").unwrap().requested.milli_cpu, 1000);
        cache.update_bound_pod(pod("p2", "b"));
        assert!(!cache.is_assumed("p2"));
        assert_eq!(cache.node("b").unwrap().requested.milli_cpu, 1000, "confirmed, not counted twice");
        cache.remove_node("a");
        assert_eq!(cache.node_count(), 1);
        assert!(cache.node("a").is_some(), "kept while a pod is there");
        cache.remove_pod("p1");
        assert!(cache.node("a").is_none());
        assert_eq!(cache.nodes().len(), 1);
        assert_eq!(cache.image_node_count("nginx:1.27"), 1);
    }

    #[test]
    fn nominated_pods_count_for_pods_of_lower_or_equal_priority() {
        let mut cache = Cache::default();
        cache.set_node(node("a"));
        let mut waiting = (*pod("w", "")).clone();
        waiting.spec.as_mut().unwrap().priority = Some(10);
        cache.nominate(Arc::new(PodInfo::new(Arc::new(waiting))), Some("a"));
        let a = cache.node("a").unwrap();
        let seen = cache.with_nominated(a, "other", 10).expect("equal priority sees it");
        assert_eq!(seen.requested.milli_cpu, 1000);
        assert!(cache.with_nominated(a, "other", 11).is_none(), "higher priority ignores it");
        assert!(cache.with_nominated(a, "w", 0).is_none(), "a pod ignores its own nomination");
        cache.unnominate("w");
        assert!(cache.nominated_to("a").is_empty());
    }
}
