//! `kvrs overhead FILE`: the memory overhead and compute-container resources KubeVirt reserves
//! for a VMI, in the `key: value` layout of the oracle's `NAME.overhead.txt`.

use std::path::PathBuf;

use kvrs_core::ClusterConfig;
use kvrs_core::resources::ResourceReport;

use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

/// Arguments of `kvrs overhead`.
#[derive(clap::Args)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Cluster feature gates to enable, comma separated (as in `NAME.featuregates.txt`).
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
}

/// The cluster configuration for `--feature-gates`; a gate KubeVirt v1.9.0 does not know is
/// refused with the list of those it does.
pub(crate) fn config_for(gates: Option<&str>) -> Result<ClusterConfig, CliError> {
    ClusterConfig::try_with_feature_gates(gates.unwrap_or_default())
        .map_err(|e| CliError::Input(format!("--feature-gates: {e}")))
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = config_for(args.feature_gates.as_deref())?;
    let mut outputs = Vec::new();
    for (origin, vmi) in admitted_vmis(&args.file, &config)? {
        let report = ResourceReport::new(&vmi, &config)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        outputs.push(report.to_lines());
    }
    print_outputs(&outputs);
    Ok(())
}
