//! The gRPC client of one KMS v2 plugin, over its unix socket.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use super::v2::key_management_service_client::KeyManagementServiceClient;
use super::v2::{DecryptRequest, EncryptRequest, EncryptResponse, StatusRequest, StatusResponse};
use crate::metrics;

#[derive(Clone)]
pub struct KmsClient {
    provider: String,
    client: KeyManagementServiceClient<Channel>,
    timeout: Duration,
}

impl KmsClient {
    /// A client that connects on first use (and reconnects after failures), so a plugin
    /// that starts after the API server is picked up.
    pub fn new(provider: &str, socket: impl Into<PathBuf>, timeout: Duration) -> Self {
        let socket = socket.into();
        // The URI is required but unused: the connector dials the socket.
        let channel = Endpoint::from_static("http://kms.invalid").timeout(timeout).connect_with_connector_lazy(
            tower::service_fn(move |_: tonic::transport::Uri| {
                let socket = socket.clone();
                async move { tokio::net::UnixStream::connect(socket).await.map(TokioIo::new) }
            }),
        );
        KmsClient { provider: provider.into(), client: KeyManagementServiceClient::new(channel), timeout }
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    async fn timed<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    ) -> Result<T, String> {
        let start = Instant::now();
        let result = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(resp)) => Ok(resp.into_inner()),
            Ok(Err(status)) => Err(status),
            Err(_) => Err(tonic::Status::deadline_exceeded("context deadline exceeded")),
        };
        let code = match &result {
            Ok(_) => "OK".to_string(),
            Err(s) => format!("{:?}", s.code()),
        };
        metrics::KMS_OPERATIONS_LATENCY
            .with_label_values(&[&self.provider, method, &code])
            .observe(start.elapsed().as_secs_f64());
        result.map_err(|s| format!("rpc error: code = {:?} desc = {}", s.code(), s.message()))
    }

    pub async fn status(&self) -> Result<StatusResponse, String> {
        let mut c = self.client.clone();
        self.timed("/v2.KeyManagementService/Status", c.status(StatusRequest {})).await
    }

    pub async fn encrypt(&self, uid: &str, plaintext: Vec<u8>) -> Result<EncryptResponse, String> {
        let mut c = self.client.clone();
        self.timed("/v2.KeyManagementService/Encrypt", c.encrypt(EncryptRequest { plaintext, uid: uid.into() })).await
    }

    pub async fn decrypt(&self, req: DecryptRequest) -> Result<Vec<u8>, String> {
        let mut c = self.client.clone();
        self.timed("/v2.KeyManagementService/Decrypt", c.decrypt(req)).await.map(|r| r.plaintext)
    }
}
