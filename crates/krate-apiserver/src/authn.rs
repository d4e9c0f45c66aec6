//! Who is asking: x509 client certificates signed by the cluster CA (CN = user,
//! O = groups). Verification of the chain happens in the TLS handshake; here the
//! verified leaf is read. Other authenticators arrive with the security work.

use krate_api::user::UserInfo;
use x509_parser::prelude::*;

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
