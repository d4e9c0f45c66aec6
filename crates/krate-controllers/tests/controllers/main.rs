//! The krate-controllers integration tests, built as one binary: one link instead of one per
//! file keeps the build's time and disk small.

mod cronjob;
mod csr;
mod daemonset;
mod deployment;
mod deployment_scale;
mod disruption;
mod endpointslice;
mod garbage_collector;
mod hpa;
mod job;
mod legacy_token_cleaner;
mod node_ipam;
mod node_lifecycle;
mod per_namespace;
mod persistentvolume;
mod podgc;
mod replicaset;
mod resourcequota;
mod service_lb;
mod statefulset;
