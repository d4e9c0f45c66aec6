//! grpc probes: grpc.health.v1.Health/Check over plaintext HTTP/2 to the pod IP, with
//! the probe's service name; SERVING is success. Messages as upstream's pkg/probe/grpc.

use std::time::Duration;

use tonic::transport::Endpoint;

use super::Found;
use super::tcp::join_host_port;

/// grpc.health.v1.HealthCheckRequest.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckRequest {
    #[prost(string, tag = "1")]
    pub service: String,
}

/// grpc.health.v1.HealthCheckResponse (status: UNKNOWN 0, SERVING 1, NOT_SERVING 2,
/// SERVICE_UNKNOWN 3).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HealthCheckResponse {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

pub const SERVING: i32 = 1;
pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";

/// The name of a serving status, as the proto enum spells it.
pub fn status_name(status: i32) -> String {
    match status {
        0 => "UNKNOWN".into(),
        1 => "SERVING".into(),
        2 => "NOT_SERVING".into(),
        3 => "SERVICE_UNKNOWN".into(),
        n => n.to_string(),
    }
}

/// Go's duration format for whole seconds (1s, 2m0s).
fn go_secs(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 { format!("{}m{}s", s / 60, s % 60) } else { format!("{s}s") }
}

pub async fn probe(host: &str, port: u16, service: &str, timeout: Duration) -> Found {
    let address = join_host_port(host, port);
    let endpoint = match Endpoint::from_shared(format!("http://{address}")) {
        Ok(e) => e.connect_timeout(timeout).timeout(timeout),
        Err(e) => return Found::Failure(format!("error: failed to connect service at {address:?}: {e}")),
    };
    let channel = match tokio::time::timeout(timeout, endpoint.connect()).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => {
            let source = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_else(|| e.to_string());
            return Found::Failure(format!("error: failed to connect service at {address:?}: {source}"));
        }
        Err(_) => {
            return Found::Failure(format!(
                "timeout: failed to connect service {address:?} within {}",
                go_secs(timeout)
            ));
        }
    };
    let mut grpc = tonic::client::Grpc::new(channel);
    let call = async {
        grpc.ready().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let codec = tonic_prost::ProstCodec::<HealthCheckRequest, HealthCheckResponse>::default();
        let path = http::uri::PathAndQuery::from_static(CHECK_PATH);
        grpc.unary(tonic::Request::new(HealthCheckRequest { service: service.to_string() }), path, codec).await
    };
    let reply = match tokio::time::timeout(timeout, call).await {
        Err(_) => return Found::Failure(format!("timeout: health rpc did not complete within {}", go_secs(timeout))),
        Ok(r) => r,
    };
    match reply {
        Ok(r) if r.get_ref().status == SERVING => Found::Success,
        Ok(r) => Found::Failure(format!("service unhealthy (responded with {:?})", status_name(r.get_ref().status))),
        Err(s) if s.code() == tonic::Code::Unimplemented => Found::Failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
            s.message()
        )),
        Err(s) if s.code() == tonic::Code::DeadlineExceeded || s.code() == tonic::Code::Cancelled => {
            Found::Failure(format!("timeout: health rpc did not complete within {}", go_secs(timeout)))
        }
        Err(s) => Found::Failure(format!("error: health rpc probe failed: {s}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names() {
        assert_eq!(status_name(1), "SERVING");
        assert_eq!(status_name(2), "NOT_SERVING");
        assert_eq!(go_secs(Duration::from_secs(1)), "1s");
    }

    #[tokio::test]
    async fn nothing_listening_fails() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        match probe("127.0.0.1", port, "", Duration::from_secs(1)).await {
            Found::Failure(m) => assert!(m.starts_with("error: failed to connect service at"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}
