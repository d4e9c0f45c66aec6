//! Container lifecycle hooks as upstream's kubelet (pkg/kubelet/lifecycle and
//! killContainer): postStart runs right after the container starts (the worker reports
//! the container only once it is done; a failure kills the container), preStop runs
//! before the container is stopped, within its grace period, by exec, httpGet
//! (scheme and headers as probes, User-Agent kube-lifecycle/1.36) or sleep.

use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};

use crate::runtime::cri::Cri;
use crate::runtime::events::PodEvents;
use crate::runtime::probe::exec::{self, Ran};
use crate::runtime::probe::http;

/// The shortest grace a container gets after its preStop hook ran (upstream's
/// minimumGracePeriodInSeconds).
pub const MIN_GRACE_AFTER_HOOK: i64 = 2;
/// How long an httpGet hook may take (upstream sets none; postStart blocks the pod).
const HTTP_HOOK_LIMIT: Duration = Duration::from_secs(600);

/// A hook that failed, with upstream's message.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    #[error(
        "Exec lifecycle hook ([{}]) for Container {container:?} in Pod {pod:?} failed - error: {error}, message: {output:?}",
        command.join(" ")
    )]
    Exec { command: Vec<String>, container: String, pod: String, error: String, output: String },
    #[error("HTTP lifecycle hook ({path}) for Container {container:?} in Pod {pod:?} failed - error: {error}")]
    Http { path: String, container: String, pod: String, error: String },
    #[error("Cannot run handler: invalid handler: {0}")]
    Invalid(String),
}

/// The container a hook runs for.
pub struct HookTarget<'a> {
    pub cri: &'a Cri,
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub container_id: &'a str,
    pub pod_ip: Option<&'a str>,
}

/// upstream's format.Pod: name_namespace(uid).
fn pod_ref(pod: &Pod) -> String {
    let m = &pod.metadata;
    format!(
        "{}_{}({})",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        m.uid.as_deref().unwrap_or_default()
    )
}

/// Runs one handler to its end.
pub async fn run(t: &HookTarget<'_>, h: &LifecycleHandler) -> Result<(), HookError> {
    if let Some(e) = &h.exec {
        let command = e.command.clone().unwrap_or_default();
        let failed = |error: String, output: String| HookError::Exec {
            command: command.clone(),
            container: t.container.name.clone(),
            pod: pod_ref(t.pod),
            error,
            output,
        };
        return match exec::run(t.cri, t.container_id, &command, None).await {
            Ok(Ran::Exited(0, _)) => Ok(()),
            Ok(Ran::Exited(code, output)) => {
                Err(failed(format!("command '{}' exited with {code}: ", command.join(" ")), output))
            }
            Ok(Ran::TimedOut) => Err(failed(format!("command '{}' timed out", command.join(" ")), String::new())),
            Err(error) => Err(failed(error, String::new())),
        };
    }
    if let Some(g) = &h.http_get {
        let failed = |error: String| HookError::Http {
            path: g.path.clone().unwrap_or_default(),
            container: t.container.name.clone(),
            pod: pod_ref(t.pod),
            error,
        };
        let request =
            http::Request::from_action(g, t.container, t.pod_ip, "lifecycle").map_err(|e| failed(e.to_string()))?;
        // Only a failed request fails the hook; any status will do (as upstream).
        return http::get(&request, HTTP_HOOK_LIMIT).await.map(drop).map_err(|e| failed(e.to_string()));
    }
    if let Some(s) = &h.sleep {
        tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64)).await;
        return Ok(());
    }
    Err(HookError::Invalid(if h.tcp_socket.is_some() { "tcpSocket is not supported" } else { "no action" }.into()))
}

/// Runs the container's postStart hook, if it has one.
pub async fn post_start(t: &HookTarget<'_>) -> Result<(), HookError> {
    match t.container.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
        Some(h) => run(t, h).await,
        None => Ok(()),
    }
}

/// Stops a running container as upstream's killContainer: its preStop hook first,
/// for at most `grace` seconds (a failure is recorded as FailedPreStopHook), then
/// StopContainer with what is left of the grace period (at least 2 s after a hook).
pub async fn stop_container(t: &HookTarget<'_>, events: &PodEvents, grace: i64) {
    let mut grace = grace.max(0);
    let pre_stop = t.container.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref());
    if let Some(h) = pre_stop.filter(|_| grace > 0) {
        let began = Instant::now();
        match tokio::time::timeout(Duration::from_secs(grace as u64), run(t, h)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::info!(container = t.container.name, %error, "preStop hook failed");
                events.container(t.pod, &t.container.name, "Warning", "FailedPreStopHook", error.to_string());
            }
            Err(_) => {
                tracing::info!(container = t.container.name, grace, "preStop hook did not end within the grace period")
            }
        }
        grace = (grace - began.elapsed().as_secs() as i64).max(MIN_GRACE_AFTER_HOOK);
    }
    let request = cri::StopContainerRequest { container_id: t.container_id.to_string(), timeout: grace };
    if let Err(error) = t.cri.runtime.clone().stop_container(request).await {
        tracing::warn!(container = t.container_id, %error, "stop container failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_as_upstream() {
        let e = HookError::Exec {
            command: vec!["sh".into(), "-c".into(), "exit 1".into()],
            container: "c".into(),
            pod: "p_d(u)".into(),
            error: "command 'sh -c exit 1' exited with 1: ".into(),
            output: "out".into(),
        };
        assert_eq!(
            e.to_string(),
            "Exec lifecycle hook ([sh -c exit 1]) for Container \"c\" in Pod \"p_d(u)\" failed - error: command 'sh -c exit 1' exited with 1: , message: \"out\""
        );
        let e =
            HookError::Http { path: "/x".into(), container: "c".into(), pod: "p_d(u)".into(), error: "boom".into() };
        assert_eq!(
            e.to_string(),
            "HTTP lifecycle hook (/x) for Container \"c\" in Pod \"p_d(u)\" failed - error: boom"
        );
    }

    #[test]
    fn pod_reference() {
        let pod: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p", "namespace": "d", "uid": "u"}}))
                .unwrap();
        assert_eq!(pod_ref(&pod), "p_d(u)");
    }
}
