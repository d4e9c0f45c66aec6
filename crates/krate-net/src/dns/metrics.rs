//! The DNS server's Prometheus metrics, in the default registry (as the controllers'
//! are), named after CoreDNS's so that existing dashboards read them with a prefix swap.

use std::sync::LazyLock;

use hickory_proto::rr::RecordType;
use prometheus::{HistogramVec, IntCounterVec, register_histogram_vec, register_int_counter_vec};

/// Requests answered, by transport, query type and response code.
pub static REQUESTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_dns_requests_total",
        "DNS requests answered, by transport, query type and response code.",
        &["proto", "type", "rcode"]
    )
    .expect("metric registers once")
});

/// Time from a request's arrival to its answer, by where the answer came from.
pub static DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    // 25 µs to ~3.3 s: the index answers in microseconds, upstreams in milliseconds.
    let buckets = prometheus::exponential_buckets(0.000_025, 4.0, 9).expect("valid buckets");
    register_histogram_vec!(
        "krate_dns_request_duration_seconds",
        "Time to answer a DNS request, by source (cluster, forward).",
        &["source"],
        buckets
    )
    .expect("metric registers once")
});

/// Queries sent to upstream nameservers, by upstream and result.
pub static FORWARDS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "krate_dns_forward_requests_total",
        "Queries forwarded to upstream nameservers, by upstream and result (success, timeout, error).",
        &["to", "result"]
    )
    .expect("metric registers once")
});

/// The label for a query type: the common ones by name, the rest as "other" so that
/// odd clients cannot grow the series without bound.
pub fn type_label(record_type: Option<RecordType>) -> &'static str {
    match record_type {
        Some(RecordType::A) => "A",
        Some(RecordType::AAAA) => "AAAA",
        Some(RecordType::SRV) => "SRV",
        Some(RecordType::PTR) => "PTR",
        Some(RecordType::CNAME) => "CNAME",
        Some(RecordType::TXT) => "TXT",
        Some(RecordType::SOA) => "SOA",
        Some(RecordType::NS) => "NS",
        Some(RecordType::MX) => "MX",
        Some(RecordType::ANY) => "ANY",
        Some(RecordType::HTTPS) => "HTTPS",
        Some(_) => "other",
        None => "none",
    }
}

/// The label for a response code (the header's four bits, as CoreDNS names them).
pub fn rcode_label(rcode: u8) -> &'static str {
    match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => "other",
    }
}
