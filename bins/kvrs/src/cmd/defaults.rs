//! `kvrs defaults FILE [--kubevirt-cr FILE] [--feature-gates A,B]`: the VMI as the cluster would store it after
//! KubeVirt's admission (namespace default, mutating webhook defaults, validating webhook).
//!
//! A VirtualMachine is first checked as KubeVirt's VM webhook checks it
//! ([`kvrs_core::validate::validate_vm`]), turned into the VMI its controller would create
//! ([`kvrs_core::template::vmi_from_vm`]), then admitted like any VMI — the same pipeline
//! ([`crate::pipeline`]) as `convert`, `overhead` and `pod`.

use crate::cmd::workload::WorkloadArgs;
use crate::input::CliError;

/// Examples shown by `kvrs defaults --help` (each is run by `tests/help_examples.rs`).
pub const EXAMPLES: &str = "\
Examples (paths relative to a kvrs checkout):
  # A VMI after virt-api's defaulting and validation
  kvrs defaults fixtures/vmi/minimal.yaml
  # The VMI a VM's controller would create, as the cluster stores it
  kvrs defaults fixtures/vm/fedora-always.yaml
  # A VM sized by an instancetype and shaped by a preference (looked up by kind and name)
  kvrs defaults fixtures/instancetype/vms/fedora-u1-medium.yaml --instancetype fixtures/instancetype/instancetypes --preference fixtures/instancetype/preferences
  # With a cluster's configuration (masquerade default interface, 200m CPU request)
  kvrs defaults fixtures/vmi/minimal.yaml --kubevirt-cr fixtures/kubevirt-cr/production.yaml
  # Feature gates, added to the cluster's (a gate KubeVirt v1.9.0 does not know is an error)
  kvrs defaults fixtures/vmi/storage-mix.yaml --feature-gates Sidecar,HostDisk";

/// Runs the subcommand: prints the admitted VMI as pretty JSON.
pub fn run(input: WorkloadArgs) -> Result<(), CliError> {
    input.print_each(|_, admitted, _| {
        let text =
            serde_json::to_string_pretty(admitted).map_err(|e| CliError::Failed(e.to_string()))?;
        Ok(format!("{text}\n"))
    })
}
