//! kvrs virt-controller: the binary. Flags, logging, the client and the signals; the daemon itself
//! is the library (`kvrs_virt_controller::run`), which `kvrs run` embeds too.

use std::process::ExitCode;

use clap::Parser;
use kvrs_runtime::kube::setup::{connect_as, init_logging_as, terminated};
use kvrs_virt_controller::{Flags, run};
use tracing::error;

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    init_logging_as(flags.log_format, "info");
    let result = match connect_as("virt-controller", flags.kubeconfig.as_deref()).await {
        Ok(client) => run(flags, client, terminated()).await,
        Err(e) => Err(e.into()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            error!("virt-controller: {e:#}");
            ExitCode::from(1)
        }
    }
}
