//! `krate-bench`: the measurements behind bench/RESULTS.md. Run in release mode:
//! `cargo run --release -p krate-bench -- store`.

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Store(args) => store::run(args).await,
    }
}
