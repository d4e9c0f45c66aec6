//! x509 client certificates signed by the cluster CA: CN is the user, O the groups.
//! The chain is verified in the TLS handshake; here the verified leaf is read.

use async_trait::async_trait;
use krate_api::user::UserInfo;
use x509_parser::prelude::*;

use super::{Authenticated, Authenticator, AuthnError, Credentials};

/// The user a verified client certificate names.
pub fn user_from_cert(der: &[u8]) -> Option<UserInfo> {
    let (_, cert) = X509Certificate::from_der(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let mut groups: Vec<String> =
        subject.iter_organization().filter_map(|o| o.as_str().ok()).map(String::from).collect();
    groups.push("system:authenticated".into());
    Some(UserInfo { name, groups, ..Default::default() })
}

pub struct X509;

#[async_trait]
impl Authenticator for X509 {
    async fn authenticate(&self, creds: &Credentials<'_>) -> Result<Option<Authenticated>, AuthnError> {
        let Some(leaf) = creds.client_certs.first() else { return Ok(None) };
        match user_from_cert(leaf) {
            Some(user) => Ok(Some(Authenticated { user, audiences: vec![] })),
            None => Err(AuthnError::Invalid("client certificate without a common name".into())),
        }
    }
}
