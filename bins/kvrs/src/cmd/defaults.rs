//! `kvrs defaults FILE [--kubevirt-cr FILE] [--feature-gates A,B]`: the VMI as the cluster would store it after
//! KubeVirt's admission (namespace default, mutating webhook defaults, validating webhook).
//!
//! A VirtualMachine is first checked as KubeVirt's VM webhook checks it
//! ([`kvrs_core::validate::validate_vm`]), turned into the VMI its controller would create
//! ([`kvrs_core::template::vmi_from_vm`]), then admitted like any VMI — the same pipeline
//! ([`crate::pipeline`]) as `convert`, `overhead` and `pod`.

use std::path::PathBuf;

use crate::cmd::cluster::ClusterArgs;
use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

/// Examples shown by `kvrs defaults --help` (each is run by `tests/help_examples.rs`).
const EXAMPLES: &str = "\
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

/// Arguments of `kvrs defaults`.
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

/// Runs the subcommand: prints the admitted VMI as pretty JSON.
pub fn run(args: Args) -> Result<(), CliError> {
    let config = args.cluster.load()?.config;
    let mut outputs = Vec::new();
    for (_, admitted) in admitted_vmis(&args.file, &config, &args.instancetypes.load()?)? {
        let text =
            serde_json::to_string_pretty(&admitted).map_err(|e| CliError::Failed(e.to_string()))?;
        outputs.push(format!("{text}\n"));
    }
    print_outputs(&outputs);
    Ok(())
}
