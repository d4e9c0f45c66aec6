//! API types and the resource registry.
//!
//! - `generated::resources`: the built-in resources upstream v1.36 serves by default;
//! - [`resource`]: the run-time table of served resources (built-ins, later custom);
//! - [`strategy`]: per-kind semantics where kinds differ;
//! - [`registry`]: the one generic registry that serves every resource from the store;
//! - [`cache`]: the watch cache that lists and watches are served from;
//! - [`error`]: API errors as metav1.Status.

pub mod admission;
pub mod audit;
pub mod cache;
pub mod computed;
mod continue_token;
pub mod conversion;
pub mod crd;
pub mod error;
pub mod fieldvalidation;
pub mod filter;
pub mod generated;
pub mod hooks;
pub mod kinds;
pub mod managedfields;
pub mod object;
pub mod pem;
pub mod protobuf;
pub mod registry;
pub mod resource;
pub mod schema;
pub mod selector;
pub mod services;
pub mod strategic;
pub mod strategy;
pub mod table;
pub mod user;
pub mod validation;

pub use error::{ApiError, ApiResult, Cause, Target};
pub use registry::Registry;
pub use resource::{ResourceInfo, ResourceTable};
