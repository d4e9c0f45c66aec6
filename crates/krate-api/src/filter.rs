//! Which objects a list or watch wants: namespace, label selector, field selector.

use serde_json::Value;

use crate::cache::CachedObject;
use crate::error::{ApiError, ApiResult};
use crate::object;
use crate::resource::ResourceInfo;
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy::field_value;

#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    /// For each field requirement, where its value is: None for metadata.name /
    /// metadata.namespace, Some(i) for the strategy's i-th selectable field.
    field_slots: Vec<(Option<usize>, String)>,
}

impl Filter {
    /// Parses the selectors and checks that every field is selectable for the kind.
    pub fn new(
        resource: &ResourceInfo,
        namespace: Option<&str>,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> ApiResult<Self> {
        let labels = LabelSelector::parse(labels.unwrap_or("")).map_err(ApiError::bad_request)?;
        let fields = FieldSelector::parse(fields.unwrap_or("")).map_err(ApiError::bad_request)?;
        let selectable = resource.strategy.selectable_fields();
        let mut field_slots = Vec::new();
        for r in &fields.requirements {
            let slot = match r.field.as_str() {
                "metadata.name" | "metadata.namespace" => (None, r.field.clone()),
                f => match selectable.iter().position(|(label, _)| *label == f) {
                    Some(i) => (Some(i), r.field.clone()),
                    None => return Err(ApiError::bad_request(format!("field label not supported: {f}"))),
                },
            };
            field_slots.push(slot);
        }
        Ok(Filter { namespace: namespace.map(String::from), labels, fields, field_slots })
    }

    pub fn is_trivial(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches_cached(&self, o: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace
            && o.namespace.as_deref() != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(o.labels.as_ref())
            && self.fields.matches(|f| {
                self.field_slots.iter().find(|(_, name)| name == f).and_then(|(slot, name)| match slot {
                    Some(i) => o.fields.get(*i).cloned(),
                    None if name == "metadata.name" => Some(o.name.clone()),
                    None => Some(o.namespace.clone().unwrap_or_default()),
                })
            })
    }

    pub fn matches_value(&self, resource: &ResourceInfo, obj: &Value) -> bool {
        let ns = object::meta_str(obj, "namespace");
        if let Some(want) = &self.namespace
            && ns != Some(want.as_str())
        {
            return false;
        }
        let selectable = resource.strategy.selectable_fields();
        self.labels.matches(object::labels(obj))
            && self.fields.matches(|f| match f {
                "metadata.name" => Some(object::name(obj).to_string()),
                "metadata.namespace" => Some(ns.unwrap_or("").to_string()),
                other => selectable.iter().find(|(l, _)| *l == other).map(|(_, path)| field_value(obj, path)),
            })
    }
}
