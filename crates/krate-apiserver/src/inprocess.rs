//! The in-process transport: a tower service over the [`ApiServer`], so components
//! inside `krate server` (controllers, scheduler, agent) are ordinary kube-rs clients
//! that take the same request road as any HTTPS client — authorization, admission,
//! registry, watch cache — without a socket or TLS. `kube::Client::new(InProcess::new(..), ns)`
//! makes a client of it.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response};

use krate_api::user::UserInfo;

use crate::body::Body;
use crate::server::{ApiServer, Caller};

/// Requests made through this service act as `user`.
#[derive(Clone)]
pub struct InProcess {
    server: Arc<ApiServer>,
    user: UserInfo,
}

impl InProcess {
    pub fn new(server: Arc<ApiServer>, user: UserInfo) -> Self {
        InProcess { server, user }
    }
}

impl<B> tower::Service<Request<B>> for InProcess
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (server, user) = (self.server.clone(), self.user.clone());
        Box::pin(async move { Ok(server.handle(req, Caller::Trusted(user)).await) })
    }
}
