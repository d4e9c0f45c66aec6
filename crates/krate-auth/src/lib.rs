//! Authentication (x509, tokens, service accounts) and authorization (RBAC, Node).
//! Arrives with the security issue.
