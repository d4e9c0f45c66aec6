//! Pods and pod templates: upstream's `SetDefaults_PodSpec`/`SetDefaults_Container`/
//! `SetDefaults_Pod` defaults, the defaults the ServiceAccount and Priority admission
//! plugins add to new pods, the QoS class, and `ValidatePodSpec` with the rules for
//! containers, init and ephemeral containers, volumes, mounts, ports, env, probes and
//! resources. Workloads (Deployments, Jobs, ...) validate their templates through
//! [`validate_pod_template`].

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::quantity::Quantity;
use super::{array_of, each_mut, has, int_of, obj_mut, set_default, set_default_str, str_of};
use crate::error::Cause;
use crate::validation::{
    NEGATIVE_MSG, dns1123_label_errors, dns1123_subdomain_errors, duplicate_str, env_var_name_errors, invalid_int,
    invalid_raw, invalid_str, ip_errors, label_value_errors, nonnegative, not_found, port_name_errors, port_num_errors,
    qualified_name_errors, validate_annotations, validate_labels,
};

const NULL: Value = Value::Null;

/// The volume sources, in the order upstream checks them; with the child name
/// upstream's "more than 1 volume type" error uses (two carry upstream's spelling).
const VOLUME_SOURCES: [(&str, &str); 30] = [
    ("emptyDir", "emptyDir"),
    ("hostPath", "hostPath"),
    ("gitRepo", "gitRepo"),
    ("gcePersistentDisk", "gcePersistentDisk"),
    ("awsElasticBlockStore", "awsElasticBlockStore"),
    ("secret", "secret"),
    ("nfs", "nfs"),
    ("iscsi", "iscsi"),
    ("glusterfs", "glusterfs"),
    ("flocker", "flocker"),
    ("persistentVolumeClaim", "persistentVolumeClaim"),
    ("rbd", "rbd"),
    ("cinder", "cinder"),
    ("cephfs", "cephFS"),
    ("quobyte", "quobyte"),
    ("downwardAPI", "downwarAPI"),
    ("fc", "fc"),
    ("flexVolume", "flexVolume"),
    ("configMap", "configMap"),
    ("azureFile", "azureFile"),
    ("vsphereVolume", "vsphereVolume"),
    ("photonPersistentDisk", "photonPersistentDisk"),
    ("portworxVolume", "portworxVolume"),
    ("azureDisk", "azureDisk"),
    ("storageos", "storageos"),
    ("projected", "projected"),
    ("scaleIO", "scaleIO"),
    ("csi", "csi"),
    ("ephemeral", "ephemeral"),
    ("image", "image"),
];

const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";

// ---------------------------------------------------------------- defaults

/// The tag upstream's `ParseImageName` finds ("latest" when neither tag nor digest is
/// given); None when the reference does not parse.
fn image_tag(image: &str) -> Option<String> {
    if image.is_empty() || image.trim() != image || image.contains(char::is_whitespace) {
        return None;
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let (repo_last, tag) = match last.rsplit_once(':') {
        Some((r, t)) => (r, Some(t)),
        None => (last, None),
    };
    // The repository path (everything but a registry host) must be lowercase.
    let mut parts: Vec<&str> = name.split('/').collect();
    let lastidx = parts.len() - 1;
    parts[lastidx] = repo_last;
    let has_domain = parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost");
    let path = if has_domain { &parts[1..] } else { &parts[..] };
    if path.iter().any(|p| p.is_empty() || p.bytes().any(|c| c.is_ascii_uppercase())) {
        return None;
    }
    match (tag, digest) {
        (Some(t), _) if !t.is_empty() => Some(t.to_string()),
        (None, None) => Some("latest".into()),
        _ => Some(String::new()),
    }
}

/// Always when the tag is `latest` (or absent), IfNotPresent otherwise.
fn default_pull_policy(image: &str) -> &'static str {
    if image_tag(image).as_deref() == Some("latest") { "Always" } else { "IfNotPresent" }
}

/// Canonical quantities, rounded up to milli, as every ResourceList is.
pub(crate) fn default_resource_list(list: &mut Value) {
    if let Some(m) = list.as_object_mut() {
        for v in m.values_mut() {
            if let Ok(mut q) = Quantity::from_json(v) {
                q.round_up(-3);
                *v = Value::String(q.canonical());
            }
        }
    }
}

fn default_requirements(r: &mut Value) {
    for k in ["limits", "requests"] {
        if let Some(l) = r.get_mut(k) {
            default_resource_list(l);
        }
    }
}

fn set_default_nonzero(v: &mut Value, key: &str, value: i64) {
    if v.is_object() && int_of(v, key).unwrap_or(0) == 0 {
        v[key] = json!(value);
    }
}

fn default_http_get(h: &mut Value) {
    if let Some(g) = h.get_mut("httpGet").filter(|g| g.is_object()) {
        set_default_str(g, "path", "/");
        set_default_str(g, "scheme", "HTTP");
    }
}

fn default_probe(p: &mut Value) {
    if !p.is_object() {
        return;
    }
    set_default_nonzero(p, "timeoutSeconds", 1);
    set_default_nonzero(p, "periodSeconds", 10);
    set_default_nonzero(p, "successThreshold", 1);
    set_default_nonzero(p, "failureThreshold", 3);
    default_http_get(p);
    if let Some(g) = p.get_mut("grpc").filter(|g| g.is_object()) {
        set_default(g, "service", json!(""));
    }
}

fn default_field_ref(holder: &mut Value) {
    if let Some(f) = holder.get_mut("fieldRef").filter(|f| f.is_object()) {
        set_default_str(f, "apiVersion", "v1");
    }
}

/// `SetDefaults_Container` and the defaults of what a container holds.
fn default_container(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let policy = default_pull_policy(str_of(c, "image"));
    set_default_str(c, "imagePullPolicy", policy);
    set_default_str(c, "terminationMessagePath", "/dev/termination-log");
    set_default_str(c, "terminationMessagePolicy", "File");
    // A struct upstream always serializes.
    set_default(c, "resources", json!({}));
    for p in each_mut(c, "ports") {
        set_default_str(p, "protocol", "TCP");
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe) {
            default_probe(p);
        }
    }
    if let Some(l) = c.get_mut("lifecycle") {
        for h in ["postStart", "preStop"] {
            if let Some(h) = l.get_mut(h) {
                default_http_get(h);
            }
        }
    }
    for e in each_mut(c, "env") {
        if let Some(vf) = e.get_mut("valueFrom") {
            default_field_ref(vf);
        }
    }
    if let Some(r) = c.get_mut("resources") {
        default_requirements(r);
    }
}

/// `SetDefaults_Volume` and the defaults of the volume sources.
fn default_volume(v: &mut Value) {
    if !v.is_object() {
        return;
    }
    if !VOLUME_SOURCES.iter().any(|(k, _)| has(v, k)) {
        v["emptyDir"] = json!({});
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(src).filter(|s| s.is_object()) {
            set_default(s, "defaultMode", json!(420));
        }
    }
    if let Some(d) = v.get_mut("downwardAPI") {
        for item in each_mut(d, "items") {
            default_field_ref(item);
        }
    }
    if let Some(p) = v.get_mut("projected") {
        for s in each_mut(p, "sources") {
            if let Some(t) = s.get_mut("serviceAccountToken").filter(|t| t.is_object()) {
                set_default(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = s.get_mut("downwardAPI") {
                for item in each_mut(d, "items") {
                    default_field_ref(item);
                }
            }
        }
    }
    if let Some(h) = v.get_mut("hostPath").filter(|h| h.is_object()) {
        set_default(h, "type", json!(""));
    }
    if let Some(e) = v.get_mut("emptyDir").filter(|e| e.is_object())
        && let Some(limit) = e.get_mut("sizeLimit")
        && let Ok(q) = Quantity::from_json(limit)
    {
        *limit = Value::String(q.canonical());
    }
    if let Some(spec) = v.pointer_mut("/ephemeral/volumeClaimTemplate/spec").filter(|s| s.is_object()) {
        super::storage::default_pvc_spec(spec);
    }
    if let Some(i) = v.get_mut("image").filter(|i| i.is_object()) {
        let policy = default_pull_policy(str_of(i, "reference"));
        set_default_str(i, "pullPolicy", policy);
    }
}

/// `SetDefaults_PodSpec` and everything nested in a pod spec; applies to pods and
/// to the templates of workloads alike.
pub fn default_pod_spec(spec: &mut Value) {
    if !spec.is_object() {
        *spec = json!({});
    }
    set_default_str(spec, "dnsPolicy", "ClusterFirst");
    set_default_str(spec, "restartPolicy", "Always");
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default_str(spec, "schedulerName", "default-scheduler");
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in each_mut(spec, list) {
            default_container(c);
        }
    }
    for v in each_mut(spec, "volumes") {
        default_volume(v);
    }
    if let Some(r) = spec.get_mut("resources") {
        default_requirements(r);
    }
    if let Some(o) = spec.get_mut("overhead") {
        default_resource_list(o);
    }
    // The deprecated serviceAccount mirrors serviceAccountName (upstream's conversion).
    let sa = match str_of(spec, "serviceAccountName") {
        "" => str_of(spec, "serviceAccount").to_string(),
        name => name.to_string(),
    };
    let m = spec.as_object_mut().expect("an object");
    if sa.is_empty() {
        m.remove("serviceAccount");
    } else {
        m.insert("serviceAccountName".into(), json!(sa));
        m.insert("serviceAccount".into(), json!(sa));
    }
}

/// The defaults of a pod template: its metadata is an object, its spec defaulted.
pub fn default_pod_template(tmpl: &mut Value) {
    if !tmpl.is_object() {
        *tmpl = json!({});
    }
    default_pod_spec(obj_mut(tmpl, "spec"));
}

/// `SetDefaults_Pod`: what only pods (not templates) get.
pub fn default_pod(pod: &mut Value) {
    let spec = obj_mut(pod, "spec");
    default_pod_spec(spec);
    // Requests default to limits.
    for list in ["containers", "initContainers"] {
        for c in each_mut(spec, list) {
            let Some(limits) = c.pointer("/resources/limits").and_then(Value::as_object).cloned() else { continue };
            if limits.is_empty() {
                continue;
            }
            let requests = obj_mut(obj_mut(c, "resources"), "requests");
            for (k, v) in limits {
                set_default(requests, &k, v);
            }
        }
    }
    set_default(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
        for list in ["containers", "initContainers"] {
            for c in each_mut(spec, list) {
                for p in each_mut(c, "ports") {
                    if int_of(p, "hostPort").unwrap_or(0) == 0
                        && let Some(cp) = p.get("containerPort").cloned()
                    {
                        p["hostPort"] = cp;
                    }
                }
            }
        }
    }
}

/// What admission adds to a new pod upstream: the ServiceAccount plugin's default
/// service account (the Priority plugin, in krate-admission, sets the priority).
pub fn admit_new_pod(pod: &mut Value) {
    super::placement::merge_label_keys(pod);
    let mirror = pod.pointer("/metadata/annotations/kubernetes.io~1config.mirror").is_some();
    let spec = obj_mut(pod, "spec");
    if !mirror && str_of(spec, "serviceAccountName").is_empty() {
        spec["serviceAccountName"] = json!("default");
        spec["serviceAccount"] = json!("default");
    }
}

/// Adds a container's positive cpu and memory quantities from `list` into `sums`; returns
/// which of the two it had.
fn add_compute_resources<'a>(list: Option<&'a Value>, sums: &mut HashMap<&'a str, Quantity>) -> HashSet<&'a str> {
    let mut found = HashSet::new();
    for (name, v) in list.and_then(Value::as_object).into_iter().flatten() {
        let name = name.as_str();
        if !matches!(name, "cpu" | "memory") {
            continue;
        }
        if let Ok(q) = Quantity::from_json(v)
            && !q.is_zero()
            && !q.is_negative()
        {
            found.insert(name);
            let sum = sums.get(name).map_or(q, |s| s.add(&q));
            sums.insert(name, sum);
        }
    }
    found
}

/// Upstream's `ComputePodQOS` over the (defaulted) containers and init containers.
pub fn qos_class(pod: &Value) -> &'static str {
    let spec = pod.get("spec").unwrap_or(&NULL);
    let mut requests: HashMap<&str, Quantity> = HashMap::new();
    let mut limits: HashMap<&str, Quantity> = HashMap::new();
    let mut guaranteed = true;
    for c in array_of(spec, "containers").iter().chain(array_of(spec, "initContainers")) {
        add_compute_resources(c.pointer("/resources/requests"), &mut requests);
        let found = add_compute_resources(c.pointer("/resources/limits"), &mut limits);
        if !(found.contains("cpu") && found.contains("memory")) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed {
        for (name, req) in &requests {
            if limits.get(name).is_none_or(|l| l.cmp_q(req) != std::cmp::Ordering::Equal) {
                guaranteed = false;
                break;
            }
        }
    }
    if guaranteed && requests.len() == limits.len() { "Guaranteed" } else { "Burstable" }
}

// ---------------------------------------------------------------- validation

/// Where a pod spec is validated: in a pod, or in a workload's template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecOpts {
    pub is_pod: bool,
}

/// `ValidatePodSpec` plus the pod-only container rules (`validatePodMetadataAndSpec`).
pub fn validate_pod(pod: &Value) -> Vec<Cause> {
    let spec = pod.get("spec").unwrap_or(&NULL);
    let mut causes = validate_pod_spec(spec, "spec", SpecOpts { is_pod: true });
    for list in ["containers", "initContainers"] {
        for (i, c) in array_of(spec, list).iter().enumerate() {
            causes.extend(image_whitespace(c, &format!("spec.{list}[{i}]")));
        }
    }
    causes
}

fn image_whitespace(c: &Value, path: &str) -> Option<Cause> {
    let image = str_of(c, "image");
    (image.trim() != image)
        .then(|| invalid_str(format!("{path}.image"), image, "must not have leading or trailing whitespace"))
}

/// `ValidatePodTemplateSpec`: a workload's template at `path` (e.g. "spec.template").
pub fn validate_pod_template(tmpl: &Value, path: &str) -> Vec<Cause> {
    let mut causes = template_metadata(tmpl, path);
    let spec = tmpl.get("spec").unwrap_or(&NULL);
    causes.extend(validate_pod_spec(spec, &format!("{path}.spec"), SpecOpts { is_pod: false }));
    if !array_of(spec, "ephemeralContainers").is_empty() {
        causes.push(Cause::forbidden(
            format!("{path}.spec.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }
    causes
}

/// The labels and annotations of a template (upstream's paths: `<path>.labels`).
pub fn template_metadata(tmpl: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if let Some(l) = tmpl.pointer("/metadata/labels").and_then(Value::as_object) {
        causes.extend(validate_labels(l, &format!("{path}.labels")));
    }
    if let Some(a) = tmpl.pointer("/metadata/annotations").and_then(Value::as_object) {
        causes.extend(validate_annotations(a, &format!("{path}.annotations")));
    }
    causes
}

/// `ValidatePodSpec` at `path`.
pub fn validate_pod_spec(spec: &Value, path: &str, opts: SpecOpts) -> Vec<Cause> {
    let mut c = Vec::new();
    let at = |f: &str| format!("{path}.{f}");
    let grace = int_of(spec, "terminationGracePeriodSeconds");
    if !has(spec, "terminationGracePeriodSeconds") {
        c.push(Cause::required(at("terminationGracePeriodSeconds"), ""));
    }
    let vols = validate_volumes(spec, &at("volumes"), opts, &mut c);
    validate_containers(spec, &vols, grace, &at("containers"), &mut c);
    validate_init_containers(spec, &vols, grace, &at("initContainers"), &mut c);
    validate_ephemeral_containers(spec, &vols, &at("ephemeralContainers"), &mut c);
    validate_host_network(spec, path, opts, &mut c);
    validate_enum_required(spec, "restartPolicy", &at("restartPolicy"), &["Always", "OnFailure", "Never"], &mut c);
    validate_enum_required(
        spec,
        "dnsPolicy",
        &at("dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        &mut c,
    );
    if let Some(ns) = spec.get("nodeSelector").and_then(Value::as_object) {
        c.extend(validate_labels(ns, &at("nodeSelector")));
    }
    validate_pod_security_context(spec, &at("securityContext"), &mut c);
    validate_dns_config(spec, &at("dnsConfig"), &mut c);
    for (i, g) in array_of(spec, "readinessGates").iter().enumerate() {
        let t = str_of(g, "conditionType");
        for msg in qualified_name_errors(t) {
            c.push(invalid_str(format!("{path}.readinessGates[{i}].conditionType"), t, msg));
        }
    }
    let mut gates = HashSet::new();
    for (i, g) in array_of(spec, "schedulingGates").iter().enumerate() {
        let n = str_of(g, "name");
        for msg in qualified_name_errors(n) {
            c.push(invalid_str(format!("{path}.schedulingGates[{i}]"), n, msg));
        }
        if !gates.insert(n) {
            c.push(duplicate_str(format!("{path}.schedulingGates[{i}]"), n));
        }
    }
    for field in ["serviceAccountName", "nodeName"] {
        let v = str_of(spec, field);
        if !v.is_empty() {
            for msg in dns1123_subdomain_errors(v) {
                c.push(invalid_str(at(field), v, msg));
            }
        }
    }
    if let Some(v) = spec.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
        let n = v.as_i64().unwrap_or(0);
        if !(1..=i32::MAX as i64).contains(&n) {
            c.push(invalid_int(at("activeDeadlineSeconds"), n, "must be between 1 and 2147483647, inclusive"));
        }
    }
    for field in ["hostname", "subdomain"] {
        let v = str_of(spec, field);
        if !v.is_empty() {
            for msg in dns1123_label_errors(v) {
                c.push(invalid_str(at(field), v, msg));
            }
        }
    }
    validate_tolerations(array_of(spec, "tolerations"), &at("tolerations"), &mut c);
    super::placement::validate_placement(spec, path, &mut c);
    for (i, h) in array_of(spec, "hostAliases").iter().enumerate() {
        let ip = str_of(h, "ip");
        for msg in ip_errors(ip) {
            c.push(invalid_str(format!("{path}.hostAliases[{i}].ip"), ip, msg));
        }
        for (j, name) in array_of(h, "hostnames").iter().enumerate() {
            let name = name.as_str().unwrap_or("");
            for msg in dns1123_subdomain_errors(name) {
                c.push(invalid_str(format!("{path}.hostAliases[{i}].hostnames[{j}]"), name, msg));
            }
        }
    }
    for field in ["priorityClassName", "runtimeClassName"] {
        if let Some(v) =
            spec.get(field).and_then(Value::as_str).filter(|v| field == "runtimeClassName" || !v.is_empty())
        {
            for msg in dns1123_subdomain_errors(v) {
                c.push(invalid_str(at(field), v, msg));
            }
        }
    }
    if has(spec, "preemptionPolicy") {
        validate_enum_required(
            spec,
            "preemptionPolicy",
            &at("preemptionPolicy"),
            &["PreemptLowerPriority", "Never"],
            &mut c,
        );
    }
    if let Some(os) = spec.get("os").filter(|o| o.is_object()) {
        match str_of(os, "name") {
            "" => c.push(Cause::required(at("os.name"), "cannot be empty")),
            "linux" | "windows" => {}
            other => c.push(Cause::not_supported(at("os"), other, &["linux", "windows"])),
        }
    }
    c
}

/// An enum that is required (defaulting fills it): `""` is Required, anything else
/// outside `allowed` NotSupported.
fn validate_enum_required(v: &Value, key: &str, field: &str, allowed: &[&str], c: &mut Vec<Cause>) {
    match str_of(v, key) {
        "" => c.push(Cause::required(field, "")),
        x if allowed.contains(&x) => {}
        x => c.push(Cause::not_supported(field, x, allowed)),
    }
}

// ---- volumes

/// Validates the volumes; returns the valid ones (name → source kind), which mounts
/// may reference.
fn validate_volumes(spec: &Value, path: &str, opts: SpecOpts, c: &mut Vec<Cause>) -> HashMap<String, String> {
    let mut vols = HashMap::new();
    for (i, vol) in array_of(spec, "volumes").iter().enumerate() {
        let at = format!("{path}[{i}]");
        let name = str_of(vol, "name");
        let mut el = Vec::new();
        let mut kind = String::new();
        let mut n = 0;
        for (key, child) in VOLUME_SOURCES {
            let Some(src) = vol.get(key).filter(|s| !s.is_null()) else { continue };
            if n > 0 {
                el.push(Cause::forbidden(format!("{at}.{child}"), "may not specify more than 1 volume type"));
                continue;
            }
            n += 1;
            kind = key.to_string();
            validate_volume_source(key, src, &format!("{at}.{key}"), opts, &mut el);
        }
        if n == 0 {
            el.push(Cause::required(&at, "must specify a volume type"));
        }
        if name.is_empty() {
            el.push(Cause::required(format!("{at}.name"), ""));
        } else {
            for msg in dns1123_label_errors(name) {
                el.push(invalid_str(format!("{at}.name"), name, msg));
            }
        }
        if vols.contains_key(name) {
            el.push(duplicate_str(format!("{at}.name"), name));
        }
        if el.is_empty() {
            vols.insert(name.to_string(), kind);
        } else {
            c.extend(el);
        }
    }
    vols
}

fn validate_default_mode(src: &Value, key: &str, at: &str, c: &mut Vec<Cause>) {
    if let Some(m) = int_of(src, key)
        && !(0..=0o777).contains(&m)
    {
        c.push(invalid_int(format!("{at}.{key}"), m, FILE_MODE_MSG));
    }
}

fn validate_local_descending_path(p: &str, field: &str, c: &mut Vec<Cause>) {
    if p.starts_with('/') {
        c.push(invalid_str(field, p, "must be a relative path"));
    }
    if p.split('/').any(|part| part == "..") {
        c.push(invalid_str(field, p, "must not contain '..'"));
    }
}

fn validate_local_non_reserved_path(p: &str, field: &str, c: &mut Vec<Cause>) {
    validate_local_descending_path(p, field, c);
    if p.starts_with("..") {
        c.push(invalid_str(field, p, "must not start with '..'"));
    }
}

fn validate_key_to_path(items: &[Value], at: &str, c: &mut Vec<Cause>) {
    for (i, kp) in items.iter().enumerate() {
        let ip = format!("{at}.items[{i}]");
        if str_of(kp, "key").is_empty() {
            c.push(Cause::required(format!("{ip}.key"), ""));
        }
        let p = str_of(kp, "path");
        if p.is_empty() {
            c.push(Cause::required(format!("{ip}.path"), ""));
        }
        validate_local_non_reserved_path(p, &format!("{ip}.path"), c);
        validate_default_mode(kp, "mode", &ip, c);
    }
}

fn validate_volume_source(key: &str, src: &Value, at: &str, opts: SpecOpts, c: &mut Vec<Cause>) {
    let required = |c: &mut Vec<Cause>, field: &str| {
        if str_of(src, field).is_empty() {
            c.push(Cause::required(format!("{at}.{field}"), ""));
            true
        } else {
            false
        }
    };
    match key {
        "emptyDir" => {
            if let Some(q) = src.get("sizeLimit").and_then(|q| Quantity::from_json(q).ok())
                && q.is_negative()
            {
                c.push(Cause::forbidden(
                    format!("{at}.sizeLimit"),
                    "SizeLimit field must be a valid resource quantity",
                ));
            }
        }
        "hostPath" => {
            if required(c, "path") {
                return;
            }
            let p = str_of(src, "path");
            if p.split('/').any(|part| part == "..") {
                c.push(invalid_str(format!("{at}.path"), p, "must not contain '..'"));
            }
            const TYPES: [&str; 8] =
                ["", "BlockDevice", "CharDevice", "Directory", "DirectoryOrCreate", "File", "FileOrCreate", "Socket"];
            let t = str_of(src, "type");
            if !TYPES.contains(&t) {
                c.push(Cause::not_supported(format!("{at}.type"), t, &TYPES));
            }
        }
        "secret" => {
            required(c, "secretName");
            validate_default_mode(src, "defaultMode", at, c);
            validate_key_to_path(array_of(src, "items"), at, c);
        }
        "configMap" => {
            required(c, "name");
            validate_default_mode(src, "defaultMode", at, c);
            validate_key_to_path(array_of(src, "items"), at, c);
        }
        "persistentVolumeClaim" => {
            required(c, "claimName");
        }
        "nfs" => {
            required(c, "server");
            required(c, "path");
            let p = str_of(src, "path");
            if !p.starts_with('/') {
                c.push(invalid_str(format!("{at}.path"), p, "must be an absolute path"));
            }
        }
        "downwardAPI" => {
            validate_default_mode(src, "defaultMode", at, c);
            for item in array_of(src, "items") {
                let p = str_of(item, "path");
                if p.is_empty() {
                    c.push(Cause::required(format!("{at}.path"), ""));
                }
                validate_local_non_reserved_path(p, &format!("{at}.path"), c);
                if let Some(f) = item.get("fieldRef").filter(|f| !f.is_null()) {
                    validate_object_field_selector(f, &VOLUME_FIELD_PATHS, &format!("{at}.fieldRef"), c);
                    if has(item, "resourceFieldRef") {
                        c.push(invalid_str(
                            at,
                            "resource",
                            "fieldRef and resourceFieldRef can not be specified simultaneously",
                        ));
                    }
                } else if let Some(r) = item.get("resourceFieldRef").filter(|r| !r.is_null()) {
                    validate_resource_field_selector(r, &format!("{at}.resourceFieldRef"), true, c);
                } else {
                    c.push(Cause::required(at, "one of fieldRef and resourceFieldRef is required"));
                }
                validate_default_mode(item, "mode", at, c);
            }
        }
        "projected" => {
            validate_default_mode(src, "defaultMode", at, c);
            for (i, s) in array_of(src, "sources").iter().enumerate() {
                let sp = format!("{at}.sources[{i}]");
                let mut n = 0;
                for kind in [
                    "secret",
                    "configMap",
                    "downwardAPI",
                    "serviceAccountToken",
                    "clusterTrustBundle",
                    "podCertificate",
                ] {
                    let Some(x) = s.get(kind).filter(|x| !x.is_null()) else { continue };
                    n += 1;
                    let kp = format!("{sp}.{kind}");
                    match kind {
                        "secret" | "configMap" => {
                            if str_of(x, "name").is_empty() {
                                c.push(Cause::required(format!("{kp}.name"), ""));
                            }
                            validate_key_to_path(array_of(x, "items"), &kp, c);
                        }
                        "serviceAccountToken" => {
                            let exp = int_of(x, "expirationSeconds").unwrap_or(3600);
                            if exp < 600 {
                                c.push(invalid_int(
                                    format!("{kp}.expirationSeconds"),
                                    exp,
                                    "may not specify a duration less than 10 minutes",
                                ));
                            } else if exp > 1 << 32 {
                                c.push(invalid_int(
                                    format!("{kp}.expirationSeconds"),
                                    exp,
                                    "may not specify a duration larger than 2^32 seconds",
                                ));
                            }
                            if str_of(x, "path").is_empty() {
                                c.push(Cause::required(format!("{kp}.path"), ""));
                            }
                        }
                        _ => {}
                    }
                }
                if n > 1 {
                    c.push(Cause::forbidden(&sp, "may not specify more than 1 volume type per source"));
                }
            }
        }
        "csi" => {
            required(c, "driver");
        }
        "ephemeral" if !has(src, "volumeClaimTemplate") => {
            c.push(Cause::required(format!("{at}.volumeClaimTemplate"), ""));
        }
        "image" => {
            if opts.is_pod {
                required(c, "reference");
            }
            let p = str_of(src, "pullPolicy");
            if !p.is_empty() && !["Always", "IfNotPresent", "Never"].contains(&p) {
                c.push(Cause::not_supported(format!("{at}.pullPolicy"), p, &["Always", "IfNotPresent", "Never"]));
            }
        }
        _ => {}
    }
}

// ---- containers

const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const VOLUME_FIELD_PATHS: [&str; 5] =
    ["metadata.annotations", "metadata.labels", "metadata.name", "metadata.namespace", "metadata.uid"];
/// The field paths upstream's `ConvertDownwardAPIFieldLabel` accepts for v1.
const CONVERTIBLE_FIELD_PATHS: [&str; 14] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "spec.schedulerName",
    "status.phase",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];
const RESOURCE_FIELD_PATHS: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// `metadata.labels['key']` → ("metadata.labels", "key").
fn split_subscript(p: &str) -> Option<(&str, &str)> {
    let (base, rest) = p.split_once("['")?;
    let key = rest.strip_suffix("']")?;
    Some((base, key))
}

fn validate_object_field_selector(f: &Value, allowed: &[&str], at: &str, c: &mut Vec<Cause>) {
    if str_of(f, "apiVersion").is_empty() {
        c.push(Cause::required(format!("{at}.apiVersion"), ""));
        return;
    }
    let fp = str_of(f, "fieldPath");
    if fp.is_empty() {
        c.push(Cause::required(format!("{at}.fieldPath"), ""));
        return;
    }
    let convertible = match split_subscript(fp) {
        Some((base, _)) => base == "metadata.annotations" || base == "metadata.labels",
        None => CONVERTIBLE_FIELD_PATHS.contains(&fp),
    };
    if !convertible {
        c.push(invalid_str(
            format!("{at}.fieldPath"),
            fp,
            format!("error converting fieldPath: field label not supported: {fp}"),
        ));
        return;
    }
    match split_subscript(fp) {
        Some(("metadata.annotations", key)) => {
            for msg in qualified_name_errors(&key.to_lowercase()) {
                c.push(invalid_str(at, &key.to_lowercase(), msg));
            }
        }
        Some(("metadata.labels", key)) => {
            for msg in qualified_name_errors(key) {
                c.push(invalid_str(at, key, msg));
            }
        }
        Some((base, _)) => c.push(invalid_str(at, base, "does not support subscript")),
        None => {
            if !allowed.contains(&fp) {
                c.push(Cause::not_supported(format!("{at}.fieldPath"), fp, allowed));
            }
        }
    }
}

fn validate_resource_field_selector(r: &Value, at: &str, volume: bool, c: &mut Vec<Cause>) {
    let res = str_of(r, "resource");
    if volume && str_of(r, "containerName").is_empty() {
        c.push(Cause::required(format!("{at}.containerName"), ""));
    } else if res.is_empty() {
        c.push(Cause::required(format!("{at}.resource"), ""));
    } else if !RESOURCE_FIELD_PATHS.contains(&res)
        && !res.starts_with("requests.hugepages-")
        && !res.starts_with("limits.hugepages-")
    {
        c.push(Cause::not_supported(format!("{at}.resource"), res, &RESOURCE_FIELD_PATHS));
    }
}

fn validate_key_selector(s: &Value, at: &str, c: &mut Vec<Cause>) {
    let name = str_of(s, "name");
    for msg in dns1123_subdomain_errors(name) {
        c.push(invalid_str(format!("{at}.name"), name, msg));
    }
    let key = str_of(s, "key");
    if key.is_empty() {
        c.push(Cause::required(format!("{at}.key"), ""));
    } else {
        for msg in crate::validation::config_key_errors(key) {
            c.push(invalid_str(format!("{at}.key"), key, msg));
        }
    }
}

fn validate_env(ctr: &Value, path: &str, c: &mut Vec<Cause>) {
    for (i, ev) in array_of(ctr, "env").iter().enumerate() {
        let at = format!("{path}.env[{i}]");
        let name = str_of(ev, "name");
        if name.is_empty() {
            c.push(Cause::required(format!("{at}.name"), ""));
        } else {
            for msg in env_var_name_errors(name) {
                c.push(invalid_str(format!("{at}.name"), name, msg));
            }
        }
        let Some(vf) = ev.get("valueFrom").filter(|v| !v.is_null()) else { continue };
        let vp = format!("{at}.valueFrom");
        let mut n = 0;
        if let Some(f) = vf.get("fieldRef").filter(|f| !f.is_null()) {
            n += 1;
            validate_object_field_selector(f, &ENV_FIELD_PATHS, &format!("{vp}.fieldRef"), c);
        }
        if let Some(r) = vf.get("resourceFieldRef").filter(|r| !r.is_null()) {
            n += 1;
            validate_resource_field_selector(r, &format!("{vp}.resourceFieldRef"), false, c);
        }
        for kind in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(s) = vf.get(kind).filter(|s| !s.is_null()) {
                n += 1;
                validate_key_selector(s, &format!("{vp}.{kind}"), c);
            }
        }
        if n == 0 {
            c.push(invalid_str(
                &vp,
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !str_of(ev, "value").is_empty() {
            c.push(invalid_str(&vp, "", "may not be specified when `value` is not empty"));
        } else if n > 1 {
            c.push(invalid_str(&vp, "", "may not have more than one field specified at a time"));
        }
    }
    for (i, ef) in array_of(ctr, "envFrom").iter().enumerate() {
        let at = format!("{path}.envFrom[{i}]");
        let prefix = str_of(ef, "prefix");
        if !prefix.is_empty() {
            for msg in env_var_name_errors(prefix) {
                c.push(invalid_str(format!("{at}.prefix"), prefix, msg));
            }
        }
        let mut n = 0;
        for kind in ["configMapRef", "secretRef"] {
            let Some(r) = ef.get(kind).filter(|r| !r.is_null()) else { continue };
            n += 1;
            let name = str_of(r, "name");
            if name.is_empty() {
                c.push(Cause::required(format!("{at}.{kind}.name"), ""));
            } else {
                // Validated as a prefix: a trailing dash is allowed.
                let probe = match name.strip_suffix('-') {
                    Some(rest) if !rest.is_empty() => format!("{rest}a"),
                    _ => name.to_string(),
                };
                for msg in dns1123_subdomain_errors(&probe) {
                    c.push(invalid_str(format!("{at}.{kind}.name"), name, msg));
                }
            }
        }
        if n == 0 {
            c.push(invalid_str(format!("{path}.envFrom"), "", "must specify one of: `configMapRef` or `secretRef`"));
        } else if n > 1 {
            c.push(invalid_str(format!("{path}.envFrom"), "", "may not have more than one field specified at a time"));
        }
    }
}

fn validate_ports(ctr: &Value, path: &str, c: &mut Vec<Cause>) {
    let mut names = HashSet::new();
    for (i, port) in array_of(ctr, "ports").iter().enumerate() {
        let at = format!("{path}.ports[{i}]");
        let name = str_of(port, "name");
        if !name.is_empty() {
            let errs = port_name_errors(name);
            if !errs.is_empty() {
                for msg in errs {
                    c.push(invalid_str(format!("{at}.name"), name, msg));
                }
            } else if !names.insert(name) {
                c.push(duplicate_str(format!("{at}.name"), name));
            }
        }
        match int_of(port, "containerPort").unwrap_or(0) {
            0 => c.push(Cause::required(format!("{at}.containerPort"), "")),
            n => {
                for msg in port_num_errors(n) {
                    c.push(invalid_int(format!("{at}.containerPort"), n, msg));
                }
            }
        }
        let hp = int_of(port, "hostPort").unwrap_or(0);
        if hp != 0 {
            for msg in port_num_errors(hp) {
                c.push(invalid_int(format!("{at}.hostPort"), hp, msg));
            }
        }
        match str_of(port, "protocol") {
            "" => c.push(Cause::required(format!("{at}.protocol"), "")),
            "TCP" | "UDP" | "SCTP" => {}
            p => c.push(Cause::not_supported(format!("{at}.protocol"), p, &["SCTP", "TCP", "UDP"])),
        }
    }
}

fn validate_mounts(ctr: &Value, path: &str, vols: &HashMap<String, String>, c: &mut Vec<Cause>) {
    let devices: HashMap<&str, &str> =
        array_of(ctr, "volumeDevices").iter().map(|d| (str_of(d, "name"), str_of(d, "devicePath"))).collect();
    let mounts: HashMap<&str, &str> =
        array_of(ctr, "volumeMounts").iter().map(|m| (str_of(m, "name"), str_of(m, "mountPath"))).collect();
    let mut mountpoints = HashSet::new();
    let mp = format!("{path}.volumeMounts");
    for (i, m) in array_of(ctr, "volumeMounts").iter().enumerate() {
        let at = format!("{mp}[{i}]");
        let name = str_of(m, "name");
        let mount_path = str_of(m, "mountPath");
        if name.is_empty() {
            c.push(Cause::required(format!("{at}.name"), ""));
        }
        if !vols.contains_key(name) {
            c.push(not_found(format!("{at}.name"), name));
        }
        if mount_path.is_empty() {
            c.push(Cause::required(format!("{at}.mountPath"), ""));
        }
        if !mountpoints.insert(mount_path) {
            c.push(invalid_str(format!("{at}.mountPath"), mount_path, "must be unique"));
        }
        if devices.contains_key(name) {
            c.push(invalid_str(format!("{at}.name"), name, "must not already exist in volumeDevices"));
        }
        if devices.values().any(|p| *p == mount_path) {
            c.push(invalid_str(
                format!("{at}.mountPath"),
                mount_path,
                "must not already exist as a path in volumeDevices",
            ));
        }
        let sub = str_of(m, "subPath");
        let sub_expr = str_of(m, "subPathExpr");
        if vols.get(name).is_some_and(|k| k == "image") {
            if !sub.is_empty() {
                c.push(invalid_str(format!("{at}.subPath"), sub, "not allowed in image volume sources"));
            }
            if !sub_expr.is_empty() {
                c.push(invalid_str(format!("{at}.subPathExpr"), sub_expr, "not allowed in image volume sources"));
            }
        }
        // Upstream reports these two at the list's path, not the item's.
        if !sub.is_empty() {
            validate_local_descending_path(sub, &format!("{mp}.subPath"), c);
        }
        if !sub_expr.is_empty() {
            if !sub.is_empty() {
                c.push(invalid_str(
                    format!("{at}.subPathExpr"),
                    sub_expr,
                    "subPathExpr and subPath are mutually exclusive",
                ));
            }
            validate_local_descending_path(sub_expr, &format!("{mp}.subPathExpr"), c);
        }
        if let Some(prop) = m.get("mountPropagation").and_then(Value::as_str) {
            let field = format!("{mp}.mountPropagation");
            const SUPPORTED: [&str; 3] = ["Bidirectional", "HostToContainer", "None"];
            if !SUPPORTED.contains(&prop) {
                c.push(Cause::not_supported(&field, prop, &SUPPORTED));
            }
            let privileged = ctr.pointer("/securityContext/privileged") == Some(&Value::Bool(true));
            if prop == "Bidirectional" && !privileged {
                c.push(Cause::forbidden(
                    &field,
                    "Bidirectional mount propagation is available only to privileged containers",
                ));
            }
        }
    }
    let mut device_names = HashSet::new();
    let mut device_paths = HashSet::new();
    for (i, d) in array_of(ctr, "volumeDevices").iter().enumerate() {
        let at = format!("{path}.volumeDevices[{i}]");
        let name = str_of(d, "name");
        let dp = str_of(d, "devicePath");
        if name.is_empty() {
            c.push(Cause::required(format!("{at}.name"), ""));
        }
        if device_names.contains(name) {
            c.push(invalid_str(format!("{at}.name"), name, "must be unique"));
        }
        match vols.get(name).map(String::as_str) {
            Some("persistentVolumeClaim" | "ephemeral") => {}
            Some(_) => c.push(invalid_str(
                format!("{at}.name"),
                name,
                "can only use volume source type of PersistentVolumeClaim or Ephemeral for block mode",
            )),
            None => c.push(not_found(format!("{at}.name"), name)),
        }
        if dp.is_empty() {
            c.push(Cause::required(format!("{at}.devicePath"), ""));
        }
        if device_paths.contains(dp) {
            c.push(invalid_str(format!("{at}.devicePath"), dp, "must be unique"));
        }
        if !dp.is_empty() && dp.split('/').any(|p| p == "..") {
            c.push(invalid_str(format!("{at}.devicePath"), dp, "can not contain backsteps ('..')"));
        } else {
            device_paths.insert(dp);
        }
        if mounts.contains_key(name) {
            c.push(invalid_str(format!("{at}.name"), name, "must not already exist in volumeMounts"));
        }
        if mounts.values().any(|p| *p == dp) {
            c.push(invalid_str(format!("{at}.devicePath"), dp, "must not already exist as a path in volumeMounts"));
        }
        if !name.is_empty() {
            device_names.insert(name);
        }
    }
}

const STANDARD_RESOURCES: [&str; 22] = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
    "services",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "storage",
    "requests.storage",
    "services.nodeports",
    "services.loadbalancers",
    "count",
    "requests.hugepages-",
];

fn is_hugepages(name: &str) -> bool {
    name.starts_with("hugepages-")
}

fn is_native(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

fn is_extended(name: &str) -> bool {
    !is_native(name) && !name.starts_with("requests.") && qualified_name_errors(&format!("requests.{name}")).is_empty()
}

fn overcommit_allowed(name: &str) -> bool {
    is_native(name) && !is_hugepages(name)
}

fn validate_container_resource_name(name: &str, field: &str, c: &mut Vec<Cause>) {
    let errs = qualified_name_errors(name);
    if !errs.is_empty() {
        for msg in errs {
            c.push(invalid_raw(field, name, msg));
        }
        return;
    }
    if !name.contains('/') {
        let standard = STANDARD_RESOURCES.contains(&name)
            || is_hugepages(name)
            || name.starts_with("requests.hugepages-")
            || name.starts_with("limits.hugepages-");
        if !standard {
            c.push(invalid_raw(field, name, "must be a standard resource type or fully qualified"));
        }
        if !matches!(name, "cpu" | "memory" | "ephemeral-storage") && !is_hugepages(name) {
            c.push(invalid_raw(field, name, "must be a standard resource for containers"));
        }
    } else if !is_native(name) && !is_extended(name) {
        c.push(invalid_raw(field, name, "doesn't follow extended resource name standard"));
    }
}

/// Parses and checks one quantity of a resource list; None when it does not parse.
fn checked_quantity(name: &str, v: &Value, field: &str, c: &mut Vec<Cause>) -> Option<Quantity> {
    let q = match Quantity::from_json(v) {
        Ok(q) => q,
        Err(msg) => {
            let raw = match v {
                Value::String(s) => crate::validation::go_quote(s),
                other => other.to_string(),
            };
            c.push(invalid_raw(field, raw, msg));
            return None;
        }
    };
    if q.is_negative() {
        c.push(invalid_str(field, &q.canonical(), NEGATIVE_MSG));
    }
    if is_extended(name) && !q.is_integer() {
        c.push(invalid_str(field, &q.canonical(), "must be an integer"));
    }
    if let Some(size) = name.strip_prefix("hugepages-").and_then(|s| Quantity::parse(s).ok())
        && !size.is_zero()
    {
        let divisible = q.is_integer() && {
            let (bytes, page) = (q.to_integer().unwrap_or(0), size.to_integer().unwrap_or(0));
            page > 0 && bytes % page == 0
        };
        if !divisible {
            c.push(invalid_str(
                field,
                &q.canonical(),
                format!("{} is not positive integer multiple of {name}", q.canonical()),
            ));
        }
    }
    Some(q)
}

fn validate_resources(ctr: &Value, path: &str, c: &mut Vec<Cause>) {
    let r = ctr.get("resources").unwrap_or(&NULL);
    let lim_path = format!("{path}.limits");
    let req_path = format!("{path}.requests");
    let empty = Map::new();
    let limits = r.get("limits").and_then(Value::as_object).unwrap_or(&empty);
    let requests = r.get("requests").and_then(Value::as_object).unwrap_or(&empty);
    let (mut lim_cm, mut req_cm, mut huge) = (false, false, false);
    let mut parsed_limits = HashMap::new();
    for (name, v) in limits {
        let field = format!("{lim_path}[{name}]");
        validate_container_resource_name(name, &field, c);
        if let Some(q) = checked_quantity(name, v, &field, c) {
            parsed_limits.insert(name.as_str(), q);
        }
        huge |= is_hugepages(name);
        lim_cm |= matches!(name.as_str(), "cpu" | "memory");
    }
    for (name, v) in requests {
        let field = format!("{req_path}[{name}]");
        validate_container_resource_name(name, &field, c);
        let q = checked_quantity(name, v, &field, c);
        match (q, parsed_limits.get(name.as_str())) {
            (Some(q), Some(limit)) => {
                let ord = q.cmp_q(limit);
                if ord != std::cmp::Ordering::Equal && !overcommit_allowed(name) {
                    c.push(invalid_str(
                        &req_path,
                        &q.canonical(),
                        format!("must be equal to {name} limit of {}", limit.canonical()),
                    ));
                } else if ord == std::cmp::Ordering::Greater {
                    c.push(invalid_str(
                        &req_path,
                        &q.canonical(),
                        format!("must be less than or equal to {name} limit of {}", limit.canonical()),
                    ));
                }
            }
            (_, None) if !limits.contains_key(name) && !overcommit_allowed(name) => {
                c.push(Cause::required(&lim_path, "Limit must be set for non overcommitable resources"));
            }
            _ => {}
        }
        huge |= is_hugepages(name);
        req_cm |= matches!(name.as_str(), "cpu" | "memory");
    }
    if huge && !lim_cm && !req_cm {
        c.push(Cause::forbidden(path, "HugePages require cpu or memory"));
    }
}

fn validate_port_num_or_name(v: &Value, field: &str, c: &mut Vec<Cause>) {
    match v {
        Value::String(s) => {
            for msg in port_name_errors(s) {
                c.push(invalid_str(field, s, msg));
            }
        }
        other => {
            let n = other.as_i64().unwrap_or(0);
            for msg in port_num_errors(n) {
                c.push(invalid_int(field, n, msg));
            }
        }
    }
}

/// `validateHandler`: exactly one of the kinds `allowed` lists.
fn validate_handler(h: &Value, path: &str, grace: Option<i64>, allowed: &[&str], c: &mut Vec<Cause>) {
    let mut n = 0;
    for kind in ["exec", "httpGet", "tcpSocket", "grpc", "sleep"] {
        if !allowed.contains(&kind) {
            continue;
        }
        let Some(a) = h.get(kind).filter(|a| !a.is_null()) else { continue };
        let at = format!("{path}.{kind}");
        if n > 0 {
            c.push(Cause::forbidden(at, "may not specify more than 1 handler type"));
            continue;
        }
        n += 1;
        match kind {
            "exec" if array_of(a, "command").is_empty() => {
                c.push(Cause::required(format!("{at}.command"), ""));
            }
            "httpGet" => {
                if str_of(a, "path").is_empty() {
                    c.push(Cause::required(format!("{at}.path"), ""));
                }
                validate_port_num_or_name(a.get("port").unwrap_or(&NULL), &format!("{at}.port"), c);
                let scheme = str_of(a, "scheme");
                if scheme != "HTTP" && scheme != "HTTPS" {
                    c.push(Cause::not_supported(format!("{at}.scheme"), scheme, &["HTTP", "HTTPS"]));
                }
                for header in array_of(a, "httpHeaders") {
                    let name = str_of(header, "name");
                    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
                        c.push(invalid_str(
                            format!("{at}.httpHeaders"),
                            name,
                            "a valid HTTP header must consist of alphanumeric characters or '-' (e.g. 'X-Header-Name', regex used for validation is '[-A-Za-z0-9]+')",
                        ));
                    }
                }
            }
            "tcpSocket" => validate_port_num_or_name(a.get("port").unwrap_or(&NULL), &format!("{at}.port"), c),
            "grpc" => {
                let p = int_of(a, "port").unwrap_or(0);
                for msg in port_num_errors(p) {
                    c.push(invalid_int(format!("{at}.port"), p, msg));
                }
            }
            "sleep" => {
                let secs = int_of(a, "seconds").unwrap_or(0);
                if let Some(g) = grace
                    && (secs < 0 || secs > g)
                {
                    c.push(invalid_int(
                        &at,
                        secs,
                        format!("must be non-negative and less than terminationGracePeriodSeconds ({g})"),
                    ));
                }
            }
            _ => {}
        }
    }
    if n == 0 {
        c.push(Cause::required(path, "must specify a handler type"));
    }
}

fn validate_probe(ctr: &Value, kind: &str, path: &str, grace: Option<i64>, c: &mut Vec<Cause>) {
    let Some(p) = ctr.get(kind).filter(|p| !p.is_null()) else { return };
    let at = format!("{path}.{kind}");
    validate_handler(p, &at, grace, &["exec", "httpGet", "tcpSocket", "grpc"], c);
    for f in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
        c.extend(nonnegative(format!("{at}.{f}"), int_of(p, f).unwrap_or(0)));
    }
    if let Some(t) = int_of(p, "terminationGracePeriodSeconds")
        && t <= 0
    {
        c.push(invalid_int(format!("{at}.terminationGracePeriodSeconds"), t, "must be greater than 0"));
    }
    if kind == "readinessProbe" {
        if let Some(t) = int_of(p, "terminationGracePeriodSeconds") {
            c.push(invalid_int(
                format!("{at}.terminationGracePeriodSeconds"),
                t,
                "must not be set for readinessProbes",
            ));
        }
    } else {
        let s = int_of(p, "successThreshold").unwrap_or(0);
        if s != 1 {
            c.push(invalid_int(format!("{at}.successThreshold"), s, "must be 1"));
        }
    }
}

fn validate_lifecycle_and_probes(ctr: &Value, path: &str, grace: Option<i64>, c: &mut Vec<Cause>) {
    if let Some(l) = ctr.get("lifecycle").filter(|l| !l.is_null()) {
        for h in ["postStart", "preStop"] {
            if let Some(handler) = l.get(h).filter(|h| !h.is_null()) {
                validate_handler(
                    handler,
                    &format!("{path}.lifecycle.{h}"),
                    grace,
                    &["exec", "httpGet", "tcpSocket", "sleep"],
                    c,
                );
            }
        }
    }
    for kind in ["livenessProbe", "readinessProbe", "startupProbe"] {
        validate_probe(ctr, kind, path, grace, c);
    }
}

/// `validateContainerCommon`.
fn validate_container_common(ctr: &Value, path: &str, vols: &HashMap<String, String>, c: &mut Vec<Cause>) {
    let name = str_of(ctr, "name");
    if name.is_empty() {
        c.push(Cause::required(format!("{path}.name"), ""));
    } else {
        for msg in dns1123_label_errors(name) {
            c.push(invalid_str(format!("{path}.name"), name, msg));
        }
    }
    if str_of(ctr, "image").is_empty() {
        c.push(Cause::required(format!("{path}.image"), ""));
    }
    validate_enum_required(
        ctr,
        "terminationMessagePolicy",
        &format!("{path}.terminationMessagePolicy"),
        &["File", "FallbackToLogsOnError"],
        c,
    );
    validate_ports(ctr, path, c);
    validate_env(ctr, path, c);
    validate_mounts(ctr, path, vols, c);
    match str_of(ctr, "imagePullPolicy") {
        "" => c.push(Cause::required(format!("{path}.imagePullPolicy"), "")),
        "Always" | "IfNotPresent" | "Never" => {}
        p => c.push(Cause::not_supported(format!("{path}.imagePullPolicy"), p, &["Always", "IfNotPresent", "Never"])),
    }
    validate_resources(ctr, &format!("{path}.resources"), c);
    validate_container_security_context(ctr, &format!("{path}.securityContext"), c);
}

const ID_RANGE_MSG: &str = "must be between 0 and 2147483647, inclusive";

/// User and group ids must be in [0, 2^31-1] (`IsValidUserID`/`IsValidGroupID`).
fn validate_ids(sc: &Value, path: &str, fields: &[&str], c: &mut Vec<Cause>) {
    for f in fields {
        if let Some(id) = int_of(sc, f)
            && !(0..=i32::MAX as i64).contains(&id)
        {
            c.push(invalid_int(format!("{path}.{f}"), id, ID_RANGE_MSG));
        }
    }
}

/// The parts of `ValidateSecurityContext` clients trip over: id ranges and the
/// privilege-escalation contradictions.
fn validate_container_security_context(ctr: &Value, path: &str, c: &mut Vec<Cause>) {
    let Some(sc) = ctr.get("securityContext").filter(|s| s.is_object()) else { return };
    validate_ids(sc, path, &["runAsUser", "runAsGroup"], c);
    if let Some(p) = sc.get("procMount").and_then(Value::as_str)
        && p != "Default"
        && p != "Unmasked"
    {
        c.push(Cause::not_supported(format!("{path}.procMount"), p, &["Default", "Unmasked"]));
    }
    if sc.get("allowPrivilegeEscalation") == Some(&Value::Bool(false)) {
        if sc.get("privileged") == Some(&Value::Bool(true)) {
            c.push(invalid_raw(
                path,
                "core.SecurityContext{...}",
                "cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
            ));
        }
        let adds_sys_admin = sc
            .pointer("/capabilities/add")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|c| c.as_str() == Some("SYS_ADMIN") || c.as_str() == Some("CAP_SYS_ADMIN")));
        if adds_sys_admin {
            c.push(invalid_raw(
                path,
                "core.SecurityContext{...}",
                "cannot set `allowPrivilegeEscalation` to false and `capabilities.Add` CAP_SYS_ADMIN",
            ));
        }
    }
}

/// The pod-level security context: id ranges.
fn validate_pod_security_context(spec: &Value, path: &str, c: &mut Vec<Cause>) {
    let Some(sc) = spec.get("securityContext").filter(|s| s.is_object()) else { return };
    validate_ids(sc, path, &["runAsUser", "runAsGroup", "fsGroup"], c);
    for (i, g) in array_of(sc, "supplementalGroups").iter().enumerate() {
        let g = g.as_i64().unwrap_or(-1);
        if !(0..=i32::MAX as i64).contains(&g) {
            c.push(invalid_int(format!("{path}.supplementalGroups[{i}]"), g, ID_RANGE_MSG));
        }
    }
    if let Some(p) = sc.get("fsGroupChangePolicy").and_then(Value::as_str)
        && p != "OnRootMismatch"
        && p != "Always"
    {
        c.push(Cause::not_supported(format!("{path}.fsGroupChangePolicy"), p, &["Always", "OnRootMismatch"]));
    }
}

/// Host ports must not collide (protocol/hostIP/port), as `AccumulateUniqueHostPorts`.
fn host_port_conflicts(containers: &[&Value], path: &str, c: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (ci, ctr) in containers.iter().enumerate() {
        for (pi, p) in array_of(ctr, "ports").iter().enumerate() {
            let port = int_of(p, "hostPort").unwrap_or(0);
            if port == 0 {
                continue;
            }
            let key = format!("{}/{}/{port}", str_of(p, "protocol"), str_of(p, "hostIP"));
            if !seen.insert(key.clone()) {
                c.push(duplicate_str(format!("{path}[{ci}].ports[{pi}].hostPort"), &key));
            }
        }
    }
}

fn validate_containers(
    spec: &Value,
    vols: &HashMap<String, String>,
    grace: Option<i64>,
    path: &str,
    c: &mut Vec<Cause>,
) {
    let containers = array_of(spec, "containers");
    if containers.is_empty() {
        c.push(Cause::required(path, ""));
        return;
    }
    let mut names = HashSet::new();
    for (i, ctr) in containers.iter().enumerate() {
        let at = format!("{path}[{i}]");
        validate_container_common(ctr, &at, vols, c);
        let name = str_of(ctr, "name");
        if !names.insert(name) {
            c.push(duplicate_str(format!("{at}.name"), name));
        }
        validate_lifecycle_and_probes(ctr, &at, grace, c);
        if has(ctr, "restartPolicy") {
            c.push(Cause::forbidden(format!("{at}.restartPolicy"), "may not be set for non-init containers"));
        }
    }
    host_port_conflicts(&containers.iter().collect::<Vec<_>>(), path, c);
}

fn validate_init_containers(
    spec: &Value,
    vols: &HashMap<String, String>,
    grace: Option<i64>,
    path: &str,
    c: &mut Vec<Cause>,
) {
    let mut names: HashSet<&str> = array_of(spec, "containers").iter().map(|x| str_of(x, "name")).collect();
    for (i, ctr) in array_of(spec, "initContainers").iter().enumerate() {
        let at = format!("{path}[{i}]");
        validate_container_common(ctr, &at, vols, c);
        let mut restart_always = false;
        if let Some(rp) = ctr.get("restartPolicy").and_then(Value::as_str) {
            if rp != "Always" {
                c.push(Cause::not_supported(format!("{at}.restartPolicy"), rp, &["Always"]));
            }
            restart_always = rp == "Always";
        }
        let name = str_of(ctr, "name");
        if names.contains(name) {
            c.push(duplicate_str(format!("{at}.name"), name));
        } else if !name.is_empty() {
            names.insert(name);
        }
        // Upstream checks each init container alone, reporting it at index 0.
        host_port_conflicts(&[ctr], path, c);
        if restart_always {
            validate_lifecycle_and_probes(ctr, &at, grace, c);
        } else {
            for f in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if has(ctr, f) {
                    c.push(Cause::forbidden(
                        format!("{at}.{f}"),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
        if !array_of(ctr, "resizePolicy").is_empty() && !restart_always {
            c.push(invalid_raw(
                format!("{at}.resizePolicy"),
                "[]core.ContainerResizePolicy{...}",
                "must not be set for init containers",
            ));
        }
    }
}

/// The container fields an ephemeral container may not set.
const EPHEMERAL_FORBIDDEN: [&str; 8] = [
    "ports",
    "resources",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
    "resizePolicy",
    "restartPolicy",
];

fn validate_ephemeral_containers(spec: &Value, vols: &HashMap<String, String>, path: &str, c: &mut Vec<Cause>) {
    let eph = array_of(spec, "ephemeralContainers");
    if eph.is_empty() {
        return;
    }
    let others: HashSet<&str> = array_of(spec, "containers")
        .iter()
        .chain(array_of(spec, "initContainers"))
        .map(|x| str_of(x, "name"))
        .collect();
    let mut all = others.clone();
    for (i, ec) in eph.iter().enumerate() {
        let at = format!("{path}[{i}]");
        validate_container_common(ec, &at, vols, c);
        c.extend(image_whitespace(ec, &at));
        let name = str_of(ec, "name");
        if !all.insert(name) {
            c.push(duplicate_str(format!("{at}.name"), name));
        }
        let target = str_of(ec, "targetContainerName");
        if !target.is_empty() && !others.contains(target) {
            c.push(not_found(format!("{at}.targetContainerName"), target));
        }
        for f in EPHEMERAL_FORBIDDEN {
            let set = match ec.get(f) {
                None | Some(Value::Null) => false,
                Some(Value::Object(m)) => !m.is_empty(),
                Some(Value::Array(a)) => !a.is_empty(),
                Some(_) => true,
            };
            if set {
                c.push(Cause::forbidden(format!("{at}.{f}"), "cannot be set for an Ephemeral Container"));
            }
        }
        for (j, vm) in array_of(ec, "volumeMounts").iter().enumerate() {
            for f in ["subPath", "subPathExpr"] {
                if !str_of(vm, f).is_empty() {
                    c.push(Cause::forbidden(
                        format!("{at}.volumeMounts[{j}].{f}"),
                        "cannot be set for an Ephemeral Container",
                    ));
                }
            }
        }
    }
}

fn validate_host_network(spec: &Value, path: &str, opts: SpecOpts, c: &mut Vec<Cause>) {
    if spec.get("hostNetwork") != Some(&Value::Bool(true)) {
        return;
    }
    for (i, ctr) in array_of(spec, "containers").iter().enumerate() {
        for (j, p) in array_of(ctr, "ports").iter().enumerate() {
            let hp = int_of(p, "hostPort").unwrap_or(0);
            let cp = int_of(p, "containerPort").unwrap_or(0);
            if (opts.is_pod || hp != 0) && hp != cp {
                c.push(invalid_int(
                    format!("{path}.containers[{i}].ports[{j}].hostPort"),
                    hp,
                    "must match `containerPort` when `hostNetwork` is true",
                ));
            }
        }
    }
}

fn validate_dns_config(spec: &Value, path: &str, c: &mut Vec<Cause>) {
    let cfg = spec.get("dnsConfig").filter(|c| !c.is_null());
    if str_of(spec, "dnsPolicy") == "None" {
        let Some(cfg) = cfg else {
            c.push(Cause::required(path, "must provide `dnsConfig` when `dnsPolicy` is None"));
            return;
        };
        if array_of(cfg, "nameservers").is_empty() {
            c.push(Cause::required(
                format!("{path}.nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            ));
            return;
        }
    }
    let Some(cfg) = cfg else { return };
    let ns = array_of(cfg, "nameservers");
    if ns.len() > 3 {
        c.push(invalid_raw(
            format!("{path}.nameservers"),
            super::go_string_slice(cfg.get("nameservers")),
            "must not have more than 3 nameservers",
        ));
    }
    for (i, n) in ns.iter().enumerate() {
        let n = n.as_str().unwrap_or("");
        for msg in ip_errors(n) {
            c.push(invalid_str(format!("{path}.nameservers[{i}]"), n, msg));
        }
    }
    let searches = array_of(cfg, "searches");
    if searches.len() > 32 {
        c.push(invalid_raw(
            format!("{path}.searches"),
            super::go_string_slice(cfg.get("searches")),
            "must not have more than 32 search paths",
        ));
    }
    let joined: usize =
        searches.iter().map(|s| s.as_str().unwrap_or("").len()).sum::<usize>() + searches.len().saturating_sub(1);
    if joined > 2048 {
        c.push(invalid_raw(
            format!("{path}.searches"),
            super::go_string_slice(cfg.get("searches")),
            "must not have more than 2048 characters (including spaces) in the search list",
        ));
    }
    for (i, o) in array_of(cfg, "options").iter().enumerate() {
        if str_of(o, "name").is_empty() {
            c.push(Cause::required(format!("{path}.options[{i}]"), "must not be empty"));
        }
    }
}

/// `ValidateTolerations`.
pub fn validate_tolerations(tols: &[Value], path: &str, c: &mut Vec<Cause>) {
    for (i, t) in tols.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let key = str_of(t, "key");
        if !key.is_empty() {
            for msg in qualified_name_errors(key) {
                c.push(invalid_str(format!("{at}.key"), key, msg));
            }
        }
        let op = str_of(t, "operator");
        let effect = str_of(t, "effect");
        if key.is_empty() && op != "Exists" {
            c.push(invalid_str(
                format!("{at}.operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if has(t, "tolerationSeconds") && effect != "NoExecute" {
            c.push(invalid_str(
                format!("{at}.effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        let value = str_of(t, "value");
        match op {
            "Equal" | "" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    c.push(invalid_str(format!("{at}.operator"), value, errs.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    c.push(invalid_str(
                        format!("{at}.operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => c.push(Cause::not_supported(format!("{at}.operator"), other, &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            c.push(Cause::not_supported(
                format!("{at}.effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

/// Validation of an ephemeral-containers subresource write: the pod as it would be
/// stored, with the defaults of the new containers applied to a copy first (the
/// subresource path has no defaulting hook).
pub fn validate_with_defaults(pod: &Value) -> Vec<Cause> {
    let mut copy = pod.clone();
    default_pod(&mut copy);
    validate_pod(&copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn minimal_pod() -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    }

    fn defaulted(mut pod: Value) -> Value {
        default_pod(&mut pod);
        admit_new_pod(&mut pod);
        pod
    }

    fn fields(causes: &[Cause]) -> Vec<String> {
        causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn pod_defaults_match_upstream() {
        let pod = defaulted(minimal_pod());
        let spec = &pod["spec"];
        assert_eq!(spec["restartPolicy"], "Always");
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["terminationGracePeriodSeconds"], 30);
        assert_eq!(spec["securityContext"], json!({}));
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["serviceAccountName"], "default");
        assert_eq!(spec["serviceAccount"], "default");
        let c = &spec["containers"][0];
        assert_eq!(c["imagePullPolicy"], "Always");
        assert_eq!(c["terminationMessagePath"], "/dev/termination-log");
        assert_eq!(c["terminationMessagePolicy"], "File");
        assert!(validate_pod(&pod).is_empty(), "{:?}", validate_pod(&pod));
    }

    #[test]
    fn pull_policy_follows_the_tag() {
        assert_eq!(default_pull_policy("busybox"), "Always");
        assert_eq!(default_pull_policy("busybox:latest"), "Always");
        assert_eq!(default_pull_policy("busybox:1.36"), "IfNotPresent");
        assert_eq!(default_pull_policy("registry:5000/team/app"), "Always");
        assert_eq!(default_pull_policy("registry:5000/team/app:v2"), "IfNotPresent");
        assert_eq!(default_pull_policy("busybox@sha256:abc"), "IfNotPresent");
        assert_eq!(default_pull_policy("Busybox"), "IfNotPresent", "an unparsable reference");
    }

    #[test]
    fn nested_defaults() {
        let pod = defaulted(json!({"spec": {
            "containers": [{"name": "c", "image": "i:1",
                "ports": [{"containerPort": 80}],
                "livenessProbe": {"httpGet": {"port": 80}},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"limits": {"cpu": "1000m", "memory": "1024Mi"}}}],
            "volumes": [{"name": "a"}, {"name": "s", "secret": {"secretName": "x"}}, {"name": "h", "hostPath": {"path": "/x"}}],
        }}));
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["ports"][0]["protocol"], "TCP");
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"}, "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
        );
        assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
        assert_eq!(c["resources"]["limits"], json!({"cpu": "1", "memory": "1Gi"}));
        assert_eq!(c["resources"]["requests"], json!({"cpu": "1", "memory": "1Gi"}), "requests default to limits");
        let v = &pod["spec"]["volumes"];
        assert_eq!(v[0]["emptyDir"], json!({}));
        assert_eq!(v[1]["secret"]["defaultMode"], 420);
        assert_eq!(v[2]["hostPath"]["type"], "");
        assert_eq!(qos_class(&pod), "Guaranteed");
        assert!(validate_pod(&pod).is_empty(), "{:?}", fields(&validate_pod(&pod)));
    }

    #[test]
    fn qos_classes() {
        let with =
            |res: Value| defaulted(json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": res}]}}));
        assert_eq!(qos_class(&with(json!({}))), "BestEffort");
        assert_eq!(qos_class(&with(json!({"requests": {"cpu": "100m"}}))), "Burstable");
        assert_eq!(qos_class(&with(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))), "Guaranteed");
        assert_eq!(
            qos_class(&with(json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}}))),
            "Burstable"
        );
    }

    #[test]
    fn containers_are_required_and_named() {
        let pod = defaulted(json!({"spec": {}}));
        assert_eq!(fields(&validate_pod(&pod)), vec!["spec.containers: Required value"]);
        let pod = defaulted(
            json!({"spec": {"containers": [{"name": "Bad_Name", "image": ""}, {"image": "x"}], "initContainers": [{"name": "Bad_Name", "image": "y"}]}}),
        );
        let f = fields(&validate_pod(&pod));
        assert!(
            f.iter()
                .any(|m| m
                    .starts_with("spec.containers[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label")),
            "{f:?}"
        );
        assert!(f.contains(&"spec.containers[0].image: Required value".to_string()), "{f:?}");
        assert!(f.contains(&"spec.containers[1].name: Required value".to_string()), "{f:?}");
        assert!(f.contains(&"spec.initContainers[0].name: Duplicate value: \"Bad_Name\"".to_string()), "{f:?}");
    }

    #[test]
    fn ports_env_and_policies() {
        let pod = defaulted(json!({"spec": {
            "restartPolicy": "Sometimes", "dnsPolicy": "Magic",
            "containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": 70000, "name": "http"}, {"containerPort": 81, "name": "http", "protocol": "ICMP"}, {"name": "this-name-is-far-too-long"}],
                "env": [{"name": "A=B"}, {"name": ""}, {"name": "X", "value": "1", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}]}}));
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
            "spec.dnsPolicy: Unsupported value: \"Magic\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
            "spec.containers[0].ports[1].name: Duplicate value: \"http\"",
            "spec.containers[0].ports[1].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
            "spec.containers[0].ports[2].name: Invalid value: \"this-name-is-far-too-long\": must be no more than 15 characters",
            "spec.containers[0].ports[2].containerPort: Required value",
            "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
            "spec.containers[0].env[1].name: Required value",
            "spec.containers[0].env[2].valueFrom: Invalid value: \"\": may not be specified when `value` is not empty",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }

    #[test]
    fn volumes_and_mounts() {
        let pod = defaulted(json!({"spec": {
            "volumes": [{"name": "a", "emptyDir": {}, "secret": {"secretName": "s"}}, {"name": "b", "configMap": {}}, {"name": "c"}, {"name": "c"}],
            "containers": [{"name": "x", "image": "i", "volumeMounts": [{"name": "missing", "mountPath": "/m"}, {"name": "c", "mountPath": "/m"}]}]}}));
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.volumes[0].secret: Forbidden: may not specify more than 1 volume type",
            "spec.volumes[1].configMap.name: Required value",
            "spec.volumes[3].name: Duplicate value: \"c\"",
            "spec.containers[0].volumeMounts[0].name: Not found: \"missing\"",
            "spec.containers[0].volumeMounts[1].mountPath: Invalid value: \"/m\": must be unique",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }

    #[test]
    fn resources_requests_within_limits() {
        let pod = defaulted(json!({"spec": {"containers": [{"name": "x", "image": "i",
            "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "1", "memory": "-1", "foo": "1"}}}]}}));
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.containers[0].resources.requests: Invalid value: \"1\": must be less than or equal to cpu limit of 500m",
            "spec.containers[0].resources.requests[memory]: Invalid value: \"-1\": must be greater than or equal to 0",
            "spec.containers[0].resources.requests[foo]: Invalid value: foo: must be a standard resource type or fully qualified",
            "spec.containers[0].resources.requests[foo]: Invalid value: foo: must be a standard resource for containers",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
        let bad = defaulted(
            json!({"spec": {"containers": [{"name": "x", "image": "i", "resources": {"limits": {"cpu": "lots"}}}]}}),
        );
        assert!(fields(&validate_pod(&bad))[0].contains("quantities must match the regular expression"));
    }

    #[test]
    fn probes_and_init_containers() {
        let pod = defaulted(json!({"spec": {
            "containers": [{"name": "x", "image": "i", "livenessProbe": {"successThreshold": 2}, "readinessProbe": {"exec": {"command": ["true"]}, "tcpSocket": {"port": 1}}}],
            "initContainers": [{"name": "i", "image": "i", "readinessProbe": {"exec": {"command": ["true"]}}}, {"name": "s", "image": "i", "restartPolicy": "Never"}]}}));
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.containers[0].livenessProbe: Required value: must specify a handler type",
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
            "spec.containers[0].readinessProbe.tcpSocket: Forbidden: may not specify more than 1 handler type",
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
            "spec.initContainers[1].restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }

    #[test]
    fn templates_are_validated_at_their_path() {
        let mut tmpl = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}], "ephemeralContainers": [{"name": "e", "image": "i"}]}});
        default_pod_template(&mut tmpl);
        let f = fields(&validate_pod_template(&tmpl, "spec.template"));
        assert!(f.contains(&"spec.template.spec.containers[0].image: Required value".to_string()), "{f:?}");
        assert!(f.iter().any(|m| m.starts_with("spec.template.spec.ephemeralContainers: Forbidden")), "{f:?}");
        assert!(tmpl["spec"].get("enableServiceLinks").is_none(), "only pods get SetDefaults_Pod");
    }

    #[test]
    fn tolerations_and_host_network() {
        let pod = defaulted(json!({"spec": {"hostNetwork": true,
            "tolerations": [{"operator": "Equal", "value": "x"}, {"key": "k", "operator": "Exists", "value": "v", "tolerationSeconds": 5}],
            "containers": [{"name": "x", "image": "i", "ports": [{"containerPort": 80, "hostPort": 81}, {"containerPort": 90}]}]}}));
        assert_eq!(pod["spec"]["containers"][0]["ports"][1]["hostPort"], 90, "host network ports default");
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.containers[0].ports[0].hostPort: Invalid value: 81: must match `containerPort` when `hostNetwork` is true",
            "spec.tolerations[0].operator: Invalid value: \"Equal\": operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            "spec.tolerations[1].effect: Invalid value: \"\": effect must be 'NoExecute' when `tolerationSeconds` is set",
            "spec.tolerations[1].operator: Invalid value: \"v\": value must be empty when `operator` is 'Exists'",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }

    #[test]
    fn security_contexts() {
        let pod = defaulted(json!({"spec": {"securityContext": {"runAsUser": -1, "supplementalGroups": [1, -2]},
            "containers": [{"name": "x", "image": "i", "securityContext": {"runAsGroup": 3000000000i64, "privileged": true, "allowPrivilegeEscalation": false}}]}}));
        assert_eq!(pod["spec"]["containers"][0]["resources"], json!({}), "an empty resources struct is always there");
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.securityContext.runAsUser: Invalid value: -1: must be between 0 and 2147483647, inclusive",
            "spec.securityContext.supplementalGroups[1]: Invalid value: -2: must be between 0 and 2147483647, inclusive",
            "spec.containers[0].securityContext.runAsGroup: Invalid value: 3000000000: must be between 0 and 2147483647, inclusive",
            "spec.containers[0].securityContext: Invalid value: core.SecurityContext{...}: cannot set `allowPrivilegeEscalation` to false and `privileged` to true",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }

    #[test]
    fn ephemeral_containers() {
        let pod = defaulted(json!({"spec": {"containers": [{"name": "c", "image": "i"}],
            "ephemeralContainers": [{"name": "c", "image": "d", "targetContainerName": "nope", "ports": [{"containerPort": 1}]}]}}));
        let f = fields(&validate_pod(&pod));
        for want in [
            "spec.ephemeralContainers[0].name: Duplicate value: \"c\"",
            "spec.ephemeralContainers[0].targetContainerName: Not found: \"nope\"",
            "spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container",
        ] {
            assert!(f.contains(&want.to_string()), "missing {want}\nin {f:#?}");
        }
    }
}
