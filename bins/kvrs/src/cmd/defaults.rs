//! `kvrs defaults FILE [--feature-gates A,B]`: the VMI as the cluster would store it after
//! KubeVirt's admission (namespace default, mutating webhook defaults, validating webhook).
//!
//! A VirtualMachine is first checked as KubeVirt's VM webhook checks it
//! ([`kvrs_core::validate::validate_vm`]), turned into the VMI its controller would create
//! ([`kvrs_core::template::vmi_from_vm`]), then admitted like any VMI — the same pipeline
//! ([`crate::pipeline`]) as `convert`, `overhead` and `pod`.

use std::path::PathBuf;

use crate::input::CliError;
use crate::pipeline::{admitted_vmis, print_outputs};

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
    let config = crate::cmd::overhead::config_for(args.feature_gates.as_deref())?;
    let mut outputs = Vec::new();
    for (_, admitted) in admitted_vmis(&args.file, &config)? {
        let text =
            serde_json::to_string_pretty(&admitted).map_err(|e| CliError::Failed(e.to_string()))?;
        outputs.push(format!("{text}\n"));
    }
    print_outputs(&outputs);
    Ok(())
}
