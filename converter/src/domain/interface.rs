//! `<interface>`: network interfaces.

use super::{Address, Alias, BootOrder, Empty, Str};
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<interface type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Interface {
    /// Guest PCI address (Go writes it first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
    /// `ethernet`, `bridge`, `user`, `vhostuser`, `hostdev` (constants the converter writes:
    /// borrowed, like the model, link state, driver and ROM values below — an interface's
    /// allocations were mostly these).
    #[serde(rename = "@type")]
    pub kind: Str,
    /// yes/no.
    #[serde(
        rename = "@trustGuestRxFilters",
        skip_serializing_if = "Option::is_none"
    )]
    pub trust_guest_rx_filters: Option<String>,
    /// Backend source (always written).
    pub source: InterfaceSource,
    /// Host tap device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<InterfaceTarget>,
    /// NIC model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<Model>,
    /// MAC address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mac: Option<Mac>,
    /// MTU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtu: Option<Mtu>,
    /// Bandwidth (empty element).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Empty>,
    /// Boot order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<BootOrder>,
    /// Link state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkState>,
    /// Network filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filterref: Option<FilterRef>,
    /// `ua-<interface name>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<Alias>,
    /// Driver (queues, iommu).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver: Option<InterfaceDriver>,
    /// Option ROM.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rom: Option<Rom>,
    /// ACPI index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<Acpi>,
    /// passt backend.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<InterfaceBackend>,
    /// passt port forwards.
    #[serde(rename = "portForward")]
    pub port_forward: Vec<PortForward>,
}

/// `<source network dev bridge mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct InterfaceSource {
    /// Network.
    #[serde(rename = "@network", skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// Device.
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Bridge.
    #[serde(rename = "@bridge", skip_serializing_if = "Option::is_none")]
    pub bridge: Option<String>,
    /// Mode.
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Host device address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<Box<Address>>,
}

/// `<target dev managed>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct InterfaceTarget {
    /// Tap name.
    #[serde(rename = "@dev")]
    pub dev: String,
    /// yes/no.
    #[serde(rename = "@managed", skip_serializing_if = "Option::is_none")]
    pub managed: Option<String>,
}

/// `<model type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Model {
    /// Model.
    #[serde(rename = "@type")]
    pub kind: Str,
}

/// `<mac address>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Mac {
    /// MAC.
    #[serde(rename = "@address")]
    pub address: String,
}

/// `<mtu size>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Mtu {
    /// Size.
    #[serde(rename = "@size")]
    pub size: String,
}

/// `<link state>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct LinkState {
    /// `up` / `down`.
    #[serde(rename = "@state")]
    pub state: Str,
}

/// `<filterref filter>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FilterRef {
    /// Filter.
    #[serde(rename = "@filter")]
    pub filter: String,
}

/// `<driver name queues iommu>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct InterfaceDriver {
    /// `vhost`.
    #[serde(rename = "@name")]
    pub name: Str,
    /// Queues.
    #[serde(rename = "@queues", skip_serializing_if = "Option::is_none")]
    pub queues: Option<u32>,
    /// on/off.
    #[serde(rename = "@iommu", skip_serializing_if = "Option::is_none")]
    pub iommu: Option<Str>,
}

/// `<rom enabled>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Rom {
    /// yes/no.
    #[serde(rename = "@enabled")]
    pub enabled: Str,
}

/// `<acpi index>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Acpi {
    /// Index.
    #[serde(rename = "@index")]
    pub index: u32,
}

/// `<backend type logFile>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct InterfaceBackend {
    /// `passt`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Log file.
    #[serde(rename = "@logFile", skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
}

/// `<portForward proto address dev>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct PortForward {
    /// tcp/udp.
    #[serde(rename = "@proto")]
    pub proto: String,
    /// Address.
    #[serde(rename = "@address", skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Device.
    #[serde(rename = "@dev", skip_serializing_if = "Option::is_none")]
    pub dev: Option<String>,
    /// Ranges.
    #[serde(rename = "range")]
    pub ranges: Vec<PortForwardRange>,
}

/// `<range start end to exclude>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct PortForwardRange {
    /// Start.
    #[serde(rename = "@start")]
    pub start: u32,
    /// End.
    #[serde(rename = "@end", skip_serializing_if = "Option::is_none")]
    pub end: Option<u32>,
    /// To.
    #[serde(rename = "@to", skip_serializing_if = "Option::is_none")]
    pub to: Option<u32>,
    /// Exclude.
    #[serde(rename = "@exclude", skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
}
