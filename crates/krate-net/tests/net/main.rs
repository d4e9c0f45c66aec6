//! The krate-net integration tests, one binary.

mod dns;
mod netpol;
mod podnet;
mod proxy;
