//! The authenticated user a request acts as.

use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }
    /// A service account's identity, as its tokens authenticate it.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
            ..Default::default()
        }
    }
    /// A control-plane component's own identity (system:kube-controller-manager,
    /// system:kube-scheduler), as its client certificate names it.
    pub fn component(name: &str) -> Self {
        UserInfo { name: name.into(), groups: vec!["system:authenticated".into()], ..Default::default() }
    }
    pub fn is_anonymous(&self) -> bool {
        self.name == "system:anonymous"
    }
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}
