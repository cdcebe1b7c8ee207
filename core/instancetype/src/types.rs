//! The instancetype.kubevirt.io/v1beta1 objects as plain data: the facts of KubeVirt v1.9.0's API
//! (`kubevirt.io/api/instancetype/v1beta1`), written by hand because the OpenAPI document kvrs
//! generates its kubevirt.io/v1 types from does not carry this group.
//!
//! Like the generated types, every struct keeps fields it does not know in `extra`, so an object
//! read and written again loses nothing. Go's value fields (`guest: uint32`, `overcommitPercent:
//! int`, `preferSpreadSocketToCoreRatio: uint32`) are plain numbers here, defaulting to 0 as Go's
//! zero value; Go's pointers and strings are `Option`s.

// The fields are the API's own, named as KubeVirt's API reference documents them (serde renames).
#![allow(missing_docs)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kvrs_api::Quantity;
use kvrs_api::api::{
    BlockSize, CPUFeature, ClockOffsetUTC, DiskIOThreads, EFI, FeatureAPIC, FeatureHyperv,
    FeatureKVM, FeatureState, GPU, HostDevice, Hugepages, InterfaceMasquerade, LaunchSecurity,
    NUMA, Realtime, Rng, TPMDevice, Timer, VGPUOptions,
};
use serde::{Deserialize, Serialize};

/// Unknown fields, kept as they came.
pub type Extra = BTreeMap<String, serde_json::Value>;

fn is_zero_u32(v: &u32) -> bool {
    *v == 0
}

fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// An instancetype or preference object, either scope: the two families (and their namespaced
/// and cluster-wide kinds) differ only in their spec.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "S: Serialize",
    deserialize = "S: Deserialize<'de> + Default"
))]
pub struct Object<S> {
    /// `instancetype.kubevirt.io/v1beta1` (or an older version of the group).
    #[serde(rename = "apiVersion", skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// The kind, e.g. `VirtualMachineInstancetype` or `VirtualMachineClusterPreference`.
    #[serde(rename = "kind", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The object's name (what a VM's matcher `name` matches) and namespace.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// What the object gives the VMI (instancetype) or fills in where the VM leaves a field
    /// unset (preference).
    #[serde(default)]
    pub spec: S,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A `VirtualMachineInstancetype` or `VirtualMachineClusterInstancetype`.
pub type Instancetype = Object<InstancetypeSpec>;

/// A `VirtualMachinePreference` or `VirtualMachineClusterPreference`.
pub type Preference = Object<PreferenceSpec>;

/// `v1beta1.VirtualMachineInstancetypeSpec`: the fields an instancetype owns. A VM that sets
/// one of them itself conflicts with the instancetype.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InstancetypeSpec {
    #[serde(rename = "nodeSelector", skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(rename = "schedulerName", skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub cpu: CpuInstancetype,
    #[serde(default)]
    pub memory: MemoryInstancetype,
    #[serde(rename = "gpus", skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GPU>>,
    #[serde(rename = "hostDevices", skip_serializing_if = "Option::is_none")]
    pub host_devices: Option<Vec<HostDevice>>,
    #[serde(rename = "ioThreadsPolicy", skip_serializing_if = "Option::is_none")]
    pub io_threads_policy: Option<String>,
    #[serde(rename = "ioThreads", skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<DiskIOThreads>,
    /// Deprecated in v1.9.0 (KubeVirt warns: use the preference's `preferredLaunchSecurity`).
    #[serde(rename = "launchSecurity", skip_serializing_if = "Option::is_none")]
    pub launch_security: Option<LaunchSecurity>,
    #[serde(rename = "annotations", skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.CPUInstancetype`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuInstancetype {
    /// The number of vCPUs, spread over sockets, cores and threads by the preference.
    #[serde(default)]
    pub guest: u32,
    #[serde(rename = "model", skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(
        rename = "dedicatedCPUPlacement",
        skip_serializing_if = "Option::is_none"
    )]
    pub dedicated_cpu_placement: Option<bool>,
    #[serde(rename = "numa", skip_serializing_if = "Option::is_none")]
    pub numa: Option<NUMA>,
    #[serde(
        rename = "isolateEmulatorThread",
        skip_serializing_if = "Option::is_none"
    )]
    pub isolate_emulator_thread: Option<bool>,
    #[serde(rename = "realtime", skip_serializing_if = "Option::is_none")]
    pub realtime: Option<Realtime>,
    #[serde(rename = "maxSockets", skip_serializing_if = "Option::is_none")]
    pub max_sockets: Option<u32>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.MemoryInstancetype`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryInstancetype {
    /// The guest's memory (Go's value `resource.Quantity`: absent reads as `0`).
    #[serde(rename = "guest", skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
    #[serde(rename = "hugepages", skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<Hugepages>,
    /// How much less than `guest` the launcher pod requests, in percent (0-100).
    #[serde(
        rename = "overcommitPercent",
        default,
        skip_serializing_if = "is_zero_i64"
    )]
    pub overcommit_percent: i64,
    #[serde(rename = "maxGuest", skip_serializing_if = "Option::is_none")]
    pub max_guest: Option<Quantity>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.VirtualMachinePreferenceSpec`: values used only where the VM leaves a field unset
/// (a few, noted where applied, override the VM).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreferenceSpec {
    #[serde(rename = "clock", skip_serializing_if = "Option::is_none")]
    pub clock: Option<ClockPreferences>,
    #[serde(rename = "cpu", skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuPreferences>,
    #[serde(rename = "devices", skip_serializing_if = "Option::is_none")]
    pub devices: Option<DevicePreferences>,
    #[serde(rename = "features", skip_serializing_if = "Option::is_none")]
    pub features: Option<FeaturePreferences>,
    #[serde(rename = "firmware", skip_serializing_if = "Option::is_none")]
    pub firmware: Option<FirmwarePreferences>,
    #[serde(rename = "machine", skip_serializing_if = "Option::is_none")]
    pub machine: Option<MachinePreferences>,
    #[serde(rename = "volumes", skip_serializing_if = "Option::is_none")]
    pub volumes: Option<VolumePreferences>,
    #[serde(rename = "preferredSubdomain", skip_serializing_if = "Option::is_none")]
    pub preferred_subdomain: Option<String>,
    #[serde(
        rename = "preferredTerminationGracePeriodSeconds",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_termination_grace_period_seconds: Option<i64>,
    #[serde(rename = "requirements", skip_serializing_if = "Option::is_none")]
    pub requirements: Option<PreferenceRequirements>,
    #[serde(rename = "annotations", skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Deprecated spelling of `cpu.spreadOptions.ratio`.
    #[serde(
        rename = "preferSpreadSocketToCoreRatio",
        default,
        skip_serializing_if = "is_zero_u32"
    )]
    pub prefer_spread_socket_to_core_ratio: u32,
    #[serde(
        rename = "preferredArchitecture",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_architecture: Option<String>,
    #[serde(
        rename = "preferredLaunchSecurity",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_launch_security: Option<LaunchSecurity>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.VolumePreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VolumePreferences {
    #[serde(
        rename = "preferredStorageClassName",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_storage_class_name: Option<String>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.CPUPreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPreferences {
    /// `sockets` (the default), `cores`, `threads`, `spread`, `any`, or their deprecated
    /// `prefer*` spellings.
    #[serde(
        rename = "preferredCPUTopology",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_cpu_topology: Option<String>,
    #[serde(rename = "spreadOptions", skip_serializing_if = "Option::is_none")]
    pub spread_options: Option<SpreadOptions>,
    #[serde(
        rename = "preferredCPUFeatures",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_cpu_features: Option<Vec<CPUFeature>>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.SpreadOptions`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SpreadOptions {
    /// `SocketsCores` (the default), `CoresThreads` or `SocketsCoresThreads`.
    #[serde(rename = "across", skip_serializing_if = "Option::is_none")]
    pub across: Option<String>,
    #[serde(rename = "ratio", skip_serializing_if = "Option::is_none")]
    pub ratio: Option<u32>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.DevicePreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DevicePreferences {
    #[serde(
        rename = "preferredAutoattachGraphicsDevice",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_autoattach_graphics_device: Option<bool>,
    #[serde(
        rename = "preferredAutoattachMemBalloon",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_autoattach_mem_balloon: Option<bool>,
    #[serde(
        rename = "preferredAutoattachPodInterface",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_autoattach_pod_interface: Option<bool>,
    #[serde(
        rename = "preferredAutoattachSerialConsole",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_autoattach_serial_console: Option<bool>,
    #[serde(
        rename = "preferredAutoattachInputDevice",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_autoattach_input_device: Option<bool>,
    #[serde(
        rename = "preferredDisableHotplug",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_disable_hotplug: Option<bool>,
    #[serde(
        rename = "preferredVirtualGPUOptions",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_virtual_gpu_options: Option<VGPUOptions>,
    #[serde(
        rename = "preferredSoundModel",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_sound_model: Option<String>,
    #[serde(
        rename = "preferredUseVirtioTransitional",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_use_virtio_transitional: Option<bool>,
    #[serde(rename = "preferredInputBus", skip_serializing_if = "Option::is_none")]
    pub preferred_input_bus: Option<String>,
    #[serde(rename = "preferredInputType", skip_serializing_if = "Option::is_none")]
    pub preferred_input_type: Option<String>,
    #[serde(rename = "preferredDiskBus", skip_serializing_if = "Option::is_none")]
    pub preferred_disk_bus: Option<String>,
    #[serde(rename = "preferredLunBus", skip_serializing_if = "Option::is_none")]
    pub preferred_lun_bus: Option<String>,
    #[serde(rename = "preferredCdromBus", skip_serializing_if = "Option::is_none")]
    pub preferred_cdrom_bus: Option<String>,
    #[serde(
        rename = "preferredDiskDedicatedIoThread",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_disk_dedicated_io_thread: Option<bool>,
    #[serde(rename = "preferredDiskCache", skip_serializing_if = "Option::is_none")]
    pub preferred_disk_cache: Option<String>,
    #[serde(rename = "preferredDiskIO", skip_serializing_if = "Option::is_none")]
    pub preferred_disk_io: Option<String>,
    #[serde(
        rename = "preferredDiskBlockSize",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_disk_block_size: Option<BlockSize>,
    #[serde(
        rename = "preferredInterfaceModel",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_interface_model: Option<String>,
    #[serde(rename = "preferredRng", skip_serializing_if = "Option::is_none")]
    pub preferred_rng: Option<Rng>,
    #[serde(
        rename = "preferredBlockMultiQueue",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_block_multi_queue: Option<bool>,
    #[serde(
        rename = "preferredNetworkInterfaceMultiQueue",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_network_interface_multi_queue: Option<bool>,
    #[serde(rename = "preferredTPM", skip_serializing_if = "Option::is_none")]
    pub preferred_tpm: Option<TPMDevice>,
    #[serde(
        rename = "preferredInterfaceMasquerade",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_interface_masquerade: Option<InterfaceMasquerade>,
    #[serde(
        rename = "preferredPanicDeviceModel",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_panic_device_model: Option<String>,
    #[serde(rename = "preferredVideoType", skip_serializing_if = "Option::is_none")]
    pub preferred_video_type: Option<String>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.FeaturePreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FeaturePreferences {
    #[serde(rename = "preferredAcpi", skip_serializing_if = "Option::is_none")]
    pub preferred_acpi: Option<FeatureState>,
    #[serde(rename = "preferredApic", skip_serializing_if = "Option::is_none")]
    pub preferred_apic: Option<FeatureAPIC>,
    #[serde(rename = "preferredHyperv", skip_serializing_if = "Option::is_none")]
    pub preferred_hyperv: Option<FeatureHyperv>,
    #[serde(rename = "preferredKvm", skip_serializing_if = "Option::is_none")]
    pub preferred_kvm: Option<FeatureKVM>,
    #[serde(
        rename = "preferredPvspinlock",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_pvspinlock: Option<FeatureState>,
    #[serde(rename = "preferredSmm", skip_serializing_if = "Option::is_none")]
    pub preferred_smm: Option<FeatureState>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.FirmwarePreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FirmwarePreferences {
    #[serde(rename = "preferredUseBios", skip_serializing_if = "Option::is_none")]
    pub preferred_use_bios: Option<bool>,
    #[serde(
        rename = "preferredUseBiosSerial",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_use_bios_serial: Option<bool>,
    /// Deprecated: `preferredEfi` replaces it.
    #[serde(rename = "preferredUseEfi", skip_serializing_if = "Option::is_none")]
    pub preferred_use_efi: Option<bool>,
    /// Deprecated: `preferredEfi.secureBoot` replaces it.
    #[serde(
        rename = "preferredUseSecureBoot",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_use_secure_boot: Option<bool>,
    #[serde(rename = "preferredEfi", skip_serializing_if = "Option::is_none")]
    pub preferred_efi: Option<EFI>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.MachinePreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MachinePreferences {
    #[serde(
        rename = "preferredMachineType",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_machine_type: Option<String>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.ClockPreferences`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockPreferences {
    #[serde(
        rename = "preferredClockOffset",
        skip_serializing_if = "Option::is_none"
    )]
    pub preferred_clock_offset: Option<ClockOffset>,
    #[serde(rename = "preferredTimer", skip_serializing_if = "Option::is_none")]
    pub preferred_timer: Option<Timer>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1.ClockOffset`: the part of a VMI's `domain.clock` that says how the guest clock is
/// offset (inline in `v1.Clock`, so a separate type only here).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClockOffset {
    #[serde(rename = "utc", skip_serializing_if = "Option::is_none")]
    pub utc: Option<ClockOffsetUTC>,
    #[serde(rename = "timezone", skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.PreferenceRequirements`: what a VM must provide for the preference to fit.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PreferenceRequirements {
    #[serde(rename = "cpu", skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuRequirement>,
    #[serde(rename = "memory", skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryRequirement>,
    #[serde(rename = "architecture", skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.CPUPreferenceRequirement`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuRequirement {
    #[serde(default)]
    pub guest: u32,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1beta1.MemoryPreferenceRequirement`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryRequirement {
    /// Go's value `resource.Quantity`: absent reads as `0`.
    #[serde(rename = "guest", skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
    /// Fields this version of kvrs does not know, kept as they came.
    #[serde(flatten)]
    pub extra: Extra,
}

/// The quantities of an instancetype or preference that KubeVirt parses when it decodes the
/// object (a bad one makes the object unreadable there): `(field path, quantity)`.
pub fn instancetype_quantities(spec: &InstancetypeSpec) -> Vec<(&'static str, &Quantity)> {
    let mut out = Vec::new();
    if let Some(q) = &spec.memory.guest {
        out.push(("spec.memory.guest", q));
    }
    if let Some(q) = &spec.memory.max_guest {
        out.push(("spec.memory.maxGuest", q));
    }
    out
}

/// See [`instancetype_quantities`].
pub fn preference_quantities(spec: &PreferenceSpec) -> Vec<(&'static str, &Quantity)> {
    let mut out = Vec::new();
    let memory = spec.requirements.as_ref().and_then(|r| r.memory.as_ref());
    if let Some(q) = memory.and_then(|m| m.guest.as_ref()) {
        out.push(("spec.requirements.memory.guest", q));
    }
    out
}
