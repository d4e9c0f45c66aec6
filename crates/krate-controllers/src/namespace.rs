//! The namespace controller: when a namespace is deleted, delete everything in it, report
//! progress in the namespace's status conditions as upstream does, and once nothing is
//! left remove the "kubernetes" finalizer (namespaces/NAME/finalize) so the API server
//! can remove the namespace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;

use crate::{Clients, Error};

const FINALIZER: &str = "kubernetes";
const CONTROLLER: &str = "namespace";

pub async fn run(clients: Clients) {
    let namespaces: Api<Namespace> = Api::all(clients.read.clone());
    let client = clients.write;
    Controller::new(namespaces, watcher::Config::default())
        .run(
            |ns, client: Arc<kube::Client>| async move {
                let result = reconcile(&ns, &client).await;
                crate::metrics::record(CONTROLLER, result.is_ok());
                result
            },
            |ns, error: &Error, _| {
                tracing::warn!(controller = CONTROLLER, namespace = %ns.name_any(), %error, "reconcile failed; retrying");
                Action::requeue(Duration::from_secs(2))
            },
            Arc::new(client),
        )
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// What is left in a namespace after one round of deletion.
#[derive(Default, Debug, PartialEq)]
struct Remaining {
    /// group-resource ("pods", "deployments.apps") → objects left.
    resources: BTreeMap<String, usize>,
    /// finalizer → objects carrying it.
    finalizers: BTreeMap<String, usize>,
}

async fn reconcile(ns: &Namespace, client: &kube::Client) -> Result<Action, Error> {
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(Action::await_change());
    }
    let finalizers = ns.spec.as_ref().and_then(|s| s.finalizers.clone()).unwrap_or_default();
    if !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let discovered = Discovery::new(client.clone()).run().await;
    let (remaining, discovery_error, delete_errors) = match discovered {
        Ok(discovery) => {
            let (remaining, errors) = delete_content(client, &name, &discovery).await;
            (remaining, None, errors)
        }
        Err(e) => (Remaining::default(), Some(e.to_string()), vec![]),
    };
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // An update, not a patch: upstream's namespace-controller role may only update status.
    let mut with_conditions = ns.clone();
    with_conditions.status.get_or_insert_default().conditions =
        Some(conditions(ns, &remaining, discovery_error.as_deref(), &delete_errors));
    let ns = match namespaces.replace_status(&name, &PostParams::default(), &with_conditions).await {
        Ok(updated) => updated,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    };
    if discovery_error.is_some() || !delete_errors.is_empty() || !remaining.resources.is_empty() {
        // Pods wait for their grace period, finalizers for their controllers: look again.
        return Ok(Action::requeue(Duration::from_secs(if remaining.finalizers.is_empty() { 1 } else { 5 })));
    }
    let mut done = ns;
    done.spec.get_or_insert_default().finalizers = Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    match namespaces.replace_subresource("finalize", &name, &PostParams::default(), &done).await {
        Ok(_) => tracing::info!(namespace = %name, "namespace content deleted; finalized"),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(Action::await_change())
}

/// Deletes every namespaced resource's objects in `ns` and counts what is left.
async fn delete_content(client: &kube::Client, ns: &str, discovery: &Discovery) -> (Remaining, Vec<String>) {
    let mut remaining = Remaining::default();
    let mut errors = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            let deletable = caps.supports_operation(verbs::LIST)
                && (caps.supports_operation(verbs::DELETE_COLLECTION) || caps.supports_operation(verbs::DELETE));
            if caps.scope != Scope::Namespaced || !deletable {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
            let gr = if ar.group.is_empty() { ar.plural.clone() } else { format!("{}.{}", ar.plural, ar.group) };
            let deleted = if caps.supports_operation(verbs::DELETE_COLLECTION) {
                api.delete_collection(&DeleteParams::background(), &ListParams::default()).await.map(|_| ())
            } else {
                delete_each(&api).await
            };
            match deleted {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => continue,
                Err(e) => errors.push(format!("{gr}: {e}")),
            }
            match api.list_metadata(&ListParams::default()).await {
                Ok(left) if left.items.is_empty() => {}
                Ok(left) => {
                    *remaining.resources.entry(gr).or_default() += left.items.len();
                    for item in &left.items {
                        for f in item.metadata.finalizers.iter().flatten() {
                            *remaining.finalizers.entry(f.clone()).or_default() += 1;
                        }
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 || s.code == 405 => {}
                Err(e) => errors.push(format!("{gr}: {e}")),
            }
        }
    }
    (remaining, errors)
}

async fn delete_each(api: &Api<DynamicObject>) -> Result<(), kube::Error> {
    for item in api.list_metadata(&ListParams::default()).await?.items {
        match api.delete(&item.name_any(), &DeleteParams::background()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Upstream's five deletion conditions, keeping transition times of unchanged ones.
fn conditions(
    ns: &Namespace,
    remaining: &Remaining,
    discovery_error: Option<&str>,
    delete_errors: &[String],
) -> Vec<NamespaceCondition> {
    let counted = |m: &BTreeMap<String, usize>, sep: &str| {
        m.iter().map(|(k, n)| format!("{k}{sep}{n} resource instances")).collect::<Vec<_>>().join(", ")
    };
    let wanted: [(&str, bool, &str, String); 5] = [
        match discovery_error {
            Some(e) => ("NamespaceDeletionDiscoveryFailure", true, "DiscoveryFailed", e.to_string()),
            None => (
                "NamespaceDeletionDiscoveryFailure",
                false,
                "ResourcesDiscovered",
                "All resources successfully discovered".into(),
            ),
        },
        (
            "NamespaceDeletionGroupVersionParsingFailure",
            false,
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed".into(),
        ),
        if delete_errors.is_empty() {
            (
                "NamespaceDeletionContentFailure",
                false,
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            )
        } else {
            ("NamespaceDeletionContentFailure", true, "ContentDeletionFailed", delete_errors.join(", "))
        },
        if remaining.resources.is_empty() {
            ("NamespaceContentRemaining", false, "ContentRemoved", "All content successfully removed".into())
        } else {
            (
                "NamespaceContentRemaining",
                true,
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", counted(&remaining.resources, " has ")),
            )
        },
        if remaining.finalizers.is_empty() {
            (
                "NamespaceFinalizersRemaining",
                false,
                "ContentHasNoFinalizers",
                "All content-preserving finalizers finished".into(),
            )
        } else {
            (
                "NamespaceFinalizersRemaining",
                true,
                "SomeFinalizersRemain",
                format!(
                    "Some content in the namespace has finalizers remaining: {}",
                    counted(&remaining.finalizers, " in ")
                ),
            )
        },
    ];
    let old = ns.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    wanted
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let status = if status { "True" } else { "False" }.to_string();
            let previous = old.iter().find(|c| c.type_ == type_ && c.status == status);
            NamespaceCondition {
                type_: type_.into(),
                last_transition_time: Some(
                    previous.and_then(|c| c.last_transition_time.clone()).unwrap_or(now.clone()),
                ),
                status,
                reason: Some(reason.into()),
                message: Some(message),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_say_what_remains_as_upstream() {
        let ns = Namespace::default();
        let remaining = Remaining {
            resources: BTreeMap::from([("pods".into(), 2), ("widgets.example.com".into(), 1)]),
            finalizers: BTreeMap::from([("example.com/keep".into(), 1)]),
        };
        let c = conditions(&ns, &remaining, None, &[]);
        let by_type = |t: &str| c.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!(
            by_type("NamespaceContentRemaining").message.as_deref(),
            Some(
                "Some resources are remaining: pods has 2 resource instances, widgets.example.com has 1 resource instances"
            )
        );
        assert_eq!(by_type("NamespaceContentRemaining").status, "True");
        assert_eq!(
            by_type("NamespaceFinalizersRemaining").message.as_deref(),
            Some("Some content in the namespace has finalizers remaining: example.com/keep in 1 resource instances")
        );
        let done = conditions(&ns, &Remaining::default(), None, &[]);
        assert!(done.iter().all(|c| c.status == "False"));
    }
}
