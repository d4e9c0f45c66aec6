//! Jobs and CronJobs (batch/v1): upstream's defaults, the generated selector and
//! labels of Jobs, `ValidateJob`/`ValidateCronJobCreate` and the update rules.

use serde_json::{Value, json};

use super::pod::{default_pod_template, validate_pod_template};
use super::{array_of, go_label_selector, go_string_map, has, int_of, obj_mut, semantic_eq, set_default, str_of};
use crate::error::Cause;
use crate::validation::{
    IMMUTABLE_MSG, dns1123_label_errors, invalid_int, invalid_raw, invalid_str, label_selector_matches, nonnegative,
    not_supported_raw, qualified_name_errors, too_many, validate_label_selector,
};

const NULL: Value = Value::Null;

pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";
pub const LEGACY_CONTROLLER_UID_LABEL: &str = "controller-uid";
pub const LEGACY_JOB_NAME_LABEL: &str = "job-name";

const MAX_PARALLELISM_INDEXED: i64 = 100_000;
const MAX_FAILED_INDEXES: i64 = 100_000;
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
const PARALLELISM_LIMIT_HIGH_COMPLETIONS: i64 = 10_000;
const MAX_FAILED_INDEXES_HIGH_COMPLETIONS: i64 = 10_000;

fn omit_invalid(field: impl Into<String>, detail: &str) -> Cause {
    Cause { reason: "FieldValueInvalid".into(), message: format!("Invalid value: {detail}"), field: field.into() }
}

fn opt_int(v: &Value, key: &str) -> String {
    int_of(v, key).map_or("null".into(), |n| n.to_string())
}

// ---- Job

/// `SetDefaults_Job` (and the pod template's defaults).
pub fn default_job(job: &mut Value) {
    let labels = job.pointer("/spec/template/metadata/labels").filter(|l| l.is_object()).cloned();
    if let Some(labels) = labels {
        let meta = crate::object::meta_mut(job);
        if meta.get("labels").and_then(Value::as_object).is_none_or(|m| m.is_empty()) {
            meta.insert("labels".into(), labels);
        }
    }
    let spec = obj_mut(job, "spec");
    if !has(spec, "completions") && !has(spec, "parallelism") {
        spec["completions"] = json!(1);
        spec["parallelism"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    let backoff = if has(spec, "backoffLimitPerIndex") { i32::MAX as i64 } else { 6 };
    set_default(spec, "backoffLimit", json!(backoff));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    if let Some(rules) = spec.pointer_mut("/podFailurePolicy/rules").and_then(Value::as_array_mut) {
        for rule in rules {
            for pattern in super::each_mut(rule, "onPodConditions") {
                set_default(pattern, "status", json!("True"));
            }
        }
    }
    let replacement = if has(spec, "podFailurePolicy") { "Failed" } else { "TerminatingOrFailed" };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    set_default(spec, "manualSelector", json!(false));
    default_pod_template(obj_mut(spec, "template"));
}

/// Upstream's `generateSelector`: unless the selector is manual, the pods of a Job are
/// labelled with its uid and name, and selected by the uid. `metadata.uid` and the name
/// (generated ones too) are set by the registry before this runs.
pub fn generate_selector(job: &mut Value) {
    if job.pointer("/spec/manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    let uid = crate::object::meta_str(job, "uid").unwrap_or("").to_string();
    let name = crate::object::name(job).to_string();
    let spec = obj_mut(job, "spec");
    let labels = obj_mut(obj_mut(obj_mut(spec, "template"), "metadata"), "labels");
    if !name.is_empty() {
        for key in [LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL] {
            set_default(labels, key, json!(name));
        }
    }
    for key in [LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL] {
        set_default(labels, key, json!(uid));
    }
    let selector = obj_mut(spec, "selector");
    let match_labels = obj_mut(selector, "matchLabels");
    set_default(match_labels, CONTROLLER_UID_LABEL, json!(uid));
}

/// `ValidateHasLabel` on the template's metadata.
fn has_label(template: &Value, key: &str, want: &str, c: &mut Vec<Cause>) {
    let labels = template.pointer("/metadata/labels").and_then(Value::as_object);
    let field = format!("spec.template.metadata.labels[{key}]");
    match labels.and_then(|l| l.get(key)).and_then(Value::as_str) {
        None => c.push(Cause::required(field, format!("must be '{want}'"))),
        Some(v) if v != want => c.push(invalid_raw(field, go_string_map(labels), format!("must be '{want}'"))),
        Some(_) => {}
    }
}

/// `validateGeneratedSelector`.
fn validate_generated_selector(job: &Value, c: &mut Vec<Cause>) {
    let spec = job.get("spec").unwrap_or(&NULL);
    if spec.get("manualSelector") == Some(&Value::Bool(true)) {
        return;
    }
    let Some(sel) = spec.get("selector").filter(|s| !s.is_null()) else { return };
    let uid = crate::object::meta_str(job, "uid").unwrap_or("");
    let name = crate::object::name(job);
    if uid.is_empty() {
        c.push(Cause::required("metadata.uid", ""));
    }
    let tmpl = spec.get("template").unwrap_or(&NULL);
    has_label(tmpl, LEGACY_CONTROLLER_UID_LABEL, uid, c);
    has_label(tmpl, LEGACY_JOB_NAME_LABEL, name, c);
    has_label(tmpl, CONTROLLER_UID_LABEL, uid, c);
    has_label(tmpl, JOB_NAME_LABEL, name, c);
    let mut expected = serde_json::Map::new();
    expected.insert(CONTROLLER_UID_LABEL.into(), json!(uid));
    expected.insert(LEGACY_CONTROLLER_UID_LABEL.into(), json!(uid));
    expected.insert(JOB_NAME_LABEL.into(), json!(name));
    expected.insert(LEGACY_JOB_NAME_LABEL.into(), json!(name));
    if validate_label_selector(sel, "").is_empty() && !label_selector_matches(Some(sel), Some(&expected)) {
        c.push(invalid_raw("spec.selector", go_label_selector(sel), "`selector` not auto-generated"));
    }
}

/// `ValidateJob`.
pub fn validate_job(job: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    validate_generated_selector(job, &mut c);
    let spec = job.get("spec").unwrap_or(&NULL);
    validate_job_spec(spec, "spec", &mut c);
    let sel = spec.get("selector").filter(|s| !s.is_null());
    match sel {
        None => c.push(Cause::required("spec.selector", "")),
        Some(s) => c.extend(validate_label_selector(s, "spec.selector")),
    }
    if sel.is_none_or(|s| validate_label_selector(s, "").is_empty())
        && !label_selector_matches(sel, spec.pointer("/template/metadata/labels").and_then(Value::as_object))
    {
        c.push(invalid_raw(
            "spec.template.metadata.labels",
            go_string_map(spec.pointer("/template/metadata/labels").and_then(Value::as_object)),
            "`selector` does not match template `labels`",
        ));
    }
    if str_of(spec, "completionMode") == "Indexed"
        && let Some(n) = int_of(spec, "completions").filter(|n| *n > 0)
    {
        let name = crate::object::name(job);
        let hostname = format!("{name}-{}", n - 1);
        if !dns1123_label_errors(&hostname).is_empty() {
            c.push(invalid_str(
                "metadata.name",
                name,
                format!("will not able to create pod with invalid DNS label: {hostname}"),
            ));
        }
    }
    c
}

/// `validateJobSpec`, shared by Jobs and the job templates of CronJobs.
fn validate_job_spec(spec: &Value, path: &str, c: &mut Vec<Cause>) {
    let at = |f: &str| format!("{path}.{f}");
    for f in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
    ] {
        if let Some(n) = int_of(spec, f) {
            c.extend(nonnegative(at(f), n));
        }
    }
    let parallelism = int_of(spec, "parallelism");
    let completions = int_of(spec, "completions");
    let max_failed = int_of(spec, "maxFailedIndexes");
    let per_index = has(spec, "backoffLimitPerIndex");
    if let Some(m) = max_failed {
        c.extend(nonnegative(at("maxFailedIndexes"), m));
        if !per_index {
            c.push(Cause::required(at("backoffLimitPerIndex"), "when maxFailedIndexes is specified"));
        }
    }
    let mode = spec.get("completionMode").and_then(Value::as_str);
    if let Some(mode) = mode {
        if mode != "NonIndexed" && mode != "Indexed" {
            c.push(Cause::not_supported(at("completionMode"), mode, &["NonIndexed", "Indexed"]));
        }
        if mode == "Indexed" {
            if completions.is_none() {
                c.push(Cause::required(at("completions"), "when completion mode is Indexed"));
            }
            if let Some(p) = parallelism.filter(|p| *p > MAX_PARALLELISM_INDEXED) {
                c.push(invalid_int(
                    at("parallelism"),
                    p,
                    format!("must be less than or equal to {MAX_PARALLELISM_INDEXED} when completion mode is Indexed"),
                ));
            }
            if let (Some(n), Some(m)) = (completions, max_failed)
                && m > n
            {
                c.push(invalid_int(at("maxFailedIndexes"), m, "must be less than or equal to completions"));
            }
            if let Some(m) = max_failed.filter(|m| *m > MAX_FAILED_INDEXES) {
                c.push(invalid_int(
                    at("maxFailedIndexes"),
                    m,
                    format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
                ));
            }
            if completions.is_some_and(|n| n > COMPLETIONS_SOFT_LIMIT) && per_index {
                if max_failed.is_none() {
                    c.push(Cause::required(
                        at("maxFailedIndexes"),
                        format!("must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"),
                    ));
                }
                if let Some(p) = parallelism.filter(|p| *p > PARALLELISM_LIMIT_HIGH_COMPLETIONS) {
                    c.push(invalid_int(at("parallelism"), p, format!("must be less than or equal to {PARALLELISM_LIMIT_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index")));
                }
                if let Some(m) = max_failed.filter(|m| *m > MAX_FAILED_INDEXES_HIGH_COMPLETIONS) {
                    c.push(invalid_int(at("maxFailedIndexes"), m, format!("must be less than or equal to {MAX_FAILED_INDEXES_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index")));
                }
            }
        }
    }
    if mode.is_none_or(|m| m == "NonIndexed") {
        if let Some(b) = int_of(spec, "backoffLimitPerIndex") {
            c.push(invalid_int(at("backoffLimitPerIndex"), b, "requires indexed completion mode"));
        }
        if let Some(m) = max_failed {
            c.push(invalid_int(at("maxFailedIndexes"), m, "requires indexed completion mode"));
        }
    }
    let pfp = spec.get("podFailurePolicy").filter(|p| !p.is_null());
    if let Some(p) = pfp {
        validate_pod_failure_policy(spec, p, &at("podFailurePolicy"), c);
    }
    if let Some(rp) = spec.get("podReplacementPolicy").and_then(Value::as_str) {
        if pfp.is_some() {
            if rp != "Failed" {
                c.push(Cause::not_supported(at("podReplacementPolicy"), rp, &["Failed"]));
            }
        } else if rp != "Failed" && rp != "TerminatingOrFailed" {
            c.push(Cause::not_supported(at("podReplacementPolicy"), rp, &["Failed", "TerminatingOrFailed"]));
        }
    }
    let tmpl = spec.get("template").unwrap_or(&NULL);
    c.extend(validate_pod_template(tmpl, &at("template")));
    let rp_path = at("template.spec.restartPolicy");
    match tmpl.pointer("/spec/restartPolicy").and_then(Value::as_str).unwrap_or("") {
        "Always" | "" => c.push(Cause::required(rp_path, "valid values: \"OnFailure\", \"Never\"")),
        "OnFailure" if pfp.is_some() => {
            c.push(invalid_str(rp_path, "OnFailure", "only \"Never\" is supported when podFailurePolicy is specified"))
        }
        "OnFailure" | "Never" => {}
        other => c.push(Cause::not_supported(rp_path, other, &["OnFailure", "Never"])),
    }
}

fn validate_pod_failure_policy(spec: &Value, pfp: &Value, path: &str, c: &mut Vec<Cause>) {
    let rules = array_of(pfp, "rules");
    let rules_path = format!("{path}.rules");
    if rules.len() > 20 {
        c.push(too_many(&rules_path, rules.len(), 20));
    }
    let tmpl = spec.pointer("/template/spec").unwrap_or(&NULL);
    let names: Vec<&str> = array_of(tmpl, "containers")
        .iter()
        .chain(array_of(tmpl, "initContainers"))
        .map(|x| str_of(x, "name"))
        .collect();
    const ACTIONS: [&str; 4] = ["Count", "FailIndex", "FailJob", "Ignore"];
    for (i, rule) in rules.iter().enumerate() {
        let rp = format!("{rules_path}[{i}]");
        match str_of(rule, "action") {
            "" => c.push(Cause::required(
                format!("{rp}.action"),
                "valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]",
            )),
            "FailIndex" => {
                if !has(spec, "backoffLimitPerIndex") {
                    c.push(invalid_str(
                        format!("{rp}.action"),
                        "FailIndex",
                        "requires the backoffLimitPerIndex to be set",
                    ));
                }
            }
            a if ACTIONS.contains(&a) => {}
            a => c.push(Cause::not_supported(format!("{rp}.action"), a, &ACTIONS)),
        }
        let on_exit = rule.get("onExitCodes").filter(|o| !o.is_null());
        let on_cond = array_of(rule, "onPodConditions");
        if let Some(oe) = on_exit {
            let op_path = format!("{rp}.onExitCodes");
            match str_of(oe, "operator") {
                "" => c.push(Cause::required(format!("{op_path}.operator"), "valid values: [\"In\" \"NotIn\"]")),
                "In" | "NotIn" => {}
                o => c.push(Cause::not_supported(format!("{op_path}.operator"), o, &["In", "NotIn"])),
            }
            if let Some(cn) = oe.get("containerName").and_then(Value::as_str)
                && !names.contains(&cn)
            {
                c.push(invalid_str(
                    format!("{op_path}.containerName"),
                    cn,
                    "must be one of the container or initContainer names in the pod template",
                ));
            }
            let values: Vec<i64> = array_of(oe, "values").iter().filter_map(Value::as_i64).collect();
            let vp = format!("{op_path}.values");
            if values.is_empty() {
                c.push(invalid_raw(&vp, "[]int32(nil)", "at least one value is required"));
            } else if values.len() > 255 {
                c.push(too_many(&vp, values.len(), 255));
            }
            let mut seen = std::collections::HashSet::new();
            for (j, v) in values.iter().enumerate() {
                if str_of(oe, "operator") == "In" && *v == 0 {
                    c.push(invalid_int(format!("{vp}[{j}]"), *v, "must not be 0 for the In operator"));
                }
                if !seen.insert(*v) {
                    c.push(Cause::duplicate(format!("{vp}[{j}]"), v));
                }
            }
            if values.windows(2).any(|w| w[0] > w[1]) {
                let list = values.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
                c.push(invalid_raw(&vp, format!("[]int32{{{list}}}"), "must be ordered"));
            }
        }
        if !on_cond.is_empty() {
            let cp = format!("{rp}.onPodConditions");
            if on_cond.len() > 20 {
                c.push(too_many(&cp, on_cond.len(), 20));
            }
            for (j, pattern) in on_cond.iter().enumerate() {
                let t = str_of(pattern, "type");
                for msg in qualified_name_errors(t) {
                    c.push(invalid_str(format!("{cp}[{j}].type"), t, msg));
                }
                match str_of(pattern, "status") {
                    "" => c.push(Cause::required(
                        format!("{cp}[{j}].status"),
                        "valid values: [\"False\" \"True\" \"Unknown\"]",
                    )),
                    "True" | "False" | "Unknown" => {}
                    s => c.push(Cause::not_supported(format!("{cp}[{j}].status"), s, &["False", "True", "Unknown"])),
                }
            }
        }
        if on_exit.is_some() && !on_cond.is_empty() {
            c.push(omit_invalid(&rp, "specifying both OnExitCodes and OnPodConditions is not supported"));
        }
        if on_exit.is_none() && on_cond.is_empty() {
            c.push(omit_invalid(&rp, "specifying one of OnExitCodes and OnPodConditions is required"));
        }
    }
}

/// `ValidateJobSpecUpdate`: selector, template (but for the scheduling directives of
/// suspended Jobs that never started), completion mode, pod failure policy and
/// backoff limit per index are immutable; completions too, but for Indexed Jobs
/// scaled in tandem with parallelism.
pub fn validate_job_update(new: &Value, old: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let ns = new.get("spec").unwrap_or(&NULL);
    let os = old.get("spec").unwrap_or(&NULL);
    let indexed = str_of(ns, "completionMode") == "Indexed";
    if ns.get("completions") != os.get("completions") {
        if !indexed {
            c.push(invalid_raw("spec.completions", opt_int(ns, "completions"), IMMUTABLE_MSG));
        } else if let Some(n) = int_of(ns, "completions")
            && Some(n) != int_of(ns, "parallelism")
        {
            c.push(invalid_int("spec.completions", n, "can only be modified in tandem with spec.parallelism"));
        }
    }
    if !semantic_eq(ns.get("selector").unwrap_or(&NULL), os.get("selector").unwrap_or(&NULL)) {
        let raw = ns.get("selector").filter(|s| !s.is_null()).map_or("null".into(), go_label_selector);
        c.push(invalid_raw("spec.selector", raw, IMMUTABLE_MSG));
    }
    let mut new_t = ns.get("template").cloned().unwrap_or(Value::Null);
    let mut old_t = os.get("template").cloned().unwrap_or(Value::Null);
    let suspended = os.get("suspend") == Some(&Value::Bool(true));
    let started = old.pointer("/status/startTime").is_some_and(|t| !t.is_null());
    if suspended && !started {
        for t in [&mut new_t, &mut old_t] {
            if let Some(spec) = t.get_mut("spec").and_then(Value::as_object_mut) {
                spec.remove("nodeSelector");
                spec.remove("tolerations");
                spec.remove("schedulingGates");
                if let Some(aff) = spec.get_mut("affinity").and_then(Value::as_object_mut) {
                    aff.remove("nodeAffinity");
                }
            }
            if let Some(meta) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.remove("labels");
                meta.remove("annotations");
            }
        }
    }
    if !semantic_eq(&new_t, &old_t) {
        c.push(invalid_raw("spec.template", "core.PodTemplateSpec{...}", IMMUTABLE_MSG));
    }
    if ns.get("completionMode") != os.get("completionMode") {
        let raw = ns.get("completionMode").and_then(Value::as_str).map_or("null".into(), crate::validation::go_quote);
        c.push(invalid_raw("spec.completionMode", raw, IMMUTABLE_MSG));
    }
    if !semantic_eq(ns.get("podFailurePolicy").unwrap_or(&NULL), os.get("podFailurePolicy").unwrap_or(&NULL)) {
        c.push(invalid_raw("spec.podFailurePolicy", "batch.PodFailurePolicy{...}", IMMUTABLE_MSG));
    }
    if ns.get("backoffLimitPerIndex") != os.get("backoffLimitPerIndex") {
        c.push(invalid_raw("spec.backoffLimitPerIndex", opt_int(ns, "backoffLimitPerIndex"), IMMUTABLE_MSG));
    }
    c
}

// ---- CronJob

pub fn default_cron_job(cj: &mut Value) {
    let spec = obj_mut(cj, "spec");
    super::set_default_str(spec, "concurrencyPolicy", "Allow");
    set_default(spec, "suspend", json!(false));
    set_default(spec, "successfulJobsHistoryLimit", json!(3));
    set_default(spec, "failedJobsHistoryLimit", json!(1));
    // Job templates get the pod template's defaults, not SetDefaults_Job.
    let jt_spec = obj_mut(obj_mut(spec, "jobTemplate"), "spec");
    default_pod_template(obj_mut(jt_spec, "template"));
}

pub fn validate_cron_job(cj: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let spec = cj.get("spec").unwrap_or(&NULL);
    let schedule = str_of(spec, "schedule");
    if schedule.is_empty() {
        c.push(Cause::required("spec.schedule", ""));
    } else {
        if let Err(e) = parse_cron(schedule) {
            c.push(invalid_str("spec.schedule", schedule, e));
        }
        if schedule.contains("TZ") {
            c.push(invalid_str(
                "spec.schedule",
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    if let Some(n) = int_of(spec, "startingDeadlineSeconds") {
        c.extend(nonnegative("spec.startingDeadlineSeconds", n));
    }
    if let Some(tz) = spec.get("timeZone").filter(|t| !t.is_null()) {
        c.extend(validate_time_zone(tz.as_str().unwrap_or("")));
    }
    match str_of(spec, "concurrencyPolicy") {
        "" => c.push(Cause::required("spec.concurrencyPolicy", "")),
        "Allow" | "Forbid" | "Replace" => {}
        p => c.push(Cause::not_supported("spec.concurrencyPolicy", p, &["Allow", "Forbid", "Replace"])),
    }
    let jt = spec.pointer("/jobTemplate/spec").unwrap_or(&NULL);
    validate_job_spec(jt, "spec.jobTemplate.spec", &mut c);
    if let Some(sel) = jt.get("selector").filter(|s| !s.is_null()) {
        c.push(invalid_raw(
            "spec.jobTemplate.spec.selector",
            go_label_selector(sel),
            "`selector` will be auto-generated",
        ));
    }
    if jt.get("manualSelector") == Some(&Value::Bool(true)) {
        c.push(not_supported_raw("spec.jobTemplate.spec.manualSelector", "true", &["nil", "false"]));
    }
    for f in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        if let Some(n) = int_of(spec, f) {
            c.extend(nonnegative(format!("spec.{f}"), n));
        }
    }
    // The controller appends an 11-character suffix to the Jobs it creates.
    let name = crate::object::name(cj);
    if name.len() > 52 {
        c.push(invalid_str("metadata.name", name, "must be no more than 52 characters"));
    }
    c
}

fn validate_time_zone(tz: &str) -> Vec<Cause> {
    let field = "spec.timeZone";
    if tz.is_empty() {
        return vec![invalid_str(field, tz, "timeZone must be nil or non-empty string")];
    }
    let part_ok = |p: &str| {
        p != "."
            && p != ".."
            && !p.starts_with('-')
            && (1..=14).contains(&p.len())
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'+'))
    };
    if !tz.split('/').all(part_ok) {
        return vec![invalid_str(field, tz, format!("unknown time zone {tz}"))];
    }
    let mut c = Vec::new();
    if tz.eq_ignore_ascii_case("local") {
        c.push(invalid_str(
            field,
            tz,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        ));
    } else if jiff::tz::TimeZone::get(tz).is_err() {
        c.push(invalid_str(field, tz, format!("unknown time zone {tz}")));
    }
    c
}

/// Upstream's cron parser (`cron.ParseStandard`): five fields or a descriptor; the
/// error text is the parser's.
pub fn parse_cron(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Err("empty spec string".into());
    }
    let mut spec = spec;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let eq = spec.find('=').unwrap_or(0);
        let Some(sp) = spec.find(' ') else {
            return Err(format!("provided bad location {}: unknown time zone {}", &spec[eq + 1..], &spec[eq + 1..]));
        };
        let loc = &spec[eq + 1..sp];
        if jiff::tz::TimeZone::get(loc).is_err() {
            return Err(format!("provided bad location {loc}: unknown time zone {loc}"));
        }
        spec = spec[sp..].trim();
    }
    if spec.starts_with('@') {
        return match spec {
            "@yearly" | "@annually" | "@monthly" | "@weekly" | "@daily" | "@midnight" | "@hourly" => Ok(()),
            s if s.starts_with("@every ") => {
                let d = &s["@every ".len()..];
                if go_duration_ok(d) {
                    Ok(())
                } else {
                    Err(format!(
                        "failed to parse duration {s}: time: invalid duration {}",
                        crate::validation::go_quote(d)
                    ))
                }
            }
            s => Err(format!("unrecognized descriptor: {s}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!("expected exactly 5 fields, found {}: [{}]", fields.len(), fields.join(" ")));
    }
    const MONTHS: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let bounds: [(u32, u32, &[&str], u32); 5] =
        [(0, 59, &[], 0), (0, 23, &[], 0), (1, 31, &[], 0), (1, 12, &MONTHS, 1), (0, 6, &DAYS, 0)];
    for (field, (min, max, names, base)) in fields.iter().zip(bounds) {
        for expr in field.split(',').filter(|e| !e.is_empty()) {
            cron_range(expr, min, max, names, base)?;
        }
    }
    Ok(())
}

fn go_atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("strconv.Atoi: parsing {}: invalid syntax", crate::validation::go_quote(s)));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {}: value out of range", crate::validation::go_quote(s)))
}

fn must_parse_int(s: &str) -> Result<u32, String> {
    let n = go_atoi(s).map_err(|e| format!("failed to parse int from {s}: {e}"))?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed: {s}"));
    }
    Ok(n.min(u32::MAX as i64) as u32)
}

fn cron_range(expr: &str, min: u32, max: u32, names: &[&str], base: u32) -> Result<(), String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_high.len() == 1;
    let by_name = |s: &str| -> Result<u32, String> {
        match names.iter().position(|n| *n == s.to_lowercase()) {
            Some(i) => Ok(i as u32 + base),
            None => must_parse_int(s),
        }
    };
    let (start, mut end);
    if low_high[0] == "*" || low_high[0] == "?" {
        start = min;
        end = max;
    } else {
        start = by_name(low_high[0])?;
        end = match low_high.len() {
            1 => start,
            2 => by_name(low_high[1])?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
    }
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let s = must_parse_int(range_and_step[1])?;
            if single {
                end = max;
            }
            s
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < min {
        return Err(format!("beginning of range ({start}) below minimum ({min}): {expr}"));
    }
    if end > max {
        return Err(format!("end of range ({end}) above maximum ({max}): {expr}"));
    }
    if start > end {
        return Err(format!("beginning of range ({start}) beyond end of range ({end}): {expr}"));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    Ok(())
}

/// Whether Go's `time.ParseDuration` accepts `s`.
fn go_duration_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    if s == "0" {
        return true;
    }
    if s.is_empty() {
        return false;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
        if num_len == 0 || rest[..num_len] == *"." {
            return false;
        }
        rest = &rest[num_len..];
        let unit = ["ns", "us", "µs", "μs", "ms", "s", "m", "h"].iter().find(|u| rest.starts_with(**u));
        match unit {
            Some(u) => rest = &rest[u.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(c: &[Cause]) -> Vec<String> {
        c.iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    fn new_job(spec: Value) -> Value {
        let mut job = json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": spec});
        default_job(&mut job);
        generate_selector(&mut job);
        job
    }

    fn template(rp: &str) -> Value {
        json!({"spec": {"restartPolicy": rp, "containers": [{"name": "c", "image": "perl:5"}]}})
    }

    #[test]
    fn job_defaults_and_generated_selector() {
        let job = new_job(json!({"template": template("Never")}));
        let s = &job["spec"];
        assert_eq!(s["completions"], 1);
        assert_eq!(s["parallelism"], 1);
        assert_eq!(s["backoffLimit"], 6);
        assert_eq!(s["completionMode"], "NonIndexed");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["manualSelector"], false);
        assert_eq!(s["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(s["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}));
        assert_eq!(
            s["template"]["metadata"]["labels"],
            json!({"batch.kubernetes.io/controller-uid": "u-1", "batch.kubernetes.io/job-name": "pi", "controller-uid": "u-1", "job-name": "pi"})
        );
        assert!(validate_job(&job).is_empty(), "{:?}", msgs(&validate_job(&job)));
    }

    #[test]
    fn job_rules() {
        let job = new_job(json!({"template": template("Always")}));
        assert_eq!(
            msgs(&validate_job(&job)),
            vec!["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]
        );
        let job = new_job(
            json!({"completionMode": "Indexed", "parallelism": 2, "backoffLimitPerIndex": 1, "template": template("Never")}),
        );
        assert_eq!(
            msgs(&validate_job(&job)),
            vec!["spec.completions: Required value: when completion mode is Indexed"]
        );
        let job = new_job(json!({"backoffLimitPerIndex": 1, "template": template("Never")}));
        assert_eq!(job["spec"]["backoffLimit"], 2147483647);
        assert_eq!(
            msgs(&validate_job(&job)),
            vec!["spec.backoffLimitPerIndex: Invalid value: 1: requires indexed completion mode"]
        );
        let mut job = new_job(json!({"template": template("Never")}));
        job["spec"]["selector"] = json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "other"}});
        let m = msgs(&validate_job(&job));
        assert!(
            m.iter().any(|x| x.starts_with("spec.selector: Invalid value: v1.LabelSelector{")
                && x.ends_with("`selector` not auto-generated")),
            "{m:?}"
        );
    }

    #[test]
    fn job_updates() {
        let old = new_job(json!({"template": template("Never")}));
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:6");
        new["spec"]["completions"] = json!(3);
        assert_eq!(
            msgs(&validate_job_update(&new, &old)),
            vec![
                "spec.completions: Invalid value: 3: field is immutable",
                "spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"
            ]
        );
        let mut suspended = new_job(json!({"suspend": true, "template": template("Never")}));
        let mut moved = suspended.clone();
        moved["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
        assert!(validate_job_update(&moved, &suspended).is_empty(), "suspended jobs may move");
        suspended["status"] = json!({"startTime": "2024-01-01T00:00:00Z"});
        assert_eq!(validate_job_update(&moved, &suspended).len(), 1, "not once started");
        let indexed = new_job(
            json!({"completionMode": "Indexed", "completions": 2, "parallelism": 2, "template": template("Never")}),
        );
        let mut scaled = indexed.clone();
        scaled["spec"]["completions"] = json!(4);
        scaled["spec"]["parallelism"] = json!(4);
        assert!(validate_job_update(&scaled, &indexed).is_empty(), "elastic indexed jobs");
    }

    #[test]
    fn cron_schedules() {
        for ok in ["*/5 * * * *", "0 0 1 jan *", "0 9-17 * * MON-FRI", "@hourly", "@every 1h30m", "15,45 */2 ? * sun"] {
            assert_eq!(parse_cron(ok), Ok(()), "{ok}");
        }
        for (bad, err) in [
            ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
            ("0 0 0 * * *", "expected exactly 6 fields"),
            ("60 * * * *", "end of range (60) above maximum (59): 60"),
            ("x * * * *", "failed to parse int from x: strconv.Atoi: parsing \"x\": invalid syntax"),
            ("@fortnightly", "unrecognized descriptor: @fortnightly"),
            ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
            ("*/0 * * * *", "step of range should be a positive number: */0"),
        ] {
            let got = parse_cron(bad).unwrap_err();
            let want = if err.contains("6 fields") { "expected exactly 5 fields, found 6: [0 0 0 * * *]" } else { err };
            assert_eq!(got, want, "{bad}");
        }
    }

    #[test]
    fn cron_jobs() {
        let mut cj = json!({"metadata": {"name": "hourly"}, "spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": template("OnFailure")}}}});
        default_cron_job(&mut cj);
        let s = &cj["spec"];
        assert_eq!(s["concurrencyPolicy"], "Allow");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["successfulJobsHistoryLimit"], 3);
        assert_eq!(s["failedJobsHistoryLimit"], 1);
        assert!(s["jobTemplate"]["spec"].get("backoffLimit").is_none(), "job templates get no Job defaults");
        assert!(validate_cron_job(&cj).is_empty(), "{:?}", msgs(&validate_cron_job(&cj)));
        cj["spec"]["timeZone"] = json!("Mars/Olympus");
        cj["spec"]["concurrencyPolicy"] = json!("Sometimes");
        cj["metadata"]["name"] = json!("x".repeat(53));
        let m = msgs(&validate_cron_job(&cj));
        assert!(
            m.contains(&"spec.timeZone: Invalid value: \"Mars/Olympus\": unknown time zone Mars/Olympus".to_string()),
            "{m:?}"
        );
        assert!(m.iter().any(|x| x.starts_with("spec.concurrencyPolicy: Unsupported value: \"Sometimes\"")), "{m:?}");
        assert!(m.iter().any(|x| x.ends_with("must be no more than 52 characters")), "{m:?}");
        cj["spec"]["timeZone"] = json!("Europe/Paris");
        assert!(!msgs(&validate_cron_job(&cj)).iter().any(|x| x.starts_with("spec.timeZone")));
        cj["spec"]["schedule"] = json!("CRON_TZ=UTC 0 * * * *");
        assert!(msgs(&validate_cron_job(&cj)).iter().any(|x| x.ends_with("use timeZone field instead")));
    }
}
