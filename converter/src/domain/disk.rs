//! `<disk>` and its parts.

use super::{Address, Alias, BootOrder, Empty, Str};
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<disk device type model>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Disk {
    /// `disk`, `cdrom`, `lun`.
    #[serde(rename = "@device")]
    pub device: Str,
    /// Snapshot mode.
    #[serde(rename = "@snapshot", skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Str>,
    /// `file`, `block`, `network`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Backing file or device (always written).
    pub source: DiskSource,
    /// Guest bus and device name (always written).
    pub target: DiskTarget,
    /// Serial number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<Str>,
    /// QEMU driver options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<DiskDriver>,
    /// `<readonly/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readonly: Option<Empty>,
    /// Network disk authentication (boxed, like the other rare parts: a disk is built, moved and
    /// dropped per conversion, and every byte of it inline costs there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auth: Option<Box<DiskAuth>>,
    /// Alias (`ua-<disk name>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Backing image (container disks).
    #[serde(rename = "backingStore", skip_serializing_if = "Option::is_none")]
    pub backing_store: Option<BackingStore>,
    /// Boot order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    /// Guest address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// `virtio`, `virtio-transitional`, `virtio-non-transitional`.
    #[serde(rename = "@model", skip_serializing_if = "Option::is_none")]
    pub model: Option<Str>,
    /// Block sizes (boxed: set for custom block sizes only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blockio: Option<Box<BlockIo>>,
    /// KubeVirt-only: filesystem overhead of the PVC (never sent to libvirt).
    #[serde(rename = "filesystemOverhead", skip_serializing_if = "Option::is_none")]
    pub filesystem_overhead: Option<Str>,
    /// KubeVirt-only: PVC capacity.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capacity: Option<i64>,
    /// `<shareable/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shareable: Option<Empty>,
}

/// `<source dev file ...>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskSource {
    /// Block device.
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<Str>,
    /// File.
    #[serde(rename = "@file", skip_serializing_if = "Option::is_none")]
    pub file: Option<Str>,
    /// `optional` etc.
    #[serde(rename = "@startupPolicy", skip_serializing_if = "Option::is_none")]
    pub startup_policy: Option<Str>,
    /// Network protocol.
    #[serde(rename = "@protocol", skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Str>,
    /// Network export name.
    #[serde(rename = "@name", skip_serializing_if = "Option::is_none")]
    pub name: Option<Str>,
    /// Network host (boxed: network disks only; a source is inline in every disk and backing
    /// store).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<Box<DiskSourceHost>>,
    /// Persistent reservations (boxed: LUNs with reservation only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservations: Option<Box<Reservations>>,
    /// Slices.
    #[serde(rename = "slices")]
    pub slices: Vec<Slices>,
    /// External data file.
    #[serde(rename = "dataStore", skip_serializing_if = "Option::is_none")]
    pub data_store: Option<Box<DataStore>>,
}

/// `<host name port>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskSourceHost {
    /// Host.
    #[serde(rename = "@name")]
    pub name: Str,
    /// Port.
    #[serde(rename = "@port", skip_serializing_if = "Option::is_none")]
    pub port: Option<Str>,
}

/// `<reservations managed migration>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Reservations {
    /// yes/no.
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<Str>,
    /// yes/no.
    #[serde(rename = "@migration", skip_serializing_if = "Option::is_none")]
    pub migration: Option<Str>,
    /// pr-helper socket.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceReservations>,
}

/// `<source type path mode>` of reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SourceReservations {
    /// `unix`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Socket.
    #[serde(rename = "@path", skip_serializing_if = "Option::is_none")]
    pub path: Option<Str>,
    /// `client`.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
}

/// `<slices><slice/></slices>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Slices {
    /// The slice.
    pub slice: SliceType,
}

/// `<slice type offset size>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SliceType {
    /// `storage`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Offset.
    #[serde(rename = "@offset")]
    pub offset: i64,
    /// Size.
    #[serde(rename = "@size")]
    pub size: i64,
}

/// `<dataStore type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DataStore {
    /// `file`, `block`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Str>,
    /// Format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatType>,
    /// Source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DiskSource>,
}

/// `<format type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FormatType {
    /// `raw`, `qcow2`.
    #[serde(rename = "@type")]
    pub kind: Str,
}

/// `<target bus dev tray>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskTarget {
    /// `virtio`, `sata`, `scsi`, `usb`.
    #[serde(rename = "@bus", skip_serializing_if = "Option::is_none")]
    pub bus: Option<Str>,
    /// `vda`, `sda`, ...
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<Str>,
    /// `open` / `closed`.
    #[serde(rename = "@tray", skip_serializing_if = "Option::is_none")]
    pub tray: Option<Str>,
}

/// `<driver cache error_policy io name type iothread queues discard iommu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskDriver {
    /// `none`, `writethrough`, `writeback`.
    #[serde(rename = "@cache", skip_serializing_if = "Option::is_none")]
    pub cache: Option<Str>,
    /// `stop`, `report`, `ignore`, `enospace`.
    #[serde(rename = "@error_policy", skip_serializing_if = "Option::is_none")]
    pub error_policy: Option<Str>,
    /// `native`, `threads`.
    #[serde(rename = "@io", skip_serializing_if = "Option::is_none")]
    pub io: Option<Str>,
    /// `qemu`.
    #[serde(rename = "@name")]
    pub name: Str,
    /// `raw`, `qcow2`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// IO thread.
    #[serde(rename = "@iothread", skip_serializing_if = "Option::is_none")]
    pub iothread: Option<u32>,
    /// IO thread pool (supplemental pool policy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub iothreads: Option<DiskIoThreads>,
    /// Queues.
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// `unmap`.
    #[serde(rename = "@discard", skip_serializing_if = "Option::is_none")]
    pub discard: Option<Str>,
    /// `on` for launch security.
    #[serde(rename = "@iommu", skip_serializing_if = "Option::is_none")]
    pub iommu: Option<Str>,
}

/// `<iothreads>` of a disk driver.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskIoThreads {
    /// Threads.
    #[serde(rename = "iothread")]
    pub iothread: Vec<DiskIoThread>,
}

/// `<iothread id>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskIoThread {
    /// Thread id.
    #[serde(rename = "@id")]
    pub id: u32,
}

/// `<auth username><secret/></auth>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskAuth {
    /// User.
    #[serde(rename = "@username")]
    pub username: Str,
    /// Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<DiskSecret>,
}

/// `<secret type usage uuid>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct DiskSecret {
    /// Type.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// Usage.
    #[serde(rename = "@usage", skip_serializing_if = "Option::is_none")]
    pub usage: Option<Str>,
    /// UUID.
    #[serde(rename = "@uuid", skip_serializing_if = "Option::is_none")]
    pub uuid: Option<Str>,
}

/// `<backingStore type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct BackingStore {
    /// `file`, `block`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Str>,
    /// Format.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<FormatType>,
    /// Source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<DiskSource>,
}

/// `<blockio logical_block_size physical_block_size discard_granularity>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct BlockIo {
    /// Logical.
    #[serde(
        rename = "@logical_block_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub logical_block_size: Option<u64>,
    /// Physical.
    #[serde(
        rename = "@physical_block_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub physical_block_size: Option<u64>,
    /// Discard granularity.
    #[serde(
        rename = "@discard_granularity",
        skip_serializing_if = "Option::is_none"
    )]
    pub discard_granularity: Option<u64>,
}
