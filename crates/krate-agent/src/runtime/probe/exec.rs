//! Exec actions: a command run in the container through CRI ExecSync (probes with
//! their timeout, lifecycle hooks without one).

use std::time::Duration;

use k8s_cri::v1 as cri;

use super::{Found, ProbeError};
use crate::runtime::cri::Cri;

/// How an exec ended.
#[derive(Debug)]
pub enum Ran {
    /// Exit code and output (stdout then stderr).
    Exited(i32, String),
    TimedOut,
}

/// Runs `command` in the container; `timeout` None waits as long as it takes.
pub async fn run(cri: &Cri, container_id: &str, command: &[String], timeout: Option<Duration>) -> Result<Ran, String> {
    let request = cri::ExecSyncRequest {
        container_id: container_id.to_string(),
        cmd: command.to_vec(),
        timeout: timeout.map_or(0, |t| t.as_secs().max(1) as i64),
    };
    let mut client = cri.runtime.clone();
    let call = client.exec_sync(request);
    // The runtime enforces the timeout; the client waits a little longer in case it does not.
    let reply = match timeout {
        Some(t) => match tokio::time::timeout(t + Duration::from_secs(2), call).await {
            Ok(r) => r,
            Err(_) => return Ok(Ran::TimedOut),
        },
        None => call.await,
    };
    match reply {
        Ok(r) => {
            let r = r.into_inner();
            let mut output = String::from_utf8_lossy(&r.stdout).into_owned();
            output.push_str(&String::from_utf8_lossy(&r.stderr));
            Ok(Ran::Exited(r.exit_code, output))
        }
        Err(s) if s.code() == tonic::Code::DeadlineExceeded => Ok(Ran::TimedOut),
        Err(s) => Err(s.message().to_string()),
    }
}

/// An exec probe: exit 0 is success; otherwise a failure with the output, or with
/// upstream's `command "..." timed out` after the timeout.
pub async fn probe(cri: &Cri, container_id: &str, command: &[String], timeout: Duration) -> Result<Found, ProbeError> {
    match run(cri, container_id, command, Some(timeout)).await.map_err(ProbeError::Exec)? {
        Ran::Exited(0, _) => Ok(Found::Success),
        Ran::Exited(_, output) => Ok(Found::Failure(output)),
        Ran::TimedOut => Ok(Found::Failure(format!("command {:?} timed out", command.join(" ")))),
    }
}
