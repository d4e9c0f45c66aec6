//! Opening the configured store.

use std::sync::Arc;

use anyhow::Context;
use krate_store::DynStore;
use krate_store::etcd::EtcdStore;
use krate_store::sqlite::{SqliteConfig, SqliteStore};

use crate::cli::{ServerArgs, StorageKind};

pub async fn open(args: &ServerArgs) -> anyhow::Result<DynStore> {
    match args.storage {
        StorageKind::Sqlite => {
            let dir = args.data_dir.join("server").join("db");
            tokio::fs::create_dir_all(&dir).await.with_context(|| format!("creating {}", dir.display()))?;
            let store = SqliteStore::open(SqliteConfig::new(dir.join("state.db"))).await?;
            Ok(Arc::new(store))
        }
        StorageKind::Etcd => {
            anyhow::ensure!(!args.etcd_servers.is_empty(), "--storage etcd needs --etcd-servers URL[,URL…]");
            let store = EtcdStore::connect(&args.etcd_servers)
                .await
                .with_context(|| format!("connecting to etcd at {}", args.etcd_servers.join(",")))?;
            Ok(Arc::new(store))
        }
    }
}
