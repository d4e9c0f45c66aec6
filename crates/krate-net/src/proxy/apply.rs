//! Running `nft`: a script goes in on stdin, so a sync is one process and one
//! atomic transaction however large it is.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("no nft command configured")]
    NoCommand,
    #[error("could not run {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{command} did not finish within {timeout:?}")]
    Timeout { command: String, timeout: Duration },
    #[error("{command} failed ({status}): {stderr}")]
    Failed { command: String, status: std::process::ExitStatus, stderr: String },
}

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
        let (program, prefix) = self.command.split_first().ok_or(NftError::NoCommand)?;
        let shown = || format!("{} {}", self.command.join(" "), args.join(" "));
        let mut child = Command::new(program)
            .args(prefix)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| NftError::Spawn { command: shown(), source })?;
        let mut input = child.stdin.take().expect("stdin is piped");
        let script = stdin.as_bytes().to_vec();
        // Written alongside reading the output, so neither side can fill its pipe and
        // wait on the other.
        let write = async move {
            let result = input.write_all(&script).await;
            drop(input);
            result
        };
        let run = async { tokio::join!(write, child.wait_with_output()) };
        let (written, output) = tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| NftError::Timeout { command: shown(), timeout: self.timeout })?;
        let output = output.map_err(|source| NftError::Spawn { command: shown(), source })?;
        if !output.status.success() {
            let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
            return Err(NftError::Failed { command: shown(), status: output.status, stderr });
        }
        // nft may stop reading early only when it fails, which is reported above.
        written.map_err(|source| NftError::Spawn { command: shown(), source })?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }
}
