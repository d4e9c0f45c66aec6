//! The backend behaviour suite against the embedded SQLite backend.

use krate_store::DynStore;
use krate_store::sqlite::{SqliteConfig, SqliteStore};
use krate_store::testsuite::{Guard, dyn_store};

async fn sqlite_fixture() -> (DynStore, Guard) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = SqliteConfig::new(dir.path().join("state.db"));
    // A small event ring, so the suite also exercises catching up from disk.
    config.watch_ring_events = 64;
    let store = SqliteStore::open(config).await.expect("open sqlite store");
    (dyn_store(store), Box::new(dir))
}

krate_store::backend_suite!(sqlite_fixture());
