//! The `kvrs` command line: what KubeVirt v1.9.0 would do with a VMI or VM, computed locally.
//!
//! Every subcommand reads its input through [`input`], which turns any bad input into a one-line
//! error naming the field and the reason (exit code 2), never a panic.

mod cmd;
mod input;
mod pipeline;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// kvrs: KubeVirt's control path in Rust.
#[derive(Parser)]
#[command(name = "kvrs", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a VirtualMachine (or VMI) on this machine, no cluster needed: an embedded API
    /// server, virt-controller, virt-handler and a local kubelet run it as a cluster would.
    Run(cmd::run::Args),
    /// Be this machine's kubelet for virt-launcher pods in a real cluster (no container
    /// runtime needed): registers the Node, runs the launcher pods scheduled here.
    Kubelet(cmd::kubelet::Args),
    /// Print the libvirt domain XML virt-launcher would define for a VMI (or a VM's VMI).
    Convert(cmd::convert::Args),
    /// Print a VMI (or a VM's template) after KubeVirt's defaulting, as JSON.
    #[command(after_help = cmd::defaults::EXAMPLES)]
    Defaults(cmd::workload::WorkloadArgs),
    /// Print the memory overhead and compute-container requests/limits KubeVirt reserves.
    #[command(after_help = cmd::overhead::EXAMPLES)]
    Overhead(cmd::workload::WorkloadArgs),
    /// Print the virt-launcher pod virt-controller would create (YAML, or JSON with -o json).
    Pod(cmd::pod::Args),
    /// One reconcile of the VM or VMI controller (or a virt-handler sync) on a scenario file,
    /// printed as the plan (JSON); `--help` describes the scenario format.
    Decide(cmd::decide::Args),
    /// Talk to a virt-launcher's cmd socket: ping, info, get-domain, sync, shutdown, kill,
    /// pause, unpause.
    Launcher(cmd::launcher::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => cmd::run::run(args),
        Command::Kubelet(args) => cmd::kubelet::run(args),
        Command::Convert(args) => cmd::convert::run(args),
        Command::Defaults(args) => cmd::defaults::run(args),
        Command::Overhead(args) => cmd::overhead::run(args),
        Command::Pod(args) => cmd::pod::run(args),
        Command::Decide(args) => cmd::decide::run(args),
        Command::Launcher(args) => cmd::launcher::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kvrs: {err}");
            ExitCode::from(err.exit_code())
        }
    }
}
