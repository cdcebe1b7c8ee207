//! kvrs virt-api: the binary. Parses the flags and hands over to
//! `kvrs_runtime::kube::daemon::main`; the daemon itself is the library (`kvrs_virt_api::run`).

use std::process::ExitCode;

use clap::Parser;
use kvrs_runtime::kube::{daemon, setup::terminated};
use kvrs_virt_api::{Flags, run};

fn main() -> ExitCode {
    let flags = Flags::parse();
    let (log_format, kubeconfig) = (flags.log_format, flags.kubeconfig.clone());
    daemon::main("virt-api", log_format, kubeconfig, |client| {
        run(flags, client, terminated())
    })
}
