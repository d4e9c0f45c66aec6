//! The krate-agent integration tests, one binary: real containerd, real images built
//! here from the host's static busybox, and a real API server (krate-testkit).
//! They need root and the packages scripts/install-deps.sh installs.

mod agent_api;
mod common;
mod environment;
mod images;
mod pods;
mod probes;
mod restarts;
mod streaming;
mod volumes;
