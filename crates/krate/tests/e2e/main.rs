//! The krate integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod common;

mod e2e_agent;
mod e2e_controllers;
mod e2e_etcd;
mod e2e_failover;
mod e2e_kubectl;
mod e2e_kubectl_authn;
mod e2e_kubectl_crd;
mod e2e_kubectl_csr;
mod e2e_kubectl_encryption;
mod e2e_kubectl_openapi;
mod e2e_kubectl_patch;
mod e2e_kubectl_podsecurity;
mod e2e_kubectl_protobuf;
mod e2e_kubectl_rbac;
mod e2e_kubectl_rollout;
mod e2e_kubectl_streaming;
mod e2e_kubectl_tables;
mod e2e_kubectl_validating_policy;
mod e2e_kubectl_webhooks;
mod e2e_network;
mod e2e_python;
