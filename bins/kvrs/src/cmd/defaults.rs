//! `kvrs defaults FILE [--feature-gates A,B]`: the VMI as the cluster would store it after
//! KubeVirt's admission (namespace default, mutating webhook defaults, validating webhook).
//!
//! A VirtualMachine is first checked as KubeVirt's VM webhook checks it
//! ([`kvrs_core::validate::validate_vm`]), turned into the VMI its controller would create
//! ([`kvrs_core::template::vmi_from_vm`]), then admitted like any VMI.

use std::path::PathBuf;

use kvrs_core::ClusterConfig;
use kvrs_core::admission::admit;
use kvrs_core::template::vmi_from_vm;
use kvrs_core::validate::validate_vm;

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

/// Runs the subcommand: prints the admitted VMI as pretty JSON.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = ClusterConfig::with_feature_gates(args.feature_gates.as_deref().unwrap_or(""));
    let vmi = match read_workload(&args.file)? {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(vm) => {
            validate_vm(&vm, &config).map_err(|e| {
                CliError::Rejected(format!(
                    "{}: rejected by validating webhook: {e}",
                    origin(&args)
                ))
            })?;
            vmi_from_vm(&vm).map_err(|e| CliError::Input(format!("{}: {e}", origin(&args))))?
        }
    };
    let admitted =
        admit(vmi, &config).map_err(|e| CliError::Rejected(format!("{}: {e}", origin(&args))))?;
    let text =
        serde_json::to_string_pretty(&admitted).map_err(|e| CliError::Failed(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn origin(args: &Args) -> String {
    if args.file.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        args.file.display().to_string()
    }
}
