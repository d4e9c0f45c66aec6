//! API server benchmarks: the real `krate server` binary, started as a child process and
//! measured over HTTPS (HTTP/2, admin client certificate) from this process, beside a bare
//! hyper "hello" server on the same TLS stack, measured in the same run with the same
//! client code as the ceiling.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use base64::Engine;
use bytes::Bytes;
use clap::Args;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::stats::{Summary, machine, ms, summarize};

/// Longest a single request may take before it counts as an error.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest the server may take to write its admin kubeconfig.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest establishing all watchers may take.
const WATCH_SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long watchers keep waiting for missing events after the last write.
const WATCH_GRACE: Duration = Duration::from_secs(30);

#[derive(Args)]
pub struct ApiArgs {
    /// The krate binary to start.
    #[arg(long, default_value = "target/release/krate")]
    krate: PathBuf,
    /// Seconds each throughput measurement runs.
    #[arg(long, default_value_t = 5)]
    duration: u64,
    /// Concurrent GETs (krate and the bare server alike).
    #[arg(long, default_value_t = 32)]
    get_concurrency: usize,
    /// Concurrent durable CREATEs.
    #[arg(long, default_value_t = 16)]
    create_concurrency: usize,
    /// Concurrent LISTs.
    #[arg(long, default_value_t = 4)]
    list_concurrency: usize,
    /// Objects in the listed namespace.
    #[arg(long, default_value_t = 1_000)]
    list_objects: usize,
    /// ConfigMaps of 1 KiB written before the second memory reading.
    #[arg(long, default_value_t = 10_000)]
    rss_objects: usize,
    /// Watchers in the fan-out measurement.
    #[arg(long, default_value_t = 10_000)]
    watchers: usize,
    /// Watchers sharing one HTTP/2 connection (at most the server's streams per connection).
    #[arg(long, default_value_t = 500)]
    watchers_per_connection: usize,
    /// Creates observed by every watcher.
    #[arg(long, default_value_t = 50)]
    watch_writes: usize,
    /// Milliseconds between those creates.
    #[arg(long, default_value_t = 20)]
    watch_interval_ms: u64,
    /// Keep the scratch directory (data dir and krate.log) instead of deleting it.
    #[arg(long)]
    keep: bool,
}

pub async fn run(args: ApiArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.krate.exists(),
        "{} not found: run `cargo build --release -p krate -p krate-bench` first (or pass --krate)",
        args.krate.display()
    );
    // On the project's own disk, not a tmpfs, so fsync costs what it costs.
    let mut scratch = tempfile::Builder::new().prefix("krate-bench-api-").tempdir_in(std::env::current_dir()?)?;
    scratch.disable_cleanup(args.keep);
    println!("machine: {}", machine());
    println!("scratch dir: {}\n", scratch.path().display());
    let bare = start_bare_server()?;
    let data_dir = scratch.path().join("data");
    let log = scratch.path().join("krate.log");

    eprintln!("== launch");
    let mut krate = Krate::launch(&args.krate, &data_dir, &log)?;
    let ready = krate.ready_after;
    eprintln!("  ready after {}", ms(ready));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = krate.rss_mib()?;
    eprintln!("  RSS idle: {rss_idle:.1} MiB");
    let endpoint = admin_endpoint(&data_dir.join("admin.kubeconfig"))?;
    let api = endpoint.client();

    eprintln!("== {} ConfigMaps of 1 KiB, 16 writers", args.rss_objects);
    create_namespace(&api, "bulk").await?;
    let kib = "x".repeat(1024);
    let took = populate(&api, "bulk", "bulk", args.rss_objects, 16, &kib).await?;
    let populate_rate = args.rss_objects as f64 / took.as_secs_f64();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_full = krate.rss_mib()?;
    eprintln!("  written in {:.1} s ({populate_rate:.0}/s); RSS {rss_full:.1} MiB", took.as_secs_f64());
    // The ConfigMap watch cache starts on the first list served from it.
    let mut anomalies = Vec::new();
    let path = "/api/v1/namespaces/bulk/configmaps?resourceVersion=0";
    let (_, cache_start) = first_call(&api, path, &mut anomalies).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_cached = krate.rss_mib()?;
    eprintln!("  watch cache started by the first LIST ?resourceVersion=0 in {cache_start}; RSS {rss_cached:.1} MiB");

    let duration = Duration::from_secs(args.duration);
    eprintln!("== GET, {} concurrent", args.get_concurrency);
    api.call(Method::POST, "/api/v1/namespaces/default/configmaps", configmap("bench", "value"), StatusCode::CREATED)
        .await?;
    let pid = Server::Krate(krate.child.id());
    let get_krate =
        measure_get(&api, "/api/v1/namespaces/default/configmaps/bench", args.get_concurrency, duration, pid)
            .await
            .report("krate GET");
    let hello = bare.client();
    let get_bare =
        measure_get(&hello, "/hello", args.get_concurrency, duration, Server::Bare).await.report("bare hyper GET");

    eprintln!("== durable CREATE, {} concurrent", args.create_concurrency);
    let create = {
        let api = api.clone();
        let uri = api.uri("/api/v1/namespaces/default/configmaps");
        let load = drive(args.create_concurrency, duration, move |w, i| {
            let (api, uri) = (api.clone(), uri.clone());
            async move {
                let body = configmap(&format!("create-{w}-{i}"), "value");
                api.request(Method::POST, uri, body, StatusCode::CREATED).await.map(|_| ())
            }
        });
        let (mut load, usage) = metered(pid, load).await;
        load.usage = usage;
        load.report("CREATE")
    };

    eprintln!("== LIST of {} ConfigMaps, {} concurrent", args.list_objects, args.list_concurrency);
    create_namespace(&api, "list1k").await?;
    populate(&api, "list1k", "item", args.list_objects, 16, "value").await?;
    let mut lists = Vec::new();
    for (label, query) in [("store", ""), ("watch cache", "?resourceVersion=0")] {
        let path = format!("/api/v1/namespaces/list1k/configmaps{query}");
        let (body, _) = first_call(&api, &path, &mut anomalies).await?;
        // Beside the bench's objects: kube-root-ca.crt, which a controller publishes.
        let items = serde_json::from_slice::<Value>(&body)?["items"]
            .as_array()
            .map_or(0, |items| items.iter().filter(|i| i["metadata"]["name"] != "kube-root-ca.crt").count());
        anyhow::ensure!(items == args.list_objects, "LIST {path} returned {items} of the bench's items");
        let load =
            measure_get(&api, &path, args.list_concurrency, duration, pid).await.report(&format!("LIST ({label})"));
        lists.push(ListFigures { label, query, load, bytes: body.len() });
    }

    eprintln!("== watch fan-out: {} watchers, {} creates", args.watchers, args.watch_writes);
    let fanout = fanout(&endpoint, &api, &args, pid).await?;
    let rss_end = krate.rss_mib()?;
    eprintln!("  RSS after everything: {rss_end:.1} MiB");

    eprintln!("== restart on the same data");
    krate.stop();
    let mut krate = Krate::launch(&args.krate, &data_dir, &log)?;
    let restart_ready = krate.ready_after;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_restart = krate.rss_mib()?;
    eprintln!("  ready after {}, RSS idle {rss_restart:.1} MiB", ms(restart_ready));
    krate.stop();

    let objects = args.rss_objects + 1 + create.summary.count + args.list_objects + fanout.writes;
    let figures = Figures {
        args: &args,
        ready,
        rss_idle,
        rss_full,
        cache_start,
        rss_cached,
        populate_rate,
        rss_end,
        restart_ready,
        rss_restart,
        objects,
        get_krate,
        get_bare,
        create,
        lists,
        fanout,
        anomalies,
    };
    figures.print();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The server under test.

/// A running `krate server`, killed when dropped so that no run leaves one behind.
pub(crate) struct Krate {
    child: Child,
    ready_after: Duration,
}

impl Krate {
    /// Starts `krate server` and waits until it has written its admin kubeconfig, which it
    /// does once /readyz passes.
    pub(crate) fn launch(bin: &Path, data_dir: &Path, log: &Path) -> anyhow::Result<Krate> {
        // The API server alone: controllers would add their own objects and watches.
        Self::launch_with(bin, data_dir, log, &["--disable-controller-manager"])
    }

    /// `krate server --disable-agent` with `extra` arguments.
    pub(crate) fn launch_with(bin: &Path, data_dir: &Path, log: &Path, extra: &[&str]) -> anyhow::Result<Krate> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let log_file = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
        // On a restart, the previous run's kubeconfig must not count as ready.
        let kubeconfig = data_dir.join("admin.kubeconfig");
        let _ = std::fs::remove_file(&kubeconfig);
        let started = Instant::now();
        let child = Command::new(bin)
            .args(["server", "--disable-agent"])
            .args(extra)
            .args(["--bind-address", "127.0.0.1", "--secure-port", &port.to_string()])
            .arg("--data-dir")
            .arg(data_dir)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut krate = Krate { child, ready_after: Duration::ZERO };
        while !kubeconfig.exists() {
            if let Some(status) = krate.child.try_wait()? {
                anyhow::bail!("krate server exited ({status}) before ready; log in {}", log.display());
            }
            anyhow::ensure!(started.elapsed() < READY_TIMEOUT, "krate server not ready in {READY_TIMEOUT:?}");
            std::thread::sleep(Duration::from_millis(2));
        }
        krate.ready_after = started.elapsed();
        Ok(krate)
    }

    pub(crate) fn rss_mib(&self) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<f64>().ok())
            .context("no VmRSS in /proc/PID/status")?;
        Ok(kib / 1024.0)
    }

    /// SIGTERM, then SIGKILL if it has not ended within 10 s.
    pub(crate) fn stop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on our own child's pid has no memory-safety preconditions.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Krate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------
// The bare hyper server: the ceiling.

/// Serves a fixed JSON body on every path with hyper over rustls (ring, a self-signed rcgen
/// certificate, ALPN h2 and http/1.1), on its own multi-threaded runtime like a separate
/// server process would have.
fn start_bare_server() -> anyhow::Result<Endpoint> {
    let key = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![key.cert.der().clone()],
            PrivateKeyDer::from_pem_slice(key.signing_key.serialize_pem().as_bytes())?,
        )?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().thread_name(BARE_THREADS).enable_all().build()?;
    std::thread::Builder::new().name(BARE_THREADS.into()).spawn(move || {
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("a bound listener");
            loop {
                let Ok((tcp, _)) = listener.accept().await else { continue };
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from_static(b"{\"hello\":\"world\"}")))
                                .expect("static response"),
                        )
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        })
    })?;
    Ok(Endpoint {
        addr,
        name: ServerName::IpAddress(addr.ip().into()),
        base: format!("https://{addr}"),
        tls: client_tls(key.cert.pem().as_bytes(), None)?,
    })
}

// ---------------------------------------------------------------------------------------
// The client: hyper-util's pooling client over rustls, HTTP/2 only.

/// Where to connect and with which TLS settings; every [`Endpoint::client`] is a separate
/// pool, hence a separate HTTP/2 connection.
#[derive(Clone)]
pub(crate) struct Endpoint {
    addr: SocketAddr,
    name: ServerName<'static>,
    base: String,
    tls: Arc<rustls::ClientConfig>,
}

impl Endpoint {
    pub(crate) fn client(&self) -> Http {
        let connector = Connector {
            addr: self.addr,
            name: self.name.clone(),
            tls: tokio_rustls::TlsConnector::from(self.tls.clone()),
        };
        let client = Client::builder(TokioExecutor::new()).http2_only(true).build(connector);
        Http { client, base: self.base.clone() }
    }
}

/// The admin credentials and address from the kubeconfig `krate server` writes.
pub(crate) fn admin_endpoint(kubeconfig: &Path) -> anyhow::Result<Endpoint> {
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(kubeconfig)?)?;
    let text = |v: &serde_yaml_ng::Value, what: &str| {
        v.as_str().map(str::to_string).with_context(|| format!("{}: no {what}", kubeconfig.display()))
    };
    let data = |v: &serde_yaml_ng::Value, what: &str| -> anyhow::Result<Vec<u8>> {
        Ok(base64::engine::general_purpose::STANDARD.decode(text(v, what)?)?)
    };
    let (cluster, user) = (&doc["clusters"][0]["cluster"], &doc["users"][0]["user"]);
    let server: Uri = text(&cluster["server"], "server")?.parse()?;
    let ip: IpAddr = server.host().context("server URL without host")?.parse()?;
    let addr = SocketAddr::new(ip, server.port_u16().unwrap_or(443));
    let ca = data(&cluster["certificate-authority-data"], "certificate-authority-data")?;
    let cert = data(&user["client-certificate-data"], "client-certificate-data")?;
    let key = data(&user["client-key-data"], "client-key-data")?;
    Ok(Endpoint {
        addr,
        name: ServerName::IpAddress(ip.into()),
        base: format!("https://{addr}"),
        tls: client_tls(&ca, Some((&cert, &key)))?,
    })
}

fn client_tls(ca_pem: &[u8], identity: Option<(&[u8], &[u8])>) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem) {
        roots.add(cert?)?;
    }
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((cert, key)) => builder.with_client_auth_cert(
            CertificateDer::pem_slice_iter(cert).collect::<Result<_, _>>()?,
            PrivateKeyDer::from_pem_slice(key)?,
        )?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

#[derive(Clone)]
struct Connector {
    addr: SocketAddr,
    name: ServerName<'static>,
    tls: tokio_rustls::TlsConnector,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TlsConn;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TlsConn>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let tcp = TcpStream::connect(this.addr).await?;
            tcp.set_nodelay(true)?;
            let tls = this.tls.connect(this.name, tcp).await?;
            if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(io::Error::other("the server did not negotiate HTTP/2"));
            }
            Ok(TlsConn(TokioIo::new(tls)))
        })
    }
}

struct TlsConn(TokioIo<tokio_rustls::client::TlsStream<TcpStream>>);

impl Connection for TlsConn {
    fn connected(&self) -> Connected {
        Connected::new().negotiated_h2()
    }
}

impl hyper::rt::Read for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
}

#[derive(Clone)]
pub(crate) struct Http {
    client: Client<Connector, Full<Bytes>>,
    base: String,
}

impl Http {
    fn uri(&self, path: &str) -> Uri {
        format!("{}{path}", self.base).parse().expect("a valid URI")
    }

    fn build(&self, method: Method, uri: Uri, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::builder().method(method).uri(uri).header("accept", "application/json");
        if !body.is_empty() {
            req = req.header("content-type", "application/json");
        }
        req.body(Full::new(body)).expect("a valid request")
    }

    /// Sends a request and reads the whole response; any status but `want` is an error.
    async fn request(&self, method: Method, uri: Uri, body: Bytes, want: StatusCode) -> anyhow::Result<Bytes> {
        let what = format!("{method} {}", uri.path_and_query().map_or("", |p| p.as_str()));
        let response = self.client.request(self.build(method, uri, body)).await.with_context(|| what.clone())?;
        let status = response.status();
        let bytes = response.into_body().collect().await.with_context(|| what.clone())?.to_bytes();
        if status != want {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
            anyhow::bail!("{what}: {status}: {text}");
        }
        Ok(bytes)
    }

    /// Opens a watch (or any streamed GET) and hands each line to `on_line` until it
    /// returns false, the stream ends, or `timeout` passes; Err only if it cannot open.
    pub(crate) async fn watch_lines(
        &self,
        path: &str,
        timeout: Duration,
        mut on_line: impl FnMut(&[u8]) -> bool,
    ) -> anyhow::Result<()> {
        let response = self.client.request(self.build(Method::GET, self.uri(path), Bytes::new())).await?;
        anyhow::ensure!(response.status() == StatusCode::OK, "watch {path}: {}", response.status());
        let mut body = response.into_body();
        let deadline = tokio::time::Instant::now() + timeout;
        let mut buf = Vec::new();
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => frame,
                Ok(_) | Err(_) => return Ok(()),
            };
            let Ok(data) = frame.into_data() else { continue };
            buf.extend_from_slice(&data);
            let mut start = 0;
            while let Some(end) = memchr::memchr(b'\n', &buf[start..]) {
                if !on_line(&buf[start..start + end]) {
                    return Ok(());
                }
                start += end + 1;
            }
            buf.drain(..start);
        }
    }

    /// A GET asking for `accept`; returns the body (200 expected).
    pub(crate) async fn get_as(&self, path: &str, accept: &str) -> anyhow::Result<Bytes> {
        let req = Request::builder()
            .method(Method::GET)
            .uri(self.uri(path))
            .header("accept", accept)
            .body(Full::new(Bytes::new()))
            .expect("a valid request");
        let response = self.client.request(req).await.with_context(|| format!("GET {path}"))?;
        let status = response.status();
        let bytes = response.into_body().collect().await?.to_bytes();
        anyhow::ensure!(status == StatusCode::OK, "GET {path} as {accept}: {status}");
        Ok(bytes)
    }

    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
        want: StatusCode,
    ) -> anyhow::Result<Bytes> {
        self.request(method, self.uri(path), body, want).await
    }
}

fn configmap(name: &str, value: &str) -> Bytes {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"key": value}});
    Bytes::from(serde_json::to_vec(&cm).expect("JSON"))
}

pub(crate) async fn create_namespace(api: &Http, name: &str) -> anyhow::Result<()> {
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    api.call(Method::POST, "/api/v1/namespaces", Bytes::from(ns.to_string()), StatusCode::CREATED).await?;
    Ok(())
}

/// A GET that must succeed, timed on its own: up to 5 attempts, failures noted in
/// `anomalies`. Returns the body and how long the first attempt took (and if it failed).
async fn first_call(api: &Http, path: &str, anomalies: &mut Vec<String>) -> anyhow::Result<(Bytes, String)> {
    let mut first = None;
    for attempt in 1..=5 {
        let t = Instant::now();
        let result = api.call(Method::GET, path, Bytes::new(), StatusCode::OK).await;
        let took = ms(t.elapsed());
        match result {
            Ok(body) => return Ok((body, first.unwrap_or(took))),
            Err(e) => {
                let e = format!("GET {path}, attempt {attempt}, failed after {took}: {e:#}");
                eprintln!("  {e}");
                anomalies.push(e);
                first.get_or_insert(format!("{took} (failed)"));
            }
        }
    }
    anyhow::bail!("GET {path} failed 5 times")
}

/// Creates `count` ConfigMaps `{prefix}-{i}` with `writers` concurrent writers; returns how
/// long it took.
async fn populate(
    api: &Http,
    namespace: &str,
    prefix: &str,
    count: usize,
    writers: usize,
    value: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let uri = api.uri(&format!("/api/v1/namespaces/{namespace}/configmaps"));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (api, uri, prefix, value) = (api.clone(), uri.clone(), prefix.to_string(), value.to_string());
        tasks.push(tokio::spawn(async move {
            for i in (w..count).step_by(writers) {
                let body = configmap(&format!("{prefix}-{i:05}"), &value);
                tokio::time::timeout(
                    REQUEST_TIMEOUT,
                    api.request(Method::POST, uri.clone(), body, StatusCode::CREATED),
                )
                .await
                .context("create timed out")??;
            }
            anyhow::Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------------------
// Closed-loop load.

pub(crate) struct Load {
    pub(crate) summary: Summary,
    pub(crate) rate: f64,
    pub(crate) errors: usize,
    first_error: Option<String>,
    usage: Usage,
}

impl Load {
    pub(crate) fn report(self, what: &str) -> Load {
        let s = &self.summary;
        eprintln!(
            "  {what}: {:.0} req/s, p50 {}, p99 {}, {} errors; CPU: {}",
            self.rate,
            ms(s.p50),
            ms(s.p99),
            self.errors,
            self.usage
        );
        if let Some(e) = &self.first_error {
            eprintln!("    first error: {e}");
        }
        self
    }

    fn cell_rate(&self) -> String {
        let errors = if self.errors > 0 { format!(" ({} errors)", self.errors) } else { String::new() };
        format!("{:.0}{errors}", self.rate)
    }

    fn cell_latency(&self) -> String {
        format!("{} / {}", ms(self.summary.p50), ms(self.summary.p99))
    }
}

/// Runs `op(worker, iteration)` back to back on `concurrency` tasks for `duration`.
pub(crate) async fn drive<F, Fut>(concurrency: usize, duration: Duration, op: F) -> Load
where
    F: Fn(usize, u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = anyhow::Result<()>> + Send,
{
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| {
            let op = op.clone();
            tokio::spawn(async move {
                let (mut lat, mut errors, mut first) = (Vec::new(), 0, None);
                let mut i = 0;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    match tokio::time::timeout(REQUEST_TIMEOUT, op(w, i)).await {
                        Ok(Ok(())) => lat.push(t.elapsed()),
                        Ok(Err(e)) => {
                            errors += 1;
                            first.get_or_insert_with(|| format!("{e:#}"));
                        }
                        Err(_) => {
                            errors += 1;
                            first.get_or_insert_with(|| "timed out".to_string());
                        }
                    }
                    i += 1;
                }
                (lat, errors, first)
            })
        })
        .collect();
    let (mut lat, mut errors, mut first_error) = (Vec::new(), 0, None);
    for t in tasks {
        let (l, e, f) = t.await.expect("load task panicked");
        lat.extend(l);
        errors += e;
        first_error = first_error.or(f);
    }
    let rate = lat.len() as f64 / started.elapsed().as_secs_f64();
    Load { summary: summarize(lat), rate, errors, first_error, usage: Usage::default() }
}

/// GETs `path` (expecting 200) for a one-second warm-up, then for `duration`, metering
/// the CPU used by `server`.
async fn measure_get(http: &Http, path: &str, concurrency: usize, duration: Duration, server: Server) -> Load {
    let uri = http.uri(path);
    let http = http.clone();
    let op = move |_, _| {
        let (http, uri) = (http.clone(), uri.clone());
        async move { http.request(Method::GET, uri, Bytes::new(), StatusCode::OK).await.map(|_| ()) }
    };
    drive(concurrency, Duration::from_secs(1), op.clone()).await;
    let (mut load, usage) = metered(server, drive(concurrency, duration, op)).await;
    load.usage = usage;
    load
}

// ---------------------------------------------------------------------------------------
// CPU accounting: on 2 cores the client competes with the server, so every measurement
// says how the CPU was shared.

/// Name of the bare server's threads, by which its CPU time is told apart from the client's.
const BARE_THREADS: &str = "bare-hyper";

/// The server a measurement loads.
#[derive(Clone, Copy)]
enum Server {
    Krate(u32),
    Bare,
}

/// CPU used during a measurement, in cores (CPU seconds per second).
#[derive(Clone, Copy, Default)]
struct Usage {
    server: f64,
    client: f64,
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server {:.2} + client {:.2} cores", self.server, self.client)
    }
}

/// CPU seconds (user + system) from a /proc stat file.
fn cpu_seconds(stat: &str) -> f64 {
    let Ok(text) = std::fs::read_to_string(stat) else { return 0.0 };
    // Fields after the parenthesized command name; utime and stime are fields 14 and 15.
    let rest = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12].iter().filter_map(|&i| fields.get(i)?.parse::<f64>().ok()).sum();
    // SAFETY: sysconf has no memory-safety preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// (server, whole bench process, bare server threads) CPU seconds so far.
fn cpu_now(server: Server) -> (f64, f64, f64) {
    let bare: f64 = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == BARE_THREADS))
        .map(|t| cpu_seconds(&t.path().join("stat").to_string_lossy()))
        .sum();
    let process = cpu_seconds("/proc/self/stat");
    let server = match server {
        Server::Krate(pid) => cpu_seconds(&format!("/proc/{pid}/stat")),
        Server::Bare => bare,
    };
    (server, process, bare)
}

/// Runs `work`, measuring the cores used by `server` and by the client (this process
/// without the bare server's threads) meanwhile.
async fn metered<T>(server: Server, work: impl Future<Output = T>) -> (T, Usage) {
    let (started, before) = (Instant::now(), cpu_now(server));
    let out = work.await;
    let (wall, after) = (started.elapsed().as_secs_f64(), cpu_now(server));
    let usage =
        Usage { server: (after.0 - before.0) / wall, client: ((after.1 - before.1) - (after.2 - before.2)) / wall };
    (out, usage)
}

// ---------------------------------------------------------------------------------------
// Watch fan-out.

struct Fanout {
    established: usize,
    setup: Duration,
    setup_errors: usize,
    /// Established watchers that missed events or saw unexpected ones.
    incomplete: usize,
    writes: usize,
    /// From the first create to the last one's response: more than writes × interval when
    /// creates take longer than the interval (one writer, one create at a time).
    writes_took: Duration,
    write_latency: Summary,
    deliveries: Summary,
    expected: usize,
    usage: Usage,
}

/// `args.watchers` watches on one namespace's ConfigMaps, spread over connections of
/// `args.watchers_per_connection`; then one writer creates `args.watch_writes` ConfigMaps at
/// a fixed interval, and every watcher measures, per event, receive time minus send time.
async fn fanout(endpoint: &Endpoint, api: &Http, args: &ApiArgs, server: Server) -> anyhow::Result<Fanout> {
    create_namespace(api, "fanout").await?;
    let list = api.call(Method::GET, "/api/v1/namespaces/fanout/configmaps", Bytes::new(), StatusCode::OK).await?;
    let list: Value = serde_json::from_slice(&list)?;
    let rv = list["metadata"]["resourceVersion"].as_str().context("list without resourceVersion")?.to_string();
    let path = format!("/api/v1/namespaces/fanout/configmaps?watch=true&resourceVersion={rv}");
    let writes = args.watch_writes;
    let per_connection = args.watchers_per_connection.max(1);

    // Send times by write index, as nanoseconds after `base` plus one (0: not sent yet).
    let base = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..writes).map(|_| AtomicU64::new(0)).collect());
    let (setup_tx, mut setup_rx) = tokio::sync::mpsc::unbounded_channel::<Result<(), String>>();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let finder = memchr::memmem::Finder::new(b"\"name\":\"fan-").into_owned();
    let clients: Vec<Http> = (0..args.watchers.div_ceil(per_connection)).map(|_| endpoint.client()).collect();
    let mut watchers = Vec::with_capacity(args.watchers);
    for n in 0..args.watchers {
        let http = clients[n / per_connection].clone();
        let (sent, setup_tx, mut stop, finder) = (sent.clone(), setup_tx.clone(), stop_rx.clone(), finder.clone());
        let request = http.build(Method::GET, http.uri(&path), Bytes::new());
        watchers.push(tokio::spawn(async move {
            let setup = tokio::time::timeout(WATCH_SETUP_TIMEOUT, http.client.request(request)).await;
            let response = match setup {
                Ok(Ok(r)) if r.status() == StatusCode::OK => Ok(r),
                Ok(Ok(r)) => Err(format!("watch: {}", r.status())),
                Ok(Err(e)) => Err(format!("watch: {e:#}")),
                Err(_) => Err("watch: not established in time".to_string()),
            };
            let _ = setup_tx.send(response.as_ref().map(|_| ()).map_err(Clone::clone));
            drop(setup_tx);
            let Ok(response) = response else { return (Vec::new(), None) };
            let mut body = response.into_body();
            let (mut buf, mut lat, mut ended) = (Vec::new(), Vec::with_capacity(writes), None);
            while lat.len() < writes {
                let frame = tokio::select! {
                    frame = body.frame() => frame,
                    _ = stop.wait_for(|stop| *stop) => {
                        ended = Some(format!("{} of {writes} events after the last create + {WATCH_GRACE:?}", lat.len()));
                        break;
                    }
                };
                let now = Instant::now();
                let data = match frame.map(|f| f.map(|f| f.into_data())) {
                    Some(Ok(Ok(data))) => data,
                    Some(Ok(Err(_))) => continue,
                    Some(Err(e)) => {
                        ended = Some(format!("stream error after {} events: {e:?}", lat.len()));
                        break;
                    }
                    None => {
                        ended = Some(format!("stream ended after {} events", lat.len()));
                        break;
                    }
                };
                buf.extend_from_slice(&data);
                let mut start = 0;
                while let Some(end) = memchr::memchr(b'\n', &buf[start..]) {
                    let line = &buf[start..start + end];
                    match write_index(&finder, line).and_then(|i| sent.get(i)) {
                        Some(t) => {
                            let t = t.load(Ordering::Acquire);
                            if t > 0 {
                                lat.push(now.saturating_duration_since(base + Duration::from_nanos(t - 1)));
                            }
                        }
                        None => {
                            let text = String::from_utf8_lossy(&line[..line.len().min(300)]).into_owned();
                            ended.get_or_insert(format!("unexpected event: {text}"));
                        }
                    }
                    start += end + 1;
                }
                buf.drain(..start);
            }
            (lat, ended)
        }));
    }
    drop(setup_tx);
    let (mut established, mut setup_errors, mut first_error) = (0, 0, None);
    while let Some(result) = setup_rx.recv().await {
        match result {
            Ok(()) => established += 1,
            Err(e) => {
                setup_errors += 1;
                first_error.get_or_insert(e);
            }
        }
    }
    let setup = base.elapsed();
    eprintln!(
        "  {established} watchers on {} connections established in {:.2} s, {setup_errors} failed",
        clients.len(),
        setup.as_secs_f64()
    );
    if let Some(e) = first_error {
        eprintln!("    first error: {e}");
    }

    let uri = api.uri("/api/v1/namespaces/fanout/configmaps");
    let interval = Duration::from_millis(args.watch_interval_ms);
    let deliver = async {
        let started = Instant::now();
        let mut write_lat = Vec::with_capacity(writes);
        for (i, slot) in sent.iter().enumerate() {
            tokio::time::sleep_until((started + interval * i as u32).into()).await;
            let t = Instant::now();
            slot.store(t.duration_since(base).as_nanos() as u64 + 1, Ordering::Release);
            let body = configmap(&format!("fan-{i:05}"), "value");
            tokio::time::timeout(REQUEST_TIMEOUT, api.request(Method::POST, uri.clone(), body, StatusCode::CREATED))
                .await
                .context("create timed out")??;
            write_lat.push(t.elapsed());
        }
        let writes_took = started.elapsed();
        // Watchers end once they have every event, or WATCH_GRACE after the last write.
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(WATCH_GRACE).await;
            let _ = stop_tx.send(true);
        });
        let (mut lat, mut incomplete, mut first_end) = (Vec::with_capacity(established * writes), 0, None);
        for w in watchers {
            let (l, ended) = w.await?;
            lat.extend(l);
            if let Some(e) = ended {
                incomplete += 1;
                first_end.get_or_insert(e);
            }
        }
        stopper.abort();
        anyhow::Ok((write_lat, writes_took, lat, incomplete, first_end))
    };
    let (result, usage) = metered(server, deliver).await;
    let (write_lat, writes_took, lat, incomplete, first_end) = result?;
    if let Some(e) = first_end {
        eprintln!("  {incomplete} watchers saw something unexpected or missed events; first: {e}");
    }
    let deliveries = summarize(lat);
    let write_latency = summarize(write_lat);
    eprintln!(
        "  {} of {} deliveries, p50 {}, p99 {} (creates p50 {}, p99 {}, all in {:.2} s); CPU: {usage}",
        deliveries.count,
        established * writes,
        ms(deliveries.p50),
        ms(deliveries.p99),
        ms(write_latency.p50),
        ms(write_latency.p99),
        writes_took.as_secs_f64()
    );
    Ok(Fanout {
        established,
        setup,
        setup_errors,
        incomplete,
        writes,
        writes_took,
        write_latency,
        deliveries,
        expected: args.watchers * writes,
        usage,
    })
}

/// The index `i` of the object named `fan-{i}` in a watch event line, found without
/// parsing the JSON.
fn write_index(finder: &memchr::memmem::Finder<'_>, line: &[u8]) -> Option<usize> {
    let at = finder.find(line)? + finder.needle().len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits]).ok()?.parse().ok()
}

// ---------------------------------------------------------------------------------------
// The table.

struct Figures<'a> {
    args: &'a ApiArgs,
    ready: Duration,
    rss_idle: f64,
    rss_full: f64,
    /// The first LIST served from the watch cache, which starts it: how long, or why it failed.
    cache_start: String,
    rss_cached: f64,
    populate_rate: f64,
    rss_end: f64,
    restart_ready: Duration,
    rss_restart: f64,
    objects: usize,
    get_krate: Load,
    get_bare: Load,
    create: Load,
    lists: Vec<ListFigures>,
    fanout: Fanout,
    /// Server errors met outside the timed loops.
    anomalies: Vec<String>,
}

struct ListFigures {
    label: &'static str,
    query: &'static str,
    load: Load,
    bytes: usize,
}

/// 10000 → "10,000".
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl Figures<'_> {
    fn print(&self) {
        let a = self.args;
        let share = self.get_krate.rate / self.get_bare.rate * 100.0;
        let f = &self.fanout;
        println!("| measurement | krate | bare hyper | krate / bare |");
        println!("|---|---|---|---|");
        let row =
            |name: String, krate: String, bare: &str, ratio: &str| println!("| {name} | {krate} | {bare} | {ratio} |");
        row(
            format!("GET one ConfigMap, {} concurrent: req/s", a.get_concurrency),
            self.get_krate.cell_rate(),
            &self.get_bare.cell_rate(),
            &format!("{share:.0}%"),
        );
        row("GET latency p50 / p99".into(), self.get_krate.cell_latency(), &self.get_bare.cell_latency(), "");
        row(
            "CPU during GET: server + client (cores)".into(),
            cores(&self.get_krate.usage),
            &cores(&self.get_bare.usage),
            "",
        );
        row(format!("durable CREATE, {} concurrent: req/s", a.create_concurrency), self.create.cell_rate(), "", "");
        row("CREATE latency p50 / p99".into(), self.create.cell_latency(), "", "");
        for ListFigures { label, query, load, bytes } in &self.lists {
            let query = if query.is_empty() { String::new() } else { format!(" `{query}`") };
            row(
                format!(
                    "LIST of {} ConfigMaps{query} ({label}), {} concurrent: req/s",
                    thousands(a.list_objects),
                    a.list_concurrency
                ),
                format!("{} ({:.0} KiB each)", load.cell_rate(), *bytes as f64 / 1024.0),
                "",
                "",
            );
            row(format!("LIST{query} latency p50 / p99"), load.cell_latency(), "", "");
        }
        row(
            format!(
                "watch fan-out, {} watchers × {} creates {} ms apart: delivery p50 / p99",
                thousands(a.watchers),
                f.writes,
                a.watch_interval_ms
            ),
            format!(
                "{} / {} ({} of {} deliveries)",
                ms(f.deliveries.p50),
                ms(f.deliveries.p99),
                thousands(f.deliveries.count),
                thousands(f.expected)
            ),
            "",
            "",
        );
        let mut failed = String::new();
        if f.setup_errors > 0 {
            failed += &format!(", {} failed", thousands(f.setup_errors));
        }
        if f.incomplete > 0 {
            failed += &format!(", {} missed events", thousands(f.incomplete));
        }
        row(
            format!("watchers established ({} per HTTP/2 connection)", a.watchers_per_connection),
            format!("{} in {:.2} s{failed}", thousands(f.established), f.setup.as_secs_f64()),
            "",
            "",
        );
        row(
            "create latency during fan-out p50 / p99".into(),
            format!("{} (all {} in {:.2} s)", lat_cell(&f.write_latency), f.writes, f.writes_took.as_secs_f64()),
            "",
            "",
        );
        row("CPU during fan-out: server + client (cores)".into(), cores(&f.usage), "", "");
        row("launch to ready (new data dir)".into(), ms(self.ready), "", "");
        row(
            format!("launch to ready (restart, {} ConfigMaps stored)", thousands(self.objects)),
            ms(self.restart_ready),
            "",
            "",
        );
        row("RSS idle after ready".into(), format!("{:.1} MiB", self.rss_idle), "", "");
        row(
            format!("RSS with {} ConfigMaps of 1 KiB", thousands(a.rss_objects)),
            format!("{:.1} MiB (written at {:.0}/s, 16 writers)", self.rss_full, self.populate_rate),
            "",
            "",
        );
        row(
            format!(
                "first LIST `?resourceVersion=0` (starts the watch cache over {} ConfigMaps)",
                thousands(a.rss_objects)
            ),
            self.cache_start.clone(),
            "",
            "",
        );
        row("RSS with those ConfigMaps in the watch cache".into(), format!("{:.1} MiB", self.rss_cached), "", "");
        row("RSS after all measurements".into(), format!("{:.1} MiB", self.rss_end), "", "");
        row("RSS idle after restart".into(), format!("{:.1} MiB", self.rss_restart), "", "");

        let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
        let complete = f.established == a.watchers && f.deliveries.count == f.expected;
        println!("\nGoals:");
        println!("- idle RSS ≤ 50 MiB: {:.1} MiB — {}", self.rss_idle, verdict(self.rss_idle <= 50.0));
        println!("- launch to ready ≤ 1 s: {} — {}", ms(self.ready), verdict(self.ready <= Duration::from_secs(1)));
        println!("- GET ≥ 40% of bare hyper: {share:.0}% — {}", verdict(share >= 40.0));
        println!(
            "- {} watchers, delivery p99 ≤ 100 ms: {} ({} of {} deliveries) — {}",
            thousands(a.watchers),
            ms(f.deliveries.p99),
            thousands(f.deliveries.count),
            thousands(f.expected),
            verdict(complete && f.deliveries.p99 <= Duration::from_millis(100))
        );

        let mut errors = self.anomalies.clone();
        let loads = [("GET", &self.get_krate), ("bare GET", &self.get_bare), ("CREATE", &self.create)];
        let lists = self.lists.iter().map(|l| (l.label, &l.load));
        for (what, load) in loads.into_iter().chain(lists) {
            if let Some(e) = &load.first_error {
                errors.push(format!("{what}: {} errors, first: {e}", load.errors));
            }
        }
        if f.setup_errors > 0 || f.incomplete > 0 {
            errors.push(format!(
                "watch fan-out: {} watches not established, {} established ones missed events (details on stderr)",
                f.setup_errors, f.incomplete
            ));
        }
        if !errors.is_empty() {
            println!("\nErrors during the run:");
            for e in errors {
                println!("- {e}");
            }
        }
    }
}

fn cores(u: &Usage) -> String {
    format!("{:.2} + {:.2}", u.server, u.client)
}

fn lat_cell(s: &Summary) -> String {
    format!("{} / {}", ms(s.p50), ms(s.p99))
}
