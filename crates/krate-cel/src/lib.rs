//! CEL (Common Expression Language) for krate: what CustomResourceDefinition
//! validation rules, ValidatingAdmissionPolicies and webhook matchConditions need.
//!
//! The parser and interpreter are the `cel` crate (through `kube-cel`, which adds
//! Kubernetes' CEL libraries: lists, regex, url, quantity, ip/cidr, format, sets,
//! semver, string extensions). This crate fills what upstream's environment has and
//! those lack — `cel.bind`, two-variable comprehensions (`all(k, v, ..)`,
//! `exists(k, v, ..)`, `transformList`, `transformMap`), compile-time checks of
//! referenced variables — and adds cost limits and the JSON boundary.
//!
//! The API is deliberately small and independent of the `cel` crate's types:
//! [`compile`] an expression against declared variable names, then
//! [`Program::evaluate`] it with an [`Activation`] of `serde_json::Value`s under a
//! [`CostBudget`], getting an [`Output`]. [`rule`] evaluates CRD
//! `x-kubernetes-validations` rules.

mod activation;
mod compile;
mod cost;
mod functions;
mod output;
mod program;
pub mod rule;

pub use activation::{Activation, escape_property_name};
pub use compile::{CompileError, compile};
pub use cost::{CostBudget, PER_CALL_LIMIT, RUNTIME_COST_BUDGET};
pub use output::{Output, ValueKind};
pub use program::{EvalError, Program};

#[cfg(test)]
mod tests;
