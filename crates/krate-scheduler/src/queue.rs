//! The scheduling queue (upstream's PriorityQueue): an active heap by priority then age,
//! a back-off heap for pods that failed recently, and a pool of unschedulable pods that
//! cluster events (a node added or changed, a pod deleted, a pod bound) move back.
//! Gated pods (spec.schedulingGates) wait in the pool until their gates are gone.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::time::Instant;

pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Unschedulable pods are retried at least this often even without events.
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Where {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped and being scheduled.
    InFlight,
}

/// Cluster events that may make pods schedulable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    NodeChanged,
    PodDeleted,
    /// A pod was bound: only pods rejected for pod (anti-)affinity or spread can gain.
    PodAssigned,
}

pub struct QueuedPod {
    pub pod: Arc<Pod>,
    pub attempts: u32,
    /// When it first entered the queue (for the e2e latency and the queue order).
    pub enqueued: Instant,
    place: Where,
    seq: u64,
    backoff_until: Instant,
    unschedulable_since: Instant,
    /// The pod was rejected only by plugins that look at other pods.
    pub rejected_by_pods_only: bool,
    popped_cycle: u64,
}

impl QueuedPod {
    fn priority(&self) -> i32 {
        self.pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
    }
}

#[derive(PartialEq, Eq)]
struct Entry {
    priority: i32,
    seq: u64,
    uid: String,
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.priority.cmp(&other.priority).then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Default)]
pub struct Queue {
    pods: HashMap<String, QueuedPod>,
    active: BinaryHeap<Entry>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    seq: u64,
    /// Bumped by every moving event; a pod whose cycle saw one retries after back-off.
    move_cycle: u64,
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn gated(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_some_and(|g| !g.is_empty())
}

/// Whether an update could change the scheduling outcome (status-only writes, such as
/// the scheduler's own condition, do not).
fn scheduling_relevant_change(old: &Pod, new: &Pod) -> bool {
    old.spec != new.spec
        || old.metadata.labels != new.metadata.labels
        || old.metadata.annotations != new.metadata.annotations
}

pub fn backoff_for(attempts: u32) -> Duration {
    let exp = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

impl Queue {
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn place(&self, uid: &str) -> Option<Where> {
        self.pods.get(uid).map(|p| p.place)
    }

    fn push_active(&mut self, uid: &str) {
        let Some(p) = self.pods.get_mut(uid) else { return };
        self.seq += 1;
        p.place = Where::Active;
        p.seq = self.seq;
        self.active.push(Entry { priority: p.priority(), seq: p.seq, uid: uid.to_string() });
    }

    fn push_backoff(&mut self, uid: &str) {
        let Some(p) = self.pods.get_mut(uid) else { return };
        self.seq += 1;
        p.place = Where::Backoff;
        p.seq = self.seq;
        self.backoff.push(Reverse((p.backoff_until, p.seq, uid.to_string())));
    }

    /// Back-off still running → back-off heap, else active.
    fn reactivate(&mut self, uid: &str, now: Instant) {
        let Some(p) = self.pods.get(uid) else { return };
        if p.backoff_until > now { self.push_backoff(uid) } else { self.push_active(uid) }
    }

    /// A pending pod was added or changed.
    pub fn add_or_update(&mut self, pod: Arc<Pod>, now: Instant) {
        let id = uid(&pod);
        match self.pods.get_mut(&id) {
            None => {
                let is_gated = gated(&pod);
                self.pods.insert(
                    id.clone(),
                    QueuedPod {
                        pod,
                        attempts: 0,
                        enqueued: now,
                        place: Where::Gated,
                        seq: 0,
                        backoff_until: now,
                        unschedulable_since: now,
                        rejected_by_pods_only: false,
                        popped_cycle: 0,
                    },
                );
                if !is_gated {
                    self.push_active(&id);
                }
            }
            Some(p) => {
                let relevant = scheduling_relevant_change(&p.pod, &pod);
                let was = p.place;
                p.pod = pod;
                match was {
                    Where::Gated if !gated(&p.pod) => self.push_active(&id),
                    Where::Unschedulable if relevant => self.reactivate(&id, now),
                    Where::Active if relevant => self.push_active(&id), // priority may have changed
                    _ => {}
                }
            }
        }
    }

    pub fn delete(&mut self, uid: &str) {
        // Heap entries of removed pods are skipped when they surface.
        self.pods.remove(uid);
    }

    /// Moves back-off pods whose time has come to the active heap.
    pub fn flush_backoff(&mut self, now: Instant) {
        while let Some(Reverse((until, seq, uid))) = self.backoff.peek().cloned() {
            if until > now {
                break;
            }
            self.backoff.pop();
            if self.pods.get(&uid).is_some_and(|p| p.place == Where::Backoff && p.seq == seq) {
                self.push_active(&uid);
            }
        }
    }

    /// Retries unschedulable pods left too long without an event.
    pub fn flush_unschedulable(&mut self, now: Instant) {
        let stale: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| {
                p.place == Where::Unschedulable && now.duration_since(p.unschedulable_since) >= MAX_IN_UNSCHEDULABLE
            })
            .map(|(k, _)| k.clone())
            .collect();
        for uid in stale {
            self.reactivate(&uid, now);
        }
    }

    /// The next pod to schedule, highest priority first, then oldest.
    pub fn pop(&mut self) -> Option<&QueuedPod> {
        while let Some(e) = self.active.pop() {
            let fresh = self.pods.get(&e.uid).is_some_and(|p| p.place == Where::Active && p.seq == e.seq);
            if fresh {
                let cycle = self.move_cycle;
                let p = self.pods.get_mut(&e.uid).expect("checked");
                p.place = Where::InFlight;
                p.attempts += 1;
                p.popped_cycle = cycle;
                return Some(p);
            }
        }
        None
    }

    /// The pod was scheduled (assumed): it leaves the queue.
    pub fn done(&mut self, uid: &str) {
        self.pods.remove(uid);
    }

    /// The pod fits nowhere now; it waits for an event (or back-off, if one came while
    /// it was being scheduled).
    pub fn unschedulable(&mut self, uid: &str, rejected_by_pods_only: bool, now: Instant) {
        let cycle = self.move_cycle;
        let Some(p) = self.pods.get_mut(uid) else { return };
        p.backoff_until = now + backoff_for(p.attempts);
        p.rejected_by_pods_only = rejected_by_pods_only;
        p.unschedulable_since = now;
        if p.popped_cycle < cycle {
            self.push_backoff(uid);
        } else {
            p.place = Where::Unschedulable;
        }
    }

    /// Scheduling or binding failed for another reason: retry after back-off.
    pub fn error(&mut self, pod: Arc<Pod>, now: Instant) {
        let id = uid(&pod);
        if !self.pods.contains_key(&id) {
            self.add_or_update(pod, now);
        }
        let Some(p) = self.pods.get_mut(&id) else { return };
        p.backoff_until = now + backoff_for(p.attempts.max(1));
        self.push_backoff(&id);
    }

    /// A cluster event: unschedulable pods it may help go back (after their back-off).
    pub fn on_event(&mut self, event: ClusterEvent, now: Instant) {
        self.move_cycle += 1;
        let moving: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, p)| p.place == Where::Unschedulable)
            .filter(|(_, p)| event != ClusterEvent::PodAssigned || p.rejected_by_pods_only)
            .map(|(k, _)| k.clone())
            .collect();
        for uid in moving {
            self.reactivate(&uid, now);
        }
    }

    /// When the next back-off ends.
    pub fn next_backoff(&self) -> Option<Instant> {
        self.backoff.peek().map(|Reverse((t, _, _))| *t)
    }

    pub fn get(&self, uid: &str) -> Option<&QueuedPod> {
        self.pods.get(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, priority: i32, gates: bool) -> Arc<Pod> {
        let mut spec = json!({"containers": [], "priority": priority});
        if gates {
            spec["schedulingGates"] = json!([{"name": "example.com/wait"}]);
        }
        Arc::new(serde_json::from_value(json!({"metadata": {"name": uid, "uid": uid}, "spec": spec})).unwrap())
    }

    fn pop(q: &mut Queue) -> Option<String> {
        q.pop().map(|p| p.pod.metadata.uid.clone().unwrap())
    }

    #[test]
    fn priority_then_age() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add_or_update(pod("a", 0, false), now);
        q.add_or_update(pod("b", 10, false), now);
        q.add_or_update(pod("c", 0, false), now);
        assert_eq!([pop(&mut q), pop(&mut q), pop(&mut q)], [Some("b".into()), Some("a".into()), Some("c".into())]);
        assert_eq!(pop(&mut q), None);
    }

    #[test]
    fn unschedulable_pods_wait_for_events_then_back_off() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add_or_update(pod("a", 0, false), now);
        pop(&mut q);
        q.unschedulable("a", false, now);
        assert_eq!(q.place("a"), Some(Where::Unschedulable));
        q.on_event(ClusterEvent::PodAssigned, now);
        assert_eq!(q.place("a"), Some(Where::Unschedulable), "not rejected for other pods");
        q.on_event(ClusterEvent::NodeChanged, now);
        assert_eq!(q.place("a"), Some(Where::Backoff));
        assert_eq!(q.next_backoff(), Some(now + INITIAL_BACKOFF));
        q.flush_backoff(now + INITIAL_BACKOFF);
        assert_eq!(pop(&mut q), Some("a".into()));
        assert_eq!(q.get("a").unwrap().attempts, 2);
        assert_eq!(backoff_for(2), Duration::from_secs(2));
        assert_eq!(backoff_for(9), MAX_BACKOFF);
    }

    #[test]
    fn an_event_during_the_cycle_means_back_off_not_waiting() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add_or_update(pod("a", 0, false), now);
        pop(&mut q);
        q.on_event(ClusterEvent::NodeChanged, now);
        q.unschedulable("a", false, now);
        assert_eq!(q.place("a"), Some(Where::Backoff));
    }

    #[test]
    fn gated_pods_wait_for_their_gates() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add_or_update(pod("a", 0, true), now);
        assert_eq!(pop(&mut q), None);
        q.on_event(ClusterEvent::NodeChanged, now);
        assert_eq!(q.place("a"), Some(Where::Gated));
        q.add_or_update(pod("a", 0, false), now);
        assert_eq!(pop(&mut q), Some("a".into()));
    }

    #[test]
    fn status_only_updates_do_not_move_unschedulable_pods() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add_or_update(pod("a", 0, false), now);
        pop(&mut q);
        q.unschedulable("a", false, now);
        let mut with_status = (*pod("a", 0, false)).clone();
        with_status.status = Some(Default::default());
        q.add_or_update(Arc::new(with_status), now);
        assert_eq!(q.place("a"), Some(Where::Unschedulable));
        q.add_or_update(pod("a", 5, false), now);
        assert_eq!(q.place("a"), Some(Where::Backoff));
    }
}
