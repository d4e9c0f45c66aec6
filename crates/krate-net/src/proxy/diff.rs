//! From what the kernel holds to what it should hold, as one script. A full sync
//! rewrites every chain and refills every map; a partial sync (kube-proxy's normal
//! case) touches only chains whose rules changed and map elements that differ, so a
//! one-endpoint change costs a few commands however many services there are.
//!
//! Chains that fall out of use are flushed at once but deleted only after a delay
//! (and by a later sync): before Linux 6.2 the kernel notices a chain is no longer
//! referenced by a deleted map element only a moment later.

use std::collections::BTreeMap;
use std::time::Instant;

use super::base;
use super::config::ProxyConfig;
use super::render::{Container, Ruleset};
use super::script::Script;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Delete the table and build it again, in one transaction: at start, when what
    /// the kernel holds is unknown, and when a full sync has failed.
    Recreate,
    /// Rewrite everything in place (affinity sets keep their entries).
    Full,
    /// Rewrite only what changed since the last successful sync.
    Partial,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Recreate => "recreate",
            SyncMode::Full => "full",
            SyncMode::Partial => "partial",
        }
    }
}

/// What the kernel holds after our last successful sync. Every sync is one atomic
/// `nft -f`, so a failed one leaves this true.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    pub rules: Ruleset,
    /// Flushed chains no longer used, and since when.
    pub stale: BTreeMap<String, Instant>,
}

impl Applied {
    /// When the oldest stale chain may be deleted.
    pub fn next_stale_deletion(&self, config: &ProxyConfig) -> Option<Instant> {
        self.stale.values().min().map(|since| *since + config.stale_chain_delay)
    }
}

/// A sync to run: its script, and what the kernel will hold if it succeeds.
pub struct Plan {
    pub mode: SyncMode,
    pub script: String,
    /// Nothing to do (a partial sync with no changes).
    pub empty: bool,
    pub next: Applied,
}

pub fn plan(mode: SyncMode, config: &ProxyConfig, applied: &Applied, desired: Ruleset, now: Instant) -> Plan {
    let mut script = Script::new(&config.table);
    let stale = match mode {
        SyncMode::Recreate => {
            // `add` first so that `delete` cannot fail on a missing table.
            script.add_table();
            script.delete_table();
            write_everything(&mut script, config, &desired);
            BTreeMap::new()
        }
        SyncMode::Full => {
            write_everything(&mut script, config, &desired);
            retire(&mut script, config, applied, &desired, now)
        }
        SyncMode::Partial => {
            write_changes(&mut script, &applied.rules, &desired);
            retire(&mut script, config, applied, &desired, now)
        }
    };
    let empty = script.is_empty();
    Plan { mode, script: script.into_text(), empty, next: Applied { rules: desired, stale } }
}

fn write_everything(script: &mut Script, config: &ProxyConfig, desired: &Ruleset) {
    base::write(script, config, true);
    // Every chain exists before any rule or element names it.
    for name in desired.chains.keys() {
        script.add_chain(name);
    }
    for (name, timeout) in &desired.affinity_sets {
        script.add_affinity_set(name, *timeout);
    }
    for (name, rules) in &desired.chains {
        script.flush_chain(name);
        for rule in rules {
            script.add_rule(name, rule);
        }
    }
    for (container, elements) in &desired.elements {
        script.add_elements(container.name(), elements.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
}

fn write_changes(script: &mut Script, old: &Ruleset, new: &Ruleset) {
    for name in new.chains.keys().filter(|name| !old.chains.contains_key(*name)) {
        script.add_chain(name);
    }
    for (name, timeout) in &new.affinity_sets {
        if !old.affinity_sets.contains_key(name) {
            script.add_affinity_set(name, *timeout);
        }
    }
    for (name, rules) in &new.chains {
        match old.chains.get(name) {
            Some(before) if before == rules => continue,
            // A new chain may be a stale one revived: flushed already, so empty.
            Some(_) => script.flush_chain(name),
            None => {}
        }
        for rule in rules {
            script.add_rule(name, rule);
        }
    }
    for container in Container::ALL {
        let empty = BTreeMap::new();
        let before = old.elements.get(&container).unwrap_or(&empty);
        let after = new.elements.get(&container).unwrap_or(&empty);
        // A changed value is a delete and an add: nft cannot replace in place.
        let gone = before.iter().filter(|(k, v)| after.get(*k) != Some(*v)).map(|(k, _)| k.as_str());
        script.delete_elements(container.name(), gone);
        let added = after.iter().filter(|(k, v)| before.get(*k) != Some(*v)).map(|(k, v)| (k.as_str(), v.as_str()));
        script.add_elements(container.name(), added);
    }
}

/// Flushes chains that fell out of use, deletes those stale long enough, and deletes
/// unused affinity sets (rules name them, not map elements, so they can go at once —
/// after the flushes). Returns the stale chains still waiting.
fn retire(
    script: &mut Script,
    config: &ProxyConfig,
    applied: &Applied,
    desired: &Ruleset,
    now: Instant,
) -> BTreeMap<String, Instant> {
    let mut stale = BTreeMap::new();
    for (name, since) in &applied.stale {
        if desired.chains.contains_key(name) || base::is_fixed_chain(name) {
            continue; // in use again
        }
        if now.saturating_duration_since(*since) >= config.stale_chain_delay {
            script.remove_chain(name);
        } else {
            stale.insert(name.clone(), *since);
        }
    }
    for name in applied.rules.chains.keys() {
        if !desired.chains.contains_key(name) {
            script.flush_chain(name);
            stale.insert(name.clone(), now);
        }
    }
    for (name, timeout) in &applied.rules.affinity_sets {
        if !desired.affinity_sets.contains_key(name) {
            script.remove_affinity_set(name, *timeout);
        }
    }
    stale
}
