//! The operations a group-version serves, as upstream's OpenAPI documents list them:
//! one model rendered both as OpenAPI v3 and as Swagger 2.0.

use std::collections::BTreeSet;

use krate_api::ResourceInfo;

/// What a request body or response is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Payload {
    /// A definition of the document (`components.schemas` / `definitions`).
    Def(String),
    /// A string (logs, connect subresources).
    Text,
    /// An object without a known schema (resources k8s-openapi does not describe).
    Object,
}

impl Payload {
    /// The schema of the payload, referring to definitions as `flavor` does.
    pub fn schema(&self, flavor: super::schemas::Flavor) -> serde_json::Value {
        match self {
            Payload::Def(name) => serde_json::json!({"$ref": flavor.reference(name)}),
            Payload::Text => serde_json::json!({"type": "string"}),
            Payload::Object => serde_json::json!({"type": "object"}),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    Name,
    Namespace,
    Pretty,
    AllowWatchBookmarks,
    Continue,
    FieldSelector,
    LabelSelector,
    Limit,
    ResourceVersion,
    ResourceVersionMatch,
    SendInitialEvents,
    TimeoutSeconds,
    Watch,
    DryRun,
    FieldManager,
    FieldValidation,
    Force,
    GracePeriodSeconds,
    OrphanDependents,
    PropagationPolicy,
}

pub struct ParamSpec {
    pub name: &'static str,
    pub location: &'static str,
    pub ty: &'static str,
    pub description: &'static str,
}

impl Param {
    pub fn spec(self) -> ParamSpec {
        let (name, location, ty, description) = match self {
            Param::Name => ("name", "path", "string", "name of the object"),
            Param::Namespace => {
                ("namespace", "path", "string", "object name and auth scope, such as for teams and projects")
            }
            Param::Pretty => (
                "pretty",
                "query",
                "string",
                "If 'true', then the output is pretty printed. Defaults to 'false' unless the user-agent indicates a browser or command-line HTTP tool (curl and wget).",
            ),
            Param::AllowWatchBookmarks => (
                "allowWatchBookmarks",
                "query",
                "boolean",
                "allowWatchBookmarks requests watch events with type \"BOOKMARK\". Servers that do not implement bookmarks may ignore this flag and bookmarks are sent at the server's discretion. Clients should not assume bookmarks are returned at any specific interval, nor may they assume the server will send any BOOKMARK event during a session. If this is not a watch, this field is ignored.",
            ),
            Param::Continue => (
                "continue",
                "query",
                "string",
                "The continue option should be set when retrieving more results from the server. Since this value is server defined, clients may only use the continue value from a previous query result with identical query parameters (except for the value of continue) and the server may reject a continue value it does not recognize.",
            ),
            Param::FieldSelector => (
                "fieldSelector",
                "query",
                "string",
                "A selector to restrict the list of returned objects by their fields. Defaults to everything.",
            ),
            Param::LabelSelector => (
                "labelSelector",
                "query",
                "string",
                "A selector to restrict the list of returned objects by their labels. Defaults to everything.",
            ),
            Param::Limit => (
                "limit",
                "query",
                "integer",
                "limit is a maximum number of responses to return for a list call. If more items exist, the server will set the `continue` field on the list metadata to a value that can be used with the same initial query to retrieve the next set of results.",
            ),
            Param::ResourceVersion => (
                "resourceVersion",
                "query",
                "string",
                "resourceVersion sets a constraint on what resource versions a request may be served from. See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
            ),
            Param::ResourceVersionMatch => (
                "resourceVersionMatch",
                "query",
                "string",
                "resourceVersionMatch determines how resourceVersion is applied to list calls. It is highly recommended that resourceVersionMatch be set for list calls where resourceVersion is set See https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions for details.\n\nDefaults to unset",
            ),
            Param::SendInitialEvents => (
                "sendInitialEvents",
                "query",
                "boolean",
                "`sendInitialEvents=true` may be set together with `watch=true`. In that case, the watch stream will begin with synthetic events to produce the current state of objects in the collection.",
            ),
            Param::TimeoutSeconds => (
                "timeoutSeconds",
                "query",
                "integer",
                "Timeout for the list/watch call. This limits the duration of the call, regardless of any activity or inactivity.",
            ),
            Param::Watch => (
                "watch",
                "query",
                "boolean",
                "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications. Specify resourceVersion.",
            ),
            Param::DryRun => (
                "dryRun",
                "query",
                "string",
                "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            ),
            Param::FieldManager => (
                "fieldManager",
                "query",
                "string",
                "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
            ),
            Param::FieldValidation => (
                "fieldValidation",
                "query",
                "string",
                "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.",
            ),
            Param::Force => (
                "force",
                "query",
                "boolean",
                "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.",
            ),
            Param::GracePeriodSeconds => (
                "gracePeriodSeconds",
                "query",
                "integer",
                "The duration in seconds before the object should be deleted. Value must be non-negative integer. The value zero indicates delete immediately. If this value is nil, the default grace period for the specified type will be used. Defaults to a per object value if not specified. zero means delete immediately.",
            ),
            Param::OrphanDependents => (
                "orphanDependents",
                "query",
                "boolean",
                "Deprecated: please use the PropagationPolicy, this field will be deprecated in 1.7. Should the dependent objects be orphaned. If true/false, the \"orphan\" finalizer will be added to/removed from the object's finalizers list. Either this field or PropagationPolicy may be set, but not both.",
            ),
            Param::PropagationPolicy => (
                "propagationPolicy",
                "query",
                "string",
                "Whether and how garbage collection will be performed. Either this field or OrphanDependents may be set, but not both. Acceptable values are: 'Orphan' - orphan the dependents; 'Background' - allow the garbage collector to delete the dependents in the background; 'Foreground' - a cascading policy that deletes all dependents in the foreground.",
            ),
        };
        ParamSpec { name, location, ty, description }
    }
}

const LIST_PARAMS: &[Param] = &[
    Param::AllowWatchBookmarks,
    Param::Continue,
    Param::FieldSelector,
    Param::LabelSelector,
    Param::Limit,
    Param::ResourceVersion,
    Param::ResourceVersionMatch,
    Param::SendInitialEvents,
    Param::TimeoutSeconds,
    Param::Watch,
];
const WRITE_PARAMS: &[Param] = &[Param::DryRun, Param::FieldManager, Param::FieldValidation];
const PATCH_PARAMS: &[Param] = &[Param::DryRun, Param::FieldManager, Param::FieldValidation, Param::Force];
const DELETE_PARAMS: &[Param] =
    &[Param::DryRun, Param::GracePeriodSeconds, Param::OrphanDependents, Param::PropagationPolicy];
const DELETECOLLECTION_PARAMS: &[Param] = &[
    Param::Continue,
    Param::DryRun,
    Param::FieldSelector,
    Param::GracePeriodSeconds,
    Param::LabelSelector,
    Param::Limit,
    Param::OrphanDependents,
    Param::PropagationPolicy,
    Param::ResourceVersion,
    Param::ResourceVersionMatch,
    Param::SendInitialEvents,
    Param::TimeoutSeconds,
];

pub const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];
const PATCH_DEF: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const STATUS_DEF: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS_DEF: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

#[derive(Debug)]
pub struct Operation {
    /// get, post, put, patch, delete (lowercase, as OpenAPI keys them).
    pub method: &'static str,
    /// x-kubernetes-action: get, list, create, put, patch, delete, deletecollection, post, connect.
    pub action: &'static str,
    pub id: String,
    pub description: String,
    pub gvk: Gvk,
    /// The resource's group and version, as upstream tags operations (core_v1, apps_v1).
    pub tag: String,
    pub params: Vec<Param>,
    pub body: Option<(Payload, bool)>,
    /// Status code, description, payload.
    pub responses: Vec<(u16, &'static str, Payload)>,
    /// Whether the body is a patch (content types differ).
    pub patch: bool,
}

#[derive(Debug)]
pub struct PathItem {
    pub path: String,
    /// Parameters of every operation on the path (name, namespace, pretty).
    pub params: Vec<Param>,
    pub operations: Vec<Operation>,
}

/// The `paths` object of a document: each path's operations and shared parameters,
/// written by the document version's own `operation` and `parameter`.
pub fn path_items(
    paths: &[PathItem],
    operation: impl Fn(&Operation) -> serde_json::Value,
    parameter: impl Fn(Param, &str) -> serde_json::Value,
) -> serde_json::Map<String, serde_json::Value> {
    let mut out = serde_json::Map::new();
    for item in paths {
        let mut entry = serde_json::Map::new();
        for op in &item.operations {
            entry.insert(op.method.into(), operation(op));
        }
        let kind = item.operations.first().map(|o| o.gvk.kind.as_str()).unwrap_or("object");
        entry.insert("parameters".into(), item.params.iter().map(|p| parameter(*p, kind)).collect());
        out.insert(item.path.clone(), serde_json::Value::Object(entry));
    }
    out
}

/// Upstream's operation-id spelling of a group: "" → Core, "rbac.authorization.k8s.io"
/// → RbacAuthorization, "example.com" → ExampleCom.
fn group_camel(group: &str) -> String {
    if group.is_empty() {
        return "Core".into();
    }
    group.trim_end_matches(".k8s.io").split(['.', '-']).map(capitalize).collect()
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// The definition of a kind, by the generated facts (None: not a built-in kind).
fn kind_payload(group: &str, version: &str, kind: &str) -> Payload {
    match krate_api::schema::definition_name_of(group, version, kind) {
        Some(name) => Payload::Def(name.to_string()),
        None => Payload::Object,
    }
}

/// Every path and operation of the resources of one group-version, sorted by path.
pub fn paths(resources: &[std::sync::Arc<ResourceInfo>]) -> Vec<PathItem> {
    let mut out: Vec<PathItem> = Vec::new();
    for r in resources {
        out.extend(resource_paths(r));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn resource_paths(r: &ResourceInfo) -> Vec<PathItem> {
    let prefix =
        if r.group.is_empty() { format!("/api/{}", r.version) } else { format!("/apis/{}/{}", r.group, r.version) };
    let gvk = Gvk { group: r.group.clone(), version: r.version.clone(), kind: r.kind.clone() };
    let (gc, vc) = (group_camel(&r.group), capitalize(&r.version));
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let tag = {
        let mut c = gc.chars();
        let first: String = c.next().map(|f| f.to_lowercase().collect()).unwrap_or_default();
        format!("{first}{}_{}", c.as_str(), r.version)
    };
    let base = if r.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
    } else {
        format!("{prefix}/{}", r.plural)
    };
    let scope_params: Vec<Param> =
        if r.namespaced { vec![Param::Namespace, Param::Pretty] } else { vec![Param::Pretty] };
    let (object, list) = match r.strategy.openapi_schema() {
        // Custom resources: their definitions come from the CRD (`custom`).
        Some(_) => (
            Payload::Def(super::custom::definition_name(&r.group, &r.version, &r.kind)),
            Payload::Def(super::custom::definition_name(&r.group, &r.version, &format!("{}List", r.kind))),
        ),
        None => (
            kind_payload(&r.group, &r.version, &r.kind),
            kind_payload(&r.group, &r.version, &format!("{}List", r.kind)),
        ),
    };
    let status = Payload::Def(STATUS_DEF.into());
    let op = |method, action, verb: &str, kind_part: String, description: String| Operation {
        method,
        action,
        id: format!("{verb}{gc}{vc}{kind_part}"),
        description,
        gvk: gvk.clone(),
        tag: tag.clone(),
        params: Vec::new(),
        body: None,
        responses: Vec::new(),
        patch: false,
    };
    let mut items = Vec::new();

    let mut collection = Vec::new();
    if r.has_verb("list") {
        let mut o = op(
            "get",
            "list",
            "list",
            format!("{scope}{}", r.kind),
            format!("list or watch objects of kind {}", r.kind),
        );
        o.params = LIST_PARAMS.to_vec();
        o.responses = vec![(200, "OK", list.clone())];
        collection.push(o);
    }
    if r.has_verb("create") {
        let mut o = op("post", "post", "create", format!("{scope}{}", r.kind), format!("create a {}", r.kind));
        o.params = WRITE_PARAMS.to_vec();
        o.body = Some((object.clone(), true));
        o.responses =
            vec![(200, "OK", object.clone()), (201, "Created", object.clone()), (202, "Accepted", object.clone())];
        collection.push(o);
    }
    if r.has_verb("deletecollection") {
        let mut o = op(
            "delete",
            "deletecollection",
            "delete",
            format!("Collection{scope}{}", r.kind),
            format!("delete collection of {}", r.kind),
        );
        o.params = DELETECOLLECTION_PARAMS.to_vec();
        o.body = Some((Payload::Def(DELETE_OPTIONS_DEF.into()), false));
        o.responses = vec![(200, "OK", status.clone())];
        collection.push(o);
    }
    if !collection.is_empty() {
        items.push(PathItem { path: base.clone(), params: scope_params.clone(), operations: collection });
    }
    // Namespaced lists across every namespace.
    if r.namespaced && r.has_verb("list") {
        let all = format!("{prefix}/{}", r.plural);
        let mut o = op(
            "get",
            "list",
            "list",
            format!("{}ForAllNamespaces", r.kind),
            format!("list or watch objects of kind {}", r.kind),
        );
        o.responses = vec![(200, "OK", list)];
        let mut params = LIST_PARAMS.to_vec();
        params.push(Param::Pretty);
        items.push(PathItem { path: all, params, operations: vec![o] });
    }

    let item_path = format!("{base}/{{name}}");
    let mut item_params = vec![Param::Name];
    item_params.extend(scope_params.iter().copied());
    let mut single = Vec::new();
    if r.has_verb("get") {
        let mut o = op("get", "get", "read", format!("{scope}{}", r.kind), format!("read the specified {}", r.kind));
        o.responses = vec![(200, "OK", object.clone())];
        single.push(o);
    }
    if r.has_verb("update") {
        let mut o =
            op("put", "put", "replace", format!("{scope}{}", r.kind), format!("replace the specified {}", r.kind));
        o.params = WRITE_PARAMS.to_vec();
        o.body = Some((object.clone(), true));
        o.responses = vec![(200, "OK", object.clone()), (201, "Created", object.clone())];
        single.push(o);
    }
    if r.has_verb("patch") {
        let mut o = op(
            "patch",
            "patch",
            "patch",
            format!("{scope}{}", r.kind),
            format!("partially update the specified {}", r.kind),
        );
        o.params = PATCH_PARAMS.to_vec();
        o.body = Some((Payload::Def(PATCH_DEF.into()), true));
        o.patch = true;
        o.responses = vec![(200, "OK", object.clone()), (201, "Created", object.clone())];
        single.push(o);
    }
    if r.has_verb("delete") {
        let mut o = op("delete", "delete", "delete", format!("{scope}{}", r.kind), format!("delete a {}", r.kind));
        o.params = DELETE_PARAMS.to_vec();
        o.body = Some((Payload::Def(DELETE_OPTIONS_DEF.into()), false));
        o.responses = vec![(200, "OK", object.clone()), (202, "Accepted", object.clone())];
        single.push(o);
    }
    if !single.is_empty() {
        items.push(PathItem { path: item_path.clone(), params: item_params.clone(), operations: single });
    }

    for s in &r.subresources {
        let (sg, sv) = if s.group.is_empty() && s.version.is_empty() {
            (r.group.as_str(), r.version.as_str())
        } else {
            (s.group.as_str(), s.version.as_str())
        };
        let sub_gvk = Gvk { group: sg.into(), version: sv.into(), kind: s.kind.clone() };
        let payload = kind_payload(sg, sv, &s.kind);
        let part = format!("{scope}{}{}", r.kind, capitalize(&s.name));
        let what = format!("{} of the specified {}", s.name, r.kind);
        // Streams and proxies (exec, attach, portforward, proxy) are "connect" actions
        // answering with a string; logs are read as text.
        let connect = s.kind.ends_with("Options");
        let text = connect || s.name == "log";
        let has = |v: &str| s.verbs.iter().any(|x| x == v);
        let mut ops = Vec::new();
        let sub_op = |method: &'static str, action: &'static str, verb: &str, description: String| {
            let mut o = op(method, action, verb, part.clone(), description);
            o.gvk = sub_gvk.clone();
            o
        };
        if connect {
            for (method, verb) in [("get", "get"), ("post", "create")] {
                if has(verb) {
                    let mut o = sub_op(
                        method,
                        "connect",
                        &format!("connect{}", capitalize(method)),
                        format!("connect {method} requests to {} of {}", s.name, r.kind),
                    );
                    o.id = format!("connect{gc}{vc}{}{part}", capitalize(method));
                    o.responses = vec![(200, "OK", Payload::Text)];
                    ops.push(o);
                }
            }
        } else {
            let response = if text { Payload::Text } else { payload.clone() };
            if has("get") {
                let mut o = sub_op("get", "get", "read", format!("read {what}"));
                o.responses = vec![(200, "OK", response.clone())];
                ops.push(o);
            }
            if has("create") {
                let mut o = sub_op("post", "post", "create", format!("create {} of a {}", s.name, r.kind));
                o.params = WRITE_PARAMS.to_vec();
                o.body = Some((payload.clone(), true));
                o.responses = vec![
                    (200, "OK", payload.clone()),
                    (201, "Created", payload.clone()),
                    (202, "Accepted", payload.clone()),
                ];
                ops.push(o);
            }
            if has("update") {
                let mut o = sub_op("put", "put", "replace", format!("replace {what}"));
                o.params = WRITE_PARAMS.to_vec();
                o.body = Some((payload.clone(), true));
                o.responses = vec![(200, "OK", payload.clone()), (201, "Created", payload.clone())];
                ops.push(o);
            }
            if has("patch") {
                let mut o = sub_op("patch", "patch", "patch", format!("partially update {what}"));
                o.params = PATCH_PARAMS.to_vec();
                o.body = Some((Payload::Def(PATCH_DEF.into()), true));
                o.patch = true;
                o.responses = vec![(200, "OK", payload.clone()), (201, "Created", payload.clone())];
                ops.push(o);
            }
        }
        if !ops.is_empty() {
            items.push(PathItem {
                path: format!("{item_path}/{}", s.name),
                params: item_params.clone(),
                operations: ops,
            });
        }
    }
    items
}

/// Every definition an operation names.
pub fn referenced(paths: &[PathItem]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for op in paths.iter().flat_map(|p| &p.operations) {
        let payloads = op.body.iter().map(|(p, _)| p).chain(op.responses.iter().map(|(_, _, p)| p));
        for p in payloads {
            if let Payload::Def(name) = p {
                out.insert(name.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_follow_upstream() {
        let table = krate_api::ResourceTable::builtin();
        let pods = table.lookup("", "v1", "pods").unwrap();
        let items = resource_paths(&pods);
        let ids: Vec<&str> = items.iter().flat_map(|p| p.operations.iter().map(|o| o.id.as_str())).collect();
        for want in [
            "listCoreV1NamespacedPod",
            "createCoreV1NamespacedPod",
            "deleteCoreV1CollectionNamespacedPod",
            "listCoreV1PodForAllNamespaces",
            "readCoreV1NamespacedPod",
            "replaceCoreV1NamespacedPod",
            "patchCoreV1NamespacedPod",
            "deleteCoreV1NamespacedPod",
            "replaceCoreV1NamespacedPodStatus",
            "createCoreV1NamespacedPodEviction",
            "connectCoreV1GetNamespacedPodExec",
        ] {
            assert!(ids.contains(&want), "{want} missing from {ids:?}");
        }
        assert_eq!(group_camel("rbac.authorization.k8s.io"), "RbacAuthorization");
        assert_eq!(group_camel("flowcontrol.apiserver.k8s.io"), "FlowcontrolApiserver");
        let deploy = table.lookup("apps", "v1", "deployments").unwrap();
        let scale = resource_paths(&deploy).into_iter().find(|p| p.path.ends_with("/scale")).unwrap();
        let patch = scale.operations.iter().find(|o| o.method == "patch").unwrap();
        assert_eq!(patch.id, "patchAppsV1NamespacedDeploymentScale");
        assert_eq!(patch.gvk.group, "autoscaling");
        assert!(patch.params.contains(&Param::FieldValidation));
    }
}
