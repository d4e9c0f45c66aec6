//! DefaultIngressClass (upstream's admission plugin of that name): a new Ingress that
//! names no class (no spec.ingressClassName and no kubernetes.io/ingress.class
//! annotation) gets the default IngressClass — of several marked default, the newest.

use std::sync::{Arc, Weak};

use async_trait::async_trait;
use serde_json::Value;

use krate_api::admission::{Admission, Attributes, Operation};
use krate_api::registry::{ListOptions, Scope};
use krate_api::{ApiError, ApiResult, Registry};

use crate::default_storage_class::newest_default;

pub const DEFAULT_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

pub struct DefaultIngressClass {
    registry: Weak<Registry>,
}

impl DefaultIngressClass {
    pub fn new(registry: &Arc<Registry>) -> Self {
        DefaultIngressClass { registry: Arc::downgrade(registry) }
    }
}

#[async_trait]
impl Admission for DefaultIngressClass {
    async fn mutate(&self, attrs: &Attributes<'_>, ingress: &mut Value, _old: Option<&Value>) -> ApiResult<()> {
        let r = attrs.resource;
        if !(r.group == "networking.k8s.io"
            && r.plural == "ingresses"
            && attrs.subresource.is_none()
            && attrs.operation == Operation::Create)
        {
            return Ok(());
        }
        let annotated = ingress.pointer(&format!("/metadata/annotations/{}", CLASS_ANNOTATION.replace('/', "~1")));
        if ingress.pointer("/spec/ingressClassName").is_some_and(|v| !v.is_null()) || annotated.is_some() {
            return Ok(());
        }
        let registry = self.registry.upgrade().ok_or_else(|| ApiError::internal("the registry is gone"))?;
        let resource =
            registry.table.lookup("networking.k8s.io", "v1", "ingressclasses").expect("ingressclasses are built in");
        let listed = registry.list(&Scope { resource, namespace: None }, &ListOptions::default()).await?;
        let classes: Vec<Value> = listed.items.iter().filter_map(|b| serde_json::from_slice(b).ok()).collect();
        let default = newest_default(&classes, &[DEFAULT_ANNOTATION]);
        if let (Some(name), Some(ingress)) = (default, ingress.as_object_mut()) {
            let spec = ingress.entry("spec").or_insert_with(|| Value::Object(Default::default()));
            if let Some(spec) = spec.as_object_mut() {
                spec.insert("ingressClassName".into(), Value::String(name));
            }
        }
        Ok(())
    }
}
