//! The scheduler (upstream's kube-scheduler framework behaviour), a kube-rs client of the
//! API server: it watches pending pods and nodes through shared informers, filters and
//! scores nodes with upstream's default plugins and weights, and binds pods through the
//! pods/binding subresource. See ARCHITECTURE.md ("The scheduler").

pub mod cache;
pub mod config;
pub mod framework;
mod metrics;
pub mod node_info;
pub mod plugins;
pub mod preemption;
pub mod queue;
pub mod resources;
mod scheduler;
pub mod selectors;
mod workloads;
mod writer;

use std::path::PathBuf;

pub use framework::Profile;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("scheduler configuration: {0}")]
    Config(String),
    #[error("reading scheduler configuration {path}: {source}")]
    ReadConfig { path: PathBuf, source: std::io::Error },
    #[error("the scheduler's informers stopped")]
    InformersStopped,
}

/// How the scheduler runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Profiles to run; empty means upstream's default profile ("default-scheduler"),
    /// unless `config` gives them.
    pub profiles: Vec<Profile>,
    /// A KubeSchedulerConfiguration file (`--config`).
    pub config: Option<PathBuf>,
    /// Bindings in flight at once.
    pub bind_concurrency: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { profiles: Vec::new(), config: None, bind_concurrency: 64 }
    }
}

impl Options {
    /// The profiles to run: given ones, else the configuration file's, else the default.
    pub async fn load_profiles(&self) -> Result<Vec<Profile>, Error> {
        if !self.profiles.is_empty() {
            return Ok(self.profiles.clone());
        }
        match &self.config {
            None => Ok(vec![Profile::new("default-scheduler")]),
            Some(path) => {
                let text = tokio::fs::read_to_string(path)
                    .await
                    .map_err(|source| Error::ReadConfig { path: path.clone(), source })?;
                config::Configuration::parse(&text)?.profiles()
            }
        }
    }
}

/// Runs the scheduler until its informers stop (it never returns otherwise).
pub async fn run(client: kube::Client, options: Options) -> Result<(), Error> {
    scheduler::run(client, options).await
}
