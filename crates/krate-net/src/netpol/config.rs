//! The NetworkPolicy enforcer's settings: which node it is, and where and how to run
//! `nft`.

use std::time::Duration;

/// How one node's NetworkPolicy enforcement behaves. `NetpolConfig::new(node)` gives
/// the defaults; set the fields that differ.
#[derive(Clone, Debug)]
pub struct NetpolConfig {
    /// This node's name: pods whose `spec.nodeName` is this are the ones policed here.
    pub node_name: String,
    /// The command that runs `nft`, e.g. `["ip", "netns", "exec", "node", "nft"]` to
    /// program another network namespace; `-f -` and friends are appended.
    pub nft_command: Vec<String>,
    /// The `ip` family table holding every rule, created and deleted whole.
    pub table: String,
    /// The shortest time between two syncs; changes inside it are batched.
    pub min_sync_interval: Duration,
    /// How often the table is rebuilt even without failures.
    pub full_sync_interval: Duration,
    /// How soon a failed sync is retried (as a full one).
    pub retry_interval: Duration,
    /// How long one `nft` run may take.
    pub nft_timeout: Duration,
}

impl NetpolConfig {
    pub fn new(node_name: impl Into<String>) -> NetpolConfig {
        NetpolConfig {
            node_name: node_name.into(),
            nft_command: vec!["nft".into()],
            table: "krate-netpol".into(),
            min_sync_interval: Duration::from_millis(200),
            full_sync_interval: Duration::from_secs(3600),
            retry_interval: Duration::from_secs(5),
            nft_timeout: Duration::from_secs(60),
        }
    }
}
