//! rbac.authorization.k8s.io. Roles and ClusterRoles have no printer upstream: they keep the
//! default Name / Created At table.

use serde_json::{Value, json};

use super::*;
use crate::object;

/// The ROLE column ("ClusterRole/view") and rbac.SubjectsStrings' users, groups and
/// service accounts ("namespace/name"), each joined with ", ".
pub(super) fn binding_row(o: &Value, age: &str) -> Vec<Value> {
    let role = format!("{}/{}", s(o.pointer("/roleRef/kind")), s(o.pointer("/roleRef/name")));
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for subject in items(o, "/subjects") {
        let name = s(subject.get("name"));
        match subject.get("kind").and_then(Value::as_str) {
            Some("User") => users.push(name),
            Some("Group") => groups.push(name),
            Some("ServiceAccount") => sas.push(format!("{}/{name}", s(subject.get("namespace")))),
            _ => {}
        }
    }
    vec![
        json!(object::name(o)),
        json!(role),
        json!(age),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

const BINDING_COLUMNS: &[Column] = &[NAME, col("Role"), AGE, wide("Users"), wide("Groups"), wide("ServiceAccounts")];

pub(super) fn lookup(group: &str, kind: &str) -> Option<Entry> {
    match (group, kind) {
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => Some((BINDING_COLUMNS, binding_row)),
        _ => None,
    }
}
