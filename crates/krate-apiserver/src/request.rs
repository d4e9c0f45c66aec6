//! What a request addresses, decoded from its method, path and query the way
//! upstream's RequestInfoFactory does.

use std::collections::HashMap;

use krate_api::user::UserInfo;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    pub is_resource: bool,
    /// get, list, watch, create, update, patch, delete, deletecollection; for
    /// non-resource requests the lowercase HTTP method.
    pub verb: String,
    pub path: String,
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub subresource: Option<String>,
    pub name: Option<String>,
    /// The raw fieldSelector of a list, watch or deletecollection.
    pub field_selector: Option<String>,
}

impl RequestInfo {
    /// The request as authorizers (and audit policies) see it, asked by `user`.
    pub fn attributes<'a>(&'a self, user: &'a UserInfo) -> krate_auth::authz::Attributes<'a> {
        krate_auth::authz::Attributes {
            user,
            verb: &self.verb,
            resource_request: self.is_resource,
            path: &self.path,
            namespace: self.namespace.as_deref().unwrap_or(""),
            api_group: &self.group,
            api_version: &self.version,
            resource: &self.resource,
            subresource: self.subresource.as_deref().unwrap_or(""),
            name: self.name.as_deref().unwrap_or(""),
            field_selector: self.field_selector.as_deref().unwrap_or(""),
        }
    }
}

/// Subresources of a namespace, which are not namespaced resources of their own.
const NAMESPACE_SUBRESOURCES: &[&str] = &["status", "finalize"];

pub fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(percent_decode(k), percent_decode(v));
    }
    out
}

/// Decodes %XX escapes and '+' (as space) in a query component.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub fn parse(method: &http::Method, path: &str, query: &HashMap<String, String>) -> RequestInfo {
    let mut info = RequestInfo { path: path.to_string(), verb: method.as_str().to_lowercase(), ..Default::default() };
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect();
    let mut rest: &[&str] = match parts.as_slice() {
        ["api", version, rest @ ..] => {
            info.version = version.to_string();
            rest
        }
        ["apis", group, version, rest @ ..] => {
            info.group = group.to_string();
            info.version = version.to_string();
            rest
        }
        _ => return info,
    };
    if rest.is_empty() {
        return info;
    }
    info.is_resource = true;
    let mut legacy_watch = false;
    if rest[0] == "watch" {
        legacy_watch = true;
        rest = &rest[1..];
    }
    if rest.first() == Some(&"namespaces") && rest.len() > 1 {
        info.namespace = Some(rest[1].to_string());
        if rest.len() > 2 && !NAMESPACE_SUBRESOURCES.contains(&rest[2]) {
            rest = &rest[2..];
        }
    }
    info.resource = rest.first().map(|s| s.to_string()).unwrap_or_default();
    info.name = rest.get(1).map(|s| s.to_string());
    info.subresource = rest.get(2).map(|s| s.to_string());
    if info.resource == "namespaces" {
        // A namespace is cluster-scoped; its name came in the namespace position.
        info.namespace = None;
    }
    let watch_param = query.get("watch").is_some_and(|v| v == "true" || v == "1");
    info.verb = match *method {
        http::Method::GET | http::Method::HEAD => {
            if legacy_watch || watch_param {
                "watch"
            } else if info.name.is_none() {
                "list"
            } else {
                "get"
            }
        }
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => {
            if info.name.is_none() {
                "deletecollection"
            } else {
                "delete"
            }
        }
        _ => "",
    }
    .to_string();
    if matches!(info.verb.as_str(), "list" | "watch" | "deletecollection") {
        info.field_selector = query.get("fieldSelector").filter(|f| !f.is_empty()).cloned();
    }
    // As upstream: a list or watch of one object by metadata.name is about that object,
    // so authorizers that judge by name (the Node authorizer) can allow it.
    if info.name.is_none()
        && matches!(info.verb.as_str(), "list" | "watch")
        && let Some(fs) = query.get("fieldSelector")
        && let Ok(sel) = krate_api::selector::FieldSelector::parse(fs)
        && let Some(name) = sel.required_value("metadata.name")
        && !name.is_empty()
        && !name.contains('/')
        && name != "."
        && name != ".."
    {
        info.name = Some(name.to_string());
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn p(m: Method, path: &str, q: &str) -> RequestInfo {
        parse(&m, path, &parse_query(Some(q)))
    }

    #[test]
    fn resource_paths() {
        let i = p(Method::GET, "/api/v1/namespaces/default/pods/web", "");
        assert_eq!(
            (i.verb.as_str(), i.namespace.as_deref(), i.resource.as_str(), i.name.as_deref()),
            ("get", Some("default"), "pods", Some("web"))
        );
        let i = p(Method::GET, "/apis/apps/v1/deployments", "watch=true");
        assert_eq!((i.verb.as_str(), i.group.as_str(), i.namespace), ("watch", "apps", None));
        let i = p(Method::GET, "/api/v1/watch/namespaces/kube-system/configmaps", "");
        assert_eq!(
            (i.verb.as_str(), i.namespace.as_deref(), i.resource.as_str()),
            ("watch", Some("kube-system"), "configmaps")
        );
        let i = p(Method::PUT, "/api/v1/namespaces/team/status", "");
        assert_eq!(
            (i.resource.as_str(), i.name.as_deref(), i.subresource.as_deref(), i.namespace),
            ("namespaces", Some("team"), Some("status"), None)
        );
        let i = p(Method::DELETE, "/api/v1/namespaces/x/configmaps", "");
        assert_eq!(i.verb, "deletecollection");
        let i = p(Method::PATCH, "/apis/apps/v1/namespaces/d/deployments/web/scale", "");
        assert_eq!((i.verb.as_str(), i.subresource.as_deref()), ("patch", Some("scale")));
        assert!(!p(Method::GET, "/apis/apps/v1", "").is_resource);
        assert!(!p(Method::GET, "/healthz", "").is_resource);
    }

    #[test]
    fn a_list_by_metadata_name_names_its_object() {
        let i = p(Method::GET, "/api/v1/namespaces/d/secrets", "fieldSelector=metadata.name%3Ds1&watch=true");
        assert_eq!((i.verb.as_str(), i.name.as_deref()), ("watch", Some("s1")));
        let i = p(Method::GET, "/api/v1/namespaces/d/secrets", "fieldSelector=metadata.name%21%3Ds1");
        assert_eq!((i.verb.as_str(), i.name), ("list", None));
    }

    #[test]
    fn query_decoding() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&limit=5"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["limit"], "5");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
