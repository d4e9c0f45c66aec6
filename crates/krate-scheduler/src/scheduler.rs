//! The scheduling loop: one task owns the cache and the queue, takes informer changes
//! between cycles, schedules one pod per cycle, and hands bindings, status writes and
//! events to concurrent workers so the next cycle starts at once (the pod is assumed on
//! its node until the informer confirms the binding).

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use krate_client::Informers;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::{Semaphore, mpsc};
use tokio::time::Instant;

use crate::cache::Cache;
use crate::framework::{Algorithm, Diagnosis, Prepared, Profile};
use crate::metrics;
use crate::node_info::PodInfo;
use crate::queue::{ClusterEvent, Queue};
use crate::selectors::Selector;
use crate::workloads::Workloads;
use crate::writer::{Writer, WriterRequest};
use crate::{Error, Options, preemption};

enum Input {
    Node(Arc<Node>),
    Pod(Arc<Pod>),
    /// A binding failed: forget the assumption and retry.
    BindFailed(Arc<Pod>, String),
}

pub(crate) struct Scheduler {
    profiles: HashMap<String, Profile>,
    cache: Cache,
    queue: Queue,
    algorithm: Algorithm,
    pod_store: Store<Pod>,
    node_store: Store<Node>,
    namespaces: Store<Namespace>,
    budgets: Store<PodDisruptionBudget>,
    workloads: Workloads,
    writer: Writer,
    bind_slots: Arc<Semaphore>,
    inputs_tx: mpsc::UnboundedSender<Input>,
}

pub async fn run(client: kube::Client, options: Options) -> Result<(), Error> {
    let profiles = options.load_profiles().await?;
    let informers = Informers::new(client.clone());
    let nodes = informers.get::<Node>();
    // Finished pods hold no resources; upstream's scheduler does not watch them.
    let pods =
        informers.get_with::<Pod>(watcher::Config::default().fields("status.phase!=Succeeded,status.phase!=Failed"));
    let namespaces = informers.get::<Namespace>();
    let budgets = informers.get::<PodDisruptionBudget>();
    let (inputs_tx, inputs_rx) = mpsc::unbounded_channel();
    let mut inputs: SelectAll<BoxStream<'static, Input>> = SelectAll::new();
    inputs.push(nodes.subscribe().map(Input::Node).boxed());
    inputs.push(pods.subscribe().map(Input::Pod).boxed());
    inputs.push(tokio_stream::wrappers::UnboundedReceiverStream::new(inputs_rx).boxed());
    nodes.ready().await;
    pods.ready().await;
    tracing::info!(profiles = ?profiles.iter().map(|p| &p.scheduler_name).collect::<Vec<_>>(), "scheduler started");
    let mut scheduler = Scheduler {
        writer: Writer::start(client.clone(), &profiles),
        profiles: profiles.into_iter().map(|p| (p.scheduler_name.clone(), p)).collect(),
        cache: Cache::default(),
        queue: Queue::default(),
        algorithm: Algorithm::default(),
        pod_store: pods.store(),
        node_store: nodes.store(),
        namespaces: namespaces.store(),
        budgets: budgets.store(),
        workloads: Workloads::new(&informers),
        bind_slots: Arc::new(Semaphore::new(options.bind_concurrency.max(1))),
        inputs_tx,
    };
    let client = client.clone();
    let mut cycles: u32 = 0;
    let mut last_flush = Instant::now();
    loop {
        // Take every change already delivered before deciding anything.
        while let Some(Some(input)) = inputs.next().now_or_never() {
            scheduler.take(input);
        }
        let now = Instant::now();
        scheduler.queue.flush_backoff(now);
        if now.duration_since(last_flush).as_secs() >= 30 {
            scheduler.queue.flush_unschedulable(now);
            last_flush = now;
        }
        if scheduler.schedule_one(&client) {
            cycles = cycles.wrapping_add(1);
            // Let the workers (bindings, informers) run now and then.
            if cycles.is_multiple_of(64) {
                tokio::task::yield_now().await;
            }
            continue;
        }
        metrics::PENDING.set(scheduler.queue.len() as i64);
        let wake = scheduler.queue.next_backoff().unwrap_or(now + std::time::Duration::from_secs(30));
        tokio::select! {
            input = inputs.next() => match input {
                Some(input) => scheduler.take(input),
                None => return Err(Error::InformersStopped),
            },
            _ = tokio::time::sleep_until(wake) => {}
        }
    }
}

fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
}

fn scheduler_name(pod: &Pod) -> &str {
    pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()).unwrap_or("default-scheduler")
}

impl Scheduler {
    fn take(&mut self, input: Input) {
        let now = Instant::now();
        match input {
            Input::Node(node) => {
                let name = node.metadata.name.clone().unwrap_or_default();
                match self.node_store.get(&ObjectRef::new(&name)) {
                    Some(current) => self.cache.set_node(current),
                    None => self.cache.remove_node(&name),
                }
                self.queue.on_event(ClusterEvent::NodeChanged, now);
            }
            Input::Pod(pod) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let current = self.pod_store.get(&ObjectRef::from_obj(pod.as_ref()));
                let current = current.filter(|c| c.metadata.uid.as_deref() == Some(uid.as_str()));
                match current {
                    None => {
                        let was_counted = self.cache.contains_pod(&uid);
                        self.cache.remove_pod(&uid);
                        self.cache.unnominate(&uid);
                        self.queue.delete(&uid);
                        if was_counted {
                            self.queue.on_event(ClusterEvent::PodDeleted, now);
                        }
                    }
                    Some(current) if node_name(&current).is_some() => {
                        let new = !self.cache.contains_pod(&uid) || self.cache.is_assumed(&uid);
                        self.queue.delete(&uid);
                        self.cache.unnominate(&uid);
                        self.cache.update_bound_pod(current);
                        if new {
                            self.queue.on_event(ClusterEvent::PodAssigned, now);
                        }
                    }
                    Some(current) => {
                        let ours = self.profiles.contains_key(scheduler_name(&current));
                        if !ours || current.metadata.deletion_timestamp.is_some() {
                            self.queue.delete(&uid);
                            self.cache.unnominate(&uid);
                        } else if !self.cache.is_assumed(&uid) {
                            let nominated = current.status.as_ref().and_then(|s| s.nominated_node_name.as_deref());
                            self.cache.nominate(Arc::new(PodInfo::new(current.clone())), nominated);
                            let newly_gated = self.queue.place(&uid).is_none() && gated(&current);
                            self.queue.add_or_update(current.clone(), now);
                            if newly_gated {
                                self.writer.send(WriterRequest::Gated(current));
                            }
                        }
                    }
                }
            }
            Input::BindFailed(pod, error) => {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                if self.cache.is_assumed(&uid) {
                    self.cache.remove_pod(&uid);
                    self.queue.on_event(ClusterEvent::PodDeleted, now);
                }
                if let Some(current) = self.pod_store.get(&ObjectRef::from_obj(pod.as_ref()))
                    && node_name(&current).is_none()
                    && current.metadata.uid == pod.metadata.uid
                {
                    tracing::info!(pod = %pod_key(&pod), %error, "binding failed; retrying");
                    self.queue.error(current, now);
                }
            }
        }
    }

    /// Runs one scheduling cycle if a pod is waiting; false when none is.
    fn schedule_one(&mut self, client: &kube::Client) -> bool {
        let Some(queued) = self.queue.pop() else { return false };
        let (pod, enqueued, attempts) = (queued.pod.clone(), queued.enqueued, queued.attempts);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(profile) = self.profiles.get(scheduler_name(&pod)) else {
            self.queue.delete(&uid);
            return true;
        };
        let started = Instant::now();
        let info = Arc::new(PodInfo::new(pod.clone()));
        let namespaces = self.namespaces.clone();
        let lookup = move |s: &Selector| -> Vec<String> {
            namespaces
                .state()
                .iter()
                .filter(|ns| s.matches(ns.metadata.labels.as_ref()))
                .filter_map(|ns| ns.metadata.name.clone())
                .collect()
        };
        // Default spreading needs the pod's workloads only when it has no constraints.
        let own_spread = pod.spec.as_ref().and_then(|s| s.topology_spread_constraints.as_ref());
        let default_spread = (own_spread.is_none_or(|c| c.is_empty())
            && !profile.spread_defaults.constraints.is_empty())
        .then(|| self.workloads.default_spread_selector(&pod));
        let prepared = Prepared::new(profile, info.clone(), &self.cache, &lookup, default_spread.as_ref());
        match self.algorithm.schedule(profile, &prepared, &self.cache) {
            Ok(node) => {
                metrics::observe_attempt(&profile.scheduler_name, "scheduled", started);
                self.queue.done(&uid);
                self.cache.unnominate(&uid);
                self.cache.add_pod(info, &node, true);
                self.bind(client, pod, node, profile.scheduler_name.clone(), enqueued, attempts);
            }
            Err(mut diagnosis) => {
                metrics::observe_attempt(&profile.scheduler_name, "unschedulable", started);
                let mut nominated = None;
                if profile.preemption {
                    let budgets: Vec<preemption::Budget> =
                        self.budgets.state().iter().map(|b| preemption::Budget::new(b)).collect();
                    let outcome = preemption::preempt(profile, &prepared, &self.cache, &diagnosis, &budgets, &lookup);
                    diagnosis.post_filter_message = Some(outcome.message(diagnosis.num_nodes));
                    if let Some(candidate) = outcome.candidate {
                        for victim in &candidate.victims {
                            self.writer.send(WriterRequest::Preempt {
                                victim: victim.clone(),
                                preemptor: pod.clone(),
                                node: candidate.node.clone(),
                                scheduler: profile.scheduler_name.clone(),
                            });
                        }
                        self.cache.nominate(info.clone(), Some(&candidate.node));
                        nominated = Some(candidate.node);
                    }
                }
                let pods_only = pods_only(&diagnosis);
                self.queue.unschedulable(&uid, pods_only, Instant::now());
                self.writer.send(WriterRequest::Unschedulable {
                    pod,
                    message: diagnosis.message(),
                    nominated,
                    scheduler: profile.scheduler_name.clone(),
                });
            }
        }
        true
    }

    fn bind(
        &self,
        client: &kube::Client,
        pod: Arc<Pod>,
        node: String,
        scheduler: String,
        enqueued: Instant,
        attempts: u32,
    ) {
        let (client, slots, inputs, writer) =
            (client.clone(), self.bind_slots.clone(), self.inputs_tx.clone(), self.writer.clone());
        tokio::spawn(async move {
            let _slot = slots.acquire_owned().await;
            match crate::writer::bind(&client, &pod, &node).await {
                Ok(()) => {
                    metrics::observe_bound(&scheduler, enqueued, attempts);
                    writer.send(WriterRequest::Scheduled { pod, node, scheduler });
                }
                Err(error) => {
                    let _ = inputs.send(Input::BindFailed(pod, error.to_string()));
                }
            }
        });
    }
}

fn gated(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
}

pub fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

/// Whether every node failed only for other pods (affinity, spread), so that only pod
/// changes can help.
fn pods_only(d: &Diagnosis) -> bool {
    use crate::plugins::{inter_pod_affinity as ipa, topology_spread as ts};
    !d.failures.is_empty()
        && d.failures.iter().all(|(_, f)| {
            f.reasons.iter().all(|r| {
                [ipa::REASON_AFFINITY, ipa::REASON_ANTI_AFFINITY, ipa::REASON_EXISTING_ANTI_AFFINITY, ts::REASON]
                    .contains(&r.as_ref())
            })
        })
}
