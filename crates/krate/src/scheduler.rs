//! The scheduler inside `krate server` (over the in-process transport, as
//! system:kube-scheduler) and as `krate scheduler --kubeconfig` against a remote server;
//! either way it schedules only while holding the kube-system/kube-scheduler Lease
//! (unless leader election is off), so several servers never schedule twice.

use std::path::PathBuf;

use anyhow::Context as _;
use krate_api::user::UserInfo;
use krate_apiserver::inprocess::InProcess;
use krate_apiserver::start::Running;

/// Starts the scheduler in this process (its configuration checked first); dropping the
/// handle stops it.
pub async fn start(running: &Running, config: Option<PathBuf>, leader_elect: bool) -> anyhow::Result<Stop> {
    let client = kube::Client::new(
        InProcess::new(running.server.clone(), UserInfo::component("system:kube-scheduler")),
        "default",
    );
    let options = options(config).await?;
    Ok(Stop(tokio::spawn(elected(client, options, leader_elect))))
}

/// The lease upstream's scheduler elects its leader with.
const LEASE: &str = "kube-scheduler";

/// Runs the scheduler, under leader election when asked, until dropped.
async fn elected(client: kube::Client, options: krate_scheduler::Options, leader_elect: bool) {
    let lead = {
        let client = client.clone();
        move || {
            let (client, options) = (client.clone(), options.clone());
            async move {
                if let Err(error) = krate_scheduler::run(client, options).await {
                    tracing::error!(%error, "the scheduler stopped");
                }
            }
        }
    };
    if leader_elect {
        krate_client::leader::run(client, krate_client::leader::Config::new(LEASE), lead).await
    } else {
        lead().await
    }
}

async fn options(config: Option<PathBuf>) -> anyhow::Result<krate_scheduler::Options> {
    let options = krate_scheduler::Options { config, ..Default::default() };
    let profiles = options.load_profiles().await.context("scheduler configuration")?;
    Ok(krate_scheduler::Options { profiles, ..options })
}

/// `krate scheduler --kubeconfig FILE`: the scheduler alone, against a remote API server.
pub async fn run(args: crate::cli::SchedulerArgs) -> anyhow::Result<()> {
    let client = crate::kubeconfig::client(&args.kubeconfig).await?;
    let options = options(args.config).await?;
    tokio::select! {
        () = elected(client, options, args.leader_elect) => Ok(()),
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

pub struct Stop(tokio::task::JoinHandle<()>);

impl Drop for Stop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
