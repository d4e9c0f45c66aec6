use thiserror::Error;

/// Why a reconcile failed; it is retried with back-off.
#[derive(Debug, Error)]
pub enum Error {
    #[error("API request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("{0}")]
    Other(String),
}
