//! The krate-scheduler integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod common;

mod placement;
mod scheduling;
