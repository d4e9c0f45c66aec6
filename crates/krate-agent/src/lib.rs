//! The node agent (kubelet).
//!
//! - [`bootstrap`]: kubelet TLS bootstrap (cluster CA from the signed cluster-info,
//!   client and serving certificates through CSRs, kept in DATA_DIR/agent);
//! - [`node`]: registration, node status (capacity, conditions, nodeInfo) and the
//!   Lease heartbeat;
//! - [`kubelet_api`]: the HTTPS API on the kubelet port (authn/authz as upstream);
//! - [`runtime`]: real pods through CRI (containerd);
//! - [`streaming`]: the runtime's endpoints on that API: container logs, exec,
//!   attach and port-forward;
//! - [`agent`]: all of it together, with the seams the container runtime plugs into;
//! - [`simulated`]: thousands of nodes without containers, for the control loops.

pub mod agent;
pub mod bootstrap;
pub mod kubelet_api;
pub mod metrics;
pub mod node;
pub mod runtime;
pub mod simulated;
pub mod streaming;
