//! krate-agent's integration tests, built as one binary.

mod agent_api;
