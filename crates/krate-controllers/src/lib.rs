//! The controller manager's control loops, as kube-rs clients of the API server.
//! Arrives with the control loops issue.
