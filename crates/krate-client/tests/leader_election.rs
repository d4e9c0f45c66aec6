//! Leader election through the real API server: one of two candidates leads, the other
//! waits; when the leader dies the other takes over after the lease runs out, and the
//! two never lead at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use krate_client::leader::{self, Config};
use krate_testkit::{TestCluster, eventually};
use kube::api::Api;

fn config(identity: &str) -> Config {
    Config {
        identity: identity.into(),
        lease_duration: Duration::from_secs(3),
        renew_deadline: Duration::from_secs(2),
        retry_period: Duration::from_millis(300),
        ..Config::new("test-controller")
    }
}

/// Counts how many candidates are leading now, and the most ever at once.
#[derive(Default)]
struct Leading {
    now: AtomicUsize,
    most: AtomicUsize,
}

fn candidate(client: kube::Client, identity: &str, leading: Arc<Leading>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(leader::run(client, config(identity), move || {
        let leading = leading.clone();
        async move {
            let now = leading.now.fetch_add(1, Ordering::SeqCst) + 1;
            leading.most.fetch_max(now, Ordering::SeqCst);
            // Counted down when the led work is stopped (aborted).
            struct Stop(Arc<Leading>);
            impl Drop for Stop {
                fn drop(&mut self) {
                    self.0.now.fetch_sub(1, Ordering::SeqCst);
                }
            }
            let _stop = Stop(leading);
            futures::future::pending::<()>().await
        }
    }))
}

#[tokio::test]
async fn one_leads_and_the_other_takes_over_when_it_dies() {
    let cluster = TestCluster::start().await;
    let client = cluster.admin().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    let leading = Arc::new(Leading::default());
    let first = candidate(client.clone(), "first", leading.clone());
    let holder =
        |leases: Api<Lease>| async move { leases.get_opt("test-controller").await.unwrap()?.spec?.holder_identity };
    eventually("first leads", Duration::from_secs(10), || async {
        (holder(leases.clone()).await.as_deref() == Some("first")).then_some(())
    })
    .await;
    let second = candidate(client.clone(), "second", leading.clone());
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(holder(leases.clone()).await.as_deref(), Some("first"), "a renewed lease is not taken");

    first.abort();
    let _ = first.await;
    let died = std::time::Instant::now();
    eventually("second takes over", Duration::from_secs(15), || async {
        (holder(leases.clone()).await.as_deref() == Some("second")).then_some(())
    })
    .await;
    assert!(died.elapsed() < Duration::from_secs(10), "took over in {:?}", died.elapsed());
    let lease = leases.get("test-controller").await.unwrap().spec.unwrap();
    assert_eq!(lease.lease_transitions, Some(1));
    eventually("second's work runs", Duration::from_secs(5), || async {
        (leading.now.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    assert_eq!(leading.most.load(Ordering::SeqCst), 1, "never two leaders at once");
    second.abort();
}
