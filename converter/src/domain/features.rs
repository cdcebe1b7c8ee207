//! `<features>`: ACPI, APIC, Hyper-V enlightenments, SMM, KVM hints, PMU, vmport.

use super::Empty;
use super::Str;
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<features>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Features {
    /// `<acpi/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<Empty>,
    /// `<apic/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apic: Option<Empty>,
    /// Hyper-V enlightenments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hyperv: Option<FeatureHyperv>,
    /// `<smm/>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smm: Option<Empty>,
    /// KVM hints.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kvm: Option<FeatureKvm>,
    /// Paravirtual spinlocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pvspinlock: Option<FeatureState>,
    /// Performance monitoring unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmu: Option<FeatureState>,
    /// VMware IO port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vmport: Option<FeatureState>,
}

/// An element with an optional `state="on|off"`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FeatureState {
    /// `on` / `off`.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
}

impl FeatureState {
    /// `state="on"` or `state="off"`.
    pub fn on_off(on: bool) -> FeatureState {
        FeatureState {
            state: Some((if on { "on" } else { "off" }.to_string()).into()),
        }
    }
}

/// `<hyperv mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FeatureHyperv {
    /// `passthrough` or unset (custom).
    #[serde(rename = "@mode", skip_serializing_if = "Option::is_none")]
    pub mode: Option<Str>,
    /// relaxed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relaxed: Option<FeatureState>,
    /// vapic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vapic: Option<FeatureState>,
    /// spinlocks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spinlocks: Option<FeatureSpinlocks>,
    /// vpindex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vpindex: Option<FeatureState>,
    /// runtime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<FeatureState>,
    /// synic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synic: Option<FeatureState>,
    /// stimer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stimer: Option<SynicTimer>,
    /// reset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<FeatureState>,
    /// vendor_id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vendor_id: Option<FeatureVendorId>,
    /// frequencies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequencies: Option<FeatureState>,
    /// reenlightenment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reenlightenment: Option<FeatureState>,
    /// tlbflush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tlbflush: Option<TlbFlush>,
    /// ipi.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipi: Option<FeatureState>,
    /// evmcs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evmcs: Option<FeatureState>,
}

/// `<spinlocks state retries>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FeatureSpinlocks {
    /// on/off.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
    /// Retry count.
    #[serde(rename = "@retries", skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
}

/// `<stimer state><direct/></stimer>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SynicTimer {
    /// Direct mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<FeatureState>,
    /// on/off.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
}

/// `<tlbflush state>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct TlbFlush {
    /// Direct flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direct: Option<FeatureState>,
    /// Extended flush.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extended: Option<FeatureState>,
    /// on/off.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
}

/// `<vendor_id state value>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FeatureVendorId {
    /// on/off.
    #[serde(rename = "@state", skip_serializing_if = "Option::is_none")]
    pub state: Option<Str>,
    /// Vendor string.
    #[serde(rename = "@value", skip_serializing_if = "Option::is_none")]
    pub value: Option<Str>,
}

/// `<kvm>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FeatureKvm {
    /// Hide the KVM signature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hidden: Option<FeatureState>,
    /// Dedicated-CPU hint.
    #[serde(rename = "hint-dedicated", skip_serializing_if = "Option::is_none")]
    pub hint_dedicated: Option<FeatureState>,
}
