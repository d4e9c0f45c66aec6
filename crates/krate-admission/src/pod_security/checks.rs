//! The Pod Security Standards' checks, as upstream's k8s.io/pod-security-admission/policy
//! defines them: each check has an ID, a level, and revisions that apply from a policy
//! version on. A failed check gives a short reason and a detail naming what was wrong;
//! the messages are upstream's, since clients and people match on them.

use std::collections::BTreeSet;

use serde_json::Value;

use super::policy::Level;

/// What a failed check reports: reason ("privileged") and detail (which containers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

/// One revision of a check: metadata and spec of the pod (template) in, a violation out.
pub type CheckFn = fn(&Value, &Value) -> Option<Violation>;

pub struct Check {
    pub id: &'static str,
    pub level: Level,
    /// (first policy minor version, check) in increasing order.
    pub versions: &'static [(u32, CheckFn)],
    /// Baseline checks this (restricted) check replaces from a minor version on.
    pub overrides: &'static [(u32, &'static str)],
}

/// Every check, baseline then restricted, each group sorted by ID: upstream reports
/// violations in that order.
pub static CHECKS: &[Check] = &[
    Check { id: "appArmorProfile", level: Level::Baseline, versions: &[(0, app_armor)], overrides: &[] },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        versions: &[(0, capabilities_baseline)],
        overrides: &[],
    },
    Check { id: "hostNamespaces", level: Level::Baseline, versions: &[(0, host_namespaces)], overrides: &[] },
    Check { id: "hostPathVolumes", level: Level::Baseline, versions: &[(0, host_path_volumes)], overrides: &[] },
    Check { id: "hostPorts", level: Level::Baseline, versions: &[(0, host_ports)], overrides: &[] },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Level::Baseline,
        versions: &[(34, host_probes_and_lifecycle)],
        overrides: &[],
    },
    Check { id: "privileged", level: Level::Baseline, versions: &[(0, privileged)], overrides: &[] },
    Check {
        id: "procMount",
        level: Level::Baseline,
        versions: &[(0, proc_mount), (35, proc_mount_baseline_1_35)],
        overrides: &[],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        versions: &[(0, selinux_1_0), (31, selinux_1_31)],
        overrides: &[],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        versions: &[(0, seccomp_baseline_1_0), (19, seccomp_baseline_1_19)],
        overrides: &[],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        versions: &[(0, sysctls_1_0), (27, sysctls_1_27), (29, sysctls_1_29), (32, sysctls_1_32)],
        overrides: &[],
    },
    Check { id: "windowsHostProcess", level: Level::Baseline, versions: &[(0, windows_host_process)], overrides: &[] },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        versions: &[(8, allow_privilege_escalation_1_8), (25, allow_privilege_escalation_1_25)],
        overrides: &[],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        versions: &[(22, capabilities_restricted_1_22), (25, capabilities_restricted_1_25)],
        overrides: &[(22, "capabilities_baseline")],
    },
    Check {
        id: "procMount_restricted",
        level: Level::Restricted,
        versions: &[(35, proc_mount)],
        overrides: &[(35, "procMount")],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        versions: &[(0, restricted_volumes)],
        overrides: &[(0, "hostPathVolumes")],
    },
    Check { id: "runAsNonRoot", level: Level::Restricted, versions: &[(0, run_as_non_root)], overrides: &[] },
    Check { id: "runAsUser", level: Level::Restricted, versions: &[(23, run_as_user)], overrides: &[] },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        versions: &[(19, seccomp_restricted_1_19), (25, seccomp_restricted_1_25)],
        overrides: &[(19, "seccompProfile_baseline")],
    },
];

/// The checks a level and policy minor version run, in report order.
pub fn checks_for(level: Level, minor: u32) -> Vec<(&'static str, CheckFn)> {
    if level == Level::Privileged {
        return Vec::new();
    }
    let active = |c: &Check| c.versions.iter().rev().find(|(min, _)| *min <= minor).map(|(_, f)| *f);
    let overridden: BTreeSet<&str> = CHECKS
        .iter()
        .filter(|c| level == Level::Restricted && c.level == Level::Restricted)
        .flat_map(|c| c.overrides.iter().filter(|(min, _)| *min <= minor).map(|(_, id)| *id))
        .collect();
    CHECKS
        .iter()
        .filter(|c| c.level == Level::Baseline || level == Level::Restricted)
        .filter(|c| !overridden.contains(c.id))
        .filter_map(|c| active(c).map(|f| (c.id, f)))
        .collect()
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation { reason: reason.into(), detail: detail.into() })
}

pub fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items.iter().map(|s| format!("\"{}\"", s.as_ref())).collect::<Vec<_>>().join(", ")
}

pub fn pluralize<'a>(singular: &'a str, plural: &'a str, n: usize) -> &'a str {
    if n == 1 { singular } else { plural }
}

/// "container \"a\"" / "containers \"a\", \"b\"".
fn containers_phrase(names: &[String]) -> String {
    format!("{} {}", pluralize("container", "containers", names.len()), join_quote(names))
}

/// Init, regular and ephemeral containers, as upstream's visitor walks them.
fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |f| spec.get(f).and_then(Value::as_array).into_iter().flatten())
}

fn cname(c: &Value) -> String {
    c.get("name").and_then(Value::as_str).unwrap_or_default().to_string()
}

fn csc<'a>(c: &'a Value, field: &str) -> Option<&'a Value> {
    c.get("securityContext").and_then(|s| s.get(field)).filter(|v| !v.is_null())
}

fn psc<'a>(spec: &'a Value, field: &str) -> Option<&'a Value> {
    spec.get("securityContext").and_then(|s| s.get(field)).filter(|v| !v.is_null())
}

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool) == Some(true)
}

fn str_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or_default()
}

fn is_windows(spec: &Value) -> bool {
    spec.pointer("/os/name").and_then(Value::as_str) == Some("windows")
}

/// Pods in a user namespace (hostUsers: false) get the relaxations of KEP-127.
fn in_user_namespace(spec: &Value) -> bool {
    spec.get("hostUsers").and_then(Value::as_bool) == Some(false)
}

fn annotations(meta: &Value) -> impl Iterator<Item = (&String, &str)> {
    meta.get("annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k, v.as_str().unwrap_or_default()))
}

/// "pod and containers \"a\"": who set a forbidden value.
fn setters(pod: bool, bad: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if pod {
        out.push("pod".to_string());
    }
    if !bad.is_empty() {
        out.push(containers_phrase(bad));
    }
    out
}

fn app_armor(meta: &Value, spec: &Value) -> Option<Violation> {
    let allowed = |p: &Value| matches!(p.get("type").and_then(Value::as_str), Some("RuntimeDefault" | "Localhost"));
    let mut bad_values = BTreeSet::new();
    let mut pod = false;
    if let Some(p) = psc(spec, "appArmorProfile")
        && !allowed(p)
    {
        pod = true;
        bad_values.insert(str_of(p.get("type")).to_string());
    }
    let mut bad = Vec::new();
    for c in containers(spec) {
        if let Some(p) = csc(c, "appArmorProfile")
            && !allowed(p)
        {
            bad.push(cname(c));
            bad_values.insert(str_of(p.get("type")).to_string());
        }
    }
    let mut setters = setters(pod, &bad);
    let mut values: Vec<String> = bad_values.into_iter().collect();
    let mut forbidden: Vec<String> = annotations(meta)
        .filter(|(k, v)| {
            k.starts_with("container.apparmor.security.beta.kubernetes.io/")
                && !(v.is_empty() || *v == "runtime/default" || v.starts_with("localhost/"))
        })
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    if !forbidden.is_empty() {
        forbidden.sort();
        setters.push(pluralize("annotation", "annotations", forbidden.len()).to_string());
        values.extend(forbidden);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize("forbidden AppArmor profile", "forbidden AppArmor profiles", values.len()),
        format!("{} must not set AppArmor profile type to {}", setters.join(" and "), join_quote(&values)),
    )
}

const CAPABILITIES_ALLOWED_1_0: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn added_capabilities(c: &Value) -> impl Iterator<Item = &str> {
    csc(c, "capabilities")
        .and_then(|caps| caps.get("add"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn capabilities_baseline(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for cap in added_capabilities(c) {
            if !CAPABILITIES_ALLOWED_1_0.contains(&cap) {
                valid = false;
                caps.insert(cap.to_string());
            }
        }
        if !valid {
            bad.push(cname(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<_> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(_: &Value, spec: &Value) -> Option<Violation> {
    let set: Vec<&str> =
        [("hostNetwork", "hostNetwork=true"), ("hostPID", "hostPID=true"), ("hostIPC", "hostIPC=true")]
            .into_iter()
            .filter(|(f, _)| is_true(spec.get(*f)))
            .map(|(_, s)| s)
            .collect();
    if set.is_empty() { None } else { violation("host namespaces", set.join(", ")) }
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec.get("volumes").and_then(Value::as_array).into_iter().flatten()
}

fn host_path_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> =
        volumes(spec).filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null())).map(cname).collect();
    if bad.is_empty() {
        return None;
    }
    violation("hostPath volumes", format!("{} {}", pluralize("volume", "volumes", bad.len()), join_quote(&bad)))
}

fn host_ports(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    // Sorted as strings, as upstream's string set lists them.
    let mut ports = BTreeSet::new();
    for c in containers(spec) {
        let mut valid = true;
        for p in c.get("ports").and_then(Value::as_array).into_iter().flatten() {
            if let Some(hp) = p.get("hostPort").and_then(Value::as_i64)
                && hp != 0
            {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(cname(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<_> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn host_probes_and_lifecycle(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = BTreeSet::new();
    let mut hosts = BTreeSet::new();
    for c in containers(spec) {
        let handlers = ["livenessProbe", "readinessProbe", "startupProbe"]
            .iter()
            .filter_map(|p| c.get(*p))
            .chain(["postStart", "preStop"].iter().filter_map(|h| c.get("lifecycle").and_then(|l| l.get(*h))));
        for handler in handlers {
            for kind in ["httpGet", "tcpSocket"] {
                let host = str_of(handler.get(kind).and_then(|k| k.get("host")));
                if !host.is_empty() {
                    bad.insert(cname(c));
                    hosts.insert(host.to_string());
                }
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    let bad: Vec<_> = bad.into_iter().collect();
    let hosts: Vec<_> = hosts.into_iter().collect();
    violation(
        "probe or lifecycle host",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("probe or lifecycle host", "probe or lifecycle hosts", hosts.len()),
            join_quote(&hosts)
        ),
    )
}

fn privileged(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec).filter(|c| is_true(csc(c, "privileged"))).map(cname).collect();
    if bad.is_empty() {
        return None;
    }
    violation("privileged", format!("{} must not set securityContext.privileged=true", containers_phrase(&bad)))
}

fn proc_mount(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(spec) {
        if let Some(pm) = csc(c, "procMount").and_then(Value::as_str)
            && pm != "Default"
        {
            bad.push(cname(c));
            types.insert(pm.to_string());
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<_> = types.into_iter().collect();
    violation(
        "procMount",
        format!("{} must not set securityContext.procMount to {}", containers_phrase(&bad), join_quote(&types)),
    )
}

fn proc_mount_baseline_1_35(meta: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) { None } else { proc_mount(meta, spec) }
}

fn selinux(spec: &Value, allowed_types: &[&str]) -> Option<Violation> {
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut check = |opts: &Value| {
        let mut valid = true;
        let t = str_of(opts.get("type"));
        if !allowed_types.contains(&t) {
            valid = false;
            bad_types.insert(t.to_string());
        }
        if !str_of(opts.get("user")).is_empty() {
            valid = false;
            set_user = true;
        }
        if !str_of(opts.get("role")).is_empty() {
            valid = false;
            set_role = true;
        }
        valid
    };
    let pod = psc(spec, "seLinuxOptions").is_some_and(|o| !check(o));
    let bad: Vec<String> =
        containers(spec).filter(|c| csc(c, "seLinuxOptions").is_some_and(|o| !check(o))).map(cname).collect();
    let who = setters(pod, &bad);
    if who.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<_> = bad_types.into_iter().collect();
        data.push(format!("{} {}", pluralize("type", "types", types.len()), join_quote(&types)));
    }
    if set_user {
        data.push("user may not be set".to_string());
    }
    if set_role {
        data.push("role may not be set".to_string());
    }
    violation(
        "seLinuxOptions",
        format!("{} set forbidden securityContext.seLinuxOptions: {}", who.join(" and "), data.join("; ")),
    )
}

fn selinux_1_0(_: &Value, spec: &Value) -> Option<Violation> {
    selinux(spec, &["", "container_t", "container_init_t", "container_kvm_t"])
}

fn selinux_1_31(_: &Value, spec: &Value) -> Option<Violation> {
    selinux(spec, &["", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"])
}

fn seccomp_baseline_1_0(meta: &Value, _: &Value) -> Option<Violation> {
    let mut bad: Vec<String> = annotations(meta)
        .filter(|(k, v)| {
            (k.as_str() == "seccomp.security.alpha.kubernetes.io/pod"
                || k.starts_with("container.seccomp.security.alpha.kubernetes.io/"))
                && *v == "unconfined"
        })
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    if bad.is_empty() {
        return None;
    }
    bad.sort();
    violation(
        "seccompProfile",
        format!("forbidden {} {}", pluralize("annotation", "annotations", bad.len()), bad.join(", ")),
    )
}

fn valid_seccomp(profile: &Value) -> bool {
    matches!(profile.get("type").and_then(Value::as_str), Some("RuntimeDefault" | "Localhost"))
}

fn seccomp_baseline_1_19(_: &Value, spec: &Value) -> Option<Violation> {
    let mut out = Vec::new();
    if let Some(p) = psc(spec, "seccompProfile")
        && !valid_seccomp(p)
    {
        out.push(format!("pod must not set securityContext.seccompProfile.type to \"{}\"", str_of(p.get("type"))));
    }
    let mut bad = Vec::new();
    let mut values = BTreeSet::new();
    for c in containers(spec) {
        if let Some(p) = csc(c, "seccompProfile")
            && !valid_seccomp(p)
        {
            bad.push(cname(c));
            values.insert(str_of(p.get("type")).to_string());
        }
    }
    if !bad.is_empty() {
        let values: Vec<_> = values.into_iter().collect();
        out.push(format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            containers_phrase(&bad),
            join_quote(&values)
        ));
    }
    if out.is_empty() { None } else { violation("seccompProfile", out.join("; ")) }
}

const SYSCTLS_1_0: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
];
const SYSCTLS_1_27: &[&str] = &["net.ipv4.ip_local_reserved_ports"];
const SYSCTLS_1_29: &[&str] = &[
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];
const SYSCTLS_1_32: &[&str] = &["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"];

fn sysctls(spec: &Value, allowed: &[&[&str]]) -> Option<Violation> {
    let bad: Vec<&str> = psc(spec, "sysctls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|s| str_of(s.get("name")))
        .filter(|n| !allowed.iter().any(|set| set.contains(n)))
        .collect();
    if bad.is_empty() { None } else { violation("forbidden sysctls", bad.join(", ")) }
}

fn sysctls_1_0(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0])
}
fn sysctls_1_27(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27])
}
fn sysctls_1_29(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29])
}
fn sysctls_1_32(_: &Value, spec: &Value) -> Option<Violation> {
    sysctls(spec, &[SYSCTLS_1_0, SYSCTLS_1_27, SYSCTLS_1_29, SYSCTLS_1_32])
}

fn windows_host_process(_: &Value, spec: &Value) -> Option<Violation> {
    let host_process = |w: Option<&Value>| is_true(w.and_then(|w| w.get("hostProcess")));
    let pod = host_process(psc(spec, "windowsOptions"));
    let bad: Vec<String> = containers(spec).filter(|c| host_process(csc(c, "windowsOptions"))).map(cname).collect();
    let who = setters(pod, &bad);
    if who.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!("{} must not set securityContext.windowsOptions.hostProcess=true", who.join(" and ")),
    )
}

fn allow_privilege_escalation_1_8(_: &Value, spec: &Value) -> Option<Violation> {
    let bad: Vec<String> = containers(spec)
        .filter(|c| csc(c, "allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false))
        .map(cname)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!("{} must set securityContext.allowPrivilegeEscalation=false", containers_phrase(&bad)),
    )
}

/// From 1.25 some restricted checks leave Windows pods alone (their settings do not exist there).
fn allow_privilege_escalation_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) { None } else { allow_privilege_escalation_1_8(meta, spec) }
}

fn capabilities_restricted_1_22(_: &Value, spec: &Value) -> Option<Violation> {
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut forbidden = BTreeSet::new();
    for c in containers(spec) {
        let Some(caps) = csc(c, "capabilities") else {
            missing_drop.push(cname(c));
            continue;
        };
        let dropped_all =
            caps.get("drop").and_then(Value::as_array).into_iter().flatten().any(|d| d.as_str() == Some("ALL"));
        if !dropped_all {
            missing_drop.push(cname(c));
        }
        let mut added_forbidden = false;
        for cap in added_capabilities(c) {
            if cap != "NET_BIND_SERVICE" {
                added_forbidden = true;
                forbidden.insert(cap.to_string());
            }
        }
        if added_forbidden {
            adding.push(cname(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details
            .push(format!("{} must set securityContext.capabilities.drop=[\"ALL\"]", containers_phrase(&missing_drop)));
    }
    if !adding.is_empty() {
        let caps: Vec<_> = forbidden.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() { None } else { violation("unrestricted capabilities", details.join("; ")) }
}

fn capabilities_restricted_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) { None } else { capabilities_restricted_1_22(meta, spec) }
}

const ALLOWED_VOLUME_SOURCES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
];
const RESTRICTED_VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(_: &Value, spec: &Value) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in volumes(spec) {
        let set = |f: &&str| v.get(*f).is_some_and(|s| !s.is_null());
        if ALLOWED_VOLUME_SOURCES.iter().any(set) {
            continue;
        }
        bad.push(cname(v));
        let kind = RESTRICTED_VOLUME_SOURCES.iter().find(|f| set(f)).copied().unwrap_or("unknown");
        types.insert(kind.to_string());
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<_> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("restricted volume type", "restricted volume types", types.len()),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(_: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    let pod_value = psc(spec, "runAsNonRoot").and_then(Value::as_bool);
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match csc(c, "runAsNonRoot").and_then(Value::as_bool) {
            Some(false) => explicit.push(cname(c)),
            Some(true) => {}
            None if pod_value != Some(true) => implicit.push(cname(c)),
            None => {}
        }
    }
    let who = setters(pod_value == Some(false), &explicit);
    if !who.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!("{} must not set securityContext.runAsNonRoot=false", who.join(" and ")),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "runAsNonRoot != true",
        format!("pod or {} must set securityContext.runAsNonRoot=true", containers_phrase(&implicit)),
    )
}

fn run_as_user(_: &Value, spec: &Value) -> Option<Violation> {
    if in_user_namespace(spec) {
        return None;
    }
    let zero = |v: Option<&Value>| v.and_then(Value::as_i64) == Some(0);
    let bad: Vec<String> = containers(spec).filter(|c| zero(csc(c, "runAsUser"))).map(cname).collect();
    let who = setters(zero(psc(spec, "runAsUser")), &bad);
    if who.is_empty() {
        return None;
    }
    violation("runAsUser=0", format!("{} must not set runAsUser=0", who.join(" and ")))
}

fn seccomp_restricted_1_19(_: &Value, spec: &Value) -> Option<Violation> {
    let mut values = BTreeSet::new();
    let mut pod_bad = false;
    let mut pod_set = false;
    if let Some(p) = psc(spec, "seccompProfile") {
        if valid_seccomp(p) {
            pod_set = true;
        } else {
            pod_bad = true;
            values.insert(str_of(p.get("type")).to_string());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(spec) {
        match csc(c, "seccompProfile") {
            Some(p) if !valid_seccomp(p) => {
                explicit.push(cname(c));
                values.insert(str_of(p.get("type")).to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(cname(c)),
            None => {}
        }
    }
    let who = setters(pod_bad, &explicit);
    if !who.is_empty() {
        let values: Vec<_> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                who.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if implicit.is_empty() {
        return None;
    }
    violation(
        "seccompProfile",
        format!(
            "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
            containers_phrase(&implicit)
        ),
    )
}

fn seccomp_restricted_1_25(meta: &Value, spec: &Value) -> Option<Violation> {
    if is_windows(spec) { None } else { seccomp_restricted_1_19(meta, spec) }
}
