//! The generic registry: create, get, update, patch, delete, list and watch for every
//! resource, driven by the resource table and the per-kind strategies (upstream's
//! generic store). Nothing here knows about a particular kind.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use parking_lot::Mutex;
use serde_json::{Value, json};

use krate_store::{DynStore, RangeRequest, Revision, StoreError};

use crate::admission::{Admission, Attributes, Operation};
use crate::cache::{CacheError, Cacher};
use crate::continue_token;
use crate::conversion;
use crate::error::{ApiError, ApiResult, Cause, Target};
use crate::fieldvalidation::{self, FieldProblems, FieldValidation, Warnings};
use crate::filter::Filter;
use crate::hooks::{RestHooks, undo_all};
use crate::managedfields::{self, FieldManager, Operation as ManagedOperation};
use crate::object;
use crate::resource::{ResourceInfo, ResourceTable};
use crate::strategy::DeleteAction;
use crate::user::UserInfo;
use crate::validation::{
    generate_name_errors, name_errors, qualified_name_errors, validate_annotations, validate_labels,
};

/// Attempts at a read-modify-write before giving up on conflicts (upstream retries too).
const MAX_CONFLICT_RETRIES: usize = 16;
/// Attempts at a generated name before giving up.
const GENERATE_NAME_ATTEMPTS: usize = 8;
/// How long a request waits for a watch cache to fill or catch up.
const CACHE_WAIT: Duration = Duration::from_secs(3);
/// How long a consistent read waits for the watch cache to catch up before reading the store.
const CACHE_CATCH_UP: Duration = Duration::from_millis(50);
/// Pages read from the store per filtered list round.
const LIST_SCAN_PAGE: usize = 500;
/// How often an idle watch gets a bookmark (when it asked for them).
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);

/// Which collection a request addresses.
#[derive(Clone, Debug)]
pub struct Scope {
    pub resource: Arc<ResourceInfo>,
    /// The namespace from the URL (None for cluster-scoped or all-namespaces requests).
    pub namespace: Option<String>,
}

impl Scope {
    pub fn target(&self, name: &str) -> Target {
        Target::new(&self.resource.group, &self.resource.plural, &self.resource.kind, name)
    }
    fn key(&self, name: &str) -> String {
        self.resource.key(self.namespace.as_deref(), name)
    }
    fn prefix(&self) -> String {
        self.resource.collection_prefix(self.namespace.as_deref())
    }
}

/// Who asks, through which admission chain, and whether to persist.
pub struct Context<'a> {
    pub user: &'a UserInfo,
    pub admission: &'a dyn Admission,
    pub dry_run: bool,
    /// How unknown and duplicate fields of the request's object are treated.
    pub field_validation: FieldValidation,
    /// Fields the request body named twice (found by the HTTP layer, which has the bytes).
    pub duplicate_fields: &'a [String],
    /// Where warnings for the client go; None for the server's own writes.
    pub warnings: Option<&'a Warnings>,
    /// Who the write's fields are recorded under (managedFields); None leaves them as
    /// they are (the server's own writes).
    pub field_manager: Option<&'a FieldManager>,
    /// Where admission plugins put audit annotations; None for the server's own writes.
    pub audit_annotations: Option<&'a crate::audit::AuditAnnotations>,
}

impl<'a> Context<'a> {
    /// A write the server makes itself: no field validation, no warnings.
    pub fn internal(user: &'a UserInfo, admission: &'a dyn Admission) -> Self {
        Context {
            user,
            admission,
            dry_run: false,
            field_validation: FieldValidation::Ignore,
            duplicate_fields: &[],
            warnings: None,
            field_manager: None,
            audit_annotations: None,
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    /// Orphan, Background or Foreground.
    pub propagation_policy: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: usize,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub resource_version: Option<String>,
    pub allow_bookmarks: bool,
    pub send_initial_events: Option<bool>,
}

pub struct ListResult {
    pub revision: Revision,
    /// Each item's JSON, with its resourceVersion.
    pub items: Vec<Bytes>,
    pub continue_token: Option<String>,
    pub remaining_item_count: Option<i64>,
}

/// One event of an API watch: its type and the object's JSON.
#[derive(Clone, Debug)]
pub struct WatchItem {
    pub kind: &'static str,
    pub object: Bytes,
    /// The JSON watch line, when the cache already encoded it for every watcher.
    line: Option<Bytes>,
}

impl WatchItem {
    pub fn new(kind: &'static str, object: Bytes) -> Self {
        WatchItem { kind, object, line: None }
    }

    /// This event as one line of a JSON watch stream.
    pub fn json_line(&self) -> Bytes {
        match &self.line {
            Some(line) => line.clone(),
            None => crate::cache::watch_line(self.kind, &self.object),
        }
    }
}

pub enum Deleted {
    /// Gone from the store.
    Now(Value),
    /// Marked for deletion; finalizers or a graceful period keep it for now.
    Pending(Value),
}

pub enum Patch {
    Json(Value),
    Merge(Value),
    /// application/strategic-merge-patch+json: built-in kinds only, as upstream.
    Strategic(Value),
    /// application/apply-patch+yaml: server-side apply of a configuration.
    Apply {
        config: Value,
        force: bool,
    },
}

/// The manager an update-type write records its changes under, if any.
fn update_manager<'a>(ctx: &Context<'a>) -> Option<&'a str> {
    ctx.field_manager.filter(|m| m.operation == ManagedOperation::Update).map(|m| m.name.as_str())
}

pub struct Registry {
    pub store: DynStore,
    pub table: Arc<ResourceTable>,
    caches: Mutex<HashMap<String, Arc<Cacher>>>,
    leases: LeaseManager,
    hooks: parking_lot::RwLock<HashMap<String, Arc<dyn RestHooks>>>,
}

/// How long a granted lease is reused for further expiring objects, as upstream does:
/// at most a minute and at most 5% of the TTL, so objects live between TTL and TTL + 5%.
const LEASE_REUSE_MAX: Duration = Duration::from_secs(60);
const LEASE_REUSE_FRACTION: f64 = 0.05;

/// Leases for objects that expire (Events): reused for a while, granted long enough
/// that every object written under one lives at least the TTL.
struct LeaseManager {
    ttl_seconds: std::sync::atomic::AtomicI64,
    current: tokio::sync::Mutex<Option<(krate_store::LeaseId, tokio::time::Instant)>>,
}

impl LeaseManager {
    async fn lease(&self, store: &DynStore) -> Result<krate_store::LeaseId, StoreError> {
        let ttl = self.ttl_seconds.load(std::sync::atomic::Ordering::Relaxed);
        let reuse = LEASE_REUSE_MAX.min(Duration::from_secs_f64(ttl as f64 * LEASE_REUSE_FRACTION));
        let mut current = self.current.lock().await;
        if let Some((id, granted)) = *current
            && granted.elapsed() < reuse
        {
            return Ok(id);
        }
        let ttl = ttl + reuse.as_secs_f64().ceil() as i64;
        let id = store.grant_lease(ttl).await?;
        *current = Some((id, tokio::time::Instant::now()));
        Ok(id)
    }
}

fn parse_rv(s: &str) -> ApiResult<Revision> {
    s.parse::<Revision>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version \"{s}\"")))
}

fn causes_if_any(t: &Target, causes: Vec<Cause>) -> ApiResult<()> {
    if causes.is_empty() { Ok(()) } else { Err(ApiError::invalid(t, causes)) }
}

impl Registry {
    pub fn new(store: DynStore, table: Arc<ResourceTable>) -> Self {
        let leases = LeaseManager { ttl_seconds: 3600.into(), current: tokio::sync::Mutex::new(None) };
        Registry { store, table, caches: Mutex::new(HashMap::new()), leases, hooks: Default::default() }
    }

    /// Runs `hooks` around every write of the resource (all its versions).
    pub fn register_hooks(&self, resource: &ResourceInfo, hooks: Arc<dyn RestHooks>) {
        self.hooks.write().insert(resource.key_prefix.clone(), hooks);
    }

    fn hooks_for(&self, r: &ResourceInfo) -> Option<Arc<dyn RestHooks>> {
        self.hooks.read().get(&r.key_prefix).cloned()
    }

    /// How long expiring objects (Events) live; upstream's --event-ttl (default 1 h).
    /// Only a lease granted from now on is affected.
    pub fn set_object_ttl(&self, ttl: Duration) {
        self.leases.ttl_seconds.store(ttl.as_secs().max(1) as i64, std::sync::atomic::Ordering::Relaxed);
        if let Ok(mut current) = self.leases.current.try_lock() {
            *current = None;
        }
    }

    /// The lease an object of this resource is written with (0: none).
    async fn lease_for(&self, r: &ResourceInfo, t: &Target) -> ApiResult<krate_store::LeaseId> {
        if !r.strategy.expires() {
            return Ok(0);
        }
        self.leases.lease(&self.store).await.map_err(|e| Self::store_err(e, t))
    }

    /// The watch cache of a resource, started on first use.
    pub fn cache(&self, resource: &ResourceInfo) -> Arc<Cacher> {
        self.caches
            .lock()
            .entry(resource.key_prefix.clone())
            .or_insert_with(|| {
                Cacher::start(self.store.clone(), resource.key_prefix.clone(), resource.strategy.clone())
            })
            .clone()
    }

    fn store_err(e: StoreError, t: &Target) -> ApiError {
        ApiError::from_store(e, t)
    }

    pub async fn get(&self, scope: &Scope, name: &str) -> ApiResult<Value> {
        let t = scope.target(name);
        if let Some(found) = self.get_cached(&scope.resource, &scope.key(name)).await {
            return found.ok_or_else(|| ApiError::not_found(&t));
        }
        let (kv, _) = self.store.get(&scope.key(name), 0).await.map_err(|e| Self::store_err(e, &t))?;
        let kv = kv.ok_or_else(|| ApiError::not_found(&t))?;
        decode(&scope.resource, &kv.value, kv.mod_revision)
    }

    /// A read that may be slightly stale, as upstream's informer-backed listers are (admission
    /// plugins use it): the cached object if the cache has it, else a consistent read.
    pub async fn get_cached_or_live(&self, scope: &Scope, name: &str) -> ApiResult<Value> {
        let cache = self.cache(&scope.resource);
        if let Some((_, Some(o))) = cache.object(&scope.key(name))
            && let Ok(v) = serde_json::from_slice::<Value>(&present_json(&scope.resource, &o.json))
        {
            return Ok(v);
        }
        self.get(scope, name).await
    }

    /// A consistent read from the watch cache, when the store can say (without I/O) which
    /// revision the cache must have reached and the cache is there: as upstream's
    /// consistent reads from cache, no older than any acknowledged write. None: read the
    /// store instead (cache not filled yet, lagging, or a backend without a hint).
    async fn get_cached(&self, r: &ResourceInfo, key: &str) -> Option<Option<Value>> {
        let latest = self.store.revision_hint()?;
        let cache = self.cache(r);
        let (mut at, mut found) = cache.object(key)?;
        if at < latest {
            if !cache.wait_for(latest, CACHE_CATCH_UP).await {
                return None;
            }
            (at, found) = cache.object(key)?;
        }
        debug_assert!(at >= latest);
        Some(found.and_then(|o| serde_json::from_slice::<Value>(&present_json(r, &o.json)).ok()))
    }

    /// Checks apiVersion and kind against the endpoint, filling them in when absent; the
    /// object must decode as its kind; unknown fields are dropped (as upstream's typed
    /// decoding drops them), after field validation had its say.
    fn check_type(resource: &ResourceInfo, obj: &mut Value, ctx: &Context<'_>) -> ApiResult<()> {
        let Some(map) = obj.as_object_mut() else {
            return Err(ApiError::bad_request("the request body must be a JSON or YAML object"));
        };
        let want = resource.api_version();
        match map.get("apiVersion").and_then(Value::as_str) {
            Some(v) if v != want => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({v}) does not match the expected API version ({want})"
                )));
            }
            Some(_) => {}
            None => {
                map.insert("apiVersion".into(), json!(want));
            }
        }
        match map.get("kind").and_then(Value::as_str) {
            Some(k) if k != resource.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    resource.kind
                )));
            }
            Some(_) => {}
            None => {
                map.insert("kind".into(), json!(resource.kind));
            }
        }
        if map.get("metadata").is_some_and(|m| !m.is_object() && !m.is_null()) {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
        // The typed decode upstream does: wrong types are a 400 here. A missing required
        // field is not — upstream decodes it as empty and validation reports it (422).
        let checked = match resource.strategy.unknown_fields(obj) {
            Some(unknown) => Ok(unknown),
            None => crate::generated::shape::check(&resource.group, &resource.version, &resource.kind, obj),
        };
        let unknown = match checked {
            Ok(unknown) => unknown,
            Err(e) if e.starts_with("missing field") => Vec::new(),
            Err(e) => {
                return Err(ApiError::bad_request(format!(
                    "{kind} in version \"{version}\" cannot be handled as a {kind}: {e}",
                    kind = resource.kind,
                    version = resource.version
                )));
            }
        };
        let problems = FieldProblems {
            unknown: unknown.iter().map(ToString::to_string).collect(),
            duplicate: ctx.duplicate_fields.to_vec(),
        };
        let sink = Warnings::default();
        problems.enforce(ctx.field_validation, &resource.kind, &resource.version, ctx.warnings.unwrap_or(&sink))?;
        fieldvalidation::prune(obj, &unknown);
        Ok(())
    }

    /// The namespace in the body must agree with the URL's; it is taken from the URL.
    fn reconcile_namespace(scope: &Scope, obj: &mut Value) -> ApiResult<()> {
        let body_ns = object::meta_str(obj, "namespace").map(String::from);
        if scope.resource.namespaced {
            let url_ns = scope.namespace.clone().unwrap_or_default();
            if let Some(b) = body_ns
                && b != url_ns
            {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            object::meta_mut(obj).insert("namespace".into(), json!(url_ns));
        } else {
            object::meta_mut(obj).remove("namespace");
        }
        Ok(())
    }

    /// Metadata rules every kind shares.
    fn validate_meta(resource: &ResourceInfo, obj: &Value, creating: bool) -> Vec<Cause> {
        let mut causes = Vec::new();
        let name = object::name(obj);
        if name.is_empty() {
            causes.push(Cause::required("metadata.name", "name or generateName is required"));
        } else {
            for msg in name_errors(resource.strategy.name_rule(), name) {
                causes.push(Cause::invalid("metadata.name", name, msg));
            }
        }
        if creating && let Some(prefix) = object::meta_str(obj, "generateName") {
            for msg in generate_name_errors(resource.strategy.name_rule(), prefix) {
                causes.push(Cause::invalid("metadata.generateName", prefix, msg));
            }
        }
        if resource.namespaced {
            let ns = object::meta_str(obj, "namespace").unwrap_or("");
            if ns.is_empty() {
                causes.push(Cause::required("metadata.namespace", ""));
            } else {
                for msg in name_errors(crate::validation::NameRule::Label, ns) {
                    causes.push(Cause::invalid("metadata.namespace", ns, msg));
                }
            }
        }
        let meta = object::meta(obj);
        match meta.and_then(|m| m.get("labels")) {
            Some(Value::Object(l)) => causes.extend(validate_labels(l, "metadata.labels")),
            None | Some(Value::Null) => {}
            Some(other) => causes.push(Cause::invalid("metadata.labels", other, "must be a map of strings")),
        }
        match meta.and_then(|m| m.get("annotations")) {
            Some(Value::Object(a)) => causes.extend(validate_annotations(a, "metadata.annotations")),
            None | Some(Value::Null) => {}
            Some(other) => causes.push(Cause::invalid("metadata.annotations", other, "must be a map of strings")),
        }
        for (i, f) in object::finalizers(obj).iter().enumerate() {
            for msg in qualified_name_errors(f) {
                causes.push(Cause::invalid(format!("metadata.finalizers[{i}]"), f, msg));
            }
        }
        if let Some(refs) = meta.and_then(|m| m.get("ownerReferences")).and_then(Value::as_array) {
            let mut controllers = 0;
            for (i, r) in refs.iter().enumerate() {
                for field in ["apiVersion", "kind", "name", "uid"] {
                    if r.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                        causes.push(Cause::required(format!("metadata.ownerReferences[{i}].{field}"), ""));
                    }
                }
                if r.get("controller") == Some(&Value::Bool(true)) {
                    controllers += 1;
                }
            }
            if controllers > 1 {
                causes.push(Cause::invalid(
                    "metadata.ownerReferences",
                    "[...]",
                    "Only one reference can have Controller set to true",
                ));
            }
        }
        causes
    }

    pub async fn create(&self, scope: &Scope, mut obj: Value, ctx: &Context<'_>) -> ApiResult<Value> {
        let r = &scope.resource;
        if r.strategy.refuses_creates() {
            let mut e =
                ApiError::method_not_allowed("create not allowed while custom resource definition is terminating");
            e.details = Some(Box::new(crate::error::Details {
                group: r.group.clone(),
                kind: r.plural.clone(),
                ..Default::default()
            }));
            return Err(e);
        }
        Self::check_type(r, &mut obj, ctx)?;
        Self::reconcile_namespace(scope, &mut obj)?;
        let requested_name = object::name(&obj).to_string();
        let attrs = Attributes {
            operation: Operation::Create,
            resource: r,
            subresource: None,
            namespace: scope.namespace.as_deref(),
            name: &requested_name,
            user: ctx.user,
            dry_run: ctx.dry_run,
            warnings: ctx.warnings,
            audit_annotations: ctx.audit_annotations,
        };
        ctx.admission.mutate(&attrs, &mut obj, None).await?;

        // Server-owned metadata.
        let generate =
            object::name(&obj).is_empty().then(|| object::meta_str(&obj, "generateName").map(String::from)).flatten();
        {
            let m = object::meta_mut(&mut obj);
            for f in ["resourceVersion", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"] {
                m.remove(f);
            }
            m.insert("uid".into(), json!(object::new_uid()));
            m.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
            if r.strategy.tracks_generation() {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        if r.has_status() && r.strategy.resets_status_on_create() {
            obj.as_object_mut().map(|m| m.remove("status"));
        }
        let submitted = obj;

        // As upstream: the name is generated first, so the strategy sees the final name
        // (Jobs label their pods with it); a clash starts over with a new name.
        for attempt in 0.. {
            let mut obj = submitted.clone();
            if let Some(prefix) = &generate {
                let name = format!("{prefix}{}", object::generate_suffix());
                object::meta_mut(&mut obj).insert("name".into(), json!(name));
            }
            r.strategy.prepare_for_create_by(&mut obj, ctx.user);
            r.strategy.prepare_for_create(&mut obj);
            if let Some(manager) = update_manager(ctx) {
                managedfields::record_update(r, None, &mut obj, manager, "")?;
            }
            let name = object::name(&obj).to_string();
            let t = scope.target(&name);
            let mut causes = Self::validate_meta(r, &obj, true);
            causes.extend(r.strategy.validate(&obj));
            causes_if_any(&t, causes)?;
            if let Some(w) = ctx.warnings {
                r.strategy.warnings(&obj, None).into_iter().for_each(|m| w.add(m));
            }
            let attrs = Attributes { name: &name, ..attrs };
            ctx.admission.validate(&attrs, Some(&obj), None).await?;
            let hooks = self.hooks_for(r);
            let undos = match &hooks {
                Some(h) => h.before_create(self, &mut obj, ctx.dry_run).await?,
                None => Vec::new(),
            };
            if ctx.dry_run {
                return Ok(obj);
            }
            let lease = match self.lease_for(r, &t).await {
                Ok(lease) => lease,
                Err(e) => {
                    undo_all(self, undos).await;
                    return Err(e);
                }
            };
            match self.store.create(&scope.key(&name), encode(r, &obj), lease).await {
                Ok(rev) => {
                    object::set_resource_version(&mut obj, rev);
                    return Ok(obj);
                }
                Err(StoreError::AlreadyExists(_)) if generate.is_some() && attempt + 1 < GENERATE_NAME_ATTEMPTS => {
                    undo_all(self, undos).await;
                    continue;
                }
                Err(e) => {
                    undo_all(self, undos).await;
                    return Err(Self::store_err(e, &t));
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// Fills in what an update may not change and applies the strategy.
    fn prepare_update(scope: &Scope, new: &mut Value, old: &Value, subresource: Option<&str>) {
        let r = &scope.resource;
        if let Some(fields) = subresource.and_then(|s| r.strategy.subresource_fields(s)) {
            // A subresource write changes only its own fields.
            let taken: Vec<(&str, Option<Value>)> = fields.iter().map(|f| (*f, new.pointer(f).cloned())).collect();
            *new = old.clone();
            for (field, value) in taken {
                set_pointer(new, field, value);
            }
            if let Some(sub) = subresource {
                r.strategy.prepare_subresource_update(sub, new, old);
            }
            return;
        }
        let old_meta = object::meta(old).cloned().unwrap_or_default();
        {
            let m = object::meta_mut(new);
            for f in ["uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
                match old_meta.get(f) {
                    Some(v) => m.insert(f.into(), v.clone()),
                    None => m.remove(f),
                };
            }
            m.remove("selfLink");
        }
        if r.has_status() {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        }
        r.strategy.prepare_for_update(new, old);
        if r.strategy.tracks_generation() && object::spec_changed(new, old) {
            let g = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            object::meta_mut(new).insert("generation".into(), json!(g + 1));
        }
    }

    /// Replaces an object (PUT), or its status with `subresource = Some("status")`.
    /// Returns the stored object and whether it was created.
    pub async fn update(
        &self,
        scope: &Scope,
        name: &str,
        obj: Value,
        subresource: Option<&str>,
        ctx: &Context<'_>,
    ) -> ApiResult<(Value, bool)> {
        let r = &scope.resource;
        let mut obj = obj;
        Self::check_type(r, &mut obj, ctx)?;
        let body_name = object::name(&obj).to_string();
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        object::meta_mut(&mut obj).insert("name".into(), json!(name));
        Self::reconcile_namespace(scope, &mut obj)?;
        let precondition = object::meta_str(&obj, "resourceVersion").map(parse_rv).transpose()?;
        self.guaranteed_update(scope, name, precondition, subresource, ctx, move |_| Ok(obj.clone())).await
    }

    /// Applies a JSON patch or merge patch to the current object.
    pub async fn patch(
        &self,
        scope: &Scope,
        name: &str,
        patch: Patch,
        subresource: Option<&str>,
        ctx: &Context<'_>,
    ) -> ApiResult<Value> {
        if let Patch::Apply { config, force } = patch {
            return self.apply(scope, name, config, force, subresource, ctx).await.map(|(o, _)| o);
        }
        let patch = Arc::new(patch);
        let r = &scope.resource;
        let definition = crate::schema::kind_definition(&r.group, &r.version, &r.kind);
        if matches!(*patch, Patch::Strategic(_)) && definition.is_none() {
            return Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json (strategic merge patch is not supported for {}.{})",
                r.plural, r.group
            )));
        }
        let t = scope.target(name);
        let (obj, _) = self
            .guaranteed_update(scope, name, None, subresource, ctx, move |current| {
                // A patch changes an object; it never creates one.
                if current.is_null() {
                    return Err(ApiError::not_found(&t));
                }
                let mut patched = apply_patch(current, &patch, definition)?;
                // Only a resourceVersion the patch itself changes is a precondition: a
                // patch that leaves it alone is applied again to the newer object when a
                // concurrent write wins the race, as upstream retries patches.
                let rv = |o: &Value| object::meta_str(o, "resourceVersion").map(str::to_string);
                if rv(&patched) == rv(current) {
                    object::meta_mut(&mut patched).remove("resourceVersion");
                }
                Ok(patched)
            })
            .await?;
        Ok(obj)
    }

    /// Server-side apply: merges `applied` into the object (creating it if absent) as
    /// the apply manager in `ctx`. Returns the object and whether it was created.
    pub async fn apply(
        &self,
        scope: &Scope,
        name: &str,
        applied: Value,
        force: bool,
        subresource: Option<&str>,
        ctx: &Context<'_>,
    ) -> ApiResult<(Value, bool)> {
        let r = &scope.resource;
        let manager = match ctx.field_manager {
            Some(m) if m.operation == ManagedOperation::Apply => m.name.clone(),
            _ => {
                return Err(ApiError::bad_request(
                    "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
                ));
            }
        };
        if object::name(&applied) != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                object::name(&applied)
            )));
        }
        let sub = subresource.unwrap_or("");
        for _ in 0..MAX_CONFLICT_RETRIES {
            match self.get(scope, name).await {
                Err(e) if e.code == 404 && subresource.is_none() => {
                    let obj = managedfields::apply(r, None, &applied, &manager, sub, force)?;
                    match self.create(scope, obj, ctx).await {
                        Err(e) if e.reason == "AlreadyExists" => continue,
                        other => return other.map(|o| (o, true)),
                    }
                }
                Err(e) => return Err(e),
                Ok(_) => {
                    let applied = &applied;
                    let manager = manager.as_str();
                    return self
                        .guaranteed_update(scope, name, None, subresource, ctx, move |current| {
                            if current.is_null() {
                                return Err(ApiError::not_found(&scope.target(name)));
                            }
                            managedfields::apply(r, Some(current), applied, manager, sub, force)
                        })
                        .await
                        .map(|(o, _)| (o, false));
                }
            }
        }
        Err(ApiError::conflict(&scope.target(name), "too many concurrent changes; try again"))
    }

    /// Binds a pod to a node (pods/binding, and the legacy bindings resource): sets
    /// spec.nodeName once, and the PodScheduled condition.
    pub async fn bind(&self, pods: &Scope, pod: &str, binding: &Value, ctx: &Context<'_>) -> ApiResult<()> {
        let t = pods.target(pod);
        let node = binding.pointer("/target/name").and_then(Value::as_str).unwrap_or("").to_string();
        let kind = binding.pointer("/target/kind").and_then(Value::as_str).unwrap_or("");
        let bt = Target::new("", "bindings", "Binding", pod);
        if node.is_empty() {
            return Err(ApiError::invalid(&bt, vec![Cause::required("target.name", "")]));
        }
        if !kind.is_empty() && kind != "Node" {
            return Err(ApiError::invalid(&bt, vec![Cause::not_supported("target.kind", kind, &["Node"])]));
        }
        let annotations = binding.pointer("/metadata/annotations").and_then(Value::as_object).cloned();
        self.guaranteed_update(pods, pod, None, Some("binding"), ctx, |current| {
            if object::is_deleting(current) {
                return Err(ApiError::conflict(&t, &format!("pod {pod} is being deleted, cannot be assigned to a host")));
            }
            if let Some(n) = current.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
                return Err(ApiError::conflict(&t, &format!("pod {pod} is already assigned to node \"{n}\"")));
            }
            let mut next = current.clone();
            next["spec"]["nodeName"] = json!(node);
            if let Some(a) = &annotations {
                let m = object::meta_mut(&mut next);
                let existing = m.entry("annotations").or_insert_with(|| json!({}));
                for (k, v) in a {
                    existing[k] = v.clone();
                }
            }
            let conditions = next["status"]["conditions"].as_array().cloned().unwrap_or_default();
            let mut conditions: Vec<Value> =
                conditions.into_iter().filter(|c| c.get("type").and_then(Value::as_str) != Some("PodScheduled")).collect();
            conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": object::now_rfc3339()}));
            next["status"]["conditions"] = json!(conditions);
            Ok(next)
        })
        .await
        .map(|_| ())
    }

    /// The autoscaling/v1 Scale of an object with a scale subresource.
    pub async fn get_scale(&self, scope: &Scope, name: &str) -> ApiResult<Value> {
        let obj = self.get(scope, name).await?;
        Ok(scale_of(&scope.resource, &obj))
    }

    /// Changes an object's replicas through its Scale: `change` turns the current Scale
    /// into the wanted one (a PUT body, or the result of a patch).
    pub async fn update_scale(
        &self,
        scope: &Scope,
        name: &str,
        change: impl Fn(&Value) -> ApiResult<Value>,
        ctx: &Context<'_>,
    ) -> ApiResult<Value> {
        let t = Target::new("autoscaling", "Scale", "Scale", name);
        let (obj, _) = self
            .guaranteed_update(scope, name, None, Some("scale"), ctx, |current| {
                let wanted = change(&scale_of(&scope.resource, current))?;
                let replicas = match wanted.pointer("/spec/replicas") {
                    None | Some(Value::Null) => 0,
                    Some(v) => v.as_i64().ok_or_else(|| {
                        ApiError::invalid(&t, vec![Cause::invalid("spec.replicas", v, "must be an integer")])
                    })?,
                };
                if replicas < 0 {
                    return Err(ApiError::invalid(
                        &t,
                        vec![Cause::invalid("spec.replicas", replicas, "must be greater than or equal to 0")],
                    ));
                }
                if let Some(rv) = object::meta_str(&wanted, "resourceVersion")
                    && Some(rv) != object::meta_str(current, "resourceVersion")
                {
                    return Err(ApiError::modified(&scope.target(name)));
                }
                let mut next = current.clone();
                match scope.resource.strategy.scale_paths() {
                    Some(paths) => set_pointer(&mut next, &paths.spec_replicas, Some(json!(replicas))),
                    None => next["spec"]["replicas"] = json!(replicas),
                }
                Ok(next)
            })
            .await?;
        Ok(scale_of(&scope.resource, &obj))
    }

    /// The read-modify-write loop shared by update and patch. `precondition` is the
    /// resourceVersion the client required (a mismatch is a conflict); without one,
    /// conflicts with concurrent writers are retried. A patch may carry its own
    /// resourceVersion, which is then a precondition too.
    async fn guaranteed_update(
        &self,
        scope: &Scope,
        name: &str,
        precondition: Option<Revision>,
        subresource: Option<&str>,
        ctx: &Context<'_>,
        transform: impl Fn(&Value) -> ApiResult<Value>,
    ) -> ApiResult<(Value, bool)> {
        let r = &scope.resource;
        let t = scope.target(name);
        let key = scope.key(name);
        for _ in 0..MAX_CONFLICT_RETRIES {
            let (kv, _) = self.store.get(&key, 0).await.map_err(|e| Self::store_err(e, &t))?;
            let Some(kv) = kv else {
                if r.strategy.allow_create_on_update() && subresource.is_none() {
                    let obj = transform(&Value::Null)?;
                    return self.create(scope, obj, ctx).await.map(|o| (o, true));
                }
                return Err(ApiError::not_found(&t));
            };
            let old = decode(r, &kv.value, kv.mod_revision)?;
            let mut new = transform(&old)?;
            Self::check_type(r, &mut new, ctx)?;
            if object::name(&new) != name {
                return Err(ApiError::bad_request(format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    object::name(&new)
                )));
            }
            Self::reconcile_namespace(scope, &mut new)?;
            // A patch's result carries the current resourceVersion; only one the patch
            // itself changed is a precondition (otherwise a lost race is retried).
            let required = match precondition {
                Some(rv) => Some(rv),
                None => object::meta_str(&new, "resourceVersion")
                    .map(parse_rv)
                    .transpose()?
                    .filter(|rv| *rv != kv.mod_revision),
            };
            if let Some(rv) = required
                && rv != kv.mod_revision
            {
                return Err(ApiError::modified(&t));
            }
            let attrs = Attributes {
                operation: Operation::Update,
                resource: r,
                subresource,
                namespace: scope.namespace.as_deref(),
                name,
                user: ctx.user,
                dry_run: ctx.dry_run,
                warnings: ctx.warnings,
                audit_annotations: ctx.audit_annotations,
            };
            ctx.admission.mutate(&attrs, &mut new, Some(&old)).await?;
            // An apply computed the managedFields itself; a subresource write keeps
            // only its own fields of the object, so they are carried over.
            let applied_fields = ctx
                .field_manager
                .filter(|m| m.operation == ManagedOperation::Apply)
                .map(|_| new.pointer("/metadata/managedFields").cloned());
            Self::prepare_update(scope, &mut new, &old, subresource);
            if let Some(fields) = applied_fields {
                let m = object::meta_mut(&mut new);
                match fields {
                    Some(f) => m.insert("managedFields".into(), f),
                    None => m.remove("managedFields"),
                };
            }
            if let Some(manager) = update_manager(ctx) {
                managedfields::record_update(r, Some(&old), &mut new, manager, subresource.unwrap_or(""))?;
            }
            let mut causes = Self::validate_meta(r, &new, false);
            match subresource.filter(|s| r.strategy.subresource_fields(s).is_some()) {
                Some(sub) => causes.extend(r.strategy.validate_subresource_update(sub, &new, &old)),
                None => {
                    causes.extend(r.strategy.validate(&new));
                    causes.extend(r.strategy.validate_update(&new, &old));
                }
            }
            causes_if_any(&t, causes)?;
            if let (Some(w), None) = (ctx.warnings, subresource) {
                r.strategy.warnings(&new, Some(&old)).into_iter().for_each(|m| w.add(m));
            }
            ctx.admission.validate(&attrs, Some(&new), Some(&old)).await?;
            let hooks = self.hooks_for(r).filter(|_| subresource.is_none_or(|s| s == "scale"));
            let undos = match &hooks {
                Some(h) => h.before_update(self, &mut new, &old, ctx.dry_run).await?,
                None => Vec::new(),
            };

            object::set_resource_version(&mut new, kv.mod_revision);
            // An unchanged object is still written when its stored form is stale (as
            // upstream's GuaranteedUpdate): that is how re-encryption happens.
            if new == old && !self.store.is_stale(&key, kv.mod_revision).await.map_err(|e| Self::store_err(e, &t))? {
                undo_all(self, undos).await;
                return Ok((old, false));
            }
            if ctx.dry_run {
                return Ok((new, false));
            }
            // Removing the last finalizer of a deleting object completes its deletion.
            let completes_deletion = object::is_deleting(&new)
                && object::finalizers(&new).is_empty()
                && r.strategy.on_delete(&mut new.clone(), None) == DeleteAction::Remove;
            let written = if completes_deletion {
                self.store.delete(&key, Some(kv.mod_revision)).await.map(|(rev, _)| rev)
            } else {
                let lease = match self.lease_for(r, &t).await {
                    Ok(lease) => lease,
                    Err(e) => {
                        undo_all(self, undos).await;
                        return Err(e);
                    }
                };
                self.store.update(&key, encode(r, &new), kv.mod_revision, lease).await
            };
            match written {
                Ok(rev) => {
                    object::set_resource_version(&mut new, rev);
                    if let Some(h) = &hooks {
                        if completes_deletion {
                            h.after_delete(self, &old).await;
                        } else {
                            h.after_update(self, &new, &old).await;
                        }
                    }
                    return Ok((new, false));
                }
                // As upstream's GuaranteedUpdate: read again and redo; a precondition the
                // caller set is checked against the fresh object (a patch follows it).
                Err(StoreError::Conflict { .. }) => {
                    undo_all(self, undos).await;
                    continue;
                }
                Err(e) => {
                    undo_all(self, undos).await;
                    return Err(Self::store_err(e, &t));
                }
            }
        }
        Err(ApiError::modified(&t))
    }

    pub async fn delete(
        &self,
        scope: &Scope,
        name: &str,
        opts: &DeleteOptions,
        ctx: &Context<'_>,
    ) -> ApiResult<Deleted> {
        let r = &scope.resource;
        let t = scope.target(name);
        let key = scope.key(name);
        for _ in 0..MAX_CONFLICT_RETRIES {
            let (kv, _) = self.store.get(&key, 0).await.map_err(|e| Self::store_err(e, &t))?;
            let kv = kv.ok_or_else(|| ApiError::not_found(&t))?;
            let current = decode(r, &kv.value, kv.mod_revision)?;
            if let Some(uid) = &opts.precondition_uid {
                let have = object::meta_str(&current, "uid").unwrap_or("");
                if have != uid {
                    return Err(ApiError::conflict(
                        &t,
                        &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {have}"),
                    ));
                }
            }
            if let Some(rv) = &opts.precondition_resource_version
                && *rv != kv.mod_revision.to_string()
            {
                return Err(ApiError::conflict(
                    &t,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        kv.mod_revision
                    ),
                ));
            }
            let attrs = Attributes {
                operation: Operation::Delete,
                resource: r,
                subresource: None,
                namespace: scope.namespace.as_deref(),
                name,
                user: ctx.user,
                dry_run: ctx.dry_run,
                warnings: ctx.warnings,
                audit_annotations: ctx.audit_annotations,
            };
            ctx.admission.validate(&attrs, None, Some(&current)).await?;

            let mut obj = current.clone();
            let mut finalizers = object::finalizers(&obj);
            match opts.propagation_policy.as_deref() {
                Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
                Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                    finalizers.push("foregroundDeletion".into())
                }
                None | Some("Orphan" | "Foreground" | "Background") => {}
                Some(other) => {
                    return Err(ApiError::invalid(
                        &t,
                        vec![Cause::not_supported("propagationPolicy", other, &["Foreground", "Background", "Orphan"])],
                    ));
                }
            }
            object::set_finalizers(&mut obj, &finalizers);
            let action = r.strategy.on_delete(&mut obj, opts.grace_period_seconds);
            if finalizers.is_empty() && action == DeleteAction::Remove {
                if ctx.dry_run {
                    return Ok(Deleted::Now(current));
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(_) => {
                        if let Some(h) = self.hooks_for(r) {
                            h.after_delete(self, &current).await;
                        }
                        return Ok(Deleted::Now(current));
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(Self::store_err(e, &t)),
                }
            }
            // Kept: mark it as deleting, or move the deadline of a shortened grace period.
            if object::is_deleting(&obj) {
                object::shorten_deletion(&mut obj, &current);
            } else {
                // The strategy may have set the grace period (pods); the object is due then.
                let grace = object::meta(&obj)
                    .and_then(|m| m.get("deletionGracePeriodSeconds"))
                    .and_then(Value::as_i64)
                    .unwrap_or(opts.grace_period_seconds.unwrap_or(0))
                    .max(0);
                let m = object::meta_mut(&mut obj);
                m.insert("deletionTimestamp".into(), json!(object::rfc3339_after(grace)));
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                if r.strategy.tracks_generation() {
                    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
                    m.insert("generation".into(), json!(g + 1));
                }
            }
            if obj == current || ctx.dry_run {
                return Ok(Deleted::Pending(obj));
            }
            match self.store.update(&key, encode(r, &obj), kv.mod_revision, kv.lease).await {
                Ok(rev) => {
                    object::set_resource_version(&mut obj, rev);
                    return Ok(Deleted::Pending(obj));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(Self::store_err(e, &t)),
            }
        }
        Err(ApiError::modified(&t))
    }

    pub async fn list(&self, scope: &Scope, opts: &ListOptions) -> ApiResult<ListResult> {
        let r = &scope.resource;
        let filter =
            Filter::new(r, scope.namespace.as_deref(), opts.label_selector.as_deref(), opts.field_selector.as_deref())?;
        let rv = opts.resource_version.as_deref().filter(|s| !s.is_empty());
        let rv_match = opts.resource_version_match.as_deref().filter(|s| !s.is_empty());
        match (rv_match, rv) {
            (Some("NotOlderThan" | "Exact"), None) => {
                return Err(ApiError::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            (Some(m), _) if m != "NotOlderThan" && m != "Exact" => {
                return Err(ApiError::bad_request(format!(
                    "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
                )));
            }
            (Some(_), _) if opts.continue_token.is_some() => {
                return Err(ApiError::bad_request("resourceVersionMatch is forbidden when continue is provided"));
            }
            _ => {}
        }
        if opts.continue_token.is_some() && rv.is_some_and(|v| v != "0") {
            return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
        }
        let from_cache = opts.continue_token.is_none()
            && (rv == Some("0") || (rv.is_some() && rv_match != Some("Exact") && opts.limit == 0));
        if from_cache {
            let wanted = parse_rv(rv.unwrap_or("0"))?;
            return self.list_from_cache(scope, &filter, wanted).await;
        }
        let exact = match rv {
            Some(v) if rv_match == Some("Exact") || opts.limit > 0 => parse_rv(v)?,
            _ => 0,
        };
        self.list_from_store(scope, &filter, opts, exact).await
    }

    async fn list_from_cache(&self, scope: &Scope, filter: &Filter, at_least: Revision) -> ApiResult<ListResult> {
        let cache = self.cache(&scope.resource);
        if !cache.wait_ready(CACHE_WAIT).await {
            // Still filling (a large resource's first use): the store answers meanwhile,
            // at its latest revision, which is never older than what was asked for.
            let opts = ListOptions::default();
            return self.list_from_store(scope, filter, &opts, 0).await;
        }
        if !cache.wait_for(at_least, CACHE_WAIT).await {
            return Err(ApiError::timeout(format!(
                "Too large resource version: {at_least}, current: {}",
                cache.revision()
            )));
        }
        let snap = cache.snapshot(&scope.prefix());
        let items = snap
            .objects
            .iter()
            .filter(|o| filter.matches_cached(o))
            .map(|o| present_json(&scope.resource, &o.json))
            .collect();
        Ok(ListResult { revision: snap.revision, items, continue_token: None, remaining_item_count: None })
    }

    async fn list_from_store(
        &self,
        scope: &Scope,
        filter: &Filter,
        opts: &ListOptions,
        exact: Revision,
    ) -> ApiResult<ListResult> {
        let prefix = scope.prefix();
        let (mut revision, mut start_after) = match &opts.continue_token {
            Some(token) => {
                let (rv, after) = continue_token::decode(token).map_err(ApiError::bad_request)?;
                (if rv == -1 { 0 } else { rv }, Some(format!("{prefix}{after}")))
            }
            None => (exact, None),
        };
        let limit = opts.limit;
        let mut items = Vec::new();
        let mut last_key: Option<String> = None;
        loop {
            let page = if limit == 0 {
                0
            } else if filter.is_trivial() {
                limit - items.len()
            } else {
                LIST_SCAN_PAGE.max(limit)
            };
            let req = RangeRequest { prefix: prefix.clone(), start_after: start_after.clone(), limit: page, revision };
            let resp = match self.store.range(req).await {
                Ok(resp) => resp,
                Err(StoreError::Compacted { .. }) if opts.continue_token.is_some() => {
                    let mut e = ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                    );
                    e.reason = "Expired";
                    let after = start_after.as_deref().and_then(|k| k.strip_prefix(&prefix)).unwrap_or("");
                    e.list_continue = (!after.is_empty()).then(|| continue_token::encode(-1, after));
                    return Err(e);
                }
                Err(e) => {
                    return Err(Self::store_err(
                        e,
                        &Target::new(&scope.resource.group, &scope.resource.plural, &scope.resource.kind, ""),
                    ));
                }
            };
            revision = resp.revision;
            let mut scanned_all = !resp.more;
            for (i, kv) in resp.kvs.iter().enumerate() {
                last_key = Some(kv.key.clone());
                let obj = decode(&scope.resource, &kv.value, kv.mod_revision)?;
                if filter.matches_value(&scope.resource, &obj) {
                    items.push(Bytes::from(serde_json::to_vec(&obj).unwrap_or_default()));
                    if limit > 0 && items.len() == limit {
                        scanned_all = !resp.more && i + 1 == resp.kvs.len();
                        let remaining =
                            filter.is_trivial().then(|| resp.count - resp.kvs.len() as i64).filter(|n| *n > 0);
                        let token = (!scanned_all).then(|| {
                            let after = last_key.as_deref().and_then(|k| k.strip_prefix(&prefix)).unwrap_or("");
                            continue_token::encode(revision, after)
                        });
                        return Ok(ListResult {
                            revision,
                            items,
                            remaining_item_count: token.as_ref().and(remaining),
                            continue_token: token,
                        });
                    }
                }
            }
            if scanned_all || limit == 0 {
                return Ok(ListResult { revision, items, continue_token: None, remaining_item_count: None });
            }
            start_after = last_key.clone();
        }
    }

    /// Deletes every object a list selects (namespace, selectors), one by one.
    pub async fn delete_collection(
        &self,
        scope: &Scope,
        list: &ListOptions,
        opts: &DeleteOptions,
        ctx: &Context<'_>,
    ) -> ApiResult<ListResult> {
        let listed = self.list(scope, &ListOptions { limit: 0, continue_token: None, ..list.clone() }).await?;
        let mut items = Vec::new();
        for item in listed.items {
            let obj: Value = serde_json::from_slice(&item).map_err(|e| ApiError::internal(e.to_string()))?;
            let item_scope = Scope {
                resource: scope.resource.clone(),
                namespace: object::meta_str(&obj, "namespace").map(String::from).or(scope.namespace.clone()),
            };
            match self.delete(&item_scope, object::name(&obj), opts, ctx).await {
                Ok(Deleted::Now(o) | Deleted::Pending(o)) => {
                    items.push(Bytes::from(serde_json::to_vec(&o).unwrap_or_default()))
                }
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(ListResult { revision: listed.revision, items, continue_token: None, remaining_item_count: None })
    }

    /// A watch served from the resource's watch cache.
    pub async fn watch(
        &self,
        scope: &Scope,
        opts: &WatchOptions,
    ) -> ApiResult<impl Stream<Item = WatchItem> + Send + 'static> {
        let r = scope.resource.clone();
        let filter = Filter::new(
            &r,
            scope.namespace.as_deref(),
            opts.label_selector.as_deref(),
            opts.field_selector.as_deref(),
        )?;
        let cache = self.cache(&r);
        if !cache.wait_ready(CACHE_WAIT).await {
            return Err(ApiError::service_unavailable("the watch cache is not ready yet; try again"));
        }
        let rv = opts.resource_version.as_deref().filter(|s| !s.is_empty());
        let initial = opts.send_initial_events.unwrap_or(matches!(rv, None | Some("0")));
        if opts.send_initial_events == Some(true) && !opts.allow_bookmarks {
            return Err(ApiError::invalid(
                &Target::default(),
                vec![Cause::forbidden(
                    "allowWatchBookmarks",
                    "allowWatchBookmarks must be set to true when sendInitialEvents is set",
                )],
            ));
        }
        let prefix = scope.prefix();
        let mut pending: Vec<WatchItem> = Vec::new();
        let cursor = if initial {
            if let Some(v) = rv.map(parse_rv).transpose()?
                && !cache.wait_for(v, CACHE_WAIT).await
            {
                return Err(ApiError::timeout(format!(
                    "Too large resource version: {v}, current: {}",
                    cache.revision()
                )));
            }
            let (snap, cursor) = cache.snapshot_and_cursor(&prefix);
            pending.extend(
                snap.objects
                    .iter()
                    .filter(|o| filter.matches_cached(o))
                    .map(|o| WatchItem::new("ADDED", present_json(&r, &o.json))),
            );
            if opts.send_initial_events == Some(true) {
                pending.push(bookmark(&r, snap.revision, true));
            }
            Some(cursor)
        } else {
            let after = parse_rv(rv.unwrap_or("0"))?;
            match cache.cursor(after) {
                Ok(c) => Some(c),
                Err(CacheError::TooOld { requested, oldest }) => {
                    pending.push(error_item(&ApiError::expired(format!(
                        "too old resource version: {requested} ({oldest})"
                    ))));
                    None
                }
                Err(CacheError::Reset) => None,
            }
        };
        let state = WatchState {
            cache,
            cursor,
            filter,
            resource: r,
            pending: pending.into(),
            bookmark_timer: opts.allow_bookmarks.then(|| Box::pin(tokio::time::sleep(BOOKMARK_EVERY))),
            last_sent: tokio::time::Instant::now(),
        };
        Ok(futures::stream::unfold(state, |mut s| async move { s.next().await.map(|item| (item, s)) }))
    }
}

/// Sets (or, with None, removes) the value at a JSON pointer, creating objects on the way.
fn set_pointer(doc: &mut Value, pointer: &str, value: Option<Value>) {
    let parts: Vec<&str> = pointer.trim_start_matches('/').split('/').collect();
    let Some((last, parents)) = parts.split_last() else { return };
    let mut cur = doc;
    for p in parents {
        if !cur.get(*p).is_some_and(Value::is_object) {
            if value.is_none() {
                return;
            }
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
    match value {
        Some(v) => cur[*last] = v,
        None => {
            cur.as_object_mut().map(|m| m.remove(*last));
        }
    }
}

/// The stored form of an object: in its kind's storage version, without resourceVersion.
fn encode(r: &ResourceInfo, obj: &Value) -> Bytes {
    if let Some(v) = r.strategy.storage_api_version() {
        let mut stored = obj.clone();
        stored["apiVersion"] = json!(v);
        return object::to_storage(&stored);
    }
    match conversion::storage_version(&r.group, &r.kind) {
        Some(v) if v != r.api_version() => object::to_storage(&conversion::convert(obj.clone(), v)),
        _ => object::to_storage(obj),
    }
}

/// A stored object as the request's version shows it.
fn decode(r: &ResourceInfo, data: &[u8], rev: Revision) -> ApiResult<Value> {
    let mut obj = object::from_storage(data, rev).map_err(ApiError::internal)?;
    if r.strategy.storage_api_version().is_some() {
        obj["apiVersion"] = json!(r.api_version());
        r.strategy.on_read(&mut obj);
        return Ok(obj);
    }
    Ok(match conversion::storage_version(&r.group, &r.kind) {
        Some(_) => conversion::convert(obj, &r.api_version()),
        None => obj,
    })
}

/// Cached JSON (storage version) as the request's version shows it.
fn present_json(r: &ResourceInfo, json: &Bytes) -> Bytes {
    if r.strategy.storage_api_version().is_some() {
        let mut obj: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
        if obj.is_object() {
            obj["apiVersion"] = json!(r.api_version());
            r.strategy.on_read(&mut obj);
        }
        return Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
    }
    match conversion::storage_version(&r.group, &r.kind) {
        Some(v) if v != r.api_version() => {
            let obj: Value = serde_json::from_slice(json).unwrap_or(Value::Null);
            Bytes::from(serde_json::to_vec(&conversion::convert(obj, &r.api_version())).unwrap_or_default())
        }
        _ => json.clone(),
    }
}

/// Applies a JSON patch or merge patch to a document.
/// Applies a patch to `current`, an object of the OpenAPI `definition` (which strategic
/// merge patches need).
pub fn apply_patch(
    current: &Value,
    patch: &Patch,
    definition: Option<&'static crate::schema::Definition>,
) -> ApiResult<Value> {
    let mut doc = current.clone();
    match patch {
        Patch::Json(p) => {
            let ops: json_patch::Patch = serde_json::from_value(p.clone())
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            json_patch::patch(&mut doc, &ops).map_err(|e| {
                ApiError::invalid(
                    &Target::default(),
                    vec![Cause::invalid(
                        "",
                        "",
                        format!("the server rejected our request due to an error in our request: {e}"),
                    )],
                )
            })?;
        }
        Patch::Merge(p) => {
            if !p.is_object() {
                return Err(ApiError::bad_request("a merge patch must be a JSON object"));
            }
            json_patch::merge(&mut doc, p);
        }
        Patch::Strategic(p) => {
            doc = crate::strategic::apply(current, p, definition).map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        Patch::Apply { .. } => {
            return Err(ApiError::unsupported_media_type(
                "application/apply-patch+yaml is not supported for this subresource",
            ));
        }
    }
    Ok(doc)
}

/// An object's autoscaling/v1 Scale: spec.replicas, status.replicas and the selector
/// as a string.
fn scale_of(r: &ResourceInfo, obj: &Value) -> Value {
    let paths = r.strategy.scale_paths();
    let (spec_path, status_path) = match paths {
        Some(p) => (p.spec_replicas.as_str(), p.status_replicas.as_str()),
        None => ("/spec/replicas", "/status/replicas"),
    };
    // Custom resources keep the selector as a string at their labelSelectorPath.
    let custom_selector = paths.map(|p| {
        p.label_selector.as_deref().and_then(|s| obj.pointer(s)).and_then(Value::as_str).unwrap_or("").to_string()
    });
    let selector = match (custom_selector, obj.pointer("/spec/selector")) {
        (Some(s), _) => s,
        // ReplicationControllers select with a plain map.
        (None, Some(Value::Object(m))) if !m.contains_key("matchLabels") && !m.contains_key("matchExpressions") => {
            m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>().join(",")
        }
        (None, Some(sel)) => label_selector_string(sel),
        (None, None) => String::new(),
    };
    let meta = object::meta(obj).cloned().unwrap_or_default();
    let keep = ["name", "namespace", "uid", "resourceVersion", "creationTimestamp"];
    let meta: serde_json::Map<String, Value> = meta.into_iter().filter(|(k, _)| keep.contains(&k.as_str())).collect();
    let mut status = json!({"replicas": obj.pointer(status_path).cloned().unwrap_or(json!(0))});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": meta,
        "spec": {"replicas": obj.pointer(spec_path).cloned().unwrap_or(json!(0))},
        "status": status,
    })
}

/// A metav1.LabelSelector in its string form ("app=web,tier in (a,b)").
pub fn label_selector_string(sel: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        parts.extend(m.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))));
    }
    for e in sel.get("matchExpressions").and_then(Value::as_array).into_iter().flatten() {
        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
        let values: Vec<&str> =
            e.get("values").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key.to_string()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

fn bookmark(r: &ResourceInfo, rev: Revision, initial_events_end: bool) -> WatchItem {
    let mut meta = json!({"resourceVersion": rev.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": r.kind, "apiVersion": r.api_version(), "metadata": meta});
    WatchItem::new("BOOKMARK", Bytes::from(obj.to_string()))
}

fn error_item(e: &ApiError) -> WatchItem {
    WatchItem::new("ERROR", Bytes::from(e.status().to_string()))
}

struct WatchState {
    cache: Arc<Cacher>,
    cursor: Option<crate::cache::Cursor>,
    filter: Filter,
    resource: Arc<ResourceInfo>,
    pending: std::collections::VecDeque<WatchItem>,
    /// Fires when a bookmark may be due (only for watches that asked for bookmarks).
    bookmark_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    last_sent: tokio::time::Instant,
}

impl WatchState {
    async fn next(&mut self) -> Option<WatchItem> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                self.last_sent = tokio::time::Instant::now();
                return Some(item);
            }
            let cursor = self.cursor.as_mut()?;
            match self.cache.next_events(cursor) {
                Ok((events, _)) if !events.is_empty() => {
                    for e in events {
                        if let Some(item) = convert(&self.filter, &self.resource, &e) {
                            self.pending.push_back(item);
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(CacheError::TooOld { requested, oldest }) => {
                    self.cursor = None;
                    return Some(error_item(&ApiError::expired(format!(
                        "too old resource version: {requested} ({oldest})"
                    ))));
                }
                Err(CacheError::Reset) => {
                    self.cursor = None;
                    return None;
                }
            }
            // One bookmark timer per watch, re-armed only when it fires: arming a timer on
            // every wake-up costs ten thousand watchers a timer-wheel round trip per event.
            let Some(timer) = self.bookmark_timer.as_mut() else {
                if !cursor.changed().await {
                    return None;
                }
                continue;
            };
            tokio::select! {
                alive = cursor.changed() => {
                    if !alive {
                        return None;
                    }
                }
                () = timer.as_mut() => {
                    let due = self.last_sent + BOOKMARK_EVERY;
                    if due > tokio::time::Instant::now() {
                        timer.as_mut().reset(due);
                        continue;
                    }
                    let rev = cursor.after;
                    self.last_sent = tokio::time::Instant::now();
                    timer.as_mut().reset(self.last_sent + BOOKMARK_EVERY);
                    return Some(bookmark(&self.resource, rev, false));
                }
            }
        }
    }
}

/// How a change looks to one watcher: objects entering or leaving its selection are
/// added or deleted from its point of view.
fn convert(filter: &Filter, r: &ResourceInfo, e: &crate::cache::CacheEvent) -> Option<WatchItem> {
    let now = filter.matches_cached(&e.object);
    let before = e.prev.as_ref().is_some_and(|p| filter.matches_cached(p));
    let kind = match (e.kind, before, now) {
        (crate::cache::EventType::Deleted, true, _) | (crate::cache::EventType::Deleted, false, true) => "DELETED",
        (crate::cache::EventType::Deleted, false, false) => return None,
        (_, false, true) => "ADDED",
        (_, true, true) => "MODIFIED",
        (_, true, false) => {
            // Left the selection: a delete of its previous state, at this revision.
            let prev = e.prev.as_ref()?;
            let mut v: Value = serde_json::from_slice(&prev.json).ok()?;
            object::set_resource_version(&mut v, e.revision);
            return Some(WatchItem::new("DELETED", present_json(r, &Bytes::from(v.to_string()))));
        }
        (_, false, false) => return None,
    };
    let object = present_json(r, &e.object.json);
    // Most watchers see the event as it is: share its one encoding.
    let line = (kind == e.kind.as_str() && object.as_ptr() == e.object.json.as_ptr()).then(|| e.json_line());
    Some(WatchItem { kind, object, line })
}
