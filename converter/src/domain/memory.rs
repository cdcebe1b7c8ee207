//! `<memoryBacking>` and the virtio-mem `<memory>` device.

use super::{Address, Alias, Empty, Memory, Str};
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<memoryBacking>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryBacking {
    /// Hugepages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<HugePages>,
    /// `memfd`, ...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<MemoryBackingSource>,
    /// `shared` access.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<MemoryBackingAccess>,
    /// `immediate` allocation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocation: Option<MemoryAllocation>,
    /// Disable KSM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nosharepages: Option<Empty>,
}

/// `<hugepages>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct HugePages {
    /// Pages.
    #[serde(rename = "page")]
    pub pages: Vec<HugePage>,
}

/// `<page size unit nodeset>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct HugePage {
    /// Page size.
    #[serde(rename = "@size")]
    pub size: Str,
    /// Unit of size.
    #[serde(rename = "@unit")]
    pub unit: Str,
    /// Guest cells.
    #[serde(rename = "@nodeset")]
    pub nodeset: Str,
}

/// `<source type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryBackingSource {
    /// `memfd`, `file`, `anonymous`.
    #[serde(rename = "@type")]
    pub kind: Str,
}

/// `<access mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryBackingAccess {
    /// `shared` / `private`.
    #[serde(rename = "@mode")]
    pub mode: Str,
}

/// `<allocation mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryAllocation {
    /// `immediate` / `ondemand`.
    #[serde(rename = "@mode")]
    pub mode: Str,
}

/// `<memory model="virtio-mem">` device for memory hotplug.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryDevice {
    /// `virtio-mem`.
    #[serde(rename = "@model")]
    pub model: Str,
    /// Sizes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<MemoryTarget>,
    /// Alias.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
}

/// `<target>` of a memory device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryTarget {
    /// Maximum size.
    pub size: Memory,
    /// Requested size.
    pub requested: Memory,
    /// Current size.
    pub current: Memory,
    /// Guest NUMA node.
    pub node: Str,
    /// Block size.
    pub block: Memory,
    /// Base address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<MemoryAddress>,
}

/// `<address base>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryAddress {
    /// Base.
    #[serde(rename = "@base")]
    pub base: Str,
}
