//! Where resource metrics come from: a small trait, so the calculation can be tested
//! with real numbers, and its implementation over the resource metrics API
//! (metrics.k8s.io/v1beta1 PodMetrics), reporting failures with upstream's messages.

use futures::future::BoxFuture;
use serde_json::Value;

use super::quantity;
use super::replicas::{PodMetric, PodMetrics};

/// Per-pod usage of one resource for the pods a selector picks.
pub trait MetricsSource: Send + Sync {
    /// `container` restricts the usage to that container (ContainerResource metrics).
    fn resource_metric<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
        resource: &'a str,
        container: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(PodMetrics, i64), String>>;
}

/// The resource metrics API of the cluster (metrics-server's), read with the
/// controller's client.
pub struct ResourceMetricsApi {
    pub client: kube::Client,
}

/// client-go's text for a 404 without a Status body, as a cluster without
/// metrics.k8s.io answers.
const NOT_SERVED: &str = "the server could not find the requested resource (get pods.metrics.k8s.io)";

impl MetricsSource for ResourceMetricsApi {
    fn resource_metric<'a>(
        &'a self,
        namespace: &'a str,
        selector: &'a str,
        resource: &'a str,
        container: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(PodMetrics, i64), String>> {
        Box::pin(async move {
            let url = format!("/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods");
            let params = kube::api::ListParams::default().labels(selector);
            let request = kube::core::Request::new(url).list(&params).map_err(|e| e.to_string())?;
            let list: Value = self.client.request(request).await.map_err(|e| {
                let why = match e {
                    kube::Error::Api(s) if s.code == 404 => NOT_SERVED.to_string(),
                    kube::Error::Api(s) => s.message,
                    other => other.to_string(),
                };
                format!("unable to fetch metrics from resource metrics API: {why}")
            })?;
            parse_pod_metrics(&list, resource, container)
        })
    }
}

fn timestamp_ms(v: &Value) -> i64 {
    v.as_str().and_then(|s| s.parse::<jiff::Timestamp>().ok()).map_or(0, |t| t.as_millisecond())
}

fn duration_ms(v: &Value) -> i64 {
    // metav1.Duration as Go prints it: "30s", "1m0s", "500ms".
    let s = v.as_str().unwrap_or("");
    s.parse::<jiff::SignedDuration>()
        .or_else(|_| format!("PT{}", s.to_uppercase()).parse())
        .map_or(0, |d| d.as_millis() as i64)
}

/// A PodMetricsList as upstream's getPodMetrics/getContainerMetrics read it: a pod whose
/// containers do not all report the resource is left out (it counts as missing).
pub fn parse_pod_metrics(list: &Value, resource: &str, container: Option<&str>) -> Result<(PodMetrics, i64), String> {
    let items = list.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
    if items.is_empty() {
        return Err("no metrics returned from resource metrics API".into());
    }
    let mut out = PodMetrics::new();
    for item in &items {
        let name = item.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("").to_string();
        let containers = item.get("containers").and_then(Value::as_array).cloned().unwrap_or_default();
        let usage =
            |c: &Value| c.pointer(&format!("/usage/{resource}")).and_then(Value::as_str).and_then(quantity::milli);
        let value = match container {
            Some(want) => containers.iter().find(|c| c["name"] == want).and_then(usage),
            None => containers.iter().map(usage).sum::<Option<i64>>(),
        };
        if let Some(value) = value {
            let metric = PodMetric {
                value,
                timestamp_ms: timestamp_ms(&item["timestamp"]),
                window_ms: duration_ms(&item["window"]),
            };
            out.insert(name, metric);
        }
    }
    let first = timestamp_ms(&items[0]["timestamp"]);
    Ok((out, first))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_metrics_lists_are_read_as_upstream() {
        let list = json!({"items": [
            {"metadata": {"name": "a"}, "timestamp": "2026-01-01T00:00:00Z", "window": "30s",
             "containers": [{"name": "app", "usage": {"cpu": "250m", "memory": "64Mi"}},
                            {"name": "sidecar", "usage": {"cpu": "50m", "memory": "1Mi"}}]},
            {"metadata": {"name": "b"}, "timestamp": "2026-01-01T00:00:00Z", "window": "1m0s",
             "containers": [{"name": "app", "usage": {"memory": "64Mi"}}]},
        ]});
        let (cpu, ts) = parse_pod_metrics(&list, "cpu", None).unwrap();
        assert_eq!(cpu.len(), 1, "b reports no cpu: missing");
        assert_eq!(cpu["a"], PodMetric { value: 300, timestamp_ms: ts, window_ms: 30_000 });
        let (app, _) = parse_pod_metrics(&list, "memory", Some("app")).unwrap();
        assert_eq!(app["b"].value, 64 * 1024 * 1024 * 1000);
        assert_eq!(app["b"].window_ms, 60_000);
        assert_eq!(
            parse_pod_metrics(&json!({"items": []}), "cpu", None).unwrap_err(),
            "no metrics returned from resource metrics API"
        );
    }
}
