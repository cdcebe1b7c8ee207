//! `kvrs overhead FILE [--kubevirt-cr FILE] [--feature-gates A,B]`: the memory overhead and compute-container resources KubeVirt reserves
//! for a VMI, in the `key: value` layout of the oracle's `NAME.overhead.txt`.

use kvrs_core::resources::ResourceReport;

use crate::cmd::workload::WorkloadArgs;
use crate::input::CliError;

/// Examples shown by `kvrs overhead --help` (each is run by `tests/help_examples.rs`).
pub const EXAMPLES: &str = "\
Examples (paths relative to a kvrs checkout):
  kvrs overhead fixtures/vmi/minimal.yaml
  kvrs overhead fixtures/vmi/dedicated-hugepages.yaml
  # cpuAllocationRatio 1: a whole CPU requested per vCPU instead of 100m
  kvrs overhead fixtures/vmi/minimal.yaml --kubevirt-cr fixtures/kubevirt-cr/cpu-allocation-ratio.yaml
  # memoryOvercommit 150 and an additionalGuestMemoryOverheadRatio of 1.5
  kvrs overhead fixtures/vm/fedora-always.yaml --kubevirt-cr fixtures/kubevirt-cr/production.yaml";

/// Runs the subcommand.
pub fn run(input: WorkloadArgs) -> Result<(), CliError> {
    input.print_each(|origin, vmi, config| {
        let report = ResourceReport::new(vmi, config)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        Ok(report.to_lines())
    })
}
