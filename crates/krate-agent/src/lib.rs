//! The node agent (kubelet): runs pods through CRI. Arrives with the node agent issue.
