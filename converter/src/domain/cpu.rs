//! CPU model, topology, NUMA cells, vCPU hotplug and pinning.

use super::Str;
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<cpu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Cpu {
    /// `host-model`, `host-passthrough` or `custom`.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
    /// Named model (`<model>Skylake</model>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
    /// Required / forbidden CPU flags.
    #[serde(rename = "feature")]
    pub features: Vec<CpuFeature>,
    /// Sockets x cores x threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topology: Option<CpuTopology>,
    /// Guest NUMA cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa: Option<Numa>,
}

/// `<feature name policy>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuFeature {
    /// Flag name.
    #[serde(rename = "@name")]
    pub name: Str,
    /// `require`, `disable`, ...
    #[serde(rename = "@policy", skip_serializing_if = "Option::is_none")]
    pub policy: Option<Str>,
}

/// `<topology>`; zero counts are not written (Go `omitempty`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuTopology {
    /// Sockets.
    #[serde(rename = "@sockets", skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    /// Cores per socket.
    #[serde(rename = "@cores", skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    /// Threads per core.
    #[serde(rename = "@threads", skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

/// `<numa>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Numa {
    /// Cells.
    #[serde(rename = "cell")]
    pub cells: Vec<NumaCell>,
}

/// `<cell id cpus memory unit memAccess>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NumaCell {
    /// Cell id.
    #[serde(rename = "@id")]
    pub id: Str,
    /// vCPUs of the cell (`0-3`).
    #[serde(rename = "@cpus", skip_serializing_if = "Option::is_none")]
    pub cpus: Option<Str>,
    /// Memory of the cell.
    #[serde(rename = "@memory", skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Unit of `memory`.
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<Str>,
    /// `shared` for vhost-user / virtiofs.
    #[serde(rename = "@memAccess", skip_serializing_if = "Option::is_none")]
    pub mem_access: Option<Str>,
    /// Distances to other cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distances: Option<NumaCellDistances>,
}

/// `<distances>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NumaCellDistances {
    /// One entry per other cell.
    #[serde(rename = "sibling")]
    pub siblings: Vec<NumaCellSibling>,
}

/// `<sibling id value>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NumaCellSibling {
    /// Other cell.
    #[serde(rename = "@id")]
    pub id: Str,
    /// Distance.
    #[serde(rename = "@value")]
    pub value: u64,
}

/// `<vcpu placement>N</vcpu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Vcpu {
    /// `static`.
    #[serde(rename = "@placement")]
    pub placement: Str,
    /// Number of vCPUs (the maximum, with hotplug).
    #[serde(rename = "$text")]
    pub cpus: u32,
}

/// `<vcpus>`: per-vCPU enabled / hotpluggable state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Vcpus {
    /// One entry per vCPU.
    #[serde(rename = "vcpu")]
    pub vcpu: Vec<VcpusVcpu>,
}

/// `<vcpu id enabled hotpluggable order>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct VcpusVcpu {
    /// vCPU index.
    #[serde(rename = "@id")]
    pub id: u32,
    /// `yes` / `no`.
    #[serde(rename = "@enabled", skip_serializing_if = "Option::is_none")]
    pub enabled: Option<Str>,
    /// `yes` / `no`.
    #[serde(rename = "@hotpluggable", skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<Str>,
    /// Hotplug order.
    #[serde(rename = "@order", skip_serializing_if = "Option::is_none")]
    pub order: Option<u32>,
}

/// `<cputune>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuTune {
    /// vCPU pins.
    #[serde(rename = "vcpupin")]
    pub vcpupin: Vec<CpuTuneVcpuPin>,
    /// IO thread pins.
    #[serde(rename = "iothreadpin")]
    pub iothreadpin: Vec<CpuTuneIoThreadPin>,
    /// Emulator thread pin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulatorpin: Option<CpuEmulatorPin>,
}

/// `<vcpupin vcpu cpuset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuTuneVcpuPin {
    /// vCPU.
    #[serde(rename = "@vcpu")]
    pub vcpu: u32,
    /// Host CPUs.
    #[serde(rename = "@cpuset")]
    pub cpuset: Str,
}

/// `<iothreadpin iothread cpuset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuTuneIoThreadPin {
    /// IO thread.
    #[serde(rename = "@iothread")]
    pub iothread: u32,
    /// Host CPUs.
    #[serde(rename = "@cpuset")]
    pub cpuset: Str,
}

/// `<emulatorpin cpuset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CpuEmulatorPin {
    /// Host CPUs.
    #[serde(rename = "@cpuset")]
    pub cpuset: Str,
}

/// `<numatune>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NumaTune {
    /// Default policy (always written).
    pub memory: NumaTuneMemory,
    /// Per guest cell.
    #[serde(rename = "memnode")]
    pub memnodes: Vec<MemNode>,
}

/// `<memory mode nodeset>` inside `<numatune>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NumaTuneMemory {
    /// `strict`, ...
    #[serde(rename = "@mode")]
    pub mode: Str,
    /// Host nodes.
    #[serde(rename = "@nodeset")]
    pub nodeset: Str,
}

/// `<memnode cellid mode nodeset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemNode {
    /// Guest cell.
    #[serde(rename = "@cellid")]
    pub cellid: u32,
    /// Policy.
    #[serde(rename = "@mode")]
    pub mode: Str,
    /// Host nodes.
    #[serde(rename = "@nodeset")]
    pub nodeset: Str,
}
