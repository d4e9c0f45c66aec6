//! `krate-bench`: the measurements behind bench/RESULTS.md. Run in release mode:
//! `cargo run --release -p krate-bench -- store`, or, after
//! `cargo build --release -p krate -p krate-bench`, `./target/release/krate-bench api`
//! (`scheduler --nodes 5000 --pods 10000` for the scheduler's throughput).

mod api;
mod control;
mod kubectl;
mod scheduler;
mod stats;
mod store;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "krate benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Storage backends side by side: durable writes, ranges, watch fan-out.
    Store(store::StoreArgs),
    /// The `krate server` binary over HTTPS beside a bare hyper server: GET, LIST, CREATE,
    /// watch fan-out, time to ready, memory.
    Api(api::ApiArgs),
    /// The control loops at scale: scheduler throughput on simulated nodes, a large
    /// Deployment to Ready, control-plane memory.
    Control(control::ControlArgs),
    /// kubectl apply of a 100-object manifest (client- and server-side) and LIST of 10k
    /// pods as JSON, Table and protobuf.
    Kubectl(kubectl::KubectlArgs),
    /// Scheduler throughput: pods/s binding pending pods onto simulated nodes.
    Scheduler(scheduler::SchedulerArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Store(args) => store::run(args).await,
        Command::Api(args) => api::run(args).await,
        Command::Kubectl(args) => kubectl::run(args).await,
        Command::Control(args) => control::run(args).await,
        Command::Scheduler(args) => scheduler::run(args).await,
    }
}
