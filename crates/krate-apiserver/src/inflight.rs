//! Upstream's in-flight limits (--max-requests-inflight, --max-mutating-requests-inflight):
//! past them a request is refused at once with 429 and Retry-After, so an overloaded
//! server sheds load instead of queueing without bound. Watches are long-running and
//! not counted.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use krate_api::ApiError;

pub struct InflightLimits {
    reads: Option<Arc<Semaphore>>,
    writes: Option<Arc<Semaphore>>,
}

/// Held while a request runs; frees its place when dropped.
pub struct Permit(#[allow(dead_code)] Option<OwnedSemaphorePermit>);

impl Permit {
    /// For requests outside the limits (non-resource paths).
    pub fn unlimited() -> Self {
        Permit(None)
    }
}

fn limit(n: usize) -> Option<Arc<Semaphore>> {
    (n > 0).then(|| Arc::new(Semaphore::new(n)))
}

impl InflightLimits {
    /// 0 means unlimited, as upstream.
    pub fn new(max_reads: usize, max_writes: usize) -> Self {
        InflightLimits { reads: limit(max_reads), writes: limit(max_writes) }
    }

    /// A permit for a request with this verb, or 429.
    pub fn admit(&self, verb: &str) -> Result<Permit, ApiError> {
        let pool = match verb {
            "watch" => return Ok(Permit(None)),
            "create" | "update" | "patch" | "delete" | "deletecollection" => &self.writes,
            _ => &self.reads,
        };
        match pool {
            None => Ok(Permit(None)),
            Some(sem) => sem
                .clone()
                .try_acquire_owned()
                .map(|p| Permit(Some(p)))
                .map_err(|_| ApiError::too_many_requests("Too many requests, please try again later.", 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_the_limit_and_recovers() {
        let l = InflightLimits::new(2, 1);
        let a = l.admit("get").unwrap();
        let _b = l.admit("list").unwrap();
        let e = l.admit("get").err().expect("third read refused");
        assert_eq!((e.code, e.reason, e.retry_after), (429, "TooManyRequests", Some(1)));
        let _w = l.admit("create").unwrap();
        assert!(l.admit("patch").is_err(), "writes have their own limit");
        assert!(l.admit("watch").is_ok(), "watches are not counted");
        drop(a);
        assert!(l.admit("get").is_ok(), "a finished request frees its place");
        let unlimited = InflightLimits::new(0, 0);
        let _many: Vec<_> = (0..1000).map(|_| unlimited.admit("get").unwrap()).collect();
    }
}
