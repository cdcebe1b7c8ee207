//! `kvrs overhead FILE`: the memory overhead and compute-container resources KubeVirt reserves
//! for a VMI, in the `key: value` layout of the oracle's `NAME.overhead.txt`.

use std::path::{Path, PathBuf};

use kvrs_core::admission::admit;
use kvrs_core::resources::ResourceReport;
use kvrs_core::template::vmi_from_vm;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};

use crate::input::{CliError, Workload, read_workload};

/// Arguments of `kvrs overhead`.
#[derive(clap::Args)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Cluster feature gates to enable, comma separated (as in `NAME.featuregates.txt`).
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
}

/// Reads a VMI (or a VM's VMI) and admits it as the cluster would: namespace, defaulting,
/// validation. Rejections exit with code 2 and KubeVirt's causes.
pub(crate) fn admitted_vmi(
    file: &Path,
    config: &ClusterConfig,
) -> Result<VirtualMachineInstance, CliError> {
    let vmi = match read_workload(file)? {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(vm) => vmi_from_vm(&vm).map_err(|e| CliError::Input(e.to_string()))?,
    };
    admit(vmi, config).map_err(|e| CliError::Rejected(e.to_string()))
}

/// The cluster configuration for `--feature-gates`.
pub(crate) fn config_for(gates: Option<&str>) -> ClusterConfig {
    ClusterConfig::with_feature_gates(gates.unwrap_or_default())
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = config_for(args.feature_gates.as_deref());
    let vmi = admitted_vmi(&args.file, &config)?;
    let report = ResourceReport::new(&vmi, &config).map_err(|e| CliError::Input(e.to_string()))?;
    print!("{}", report.to_lines());
    Ok(())
}
