//! The API server's Prometheus metrics (upstream's names where they exist).

use std::sync::LazyLock;

use prometheus::{
    HistogramVec, IntCounterVec, IntGaugeVec, register_histogram_vec, register_int_counter_vec, register_int_gauge_vec,
};

pub static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_request_total",
        "Requests by verb, group, version, resource, subresource and HTTP code.",
        &["verb", "group", "version", "resource", "subresource", "code"]
    )
    .expect("metric registers once")
});

pub static LATENCY: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "apiserver_request_duration_seconds",
        "Request latency by verb, group, version, resource and subresource (watches: until the stream starts).",
        &["verb", "group", "version", "resource", "subresource"],
        vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]
    )
    .expect("metric registers once")
});

pub static WATCHES: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "apiserver_longrunning_requests",
        "Open watches by group, version and resource.",
        &["verb", "group", "version", "resource"]
    )
    .expect("metric registers once")
});

pub fn render() -> String {
    use prometheus::Encoder;
    let mut buf = Vec::new();
    let _ = prometheus::TextEncoder::new().encode(&prometheus::gather(), &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}
