//! The krate-net integration tests, one binary.

mod dns;
mod proxy;
