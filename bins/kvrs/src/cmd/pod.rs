//! `kvrs pod FILE [--kubevirt-cr FILE] [--feature-gates A,B]`: the virt-launcher pod virt-controller would create for a VMI.
//!
//! A network binding plugin the CR registers adds its hook sidecar (`sidecarImage`) and its
//! Multus element (`networkAttachmentDefinition`); an unregistered one is refused.

use kvrs_core::pod::{PodInputs, QEMU_TIMEOUT_JITTER_RANGE, render_launcher_pod};

use crate::cmd::workload::WorkloadArgs;
use crate::input::CliError;
use crate::pipeline::print_outputs;

/// Output format of `kvrs pod`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Output {
    /// YAML (the default).
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// Examples shown by `kvrs pod --help` (each is run by `tests/help_examples.rs`).
const EXAMPLES: &str = "\
Examples (paths relative to a kvrs checkout):
  kvrs pod fixtures/vmi/minimal.yaml
  kvrs pod fixtures/vm/windows-halted.yaml -o json
  # Memory overcommit from an o1-like instancetype: the pod requests less than the guest has
  kvrs pod fixtures/instancetype/vms/o1-overcommit.yaml --instancetype fixtures/instancetype/instancetypes
  # useEmulation: no devices.kubevirt.io/kvm, --allow-emulation for the launcher
  kvrs pod fixtures/vmi/minimal.yaml --kubevirt-cr fixtures/kubevirt-cr/emulation.yaml
  # cpuAllocationRatio 1: the compute container requests one CPU per vCPU
  kvrs pod fixtures/vmi/conv-fedora-two-nics.yaml --kubevirt-cr fixtures/kubevirt-cr/cpu-allocation-ratio.yaml";

/// Arguments of `kvrs pod`.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// The VMI or VM, the cluster, the instancetypes.
    #[command(flatten)]
    pub input: WorkloadArgs,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "yaml")]
    pub output: Output,
    /// The virt-launcher image.
    #[arg(long, default_value = "quay.io/kubevirt/virt-launcher:v1.9.0")]
    pub launcher_image: String,
    /// Seconds added to the 240 s qemu timeout (KubeVirt picks 0..119 at random).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..i64::from(QEMU_TIMEOUT_JITTER_RANGE)))]
    pub qemu_timeout_jitter: u32,
}

/// Runs the subcommand.
pub fn run(args: Args) -> Result<(), CliError> {
    let cluster = args.input.cluster()?;
    let mut config = cluster.config.clone();
    config.launcher_image = args.launcher_image;
    let inputs = PodInputs {
        qemu_timeout_jitter_seconds: args.qemu_timeout_jitter,
        network_bindings: cluster.network_bindings.clone(),
        ..PodInputs::default()
    };
    let pods = args.input.render(&config, |origin, vmi| {
        cluster.check_bindings(origin, vmi)?;
        render_launcher_pod(vmi, &config, &inputs)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))
    })?;
    let failed = |e: String| CliError::Failed(e);
    match args.output {
        // One pod as an object, several as a JSON array.
        Output::Json => {
            let text = if let [pod] = pods.as_slice() {
                serde_json::to_string_pretty(pod)
            } else {
                serde_json::to_string_pretty(&pods)
            }
            .map_err(|e| failed(e.to_string()))?;
            println!("{text}");
        }
        Output::Yaml => {
            let texts = pods
                .iter()
                .map(|pod| serde_norway::to_string(pod).map_err(|e| failed(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            print_outputs(&texts);
        }
    }
    Ok(())
}
