//! From what the kernel holds to what it should hold, as one `nft -f` script (one
//! atomic transaction). A full sync deletes and rebuilds the table; a partial sync
//! (the normal case) adds and deletes only the set elements that differ, and rewrites
//! only chains whose rules changed, so a pod coming, going or being relabelled costs
//! a few `add element`/`delete element` commands however many policies there are.

use std::fmt::Write as _;

use super::render::{BASE_CHAINS, Ruleset};

/// How many elements go in one `add element` command (shorter lines keep nft's error
/// messages readable).
const ELEMENTS_PER_COMMAND: usize = 500;

const TABLE_COMMENT: &str = "rules for krate's NetworkPolicy enforcement";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// Delete the table and build it again, in one transaction: at start, after a
    /// failure and now and then.
    Full,
    /// Change only what differs from the last successful sync.
    Partial,
}

impl SyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SyncMode::Full => "full",
            SyncMode::Partial => "partial",
        }
    }
}

/// A sync to run.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Full when asked, or when there is nothing known to diff against.
    pub mode: SyncMode,
    pub script: String,
    /// Nothing to do (a partial sync without changes).
    pub empty: bool,
}

struct Script<'a> {
    table: &'a str,
    text: String,
    commands: usize,
}

impl Script<'_> {
    fn line(&mut self, verb: &str, what: &str, rest: &str) {
        self.commands += 1;
        let _ = writeln!(self.text, "{verb} {what} ip {} {rest}", self.table);
    }

    fn add_table(&mut self) {
        self.line("add", "table", &format!("{{ comment \"{TABLE_COMMENT}\" ; }}"));
    }

    fn add_set(&mut self, name: &str, declaration: &str) {
        self.line("add", "set", &format!("{name} {{ {declaration} }}"));
    }

    fn add_chain(&mut self, name: &str) {
        match BASE_CHAINS.iter().find(|(n, ..)| *n == name) {
            Some((_, hook, priority)) => self.line(
                "add",
                "chain",
                &format!("{name} {{ type filter hook {hook} priority {priority} ; policy accept ; }}"),
            ),
            None => self.line("add", "chain", name),
        }
    }

    fn rules(&mut self, chain: &str, rules: &[String]) {
        for rule in rules {
            self.line("add", "rule", &format!("{chain} {rule}"));
        }
    }

    fn elements<'e>(&mut self, verb: &str, set: &str, elements: impl IntoIterator<Item = &'e String>) {
        let elements: Vec<&str> = elements.into_iter().map(String::as_str).collect();
        for chunk in elements.chunks(ELEMENTS_PER_COMMAND) {
            self.line(verb, "element", &format!("{set} {{ {} }}", chunk.join(", ")));
        }
    }
}

/// The script taking the table from `applied` (what the last successful sync left;
/// None if unknown) to `desired`.
pub fn plan(mode: SyncMode, table: &str, applied: Option<&Ruleset>, desired: &Ruleset) -> Plan {
    let mut script = Script { table, text: String::new(), commands: 0 };
    let mode = match (mode, applied) {
        (SyncMode::Partial, Some(applied)) if kinds_agree(applied, desired) => {
            write_changes(&mut script, applied, desired);
            SyncMode::Partial
        }
        _ => {
            write_everything(&mut script, desired);
            SyncMode::Full
        }
    };
    Plan { mode, empty: script.commands == 0, script: script.text }
}

/// A set's type cannot change in place; names encode the kind, so this holds unless
/// something is badly wrong, and then a rebuild sorts it out.
fn kinds_agree(old: &Ruleset, new: &Ruleset) -> bool {
    new.sets.iter().all(|(name, set)| old.sets.get(name).is_none_or(|o| o.kind == set.kind))
}

fn write_everything(script: &mut Script<'_>, desired: &Ruleset) {
    // `add` first so that `delete` cannot fail on a missing table.
    script.add_table();
    script.line("delete", "table", "");
    script.add_table();
    for (name, set) in &desired.sets {
        script.add_set(name, set.kind.declaration());
        script.elements("add", name, &set.elements);
    }
    // Every chain exists before any rule jumps to it.
    for name in desired.chains.keys() {
        script.add_chain(name);
    }
    for (name, rules) in &desired.chains {
        script.rules(name, rules);
    }
}

fn write_changes(script: &mut Script<'_>, old: &Ruleset, new: &Ruleset) {
    // New sets and chains first, so rewritten rules can use them.
    for (name, set) in &new.sets {
        match old.sets.get(name) {
            None => {
                script.add_set(name, set.kind.declaration());
                script.elements("add", name, &set.elements);
            }
            Some(before) => {
                script.elements("delete", name, before.elements.difference(&set.elements));
                script.elements("add", name, set.elements.difference(&before.elements));
            }
        }
    }
    for name in new.chains.keys().filter(|name| !old.chains.contains_key(*name)) {
        script.add_chain(name);
    }
    for (name, rules) in &new.chains {
        match old.chains.get(name) {
            Some(before) if before == rules => {}
            Some(_) => {
                script.line("flush", "chain", name);
                script.rules(name, rules);
            }
            None => script.rules(name, rules),
        }
    }
    // Then what is gone: chains once nothing jumps to them (the dispatch chains were
    // rewritten above), sets once no rule names them.
    let gone: Vec<&String> = old.chains.keys().filter(|name| !new.chains.contains_key(*name)).collect();
    for name in &gone {
        script.line("flush", "chain", name);
    }
    for name in &gone {
        script.line("delete", "chain", name);
    }
    for name in old.sets.keys().filter(|name| !new.sets.contains_key(*name)) {
        script.line("delete", "set", name);
    }
}
