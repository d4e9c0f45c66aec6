//! Running `nft`, for all three loops' tables: a script goes in on stdin, so a sync is
//! one process and one atomic transaction however large it is.

use std::time::Duration;

use crate::command::{self, CommandError};

/// What running `nft` can fail with.
pub type NftError = CommandError;

/// The `nft` to run, with whatever prefix places it (`ip netns exec NS nft`).
#[derive(Clone, Debug)]
pub struct Nft {
    command: Vec<String>,
    timeout: Duration,
}

impl Nft {
    pub fn new(command: Vec<String>, timeout: Duration) -> Nft {
        Nft { command, timeout }
    }

    /// Applies `script` as one transaction.
    pub async fn apply(&self, script: &str) -> Result<(), NftError> {
        self.run(&["-f", "-"], script).await.map(drop)
    }

    /// Checks `script` without applying it (`nft -c`).
    pub async fn check(&self, script: &str) -> Result<(), NftError> {
        self.run(&["-c", "-f", "-"], script).await.map(drop)
    }

    /// Deletes `table` if it exists.
    pub async fn delete_table(&self, table: &str) -> Result<(), NftError> {
        self.apply(&format!("add table ip {table}\ndelete table ip {table}\n")).await
    }

    /// Runs nft with `args` and `stdin`, giving its standard output.
    pub async fn run(&self, args: &[&str], stdin: &str) -> Result<String, NftError> {
        command::run(&self.command, args, Some(stdin), self.timeout).await
    }
}

/// Table names go into scripts unquoted: only plain identifiers are taken.
pub(crate) fn check_table_name(table: &str) -> Result<(), String> {
    let plain = table.starts_with(|c: char| c.is_ascii_alphabetic())
        && table.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if plain { Ok(()) } else { Err(format!("table name {table:?} is not a plain nft identifier")) }
}
