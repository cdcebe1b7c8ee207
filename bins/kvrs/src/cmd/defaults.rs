//! `kvrs defaults FILE`: the VMI after KubeVirt's defaulting.

use std::path::PathBuf;

use crate::input::{CliError, Workload, read_workload};

/// Arguments of `kvrs defaults`.
#[derive(clap::Args)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Cluster feature gates to enable, comma separated.
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    // Defaulting lands with the defaulting module; until then the VMI is printed as read.
    let vmi = match read_workload(&args.file)? {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(_) => return Err(CliError::Failed("VirtualMachine input: not yet".into())),
    };
    let _ = args.feature_gates;
    println!(
        "{}",
        serde_json::to_string_pretty(&vmi).map_err(|e| CliError::Failed(e.to_string()))?
    );
    Ok(())
}
