//! DefaultStorageClass (upstream's admission plugin of that name): a new
//! PersistentVolumeClaim without a class (storageClassName unset, not "") gets the
//! default StorageClass — of those annotated default, the newest.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::{ListOptions, Scope};
use krate_api::{ApiError, ApiResult, Registry};

pub const DEFAULT_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_DEFAULT_ANNOTATION: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// A claim naming its class by the old beta annotation keeps it.
const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

pub struct DefaultStorageClass {
    registry: Weak<Registry>,
}

impl DefaultStorageClass {
    pub fn new(registry: &Arc<Registry>) -> Self {
        DefaultStorageClass { registry: Arc::downgrade(registry) }
    }
}

/// The default among these StorageClasses: newest first, then by name (upstream's
/// GetDefaultClass).
pub fn pick_default(classes: &[Value]) -> Option<String> {
    newest_default(classes, &[DEFAULT_ANNOTATION, BETA_DEFAULT_ANNOTATION])
}

/// The newest (then first by name) of `classes` that one of `annotations` marks "true":
/// how upstream picks a default StorageClass or IngressClass among several.
pub fn newest_default(classes: &[Value], annotations: &[&str]) -> Option<String> {
    let is_default = |c: &&Value| {
        annotations.iter().any(|a| {
            c.pointer(&format!("/metadata/annotations/{}", a.replace('/', "~1"))).and_then(Value::as_str)
                == Some("true")
        })
    };
    let field = |c: &Value, p: &str| c.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let mut defaults: Vec<&Value> = classes.iter().filter(is_default).collect();
    // RFC 3339 timestamps of one format order as strings.
    defaults.sort_by(|a, b| {
        field(b, "/metadata/creationTimestamp")
            .cmp(&field(a, "/metadata/creationTimestamp"))
            .then_with(|| field(a, "/metadata/name").cmp(&field(b, "/metadata/name")))
    });
    defaults.first().map(|c| field(c, "/metadata/name"))
}

#[async_trait]
impl Admission for DefaultStorageClass {
    async fn mutate(&self, attrs: &Attributes<'_>, pvc: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group.is_empty()
            && r.plural == "persistentvolumeclaims"
            && attrs.subresource.is_none()
            && attrs.operation == Operation::Create)
        {
            return Ok(());
        }
        if pvc.pointer("/spec/storageClassName").is_some_and(|v| !v.is_null())
            || pvc.pointer(&format!("/metadata/annotations/{}", BETA_CLASS_ANNOTATION.replace('/', "~1"))).is_some()
        {
            return Ok(());
        }
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource =
            registry.table.lookup("storage.k8s.io", "v1", "storageclasses").expect("storageclasses are built in");
        let listed = registry.list(&Scope { resource, namespace: None }, &ListOptions::default()).await?;
        let classes: Vec<Value> = listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        if let (Some(name), Some(spec)) = (pick_default(&classes), pvc.get_mut("spec").and_then(Value::as_object_mut)) {
            spec.insert("storageClassName".into(), Value::String(name));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_newest_default_wins() {
        let class = |name: &str, created: &str, default: bool| {
            json!({"metadata": {"name": name, "creationTimestamp": created,
                "annotations": {DEFAULT_ANNOTATION: if default {"true"} else {"false"}}}})
        };
        let classes = vec![
            class("old", "2025-01-01T00:00:00Z", true),
            class("new", "2025-06-01T00:00:00Z", true),
            class("newest-but-not-default", "2025-09-01T00:00:00Z", false),
        ];
        assert_eq!(pick_default(&classes).as_deref(), Some("new"));
        assert_eq!(pick_default(&classes[2..]), None);
    }
}
