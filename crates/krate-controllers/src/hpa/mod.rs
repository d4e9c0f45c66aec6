//! The HorizontalPodAutoscaler controller ("horizontalpodautoscaling"), autoscaling/v2
//! as upstream's podautoscaler: every sync period it reads the target's scale
//! subresource (any kind that has one), computes a replica count from each resource
//! metric (metrics.k8s.io PodMetrics, see `metrics`), normalizes it (stabilization,
//! behavior policies, min/max: see `behavior`), writes the scale when it changes and
//! keeps status (currentReplicas, desiredReplicas, lastScaleTime, currentMetrics,
//! conditions AbleToScale/ScalingActive/ScalingLimited) and Events as upstream does.

pub mod behavior;
pub mod metrics;
pub mod quantity;
pub mod replicas;
pub mod selector;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition, HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus,
    MetricValueStatus, ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};

use self::behavior::{Behavior, History};
use self::metrics::MetricsSource;
use self::replicas::{Calculator, Target, Tolerances};
use self::selector::Selector;
use crate::{Clients, Informers};

const CONTROLLER: &str = "horizontalpodautoscaling";

/// Upstream's kube-controller-manager HPA flags, with their defaults.
#[derive(Clone, Debug)]
pub struct Settings {
    /// --horizontal-pod-autoscaler-sync-period.
    pub sync_period: Duration,
    /// --horizontal-pod-autoscaler-downscale-stabilization.
    pub downscale_stabilization: Duration,
    /// --horizontal-pod-autoscaler-tolerance.
    pub tolerance: f64,
    /// --horizontal-pod-autoscaler-cpu-initialization-period.
    pub cpu_initialization_period: Duration,
    /// --horizontal-pod-autoscaler-initial-readiness-delay.
    pub initial_readiness_delay: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

struct Autoscaler {
    history: History,
    last_sync: Option<Instant>,
}

struct Ctx {
    client: kube::Client,
    pods: Store<Pod>,
    hpas: Store<HorizontalPodAutoscaler>,
    metrics: Arc<dyn MetricsSource>,
    settings: Settings,
    reporter: Reporter,
    recorders: Mutex<HashMap<String, Recorder>>,
    state: Mutex<HashMap<String, Autoscaler>>,
    /// Each autoscaler's last target selector, by "namespace/name": two autoscalers whose
    /// selectors take in the same pods are refused (AmbiguousSelector), as upstream.
    selectors: Mutex<HashMap<String, Selector>>,
}

pub async fn run(clients: Clients, informers: Arc<Informers>, settings: Settings, metrics: Arc<dyn MetricsSource>) {
    let hpa_informer = informers.get::<HorizontalPodAutoscaler>();
    let pod_informer = informers.get::<Pod>();
    pod_informer.ready().await;
    let reporter = Reporter { controller: "horizontal-pod-autoscaler".into(), instance: None };
    let ctx = Arc::new(Ctx {
        client: clients.write.clone(),
        pods: pod_informer.store(),
        hpas: hpa_informer.store(),
        metrics,
        settings,
        reporter,
        recorders: Mutex::default(),
        state: Mutex::default(),
        selectors: Mutex::default(),
    });
    Controller::for_shared_stream(hpa_informer.subscribe(), hpa_informer.store())
        .run(
            |hpa, ctx: Arc<Ctx>| async move { Ok::<_, crate::Error>(ctx.reconcile(&hpa).await) },
            |_, _, _| Action::requeue(Duration::from_secs(5)),
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

/// Go's error text for an API error: the Status message.
fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Upstream's setCondition: the transition time moves only when the status changes.
fn set_condition(status: &mut HorizontalPodAutoscalerStatus, type_: &str, value: bool, reason: &str, message: String) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_default();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != value {
                c.last_transition_time = Some(now());
            }
            c.status = value.into();
            c.reason = Some(reason.into());
            c.message = Some(message);
        }
        None => conditions.push(HorizontalPodAutoscalerCondition {
            type_: type_.into(),
            status: value.into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_transition_time: Some(now()),
        }),
    }
}

/// The resource metric spec's parts: resource name, container, target.
struct ResourceMetric {
    kind: &'static str,
    name: String,
    container: Option<String>,
    target: Option<Target>,
}

fn resource_metric(spec: &MetricSpec) -> Option<ResourceMetric> {
    let target_of = |t: &k8s_openapi::api::autoscaling::v2::MetricTarget| {
        if let Some(v) = &t.average_value {
            quantity::milli(&v.0).map(Target::AverageValue)
        } else {
            t.average_utilization.map(Target::Utilization)
        }
    };
    match spec.type_.as_str() {
        "Resource" => spec.resource.as_ref().map(|r| ResourceMetric {
            kind: "Resource",
            name: r.name.clone(),
            container: None,
            target: target_of(&r.target),
        }),
        "ContainerResource" => spec.container_resource.as_ref().map(|r| ResourceMetric {
            kind: "ContainerResource",
            name: r.name.clone(),
            container: Some(r.container.clone()),
            target: target_of(&r.target),
        }),
        _ => None,
    }
}

/// Upstream's default metric: 80% average CPU utilization.
fn default_metrics() -> Vec<MetricSpec> {
    serde_json::from_value(serde_json::json!([
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}
    ]))
    .expect("static metric spec")
}

impl Ctx {
    async fn warn(&self, hpa: &HorizontalPodAutoscaler, reason: &str, note: String) {
        self.event(hpa, EventType::Warning, reason, note).await
    }

    async fn event(&self, hpa: &HorizontalPodAutoscaler, type_: EventType, reason: &str, note: String) {
        // kube-runtime's Recorder folds every event with the same reason into one series,
        // whatever its message; client-go folds only identical ones. One recorder per
        // message keeps "New size: 3" and "New size: 5" apart, as upstream shows them.
        let recorder = {
            let mut recorders = self.recorders.lock().expect("recorders lock");
            if recorders.len() > 1024 {
                recorders.clear();
            }
            let key = format!("{reason}\n{note}");
            recorders.entry(key).or_insert_with(|| Recorder::new(self.client.clone(), self.reporter.clone())).clone()
        };
        let event = Event { type_, reason: reason.into(), note: Some(note), action: reason.into(), secondary: None };
        if let Err(error) = recorder.publish(&event, &hpa.object_ref(&())).await {
            tracing::warn!(controller = CONTROLLER, %error, "recording an event failed");
        }
    }

    async fn reconcile(&self, hpa: &HorizontalPodAutoscaler) -> Action {
        let key = format!("{}/{}", hpa.namespace().unwrap_or_default(), hpa.name_any());
        let period = self.settings.sync_period;
        {
            // Upstream processes each autoscaler once per sync period, whatever changed.
            let mut state = self.state.lock().expect("autoscaler state lock");
            let exists = |k: &String| {
                let (ns, name) = k.split_once('/').unwrap_or_default();
                self.hpas.get(&kube::runtime::reflector::ObjectRef::new(name).within(ns)).is_some()
            };
            state.retain(|k, _| exists(k));
            self.selectors.lock().expect("autoscaler selectors lock").retain(|k, _| exists(k));
            let entry = state.entry(key.clone()).or_insert(Autoscaler { history: History::default(), last_sync: None });
            if let Some(last) = entry.last_sync {
                let since = last.elapsed();
                if since < period {
                    return Action::requeue(period - since);
                }
            }
            entry.last_sync = Some(Instant::now());
        }
        let result = self.sync(hpa, &key).await;
        crate::metrics::record(CONTROLLER, result.is_ok());
        if let Err(error) = result {
            tracing::info!(controller = CONTROLLER, hpa = %key, %error, "autoscaler sync failed");
        }
        Action::requeue(period)
    }

    fn with_history<T>(&self, key: &str, f: impl FnOnce(&mut History) -> T) -> T {
        let mut state = self.state.lock().expect("autoscaler state lock");
        let entry = state.entry(key.into()).or_insert(Autoscaler { history: History::default(), last_sync: None });
        f(&mut entry.history)
    }

    async fn update_status(&self, hpa: &HorizontalPodAutoscaler, status: HorizontalPodAutoscalerStatus) {
        if hpa.status.as_ref() == Some(&status) {
            return;
        }
        let mut updated = hpa.clone();
        updated.status = Some(status);
        let api: Api<HorizontalPodAutoscaler> =
            Api::namespaced(self.client.clone(), &hpa.namespace().unwrap_or_default());
        match api.replace_status(&hpa.name_any(), &PostParams::default(), &updated).await {
            Ok(_) => {}
            // Changed or gone meanwhile: the next sync works from the newer object.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {}
            Err(error) => tracing::warn!(controller = CONTROLLER, %error, "updating the autoscaler's status failed"),
        }
    }

    /// The target's scale subresource and the API to write it back.
    async fn scale_of(&self, hpa: &HorizontalPodAutoscaler) -> Result<(Api<DynamicObject>, Scale), String> {
        let target = &hpa.spec.scale_target_ref;
        let api_version = target.api_version.as_deref().unwrap_or("");
        let (group, version) = match api_version.split('/').collect::<Vec<_>>()[..] {
            [version] if !version.is_empty() => ("", version),
            [group, version] if !group.is_empty() && !version.is_empty() => (group, version),
            _ => return Err(format!("unexpected GroupVersion string: {api_version}")),
        };
        let gvk = GroupVersionKind::gvk(group, version, &target.kind);
        let (resource, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|_| format!("no matches for kind \"{}\" in group \"{group}\"", target.kind))?;
        let api =
            Api::<DynamicObject>::namespaced_with(self.client.clone(), &hpa.namespace().unwrap_or_default(), &resource);
        let scale = api.get_scale(&target.name).await.map_err(|e| error_text(&e))?;
        Ok((api, scale))
    }

    async fn sync(&self, hpa: &HorizontalPodAutoscaler, key: &str) -> Result<(), String> {
        let target = &hpa.spec.scale_target_ref;
        let reference = format!("{}/{}/{}", target.kind, hpa.namespace().unwrap_or_default(), target.name);
        let mut status = hpa.status.clone().unwrap_or_default();
        let (api, mut scale) = match self.scale_of(hpa).await {
            Ok(found) => found,
            Err(e) => {
                self.warn(hpa, "FailedGetScale", e.clone()).await;
                let message = format!("the HPA controller was unable to get the target's current scale: {e}");
                set_condition(&mut status, "AbleToScale", false, "FailedGetScale", message);
                self.update_status(hpa, status).await;
                return Err(format!("failed to query scale subresource for {reference}: {e}"));
            }
        };
        let message = "the HPA controller was able to get the target's current scale".to_string();
        set_condition(&mut status, "AbleToScale", true, "SucceededGetScale", message);
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let now_ms = jiff::Timestamp::now().as_millisecond();
        self.with_history(key, |h| h.record_initial(current, now_ms));
        let min = hpa.spec.min_replicas.unwrap_or(1);
        let max = hpa.spec.max_replicas;
        let behavior = hpa
            .spec
            .behavior
            .as_ref()
            .map(|b| Behavior::from_spec(b, self.settings.downscale_stabilization.as_secs() as i32));

        let mut metric_statuses = None;
        let mut rescale_reason = String::new();
        let mut failure = None;
        let desired = if current == 0 && min != 0 {
            let message = "scaling is disabled since the replica count of the target is zero".to_string();
            set_condition(&mut status, "ScalingActive", false, "ScalingDisabled", message);
            None
        } else if current > max {
            rescale_reason = "Current number of replicas above Spec.MaxReplicas".into();
            Some(max)
        } else if current < min {
            rescale_reason = "Current number of replicas below Spec.MinReplicas".into();
            Some(min)
        } else {
            let (proposal, name, statuses, error) = self.replicas_for_metrics(hpa, &scale, &mut status).await;
            metric_statuses = statuses;
            if proposal == -1 {
                let error = error.unwrap_or_default();
                status.current_replicas = Some(current);
                status.current_metrics = metric_statuses;
                self.update_status(hpa, status).await;
                self.warn(hpa, "FailedComputeMetricsReplicas", error.clone()).await;
                return Err(format!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {error}"
                ));
            }
            failure = error;
            if proposal > current {
                rescale_reason = format!("{name} above target");
            }
            if proposal < current {
                rescale_reason = "All metrics below target".into();
            }
            let window = self.settings.downscale_stabilization.as_secs() as i32;
            let outcome = self.with_history(key, |h| match &behavior {
                None => h.normalize(now_ms, current, proposal, min, max, window),
                Some(b) => h.normalize_with(now_ms, b, current, proposal, min, max),
            });
            set_condition(&mut status, "AbleToScale", true, outcome.able.0, outcome.able.1.into());
            set_condition(&mut status, "ScalingLimited", outcome.limited, outcome.limit.0, outcome.limit.1.into());
            Some(outcome.replicas)
        };

        let rescale = desired.filter(|&d| d != current);
        if let Some(desired) = rescale {
            scale.spec.get_or_insert_default().replicas = Some(desired);
            if let Err(e) = api.replace_scale(&target.name, &PostParams::default(), &scale).await {
                let e = error_text(&e);
                let note = format!("New size: {desired}; reason: {rescale_reason}; error: {e}");
                self.warn(hpa, "FailedRescale", note).await;
                let message = format!("the HPA controller was unable to update the target scale: {e}");
                set_condition(&mut status, "AbleToScale", false, "FailedUpdateScale", message);
                status.current_replicas = Some(current);
                status.current_metrics = metric_statuses;
                self.update_status(hpa, status).await;
                return Err(format!("failed to rescale {reference}: {e}"));
            }
            let message = format!("the HPA controller was able to update the target scale to {desired}");
            set_condition(&mut status, "AbleToScale", true, "SucceededRescale", message);
            let note = format!("New size: {desired}; reason: {rescale_reason}");
            self.event(hpa, EventType::Normal, "SuccessfulRescale", note).await;
            self.with_history(key, |h| h.store_scale_event(behavior.as_ref(), now_ms, current, desired));
            tracing::info!(hpa = %key, current, desired, reason = %rescale_reason, "rescaled");
            status.last_scale_time = Some(now());
        }
        status.current_replicas = Some(current);
        status.desired_replicas = rescale.unwrap_or(current);
        status.current_metrics = metric_statuses;
        self.update_status(hpa, status).await;
        failure.map_or(Ok(()), Err)
    }

    /// Upstream's computeReplicasForMetrics: the highest proposal among the valid
    /// metrics, -1 if all are invalid (or some are and the rest would scale down).
    async fn replicas_for_metrics(
        &self,
        hpa: &HorizontalPodAutoscaler,
        scale: &Scale,
        status: &mut HorizontalPodAutoscalerStatus,
    ) -> (i32, String, Option<Vec<MetricStatus>>, Option<String>) {
        let selector_text = scale.status.as_ref().and_then(|s| s.selector.clone()).unwrap_or_default();
        if selector_text.is_empty() {
            self.warn(hpa, "SelectorRequired", "selector is required".into()).await;
            let message = "the HPA target's scale is missing a selector".to_string();
            set_condition(status, "ScalingActive", false, "InvalidSelector", message);
            return (-1, String::new(), None, Some("selector is required".into()));
        }
        let selector = match Selector::parse(&selector_text) {
            Ok(s) => s,
            Err(e) => {
                let message = format!("couldn't convert selector into a corresponding internal selector object: {e}");
                self.warn(hpa, "InvalidSelector", message.clone()).await;
                set_condition(status, "ScalingActive", false, "InvalidSelector", message.clone());
                return (-1, String::new(), None, Some(message));
            }
        };
        if let Some(message) = self.ambiguous(hpa, &selector_text, &selector) {
            self.warn(hpa, "AmbiguousSelector", message.clone()).await;
            set_condition(status, "ScalingActive", false, "AmbiguousSelector", message.clone());
            return (-1, String::new(), None, Some(message));
        }
        let spec_replicas = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let specs = hpa.spec.metrics.clone().filter(|m| !m.is_empty()).unwrap_or_else(default_metrics);
        let mut statuses = vec![MetricStatus::default(); specs.len()];
        let (mut replicas, mut metric, mut invalid, mut first_error) = (0, String::new(), 0, None);
        for (i, spec) in specs.iter().enumerate() {
            match self.replicas_for_metric(hpa, spec, spec_replicas, &selector_text, &selector, &mut statuses[i]).await
            {
                Ok((proposal, name)) => {
                    if replicas == 0 || proposal > replicas {
                        replicas = proposal;
                        metric = name;
                    }
                }
                Err((condition, error)) => {
                    if invalid == 0 {
                        first_error = Some((condition, error));
                    }
                    invalid += 1;
                }
            }
        }
        let error = first_error
            .as_ref()
            .map(|(_, e)| format!("invalid metrics ({invalid} invalid out of {}), first error is: {e}", specs.len()));
        if invalid >= specs.len() || (invalid > 0 && replicas < spec_replicas) {
            if let Some((condition, _)) = first_error {
                set_condition(status, "ScalingActive", false, &condition.0, condition.1);
            }
            return (-1, String::new(), Some(statuses), error);
        }
        let message = format!("the HPA was able to successfully calculate a replica count from {metric}");
        set_condition(status, "ScalingActive", true, "ValidMetricFound", message);
        (replicas, metric, Some(statuses), error)
    }

    /// Records the autoscaler's selector, then upstream's message if the pods it selects
    /// are selected by another autoscaler too.
    fn ambiguous(&self, hpa: &HorizontalPodAutoscaler, selector_text: &str, selector: &Selector) -> Option<String> {
        let namespace = hpa.namespace().unwrap_or_default();
        let key = format!("{namespace}/{}", hpa.name_any());
        let mut selectors = self.selectors.lock().expect("autoscaler selectors lock");
        selectors.insert(key, selector.clone());
        let same_namespace: Vec<(&String, &Selector)> =
            selectors.iter().filter(|(k, _)| k.split_once('/').is_some_and(|(ns, _)| ns == namespace)).collect();
        let mut selecting = std::collections::BTreeSet::new();
        for pod in self.pods.state() {
            if pod.namespace().as_deref() != Some(namespace.as_str()) || !selector.matches(pod.labels()) {
                continue;
            }
            selecting
                .extend(same_namespace.iter().filter(|(_, s)| s.matches(pod.labels())).map(|(k, _)| k.to_string()));
        }
        (selecting.len() > 1).then(|| {
            let names: Vec<String> = selecting.into_iter().collect();
            format!("pods by selector {selector_text} are controlled by multiple HPAs: [{}]", names.join(" "))
        })
    }

    /// One metric: its proposal, or ((condition reason, condition message), error).
    async fn replicas_for_metric(
        &self,
        hpa: &HorizontalPodAutoscaler,
        spec: &MetricSpec,
        spec_replicas: i32,
        selector_text: &str,
        selector: &Selector,
        status: &mut MetricStatus,
    ) -> Result<(i32, String), ((String, String), String)> {
        let unable = |reason: &str, e: &str| {
            (reason.to_string(), format!("the HPA was unable to compute the replica count: {e}"))
        };
        let Some(m) = resource_metric(spec) else {
            // Pods, Object and External metrics come from custom.metrics.k8s.io and
            // external.metrics.k8s.io, which krate does not serve.
            let (reason, api) = match spec.type_.as_str() {
                "Pods" => ("FailedGetPodsMetric", "custom metrics"),
                "Object" => ("FailedGetObjectMetric", "custom metrics"),
                "External" => ("FailedGetExternalMetric", "external metrics"),
                other => {
                    let e = format!("unknown metric source type \"{other}\"");
                    self.warn(hpa, "InvalidMetricSourceType", e.clone()).await;
                    return Err((unable("InvalidMetricSourceType", &e), e));
                }
            };
            let e = format!("unable to fetch metrics from {api} API: the server could not find the requested resource");
            self.warn(hpa, reason, e.clone()).await;
            let kind = spec.type_.to_lowercase();
            return Err((unable(reason, &e), format!("failed to get {kind} metric value: {e}")));
        };
        let reason = if m.kind == "Resource" { "FailedGetResourceMetric" } else { "FailedGetContainerResourceMetric" };
        let outcome = self.resource_proposal(hpa, &m, spec_replicas, selector_text, selector).await;
        match outcome {
            Ok((proposal, name, current)) => {
                *status = resource_status(&m, current);
                Ok((proposal, name))
            }
            Err(e) => {
                self.warn(hpa, reason, e.clone()).await;
                let what = if m.kind == "Resource" { "resource" } else { "container resource" };
                Err((unable(reason, &e), format!("failed to get {} {what} metric value: {e}", m.name)))
            }
        }
    }

    async fn resource_proposal(
        &self,
        hpa: &HorizontalPodAutoscaler,
        m: &ResourceMetric,
        current: i32,
        selector_text: &str,
        selector: &Selector,
    ) -> Result<(i32, String, MetricValueStatus), String> {
        let Some(target) = m.target else {
            return Err("invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into());
        };
        let (what, name) = match target {
            Target::Utilization(_) => {
                ("utilization", format!("{} resource utilization (percentage of request)", m.name))
            }
            Target::AverageValue(_) => ("usage", format!("{} resource", m.name)),
        };
        let wrap = |e: String| format!("failed to get {} {what}: {e}", m.name);
        let namespace = hpa.namespace().unwrap_or_default();
        let (metrics, _) = self
            .metrics
            .resource_metric(&namespace, selector_text, &m.name, m.container.as_deref())
            .await
            .map_err(|e| wrap(format!("unable to get metrics for resource {}: {e}", m.name)))?;
        let pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()) && selector.matches(p.labels()))
            .collect();
        let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        let tolerances = self.tolerances(hpa);
        let calc = Calculator {
            tolerances,
            cpu_initialization_period_ms: self.settings.cpu_initialization_period.as_millis() as i64,
            initial_readiness_delay_ms: self.settings.initial_readiness_delay.as_millis() as i64,
        };
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let p = calc.resource_replicas(current, target, &m.name, &pods, metrics, now_ms).map_err(wrap)?;
        let value = MetricValueStatus {
            average_value: Some(Quantity(quantity::from_milli(p.average))),
            average_utilization: p.utilization,
            value: None,
        };
        Ok((p.replicas, name, value))
    }

    /// Per-direction tolerances from spec.behavior, else the controller's.
    fn tolerances(&self, hpa: &HorizontalPodAutoscaler) -> Tolerances {
        let of = |rules: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>| {
            rules.and_then(|r| r.tolerance.as_ref()).and_then(|q| quantity::milli(&q.0)).map(|m| m as f64 / 1000.0)
        };
        let b = hpa.spec.behavior.as_ref();
        Tolerances {
            scale_down: of(b.and_then(|b| b.scale_down.as_ref())).unwrap_or(self.settings.tolerance),
            scale_up: of(b.and_then(|b| b.scale_up.as_ref())).unwrap_or(self.settings.tolerance),
        }
    }
}

fn resource_status(m: &ResourceMetric, current: MetricValueStatus) -> MetricStatus {
    let mut status = MetricStatus { type_: m.kind.into(), ..Default::default() };
    match &m.container {
        None => status.resource = Some(ResourceMetricStatus { name: m.name.clone(), current }),
        Some(container) => {
            status.container_resource = Some(k8s_openapi::api::autoscaling::v2::ContainerResourceMetricStatus {
                name: m.name.clone(),
                container: container.clone(),
                current,
            })
        }
    }
    status
}
