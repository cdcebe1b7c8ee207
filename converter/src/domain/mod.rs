//! The libvirt domain model: the part of libvirt's domain XML that KubeVirt v1.9.0 writes.
//!
//! Every type mirrors one element of KubeVirt's `api.DomainSpec`, with the same element and
//! attribute names and — important for byte-for-byte comparable output — the same child order,
//! because Go's `encoding/xml` writes children in struct-field order. Optional parts are
//! `Option`s (skipped when `None`), lists are `Vec`s (nothing written when empty), and attributes
//! that Go writes even when empty are plain `String`s.
//!
//! [`Domain::to_xml`] and [`Domain::from_xml`] convert to and from XML text; parsing accepts the
//! XML libvirt itself returns (unknown elements and attributes are ignored).

mod cpu;
mod devices;
mod disk;
mod features;
mod interface;
mod memory;
mod metadata;
mod os;

pub use writer::{MAX_XML_BYTES, WriteError};

/// The XML writer's runtime half, used by the code `derive(XmlElement)` generates.
pub(crate) mod writer;

pub use cpu::*;
pub use devices::*;
pub use disk::*;
pub use features::*;
pub use interface::*;
pub use memory::*;
pub use metadata::*;
pub use os::*;

use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// The namespace KubeVirt binds to the `qemu:` prefix on the root element.
pub const QEMU_NAMESPACE: &str = "http://libvirt.org/schemas/domain/qemu/1.0";

/// A text field of the model: borrowed when the converter writes a constant (`virtio`, `qemu`,
/// `on`; most values are), owned when it is built or parsed. Most of a conversion's allocations
/// (and the time to free them) were these constants copied into `String`s.
pub type Str = std::borrow::Cow<'static, str>;

/// A device list that nearly always holds one item (one interface, one VNC graphics, one serial
/// console, one tablet, one TPM): the first item is kept inline, so the common domain allocates
/// nothing for it. Each such list was a heap block of its own, allocated and freed per
/// conversion (7 of the 26 allocations of a Windows-like conversion). Derefs to a slice;
/// built with `Few::from([item])`, `push`, or `.into()` from a `Vec`.
pub type Few<T> = smallvec::SmallVec<[T; 1]>;

pub use smallvec;

/// An element without attributes or children whose presence alone means something (`<acpi/>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
pub struct Empty {}

/// Errors turning a [`Domain`] into XML text or back.
#[derive(Debug, thiserror::Error)]
pub enum XmlError {
    /// The domain could not be written as XML.
    #[error("writing domain XML: {0}")]
    Write(#[from] writer::WriteError),
    /// The text is not a domain XML this model understands.
    #[error("reading domain XML: {0}")]
    Read(#[from] quick_xml::DeError),
}

/// The root element.
struct Root;

impl writer::TagName for Root {
    const OPEN: &'static str = "<domain";
    const OPEN_END: &'static str = "<domain>";
    const CLOSE: &'static str = "</domain>";
}

/// A libvirt domain definition (KubeVirt's `api.DomainSpec`), the root `<domain>` element.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, XmlElement)]
#[serde(rename = "domain", default)]
pub struct Domain {
    /// Hypervisor type: `kvm` or `qemu` (emulation).
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Binds the `qemu:` prefix when a `<qemu:commandline>` may follow.
    #[serde(rename = "@xmlns:qemu", skip_serializing_if = "Option::is_none")]
    pub xmlns_qemu: Option<Str>,
    /// `<namespace>_<name>` of the VMI.
    pub name: String,
    /// Domain UUID (libvirt's; KubeVirt puts the firmware UUID into SMBIOS instead).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Guest memory at boot.
    pub memory: Memory,
    /// Current memory (balloon target), when set.
    #[serde(rename = "currentMemory", skip_serializing_if = "Option::is_none")]
    pub current_memory: Option<Memory>,
    /// Upper bound for memory hotplug.
    #[serde(rename = "maxMemory", skip_serializing_if = "Option::is_none")]
    pub max_memory: Option<MaxMemory>,
    /// Hugepages, memfd source, shared access.
    #[serde(rename = "memoryBacking", skip_serializing_if = "Option::is_none")]
    pub memory_backing: Option<MemoryBacking>,
    /// Boot configuration.
    pub os: Os,
    /// SMBIOS tables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sysinfo: Option<SysInfo>,
    /// All devices.
    pub devices: Devices,
    /// Guest clock.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock>,
    /// Resource partition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<Resource>,
    /// Extra QEMU arguments and environment (`qemu:commandline`).
    #[serde(
        rename(serialize = "qemu:commandline", deserialize = "commandline"),
        skip_serializing_if = "Option::is_none"
    )]
    pub qemu_commandline: Option<Commandline>,
    /// KubeVirt's own metadata (always written).
    pub metadata: Metadata,
    /// Hypervisor features.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    /// CPU model, features, topology and NUMA cells (always written).
    pub cpu: Cpu,
    /// Number of vCPUs at boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpu: Option<Vcpu>,
    /// Per-vCPU hotplug state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vcpus: Option<Vcpus>,
    /// vCPU / emulator / IO thread pinning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cputune: Option<CpuTune>,
    /// Host NUMA memory placement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numatune: Option<NumaTune>,
    /// Number of IO threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iothreads: Option<IoThreads>,
    /// SEV / SEV-SNP / TDX.
    #[serde(rename = "launchSecurity", skip_serializing_if = "Option::is_none")]
    pub launch_security: Option<LaunchSecurity>,
    /// `destroy` when the VMI's reboot policy is terminate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_reboot: Option<String>,
    /// IOMMUFD for host devices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iommufd: Option<Iommufd>,
}

impl Domain {
    /// Writes the domain as XML, indented with tabs like virt-launcher's output.
    ///
    /// ```
    /// use kvrs_converter::domain::Domain;
    /// let mut d = Domain::default();
    /// d.kind = "kvm".into();
    /// d.name = "default_vm".into();
    /// let xml = d.to_xml().unwrap();
    /// assert!(xml.starts_with("<domain type=\"kvm\">"));
    /// assert_eq!(Domain::from_xml(&xml).unwrap(), d);
    /// ```
    pub fn to_xml(&self) -> Result<String, XmlError> {
        Ok(writer::to_string::<_, Root>(self, "domain", true, 6144)?)
    }

    /// Writes the domain as XML without any indentation (fastest; same tree).
    pub fn to_xml_compact(&self) -> Result<String, XmlError> {
        Ok(writer::to_string::<_, Root>(self, "domain", false, 4096)?)
    }

    /// Parses a domain XML (KubeVirt's or libvirt's own `dumpxml` output).
    pub fn from_xml(xml: &str) -> Result<Domain, XmlError> {
        Ok(quick_xml::de::from_str(xml)?)
    }
}

/// A memory size with its unit (`<memory unit="b">1024</memory>`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Memory {
    /// The amount.
    #[serde(rename = "$text")]
    pub value: u64,
    /// The unit (`b`, `KiB`, ...).
    #[serde(rename = "@unit")]
    pub unit: Str,
}

/// `<maxMemory slots=".." unit="..">`: the hotplug ceiling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MaxMemory {
    /// The amount.
    #[serde(rename = "$text")]
    pub value: u64,
    /// The unit.
    #[serde(rename = "@unit")]
    pub unit: Str,
    /// DIMM slots (KubeVirt uses virtio-mem, so 0).
    #[serde(rename = "@slots")]
    pub slots: u64,
}

/// `<resource><partition>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Resource {
    /// The cgroup partition.
    pub partition: String,
}

/// `<qemu:commandline>`: environment and arguments handed to QEMU unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Commandline {
    /// `<qemu:env name value>`.
    #[serde(rename(serialize = "qemu:env", deserialize = "env"))]
    pub env: Vec<QemuEnv>,
    /// `<qemu:arg value>`.
    #[serde(rename(serialize = "qemu:arg", deserialize = "arg"))]
    pub arg: Vec<QemuArg>,
}

/// One QEMU environment variable.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct QemuEnv {
    /// Variable name.
    #[serde(rename = "@name")]
    pub name: String,
    /// Value.
    #[serde(rename = "@value")]
    pub value: String,
}

/// One QEMU argument.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct QemuArg {
    /// The argument.
    #[serde(rename = "@value")]
    pub value: String,
}

/// `<iothreads>N</iothreads>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct IoThreads {
    /// Number of IO threads.
    #[serde(rename = "$text")]
    pub count: u32,
}

/// `<launchSecurity>`: confidential computing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct LaunchSecurity {
    /// `sev`, `sev-snp` or `tdx`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// Guest owner's Diffie-Hellman certificate.
    #[serde(rename = "dhCert", skip_serializing_if = "Option::is_none")]
    pub dh_cert: Option<String>,
    /// Session blob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// C-bit position.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cbitpos: Option<String>,
    /// Reduced physical address bits.
    #[serde(rename = "reducedPhysBits", skip_serializing_if = "Option::is_none")]
    pub reduced_phys_bits: Option<String>,
    /// Guest policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// TDX quote generation service.
    #[serde(
        rename = "quoteGenerationService",
        skip_serializing_if = "Option::is_none"
    )]
    pub quote_generation_service: Option<QuoteGenerationService>,
}

/// TDX quote generation service socket.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct QuoteGenerationService {
    /// Socket path.
    #[serde(rename = "@path", skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// `<iommufd enabled="yes">`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Iommufd {
    /// `yes` / `no`.
    #[serde(rename = "@enabled")]
    pub enabled: String,
    /// File-descriptor group passed by the launcher.
    #[serde(rename = "@fdgroup", skip_serializing_if = "Option::is_none")]
    pub fdgroup: Option<String>,
}
