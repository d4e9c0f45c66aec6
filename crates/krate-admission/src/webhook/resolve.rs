//! Where a webhook's clientConfig points. A URL is used as given. A Service is resolved
//! as upstream's endpoint routing does (there is no service proxy to reach a cluster IP
//! through): the Service's port names the Endpoints port, and a random ready address
//! of it is dialled; an ExternalName Service is dialled by its external name. Either
//! way TLS checks the certificate against `NAME.NAMESPACE.svc`.

use rand::seq::IndexedRandom;
use serde_json::Value;

use krate_api::Registry;
use krate_api::registry::Scope;

use super::client::Destination;
use super::config::Endpoint;

pub async fn destination(endpoint: &Endpoint, registry: &Registry) -> Result<Destination, String> {
    match endpoint {
        Endpoint::Url(url) => from_url(url),
        Endpoint::Service { namespace, name, path, port } => {
            let server_name = format!("{name}.{namespace}.svc");
            let (host, dial_port) = service_address(registry, namespace, name, *port).await?;
            Ok(Destination {
                host,
                port: dial_port,
                display: format!("https://{server_name}:{port}{path}"),
                server_name,
                path: path.clone(),
            })
        }
    }
}

fn from_url(url: &str) -> Result<Destination, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("parse {url:?}: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!("unsupported protocol scheme {:?}", uri.scheme_str().unwrap_or("")));
    }
    let host = uri.host().ok_or_else(|| format!("parse {url:?}: missing host"))?.trim_matches(['[', ']']).to_string();
    Ok(Destination {
        port: uri.port_u16().unwrap_or(443),
        server_name: host.clone(),
        host,
        path: uri.path().to_string(),
        display: url.to_string(),
    })
}

async fn get(registry: &Registry, plural: &str, namespace: &str, name: &str) -> Result<Option<Value>, String> {
    let resource = registry.table.lookup("", "v1", plural).ok_or_else(|| format!("{plural} are not served"))?;
    match registry.get_cached_or_live(&Scope { resource, namespace: Some(namespace.to_string()) }, name).await {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.code == 404 => Ok(None),
        Err(e) => Err(e.message),
    }
}

/// Upstream's ResolveEndpoint.
async fn service_address(registry: &Registry, namespace: &str, name: &str, port: u16) -> Result<(String, u16), String> {
    let svc =
        get(registry, "services", namespace, name).await?.ok_or_else(|| format!("service \"{name}\" not found"))?;
    let spec = svc.get("spec").cloned().unwrap_or(Value::Null);
    if spec.get("type").and_then(Value::as_str) == Some("ExternalName") {
        let external = spec.get("externalName").and_then(Value::as_str).unwrap_or("");
        return Ok((external.to_string(), port));
    }
    let ports = spec.get("ports").and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
    let svc_port = ports
        .iter()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
    let no_endpoints = || format!("no endpoints available for service {name:?}");
    let endpoints = get(registry, "endpoints", namespace, name).await?.ok_or_else(no_endpoints)?;
    let mut candidates = Vec::new();
    for subset in endpoints.get("subsets").and_then(Value::as_array).into_iter().flatten() {
        let Some(p) = subset
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
        else {
            continue;
        };
        let Some(p) = p.get("port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok()) else { continue };
        for a in subset.get("addresses").and_then(Value::as_array).into_iter().flatten() {
            if let Some(ip) = a.get("ip").and_then(Value::as_str) {
                candidates.push((ip.to_string(), p));
            }
        }
    }
    candidates.choose(&mut rand::rng()).cloned().ok_or_else(no_endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_host_port_and_path() {
        let d = from_url("https://hook.example.com:8443/mutate").unwrap();
        assert_eq!((d.host.as_str(), d.port, d.path.as_str()), ("hook.example.com", 8443, "/mutate"));
        let d = from_url("https://[::1]/v").unwrap();
        assert_eq!((d.host.as_str(), d.port), ("::1", 443));
        assert!(from_url("http://h/").is_err());
    }
}
