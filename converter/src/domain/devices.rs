//! `<devices>` and every device kind except disks and interfaces.

use super::{Disk, Few, Interface, MemoryDevice, Str};
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// KubeVirt's prefix on aliases of user-named devices.
pub const USER_ALIAS_PREFIX: &str = "ua-";

/// `<devices>`, in the order Go's struct lists the kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Devices {
    /// QEMU binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<String>,
    /// Network interfaces.
    #[serde(rename = "interface")]
    pub interfaces: Few<Interface>,
    /// Channels (guest agent).
    #[serde(rename = "channel")]
    pub channels: Few<Channel>,
    /// Host devices.
    #[serde(rename = "hostdev")]
    pub hostdevs: Vec<HostDevice>,
    /// Panic devices.
    #[serde(rename = "panic")]
    pub panics: Vec<PanicDevice>,
    /// Controllers.
    #[serde(rename = "controller")]
    pub controllers: Vec<Controller>,
    /// Video.
    #[serde(rename = "video")]
    pub video: Few<Video>,
    /// Graphics (VNC).
    #[serde(rename = "graphics")]
    pub graphics: Few<Graphics>,
    /// Memory balloon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memballoon: Option<MemBalloon>,
    /// Disks.
    #[serde(rename = "disk")]
    pub disks: Vec<Disk>,
    /// Input devices.
    #[serde(rename = "input")]
    pub inputs: Few<Input>,
    /// Serial ports.
    #[serde(rename = "serial")]
    pub serials: Few<Serial>,
    /// Consoles.
    #[serde(rename = "console")]
    pub consoles: Few<Console>,
    /// Watchdogs.
    #[serde(rename = "watchdog")]
    pub watchdogs: Vec<Watchdog>,
    /// Entropy source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rng: Option<Rng>,
    /// virtiofs shares.
    #[serde(rename = "filesystem")]
    pub filesystems: Vec<FilesystemDevice>,
    /// USB redirection.
    #[serde(rename = "redirdev")]
    pub redirdevs: Vec<RedirectedDevice>,
    /// Sound cards.
    #[serde(rename = "sound")]
    pub sounds: Vec<SoundCard>,
    /// TPMs.
    #[serde(rename = "tpm")]
    pub tpms: Few<Tpm>,
    /// VSOCK.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vsock: Option<Vsock>,
    /// virtio-mem device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryDevice>,
    /// IOMMUs.
    #[serde(rename = "iommu")]
    pub iommus: Vec<IommuDevice>,
}

/// `<address type domain bus slot function controller target unit ...>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Address {
    /// `pci`, `drive`, `ccw`, `usb`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// PCI domain.
    #[serde(rename = "@domain", skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Bus.
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
    /// Slot.
    #[serde(rename = "@slot", skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// Function.
    #[serde(rename = "@function", skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// Controller.
    #[serde(rename = "@controller", skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
    /// Target.
    #[serde(rename = "@target", skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Unit.
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// mdev UUID.
    #[serde(rename = "@uuid", skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// USB device.
    #[serde(rename = "@device", skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// CCW cssid.
    #[serde(rename = "@cssid", skip_serializing_if = "Option::is_none")]
    pub cssid: Option<String>,
    /// CCW ssid.
    #[serde(rename = "@ssid", skip_serializing_if = "Option::is_none")]
    pub ssid: Option<String>,
    /// CCW devno.
    #[serde(rename = "@devno", skip_serializing_if = "Option::is_none")]
    pub devno: Option<String>,
}

/// `<alias name>`. User-named devices carry [`USER_ALIAS_PREFIX`] in `name`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Alias {
    /// The alias as libvirt sees it.
    #[serde(rename = "@name")]
    pub name: String,
}

impl Alias {
    /// The alias of a device the user named in the VMI (`ua-<name>`).
    pub fn user(name: &str) -> Alias {
        let mut s = String::with_capacity(USER_ALIAS_PREFIX.len() + name.len());
        s.push_str(USER_ALIAS_PREFIX);
        s.push_str(name);
        Alias { name: s }
    }

    /// A libvirt-assigned or KubeVirt-internal alias.
    pub fn plain(name: &str) -> Alias {
        Alias {
            name: name.to_string(),
        }
    }

    /// The user's device name, when this is a user alias.
    pub fn user_name(&self) -> Option<&str> {
        self.name.strip_prefix(USER_ALIAS_PREFIX)
    }
}

/// `<boot order>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct BootOrder {
    /// 1-based order.
    #[serde(rename = "@order")]
    pub order: u32,
}

/// `<panic model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct PanicDevice {
    /// `isa`, `hyperv`, `pvpanic`.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
}

/// `<tpm model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Tpm {
    /// `tpm-tis`, `tpm-crb`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// Backend (always written).
    pub backend: TpmBackend,
}

/// `<backend type version persistent_state>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct TpmBackend {
    /// `emulator`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// `2.0`.
    #[serde(rename = "@version")]
    pub version: Str,
    /// yes when persistent.
    #[serde(rename = "@persistent_state", skip_serializing_if = "Option::is_none")]
    pub persistent_state: Option<Str>,
}

/// `<redirdev type bus>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct RedirectedDevice {
    /// `unix`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// `usb`.
    #[serde(rename = "@bus")]
    pub bus: Str,
    /// Socket.
    pub source: RedirectedDeviceSource,
}

/// `<source mode path>` of a redirdev.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct RedirectedDeviceSource {
    /// `bind`.
    #[serde(rename = "@mode")]
    pub mode: Str,
    /// Socket path.
    #[serde(rename = "@path")]
    pub path: Str,
}

/// `<filesystem type accessMode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemDevice {
    /// `mount`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// `passthrough`.
    #[serde(rename = "@accessMode")]
    pub access_mode: Str,
    /// Source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<FilesystemSource>,
    /// Target tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<FilesystemTarget>,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<FilesystemDriver>,
    /// virtiofsd binary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary: Option<FilesystemBinary>,
}

/// `<target dir>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemTarget {
    /// Mount tag.
    #[serde(rename = "@dir", skip_serializing_if = "Option::is_none")]
    pub dir: Option<Str>,
}

/// `<source dir socket>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemSource {
    /// Directory (Go writes it even when empty).
    #[serde(rename = "@dir")]
    pub dir: Str,
    /// virtiofsd socket.
    #[serde(rename = "@socket", skip_serializing_if = "Option::is_none")]
    pub socket: Option<Str>,
}

/// `<driver type queue>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemDriver {
    /// `virtiofs`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Queue size.
    #[serde(rename = "@queue", skip_serializing_if = "Option::is_none")]
    pub queue: Option<Str>,
}

/// `<binary path xattr>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemBinary {
    /// Path.
    #[serde(rename = "@path", skip_serializing_if = "Option::is_none")]
    pub path: Option<Str>,
    /// on/off.
    #[serde(rename = "@xattr", skip_serializing_if = "Option::is_none")]
    pub xattr: Option<Str>,
    /// Cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<FilesystemBinaryCache>,
    /// Locking.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock: Option<FilesystemBinaryLock>,
}

/// `<cache mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemBinaryCache {
    /// Mode.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
}

/// `<lock posix flock>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilesystemBinaryLock {
    /// on/off.
    #[serde(rename = "@posix", skip_serializing_if = "Option::is_none")]
    pub posix: Option<Str>,
    /// on/off.
    #[serde(rename = "@flock", skip_serializing_if = "Option::is_none")]
    pub flock: Option<Str>,
}

/// `<input type bus model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Input {
    /// `tablet`, `keyboard`, `mouse`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// `usb`, `virtio`, `ps2`.
    #[serde(rename = "@bus")]
    pub bus: Str,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// virtio model.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
}

/// `<hostdev type managed mode model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct HostDevice {
    /// Host address (always written).
    pub source: HostDeviceSource,
    /// `pci`, `mdev`, `usb`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Boot order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    /// yes/no.
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<Str>,
    /// `subsystem`.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
    /// mdev model.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
    /// Guest address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// on/off.
    #[serde(rename = "@display", skip_serializing_if = "Option::is_none")]
    pub display: Option<Str>,
    /// on/off.
    #[serde(rename = "@ramfb", skip_serializing_if = "Option::is_none")]
    pub ramfb: Option<Str>,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<HostDevDriver>,
    /// ACPI nodeset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<AcpiHostDev>,
}

/// `<source><address/></source>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct HostDeviceSource {
    /// Host address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
}

/// `<driver iommufd>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct HostDevDriver {
    /// yes/no.
    #[serde(rename = "@iommufd", skip_serializing_if = "Option::is_none")]
    pub iommufd: Option<Str>,
}

/// `<acpi nodeset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct AcpiHostDev {
    /// Node set.
    #[serde(rename = "@nodeset", skip_serializing_if = "Option::is_none")]
    pub nodeset: Option<Str>,
}

/// `<controller type index model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Controller {
    /// `usb`, `scsi`, `virtio-serial`, `pci`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Index (Go writes it even when empty).
    #[serde(rename = "@index")]
    pub index: Str,
    /// Model.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<ControllerDriver>,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// 64-bit PCI hole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcihole64: Option<PciHole64>,
    /// Target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<ControllerTarget>,
}

/// `<driver iothread queues iommu>` of a controller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct ControllerDriver {
    /// IO thread.
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    pub iothread: Option<u32>,
    /// Queues.
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// on/off.
    #[serde(rename = "@iommu", skip_serializing_if = "Option::is_none")]
    pub iommu: Option<Str>,
}

/// `<pcihole64 unit>N</pcihole64>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct PciHole64 {
    /// Size.
    #[serde(rename = "$text")]
    pub value: u64,
    /// Unit.
    #[serde(rename = "@unit", skip_serializing_if = "Option::is_none")]
    pub unit: Option<Str>,
}

/// `<target busNr><node/></target>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct ControllerTarget {
    /// Bus number.
    #[serde(rename = "@busNr", skip_serializing_if = "Option::is_none")]
    pub bus_nr: Option<u32>,
    /// NUMA node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<u32>,
}

/// `<iommu model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct IommuDevice {
    /// `intel`, `smmuv3`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<IommuDriver>,
}

/// `<driver pciBus accel ats ril ssidSize oas>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct IommuDriver {
    /// PCI bus.
    #[serde(rename = "@pciBus", skip_serializing_if = "Option::is_none")]
    pub pci_bus: Option<Str>,
    /// Accel.
    #[serde(rename = "@accel", skip_serializing_if = "Option::is_none")]
    pub accel: Option<Str>,
    /// ATS.
    #[serde(rename = "@ats", skip_serializing_if = "Option::is_none")]
    pub ats: Option<Str>,
    /// RIL.
    #[serde(rename = "@ril", skip_serializing_if = "Option::is_none")]
    pub ril: Option<Str>,
    /// SSID size.
    #[serde(rename = "@ssidSize", skip_serializing_if = "Option::is_none")]
    pub ssid_size: Option<Str>,
    /// OAS.
    #[serde(rename = "@oas", skip_serializing_if = "Option::is_none")]
    pub oas: Option<Str>,
}

/// `<serial type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Serial {
    /// `unix`, `pty`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<SerialTarget>,
    /// Socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Log file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<SerialLog>,
}

/// `<target port>` of a serial port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SerialTarget {
    /// Port.
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
}

/// `<source mode path>` of a serial port or console.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct CharSource {
    /// `bind`.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
    /// Socket.
    #[serde(rename = "@path", skip_serializing_if = "Option::is_none")]
    pub path: Option<Str>,
}

/// `<log file append>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SerialLog {
    /// File.
    #[serde(rename = "@file", skip_serializing_if = "Option::is_none")]
    pub file: Option<Str>,
    /// on/off.
    #[serde(rename = "@append", skip_serializing_if = "Option::is_none")]
    pub append: Option<Str>,
}

/// `<console type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Console {
    /// `pty`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<ConsoleTarget>,
    /// Source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<CharSource>,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
}

/// `<target type port>` of a console.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct ConsoleTarget {
    /// `serial`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Str>,
    /// Port.
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
}

/// `<channel type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Channel {
    /// `unix`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<ChannelSource>,
    /// Target.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<ChannelTarget>,
}

/// `<target name type address port state>` of a channel.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct ChannelTarget {
    /// `org.qemu.guest_agent.0`.
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    pub name: Option<Str>,
    /// `virtio`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Address.
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<Str>,
    /// Port.
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<u32>,
    /// `connected` (libvirt).
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
}

/// `<source mode path>` of a channel (both always written).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct ChannelSource {
    /// `bind`.
    #[serde(rename = "@mode")]
    pub mode: Str,
    /// Socket.
    #[serde(rename = "@path")]
    pub path: Str,
}

/// `<sound model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SoundCard {
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// `ich9`, `ac97`.
    #[serde(rename = "@model")]
    pub model: Str,
}

/// `<video><model/></video>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Video {
    /// Model.
    pub model: VideoModel,
}

/// `<model type heads ram vram vgamem>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct VideoModel {
    /// `vga`, `bochs`, `virtio`, `ramfb`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Heads.
    #[serde(rename = "@heads", skip_serializing_if = "Option::is_none")]
    pub heads: Option<u32>,
    /// RAM.
    #[serde(rename = "@ram", skip_serializing_if = "Option::is_none")]
    pub ram: Option<u32>,
    /// VRAM KiB.
    #[serde(rename = "@vram", skip_serializing_if = "Option::is_none")]
    pub vram: Option<u32>,
    /// VGA memory.
    #[serde(rename = "@vgamem", skip_serializing_if = "Option::is_none")]
    pub vgamem: Option<u32>,
}

/// `<graphics type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Graphics {
    /// yes/no.
    #[serde(rename = "@autoport", skip_serializing_if = "Option::is_none")]
    pub autoport: Option<Str>,
    /// Default mode.
    #[serde(rename = "@defaultMode", skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<Str>,
    /// Listen socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<GraphicsListen>,
    /// Password expiry.
    #[serde(rename = "@passwdValidTo", skip_serializing_if = "Option::is_none")]
    pub passwd_valid_to: Option<Str>,
    /// Port.
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<i32>,
    /// TLS port.
    #[serde(rename = "@tlsPort", skip_serializing_if = "Option::is_none")]
    pub tls_port: Option<i32>,
    /// `vnc`.
    #[serde(rename = "@type")]
    pub kind: Str,
}

/// `<listen type address socket>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct GraphicsListen {
    /// `socket`, `address`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Address.
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<Str>,
    /// Network (KubeVirt's schema spells the attribute `newtork`).
    #[serde(rename = "@newtork", skip_serializing_if = "Option::is_none")]
    pub network: Option<Str>,
    /// Socket.
    #[serde(rename = "@socket", skip_serializing_if = "Option::is_none")]
    pub socket: Option<Str>,
}

/// `<vsock model><cid/></vsock>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Vsock {
    /// `virtio`, `virtio-non-transitional`.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
    /// Context id.
    pub cid: Cid,
}

/// `<cid auto address>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Cid {
    /// yes/no.
    #[serde(rename = "@auto")]
    pub auto: Str,
    /// CID.
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<u32>,
}

/// `<memballoon model freePageReporting>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemBalloon {
    /// `virtio`, `none`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// Stats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<IommuOnly>,
    /// on/off.
    #[serde(rename = "@freePageReporting", skip_serializing_if = "Option::is_none")]
    pub free_page_reporting: Option<Str>,
}

/// `<stats period>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Stats {
    /// Seconds.
    #[serde(rename = "@period")]
    pub period: u32,
}

/// `<driver iommu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct IommuOnly {
    /// on/off.
    #[serde(rename = "@iommu", skip_serializing_if = "Option::is_none")]
    pub iommu: Option<Str>,
}

/// `<watchdog model action>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Watchdog {
    /// `i6300esb`, `diag288`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// `poweroff`, `reset`, `shutdown`.
    #[serde(rename = "@action")]
    pub action: Str,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
}

/// `<rng model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Rng {
    /// `virtio`, ...
    #[serde(rename = "@model")]
    pub model: Str,
    /// Entropy source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<RngBackend>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// Driver.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<IommuOnly>,
}

/// `<backend model>/dev/urandom</backend>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct RngBackend {
    /// `random`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// Source device.
    #[serde(rename = "$text")]
    pub source: Str,
}
