//! The krate-apiserver integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod common;

mod api_admission;
mod api_admission_webhooks;
mod api_audit;
mod api_authn;
mod api_crd;
mod api_crud;
mod api_discovery;
mod api_encryption;
mod api_field_validation;
mod api_list_watch;
mod api_openapi;
mod api_priority;
mod api_protobuf;
mod api_rbac;
mod api_security_matrix;
mod api_semantics;
mod api_server_side_apply;
mod api_services;
mod api_strategic_patch;
mod api_validating_policy;
mod api_validation;
mod api_versions;
mod inprocess;
