//! /healthz, /livez and /readyz with upstream's output, ?verbose, ?exclude= and
//! per-check paths; /version.

use std::collections::HashMap;

use http::{Response, StatusCode};
use serde_json::{Value, json};

use crate::body::{Body, text};

/// One named check's result.
pub struct Check {
    pub name: &'static str,
    pub result: Result<(), String>,
}

/// Checks a component adds at start-up (see `ApiServer::add_health_checks`).
pub trait ExtraChecks: Send + Sync {
    fn checks(&self) -> futures::future::BoxFuture<'_, Vec<Check>>;
}

/// Answers `/<endpoint>[/<check>]`.
pub fn respond(endpoint: &str, sub: Option<&str>, checks: &[Check], query: &HashMap<String, String>) -> Response<Body> {
    if let Some(name) = sub {
        return match checks.iter().find(|c| c.name == name) {
            Some(Check { result: Ok(()), .. }) => text(StatusCode::OK, "ok".into()),
            Some(Check { result: Err(_), .. }) => {
                text(StatusCode::INTERNAL_SERVER_ERROR, "internal server error: check failed\n".into())
            }
            None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        };
    }
    let excluded: Vec<&str> = query.get("exclude").map(|v| v.split(',').collect()).unwrap_or_default();
    let verbose = query.contains_key("verbose");
    let mut lines = String::new();
    let mut failed = false;
    for c in checks {
        if excluded.contains(&c.name) {
            lines.push_str(&format!("[+]{} excluded: ok\n", c.name));
            continue;
        }
        match &c.result {
            Ok(()) => lines.push_str(&format!("[+]{} ok\n", c.name)),
            Err(_) => {
                failed = true;
                lines.push_str(&format!("[-]{} failed: reason withheld\n", c.name));
            }
        }
    }
    if failed {
        lines.push_str(&format!("{endpoint} check failed\n"));
        return text(StatusCode::INTERNAL_SERVER_ERROR, lines);
    }
    if verbose {
        text(StatusCode::OK, format!("{lines}{endpoint} check passed\n"))
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

/// The Kubernetes version served, with krate's own after '+', as k3s does.
pub fn version_info() -> Value {
    let (major, minor) = ("1", "36");
    json!({
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": "35",
        "gitVersion": format!("v1.36.0+krate-{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": option_env!("KRATE_GIT_COMMIT").unwrap_or("unknown"),
        "gitTreeState": "clean",
        "buildDate": option_env!("KRATE_BUILD_DATE").unwrap_or("1970-01-01T00:00:00Z"),
        "goVersion": "none (krate is written in Rust)",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
    })
}
