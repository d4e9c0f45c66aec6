//! Crash safety against etcd: while writers are under load, the etcd member is killed
//! with SIGKILL at random moments and restarted; after each restart every acknowledged
//! write is present and revisions only move forward.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use krate_store::etcd::EtcdStore;
use krate_store::testsuite::etcd_process::EtcdCluster;
use krate_store::{Store, StoreError};
use parking_lot::Mutex;
use rand::Rng;

const CYCLES: usize = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_etcd_sigkill() {
    let mut cluster = EtcdCluster::start(1).await;
    let mut last_revision = 0;
    let mut total = 0;
    for cycle in 0..CYCLES {
        let store = Arc::new(EtcdStore::connect(&cluster.endpoints()).await.expect("connect"));
        let acked: Arc<Mutex<Vec<(i64, String, usize)>>> = Arc::default();
        let mut writers = Vec::new();
        for w in 0..4 {
            let (store, acked) = (store.clone(), acked.clone());
            writers.push(tokio::spawn(async move {
                for i in 0.. {
                    let key = format!("/crash/{cycle}/{w}/{i}");
                    let len = rand::rng().random_range(10..5_000);
                    match store.create(&key, Bytes::from(vec![b'x'; len]), 0).await {
                        Ok(rev) => acked.lock().push((rev, key, len)),
                        // The member is gone; what was not acknowledged carries no promise.
                        Err(_) => break,
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..600))).await;
        cluster.kill(0);
        for w in writers {
            tokio::time::timeout(Duration::from_secs(60), w).await.expect("writers stop once etcd is gone").unwrap();
        }
        drop(store);
        cluster.restart(0).await;

        let store = EtcdStore::connect(&cluster.endpoints()).await.expect("connect after restart");
        let revision = store.current_revision().await.unwrap();
        assert!(revision >= last_revision, "revision went backwards: {revision} < {last_revision}");
        let acked = std::mem::take(&mut *acked.lock());
        for (rev, key, len) in &acked {
            let kv = match store.get(key, 0).await {
                Ok((Some(kv), _)) => kv,
                Ok((None, _)) => panic!("acknowledged write {key} at {rev} lost after SIGKILL"),
                Err(StoreError::Backend(e)) => panic!("reading {key}: {e}"),
                Err(e) => panic!("reading {key}: {e}"),
            };
            assert_eq!((kv.mod_revision, kv.value.len()), (*rev, *len), "{key} is as acknowledged");
        }
        assert!(acked.iter().all(|(rev, ..)| *rev <= revision));
        last_revision = revision;
        total += acked.len();
    }
    assert!(total > CYCLES * 5, "the writers made real progress ({total} acks)");
}
