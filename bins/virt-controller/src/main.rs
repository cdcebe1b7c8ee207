//! kvrs virt-controller: the binary. Flags, logging, the client and the signals; the controllers
//! themselves are the library (`kvrs_virt_controller::run`), which `kvrs run` embeds too.

use std::process::ExitCode;

use clap::Parser;
use kvrs_virt_controller::{Flags, run};
use tokio::signal::unix::{SignalKind, signal};
use tracing::error;

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    kvrs_runtime::kube::setup::init_logging();
    let result: anyhow::Result<ExitCode> = async {
        let client = kvrs_runtime::kube::setup::connect(flags.kubeconfig.as_deref()).await?;
        let mut sigterm = signal(SignalKind::terminate())?;
        let stop = async move {
            tokio::select! {
                _ = sigterm.recv() => tracing::info!("SIGTERM"),
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
            }
        };
        run(flags, client, stop).await
    }
    .await;
    match result {
        Ok(code) => code,
        Err(e) => {
            error!("virt-controller: {e:#}");
            ExitCode::from(1)
        }
    }
}
