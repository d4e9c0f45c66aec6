//! tcpSocket probes: success when a connection opens within the timeout.

use std::time::Duration;

use super::Found;

/// `host:port`, with brackets for IPv6 (Go's net.JoinHostPort).
pub fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
}

pub async fn probe(host: &str, port: u16, timeout: Duration) -> Found {
    let address = join_host_port(host, port);
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&address)).await {
        Ok(Ok(_stream)) => Found::Success,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Found::Failure(format!("dial tcp {address}: connect: connection refused"))
        }
        Ok(Err(e)) => Found::Failure(format!("dial tcp {address}: {e}")),
        Err(_) => Found::Failure(format!("dial tcp {address}: i/o timeout")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_as_go_joins_them() {
        assert_eq!(join_host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
    }

    #[tokio::test]
    async fn open_and_closed_ports() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(probe("127.0.0.1", port, Duration::from_secs(1)).await, Found::Success);
        drop(listener);
        match probe("127.0.0.1", port, Duration::from_secs(1)).await {
            Found::Failure(m) => assert_eq!(m, format!("dial tcp 127.0.0.1:{port}: connect: connection refused")),
            other => panic!("{other:?}"),
        }
    }
}
