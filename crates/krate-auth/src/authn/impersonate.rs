//! Impersonation: `Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid` and
//! `Impersonate-Extra-KEY` make a request act as another user, if the authorizer lets
//! the real user `impersonate` each of them (users, groups, serviceaccounts in the
//! core group; uids and userextras/KEY in authentication.k8s.io), as upstream.

use std::collections::BTreeMap;

use krate_api::ApiError;
use krate_api::user::UserInfo;

use crate::authz::{self, Attributes, Authorizer, Decision};

const USER: &str = "impersonate-user";
const GROUP: &str = "impersonate-group";
const UID: &str = "impersonate-uid";
const EXTRA_PREFIX: &str = "impersonate-extra-";

/// Whether the request asks to impersonate anyone (the common case is no).
pub fn requested(headers: &http::HeaderMap) -> bool {
    headers.keys().any(|k| k.as_str().starts_with("impersonate-"))
}

/// Extra keys travel percent-encoded in header names (which cannot hold '/' etc.).
fn unescape(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""), 16)
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| key.to_string())
}

/// One thing to impersonate, as the authorizer is asked about it.
struct Ask {
    api_group: &'static str,
    resource: &'static str,
    subresource: String,
    namespace: String,
    name: String,
}

fn values<'a>(headers: &'a http::HeaderMap, name: &str) -> Vec<&'a str> {
    headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect()
}

/// The user the request acts as: `requester` itself without Impersonate-* headers,
/// else the impersonated user once every part of it is authorized (403 if not).
pub async fn impersonate(
    requester: UserInfo,
    headers: &http::HeaderMap,
    authorizer: &dyn Authorizer,
) -> Result<UserInfo, ApiError> {
    if !requested(headers) {
        return Ok(requester);
    }
    let user_name = headers.get(USER).and_then(|v| v.to_str().ok()).unwrap_or("");
    let groups = values(headers, GROUP);
    let uid = headers.get(UID).and_then(|v| v.to_str().ok()).unwrap_or("");
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut asks = Vec::new();
    let sa = super::serviceaccount::split_username(user_name);
    if !user_name.is_empty() {
        asks.push(match sa {
            Some((ns, name)) => Ask {
                api_group: "",
                resource: "serviceaccounts",
                subresource: String::new(),
                namespace: ns.into(),
                name: name.into(),
            },
            None => Ask {
                api_group: "",
                resource: "users",
                subresource: String::new(),
                namespace: String::new(),
                name: user_name.into(),
            },
        });
    }
    for g in &groups {
        asks.push(Ask {
            api_group: "",
            resource: "groups",
            subresource: String::new(),
            namespace: String::new(),
            name: g.to_string(),
        });
    }
    for (name, value) in headers.iter() {
        let Some(key) = name.as_str().strip_prefix(EXTRA_PREFIX) else { continue };
        let key = unescape(key);
        let Ok(value) = value.to_str() else { continue };
        extra.entry(key.clone()).or_default().push(value.to_string());
        asks.push(Ask {
            api_group: "authentication.k8s.io",
            resource: "userextras",
            subresource: key,
            namespace: String::new(),
            name: value.to_string(),
        });
    }
    if !uid.is_empty() {
        asks.push(Ask {
            api_group: "authentication.k8s.io",
            resource: "uids",
            subresource: String::new(),
            namespace: String::new(),
            name: uid.into(),
        });
    }
    if user_name.is_empty() {
        // Upstream answers this with a 500; it is the client's mistake, so 400 here.
        return Err(ApiError::bad_request(format!(
            "requested {} without impersonating a user",
            asks.iter().map(|a| format!("{}/{}", a.resource, a.name)).collect::<Vec<_>>().join(", ")
        )));
    }
    for ask in &asks {
        let attrs = Attributes {
            user: &requester,
            verb: "impersonate",
            resource_request: true,
            path: "",
            namespace: &ask.namespace,
            api_group: ask.api_group,
            api_version: "v1",
            resource: ask.resource,
            subresource: &ask.subresource,
            name: &ask.name,
            field_selector: "",
        };
        match authorizer.authorize(&attrs).await {
            Decision::Allow => {}
            Decision::Deny(reason) | Decision::NoOpinion(reason) => {
                tracing::debug!(user = %requester.name, resource = ask.resource, name = %ask.name, "impersonation refused");
                return Err(ApiError::forbidden(authz::forbidden_message(&attrs, &reason)));
            }
        }
    }
    let mut out_groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
    // A service account's groups are known when none are asked for.
    if let (Some((ns, _)), true) = (sa, groups.is_empty()) {
        out_groups = vec!["system:serviceaccounts".into(), format!("system:serviceaccounts:{ns}")];
    }
    let has = |gs: &[String], g: &str| gs.iter().any(|x| x == g);
    if user_name == "system:anonymous" {
        if !has(&out_groups, "system:unauthenticated") {
            out_groups.push("system:unauthenticated".into());
        }
    } else if !has(&out_groups, "system:authenticated") && !has(&out_groups, "system:unauthenticated") {
        out_groups.push("system:authenticated".into());
    }
    Ok(UserInfo { name: user_name.to_string(), uid: uid.to_string(), groups: out_groups, extra })
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_trait::async_trait;

    /// Allows impersonating only what `allowed` lists as "resource/name".
    struct Only(Vec<&'static str>);

    #[async_trait]
    impl Authorizer for Only {
        async fn authorize(&self, a: &Attributes<'_>) -> Decision {
            let what = format!("{}/{}", a.resource, a.name);
            if a.verb == "impersonate" && self.0.contains(&what.as_str()) {
                Decision::Allow
            } else {
                Decision::NoOpinion(String::new())
            }
        }
    }

    fn headers(pairs: &[(&str, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.append(http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    }

    fn admin() -> UserInfo {
        UserInfo { name: "admin".into(), groups: vec!["ops".into()], ..Default::default() }
    }

    #[tokio::test]
    async fn no_headers_keep_the_requester() {
        let u = impersonate(admin(), &headers(&[]), &Only(vec![])).await.unwrap();
        assert_eq!(u, admin());
    }

    #[tokio::test]
    async fn every_part_is_authorized() {
        let auth = Only(vec!["users/jane", "groups/dev", "userextras/a", "uids/42"]);
        let h = headers(&[
            ("Impersonate-User", "jane"),
            ("Impersonate-Group", "dev"),
            ("Impersonate-Extra-Scopes%2Fx", "a"),
            ("Impersonate-Uid", "42"),
        ]);
        let u = impersonate(admin(), &h, &auth).await.unwrap();
        assert_eq!(u.name, "jane");
        assert_eq!(u.uid, "42");
        assert_eq!(u.groups, ["dev", "system:authenticated"]);
        assert_eq!(u.extra["scopes/x"], ["a"]);

        let auth = Only(vec!["users/jane"]);
        let e = impersonate(admin(), &h, &auth).await.unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "groups \"dev\" is forbidden: User \"admin\" cannot impersonate resource \"groups\" in API group \"\" at the cluster scope"
        );
    }

    #[tokio::test]
    async fn service_accounts_get_their_groups_and_namespace() {
        let h = headers(&[("Impersonate-User", "system:serviceaccount:ns:robot")]);
        let e = impersonate(admin(), &h, &Only(vec![])).await.unwrap_err();
        assert_eq!(
            e.message,
            "serviceaccounts \"robot\" is forbidden: User \"admin\" cannot impersonate resource \"serviceaccounts\" in API group \"\" in the namespace \"ns\""
        );
        let u = impersonate(admin(), &h, &Only(vec!["serviceaccounts/robot"])).await.unwrap();
        assert_eq!(u.groups, ["system:serviceaccounts", "system:serviceaccounts:ns", "system:authenticated"]);
    }

    #[tokio::test]
    async fn groups_without_a_user_are_a_bad_request() {
        let h = headers(&[("Impersonate-Group", "dev")]);
        let e = impersonate(admin(), &h, &Only(vec!["groups/dev"])).await.unwrap_err();
        assert_eq!(e.code, 400);
        assert!(e.message.contains("without impersonating a user"), "{}", e.message);
    }
}
