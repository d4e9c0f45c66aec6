//! ImageLocality: nodes that already hold the pod's images score higher, by the images'
//! sizes, discounted when few nodes have them (so pods do not pile onto one node).

use k8s_openapi::api::core::v1::Pod;

use super::MAX_NODE_SCORE;
use crate::node_info::{NodeInfo, normalized_image};

const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub fn images(pod: &Pod) -> Vec<String> {
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| s.containers.iter().chain(s.init_containers.iter().flatten()));
    containers.filter_map(|c| c.image.as_deref()).map(normalized_image).collect()
}

/// `nodes_with` says how many nodes hold an image, out of `total` nodes.
pub fn score(images: &[String], node: &NodeInfo, nodes_with: impl Fn(&str) -> usize, total: usize) -> i64 {
    if images.is_empty() || total == 0 {
        return 0;
    }
    let sum: i64 = images
        .iter()
        .filter_map(|i| node.images.get(i).map(|size| (*size as f64 * nodes_with(i) as f64 / total as f64) as i64))
        .sum();
    let max = MAX_CONTAINER_THRESHOLD * images.len() as i64;
    let sum = sum.clamp(MIN_THRESHOLD, max);
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}
