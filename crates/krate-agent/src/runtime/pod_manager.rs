//! The node's pods: a watch of the pods bound to this node (shared informer), one
//! worker per pod, and a relist of the runtime (the kubelet's PLEG) that wakes a
//! pod's worker when its containers change state, since containerd 1.6 has no
//! container events over CRI. Sandboxes of pods the API no longer has are removed.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

use super::cri_config::LABEL_POD_UID;
use super::pod_worker::{self, Shared, WorkerHandle};
use super::volumes;

/// How often the runtime is relisted: the delay before an exited container shows.
const RELIST_PERIOD: Duration = Duration::from_millis(500);

pub async fn run(shared: Arc<Shared>) {
    let node_name = shared.node_name.clone();
    let config = watcher::Config::default().fields(&format!("spec.nodeName={node_name}"));
    let informer = shared.informers.get_with::<Pod>(config);
    let store = informer.store();
    let mut events = informer.subscribe().boxed();
    let mut workers = Workers::default();
    let mut relist = tokio::time::interval(RELIST_PERIOD);
    relist.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_seen: HashMap<String, String> = HashMap::new();
    let mut synced = false;
    let ready = informer.ready();
    tokio::pin!(ready);
    tracing::info!(node = node_name, "pod worker watching this node's pods");
    loop {
        tokio::select! {
            Some(pod) = events.next() => {
                let Some(uid) = pod.metadata.uid.clone() else { continue };
                let present = store.get(&ObjectRef::from_obj(&*pod)).is_some_and(|p| p.metadata.uid.as_deref() == Some(&uid));
                match workers.0.get(&uid) {
                    Some(worker) => {
                        worker.pod.send_replace(present.then_some(pod));
                    }
                    None if present => {
                        workers.0.insert(uid, pod_worker::spawn(shared.clone(), pod));
                    }
                    None => {}
                }
            }
            _ = &mut ready, if !synced => {
                synced = true;
                // Look at every pod in the runtime again, now that unknown means gone.
                last_seen.clear();
                let known: HashSet<String> = store.state().iter().filter_map(|p| p.metadata.uid.clone()).collect();
                remove_orphaned_volumes(&shared, &known).await;
            }
            _ = relist.tick() => {
                workers.0.retain(|_, w| !w.task.is_finished());
                match relist_runtime(&shared).await {
                    Ok(now) => {
                        for (uid, signature) in &now {
                            if last_seen.get(uid) != Some(signature) {
                                match workers.0.get(uid) {
                                    Some(worker) => worker.poke.notify_one(),
                                    // Only once the first list is in: before it, every pod looks unknown.
                                    None if synced => remove_orphan(&shared, uid).await,
                                    None => {}
                                }
                            }
                        }
                        last_seen = now;
                    }
                    Err(error) => tracing::warn!(%error, "runtime relist failed"),
                }
            }
        }
    }
}

/// The workers by pod uid; they stop with the manager (when `run` is dropped).
#[derive(Default)]
struct Workers(HashMap<String, WorkerHandle>);

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in self.0.values() {
            worker.task.abort();
        }
    }
}

/// Per pod uid, a signature of its sandboxes' and containers' states.
async fn relist_runtime(shared: &Shared) -> Result<HashMap<String, String>, tonic::Status> {
    let mut runtime = shared.cri.runtime.clone();
    let sandboxes = runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: None }).await?.into_inner().items;
    let containers =
        runtime.list_containers(cri::ListContainersRequest { filter: None }).await?.into_inner().containers;
    let mut parts: HashMap<String, Vec<String>> = HashMap::new();
    for s in sandboxes {
        if let Some(uid) = s.labels.get(LABEL_POD_UID) {
            parts.entry(uid.clone()).or_default().push(format!("s{}:{}", s.id, s.state));
        }
    }
    for c in containers {
        if let Some(uid) = c.labels.get(LABEL_POD_UID) {
            parts.entry(uid.clone()).or_default().push(format!("c{}:{}", c.id, c.state));
        }
    }
    Ok(parts
        .into_iter()
        .map(|(uid, mut p)| {
            p.sort();
            (uid, p.join(","))
        })
        .collect())
}

/// Removes the volume directories of pods this node no longer has (deleted while the
/// agent was down).
async fn remove_orphaned_volumes(shared: &Shared, known: &HashSet<String>) {
    let Ok(mut entries) = tokio::fs::read_dir(&shared.volumes.pods_dir).await else { return };
    while let Ok(Some(entry)) = entries.next_entry().await {
        let uid = entry.file_name().to_string_lossy().into_owned();
        if !known.contains(&uid) {
            tracing::info!(uid, "removing the volumes of a pod no longer on this node");
            volumes::remove_pod_dir(&shared.volumes.pods_dir, &uid).await;
        }
    }
}

/// Removes the sandboxes (and so containers) of a pod this node no longer runs,
/// such as one deleted while the agent was down.
async fn remove_orphan(shared: &Shared, uid: &str) {
    let filter = cri::PodSandboxFilter {
        label_selector: HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())]),
        ..Default::default()
    };
    let mut runtime = shared.cri.runtime.clone();
    let Ok(reply) = runtime.list_pod_sandbox(cri::ListPodSandboxRequest { filter: Some(filter) }).await else { return };
    for s in reply.into_inner().items {
        tracing::info!(uid, sandbox = s.id, "removing the sandbox of a pod no longer on this node");
        let _ = runtime.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id: s.id.clone() }).await;
        let _ = runtime.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id: s.id }).await;
    }
    volumes::remove_pod_dir(&shared.volumes.pods_dir, uid).await;
}
