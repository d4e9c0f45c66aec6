//! Auditing (upstream's audit.k8s.io/v1): each request is checked against the policy
//! once its user is known; at the level the policy gives, an Event is written at each
//! stage not omitted (RequestReceived, ResponseStarted for watches, ResponseComplete, or
//! Panic) to the log and webhook backends.

pub mod event;
pub mod log;
pub mod metrics;
pub mod policy;
mod request;
pub mod webhook;

pub use request::{RequestAudit, buffer_body, complete, panicked};

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use event::Event;
use policy::Policy;

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Policy(#[from] policy::PolicyError),
    #[error("audit log {path}: {source}")]
    Log { path: String, source: std::io::Error },
    #[error(transparent)]
    Webhook(#[from] webhook::WebhookError),
    #[error("--audit-log-format={0} is not supported (only json)")]
    Format(String),
}

/// The `--audit-*` flags.
#[derive(Clone, Debug, Default)]
pub struct AuditOptions {
    pub policy_file: Option<PathBuf>,
    pub log: Option<log::LogOptions>,
    /// --audit-log-format: "json" (upstream also has "legacy").
    pub log_format: String,
    pub webhook: Option<webhook::WebhookOptions>,
}

pub struct Auditor {
    policy: Policy,
    log: Option<log::LogBackend>,
    webhook: Option<webhook::WebhookBackend>,
}

impl Auditor {
    /// The auditor the options ask for; None when there is no policy or no backend
    /// (upstream audits nothing then). Starts the backends (on the current runtime).
    pub fn start(opts: &AuditOptions) -> Result<Option<Arc<Auditor>>, AuditError> {
        let Some(policy_file) = &opts.policy_file else { return Ok(None) };
        if opts.log.is_none() && opts.webhook.is_none() {
            return Ok(None);
        }
        if !matches!(opts.log_format.as_str(), "" | "json") {
            return Err(AuditError::Format(opts.log_format.clone()));
        }
        let policy = Policy::load(policy_file)?;
        let log = match &opts.log {
            Some(o) => Some(
                log::LogBackend::start(o.clone())
                    .map_err(|source| AuditError::Log { path: o.path.display().to_string(), source })?,
            ),
            None => None,
        };
        let webhook = opts.webhook.clone().map(webhook::WebhookBackend::start).transpose()?;
        Ok(Some(Arc::new(Auditor { policy, log, webhook })))
    }

    fn emit(&self, ev: &Event) {
        let line = match serde_json::to_vec(ev) {
            Ok(l) => Bytes::from(l),
            Err(e) => {
                tracing::error!(error = %e, "encoding an audit event failed");
                return;
            }
        };
        metrics::EVENTS.inc();
        if let Some(l) = &self.log {
            l.process(line.clone());
        }
        if let Some(w) = &self.webhook {
            w.process(line);
        }
    }
}

/// A Go duration as upstream's flags take them: "30s", "500ms", "1m30s", "2h"
/// (krate-api's parser, the one protobuf Durations use); negative ones are refused.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let nanos = krate_api::protobuf::transcode::parse_go_duration(s.trim()).map_err(|e| e.0)?;
    u64::try_from(nanos).map(std::time::Duration::from_nanos).map_err(|_| format!("invalid duration {s:?}"))
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10").is_err() && parse_duration("x").is_err() && parse_duration("").is_err());
    }
}
