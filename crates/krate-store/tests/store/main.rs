//! The krate-store integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod etcd_crash;
mod etcd_specifics;
mod etcd_suite;
mod sqlite_crash;
mod sqlite_durability;
mod sqlite_suite;
