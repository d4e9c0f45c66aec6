//! `krate`: Kubernetes in one binary.

mod agent;
mod cli;
mod controllers;
mod encryption;
mod kubeconfig;
mod network;
mod scheduler;
mod server;
mod simulate;
mod storage;

use std::process::ExitCode;

use clap::Parser;

use cli::{Cli, Command, ImagesCommand};

/// The Kubernetes release whose API krate serves.
pub const KUBERNETES_VERSION: &str = "v1.36.0";

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("krate: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Server(args) => server::run(*args).await,
            Command::ControllerManager(args) => controllers::run_remote(args).await,
            Command::SimulateNodes(args) => simulate::run(args).await,
            Command::Scheduler(args) => scheduler::run(args).await,
            Command::Agent(args) => agent::run(args).await,
            Command::Images(ImagesCommand::Import(args)) => import_images(args).await,
            Command::Version => {
                println!("krate {} (Kubernetes API {KUBERNETES_VERSION})", env!("CARGO_PKG_VERSION"));
                Ok(())
            }
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("krate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `krate images import`: into the node's running containerd, or staged for the agent's next start.
async fn import_images(args: cli::ImportArgs) -> anyhow::Result<()> {
    use krate_agent::runtime::{ImportOutcome, import_images};
    match import_images(&args.data_dir, &args.files).await? {
        ImportOutcome::Imported => println!("imported {} image tarball(s)", args.files.len()),
        ImportOutcome::Staged(dir) => {
            println!(
                "no agent is running for {}; copied to {} for import at its start",
                args.data_dir.display(),
                dir.display()
            )
        }
    }
    Ok(())
}

fn init_logging(cli: &Cli) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&cli.log_level));
    // Colours only for a terminal: logs sent to files stay greppable.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match cli.log_format {
        cli::LogFormat::Json => builder.json().init(),
        cli::LogFormat::Text => builder.init(),
    }
}
