//! The node agent (kubelet). `runtime` runs real pods through CRI (containerd);
//! `simulated` gives the control loops thousands of nodes without containers.

pub mod runtime;
pub mod simulated;
