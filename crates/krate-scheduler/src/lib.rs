//! The scheduler, a kube-rs client of the API server. Arrives with the control loops issue.
