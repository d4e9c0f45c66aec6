//! Running the tools the loops program the kernel with (`nft`, `ip`, `sysctl`): one
//! process per call, bounded in time, its failure told with the command line and what
//! it printed on stderr.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error("no command configured")]
    NoCommand,
    #[error("could not run {command}: {source}")]
    Spawn { command: String, source: std::io::Error },
    #[error("{command} did not finish within {timeout:?}")]
    Timeout { command: String, timeout: Duration },
    #[error("{command} failed ({status}): {stderr}")]
    Failed { command: String, status: std::process::ExitStatus, stderr: String },
    #[error("{command} printed what is not a route list: {error}")]
    Parse { command: String, error: String },
}

impl CommandError {
    /// What the command said on stderr, when it ran and failed.
    pub fn stderr(&self) -> Option<&str> {
        match self {
            CommandError::Failed { stderr, .. } => Some(stderr),
            _ => None,
        }
    }
}

/// Runs `command` (a program and its prefix arguments) + `args`, with `stdin` as its
/// standard input (none at all when None), giving its standard output.
pub(crate) async fn run(
    command: &[String],
    args: &[&str],
    stdin: Option<&str>,
    timeout: Duration,
) -> Result<String, CommandError> {
    let (program, prefix) = command.split_first().ok_or(CommandError::NoCommand)?;
    let shown = || format!("{} {}", command.join(" "), args.join(" "));
    let mut child = Command::new(program)
        .args(prefix)
        .args(args)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| CommandError::Spawn { command: shown(), source })?;
    let input = child.stdin.take().zip(stdin);
    // Written alongside reading the output, so neither side can fill its pipe and wait
    // on the other; the pipe closes once written.
    let write = async move {
        match input {
            Some((mut pipe, text)) => pipe.write_all(text.as_bytes()).await,
            None => Ok(()),
        }
    };
    let run = async { tokio::join!(write, child.wait_with_output()) };
    let (written, output) =
        tokio::time::timeout(timeout, run).await.map_err(|_| CommandError::Timeout { command: shown(), timeout })?;
    let output = output.map_err(|source| CommandError::Spawn { command: shown(), source })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        return Err(CommandError::Failed { command: shown(), status: output.status, stderr });
    }
    // A command may stop reading early only when it fails, which is reported above.
    written.map_err(|source| CommandError::Spawn { command: shown(), source })?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
