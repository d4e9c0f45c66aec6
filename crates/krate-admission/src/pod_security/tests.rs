//! Table-driven checks of every control at each level, and of version differences.

use serde_json::{Value, json};

use super::checks::checks_for;
use super::policy::{Level, LevelVersion, Policy, Version, detail};
use super::significant_pod_update;

/// A pod that passes restricted:latest; cases change it with a JSON merge patch.
fn restricted_pod() -> Value {
    json!({
        "metadata": {"name": "p"},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c",
                "image": "nginx",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}
            }]
        }
    })
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    b.remove(k);
                } else {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn pod_with(patch: Value) -> Value {
    let mut p = restricted_pod();
    merge(&mut p, &patch);
    p
}

fn container(patch: Value) -> Value {
    let mut c = restricted_pod()["spec"]["containers"][0].clone();
    merge(&mut c, &patch);
    c
}

fn eval(level: Level, version: Version, pod: &Value) -> String {
    detail(&LevelVersion { level, version }.evaluate(&pod["metadata"], &pod["spec"]))
}

const LATEST: Version = Version::Latest;

#[test]
fn the_restricted_pod_passes_every_level_and_version() {
    for minor in 0..=40 {
        for level in [Level::Privileged, Level::Baseline, Level::Restricted] {
            assert_eq!(eval(level, Version::Minor(minor), &restricted_pod()), "", "{level:?} v1.{minor}");
        }
    }
}

/// (name, pod, violation expected at baseline:latest, at restricted:latest)
fn cases() -> Vec<(&'static str, Value, &'static str, &'static str)> {
    vec![
        (
            "hostNetwork and hostPID",
            pod_with(json!({"spec": {"hostNetwork": true, "hostPID": true}})),
            "host namespaces (hostNetwork=true, hostPID=true)",
            "host namespaces (hostNetwork=true, hostPID=true)",
        ),
        (
            "hostIPC",
            pod_with(json!({"spec": {"hostIPC": true}})),
            "host namespaces (hostIPC=true)",
            "host namespaces (hostIPC=true)",
        ),
        (
            "privileged",
            pod_with(json!({"spec": {"containers": [container(json!({"securityContext": {"privileged": true}}))]}})),
            "privileged (container \"c\" must not set securityContext.privileged=true)",
            "privileged (container \"c\" must not set securityContext.privileged=true)",
        ),
        (
            "baseline capability added",
            pod_with(
                json!({"spec": {"containers": [container(json!({"securityContext": {"capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}}))]}}),
            ),
            "non-default capabilities (container \"c\" must not include \"NET_ADMIN\" in securityContext.capabilities.add)",
            "unrestricted capabilities (container \"c\" must not include \"CHOWN\", \"NET_ADMIN\" in securityContext.capabilities.add)",
        ),
        (
            "default capability without drop ALL",
            pod_with(
                json!({"spec": {"containers": [container(json!({"securityContext": {"capabilities": {"drop": null, "add": ["NET_BIND_SERVICE"]}}}))]}}),
            ),
            "",
            "unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"])",
        ),
        (
            "hostPath volume",
            pod_with(json!({"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}})),
            "hostPath volumes (volume \"h\")",
            "restricted volume types (volume \"h\" uses restricted volume type \"hostPath\")",
        ),
        (
            "nfs and gitRepo volumes",
            pod_with(
                json!({"spec": {"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}, {"name": "g", "gitRepo": {"repository": "r"}}]}}),
            ),
            "",
            "restricted volume types (volumes \"n\", \"g\" use restricted volume types \"gitRepo\", \"nfs\")",
        ),
        (
            "allowed volumes",
            pod_with(
                json!({"spec": {"volumes": [{"name": "e", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x"}}, {"name": "i", "image": {"reference": "x"}}]}}),
            ),
            "",
            "",
        ),
        (
            "host ports",
            pod_with(
                json!({"spec": {"containers": [container(json!({"ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81, "hostPort": 8081}]}))]}}),
            ),
            "hostPort (container \"c\" uses hostPorts 8080, 8081)",
            "hostPort (container \"c\" uses hostPorts 8080, 8081)",
        ),
        (
            "probe host",
            pod_with(
                json!({"spec": {"containers": [container(json!({"livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}))]}}),
            ),
            "probe or lifecycle host (container \"c\" uses probe or lifecycle host \"10.0.0.1\")",
            "probe or lifecycle host (container \"c\" uses probe or lifecycle host \"10.0.0.1\")",
        ),
        (
            "appArmor unconfined",
            pod_with(json!({"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}})),
            "forbidden AppArmor profile (pod must not set AppArmor profile type to \"Unconfined\")",
            "forbidden AppArmor profile (pod must not set AppArmor profile type to \"Unconfined\")",
        ),
        (
            "appArmor annotation",
            pod_with(
                json!({"metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}}),
            ),
            "forbidden AppArmor profile (annotation must not set AppArmor profile type to \"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\")",
            "forbidden AppArmor profile (annotation must not set AppArmor profile type to \"container.apparmor.security.beta.kubernetes.io/c=\"unconfined\"\")",
        ),
        (
            "seLinux type and user",
            pod_with(
                json!({"spec": {"containers": [container(json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}}))]}}),
            ),
            "seLinuxOptions (container \"c\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set)",
            "seLinuxOptions (container \"c\" set forbidden securityContext.seLinuxOptions: type \"spc_t\"; user may not be set)",
        ),
        (
            "seLinux role on the pod",
            pod_with(json!({"spec": {"securityContext": {"seLinuxOptions": {"role": "r"}}}})),
            "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: role may not be set)",
            "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: role may not be set)",
        ),
        (
            "procMount unmasked",
            pod_with(
                json!({"spec": {"containers": [container(json!({"securityContext": {"procMount": "Unmasked"}}))]}}),
            ),
            "procMount (container \"c\" must not set securityContext.procMount to \"Unmasked\")",
            "procMount (container \"c\" must not set securityContext.procMount to \"Unmasked\")",
        ),
        (
            "procMount unmasked in a user namespace",
            pod_with(
                json!({"spec": {"hostUsers": false, "containers": [container(json!({"securityContext": {"procMount": "Unmasked"}}))]}}),
            ),
            "",
            "procMount (container \"c\" must not set securityContext.procMount to \"Unmasked\")",
        ),
        (
            "seccomp unconfined on the pod",
            pod_with(json!({"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}})),
            "seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")",
            "seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")",
        ),
        (
            "seccomp unset",
            pod_with(json!({"spec": {"securityContext": {"seccompProfile": null}}})),
            "",
            "seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
        ),
        (
            "unsafe sysctl",
            pod_with(
                json!({"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_rmem", "value": "1"}]}}}),
            ),
            "forbidden sysctls (kernel.msgmax)",
            "forbidden sysctls (kernel.msgmax)",
        ),
        (
            "windows hostProcess",
            pod_with(
                json!({"spec": {"securityContext": {"windowsOptions": {"hostProcess": true}}, "containers": [container(json!({"securityContext": {"windowsOptions": {"hostProcess": true}}}))]}}),
            ),
            "hostProcess (pod and container \"c\" must not set securityContext.windowsOptions.hostProcess=true)",
            "hostProcess (pod and container \"c\" must not set securityContext.windowsOptions.hostProcess=true)",
        ),
        (
            "allowPrivilegeEscalation unset",
            pod_with(
                json!({"spec": {"containers": [container(json!({"securityContext": {"allowPrivilegeEscalation": null}}))]}}),
            ),
            "",
            "allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false)",
        ),
        (
            "runAsNonRoot false on a container",
            pod_with(json!({"spec": {"containers": [container(json!({"securityContext": {"runAsNonRoot": false}}))]}})),
            "",
            "runAsNonRoot != true (container \"c\" must not set securityContext.runAsNonRoot=false)",
        ),
        (
            "runAsNonRoot unset",
            pod_with(json!({"spec": {"securityContext": {"runAsNonRoot": null}}})),
            "",
            "runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true)",
        ),
        (
            "runAsUser 0",
            pod_with(json!({"spec": {"securityContext": {"runAsUser": 0}}})),
            "",
            "runAsUser=0 (pod must not set runAsUser=0)",
        ),
        (
            "root in a user namespace",
            pod_with(json!({"spec": {"hostUsers": false, "securityContext": {"runAsUser": 0, "runAsNonRoot": null}}})),
            "",
            "",
        ),
    ]
}

#[test]
fn every_control_at_baseline_and_restricted() {
    for (name, pod, baseline, restricted) in cases() {
        assert_eq!(eval(Level::Privileged, LATEST, &pod), "", "{name}: privileged allows everything");
        assert_eq!(eval(Level::Baseline, LATEST, &pod), baseline, "{name}: baseline");
        assert_eq!(eval(Level::Restricted, LATEST, &pod), restricted, "{name}: restricted");
    }
}

#[test]
fn violations_are_reported_baseline_first_then_by_check() {
    let pod = json!({"metadata": {"name": "p"}, "spec": {"hostNetwork": true, "containers": [{"name": "nginx", "image": "nginx"}]}});
    assert_eq!(
        eval(Level::Restricted, LATEST, &pod),
        "host namespaces (hostNetwork=true), \
         allowPrivilegeEscalation != false (container \"nginx\" must set securityContext.allowPrivilegeEscalation=false), \
         unrestricted capabilities (container \"nginx\" must set securityContext.capabilities.drop=[\"ALL\"]), \
         runAsNonRoot != true (pod or container \"nginx\" must set securityContext.runAsNonRoot=true), \
         seccompProfile (pod or container \"nginx\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
}

#[test]
fn containers_of_every_kind_are_checked_and_pluralized() {
    let pod = json!({"spec": {
        "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
        "containers": [{"name": "c", "securityContext": {"privileged": true}}],
        "ephemeralContainers": [{"name": "e", "securityContext": {"privileged": true}}]
    }});
    assert_eq!(
        eval(Level::Baseline, LATEST, &pod),
        "privileged (containers \"i\", \"c\", \"e\" must not set securityContext.privileged=true)"
    );
}

#[test]
fn version_differences() {
    let sysctl =
        |name: &str| pod_with(json!({"spec": {"securityContext": {"sysctls": [{"name": name, "value": "1"}]}}}));
    // Sysctls allowed from the version that added them on.
    for (name, since) in [
        ("net.ipv4.ip_local_reserved_ports", 27),
        ("net.ipv4.tcp_keepalive_time", 29),
        ("net.ipv4.tcp_fin_timeout", 29),
        ("net.ipv4.tcp_rmem", 32),
        ("net.ipv4.tcp_wmem", 32),
    ] {
        let before = eval(Level::Baseline, Version::Minor(since - 1), &sysctl(name));
        assert_eq!(before, format!("forbidden sysctls ({name})"));
        assert_eq!(eval(Level::Baseline, Version::Minor(since), &sysctl(name)), "", "{name} in v1.{since}");
    }
    // runAsUser=0 is restricted from 1.23 on.
    let root = pod_with(json!({"spec": {"securityContext": {"runAsUser": 0}}}));
    assert_eq!(eval(Level::Restricted, Version::Minor(22), &root), "");
    assert_eq!(eval(Level::Restricted, Version::Minor(23), &root), "runAsUser=0 (pod must not set runAsUser=0)");
    // Dropping ALL capabilities is required from 1.22; before, baseline's rule applies.
    let keeps =
        pod_with(json!({"spec": {"containers": [container(json!({"securityContext": {"capabilities": null}}))]}}));
    assert_eq!(eval(Level::Restricted, Version::Minor(21), &keeps), "");
    assert!(eval(Level::Restricted, Version::Minor(22), &keeps).starts_with("unrestricted capabilities"));
    // Restricted seccomp fields from 1.19.
    let unset = pod_with(json!({"spec": {"securityContext": {"seccompProfile": null}}}));
    assert_eq!(eval(Level::Restricted, Version::Minor(18), &unset), "");
    assert!(eval(Level::Restricted, Version::Minor(19), &unset).starts_with("seccompProfile"));
    // Probe hosts from 1.34.
    let probe = pod_with(
        json!({"spec": {"containers": [container(json!({"readinessProbe": {"tcpSocket": {"host": "h", "port": 1}}}))]}}),
    );
    assert_eq!(eval(Level::Baseline, Version::Minor(33), &probe), "");
    assert!(eval(Level::Baseline, Version::Minor(34), &probe).starts_with("probe or lifecycle host"));
    // container_engine_t is allowed from 1.31.
    let engine = pod_with(json!({"spec": {"securityContext": {"seLinuxOptions": {"type": "container_engine_t"}}}}));
    assert!(eval(Level::Baseline, Version::Minor(30), &engine).starts_with("seLinuxOptions"));
    assert_eq!(eval(Level::Baseline, Version::Minor(31), &engine), "");
    // Unmasked procMount in a user namespace is baseline from 1.35.
    let unmasked = pod_with(
        json!({"spec": {"hostUsers": false, "containers": [container(json!({"securityContext": {"procMount": "Unmasked"}}))]}}),
    );
    assert!(eval(Level::Baseline, Version::Minor(34), &unmasked).starts_with("procMount"));
    assert_eq!(eval(Level::Baseline, Version::Minor(35), &unmasked), "");
    // Windows pods skip the Linux-only restricted controls from 1.25.
    let windows = json!({"spec": {"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "c"}]}});
    assert!(eval(Level::Restricted, Version::Minor(24), &windows).contains("allowPrivilegeEscalation"));
    assert_eq!(eval(Level::Restricted, Version::Minor(25), &windows), "");
    // Versions past the newest known act as latest.
    assert_eq!(eval(Level::Restricted, Version::Minor(99), &root), eval(Level::Restricted, LATEST, &root));
}

#[test]
fn seccomp_annotations_before_field_versions() {
    let pod = json!({"metadata": {"annotations": {"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}}, "spec": {"containers": [{"name": "c"}]}});
    assert_eq!(
        eval(Level::Baseline, Version::Minor(18), &pod),
        "seccompProfile (forbidden annotation seccomp.security.alpha.kubernetes.io/pod=\"unconfined\")"
    );
    assert_eq!(eval(Level::Baseline, Version::Minor(19), &pod), "");
}

#[test]
fn restricted_checks_replace_their_baseline_counterparts() {
    let ids = |level, minor| checks_for(level, minor).into_iter().map(|(id, _)| id).collect::<Vec<_>>();
    let latest = ids(Level::Restricted, 36);
    for gone in ["capabilities_baseline", "seccompProfile_baseline", "hostPathVolumes", "procMount"] {
        assert!(!latest.contains(&gone), "{gone}");
    }
    assert!(ids(Level::Restricted, 21).contains(&"capabilities_baseline"));
    assert!(ids(Level::Baseline, 36).contains(&"procMount"));
    assert!(ids(Level::Privileged, 36).is_empty());
}

#[test]
fn labels_give_policies_with_defaults_and_errors() {
    let labels = |v: Value| v.as_object().cloned();
    let (p, errs) = Policy::from_labels(
        labels(json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.25"}))
            .as_ref(),
        &Policy::default(),
    );
    assert!(errs.is_empty());
    assert_eq!(p.enforce.to_string(), "baseline:v1.25");
    // Warn follows enforce when it is not set.
    assert_eq!(p.warn.to_string(), "baseline:v1.25");
    assert_eq!(p.audit.to_string(), "privileged:latest");

    let (p, _) = Policy::from_labels(
        labels(
            json!({"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/warn": "restricted"}),
        )
        .as_ref(),
        &Policy::default(),
    );
    assert_eq!(p.warn.to_string(), "restricted:latest");

    let (p, errs) = Policy::from_labels(
        labels(
            json!({"pod-security.kubernetes.io/enforce": "strict", "pod-security.kubernetes.io/audit-version": "1.25"}),
        )
        .as_ref(),
        &Policy::default(),
    );
    assert_eq!(errs.len(), 2);
    assert_eq!(errs[0].detail, "must be one of privileged, baseline, restricted");
    assert_eq!(errs[1].detail, "must be 'latest' or 'v1.x'");
    // Invalid levels fail closed, and do not raise warn.
    assert_eq!(p.enforce.level, Level::Restricted);
    assert_eq!(p.warn.level, Level::Privileged);

    for bad in ["v1", "v2.1", "v1.05", "v1.x", "1.2", ""] {
        assert_eq!(Version::parse(bad), None, "{bad}");
    }
    assert_eq!(Version::parse("v1.0"), Some(Version::Minor(0)));

    let defaults = Policy { enforce: LevelVersion { level: Level::Baseline, version: LATEST }, ..Policy::default() };
    let (p, _) = Policy::from_labels(None, &defaults);
    assert_eq!(p.enforce.level, Level::Baseline);
    assert_eq!(p.compact(), "enforce=baseline:latest");
    assert_eq!(Policy::default().compact(), "privileged");
}

#[test]
fn pod_updates_checked_only_when_significant() {
    let old = restricted_pod();
    let mut labels = old.clone();
    labels["metadata"]["labels"] = json!({"a": "b"});
    assert!(!significant_pod_update(&labels, &old));
    let mut image = old.clone();
    image["spec"]["containers"][0]["image"] = json!("nginx:2");
    assert!(significant_pod_update(&image, &old));
    let mut ephemeral = old.clone();
    ephemeral["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]);
    assert!(significant_pod_update(&ephemeral, &old));
    assert!(!significant_pod_update(&ephemeral, &ephemeral.clone()));
    let mut seccomp = old.clone();
    seccomp["metadata"]["annotations"] = json!({"seccomp.security.alpha.kubernetes.io/pod": "unconfined"});
    assert!(significant_pod_update(&seccomp, &old));
}
