//! `kvrs overhead FILE [--kubevirt-cr FILE] [--feature-gates A,B]`: the memory overhead and compute-container resources KubeVirt reserves
//! for a VMI, in the `key: value` layout of the oracle's `NAME.overhead.txt`.

use std::path::PathBuf;

use kvrs_core::resources::ResourceReport;

use crate::cmd::cluster::ClusterArgs;
use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

/// Examples shown by `kvrs overhead --help` (each is run by `tests/help_examples.rs`).
const EXAMPLES: &str = "\
Examples (paths relative to a kvrs checkout):
  kvrs overhead fixtures/vmi/minimal.yaml
  kvrs overhead fixtures/vmi/dedicated-hugepages.yaml
  # cpuAllocationRatio 1: a whole CPU requested per vCPU instead of 100m
  kvrs overhead fixtures/vmi/minimal.yaml --kubevirt-cr fixtures/kubevirt-cr/cpu-allocation-ratio.yaml
  # memoryOvercommit 150 and an additionalGuestMemoryOverheadRatio of 1.5
  kvrs overhead fixtures/vm/fedora-always.yaml --kubevirt-cr fixtures/kubevirt-cr/production.yaml";

/// Arguments of `kvrs overhead`.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// The cluster's configuration.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The instancetypes and preferences VMs reference.
    #[command(flatten)]
    pub instancetypes: crate::cmd::instancetypes::InstancetypeArgs,
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = args.cluster.load()?.config;
    let mut outputs = Vec::new();
    for (origin, vmi) in admitted_vmis(&args.file, &config, &args.instancetypes.load()?)? {
        let report = ResourceReport::new(&vmi, &config)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        outputs.push(report.to_lines());
    }
    print_outputs(&outputs);
    Ok(())
}
