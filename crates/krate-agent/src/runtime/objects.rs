//! The API objects a pod's env and volumes read, fetched as the node: one GET per
//! object (the Node authorizer lets a node read only the config maps, secrets and
//! claims of pods bound to it, and never list them).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim, Secret};
use kube::Api;

/// A fetched object: Ok(None) when it does not exist; Err with the message when the
/// API could not be asked.
pub type Fetched<T> = Result<Option<T>, String>;

/// upstream's NotFound message for the kubelet's managers (`configmap "x" not found`).
pub fn not_found(kind: &str, name: &str) -> String {
    format!("{kind} {name:?} not found")
}

async fn get<K>(api: Api<K>, name: &str) -> Fetched<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(found) => Ok(found),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => Err(e.to_string()),
    }
}

pub async fn config_map(client: &kube::Client, namespace: &str, name: &str) -> Fetched<ConfigMap> {
    get(Api::namespaced(client.clone(), namespace), name).await
}

pub async fn secret(client: &kube::Client, namespace: &str, name: &str) -> Fetched<Secret> {
    get(Api::namespaced(client.clone(), namespace), name).await
}

pub async fn claim(client: &kube::Client, namespace: &str, name: &str) -> Fetched<PersistentVolumeClaim> {
    get(Api::namespaced(client.clone(), namespace), name).await
}

pub async fn volume(client: &kube::Client, name: &str) -> Fetched<PersistentVolume> {
    get(Api::all(client.clone()), name).await
}

/// Config maps and secrets of one namespace, each fetched once: filled (async) before
/// the pure code that reads them runs.
#[derive(Default)]
pub struct ObjectCache {
    config_maps: HashMap<String, Fetched<ConfigMap>>,
    secrets: HashMap<String, Fetched<Secret>>,
}

impl ObjectCache {
    pub async fn fetch_config_map(&mut self, client: &kube::Client, namespace: &str, name: &str) {
        if !self.config_maps.contains_key(name) {
            let fetched = config_map(client, namespace, name).await;
            self.config_maps.insert(name.to_string(), fetched);
        }
    }

    pub async fn fetch_secret(&mut self, client: &kube::Client, namespace: &str, name: &str) {
        if !self.secrets.contains_key(name) {
            let fetched = secret(client, namespace, name).await;
            self.secrets.insert(name.to_string(), fetched);
        }
    }

    #[cfg(test)]
    pub fn insert_config_map(&mut self, name: &str, fetched: Fetched<ConfigMap>) {
        self.config_maps.insert(name.to_string(), fetched);
    }

    #[cfg(test)]
    pub fn insert_secret(&mut self, name: &str, fetched: Fetched<Secret>) {
        self.secrets.insert(name.to_string(), fetched);
    }

    /// A fetched config map (one never fetched reads as an error).
    pub fn config_map(&self, name: &str) -> Fetched<&ConfigMap> {
        match self.config_maps.get(name) {
            Some(Ok(found)) => Ok(found.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("configmap {name:?} was not fetched")),
        }
    }

    pub fn secret(&self, name: &str) -> Fetched<&Secret> {
        match self.secrets.get(name) {
            Some(Ok(found)) => Ok(found.as_ref()),
            Some(Err(e)) => Err(e.clone()),
            None => Err(format!("secret {name:?} was not fetched")),
        }
    }
}
