//! Structural facts of the built-in types, from upstream's OpenAPI spec
//! (`generated::schema`, written by hack/gen-schema-facts.py): what strategic merge
//! patch, server-side apply and the OpenAPI documents need to know about each field.

use crate::generated::schema::{DEFINITIONS, KINDS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A nested object with its own definition (`elem`).
    Struct,
    /// A list; `elem` names the definition of its items when they are objects.
    List,
    /// A map with string keys; `elem` names the definition of its values when objects.
    Map,
    /// A scalar (or a type that is a string on the wire) that carries an extension.
    Scalar,
}

#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub shape: Shape,
    pub elem: Option<&'static str>,
    pub list_type: Option<&'static str>,
    pub list_map_keys: &'static [&'static str],
    pub map_type: Option<&'static str>,
    pub patch_strategy: Option<&'static str>,
    pub merge_key: Option<&'static str>,
}

impl Field {
    /// Whether the patch strategy includes `strategy` ("merge", "retainKeys", "replace").
    pub fn has_strategy(&self, strategy: &str) -> bool {
        self.patch_strategy.is_some_and(|s| s.split(',').any(|p| p == strategy))
    }
}

#[derive(Debug)]
pub struct Definition {
    pub name: &'static str,
    pub map_type: Option<&'static str>,
    /// Fields that are objects, lists or maps, or carry an extension; plain scalars
    /// are not listed.
    pub fields: &'static [Field],
}

impl Definition {
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// A definition by its OpenAPI name (`io.k8s.api.core.v1.PodSpec`).
pub fn definition(name: &str) -> Option<&'static Definition> {
    DEFINITIONS.binary_search_by(|d| d.name.cmp(name)).ok().map(|i| &DEFINITIONS[i])
}

/// The OpenAPI definition name of a built-in kind.
pub fn definition_name_of(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    KINDS.binary_search_by(|(g, v, k, _)| (*g, *v, *k).cmp(&(group, version, kind))).ok().map(|i| KINDS[i].3)
}

/// The definition of a built-in kind.
pub fn kind_definition(group: &str, version: &str, kind: &str) -> Option<&'static Definition> {
    definition_name_of(group, version, kind).and_then(definition)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_are_sorted_for_binary_search() {
        assert!(DEFINITIONS.windows(2).all(|w| w[0].name < w[1].name));
        assert!(KINDS.windows(2).all(|w| (w[0].0, w[0].1, w[0].2) < (w[1].0, w[1].1, w[1].2)));
    }

    #[test]
    fn pod_facts_match_upstream() {
        let pod = kind_definition("", "v1", "Pod").expect("Pod is a kind");
        assert_eq!(pod.name, "io.k8s.api.core.v1.Pod");
        let spec = definition(pod.field("spec").unwrap().elem.unwrap()).unwrap();
        let containers = spec.field("containers").unwrap();
        assert_eq!((containers.shape, containers.merge_key), (Shape::List, Some("name")));
        assert!(containers.has_strategy("merge"));
        assert!(spec.field("volumes").unwrap().has_strategy("retainKeys"));
        assert_eq!(kind_definition("apps", "v1", "Deployment").unwrap().name, "io.k8s.api.apps.v1.Deployment");
        let meta = definition("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").unwrap();
        assert_eq!(meta.field("ownerReferences").unwrap().merge_key, Some("uid"));
        assert!(meta.field("finalizers").unwrap().has_strategy("merge"));
    }
}
