//! Assembles authentication from `krate-auth`'s parts: client certificates, bearer
//! tokens (static file, service accounts, bootstrap), the computed resources that issue
//! and review tokens, OIDC discovery, and the loop that fills legacy token Secrets.

use std::sync::Arc;

use krate_api::Registry;
use krate_auth::authn::bootstrap::BootstrapTokens;
use krate_auth::authn::jwt::SigningKey;
use krate_auth::authn::oidc::Discovery;
use krate_auth::authn::reviews::{SelfSubjectReviews, TokenReviews};
use krate_auth::authn::serviceaccount::{DEFAULT_ISSUER, ServiceAccountTokens};
use krate_auth::authn::token_file::TokenFile;
use krate_auth::authn::token_request::TokenRequests;
use krate_auth::authn::{Authenticator, BearerTokens, TokenAuthenticator, Union, X509};

use crate::ApiServer;
use crate::pki::Pki;
use crate::start::{AuthnOptions, StartError};

pub struct Authn {
    pub authenticator: Arc<dyn Authenticator>,
    pub bearer: Arc<BearerTokens>,
    pub service_accounts: Arc<ServiceAccountTokens>,
    pub discovery: Arc<Discovery>,
    /// --service-account-max-token-expiration, in seconds.
    pub max_token_expiration: Option<i64>,
}

pub async fn setup(opts: &AuthnOptions, registry: &Arc<Registry>, pki: &Pki, url: &str) -> Result<Authn, StartError> {
    let key_path = pki.dir.join("sa.key");
    let key = tokio::task::spawn_blocking(move || SigningKey::load_or_create(&key_path))
        .await
        .map_err(|e| StartError::Io(e.to_string()))?
        .map_err(|e| StartError::Io(e.to_string()))?;
    let key = Arc::new(key);
    let issuer = opts.service_account_issuer.clone().unwrap_or_else(|| DEFAULT_ISSUER.to_string());
    let audiences = if opts.api_audiences.is_empty() { vec![issuer.clone()] } else { opts.api_audiences.clone() };
    let service_accounts =
        Arc::new(ServiceAccountTokens::new(key.clone(), issuer.clone(), audiences.clone(), registry.clone()));
    let mut tokens: Vec<Arc<dyn TokenAuthenticator>> = Vec::new();
    if let Some(path) = &opts.token_auth_file {
        let file = TokenFile::load(path, audiences.clone()).await.map_err(|e| StartError::Io(e.to_string()))?;
        tracing::info!(path = %path.display(), tokens = file.len(), "loaded the token file");
        tokens.push(Arc::new(file));
    }
    tokens.push(service_accounts.clone());
    tokens.push(Arc::new(BootstrapTokens::new(registry.clone(), audiences.clone())));
    let bearer = Arc::new(BearerTokens::new(tokens, audiences));
    let x509 = X509::from_ca_pem(&pki.ca.cert_pem).map_err(|e| StartError::Io(e.to_string()))?;
    let union: Arc<dyn Authenticator> = Arc::new(Union(vec![Arc::new(x509), bearer.clone()]));
    let authenticator: Arc<dyn Authenticator> = Arc::new(krate_auth::authn::metrics::Counted(union));
    let discovery = Arc::new(Discovery::new(&issuer, url, opts.service_account_jwks_uri.as_deref(), &key));
    let max_token_expiration = opts.service_account_max_token_expiration.map(|d| d.as_secs() as i64);
    Ok(Authn { authenticator, bearer, service_accounts, discovery, max_token_expiration })
}

impl Authn {
    /// serviceaccounts/token, tokenreviews, selfsubjectreviews and OIDC discovery.
    pub fn register(&self, server: &ApiServer) {
        let requests = TokenRequests {
            tokens: self.service_accounts.clone(),
            registry: server.registry.clone(),
            max_expiration_seconds: self.max_token_expiration,
        };
        server.register_computed("", "serviceaccounts", "token", Arc::new(requests));
        server.register_computed(
            "authentication.k8s.io",
            "tokenreviews",
            "",
            Arc::new(TokenReviews { tokens: self.bearer.clone() }),
        );
        server.register_computed("authentication.k8s.io", "selfsubjectreviews", "", Arc::new(SelfSubjectReviews));
        server.set_oidc_discovery(self.discovery.clone());
    }

    /// The loop that fills legacy token Secrets; runs as long as the server.
    pub fn background(&self, registry: &Arc<Registry>, pki: &Pki) -> impl Future<Output = ()> + use<> {
        krate_auth::authn::legacy_tokens::run(self.service_accounts.clone(), registry.clone(), pki.ca.cert_pem.clone())
    }
}
