//! The cluster configuration kvrs's pure functions read (the parts of KubeVirt's
//! `spec.configuration` that change defaulting, validation, conversion and pod rendering).
//!
//! [`ClusterConfig::default`] is KubeVirt v1.9.0's configuration with an empty
//! `spec.configuration` on amd64 — the configuration the oracle corpus was produced with.

use std::collections::{BTreeMap, BTreeSet};

/// Cluster-wide settings, as virt-api and virt-controller see them.
#[derive(Clone, Debug, PartialEq)]
pub struct ClusterConfig {
    /// Feature gates enabled beyond the ones KubeVirt enables by default.
    pub feature_gates: BTreeSet<String>,
    /// Default guest architecture when the VMI names none.
    pub architecture: String,
    /// Machine type defaulted onto amd64 guests.
    pub machine_type: String,
    /// The machine types a VMI may ask for, per architecture (`amd64`, `arm64`, `s390x`), as
    /// shell patterns (KubeVirt's `emulatedMachines`: `q35*`, `pc-q35*` on amd64).
    pub emulated_machines: BTreeMap<String, Vec<String>>,
    /// The deprecated cluster-wide `emulatedMachines`, which wins for every architecture.
    pub legacy_emulated_machines: Option<Vec<String>>,
    /// CPU request given to a VMI that has none (`100m`).
    pub cpu_request: String,
    /// vCPUs per requested physical CPU (`cpuAllocationRatio`).
    pub cpu_allocation_ratio: u32,
    /// Percentage of guest memory requested from the node (100 = no overcommit).
    pub memory_overcommit_percent: u32,
    /// Binding given to a default pod network interface (`bridge`).
    pub default_network_interface: String,
    /// Multiplier applied to the computed overhead (`additionalGuestMemoryOverheadRatio`).
    pub additional_guest_memory_overhead_ratio: Option<String>,
    /// Virtual CPU and memory hotplug ratio for the LiveUpdate rollout strategy.
    pub max_hotplug_ratio: u32,
    /// Whether the VM rollout strategy is LiveUpdate (hotplug defaults apply).
    pub live_update: bool,
    /// SMBIOS family / manufacturer / product / sku / version.
    pub smbios: Smbios,
    /// Guest memory balloon statistics period in seconds.
    pub mem_balloon_stats_period: u32,
    /// Emulation allowed when no hypervisor device exists.
    pub use_emulation: bool,
    /// The launcher image rendered into pods.
    pub launcher_image: String,
    /// Whether the VM controller stores the VMI it creates as virt-api's mutating webhook
    /// would return it (defaults, `status.runtimeUser`, ...). KubeVirt's controller creates the
    /// bare VMI and the webhook in front of the API server mutates it; a cluster running kvrs
    /// without KubeVirt's virt-api has no such webhook, so its controller applies the mutation
    /// itself (off by default: the decision then matches KubeVirt's controller exactly).
    pub admit_created_vmis: bool,
    /// `spec.configuration.vmStateStorageClass`: the storage class of the backend-storage
    /// claims (persistent TPM and EFI state); empty: the cluster's default classes.
    pub vm_state_storage_class: String,
}

/// SMBIOS strings the converter writes into `<sysinfo type="smbios">`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Smbios {
    /// System family.
    pub family: String,
    /// System manufacturer.
    pub manufacturer: String,
    /// System product.
    pub product: String,
    /// System SKU.
    pub sku: String,
    /// System version.
    pub version: String,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            feature_gates: BTreeSet::new(),
            architecture: "amd64".into(),
            machine_type: "q35".into(),
            emulated_machines: [
                ("amd64", &["q35*", "pc-q35*"][..]),
                ("arm64", &["virt*"][..]),
                ("s390x", &["s390-ccw-virtio*"][..]),
            ]
            .into_iter()
            .map(|(arch, m)| (arch.to_string(), m.iter().map(|p| p.to_string()).collect()))
            .collect(),
            legacy_emulated_machines: None,
            cpu_request: "100m".into(),
            cpu_allocation_ratio: 10,
            memory_overcommit_percent: 100,
            default_network_interface: "bridge".into(),
            additional_guest_memory_overhead_ratio: None,
            max_hotplug_ratio: 4,
            live_update: true,
            smbios: Smbios {
                family: "KubeVirt".into(),
                manufacturer: "KubeVirt".into(),
                product: "None".into(),
                sku: String::new(),
                version: String::new(),
            },
            mem_balloon_stats_period: 10,
            use_emulation: false,
            launcher_image: "quay.io/kubevirt/virt-launcher:v1.9.0".into(),
            admit_created_vmis: false,
            vm_state_storage_class: String::new(),
        }
    }
}

impl ClusterConfig {
    /// The default configuration with these feature gates enabled (names as in
    /// `NAME.featuregates.txt`, comma separated, blanks ignored).
    pub fn with_feature_gates(gates: &str) -> Self {
        Self {
            feature_gates: gates
                .split(',')
                .map(str::trim)
                .filter(|g| !g.is_empty())
                .map(str::to_string)
                .collect(),
            ..Self::default()
        }
    }

    /// As [`with_feature_gates`](Self::with_feature_gates), refusing a gate KubeVirt v1.9.0
    /// does not know (what a command line wants: a typo is an error, not a silent no-op).
    pub fn try_with_feature_gates(
        gates: &str,
    ) -> Result<Self, crate::feature_gates::UnknownFeatureGate> {
        Ok(Self {
            feature_gates: crate::feature_gates::parse_feature_gates(gates)?,
            ..Self::default()
        })
    }

    /// The machine-type patterns a VMI of `arch` may use (KubeVirt's `GetEmulatedMachines`:
    /// the legacy cluster-wide list, else the architecture's, amd64's for anything else).
    pub fn emulated_machines(&self, arch: &str) -> &[String] {
        if let Some(all) = &self.legacy_emulated_machines {
            return all;
        }
        let arch = if matches!(arch, "arm64" | "s390x") {
            arch
        } else {
            "amd64"
        };
        self.emulated_machines
            .get(arch)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// Whether a feature gate is on.
    pub fn gate(&self, name: &str) -> bool {
        self.feature_gates.contains(name)
    }
}
