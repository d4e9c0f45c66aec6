//! A KMS v2 plugin for tests: a real gRPC server on a unix socket that encrypts DEK
//! sources with AES-GCM under a key named by its current key ID, counts calls, and can
//! switch key IDs (rotation) or fail on demand.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tonic::{Request, Response, Status};

use crate::aes::Gcm;
use crate::kms::v2::key_management_service_server::{KeyManagementService, KeyManagementServiceServer};
use crate::kms::v2::{DecryptRequest, DecryptResponse, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse};

#[derive(Default)]
struct Plugin {
    key_id: Mutex<String>,
    failing: AtomicBool,
    status_calls: AtomicUsize,
    encrypt_calls: AtomicUsize,
    decrypt_calls: AtomicUsize,
}

fn kek(key_id: &str) -> Gcm {
    let key: [u8; 32] = Sha256::digest(format!("krate test KMS key {key_id}")).into();
    Gcm::new(format!("test KMS key {key_id}"), &key).expect("32-byte key")
}

#[tonic::async_trait]
impl KeyManagementService for Arc<Plugin> {
    async fn status(&self, _: Request<StatusRequest>) -> Result<Response<StatusResponse>, Status> {
        self.status_calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Status::unavailable("test KMS plugin is down"));
        }
        Ok(Response::new(StatusResponse {
            version: "v2".into(),
            healthz: "ok".into(),
            key_id: self.key_id.lock().clone(),
        }))
    }

    async fn encrypt(&self, req: Request<EncryptRequest>) -> Result<Response<EncryptResponse>, Status> {
        self.encrypt_calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Status::unavailable("test KMS plugin is down"));
        }
        let key_id = self.key_id.lock().clone();
        let ciphertext =
            kek(&key_id).seal(&req.into_inner().plaintext, b"").map_err(|e| Status::internal(e.to_string()))?;
        let annotations = HashMap::from([("kms.krate.dev/plugin".to_string(), b"test".to_vec())]);
        Ok(Response::new(EncryptResponse { ciphertext, key_id, annotations }))
    }

    async fn decrypt(&self, req: Request<DecryptRequest>) -> Result<Response<DecryptResponse>, Status> {
        self.decrypt_calls.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(Status::unavailable("test KMS plugin is down"));
        }
        let req = req.into_inner();
        let plaintext =
            kek(&req.key_id).open(&req.ciphertext, b"").map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(Response::new(DecryptResponse { plaintext }))
    }
}

/// A running test plugin; stops when dropped.
pub struct TestKmsPlugin {
    pub socket: PathBuf,
    plugin: Arc<Plugin>,
    task: tokio::task::JoinHandle<()>,
}

impl TestKmsPlugin {
    pub async fn start(socket: impl AsRef<Path>, key_id: &str) -> std::io::Result<Self> {
        let socket = socket.as_ref().to_path_buf();
        let _ = tokio::fs::remove_file(&socket).await;
        let listener = tokio::net::UnixListener::bind(&socket)?;
        let plugin = Arc::new(Plugin { key_id: Mutex::new(key_id.into()), ..Default::default() });
        let incoming = futures::stream::unfold(listener, |l| async move {
            let conn = l.accept().await.map(|(s, _)| s);
            Some((conn, l))
        });
        let service = KeyManagementServiceServer::new(plugin.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming).await;
        });
        Ok(TestKmsPlugin { socket, plugin, task })
    }

    /// `unix://…` for the configuration file.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub fn set_key_id(&self, key_id: &str) {
        *self.plugin.key_id.lock() = key_id.into();
    }

    pub fn set_failing(&self, failing: bool) {
        self.plugin.failing.store(failing, Ordering::SeqCst);
    }

    pub fn status_calls(&self) -> usize {
        self.plugin.status_calls.load(Ordering::SeqCst)
    }
    pub fn encrypt_calls(&self) -> usize {
        self.plugin.encrypt_calls.load(Ordering::SeqCst)
    }
    pub fn decrypt_calls(&self) -> usize {
        self.plugin.decrypt_calls.load(Ordering::SeqCst)
    }
}

impl Drop for TestKmsPlugin {
    fn drop(&mut self) {
        self.task.abort();
    }
}
