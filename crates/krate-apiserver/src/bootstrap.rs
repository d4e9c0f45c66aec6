//! Start-up work after the server listens (upstream's post-start hooks): the system
//! namespaces exist before the server reports ready.

use serde_json::json;

use krate_api::admission::NoAdmission;
use krate_api::registry::{Context, Scope};
use krate_api::user::UserInfo;
use krate_api::{ApiError, Registry};

/// The `kubernetes` Service in default, its Endpoints and EndpointSlice pointing at this
/// API server, and the default ServiceCIDR, as upstream's apiserver keeps them.
pub async fn kubernetes_service(
    registry: &Registry,
    alloc: &krate_api::services::ServiceAllocator,
    address: std::net::IpAddr,
    port: u16,
) -> Result<(), ApiError> {
    let user = apiserver_user();
    let ctx = Context::internal(&user, &NoAdmission);
    let put = |group: &'static str,
               version: &'static str,
               plural: &'static str,
               namespace: Option<&'static str>,
               obj: serde_json::Value| {
        let ctx = &ctx;
        async move {
            let r = registry.table.lookup(group, version, plural).expect("built-in resource");
            let scope = Scope { resource: r, namespace: namespace.map(String::from) };
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
            match registry.get(&scope, &name).await {
                Ok(current) if plural == "services" || plural == "servicecidrs" => {
                    let _ = current;
                    Ok(())
                }
                Ok(current) => {
                    // Endpoints follow the server's address; keep them current.
                    let mut next = obj.clone();
                    next["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
                    registry.update(&scope, &name, next, None, ctx).await.map(|_| ())
                }
                Err(e) if e.code == 404 => registry.create(&scope, obj, ctx).await.map(|_| ()),
                Err(e) => Err(e),
            }
        }
    };
    put(
        "networking.k8s.io",
        "v1",
        "servicecidrs",
        None,
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": "kubernetes"},
            "spec": {"cidrs": [alloc.cidr()]},
        }),
    )
    .await?;
    let labels = json!({"component": "apiserver", "provider": "kubernetes"});
    put(
        "",
        "v1",
        "services",
        Some("default"),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "clusterIP": alloc.first_ip().to_string(),
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                "sessionAffinity": "None",
            },
        }),
    )
    .await?;
    put("", "v1", "endpoints", Some("default"), json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
        "subsets": [{"addresses": [{"ip": address.to_string()}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}],
    }))
    .await?;
    put("discovery.k8s.io", "v1", "endpointslices", Some("default"), json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
        "addressType": if address.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [{"addresses": [address.to_string()], "conditions": {"ready": true}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }))
    .await?;
    Ok(())
}

pub const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

fn apiserver_user() -> UserInfo {
    UserInfo { name: "system:apiserver".into(), groups: vec!["system:masters".into()], ..Default::default() }
}

/// Creates the two system PriorityClasses if missing (upstream's
/// scheduling/bootstrap-system-priority-classes hook).
pub async fn system_priority_classes(registry: &Registry) -> Result<(), ApiError> {
    let resource =
        registry.table.lookup("scheduling.k8s.io", "v1", "priorityclasses").expect("priorityclasses are built in");
    let scope = Scope { resource, namespace: None };
    let user = apiserver_user();
    let ctx = Context::internal(&user, &NoAdmission);
    for (name, value, description) in [
        (
            "system-node-critical",
            2_000_001_000i64,
            "Used for system critical pods that must not be moved from their current node.",
        ),
        (
            "system-cluster-critical",
            2_000_000_000,
            "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
        ),
    ] {
        if registry.get(&scope, name).await.is_ok() {
            continue;
        }
        let pc = json!({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value, "description": description,
            "preemptionPolicy": "PreemptLowerPriority",
        });
        match registry.create(&scope, pc, &ctx).await {
            Ok(_) => tracing::info!(name, "created system PriorityClass"),
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The ConfigMap that says since when legacy token use is tracked (upstream's
/// legacytokentracking controller): created with today's date, repaired if its date is
/// missing or malformed. The legacy token cleaner deletes nothing before a full clean-up
/// period has passed since that date.
pub async fn legacy_token_tracking(registry: &Registry) -> Result<(), ApiError> {
    const NAME: &str = "kube-apiserver-legacy-service-account-token-tracking";
    let resource = registry.table.lookup("", "v1", "configmaps").expect("configmaps are built in");
    let scope = Scope { resource, namespace: Some("kube-system".into()) };
    let user = apiserver_user();
    let ctx = Context::internal(&user, &NoAdmission);
    let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
    match registry.get(&scope, NAME).await {
        Ok(mut current) => {
            let since = current.pointer("/data/since").and_then(serde_json::Value::as_str).unwrap_or("");
            if jiff::civil::Date::strptime("%Y-%m-%d", since).is_ok() {
                return Ok(());
            }
            current["data"] = json!({"since": today});
            registry.update(&scope, NAME, current, None, &ctx).await.map(|_| ())
        }
        Err(e) if e.code == 404 => {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": "kube-system"},
                "data": {"since": today},
            });
            match registry.create(&scope, cm, &ctx).await {
                Err(e) if e.code != 409 => Err(e),
                _ => Ok(()),
            }
        }
        Err(e) => Err(e),
    }
}

/// Creates any missing system namespace.
pub async fn system_namespaces(registry: &Registry) -> Result<(), ApiError> {
    let namespaces = registry.table.lookup("", "v1", "namespaces").expect("namespaces are built in");
    let scope = Scope { resource: namespaces, namespace: None };
    let user = apiserver_user();
    let ctx = Context::internal(&user, &NoAdmission);
    for name in SYSTEM_NAMESPACES {
        match registry.get(&scope, name).await {
            Ok(_) => continue,
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        match registry.create(&scope, ns, &ctx).await {
            Ok(_) => tracing::info!(namespace = name, "created system namespace"),
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
