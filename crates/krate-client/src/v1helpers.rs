//! Helpers over core/v1 types that several components need, as upstream's
//! k8s.io/api/core/v1 helper methods are shared by the scheduler, the kubelet and the
//! controllers.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Container, Pod, Taint, Toleration};

/// Whether `toleration` tolerates `taint` (upstream's Toleration.ToleratesTaint): the
/// effect matches or is empty, the key matches or is empty, and the operator is Exists
/// or (Equal, the default) the values match.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    if let Some(effect) = toleration.effect.as_deref().filter(|e| !e.is_empty())
        && effect != taint.effect
    {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or(""),
        _ => false,
    }
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The names of the Secrets a pod refers to (upstream's VisitPodSecretNames): image pull
/// secrets, env and envFrom of every container, and secret-backed volumes.
pub fn pod_secret_names(pod: &Pod) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let Some(spec) = &pod.spec else { return names };
    let mut add = |name: Option<&String>| {
        if let Some(n) = name.filter(|n| !n.is_empty()) {
            names.insert(n.clone());
        }
    };
    for s in spec.image_pull_secrets.iter().flatten() {
        add(Some(&s.name));
    }
    let env_refs = |c: &Container| {
        let env =
            c.env.iter().flatten().filter_map(|e| e.value_from.as_ref()?.secret_key_ref.as_ref()).map(|r| &r.name);
        let from = c.env_from.iter().flatten().filter_map(|e| e.secret_ref.as_ref()).map(|r| &r.name);
        env.chain(from).cloned().collect::<Vec<String>>()
    };
    let containers = spec.containers.iter().chain(spec.init_containers.iter().flatten());
    for name in containers.flat_map(env_refs) {
        add(Some(&name));
    }
    for c in spec.ephemeral_containers.iter().flatten() {
        for e in c.env.iter().flatten() {
            add(e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).map(|r| &r.name));
        }
        for e in c.env_from.iter().flatten() {
            add(e.secret_ref.as_ref().map(|r| &r.name));
        }
    }
    for v in spec.volumes.iter().flatten() {
        add(v.secret.as_ref().and_then(|s| s.secret_name.as_ref()));
        add(v.azure_file.as_ref().map(|a| &a.secret_name));
        add(v.cephfs.as_ref().and_then(|c| c.secret_ref.as_ref()).map(|r| &r.name));
        add(v.cinder.as_ref().and_then(|c| c.secret_ref.as_ref()).map(|r| &r.name));
        add(v.flex_volume.as_ref().and_then(|f| f.secret_ref.as_ref()).map(|r| &r.name));
        add(v.rbd.as_ref().and_then(|r| r.secret_ref.as_ref()).map(|r| &r.name));
        add(v.scale_io.as_ref().map(|s| &s.secret_ref.name));
        add(v.iscsi.as_ref().and_then(|i| i.secret_ref.as_ref()).map(|r| &r.name));
        add(v.storageos.as_ref().and_then(|s| s.secret_ref.as_ref()).map(|r| &r.name));
        add(v.csi.as_ref().and_then(|c| c.node_publish_secret_ref.as_ref()).map(|r| &r.name));
        let sources = v.projected.as_ref().and_then(|p| p.sources.as_ref());
        for src in sources.into_iter().flatten() {
            add(src.secret.as_ref().map(|s| &s.name));
        }
    }
    names
}

#[cfg(test)]
mod pod_secret_tests {
    use super::*;

    #[test]
    fn every_kind_of_secret_reference_is_found() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "imagePullSecrets": [{"name": "pull"}],
                "initContainers": [{"name": "i", "envFrom": [{"secretRef": {"name": "init-from"}}]}],
                "containers": [{"name": "c", "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "env-key", "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "not-a-secret", "key": "k"}}},
                ]}],
                "ephemeralContainers": [{"name": "e", "envFrom": [{"secretRef": {"name": "debug-from"}}]}],
                "volumes": [
                    {"name": "s", "secret": {"secretName": "vol"}},
                    {"name": "p", "projected": {"sources": [{"secret": {"name": "projected"}}, {"configMap": {"name": "cm"}}]}},
                    {"name": "c", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                ],
            },
        }))
        .unwrap();
        let names: Vec<_> = pod_secret_names(&pod).into_iter().collect();
        assert_eq!(names, ["csi", "debug-from", "env-key", "init-from", "projected", "pull", "vol"]);
    }
}
