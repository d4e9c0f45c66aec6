//! `krate`: Kubernetes in one binary.

mod agent;
mod cli;
mod controllers;
mod encryption;
mod kubeconfig;
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
            Command::Images(ImagesCommand::Import(_)) => not_available("images import", "the node agent"),
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

/// A subcommand whose component has not landed yet says so instead of pretending.
fn not_available(command: &str, component: &str) -> anyhow::Result<()> {
    anyhow::bail!("`krate {command}` is not available yet: {component} has not been built into this version of krate")
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
