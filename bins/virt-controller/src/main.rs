//! kvrs virt-controller: the binary. Parses the flags and hands over to
//! `kvrs_runtime::kube::daemon::main` (logging, the tokio runtime, the client, the signals, the
//! exit code); the daemon itself is the library (`kvrs_virt_controller::run`), which `kvrs run` embeds
//! too.

use std::process::ExitCode;

use clap::Parser;
use kvrs_runtime::kube::{daemon, setup::terminated};
use kvrs_virt_controller::{Flags, run};

fn main() -> ExitCode {
    let flags = Flags::parse();
    let (log_format, kubeconfig) = (flags.log_format, flags.kubeconfig.clone());
    let serve = |client| run(flags, client, terminated());
    daemon::main("virt-controller", log_format, kubeconfig, serve)
}
