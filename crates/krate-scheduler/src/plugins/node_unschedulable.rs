//! NodeUnschedulable: cordoned nodes take only pods that tolerate their taint.

use k8s_openapi::api::core::v1::{Taint, Toleration};

use super::{Failure, FilterResult};
use crate::node_info::NodeInfo;
use crate::plugins::taint_toleration::tolerates;

pub const REASON: &str = "node(s) were unschedulable";
pub const TAINT_KEY: &str = "node.kubernetes.io/unschedulable";

pub fn filter(tolerations: &[Toleration], node: &NodeInfo) -> FilterResult {
    if !node.unschedulable {
        return Ok(());
    }
    let taint = Taint { key: TAINT_KEY.into(), effect: "NoSchedule".into(), ..Default::default() };
    if tolerations.iter().any(|t| tolerates(t, &taint)) { Ok(()) } else { Err(Failure::unresolvable(REASON)) }
}
