//! The krate-encryption integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod kms_v2;
mod store;
