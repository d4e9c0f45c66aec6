//! Field ownership (metadata.managedFields) and server-side apply, as upstream's field
//! manager keeps them: every write records which manager set which fields (operation
//! Update), and an apply (operation Apply) merges a partial configuration, refuses to
//! change fields other managers own unless forced, and removes the fields its manager
//! stopped applying when nobody else owns them.

pub mod fieldpath;
pub mod typed;

use serde_json::{Value, json};

use crate::error::{ApiError, Cause, Target};
use crate::object;
use crate::resource::ResourceInfo;
use fieldpath::{PathElement, Set};
use typed::Kind;

/// Who writes, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldManager {
    pub name: String,
    pub operation: Operation,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Update,
    Apply,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Update => "Update",
            Operation::Apply => "Apply",
        }
    }
}

/// The name a request's writes are recorded under: its fieldManager, else the
/// User-Agent up to the first '/', as upstream derives it. 400 for an invalid name.
pub fn manager_name(field_manager: Option<&str>, user_agent: Option<&str>) -> Result<Option<String>, ApiError> {
    if let Some(name) = field_manager {
        if name.chars().count() > 128 || name.chars().any(|c| c.is_control()) {
            return Err(ApiError::bad_request(
                "fieldManager: Invalid value: the field manager must be at most 128 printable characters",
            ));
        }
        return Ok(Some(name.to_string()));
    }
    let agent = user_agent.map(|ua| ua.split('/').next().unwrap_or("").trim()).filter(|s| !s.is_empty());
    Ok(agent.map(|a| a.chars().filter(|c| !c.is_control()).take(128).collect()))
}

/// One managedFields entry, with its set decoded.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: String,
    set: Set,
}

impl Entry {
    fn same_owner(&self, manager: &str, operation: Operation, subresource: &str) -> bool {
        self.manager == manager && self.operation == operation.as_str() && self.subresource == subresource
    }

    fn to_json(&self) -> Value {
        let mut v = json!({
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "fieldsType": "FieldsV1",
            "fieldsV1": self.set.to_fields_v1(),
        });
        if let Some(t) = &self.time {
            v["time"] = json!(t);
        }
        if !self.subresource.is_empty() {
            v["subresource"] = json!(self.subresource);
        }
        v
    }

    /// How upstream names a manager in conflict messages.
    fn describe(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        // Upstream identifies managers without their time.
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

fn decode_entries(obj: &Value) -> Result<Vec<Entry>, String> {
    let Some(list) = obj.pointer("/metadata/managedFields") else { return Ok(Vec::new()) };
    let Some(list) = list.as_array() else {
        return if list.is_null() { Ok(Vec::new()) } else { Err("metadata.managedFields must be a list".into()) };
    };
    let s = |e: &Value, k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    list.iter()
        .map(|e| {
            Ok(Entry {
                manager: s(e, "manager"),
                operation: s(e, "operation"),
                api_version: s(e, "apiVersion"),
                time: e.get("time").and_then(Value::as_str).map(String::from),
                subresource: s(e, "subresource"),
                set: match e.get("fieldsV1") {
                    Some(f) => Set::from_fields_v1(f)?,
                    None => Set::default(),
                },
            })
        })
        .collect()
}

fn store_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries.iter().filter(|e| !e.set.is_empty()).map(Entry::to_json).collect();
    let meta = object::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn invalid_managed_fields(r: &ResourceInfo, obj: &Value, msg: String) -> ApiError {
    let t = Target::new(&r.group, &r.plural, &r.kind, object::name(obj));
    ApiError::invalid(&t, vec![Cause::invalid("metadata.managedFields", "", msg)])
}

/// The kind of a resource's objects, from the schema facts.
fn root_kind(r: &ResourceInfo) -> Kind<'_> {
    match r.strategy.structural_schema() {
        Some(s) => Kind::Custom(s),
        None => Kind::Struct(crate::schema::kind_definition(&r.group, &r.version, &r.kind)),
    }
}

/// Fields nobody owns: server-set metadata and type information, and the half of the
/// object the other endpoint owns (status for the main resource, the rest for /status).
fn ownable(r: &ResourceInfo, subresource: &str) -> impl Fn(&[PathElement]) -> bool {
    let has_status = r.has_status();
    let status_only = subresource == "status";
    move |p: &[PathElement]| {
        let field = |i: usize| match p.get(i) {
            Some(PathElement::Field(f)) => f.as_str(),
            _ => "",
        };
        match field(0) {
            "apiVersion" | "kind" => false,
            "status" if has_status => status_only,
            _ if status_only => false,
            "metadata" => !matches!(
                field(1),
                "name"
                    | "namespace"
                    | "uid"
                    | "resourceVersion"
                    | "generation"
                    | "creationTimestamp"
                    | "deletionTimestamp"
                    | "deletionGracePeriodSeconds"
                    | "managedFields"
                    | "selfLink"
            ),
            _ => true,
        }
    }
}

/// Whether `path` holds a different value in `a` than in `b`: a list item or a struct
/// with tracked children is the same while it exists in both; a leaf compares values.
fn differs(a: &Value, b: &Value, path: &[PathElement], set: &Set) -> bool {
    let (x, y) = (typed::value_at(a, path), typed::value_at(b, path));
    if set.has_descendants(path) {
        return x.is_some() != y.is_some();
    }
    x != y
}

/// Records a write other than an apply: `manager` takes the fields it changed from
/// everyone else, and fields the write removed leave every owner. A client may also
/// send managedFields itself: a different list replaces the stored one, and `[{}]`
/// clears them (upstream's way to reset ownership).
pub fn record_update(
    r: &ResourceInfo,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: &str,
) -> Result<(), ApiError> {
    let sent = new.pointer("/metadata/managedFields").cloned();
    let stored = old.and_then(|o| o.pointer("/metadata/managedFields")).cloned();
    let mut entries = match (&sent, &stored) {
        (Some(Value::Array(s)), _) if s.len() == 1 && s[0].as_object().is_some_and(|m| m.is_empty()) => Vec::new(),
        (Some(s), st) if Some(s) != st.as_ref() => {
            decode_entries(new).map_err(|e| invalid_managed_fields(r, new, e))?
        }
        _ => match old {
            Some(o) => decode_entries(o).map_err(|e| invalid_managed_fields(r, o, e))?,
            None => Vec::new(),
        },
    };
    let keep = ownable(r, subresource);
    let kind = root_kind(r);
    let empty = json!({});
    let old_value = old.unwrap_or(&empty);
    let new_set = typed::field_set(new, kind).filter(&keep);
    let old_set = typed::field_set(old_value, kind).filter(&keep);
    let changed = new_set.filter(&|p| differs(old_value, new, p, &new_set));
    let removed = old_set.difference(&new_set);
    let taken = changed.union(&removed);
    for e in entries.iter_mut() {
        if !e.same_owner(manager, Operation::Update, subresource) {
            e.set = e.set.difference(&taken);
        }
    }
    let now = object::now_rfc3339();
    match entries.iter_mut().find(|e| e.same_owner(manager, Operation::Update, subresource)) {
        Some(e) => {
            let next = e.set.union(&changed).difference(&removed);
            if next != e.set {
                e.set = next;
                e.time = Some(now);
                e.api_version = r.api_version();
            }
        }
        None if !changed.is_empty() => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Update".into(),
            api_version: r.api_version(),
            time: Some(now),
            subresource: subresource.to_string(),
            set: changed,
        }),
        None => {}
    }
    store_entries(new, &entries);
    Ok(())
}

/// Server-side apply of `applied` by `manager` onto `live` (None: the object does not
/// exist yet). Returns the object to store, managedFields included.
pub fn apply(
    r: &ResourceInfo,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    subresource: &str,
    force: bool,
) -> Result<Value, ApiError> {
    check_applied(r, applied)?;
    let kind = root_kind(r);
    let keep = ownable(r, subresource);
    let empty = json!({});
    let live_value = live.unwrap_or(&empty);
    let mut entries = decode_entries(live_value).map_err(|e| invalid_managed_fields(r, live_value, e))?;
    let applied_set = typed::field_set(applied, kind).filter(&keep);

    // Fields the configuration changes that others own are conflicts.
    let mut conflicts: Vec<(String, String)> = Vec::new();
    let changing = applied_set.filter(&|p| differs(applied, live_value, p, &applied_set));
    for e in &entries {
        if e.same_owner(manager, Operation::Apply, subresource) {
            continue;
        }
        for p in changing.paths() {
            if e.set.contains(&p) {
                conflicts.push((e.describe(), fieldpath::display(&p)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    for e in entries.iter_mut() {
        if !e.same_owner(manager, Operation::Apply, subresource) {
            e.set = e.set.difference(&changing);
        }
    }

    let mut merged = typed::merge(Some(live_value), applied, kind);
    // What this manager applied before and no longer does goes, unless someone else
    // still owns it (or something under it).
    let previous = entries
        .iter()
        .find(|e| e.same_owner(manager, Operation::Apply, subresource))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let others = entries
        .iter()
        .filter(|e| !e.same_owner(manager, Operation::Apply, subresource))
        .fold(Set::default(), |acc, e| acc.union(&e.set));
    // Shallowest first: an item goes while its key fields can still find it, and what
    // was under it goes with it.
    let mut dropped = previous.difference(&applied_set).paths();
    dropped.sort_by_key(|p| p.len());
    let mut removed: Vec<Vec<PathElement>> = Vec::new();
    for p in dropped {
        if removed.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        if !others.contains(&p) && !others.has_descendants(&p) && !applied_set.has_descendants(&p) {
            typed::remove_at(&mut merged, &p);
            removed.push(p);
        }
    }

    let now = object::now_rfc3339();
    entries.retain(|e| !e.same_owner(manager, Operation::Apply, subresource));
    entries.insert(
        0,
        Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: r.api_version(),
            time: Some(now),
            subresource: subresource.to_string(),
            set: applied_set,
        },
    );
    // Keep the live object's server-set metadata; the configuration cannot change it.
    if let Some(l) = live {
        for f in ["resourceVersion", "uid", "creationTimestamp", "generation"] {
            match object::meta(l).and_then(|m| m.get(f)).cloned() {
                Some(v) => {
                    object::meta_mut(&mut merged).insert(f.into(), v);
                }
                None => {
                    object::meta_mut(&mut merged).remove(f);
                }
            }
        }
    }
    store_entries(&mut merged, &entries);
    Ok(merged)
}

/// An apply configuration must name its type and may not carry managedFields.
fn check_applied(r: &ResourceInfo, applied: &Value) -> Result<(), ApiError> {
    if !applied.is_object() {
        return Err(ApiError::bad_request("the apply configuration must be an object"));
    }
    let api_version = applied.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = applied.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(ApiError::bad_request("invalid object type: the apply configuration must set apiVersion and kind"));
    }
    if api_version != r.api_version() || kind != r.kind {
        return Err(ApiError::bad_request(format!(
            "the apply configuration's type ({api_version}, Kind={kind}) does not match the resource ({}, Kind={})",
            r.api_version(),
            r.kind
        )));
    }
    if applied.pointer("/metadata/managedFields").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_request("metadata.managedFields must be nil in an apply configuration"));
    }
    Ok(())
}

/// 409 as upstream words it: one cause per conflicting field, naming its manager.
fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let message = if let [(manager, path)] = conflicts {
        format!("Apply failed with 1 conflict: conflict with {manager}: {path}")
    } else {
        let mut managers: Vec<&String> = conflicts.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(format!("conflicts with {m}:"));
            lines.extend(conflicts.iter().filter(|(cm, _)| cm == m).map(|(_, p)| format!("- {p}")));
        }
        format!("Apply failed with {} conflicts: {}", conflicts.len(), lines.join("\n"))
    };
    let causes = conflicts
        .iter()
        .map(|(m, p)| Cause::new("FieldManagerConflict", format!("conflict with {m}"), p.clone()))
        .collect();
    ApiError::apply_conflict(message, causes)
}
