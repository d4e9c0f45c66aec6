//! The CRI runtime.v1 client: tonic over the runtime's unix socket.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::{Channel, Endpoint};

/// Both CRI services over one channel. Cheap to clone (tonic channels are shared).
#[derive(Clone)]
pub struct Cri {
    pub runtime: RuntimeServiceClient<Channel>,
    pub images: ImageServiceClient<Channel>,
    pub socket: PathBuf,
}

impl Cri {
    /// A lazily connecting client: calls fail (and are retried by the caller) while the
    /// runtime is down, and reconnect once it is back (containerd restarts).
    pub fn new(socket: &Path) -> Cri {
        let path = socket.to_path_buf();
        // The URI is required by tonic but unused: the connector dials the socket.
        let channel = Endpoint::from_static("http://cri.invalid")
            .connect_timeout(Duration::from_secs(5))
            .connect_with_connector_lazy(tower::service_fn(move |_: tonic::transport::Uri| {
                let path = path.clone();
                async move { tokio::net::UnixStream::connect(path).await.map(TokioIo::new) }
            }));
        // Image imports of sizeable images arrive in one message; raise tonic's 4 MiB cap.
        let max = 64 * 1024 * 1024;
        Cri {
            runtime: RuntimeServiceClient::new(channel.clone()).max_decoding_message_size(max),
            images: ImageServiceClient::new(channel).max_decoding_message_size(max),
            socket: socket.to_path_buf(),
        }
    }

    /// `NAME://VERSION`, as nodeInfo.containerRuntimeVersion shows it.
    pub async fn version(&self) -> Result<String, tonic::Status> {
        let v = self.runtime.clone().version(k8s_cri::v1::VersionRequest { version: "v1".into() }).await?.into_inner();
        Ok(format!("{}://{}", v.runtime_name, v.runtime_version))
    }

    /// Waits until the runtime answers Version, for at most `timeout`.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<String, tonic::Status> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self.version().await {
                Ok(v) => return Ok(v),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}
