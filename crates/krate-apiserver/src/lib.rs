//! The Kubernetes API server.
//!
//! - [`serve`]: HTTPS (rustls), client certificates, HTTP/1.1 and HTTP/2;
//! - [`server`]: the request road (authentication and authorization from `krate-auth`,
//!   then admission and the generic
//!   registry from `krate-api`), REST verbs, watches;
//! - [`discovery`], [`health`]: discovery documents, health and version endpoints;
//! - [`pki`]: the cluster CA, serving and client certificates, kubeconfigs.
//! - [`authn`], [`client_auth`]: authentication assembled from `krate-auth`, and the TLS
//!   side of client certificates.

pub mod audit;
pub mod authn;
pub mod authz;
pub mod body;
pub mod bootstrap;
pub mod client_auth;
pub mod conditional;
pub mod crd;
pub mod crd_rules;
pub mod discovery;
pub mod encryption;
pub mod eviction;
pub mod health;
pub mod inflight;
pub mod inprocess;
pub mod metrics;
pub mod namespace_defaults;
pub mod node_join;
pub mod node_proxy;
pub mod openapi;
pub mod pki;
pub mod request;
pub mod serve;
pub mod server;
pub mod start;

pub use server::{ApiServer, ApiServerConfig, Auth, Caller};
