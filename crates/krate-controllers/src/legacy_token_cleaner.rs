//! Upstream's legacy-service-account-token-cleaner: auto-generated Secret-based
//! service-account tokens (listed in their ServiceAccount's `secrets`) that nothing has
//! used for a whole clean-up period are first labelled invalid (the authenticator then
//! refuses them), and deleted once they have been invalid for another period. A token
//! mounted or referenced by a pod, used recently, or made by hand (not listed in its
//! account) is kept. Nothing happens until tracking of legacy token use (the API
//! server's kube-apiserver-legacy-service-account-token-tracking ConfigMap) has been on
//! for a full period, so that "no last-used label" really means "unused".

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::civil::Date;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;

use crate::{Context, Error};

const CONTROLLER: &str = "legacy-service-account-token-cleaner";
pub const TRACKING_CONFIGMAP: &str = "kube-apiserver-legacy-service-account-token-tracking";
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";
const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";
const DATE: &str = "%Y-%m-%d";

#[derive(Clone, Debug)]
pub struct Tuning {
    /// How long a token must go unused before it is invalidated, and then stay invalid
    /// before it is deleted (--legacy-service-account-token-clean-up-period).
    pub clean_up_period: Duration,
    /// How often tokens are looked at (upstream: daily).
    pub sync_interval: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning { clean_up_period: Duration::from_secs(365 * 24 * 3600), sync_interval: Duration::from_secs(24 * 3600) }
    }
}

/// What is done to one token Secret.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Labelled invalid since `date`.
    Invalidate { namespace: String, name: String, date: String },
    /// Deleted, if unchanged since seen.
    Delete { namespace: String, name: String, resource_version: String },
}

pub async fn run(ctx: Context) {
    let client = (ctx.client_for)(CONTROLLER).write;
    let secrets = ctx.informers.get::<Secret>();
    let accounts = ctx.informers.get::<ServiceAccount>();
    let pods = ctx.informers.get::<Pod>();
    secrets.ready().await;
    accounts.ready().await;
    pods.ready().await;
    let tuning = ctx.settings.legacy_token_cleaner.clone();
    let mut ticks = tokio::time::interval(tuning.sync_interval);
    loop {
        ticks.tick().await;
        let tracked_since = match tracked_since(&client).await {
            Ok(date) => date,
            Err(error) => {
                tracing::warn!(controller = CONTROLLER, %error, "reading since when legacy tokens are tracked failed");
                crate::metrics::record(CONTROLLER, false);
                continue;
            }
        };
        let view =
            View { secrets: secrets.store().state(), accounts: accounts.store().state(), pods: pods.store().state() };
        let mut ok = true;
        for action in plan(Timestamp::now(), tracked_since, tuning.clean_up_period, &view) {
            if let Err(error) = apply(&client, &action).await {
                ok = false;
                tracing::warn!(controller = CONTROLLER, ?action, %error, "cleaning a legacy token failed");
            }
        }
        crate::metrics::record(CONTROLLER, ok);
    }
}

/// The tracking start date from the API server's ConfigMap.
async fn tracked_since(client: &kube::Client) -> Result<Date, Error> {
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-system").get(TRACKING_CONFIGMAP).await?;
    let since = cm.data.as_ref().and_then(|d| d.get("since")).map(String::as_str).unwrap_or("");
    Date::strptime(DATE, since)
        .map_err(|e| Error::Other(format!("{TRACKING_CONFIGMAP} has no valid since date {since:?}: {e}")))
}

async fn apply(client: &kube::Client, action: &Action) -> Result<(), Error> {
    match action {
        Action::Invalidate { namespace, name, date } => {
            tracing::info!(
                controller = CONTROLLER,
                namespace,
                secret = name,
                invalid_since = date,
                "marking an unused auto-generated token invalid"
            );
            let patch = json!({"metadata": {"labels": {INVALID_SINCE_LABEL: date}}});
            let api = Api::<Secret>::namespaced(client.clone(), namespace);
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Action::Delete { namespace, name, resource_version } => {
            tracing::info!(
                controller = CONTROLLER,
                namespace,
                secret = name,
                "deleting an auto-generated token invalid for a whole clean-up period"
            );
            let preconditions = Preconditions { resource_version: Some(resource_version.clone()), uid: None };
            let params = DeleteParams { preconditions: Some(preconditions), ..Default::default() };
            match Api::<Secret>::namespaced(client.clone(), namespace).delete(name, &params).await {
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                other => {
                    other?;
                }
            }
        }
    }
    Ok(())
}

/// The informers' objects one evaluation looks at.
pub struct View {
    pub secrets: Vec<Arc<Secret>>,
    pub accounts: Vec<Arc<ServiceAccount>>,
    pub pods: Vec<Arc<Pod>>,
}

fn label<'a>(s: &'a Secret, key: &str) -> Option<&'a str> {
    s.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

fn annotation<'a>(s: &'a Secret, key: &str) -> &'a str {
    s.metadata.annotations.as_ref().and_then(|a| a.get(key)).map(String::as_str).unwrap_or("")
}

/// Whether the token is listed in the `secrets` of the account it names (with a matching
/// uid where it records one): upstream's test for an auto-generated token.
fn auto_generated(secret: &Secret, accounts: &HashMap<(String, String), &ServiceAccount>) -> bool {
    let namespace = secret.namespace().unwrap_or_default();
    let Some(sa) = accounts.get(&(namespace, annotation(secret, SA_NAME_ANNOTATION).to_string())) else {
        return false;
    };
    let uid = annotation(secret, SA_UID_ANNOTATION);
    if !uid.is_empty() && sa.metadata.uid.as_deref() != Some(uid) {
        return false;
    }
    let name = secret.name_any();
    sa.secrets.iter().flatten().any(|r| r.name.as_deref() == Some(name.as_str()))
}

/// What one evaluation does at `now` (upstream's evaluateSATokens).
pub fn plan(now: Timestamp, tracked_since: Date, period: Duration, view: &View) -> Vec<Action> {
    let period = SignedDuration::try_from(period).unwrap_or(SignedDuration::MAX);
    // Tracking is trusted from the first whole day it was on.
    let tracking_start =
        tracked_since.tomorrow().ok().and_then(|d| d.to_zoned(jiff::tz::TimeZone::UTC).ok()).map(|z| z.timestamp());
    let Some(tracking_start) = tracking_start else { return Vec::new() };
    if tracking_start.checked_add(period).map_or(true, |t| now < t) {
        return Vec::new();
    }
    let Ok(cutoff) = now.checked_sub(period) else { return Vec::new() };
    let preserve_used_on_or_after = cutoff.strftime(DATE).to_string();
    let today = now.strftime(DATE).to_string();
    let accounts: HashMap<(String, String), &ServiceAccount> =
        view.accounts.iter().map(|sa| ((sa.namespace().unwrap_or_default(), sa.name_any()), sa.as_ref())).collect();
    let mut mounted: HashMap<String, BTreeSet<String>> = HashMap::new();
    for pod in &view.pods {
        let names = krate_client::v1helpers::pod_secret_names(pod);
        mounted.entry(pod.namespace().unwrap_or_default()).or_default().extend(names);
    }
    let mut actions = Vec::new();
    for secret in &view.secrets {
        if secret.type_.as_deref() != Some(TOKEN_TYPE) || secret.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let created = secret.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if created.is_none_or(|c| c >= cutoff) {
            continue;
        }
        if let Some(last_used) = label(secret, LAST_USED_LABEL) {
            // A malformed date says nothing; a recent one keeps the token.
            if Date::strptime(DATE, last_used).is_err() || last_used >= preserve_used_on_or_after.as_str() {
                continue;
            }
        }
        if !auto_generated(secret, &accounts) {
            continue;
        }
        let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
        if mounted.get(&namespace).is_some_and(|m| m.contains(&name)) {
            continue;
        }
        match label(secret, INVALID_SINCE_LABEL).filter(|d| Date::strptime(DATE, d).is_ok()) {
            None => actions.push(Action::Invalidate { namespace, name, date: today.clone() }),
            Some(since) if since < preserve_used_on_or_after.as_str() => actions.push(Action::Delete {
                namespace,
                name,
                resource_version: secret.resource_version().unwrap_or_default(),
            }),
            Some(_) => {}
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn secret(name: &str, created: &str, labels: serde_json::Value) -> Arc<Secret> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created, "resourceVersion": "7",
                             "labels": labels, "annotations": {SA_NAME_ANNOTATION: "sa", SA_UID_ANNOTATION: "u1"}},
                "type": TOKEN_TYPE,
            }))
            .unwrap(),
        )
    }

    fn view(secrets: Vec<Arc<Secret>>, listed: &[&str], pods: serde_json::Value) -> View {
        let sa: ServiceAccount = serde_json::from_value(json!({
            "metadata": {"name": "sa", "namespace": "ns", "uid": "u1"},
            "secrets": listed.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
        }))
        .unwrap();
        let pods: Vec<Pod> = serde_json::from_value(pods).unwrap();
        View { secrets, accounts: vec![Arc::new(sa)], pods: pods.into_iter().map(Arc::new).collect() }
    }

    fn names(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .map(|a| match a {
                Action::Invalidate { name, date, .. } => format!("invalidate {name} {date}"),
                Action::Delete { name, resource_version, .. } => format!("delete {name}@{resource_version}"),
            })
            .collect()
    }

    #[test]
    fn nothing_happens_before_tracking_has_run_a_full_period() {
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let v = view(vec![secret("old", "2020-01-01T00:00:00Z", json!({}))], &["old"], json!([]));
        let since: Date = "2025-06-01".parse().unwrap();
        // Tracked from 2025-06-02 00:00: a year later is 2026-06-02.
        assert!(plan(now, since, 365 * DAY, &v).is_empty());
        let earlier: Date = "2025-05-31".parse().unwrap();
        assert_eq!(names(&plan(now, earlier, 365 * DAY, &v)), ["invalidate old 2026-06-01"]);
    }

    #[test]
    fn unused_auto_generated_tokens_are_invalidated_then_deleted() {
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let since: Date = "2020-01-01".parse().unwrap();
        let old = "2024-01-01T00:00:00Z";
        let pod = json!([{"metadata": {"name": "p", "namespace": "ns"},
                          "spec": {"containers": [{"name": "c"}], "volumes": [{"name": "v", "secret": {"secretName": "mounted"}}]}}]);
        let v = view(
            vec![
                secret("unused", old, json!({})),
                secret("used-long-ago", old, json!({LAST_USED_LABEL: "2025-01-01"})),
                secret("used-lately", old, json!({LAST_USED_LABEL: "2026-05-01"})),
                secret("bad-last-used", old, json!({LAST_USED_LABEL: "yesterday"})),
                secret("young", "2026-05-01T00:00:00Z", json!({})),
                secret("by-hand", old, json!({})),
                secret("mounted", old, json!({})),
                secret("invalid-long", old, json!({INVALID_SINCE_LABEL: "2025-05-01"})),
                secret("invalid-lately", old, json!({INVALID_SINCE_LABEL: "2026-01-01"})),
                secret("invalid-malformed", old, json!({INVALID_SINCE_LABEL: "soon"})),
            ],
            &[
                "unused",
                "used-long-ago",
                "used-lately",
                "bad-last-used",
                "young",
                "mounted",
                "invalid-long",
                "invalid-lately",
                "invalid-malformed",
            ],
            pod,
        );
        assert_eq!(
            names(&plan(now, since, 365 * DAY, &v)),
            [
                "invalidate unused 2026-06-01",
                "invalidate used-long-ago 2026-06-01",
                "delete invalid-long@7",
                "invalidate invalid-malformed 2026-06-01",
            ]
        );
    }

    #[test]
    fn a_token_of_another_account_uid_is_not_auto_generated() {
        let now: Timestamp = "2026-06-01T12:00:00Z".parse().unwrap();
        let mut s = (*secret("t", "2024-01-01T00:00:00Z", json!({}))).clone();
        s.metadata.annotations.as_mut().unwrap().insert(SA_UID_ANNOTATION.into(), "u0".into());
        let v = view(vec![Arc::new(s)], &["t"], json!([]));
        assert!(plan(now, "2020-01-01".parse().unwrap(), 365 * DAY, &v).is_empty());
    }
}
