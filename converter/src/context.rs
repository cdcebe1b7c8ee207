//! [`ConverterContext`]: every fact the conversion needs from outside the VMI.
//!
//! KubeVirt's launcher gathers these from its node (KVM device, block or file volumes, firmware
//! files, cluster settings) before it converts; the converter itself never looks at the host. The
//! [`Default`] is the context KubeVirt's oracle corpus was produced with (see
//! `../shared/oracle/README.txt`), so `convert(&vmi, &ConverterContext::default())` reproduces it.

use crate::domain::HostDevice;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Guest architecture, as the converter distinguishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// x86_64, machine q35.
    #[default]
    Amd64,
    /// aarch64, machine virt.
    Arm64,
    /// s390x, machine s390-ccw-virtio.
    S390x,
}

impl Arch {
    /// Parses `spec.architecture` (`amd64`, `arm64`, `s390x`).
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "amd64" => Some(Arch::Amd64),
            "arm64" => Some(Arch::Arm64),
            "s390x" => Some(Arch::S390x),
            _ => None,
        }
    }
    /// Kubernetes-style name.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
            Arch::S390x => "s390x",
        }
    }
    /// libvirt's `<type arch>`.
    pub fn libvirt_arch(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64",
            Arch::Arm64 => "aarch64",
            Arch::S390x => "s390x",
        }
    }
}

/// Firmware files for an EFI guest (KubeVirt's `EFIConfiguration`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EfiConfiguration {
    /// OVMF code file.
    pub code: String,
    /// OVMF variables template.
    pub vars: String,
    /// `secure="yes"` on the loader.
    pub secure_loader: bool,
    /// Let libvirt pick the firmware (`<os firmware="efi">`).
    pub uses_firmware_auto_selection: bool,
}

/// SMBIOS values from the cluster configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SmBios {
    /// Manufacturer.
    pub manufacturer: String,
    /// Product.
    pub product: String,
    /// Version.
    pub version: String,
    /// SKU.
    pub sku: String,
    /// Family.
    pub family: String,
}

impl Default for SmBios {
    fn default() -> Self {
        SmBios {
            manufacturer: "KubeVirt".into(),
            product: "None".into(),
            version: String::new(),
            sku: String::new(),
            family: "KubeVirt".into(),
        }
    }
}

/// Host NUMA facts used for dedicated CPUs (KubeVirt's `cmdv1.Topology`, reduced to what the
/// converter reads).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostTopology {
    /// NUMA cells.
    pub cells: Vec<HostNumaCell>,
}

/// One host NUMA cell.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HostNumaCell {
    /// Cell id.
    pub id: u32,
    /// Memory in KiB.
    pub memory_kib: u64,
    /// Hugepages: (size in KiB, count).
    pub pages: Vec<(u64, u64)>,
    /// CPUs: (id, SMT siblings).
    pub cpus: Vec<(u32, Vec<u32>)>,
}

impl HostTopology {
    /// The oracle's node: 16 CPUs, one cell, SMT siblings (2k, 2k+1), 64 GiB.
    pub fn oracle_node() -> HostTopology {
        HostTopology {
            cells: vec![HostNumaCell {
                id: 0,
                memory_kib: 64 * 1024 * 1024,
                pages: vec![(4, 16_777_216), (2048, 1024), (1_048_576, 4)],
                cpus: (0..16u32).map(|c| (c, vec![c & !1, c | 1])).collect(),
            }],
        }
    }
}

/// Everything the converter needs from the node and the cluster.
///
/// It reads from JSON / YAML (`kvrs convert --context FILE`) in camelCase; missing fields keep
/// their default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConverterContext {
    /// Guest architecture (`spec.architecture` overrides it when set).
    pub architecture: Arch,
    /// Software emulation allowed when no hypervisor device exists.
    pub allow_emulation: bool,
    /// `/dev/kvm` (or `/dev/mshv`) is present.
    pub hypervisor_device_available: bool,
    /// `kvm` or `hyperv-direct`.
    pub hypervisor_name: String,
    /// PVC volumes that are block devices (by volume name).
    pub block_pvcs: BTreeSet<String>,
    /// DataVolume volumes that are block devices (by volume name).
    pub block_dvs: BTreeSet<String>,
    /// Image format of container disks, by volume name (default `qcow2`).
    pub disk_formats: BTreeMap<String, String>,
    /// Format assumed for container disks not in `disk_formats`.
    pub default_container_disk_format: String,
    /// SMBIOS from the cluster config.
    pub smbios: Option<SmBios>,
    /// SR-IOV host devices prepared by the launcher.
    pub sriov_devices: Vec<HostDevice>,
    /// Generic host devices.
    pub generic_host_devices: Vec<HostDevice>,
    /// GPU host devices.
    pub gpu_host_devices: Vec<HostDevice>,
    /// Firmware for EFI guests; `None` derives it from `ovmf_dir` by the launcher's rule.
    pub efi: Option<EfiConfiguration>,
    /// Where the OVMF files live.
    pub ovmf_dir: String,
    /// Balloon statistics period (0 = none).
    pub mem_balloon_stats_period: u32,
    /// Volumes that must not get `discard="unmap"` (preallocated).
    pub volumes_discard_ignore: Vec<String>,
    /// Host NUMA topology, for dedicated CPUs.
    pub topology: Option<HostTopology>,
    /// Pod CPU set; empty means `0..vCPUs-1` (the oracle's rule).
    pub cpu_set: Vec<u32>,
    /// Free page reporting; `None` applies the launcher's rule with cluster defaults.
    pub free_page_reporting: Option<bool>,
    /// Serial console log; `None` applies the launcher's rule with cluster defaults.
    pub serial_console_log: Option<bool>,
    /// Bochs display for EFI guests (cluster default true).
    pub bochs_for_efi_guests: bool,
    /// VSOCK CID used when the VMI asks for VSOCK but `status.VSOCKCID` is unset.
    pub default_vsock_cid: Option<u32>,
    /// Directory of ephemeral overlays.
    pub ephemeral_disk_dir: String,
    /// Interface name -> domain attachment type (`tap`, `managedTap`), from the handler.
    pub domain_attachment_by_interface_name: BTreeMap<String, String>,
    /// IOMMUFD file descriptor received.
    pub iommufd_enabled: bool,
    /// Cross-architecture emulation.
    pub allow_cross_arch_emulation: bool,
    /// Hotplugged volumes (excluded from the initial domain unless mounted).
    pub hotplug_volumes: BTreeSet<String>,
}

/// The OVMF directory of KubeVirt's launcher image (the context's default `ovmf_dir`), as a
/// literal so the firmware paths under it can be spelled out as constants.
macro_rules! launcher_ovmf_dir {
    () => {
        "/usr/share/edk2/ovmf"
    };
}
pub(crate) use launcher_ovmf_dir;

impl Default for ConverterContext {
    fn default() -> Self {
        ConverterContext {
            architecture: Arch::Amd64,
            allow_emulation: true,
            hypervisor_device_available: true,
            hypervisor_name: "kvm".into(),
            block_pvcs: BTreeSet::new(),
            block_dvs: BTreeSet::new(),
            disk_formats: BTreeMap::new(),
            default_container_disk_format: "qcow2".into(),
            smbios: Some(SmBios::default()),
            sriov_devices: Vec::new(),
            generic_host_devices: Vec::new(),
            gpu_host_devices: Vec::new(),
            efi: None,
            ovmf_dir: launcher_ovmf_dir!().into(),
            mem_balloon_stats_period: 10,
            volumes_discard_ignore: Vec::new(),
            topology: Some(HostTopology::oracle_node()),
            cpu_set: Vec::new(),
            free_page_reporting: None,
            serial_console_log: None,
            bochs_for_efi_guests: true,
            default_vsock_cid: Some(3),
            ephemeral_disk_dir: "/var/run/kubevirt-ephemeral-disks/disk-data".into(),
            domain_attachment_by_interface_name: BTreeMap::new(),
            iommufd_enabled: false,
            allow_cross_arch_emulation: false,
            hotplug_volumes: BTreeSet::new(),
        }
    }
}
