//! `<os>` (boot), `<sysinfo>` (SMBIOS) and `<clock>`.

use super::{Few, Str};
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// `<os>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Os {
    /// Firmware auto-selection (`efi`), unused by KubeVirt's default context.
    #[serde(rename = "@firmware", skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Str>,
    /// Firmware feature requests for auto-selection.
    #[serde(rename = "firmware", skip_serializing_if = "Option::is_none")]
    pub firmware_info: Option<FirmwareInfo>,
    /// `<type arch machine>hvm</type>` (always written).
    #[serde(rename = "type")]
    pub kind: OsType,
    /// ACPI tables (e.g. SLIC/MSDM).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub acpi: Option<OsAcpi>,
    /// `<smbios mode="sysinfo">`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub smbios: Option<SmBios>,
    /// Legacy boot device order.
    #[serde(rename = "boot")]
    pub boot: Vec<Boot>,
    /// Boot menu.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootmenu: Option<BootMenu>,
    /// BIOS options.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    /// Firmware loader (EFI code).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loader: Option<Loader>,
    /// EFI variable store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvram: Option<NvRam>,
    /// Direct kernel boot: kernel path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Str>,
    /// Direct kernel boot: initrd path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initrd: Option<Str>,
    /// Direct kernel boot: command line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<Str>,
}

/// `<firmware>` feature list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FirmwareInfo {
    /// Features.
    #[serde(rename = "feature")]
    pub features: Vec<FirmwareFeature>,
}

/// `<feature enabled name>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct FirmwareFeature {
    /// yes/no.
    #[serde(rename = "@enabled")]
    pub enabled: Str,
    /// Feature name.
    #[serde(rename = "@name")]
    pub name: Str,
}

/// `<type arch machine>hvm</type>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct OsType {
    /// `hvm`.
    #[serde(rename = "$text")]
    pub os: Str,
    /// `x86_64`, `aarch64`, `s390x`.
    #[serde(rename = "@arch", skip_serializing_if = "Option::is_none")]
    pub arch: Option<Str>,
    /// Machine type (`q35`).
    #[serde(rename = "@machine", skip_serializing_if = "Option::is_none")]
    pub machine: Option<Str>,
}

/// `<acpi>` tables.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct OsAcpi {
    /// Tables.
    #[serde(rename = "table")]
    pub tables: Vec<AcpiTable>,
}

/// `<table type>path</table>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct AcpiTable {
    /// File.
    #[serde(rename = "$text")]
    pub path: Str,
    /// Table type.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Str>,
}

/// `<smbios mode>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SmBios {
    /// `sysinfo`.
    #[serde(rename = "@mode")]
    pub mode: Str,
}

/// `<boot dev>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Boot {
    /// `hd`, `cdrom`, `network`.
    #[serde(rename = "@dev")]
    pub dev: Str,
}

/// `<bootmenu enable timeout>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct BootMenu {
    /// yes/no.
    #[serde(rename = "@enable")]
    pub enable: Str,
    /// Milliseconds.
    #[serde(rename = "@timeout", skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u32>,
}

/// `<bios useserial>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Bios {
    /// yes/no.
    #[serde(rename = "@useserial", skip_serializing_if = "Option::is_none")]
    pub useserial: Option<Str>,
}

/// `<loader readonly secure type>path</loader>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Loader {
    /// yes/no.
    #[serde(rename = "@readonly", skip_serializing_if = "Option::is_none")]
    pub readonly: Option<Str>,
    /// yes/no.
    #[serde(rename = "@secure", skip_serializing_if = "Option::is_none")]
    pub secure: Option<Str>,
    /// `pflash`, `rom`.
    #[serde(rename = "@type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<Str>,
    /// Firmware code file.
    #[serde(rename = "$text")]
    pub path: Str,
}

/// `<nvram template format>path</nvram>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct NvRam {
    /// Template of the variable store.
    #[serde(rename = "@template", skip_serializing_if = "Option::is_none")]
    pub template: Option<Str>,
    /// Store format.
    #[serde(rename = "@format", skip_serializing_if = "Option::is_none")]
    pub format: Option<Str>,
    /// The VMI's own variable store.
    #[serde(rename = "$text")]
    pub path: Str,
}

/// `<sysinfo type="smbios">`: Go writes all four sections even when empty.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SysInfo {
    /// `smbios`.
    #[serde(rename = "@type")]
    pub kind: Str,
    /// SMBIOS type 1.
    pub system: SysInfoSection,
    /// SMBIOS type 0.
    pub bios: SysInfoSection,
    /// SMBIOS type 2.
    #[serde(rename = "baseBoard")]
    pub base_board: SysInfoSection,
    /// SMBIOS type 3.
    pub chassis: SysInfoSection,
}

/// A list of `<entry>`s.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct SysInfoSection {
    /// Entries.
    #[serde(rename = "entry")]
    pub entries: Vec<Entry>,
}

/// `<entry name>value</entry>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Entry {
    /// Field name.
    #[serde(rename = "@name")]
    pub name: Str,
    /// Value (may be empty).
    #[serde(rename = "$text")]
    pub value: Str,
}

impl Entry {
    /// An entry.
    pub fn new(name: &'static str, value: impl Into<Str>) -> Entry {
        Entry {
            name: Str::Borrowed(name),
            value: value.into(),
        }
    }
}

/// `<clock offset timezone adjustment>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Clock {
    /// `utc`, `timezone`.
    #[serde(rename = "@offset", skip_serializing_if = "Option::is_none")]
    pub offset: Option<Str>,
    /// Timezone name.
    #[serde(rename = "@timezone", skip_serializing_if = "Option::is_none")]
    pub timezone: Option<Str>,
    /// Seconds.
    #[serde(rename = "@adjustment", skip_serializing_if = "Option::is_none")]
    pub adjustment: Option<Str>,
    /// Timers.
    #[serde(rename = "timer")]
    pub timers: Few<Timer>,
}

/// `<timer name tickpolicy present track frequency>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Timer {
    /// `rtc`, `pit`, `hpet`, `kvmclock`, `hypervclock`.
    #[serde(rename = "@name")]
    pub name: Str,
    /// Tick policy.
    #[serde(rename = "@tickpolicy", skip_serializing_if = "Option::is_none")]
    pub tickpolicy: Option<Str>,
    /// yes/no.
    #[serde(rename = "@present", skip_serializing_if = "Option::is_none")]
    pub present: Option<Str>,
    /// `guest`, `wall`.
    #[serde(rename = "@track", skip_serializing_if = "Option::is_none")]
    pub track: Option<Str>,
    /// Frequency.
    #[serde(rename = "@frequency", skip_serializing_if = "Option::is_none")]
    pub frequency: Option<Str>,
}
