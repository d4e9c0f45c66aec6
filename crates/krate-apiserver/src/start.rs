//! Starting an API server: certificates, registry, admission chain, listener, start-up
//! work, and the admin kubeconfig once ready. `krate server` and the integration tests
//! both start the control plane through here.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use krate_admission::{AdmissionConfig, Chain};
use krate_api::services::{ServiceAllocator, ServiceHooks};
use krate_api::{Registry, ResourceTable};
use krate_auth::authz::escalation::EscalationCheck;
use krate_auth::authz::modes::Authorization;
use krate_store::DynStore;
use tokio::task::JoinHandle;

use crate::pki::{Pki, PkiError, write_private};
use crate::serve::{Listener, ServeError};
use crate::{ApiServer, ApiServerConfig, Auth, authz, bootstrap};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error(transparent)]
    Serve(#[from] ServeError),
    #[error("start-up work failed: {0}")]
    Bootstrap(String),
    #[error("{0}")]
    Io(String),
    #[error(transparent)]
    Authorization(#[from] krate_auth::authz::modes::ModeError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error("admission: {0}")]
    Admission(String),
}

pub struct Options {
    pub data_dir: PathBuf,
    pub bind: SocketAddr,
    pub anonymous_auth: bool,
    /// Extra names or addresses for the serving certificate.
    pub extra_sans: Vec<String>,
    pub store: DynStore,
    /// How long Events live (upstream's --event-ttl).
    pub event_ttl: std::time::Duration,
    /// --service-cluster-ip-range and --service-node-port-range.
    pub service_cidr: String,
    pub node_port_range: String,
    /// In-flight request limits (0: unlimited).
    pub max_requests_inflight: usize,
    pub max_mutating_requests_inflight: usize,
    /// --authorization-mode: a comma list of AlwaysAllow, AlwaysDeny, Node, RBAC.
    pub authorization_mode: String,
    /// The --audit-* flags (no policy: nothing is audited).
    pub audit: crate::audit::AuditOptions,
    /// Encryption at rest (--encryption-provider-config), if configured.
    pub encryption: Option<Arc<krate_encryption::Encryption>>,
    /// --admission-control-config-file: the admission plugins' configuration.
    pub admission_control_config_file: Option<PathBuf>,
    /// Bearer tokens and service accounts.
    pub authn: AuthnOptions,
}

/// Upstream's authentication flags.
#[derive(Clone, Debug, Default)]
pub struct AuthnOptions {
    /// --token-auth-file: static tokens (CSV).
    pub token_auth_file: Option<PathBuf>,
    /// --service-account-issuer (default https://kubernetes.default.svc.cluster.local).
    pub service_account_issuer: Option<String>,
    /// --api-audiences (default: the issuer).
    pub api_audiences: Vec<String>,
    /// --service-account-jwks-uri (default: this server's /openid/v1/jwks).
    pub service_account_jwks_uri: Option<String>,
    /// --service-account-max-token-expiration: longer TokenRequests are shortened to it.
    pub service_account_max_token_expiration: Option<std::time::Duration>,
}

impl Options {
    /// Upstream's defaults (and krate's), listening on a free port of 127.0.0.1: what
    /// tests and embedders start from before changing what they need.
    pub fn new(data_dir: PathBuf, store: DynStore) -> Options {
        Options {
            data_dir,
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            anonymous_auth: true,
            extra_sans: vec![],
            store,
            event_ttl: std::time::Duration::from_secs(3600),
            service_cidr: "10.43.0.0/16".into(),
            node_port_range: "30000-32767".into(),
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            authorization_mode: "Node,RBAC".into(),
            audit: Default::default(),
            encryption: None,
            authn: Default::default(),
            admission_control_config_file: None,
        }
    }
}

/// A serving API server.
pub struct Running {
    pub url: String,
    pub port: u16,
    pub kubeconfig_path: PathBuf,
    pub server: Arc<ApiServer>,
    pub pki: Pki,
    /// The cluster's join token (a bootstrap token), kept in DATA_DIR/token; None when
    /// it could not be stored (the store refused it, e.g. its KMS is down).
    pub join_token: Option<String>,
    pub task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn local_address(bind: IpAddr) -> IpAddr {
    if bind.is_unspecified() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { bind }
}

pub async fn start(opts: Options) -> Result<Running, StartError> {
    let io = |e: std::io::Error| StartError::Io(format!("{}: {e}", opts.data_dir.display()));
    tokio::fs::create_dir_all(&opts.data_dir).await.map_err(io)?;
    let kubeconfig_path = opts.data_dir.join("admin.kubeconfig");
    // Scripts wait for this file to appear: it must only exist once we are ready.
    let _ = tokio::fs::remove_file(&kubeconfig_path).await;

    let tls_dir = opts.data_dir.join("server").join("tls");
    let mut sans: Vec<String> = [
        "localhost",
        "127.0.0.1",
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if !opts.bind.ip().is_unspecified() && !opts.bind.ip().is_loopback() {
        sans.push(opts.bind.ip().to_string());
    }
    sans.extend(opts.extra_sans.iter().cloned());
    let pki = tokio::task::spawn_blocking(move || Pki::ensure(&tls_dir, &sans))
        .await
        .map_err(|e| StartError::Io(e.to_string()))??;

    let table = Arc::new(ResourceTable::builtin());
    let store = crate::encryption::wrap_store(opts.store.clone(), opts.encryption.as_ref(), &table);
    let registry = Arc::new(Registry::new(store, table));
    registry.set_object_ttl(opts.event_ttl);
    let alloc = Arc::new(ServiceAllocator::new(&opts.service_cidr, &opts.node_port_range).map_err(StartError::Io)?);
    let services = registry.table.lookup("", "v1", "services").expect("services are built in");
    registry.register_hooks(&services, Arc::new(ServiceHooks { alloc: alloc.clone() }));
    let modes = krate_auth::authz::modes::parse(&opts.authorization_mode)?;
    let authorization = Authorization::build(&modes, &registry);
    let escalation = EscalationCheck::new(authorization.rbac.clone(), authorization.authorizer.clone());
    let admission_config = match &opts.admission_control_config_file {
        Some(path) => AdmissionConfig::load(path).await.map_err(|e| StartError::Admission(e.to_string()))?,
        None => AdmissionConfig::default(),
    };
    let admission = Arc::new(
        Chain::standard(&registry, &admission_config, vec![("RBACEscalation", Arc::new(escalation))])
            .map_err(|e| StartError::Admission(e.to_string()))?,
    );
    let advertise_ip = local_address(opts.bind.ip());
    // Bound first: the advertised port is known only then (port 0 in tests).
    let std_listener = std::net::TcpListener::bind(opts.bind)
        .map_err(|source| StartError::Serve(ServeError::Bind { addr: opts.bind, source }))?;
    let bound = std_listener.local_addr().map_err(|e| StartError::Io(e.to_string()))?;
    let config = ApiServerConfig {
        advertise_address: SocketAddr::new(advertise_ip, bound.port()).to_string(),
        anonymous_auth: opts.anonymous_auth,
        max_requests_inflight: opts.max_requests_inflight,
        max_mutating_requests_inflight: opts.max_mutating_requests_inflight,
    };
    let url = format!("https://{}", SocketAddr::new(advertise_ip, bound.port()));
    let authn = crate::authn::setup(&opts.authn, &registry, &pki, &url).await?;
    let auth = Auth { authenticator: authn.authenticator.clone(), authorizer: authorization.authorizer.clone() };
    let server = Arc::new(ApiServer::new(registry.clone(), admission.clone(), auth, config));
    authz::register_reviews(&server, &authorization);
    authn.register(&server);
    let node_proxy =
        crate::node_proxy::NodeProxy::new(registry.clone(), &pki).map_err(|e| StartError::Io(e.to_string()))?;
    server.set_node_proxy(Arc::new(node_proxy));
    server.register_computed(
        "",
        "pods",
        "eviction",
        Arc::new(crate::eviction::Evictions { registry: registry.clone() }),
    );
    // Reads the policy and opens the log: file I/O, off the async workers.
    let audit_opts = opts.audit.clone();
    let auditor = tokio::task::spawn_blocking(move || crate::audit::Auditor::start(&audit_opts))
        .await
        .map_err(|e| StartError::Io(e.to_string()))??;
    if let Some(auditor) = auditor {
        server.set_auditor(auditor);
    }
    if let Some(encryption) = &opts.encryption {
        server.add_health_checks(Arc::new(crate::encryption::KmsHealth(encryption.clone())));
    }
    let listener = Listener::from_std(std_listener, &pki, server.clone())?;
    let background = authn.background(&registry, &pki);
    let task = tokio::spawn(async move {
        tokio::join!(listener.run(), background);
    });

    bootstrap::system_namespaces(&registry).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    bootstrap::system_priority_classes(&registry).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    bootstrap::legacy_token_tracking(&registry).await.map_err(|e| StartError::Bootstrap(e.to_string()))?;
    // As upstream, every watch cache starts with the server: a client that lists and
    // then watches from that revision must not find a cache born after it (writes such
    // as a namespace's default service account come in between).
    for r in registry.table.all().iter().filter(|r| !r.is_virtual()) {
        registry.cache(r);
    }
    // Pods need their namespace's default service account (ServiceAccount admission).
    crate::namespace_defaults::spawn(registry.clone());
    // CustomResourceDefinitions: names, Established, serving and cleanup.
    let cel_rules = Arc::new(crate::crd_rules::CelRules::default());
    let crds = registry.table.lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions").expect("built in");
    registry.register_hooks(&crds, Arc::new(crate::crd_rules::RuleCompileCheck { rules: cel_rules.clone() }));
    crate::crd::spawn(registry.clone(), cel_rules);
    let endpoint_ip =
        if opts.bind.ip().is_unspecified() { host_address().unwrap_or(advertise_ip) } else { opts.bind.ip() };
    bootstrap::kubernetes_service(&registry, &alloc, endpoint_ip, bound.port())
        .await
        .map_err(|e| StartError::Bootstrap(e.to_string()))?;
    authz::bootstrap(&registry, &authorization, admission).await?;
    // Without the token the server still serves; nodes cannot join until a restart.
    let join_token =
        match krate_auth::authn::bootstrap::ensure_join_token(&registry, &opts.data_dir.join("token")).await {
            Ok(token) => Some(token),
            Err(error) => {
                tracing::error!(%error, "the join token could not be stored; nodes cannot join with it");
                None
            }
        };
    // Nodes joining with the token find the CA in cluster-info, signed with it.
    let signing: Vec<(String, String)> = join_token
        .as_deref()
        .and_then(krate_auth::authn::bootstrap::parse)
        .map(|(id, secret)| (id.to_string(), secret.to_string()))
        .into_iter()
        .collect();
    crate::node_join::publish(&registry, &url, &pki.ca.cert_pem, &signing)
        .await
        .map_err(|e| StartError::Bootstrap(e.to_string()))?;
    server.set_ready();

    let kubeconfig = pki.kubeconfig(&url, &pki.admin, "admin");
    let path = kubeconfig_path.clone();
    tokio::task::spawn_blocking(move || write_private(&path, &kubeconfig))
        .await
        .map_err(|e| StartError::Io(e.to_string()))??;
    Ok(Running { url, port: bound.port(), kubeconfig_path, server, pki, join_token, task })
}

/// This machine's first non-loopback IPv4 address: where the `kubernetes` Service's
/// endpoints point when the server listens on every address.
pub fn host_address() -> Option<IpAddr> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free with freeifaddrs; we only read it.
    unsafe {
        if libc::getifaddrs(&mut addrs) != 0 {
            return None;
        }
        let mut found = None;
        let mut cur = addrs;
        while !cur.is_null() {
            let ifa = &*cur;
            let up = ifa.ifa_flags & libc::IFF_UP as u32 != 0;
            let loopback = ifa.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
            if up && !loopback && !ifa.ifa_addr.is_null() && (*ifa.ifa_addr).sa_family as i32 == libc::AF_INET {
                let sin = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                found = Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))));
                break;
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(addrs);
        found
    }
}
