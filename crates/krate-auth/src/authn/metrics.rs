//! Authentication metrics, upstream's names: attempts and their latency by result.

use std::sync::{Arc, LazyLock};
use std::time::Instant;

use async_trait::async_trait;
use prometheus::{HistogramVec, IntCounterVec, register_histogram_vec, register_int_counter_vec};

use super::{Authenticated, Authenticator, AuthnError, Credentials};

pub static ATTEMPTS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    register_int_counter_vec!(
        "authentication_attempts",
        "Authentication attempts by result (success, failure; none: no credentials).",
        &["result"]
    )
    .expect("metric registers once")
});

pub static DURATION: LazyLock<HistogramVec> = LazyLock::new(|| {
    register_histogram_vec!(
        "authentication_duration_seconds",
        "Authentication latency by result.",
        &["result"],
        vec![0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0]
    )
    .expect("metric registers once")
});

/// Counts every authentication the wrapped authenticator makes.
pub struct Counted(pub Arc<dyn Authenticator>);

#[async_trait]
impl Authenticator for Counted {
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError> {
        let started = Instant::now();
        let answer = self.0.authenticate(creds).await;
        let result = match &answer {
            Ok(Some(_)) => "success",
            Ok(None) => "none",
            Err(_) => "failure",
        };
        ATTEMPTS.with_label_values(&[result]).inc();
        DURATION.with_label_values(&[result]).observe(started.elapsed().as_secs_f64());
        answer
    }
}

/// Service-account tokens accepted, by kind (upstream's counters).
pub static LEGACY_TOKENS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!(
        "serviceaccount_legacy_tokens_total",
        "Legacy (Secret-based) service-account tokens accepted."
    )
    .expect("metric registers once")
});

pub static VALID_TOKENS: LazyLock<prometheus::IntCounter> = LazyLock::new(|| {
    prometheus::register_int_counter!("serviceaccount_valid_tokens_total", "Bound service-account tokens accepted.")
        .expect("metric registers once")
});
