//! `kvrs convert FILE [--context FILE] [--feature-gates A,B]`: the libvirt domain XML KubeVirt's
//! virt-launcher would define for a VMI (or a VM's VMI).
//!
//! The input is admitted first (defaulting + validation, like the cluster), then converted with
//! the [`ConverterContext`] — by default the context of KubeVirt's oracle corpus; `--context`
//! reads a JSON or YAML file whose camelCase fields override it.
//!
//! The context's `architecture` follows the admitted VMI's `spec.architecture` (virt-launcher
//! runs on a node of the VMI's architecture), unless the `--context` file sets `architecture`.

use std::path::{Path, PathBuf};

use kvrs_converter::{
    Arch, AttachedElsewhere, ConverterContext, check_rendered_interfaces, convert,
};
use kvrs_core::VirtualMachineInstance;

use crate::input::{CliError, origin_of, parse_document, read_text, typed};
use crate::pipeline::{admitted_vmis, print_outputs};

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
    let config = crate::cmd::overhead::config_for(args.feature_gates.as_deref())?;
    let context = load_context(args.context.as_deref())?;
    let mut outputs = Vec::new();
    for (origin, admitted) in admitted_vmis(&args.file, &config)? {
        let ctx = context.for_vmi(&admitted);
        match check_rendered_interfaces(&admitted, &ctx) {
            Ok(()) => {}
            // KubeVirt's own converter renders an SR-IOV VMI without the interface when it is
            // given no prepared device (the oracle's example-vmi-sriov): do the same, but say so.
            Err(e) if e.kind == AttachedElsewhere::Sriov => {
                eprintln!("{origin}: warning: {e}; the domain has no <hostdev> for it");
            }
            Err(e) => return Err(CliError::Rejected(format!("{origin}: {e}"))),
        }
        let domain =
            convert(&admitted, &ctx).map_err(|e| CliError::Rejected(format!("{origin}: {e}")))?;
        let xml = domain
            .to_xml()
            .map_err(|e| CliError::Failed(format!("{origin}: {e}")))?;
        outputs.push(format!("{xml}\n"));
    }
    print_outputs(&outputs);
    Ok(())
}

/// The converter context from `--context` (or the default), and whether it fixes the
/// architecture.
struct LoadedContext {
    ctx: ConverterContext,
    architecture_given: bool,
}

impl LoadedContext {
    /// The context for converting `vmi`: its architecture follows `spec.architecture` unless
    /// the `--context` file named one.
    fn for_vmi(&self, vmi: &VirtualMachineInstance) -> ConverterContext {
        let mut ctx = self.ctx.clone();
        if !self.architecture_given
            && let Some(arch) = vmi.spec.architecture.as_deref().and_then(Arch::parse)
        {
            ctx.architecture = arch;
        }
        ctx
    }
}

/// Reads `--context` (JSON or YAML, camelCase fields of [`ConverterContext`]).
fn load_context(path: Option<&Path>) -> Result<LoadedContext, CliError> {
    let Some(path) = path else {
        return Ok(LoadedContext {
            ctx: ConverterContext::default(),
            architecture_given: false,
        });
    };
    let origin = origin_of(path);
    let doc = parse_document(&read_text(path)?, &origin)?;
    let architecture_given = doc.get("architecture").is_some();
    if let Some(fields) = doc.as_object() {
        let known = known_context_fields();
        let unknown: Vec<&str> = fields
            .keys()
            .map(String::as_str)
            .filter(|k| !known.iter().any(|f| f == k))
            .collect();
        if !unknown.is_empty() {
            return Err(CliError::Input(format!(
                "{origin}: unknown converter context field(s) {}; known fields: {}",
                unknown.join(", "),
                known.join(", ")
            )));
        }
    }
    let ctx = typed(doc, &origin)?;
    Ok(LoadedContext {
        ctx,
        architecture_given,
    })
}

/// The camelCase fields of [`ConverterContext`] (every field serializes, defaults included).
fn known_context_fields() -> Vec<String> {
    match serde_json::to_value(ConverterContext::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}
