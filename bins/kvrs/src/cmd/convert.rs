//! `kvrs convert FILE [--context FILE] [--kubevirt-cr FILE] [--feature-gates A,B]`: the libvirt
//! domain XML KubeVirt's virt-launcher would define for a VMI (or a VM's VMI).
//!
//! The input is admitted first (defaulting + validation, like the cluster), then converted with
//! the [`ConverterContext`] — by default the context of KubeVirt's oracle corpus; `--context`
//! reads a JSON or YAML file whose camelCase fields override it.
//!
//! The context's `architecture` follows the admitted VMI's `spec.architecture` (virt-launcher
//! runs on a node of the VMI's architecture), unless the `--context` file sets `architecture`.
//!
//! With `--kubevirt-cr`, the context also takes what the cluster configuration tells the
//! launcher — SMBIOS, `memBalloonStatsPeriod`, `useEmulation` — except the fields the
//! `--context` file sets. `useEmulation: true` also means no `/dev/kvm` in the pod (the pod
//! requests no `devices.kubevirt.io/kvm`), so the domain is `type="qemu"`.
//!
//! Network binding plugins (`binding: {name}`) must be registered in the CR's
//! `network.binding`, else the VMI is refused as virt-controller refuses its pod. A plugin with
//! `domainAttachmentType: tap` (or `managedTap`) is a tap interface, as virt-handler's attachment
//! map makes it; any other plugin's interface is left out of the domain, as KubeVirt's
//! converter leaves it to the plugin's sidecar (with a warning on stderr).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kvrs_converter::context::SmBios;
use kvrs_converter::{
    Arch, AttachedElsewhere, ConverterContext, check_rendered_interfaces, convert,
    domain_attachment_by_interface_name,
};
use kvrs_core::{ClusterConfig, VirtualMachineInstance};

use crate::cmd::cluster::ClusterArgs;
use crate::input::{CliError, origin_of, parse_document, read_text, typed};
use crate::pipeline::{admitted_vmis, print_outputs};

/// Examples shown by `kvrs convert --help` (each is run by `tests/help_examples.rs`).
const EXAMPLES: &str = "\
Examples (paths relative to a kvrs checkout):
  # The domain of a VMI, and of the VMI a VM starts
  kvrs convert fixtures/vmi/minimal.yaml
  kvrs convert fixtures/vm/fedora-always.yaml
  # Dedicated CPUs, NUMA and hugepages from a cx1-like instancetype
  kvrs convert fixtures/instancetype/vms/cx1-dedicated.yaml --instancetype fixtures/instancetype/instancetypes --preference fixtures/instancetype/preferences
  # On a cluster with useEmulation: <domain type=\"qemu\">
  kvrs convert fixtures/vmi/minimal.yaml --kubevirt-cr fixtures/kubevirt-cr/emulation.yaml
  # With the cluster's SMBIOS and balloon period
  kvrs convert fixtures/vmi/fedora-cloudinit.yaml --kubevirt-cr fixtures/kubevirt-cr/production.yaml";

/// Arguments of `kvrs convert`.
#[derive(clap::Args)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// A VMI or VM as YAML or JSON, or `-` for standard input.
    pub file: PathBuf,
    /// Converter context (JSON or YAML, camelCase fields of `ConverterContext`).
    #[arg(long, value_name = "FILE")]
    pub context: Option<PathBuf>,
    /// The cluster's configuration.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// The instancetypes and preferences VMs reference.
    #[command(flatten)]
    pub instancetypes: crate::cmd::instancetypes::InstancetypeArgs,
}

/// Runs the subcommand: prints the domain XML.
pub fn run(args: Args) -> Result<(), CliError> {
    let cluster = args.cluster.load()?;
    let config = &cluster.config;
    let mut context = load_context(args.context.as_deref())?;
    if cluster.cr_origin.is_some() {
        context.apply_cluster(config);
    }
    let mut outputs = Vec::new();
    for (origin, admitted) in admitted_vmis(&args.file, config, &args.instancetypes.load()?)? {
        cluster.check_bindings(&origin, &admitted)?;
        let mut ctx = context.for_vmi(&admitted);
        if !context.given.contains("domainAttachmentByInterfaceName") {
            // What virt-handler tells the launcher from the cluster's binding plugins.
            let ifaces = admitted.spec.domain.devices.interfaces.as_deref();
            ctx.domain_attachment_by_interface_name =
                domain_attachment_by_interface_name(ifaces.unwrap_or_default(), |name| {
                    cluster.plugin_attachment(name)
                });
        }
        // KubeVirt's own converter leaves these interfaces out: an SR-IOV interface without a
        // prepared device (the oracle's example-vmi-sriov), a binding plugin's interface that
        // its sidecar adds. Do the same, but say so.
        if let Err(e) = check_rendered_interfaces(&admitted, &ctx) {
            let note = match e.kind {
                AttachedElsewhere::Sriov => "the domain has no <hostdev> for it",
                AttachedElsewhere::BindingPlugin(_) => "the domain shown has no <interface> for it",
            };
            eprintln!("{origin}: warning: {e}; {note}");
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

/// The converter context from `--context` (or the default), and the fields that file sets.
struct LoadedContext {
    ctx: ConverterContext,
    given: BTreeSet<String>,
}

impl LoadedContext {
    /// What the cluster configuration tells the launcher, for the fields `--context` leaves.
    fn apply_cluster(&mut self, config: &ClusterConfig) {
        let given = |f: &str| self.given.contains(f);
        let ctx = &mut self.ctx;
        if !given("smbios") {
            let s = &config.smbios;
            ctx.smbios = Some(SmBios {
                manufacturer: s.manufacturer.clone(),
                product: s.product.clone(),
                version: s.version.clone(),
                sku: s.sku.clone(),
                family: s.family.clone(),
            });
        }
        if !given("memBalloonStatsPeriod") {
            ctx.mem_balloon_stats_period = config.mem_balloon_stats_period;
        }
        if !given("allowEmulation") {
            ctx.allow_emulation = config.use_emulation;
        }
        if config.use_emulation && !given("hypervisorDeviceAvailable") {
            ctx.hypervisor_device_available = false;
        }
    }

    /// The context for converting `vmi`: its architecture follows `spec.architecture` unless
    /// the `--context` file named one.
    fn for_vmi(&self, vmi: &VirtualMachineInstance) -> ConverterContext {
        let mut ctx = self.ctx.clone();
        if !self.given.contains("architecture")
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
            given: BTreeSet::new(),
        });
    };
    let origin = origin_of(path);
    let doc = parse_document(&read_text(path)?, &origin)?;
    let given = doc
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
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
    Ok(LoadedContext { ctx, given })
}

/// The camelCase fields of [`ConverterContext`] (every field serializes, defaults included).
fn known_context_fields() -> Vec<String> {
    match serde_json::to_value(ConverterContext::default()) {
        Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}
