//! `kvrs convert FILE [--context FILE] [--feature-gates A,B]`: the libvirt domain XML KubeVirt's
//! virt-launcher would define for a VMI (or a VM's VMI).
//!
//! The input is admitted first (defaulting + validation, like the cluster), then converted with
//! the [`ConverterContext`] — by default the context of KubeVirt's oracle corpus; `--context`
//! reads a JSON or YAML file whose camelCase fields override it.

use std::path::PathBuf;

use kvrs_converter::{ConverterContext, convert};
use kvrs_core::ClusterConfig;

use crate::input::{CliError, origin_of};
use crate::pipeline::admitted_vmi;

/// Arguments of `kvrs convert`.
#[derive(clap::Args)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Converter context (JSON or YAML, camelCase fields of `ConverterContext`).
    #[arg(long, value_name = "FILE")]
    pub context: Option<PathBuf>,
    /// Cluster feature gates to enable, comma separated.
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
}

/// Runs the subcommand: prints the domain XML.
pub fn run(args: Args) -> Result<(), CliError> {
    let origin = origin_of(&args.file);
    let config = ClusterConfig::with_feature_gates(args.feature_gates.as_deref().unwrap_or(""));
    let ctx = match &args.context {
        None => ConverterContext::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?;
            serde_yaml::from_str(&text)
                .map_err(|e| CliError::Input(format!("{}: {e}", path.display())))?
        }
    };
    let admitted = admitted_vmi(&args.file, &config)?;
    let domain =
        convert(&admitted, &ctx).map_err(|e| CliError::Rejected(format!("{origin}: {e}")))?;
    let xml = domain
        .to_xml()
        .map_err(|e| CliError::Failed(e.to_string()))?;
    println!("{xml}");
    Ok(())
}
