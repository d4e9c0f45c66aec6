//! Writing `nft -f` scripts: one command a line, all against our one table, so the
//! whole script is one atomic transaction.

use std::fmt::Write as _;

use super::render::Container;

/// How many elements go in one `add element` command; nft takes more, but shorter
/// lines keep its error messages readable.
const ELEMENTS_PER_COMMAND: usize = 500;

pub struct Script {
    table: String,
    text: String,
    commands: usize,
}

impl Script {
    pub fn new(table: &str) -> Script {
        Script { table: table.to_string(), text: String::new(), commands: 0 }
    }

    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }

    pub fn into_text(self) -> String {
        self.text
    }

    /// `verb what ip TABLE rest`, e.g. `add chain ip krate-proxy services`.
    fn command(&mut self, verb: &str, what: &str, rest: &str) {
        self.commands += 1;
        let _ = writeln!(self.text, "{verb} {what} ip {} {rest}", self.table);
    }

    /// A command written out whole.
    pub fn raw(&mut self, line: &str) {
        self.commands += 1;
        let _ = writeln!(self.text, "{line}");
    }

    pub fn add_table(&mut self) {
        self.commands += 1;
        let _ = writeln!(self.text, "add table ip {} {{ comment \"rules for krate's service proxy\" ; }}", self.table);
    }

    pub fn delete_table(&mut self) {
        self.commands += 1;
        let _ = writeln!(self.text, "delete table ip {}", self.table);
    }

    pub fn add_chain(&mut self, name: &str) {
        self.command("add", "chain", name);
    }

    pub fn add_base_chain(&mut self, name: &str, kind: &str, hook: &str, priority: i32) {
        self.command("add", "chain", &format!("{name} {{ type {kind} hook {hook} priority {priority} ; }}"));
    }

    pub fn flush_chain(&mut self, name: &str) {
        self.command("flush", "chain", name);
    }

    /// Deletes a chain whether or not it still exists.
    pub fn remove_chain(&mut self, name: &str) {
        self.add_chain(name);
        self.command("delete", "chain", name);
    }

    pub fn add_rule(&mut self, chain: &str, rule: &str) {
        self.command("add", "rule", &format!("{chain} {rule}"));
    }

    pub fn add_container(&mut self, container: Container) {
        self.command("add", container.kind(), &format!("{} {{ {} }}", container.name(), container.declaration()));
    }

    pub fn flush_container(&mut self, container: Container) {
        self.command("flush", container.kind(), container.name());
    }

    pub fn add_affinity_set(&mut self, name: &str, timeout: u32) {
        self.command("add", "set", &affinity_declaration(name, timeout));
    }

    /// Deletes an affinity set whether or not it still exists.
    pub fn remove_affinity_set(&mut self, name: &str, timeout: u32) {
        self.add_affinity_set(name, timeout);
        self.command("delete", "set", name);
    }

    /// `add element` for `(key, value)` pairs; `value` is empty for sets.
    pub fn add_elements<'a>(&mut self, container: &str, elements: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let items: Vec<String> = elements
            .into_iter()
            .map(|(k, v)| if v.is_empty() { k.to_string() } else { format!("{k} : {v}") })
            .collect();
        for chunk in items.chunks(ELEMENTS_PER_COMMAND) {
            self.command("add", "element", &format!("{container} {{ {} }}", chunk.join(", ")));
        }
    }

    pub fn delete_elements<'a>(&mut self, container: &str, keys: impl IntoIterator<Item = &'a str>) {
        let keys: Vec<&str> = keys.into_iter().collect();
        for chunk in keys.chunks(ELEMENTS_PER_COMMAND) {
            self.command("delete", "element", &format!("{container} {{ {} }}", chunk.join(", ")));
        }
    }
}

fn affinity_declaration(name: &str, timeout: u32) -> String {
    // "dynamic" because the packet path adds to it (`update @set`).
    format!("{name} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}")
}
