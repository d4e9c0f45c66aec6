//! The krate-net integration tests, one binary.

mod dns;
mod history;
mod netns;
mod netpol;
mod podnet;
mod proxy;
