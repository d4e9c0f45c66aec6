//! Upstream's storage-transformation, envelope and reload metrics, in the process-wide
//! registry `/metrics` serves.

use std::sync::LazyLock;
use std::time::Instant;

use prometheus::{
    CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, register_counter_vec,
    register_histogram, register_histogram_vec, register_int_counter, register_int_counter_vec, register_int_gauge_vec,
};
use sha2::{Digest, Sha256};

const LATENCY_BUCKETS: &[f64] = &[
    5e-6, 1e-5, 2e-5, 4e-5, 8e-5, 1.6e-4, 3.2e-4, 6.4e-4, 1.28e-3, 2.56e-3, 5.12e-3, 1.024e-2, 2.048e-2, 4.096e-2,
    8.192e-2, 0.16384, 0.32768, 0.65536, 1.31072, 2.62144, 5.24288,
];

pub static TRANSFORMATION_DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "apiserver_storage_transformation_duration_seconds",
        "Latencies in seconds of value transformation operations.",
        &["transformation_type", "transformer_prefix"],
        LATENCY_BUCKETS.to_vec()
    )
    .expect("metric registers once")
});

pub static TRANSFORMATION_OPERATIONS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_storage_transformation_operations_total",
        "Total number of transformations. Successful transformation will have a status 'OK' and a varied status string when the transformation fails.",
        &["transformation_type", "transformer_prefix", "status"]
    )
    .expect("metric registers once")
});

pub static CACHE_MISSES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "apiserver_storage_envelope_transformation_cache_misses_total",
        "Total number of cache misses while accessing key decryption key(KEK)."
    )
    .expect("metric registers once")
});

pub static DATA_KEY_GENERATION_DURATION: LazyLock<Histogram> = LazyLock::new(|| {
    register_histogram!(
        "apiserver_storage_data_key_generation_duration_seconds",
        "Latencies in seconds of data encryption key(DEK) generation operations.",
        LATENCY_BUCKETS.to_vec()
    )
    .expect("metric registers once")
});

pub static DATA_KEY_GENERATION_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    register_int_counter!(
        "apiserver_storage_data_key_generation_failures_total",
        "Total number of failed data encryption key(DEK) generation operations."
    )
    .expect("metric registers once")
});

pub static DEK_SOURCE_CACHE_SIZE: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    register_int_gauge_vec!(
        "apiserver_envelope_encryption_dek_source_cache_size",
        "Number of records in data encryption key (DEK) source cache. On a restart, this value is an approximation of the number of decrypt RPC calls the server will make to the KMS plugin.",
        &["provider_name"]
    )
    .expect("metric registers once")
});

pub static KMS_OPERATIONS_LATENCY: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "apiserver_envelope_encryption_kms_operations_latency_seconds",
        "KMS operation duration with gRPC error code status total.",
        &["provider_name", "method_name", "grpc_status_code"],
        prometheus::exponential_buckets(0.0001, 2.0, 15).expect("valid buckets")
    )
    .expect("metric registers once")
});

pub static INVALID_KEY_ID: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "apiserver_envelope_encryption_invalid_key_id_from_status_total",
        "Number of times an invalid keyID is returned by the Status RPC call split by error.",
        &["provider_name", "error"]
    )
    .expect("metric registers once")
});

pub static RELOADS: LazyLock<CounterVec> = LazyLock::new(|| {
    register_counter_vec!(
        "apiserver_encryption_config_controller_automatic_reloads_total",
        "Total number of reload successes and failures of encryption configuration split by apiserver identity.",
        &["status", "apiserver_id_hash"]
    )
    .expect("metric registers once")
});

pub static RELOAD_LAST_TIMESTAMP: LazyLock<prometheus::GaugeVec> = LazyLock::new(|| {
    prometheus::register_gauge_vec!(
        "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds",
        "Timestamp of the last successful or failed automatic reload of encryption configuration split by apiserver identity.",
        &["status", "apiserver_id_hash"]
    )
    .expect("metric registers once")
});

pub(crate) fn record_transformation(kind: &str, prefix: &str, start: Instant, ok: bool) {
    TRANSFORMATION_DURATION.with_label_values(&[kind, prefix]).observe(start.elapsed().as_secs_f64());
    TRANSFORMATION_OPERATIONS.with_label_values(&[kind, prefix, if ok { "OK" } else { "Unknown" }]).inc();
}

pub(crate) fn record_key_generation(start: Instant, ok: bool) {
    DATA_KEY_GENERATION_DURATION.observe(start.elapsed().as_secs_f64());
    if !ok {
        DATA_KEY_GENERATION_FAILURES.inc();
    }
}

/// Key IDs are logged and labelled only as hashes, as upstream.
pub fn hash_key_id(key_id: &str) -> String {
    let digest = Sha256::digest(key_id.as_bytes());
    format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
}
