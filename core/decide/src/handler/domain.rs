//! The part of a libvirt domain, as virt-launcher reports it to virt-handler, that the handler's
//! sync choice reads.
//!
//! The serde shape is KubeVirt's `api.Domain` JSON (Go field names such as `Spec.Metadata.KubeVirt.UID`),
//! because that is what the oracle scenarios and launcher notifications carry. Everything not read by
//! the handler is ignored on input; every field is optional so a half-filled domain still parses.

use serde::{Deserialize, Serialize};

/// A domain as the launcher reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Domain {
    /// Name, namespace and — for a domain the launcher has removed — `deletionTimestamp`.
    #[serde(rename = "ObjectMeta", default)]
    pub meta: DomainMeta,
    /// What libvirt was told to run.
    #[serde(rename = "Spec", default)]
    pub spec: DomainSpec,
    /// What libvirt says is running.
    #[serde(rename = "Status", default)]
    pub status: DomainStatus,
}

/// Object metadata of the cached domain (Kubernetes JSON names).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainMeta {
    /// VMI name.
    #[serde(default)]
    pub name: String,
    /// VMI namespace.
    #[serde(default)]
    pub namespace: String,
    /// Set when the launcher reported the domain gone; such a domain counts as absent.
    #[serde(
        rename = "deletionTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub deletion_timestamp: Option<String>,
}

/// The domain spec fields the handler reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainSpec {
    /// `kvm` or `qemu` (software emulation).
    #[serde(rename = "Type", default)]
    pub r#type: String,
    /// KubeVirt's own metadata section.
    #[serde(rename = "Metadata", default)]
    pub metadata: Metadata,
    /// Devices (disks, interfaces, channels, host devices).
    #[serde(rename = "Devices", default)]
    pub devices: Devices,
    /// Hypervisor features; only ACPI matters here.
    #[serde(rename = "Features", default)]
    pub features: Option<Features>,
    /// OS section (machine type).
    #[serde(rename = "OS", default)]
    pub os: Os,
    /// Memory currently given to the guest.
    #[serde(rename = "CurrentMemory", default)]
    pub current_memory: Option<Memory>,
}

/// `<metadata><kubevirt>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The `kubevirt` element.
    #[serde(rename = "KubeVirt", default)]
    pub kubevirt: KubeVirtMetadata,
}

/// KubeVirt's bookkeeping inside the domain XML.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KubeVirtMetadata {
    /// UID of the VMI this domain was started for.
    #[serde(rename = "UID", default)]
    pub uid: String,
    /// Graceful-shutdown bookkeeping.
    #[serde(rename = "GracePeriod", default)]
    pub grace_period: Option<GracePeriod>,
    /// Migration bookkeeping.
    #[serde(rename = "Migration", default)]
    pub migration: Option<MigrationMetadata>,
    /// Result of the last access-credential propagation.
    #[serde(rename = "AccessCredential", default)]
    pub access_credential: Option<AccessCredentialMetadata>,
}

/// Grace period of a domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GracePeriod {
    /// Seconds the guest gets between the first ACPI shutdown and a hard kill.
    #[serde(rename = "DeletionGracePeriodSeconds", default)]
    pub deletion_grace_period_seconds: i64,
    /// When the launcher recorded the first shutdown signal (start of the grace period).
    #[serde(
        rename = "DeletionTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub deletion_timestamp: Option<String>,
    /// virt-launcher received SIGTERM and asks the handler to shut the guest down.
    #[serde(
        rename = "MarkedForGracefulShutdown",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub marked_for_graceful_shutdown: Option<bool>,
}

/// Migration bookkeeping of a domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationMetadata {
    /// When the migration started.
    #[serde(
        rename = "StartTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub start_timestamp: Option<String>,
    /// When it ended.
    #[serde(
        rename = "EndTimestamp",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub end_timestamp: Option<String>,
    /// The migration's UID (the VMIM's), so a stale record is not taken for the current one.
    #[serde(rename = "UID", default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The migration failed (libvirt job error or abort).
    #[serde(rename = "Failed", default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Why it failed.
    #[serde(
        rename = "FailureReason",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub failure_reason: String,
    /// Abort bookkeeping: `Aborting`, `Succeeded`, `Failed`.
    #[serde(
        rename = "AbortStatus",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub abort_status: String,
    /// `PreCopy` or `PostCopy`.
    #[serde(rename = "Mode", default, skip_serializing_if = "String::is_empty")]
    pub mode: String,
}

/// Access credential propagation result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AccessCredentialMetadata {
    /// Whether the last propagation worked.
    #[serde(rename = "Succeeded", default)]
    pub succeeded: bool,
    /// Message of the last propagation.
    #[serde(rename = "Message", default)]
    pub message: String,
}

/// Devices of the domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Devices {
    /// Disks.
    #[serde(rename = "Disks", default, deserialize_with = "null_as_empty")]
    pub disks: Vec<Disk>,
    /// NICs.
    #[serde(rename = "Interfaces", default, deserialize_with = "null_as_empty")]
    pub interfaces: Vec<Interface>,
    /// Channels; the guest agent channel carries the agent's connection state.
    #[serde(rename = "Channels", default, deserialize_with = "null_as_empty")]
    pub channels: Vec<Channel>,
    /// Host devices (SR-IOV NICs are host devices with a `sriov-` alias).
    #[serde(rename = "HostDevices", default, deserialize_with = "null_as_empty")]
    pub host_devices: Vec<HostDevice>,
}

/// A device alias; user-defined aliases are stored without their `ua-` prefix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Alias {
    /// The name as the VMI spec knows it.
    #[serde(rename = "Name", default)]
    pub name: String,
}

/// A disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    /// Alias = volume name.
    #[serde(rename = "Alias", default)]
    pub alias: Option<Alias>,
    /// Backing file or device.
    #[serde(rename = "Source", default)]
    pub source: DiskSource,
    /// Guest device name.
    #[serde(rename = "Target", default)]
    pub target: DiskTarget,
}

/// Disk source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskSource {
    /// File path.
    #[serde(rename = "File", default)]
    pub file: String,
    /// Block device path.
    #[serde(rename = "Dev", default)]
    pub dev: String,
}

/// Disk target.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DiskTarget {
    /// e.g. `vda`.
    #[serde(rename = "Device", default)]
    pub device: String,
}

/// A NIC.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    /// Alias = interface name in the VMI spec.
    #[serde(rename = "Alias", default)]
    pub alias: Option<Alias>,
    /// MAC address.
    #[serde(rename = "MAC", default)]
    pub mac: Option<Mac>,
    /// Link state; absent means up.
    #[serde(rename = "LinkState", default)]
    pub link_state: Option<LinkState>,
    /// Driver (queues).
    #[serde(rename = "Driver", default)]
    pub driver: Option<InterfaceDriver>,
}

/// `<mac address=..>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Mac {
    /// The address.
    #[serde(rename = "MAC", default)]
    pub mac: String,
}

/// `<link state=..>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkState {
    /// `up` or `down`.
    #[serde(rename = "State", default)]
    pub state: String,
}

/// `<driver queues=..>`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceDriver {
    /// Number of queues.
    #[serde(rename = "Queues", default)]
    pub queues: Option<u32>,
}

/// A channel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Channel {
    /// The guest side.
    #[serde(rename = "Target", default)]
    pub target: Option<ChannelTarget>,
}

/// The guest side of a channel.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChannelTarget {
    /// e.g. `org.qemu.guest_agent.0`.
    #[serde(rename = "Name", default)]
    pub name: String,
    /// `connected` when the guest opened it.
    #[serde(rename = "State", default)]
    pub state: String,
}

/// A host device.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HostDevice {
    /// Alias (`sriov-<iface>` for SR-IOV NICs).
    #[serde(rename = "Alias", default)]
    pub alias: Option<Alias>,
}

/// Hypervisor features.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Features {
    /// Present when the guest has ACPI (and so can be asked to shut down).
    #[serde(rename = "ACPI", default)]
    pub acpi: Option<serde_json::Value>,
}

/// OS section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Os {
    /// `<type machine=..>`.
    #[serde(rename = "Type", default)]
    pub r#type: OsType,
}

/// OS type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct OsType {
    /// Machine type libvirt resolved, e.g. `pc-q35-rhel9.6.0`.
    #[serde(rename = "Machine", default)]
    pub machine: String,
}

/// A memory amount with a libvirt unit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Amount.
    #[serde(rename = "Value", default)]
    pub value: u64,
    /// Unit (`b`, `KiB`, `MB`, ...).
    #[serde(rename = "Unit", default)]
    pub unit: String,
}

/// What libvirt reports about the running domain.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DomainStatus {
    /// Running | Paused | ShuttingDown | Shutoff | Crashed | Blocked | PMSuspended | NoState | Unknown.
    #[serde(rename = "Status", default)]
    pub status: String,
    /// Why it is in that state (Booted, User, Destroyed, Crashed, Panicked, Migrated, IOError, ...).
    #[serde(rename = "Reason", default)]
    pub reason: String,
    /// Guest OS info from the agent.
    #[serde(rename = "OSInfo", default)]
    pub os_info: GuestOsInfo,
    /// Interfaces reported by the guest agent.
    #[serde(rename = "Interfaces", default, deserialize_with = "null_as_empty")]
    pub interfaces: Vec<GuestInterface>,
    /// File-system freeze state.
    #[serde(rename = "FSFreezeStatus", default)]
    pub fs_freeze_status: FsFreezeStatus,
}

/// Guest OS info from the agent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub struct GuestOsInfo {
    #[serde(rename = "Name", default)]
    pub name: String,
    #[serde(rename = "KernelRelease", default)]
    pub kernel_release: String,
    #[serde(rename = "Version", default)]
    pub version: String,
    #[serde(rename = "PrettyName", default)]
    pub pretty_name: String,
    #[serde(rename = "VersionId", default)]
    pub version_id: String,
    #[serde(rename = "KernelVersion", default)]
    pub kernel_version: String,
    #[serde(rename = "Machine", default)]
    pub machine: String,
    #[serde(rename = "Id", default)]
    pub id: String,
}

/// An interface as the guest agent sees it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GuestInterface {
    /// MAC address (joins with the domain's NIC).
    #[serde(rename = "Mac", default)]
    pub mac: String,
    /// First address.
    #[serde(rename = "Ip", default)]
    pub ip: String,
    /// Addresses (v4 and v6).
    #[serde(rename = "IPs", default, deserialize_with = "null_as_empty")]
    pub ips: Vec<String>,
    /// Name inside the guest; empty from very old launchers.
    #[serde(rename = "InterfaceName", default)]
    pub interface_name: String,
}

/// File-system freeze state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FsFreezeStatus {
    /// `frozen`, `thawed` or empty.
    #[serde(rename = "Status", default)]
    pub status: String,
}

fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

impl Domain {
    /// The VMI UID recorded in the domain metadata.
    pub fn uid(&self) -> &str {
        &self.spec.metadata.kubevirt.uid
    }

    /// Whether the launcher has reported this domain gone (KubeVirt marks it with a deletion timestamp
    /// instead of sending a delete event).
    pub fn is_deleted(&self) -> bool {
        self.meta.deletion_timestamp.is_some()
    }

    /// A domain that libvirt still runs (or is about to): not shut off, not crashed, not empty.
    pub fn is_alive(&self) -> bool {
        !matches!(self.status.status.as_str(), "Shutoff" | "Crashed" | "")
    }

    /// The grace period in seconds the domain carries (0 when none).
    pub fn grace_period_seconds(&self) -> i64 {
        self.spec
            .metadata
            .kubevirt
            .grace_period
            .as_ref()
            .map_or(0, |g| g.deletion_grace_period_seconds)
    }

    /// Whether virt-launcher asked for a graceful shutdown (it got SIGTERM).
    pub fn marked_for_graceful_shutdown(&self) -> bool {
        self.spec
            .metadata
            .kubevirt
            .grace_period
            .as_ref()
            .and_then(|g| g.marked_for_graceful_shutdown)
            .unwrap_or(false)
    }

    /// Shut off because it migrated away.
    pub fn migrated(&self) -> bool {
        self.status.status == "Shutoff" && self.status.reason == "Migrated"
    }

    /// Paused after a failed post-copy migration: cannot recover, must be destroyed.
    pub fn paused_failed_post_copy(&self) -> bool {
        self.status.status == "Paused" && self.status.reason == "PostcopyFailed"
    }

    /// The guest agent's virtio-serial channel is open.
    pub fn guest_agent_connected(&self) -> bool {
        self.spec.devices.channels.iter().any(|c| {
            c.target
                .as_ref()
                .is_some_and(|t| t.name == "org.qemu.guest_agent.0" && t.state == "connected")
        })
    }
}
