//! Container probes as upstream's kubelet prober (pkg/kubelet/prober, pkg/probe):
//! startup, liveness and readiness probes by exec, httpGet, tcpSocket and grpc, with
//! the API's defaults and thresholds. `manager` runs one task per probe per running
//! container and hands results to the pod worker; the actions live in `exec`, `http`,
//! `tcp` and `grpc` (http is shared with the lifecycle hooks).

pub mod exec;
pub mod grpc;
pub mod http;
mod manager;
pub mod tcp;
mod tracker;

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub use self::manager::{Kill, PodProbes, ProbeContext, restarts};
pub use self::tracker::Tracker;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Liveness,
    Readiness,
    Startup,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Startup, Kind::Liveness, Kind::Readiness];

    /// As upstream's messages name it ("Liveness probe failed: ...").
    pub fn title(self) -> &'static str {
        match self {
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
            Kind::Startup => "Startup",
        }
    }

    /// The `probe_type` label of prober_probe_total.
    pub fn label(self) -> &'static str {
        self.title()
    }

    /// The container's probe of this kind.
    pub fn of(self, c: &Container) -> Option<&Probe> {
        match self {
            Kind::Liveness => c.liveness_probe.as_ref(),
            Kind::Readiness => c.readiness_probe.as_ref(),
            Kind::Startup => c.startup_probe.as_ref(),
        }
    }

    /// The result a new container starts with (upstream's initialValue): ready only
    /// once proven, alive until proven dead, started unknown.
    pub fn initial(self) -> Option<Outcome> {
        match self {
            Kind::Liveness => Some(Outcome::Success),
            Kind::Readiness => Some(Outcome::Failure),
            Kind::Startup => None,
        }
    }

    /// The Killing event's message for a container this probe failed.
    pub fn kill_message(self, container: &str, restart: bool) -> String {
        let what = if self == Kind::Startup { "startup" } else { "liveness" };
        let message = format!("Container {container} failed {what} probe");
        if restart { format!("{message}, will be restarted") } else { message }
    }
}

/// A probe's settled result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure,
}

/// What one run of a probe's action found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Success,
    /// Counts as success, with a ProbeWarning event (an HTTP redirect not followed).
    Warning(String),
    Failure(String),
}

/// Why a probe's action could not run at all (counts as a failure, "errored").
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("port {0:?} not found in the container's ports")]
    PortNotFound(String),
    #[error("invalid port {0}")]
    InvalidPort(i64),
    #[error("the pod has no IP address yet")]
    NoPodIp,
    #[error("missing probe handler")]
    NoHandler,
    #[error("exec in the container failed: {0}")]
    Exec(String),
    #[error("{0}")]
    Http(#[from] http::HttpError),
}

/// A probe's timing and thresholds with upstream's defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub initial_delay: Duration,
    pub period: Duration,
    pub timeout: Duration,
    pub success_threshold: u32,
    pub failure_threshold: u32,
    /// The probe-level terminationGracePeriodSeconds (liveness and startup).
    pub termination_grace: Option<i64>,
}

impl Settings {
    /// Defaults as the API's: period 10 s, timeout 1 s, thresholds 1 and 3; values
    /// below the minimum take it. Liveness and startup succeed on one success.
    pub fn of(kind: Kind, p: &Probe) -> Settings {
        let secs = |v: Option<i32>, default: i32, min: i32| Duration::from_secs(v.unwrap_or(default).max(min) as u64);
        let success = if kind == Kind::Readiness { p.success_threshold.unwrap_or(1).max(1) as u32 } else { 1 };
        Settings {
            initial_delay: secs(p.initial_delay_seconds, 0, 0),
            period: secs(p.period_seconds, 10, 1),
            timeout: secs(p.timeout_seconds, 1, 1),
            success_threshold: success,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
            termination_grace: if kind == Kind::Readiness { None } else { p.termination_grace_period_seconds },
        }
    }
}

/// A port given by number or by the name of one of the container's ports (a string
/// of digits counts as a number, as upstream's resolvePort).
pub fn resolve_port(port: &IntOrString, c: &Container) -> Result<u16, ProbeError> {
    let number = match port {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => match s.parse::<i64>() {
            Ok(n) => n,
            Err(_) => c
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(s.as_str()))
                .map(|p| i64::from(p.container_port))
                .ok_or_else(|| ProbeError::PortNotFound(s.clone()))?,
        },
    };
    u16::try_from(number).ok().filter(|p| *p > 0).ok_or(ProbeError::InvalidPort(number))
}

/// Where a probe runs: the container and its pod.
pub struct Target<'a> {
    pub ctx: &'a ProbeContext,
    pub container: &'a Container,
    pub container_id: &'a str,
    pub pod_ip: Option<&'a str>,
}

/// Runs the probe's action once within its timeout.
pub async fn run(p: &Probe, t: &Target<'_>, timeout: Duration) -> Result<Found, ProbeError> {
    if let Some(e) = &p.exec {
        let command = e.command.clone().unwrap_or_default();
        return exec::probe(&t.ctx.cri, t.container_id, &command, timeout).await;
    }
    if let Some(h) = &p.http_get {
        let request = http::Request::from_action(h, t.container, t.pod_ip, "probe")?;
        return Ok(http::probe(&request, timeout).await);
    }
    if let Some(s) = &p.tcp_socket {
        let port = resolve_port(&s.port, t.container)?;
        let host = s.host.as_deref().filter(|h| !h.is_empty()).or(t.pod_ip).ok_or(ProbeError::NoPodIp)?;
        return Ok(tcp::probe(host, port, timeout).await);
    }
    if let Some(g) = &p.grpc {
        let host = t.pod_ip.ok_or(ProbeError::NoPodIp)?;
        let port = u16::try_from(g.port).ok().filter(|p| *p > 0).ok_or(ProbeError::InvalidPort(g.port.into()))?;
        return Ok(grpc::probe(host, port, g.service.as_deref().unwrap_or_default(), timeout).await);
    }
    Err(ProbeError::NoHandler)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container() -> Container {
        serde_json::from_value(serde_json::json!({
            "name": "c", "ports": [{"name": "http", "containerPort": 8080}, {"containerPort": 9090}]
        }))
        .unwrap()
    }

    #[test]
    fn defaults_are_the_apis() {
        let s = Settings::of(Kind::Readiness, &Probe::default());
        assert_eq!(s.initial_delay, Duration::ZERO);
        assert_eq!(s.period, Duration::from_secs(10));
        assert_eq!(s.timeout, Duration::from_secs(1));
        assert_eq!((s.success_threshold, s.failure_threshold), (1, 3));
        assert_eq!(s.termination_grace, None);
    }

    #[test]
    fn liveness_and_startup_succeed_once_and_keep_their_grace() {
        let p = Probe { success_threshold: Some(3), termination_grace_period_seconds: Some(5), ..Default::default() };
        assert_eq!(Settings::of(Kind::Liveness, &p).success_threshold, 1);
        assert_eq!(Settings::of(Kind::Startup, &p).success_threshold, 1);
        assert_eq!(Settings::of(Kind::Readiness, &p).success_threshold, 3);
        assert_eq!(Settings::of(Kind::Liveness, &p).termination_grace, Some(5));
        assert_eq!(Settings::of(Kind::Readiness, &p).termination_grace, None);
    }

    #[test]
    fn zero_period_and_timeout_take_the_minimum() {
        let p = Probe { period_seconds: Some(0), timeout_seconds: Some(0), ..Default::default() };
        let s = Settings::of(Kind::Liveness, &p);
        assert_eq!((s.period, s.timeout), (Duration::from_secs(1), Duration::from_secs(1)));
    }

    #[test]
    fn ports_by_number_digits_or_name() {
        let c = container();
        assert_eq!(resolve_port(&IntOrString::Int(80), &c).unwrap(), 80);
        assert_eq!(resolve_port(&IntOrString::String("81".into()), &c).unwrap(), 81);
        assert_eq!(resolve_port(&IntOrString::String("http".into()), &c).unwrap(), 8080);
        assert!(matches!(resolve_port(&IntOrString::String("grpc".into()), &c), Err(ProbeError::PortNotFound(_))));
        assert!(matches!(resolve_port(&IntOrString::Int(70000), &c), Err(ProbeError::InvalidPort(70000))));
    }

    #[test]
    fn kill_messages_as_upstream() {
        assert_eq!(Kind::Liveness.kill_message("c", true), "Container c failed liveness probe, will be restarted");
        assert_eq!(Kind::Startup.kill_message("c", false), "Container c failed startup probe");
    }
}
