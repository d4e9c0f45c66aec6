//! Kubeconfig files for the subcommands that run a component against a remote API
//! server (controller-manager, scheduler, simulate-nodes).

use std::path::Path;

use anyhow::Context as _;

/// The client configuration a kubeconfig file describes (its current context).
pub async fn load(path: &Path) -> anyhow::Result<kube::Config> {
    let shown = path.display();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {shown}"))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .with_context(|| format!("loading {shown}"))
}

/// A client for the API server a kubeconfig file names, with its credentials.
pub async fn client(path: &Path) -> anyhow::Result<kube::Client> {
    kube::Client::try_from(load(path).await?).context("building the API client")
}
