//! `kvrs pod FILE`: the virt-launcher pod virt-controller would create for a VMI.

use std::path::PathBuf;

use kvrs_core::pod::{PodInputs, QEMU_TIMEOUT_JITTER_RANGE, render_launcher_pod};

use super::overhead::config_for;
use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

/// Output format of `kvrs pod`.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Output {
    /// YAML (the default).
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// Arguments of `kvrs pod`.
#[derive(clap::Args)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Cluster feature gates to enable, comma separated (as in `NAME.featuregates.txt`).
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
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
    let mut config = config_for(args.feature_gates.as_deref())?;
    config.launcher_image = args.launcher_image;
    let inputs = PodInputs {
        qemu_timeout_jitter_seconds: args.qemu_timeout_jitter,
        ..PodInputs::default()
    };
    let mut pods = Vec::new();
    for (origin, vmi) in admitted_vmis(&args.file, &config)? {
        let pod = render_launcher_pod(&vmi, &config, &inputs)
            .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
        pods.push(pod);
    }
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
                .map(|pod| serde_yaml::to_string(pod).map_err(|e| failed(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?;
            print_outputs(&texts);
        }
    }
    Ok(())
}
