//! The cluster configuration every subcommand that admits, converts or renders a VMI works
//! with: KubeVirt v1.9.0's default, or the `spec.configuration` of a KubeVirt CR
//! (`--kubevirt-cr FILE`), plus the feature gates of `--feature-gates`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use kvrs_admission::kubevirt_cr::{NetworkBindingPlugin, read_kubevirt_cr};
use kvrs_core::pod::PodError;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};

use crate::input::{CliError, origin_of, parse_document, read_text};

/// The cluster flags shared by `defaults`, `convert`, `overhead`, `pod` and `decide`.
#[derive(clap::Args, Debug, Default)]
pub struct ClusterArgs {
    /// Cluster feature gates to enable, comma separated; added to those of `--kubevirt-cr`.
    #[arg(long, value_name = "A,B")]
    pub feature_gates: Option<String>,
    /// A KubeVirt CR (`kind: KubeVirt`, YAML or JSON) whose spec.configuration is the cluster's.
    ///
    /// E.g. the output of `kubectl get kubevirt -n kubevirt kubevirt -o yaml`. kvrs reads
    /// developerConfiguration (featureGates, disabledFeatureGates, useEmulation,
    /// cpuAllocationRatio, memoryOvercommit), cpuRequest, architectureConfiguration (machine
    /// types, defaultArchitecture), machineType, network (defaultNetworkInterface, binding),
    /// smbios, memBalloonStatsPeriod, additionalGuestMemoryOverheadRatio,
    /// liveUpdateConfiguration.maxHotplugRatio and vmRolloutStrategy; other fields are ignored.
    /// A field kvrs reads with the wrong type is an error naming its path.
    #[arg(long, value_name = "FILE")]
    pub kubevirt_cr: Option<PathBuf>,
}

/// The cluster as the flags describe it.
#[derive(Debug)]
pub struct Cluster {
    /// The configuration.
    pub config: ClusterConfig,
    /// Network binding plugins the CR configures, by name.
    pub network_bindings: BTreeMap<String, NetworkBindingPlugin>,
    /// How errors name the CR file, when one was given.
    pub cr_origin: Option<String>,
    /// The KubeVirt CR as read (`kvrs run` creates it for its daemons to watch).
    pub document: Option<serde_json::Value>,
}

impl Cluster {
    /// The one refusal every subcommand gives a VMI whose interface names a binding plugin the
    /// cluster does not register. KubeVirt v1.9.0's webhooks admit such a VMI; its
    /// virt-controller then cannot render the launcher pod (the message is its), so no pod,
    /// domain or overhead ever exists for it. `defaults`, `convert`, `overhead` and `pod` all
    /// refuse it with this same reason.
    pub fn check_bindings(
        &self,
        origin: &str,
        vmi: &VirtualMachineInstance,
    ) -> Result<(), CliError> {
        let ifaces = vmi.spec.domain.devices.interfaces.iter().flatten();
        for (i, iface) in ifaces.enumerate() {
            let Some(binding) = &iface.binding else {
                continue;
            };
            if !self.network_bindings.contains_key(&binding.name) {
                let err = PodError::UnknownNetworkBinding(i, binding.name.clone());
                let hint = match &self.cr_origin {
                    Some(cr) => format!(
                        "{cr} has no spec.configuration.network.binding.{}",
                        binding.name
                    ),
                    None => "give the KubeVirt CR that registers it with --kubevirt-cr".into(),
                };
                return Err(CliError::Rejected(format!(
                    "{origin}: {err} (KubeVirt admits the VMI, but virt-controller cannot create \
                     its launcher pod; {hint})"
                )));
            }
        }
        Ok(())
    }

    /// The `domainAttachmentType` of the registered plugin `name`, if it sets one.
    pub fn plugin_attachment(&self, name: &str) -> Option<&str> {
        self.network_bindings
            .get(name)
            .and_then(|p| p.domain_attachment_type.as_deref())
    }
}

impl ClusterArgs {
    /// Reads `--kubevirt-cr` (if given) and adds `--feature-gates`; a gate KubeVirt v1.9.0
    /// does not know is refused with the list of those it does.
    pub fn load(&self) -> Result<Cluster, CliError> {
        let mut cluster = match &self.kubevirt_cr {
            None => Cluster {
                config: ClusterConfig::default(),
                network_bindings: BTreeMap::new(),
                cr_origin: None,
                document: None,
            },
            Some(path) => {
                let origin = origin_of(path);
                let doc = single_kubevirt(parse_document(&read_text(path)?, &origin)?, &origin)?;
                let cr = read_kubevirt_cr(&doc)
                    .map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
                // Applied in part, as the daemons apply it: what was left out changes nothing
                // kvrs computes, or is a limit the user should know of; say it either way.
                for left_out in &cr.not_applied {
                    eprintln!("{origin}: warning: not applied: {left_out}");
                }
                Cluster {
                    config: cr.config,
                    network_bindings: cr.network_bindings,
                    cr_origin: Some(origin),
                    document: Some(doc),
                }
            }
        };
        let gates = self.feature_gates.as_deref().unwrap_or_default();
        let extra = ClusterConfig::try_with_feature_gates(gates)
            .map_err(|e| CliError::Input(format!("--feature-gates: {e}")))?;
        cluster.config.feature_gates.extend(extra.feature_gates);
        Ok(cluster)
    }
}

/// The KubeVirt of a `kind: List` holding exactly one (what `kubectl get kubevirt -o yaml`
/// prints), or the document itself.
fn single_kubevirt(doc: serde_json::Value, origin: &str) -> Result<serde_json::Value, CliError> {
    if doc.get("kind").and_then(|k| k.as_str()) != Some("List") {
        return Ok(doc);
    }
    match doc
        .get("items")
        .and_then(|i| i.as_array())
        .map(Vec::as_slice)
    {
        Some([one]) => Ok(one.clone()),
        Some(items) => Err(CliError::Input(format!(
            "{origin}: items: a List of {} objects; expected exactly one KubeVirt",
            items.len()
        ))),
        None => Err(CliError::Input(format!(
            "{origin}: items: expected a list holding one KubeVirt"
        ))),
    }
}
