//! The backend behaviour suite against real etcd: a single member and a 3-member cluster.

use krate_store::DynStore;
use krate_store::etcd::EtcdStore;
use krate_store::testsuite::etcd_process::EtcdCluster;
use krate_store::testsuite::{Guard, dyn_store};

async fn etcd_fixture(members: usize) -> (DynStore, Guard) {
    let cluster = EtcdCluster::start(members).await;
    let store = EtcdStore::connect(&cluster.endpoints()).await.expect("connect to etcd");
    (dyn_store(store), Box::new(cluster))
}

mod single_member {
    use super::*;
    krate_store::backend_suite!(etcd_fixture(1));
}

mod three_members {
    use super::*;
    krate_store::backend_suite!(etcd_fixture(3));
}
