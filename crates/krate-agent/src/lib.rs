//! The node agent (kubelet). Real pods through CRI arrive with the node agent issue;
//! `simulated` gives the control loops thousands of nodes without containers.

pub mod simulated;
