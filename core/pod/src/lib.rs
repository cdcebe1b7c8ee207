//! The virt-launcher pod virt-controller creates for a VMI (KubeVirt v1.9.0's
//! `RenderLaunchManifest`), as a pure function.
//!
//! Everything the Go code reads from the cluster beyond the VMI and the KubeVirt configuration —
//! the launcher image and directories, the qemu-timeout jitter, which PVCs are block devices — comes
//! in through [`PodInputs`], so the same VMI always renders the same pod.
//!
//! ## Rendering a pod
//!
//! [`render_launcher_pod`] takes a VMI as the API server stores it — admitted, so defaulted
//! (`kvrs_admission::admit`) — the cluster configuration and the [`PodInputs`], and returns the
//! `k8s_openapi` Pod virt-controller would create. [`resources::ResourceReport`] is the compute
//! container's requests and limits alone, with the memory overhead broken down.
//!
//! ```
//! use kvrs_admission::{ClusterConfig, admit};
//! use kvrs_pod::{PodInputs, render_launcher_pod};
//!
//! let config = ClusterConfig::default();
//! let vmi = admit(serde_json::from_value(serde_json::json!({
//!     "metadata": {"name": "testvmi", "namespace": "default", "uid": "1234"},
//!     "spec": {
//!         "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}},
//!         "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora"}}]
//!     }
//! }))?, &config)?;
//!
//! let pod = render_launcher_pod(&vmi, &config, &PodInputs::default())?;
//! assert_eq!(pod.metadata.generate_name.as_deref(), Some("virt-launcher-testvmi-"));
//! let spec = pod.spec.as_ref().unwrap();
//! assert_eq!(spec.containers[0].name, "compute");
//! // The guest's 128Mi plus virt-launcher's own overhead.
//! let requests = spec.containers[0].resources.as_ref().and_then(|r| r.requests.as_ref());
//! assert_eq!(requests.unwrap()["memory"].0, "405760Ki");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Modules follow the pieces of the pod: `metadata` (labels, annotations), `compute` (the
//! `compute` container), `volumes` and `backend_storage` (pod volumes and the compute
//! container's mounts), `sidecars` (console log, container-disk init containers, hook and
//! virtiofs sidecars) and `scheduling` (node selector, affinity, security context).

#![warn(unreachable_pub)]

pub mod resources;

mod backend_storage;
mod compute;
pub mod hotplug;
mod metadata;
mod scheduling;
mod sidecars;
mod volumes;

// The shared crates' modules under the names the code here has always used.
use kvrs_admission::config;
use kvrs_api::{api, quantity};

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::VirtualMachineInstance;
use crate::resources::{AutoLimits, ResourceError, ResourceReport};
use kvrs_admission::ClusterConfig;
use kvrs_api::names::{PathComponentError, path_component};

pub use backend_storage::needs_backend_storage;
pub use kvrs_admission::kubevirt_cr::NetworkBindingPlugin;
pub use metadata::{hashed_interface_name, vmi_id_label};
pub use volumes::PvcInfo;

/// The UID and GID of the unprivileged `qemu` user virt-launcher runs as.
pub const NON_ROOT_UID: i64 = 107;
/// Grace period when the VMI sets none.
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;
/// Added to the VMI grace period for the launcher, and once more for the pod.
pub const GRACE_PERIOD_PADDING_SECONDS: i64 = 15;
/// Span of the random addition to the qemu timeout: 0..=119 seconds.
pub const QEMU_TIMEOUT_JITTER_RANGE: u32 = 120;
/// Private directory of the launcher.
pub const VIRT_PRIVATE_DIR: &str = "/var/run/kubevirt-private";

/// Cluster-side facts virt-controller renders the pod with (its flags and informers).
#[derive(Clone, Debug, PartialEq)]
pub struct PodInputs {
    /// Base of `--qemu-timeout`, in seconds (240).
    pub qemu_timeout_seconds: u32,
    /// Random addition to the qemu timeout, taken modulo [`QEMU_TIMEOUT_JITTER_RANGE`].
    pub qemu_timeout_jitter_seconds: u32,
    /// `--kubevirt-share-dir`.
    pub share_dir: String,
    /// `--ephemeral-disk-dir`.
    pub ephemeral_disk_dir: String,
    /// `--container-disk-dir`.
    pub container_disk_dir: String,
    /// Where hotplugged disks appear in the compute container.
    pub hotplug_disk_dir: String,
    /// Pull secret added to every launcher pod, if any.
    pub image_pull_secret: Option<String>,
    /// `--ovmf-path` override (the cluster's `ovmfPath`); `None` picks KubeVirt's default for
    /// the VMI's architecture ([`default_ovmf_path`]).
    pub ovmf_path: Option<String>,
    /// `--disk-memory-limit` (disk verification memory limit, bytes).
    pub disk_memory_limit: i64,
    /// `--hypervisor`.
    pub hypervisor: String,
    /// virt-launcher log verbosity from the cluster configuration.
    pub launcher_log_verbosity: u32,
    /// Facts about the PVCs the VMI names, by claim name. A claim that is not listed is taken
    /// as an existing filesystem RWO volume.
    pub pvcs: BTreeMap<String, PvcInfo>,
    /// Limits the VMI's namespace demands (ResourceQuotas, auto-CPU-limit selector).
    pub auto_limits: AutoLimits,
    /// `virtualMachineOptions.disableSerialConsoleLog`: no `guest-console-log` unless the VMI
    /// asks for it.
    pub serial_console_log_disabled: bool,
    /// Pull policy of the launcher image (`imagePullPolicy` of the KubeVirt CR).
    pub image_pull_policy: String,
    /// Name of the backend-storage PVC (persistent TPM / EFI state); `None` means KubeVirt's
    /// conventional `persistent-state-for-<vmi>`.
    pub backend_storage_pvc: Option<String>,
    /// Whether the cluster's nodes offer `/dev/vhost-net` (see [`vhost_net_available`]). `true`
    /// is KubeVirt's assumption: a non-emulated VMI with a virtio interface requests
    /// `devices.kubevirt.io/vhost-net`. `false` leaves the request out, and libvirt runs the
    /// interface on QEMU's userland virtio-net, as KubeVirt's renderer notes libvirt does when
    /// the device is unavailable — so a KVM node without the `vhost_net` module still runs VMs.
    pub vhost_net_available: bool,
    /// The network binding plugins the cluster registers (`network.binding` of the KubeVirt
    /// CR), by name: an interface's `binding: {name}` must name one; a plugin with a
    /// `sidecarImage` gets a hook sidecar, one with a `networkAttachmentDefinition` a Multus
    /// network element.
    pub network_bindings: BTreeMap<String, NetworkBindingPlugin>,
}

impl Default for PodInputs {
    fn default() -> Self {
        Self {
            qemu_timeout_seconds: 240,
            qemu_timeout_jitter_seconds: 0,
            share_dir: "/var/run/kubevirt".into(),
            ephemeral_disk_dir: "/var/run/kubevirt-ephemeral-disks".into(),
            container_disk_dir: "/var/run/kubevirt/container-disks".into(),
            hotplug_disk_dir: "/var/run/kubevirt/hotplug-disks".into(),
            image_pull_secret: None,
            ovmf_path: None,
            disk_memory_limit: 2_097_152_000,
            hypervisor: "kvm".into(),
            launcher_log_verbosity: 2,
            pvcs: BTreeMap::new(),
            auto_limits: AutoLimits::default(),
            serial_console_log_disabled: false,
            image_pull_policy: "IfNotPresent".into(),
            backend_storage_pvc: None,
            vhost_net_available: true,
            network_bindings: BTreeMap::new(),
        }
    }
}

/// The device-plugin resource of `/dev/vhost-net`.
pub const VHOST_NET_RESOURCE: &str = "devices.kubevirt.io/vhost-net";

/// Whether launcher pods should request vhost-net, from the nodes' allocatable resources (one
/// map per node, `None` for a node that reports none).
///
/// virt-handler's device plugins advertise a device only where it exists. When some node
/// advertises vhost-net, pods request it (KubeVirt's behaviour: they run where it is). When
/// nodes advertise KubeVirt's other devices (`devices.kubevirt.io/kvm` or `tun`: their device
/// plugins run) but none advertises vhost-net, no node has it and a request could never be met:
/// pods go without. With no such facts (no node, or no device plugin registered yet) the answer
/// is KubeVirt's default, `true`.
pub fn vhost_net_available<'a, Q: 'a>(
    nodes: impl IntoIterator<Item = Option<&'a BTreeMap<String, Q>>>,
    is_positive: impl Fn(&Q) -> bool,
) -> bool {
    let mut plugins_seen = false;
    for allocatable in nodes.into_iter().flatten() {
        if allocatable
            .get(VHOST_NET_RESOURCE)
            .is_some_and(&is_positive)
        {
            return true;
        }
        plugins_seen |= ["devices.kubevirt.io/kvm", "devices.kubevirt.io/tun"]
            .iter()
            .any(|r| allocatable.get(*r).is_some_and(&is_positive));
    }
    !plugins_seen
}

/// KubeVirt's default firmware directory per guest architecture.
pub fn default_ovmf_path(arch: &str) -> &'static str {
    match arch {
        "arm64" => "/usr/share/AAVMF",
        "s390x" => "",
        _ => "/usr/share/edk2/ovmf",
    }
}

impl PodInputs {
    /// The `--qemu-timeout` value: base plus jitter, e.g. `287s`.
    pub fn qemu_timeout(&self) -> String {
        format!(
            "{}s",
            self.qemu_timeout_seconds
                + self.qemu_timeout_jitter_seconds % QEMU_TIMEOUT_JITTER_RANGE
        )
    }
}

/// Why a launcher pod cannot be rendered.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PodError {
    /// `metadata.name` is empty.
    #[error("metadata.name: must not be empty")]
    MissingName,
    /// `metadata.namespace` is empty.
    #[error("metadata.namespace: must not be empty")]
    MissingNamespace,
    /// Resources could not be computed.
    #[error(transparent)]
    Resources(#[from] ResourceError),
    /// The hook sidecar annotation is not a JSON list of sidecars.
    #[error("metadata.annotations[hooks.kubevirt.io/hookSidecars]: {0}")]
    HookSidecars(String),
    /// A log verbosity label is not a number.
    #[error("metadata.labels[logVerbosity]: {0:?} is not an integer")]
    LogVerbosity(String),
    /// An interface names a network binding plugin the cluster does not register
    /// (`network.binding` of the KubeVirt CR); the message is virt-controller's.
    #[error(
        "spec.domain.devices.interfaces[{0}].binding: couldn't find configuration for network binding: {1}"
    )]
    UnknownNetworkBinding(usize, String),
    /// A name from the VMI that becomes one component of a path in the pod (or, passed to the
    /// launcher, on the node) is not a plain name: `.`, `..`, or with `/` or NUL.
    #[error(transparent)]
    PathComponent(#[from] PathComponentError),
    /// A sysprep volume names neither a Secret nor a ConfigMap.
    #[error("spec.volumes[{0}].sysprep: must have a secret or a configMap")]
    Sysprep(String),
}

/// Whether the launcher runs as the unprivileged user (status.runtimeUser != 0, or the
/// deprecated non-root annotation).
pub fn is_non_root(vmi: &VirtualMachineInstance) -> bool {
    let annotated = vmi
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubevirt.io/nonroot"));
    let runtime_user = vmi
        .status
        .as_ref()
        .and_then(|s| s.runtime_user)
        .unwrap_or(0);
    annotated || runtime_user != 0
}

/// The names that become paths, checked before anything is rendered: the launcher builds its
/// sockets, the cloud-init ISO and NVRAM from name, namespace and UID (`--name`, `--namespace`,
/// `--uid`); the console-log sidecar tails `kubevirt-private/<uid>/`; virtiofs sidecars serve
/// `virtiofs-containers/<filesystem>.sock`; volumes mount under directories named after them.
/// Admission refuses what is not a plain name; library callers may skip it (issue 17). An unset
/// UID stays empty, as KubeVirt renders it.
fn check_path_components(
    vmi: &VirtualMachineInstance,
    name: &str,
    namespace: &str,
) -> Result<(), PathComponentError> {
    path_component("metadata.name", name)?;
    path_component("metadata.namespace", namespace)?;
    if let Some(uid) = vmi.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        path_component("metadata.uid", uid)?;
    }
    let filesystems = vmi.spec.domain.devices.filesystems.iter().flatten();
    for (i, fs) in filesystems.enumerate() {
        path_component(
            format_args!("spec.domain.devices.filesystems[{i}].name"),
            &fs.name,
        )?;
    }
    for (i, v) in vmi.spec.volumes.iter().flatten().enumerate() {
        path_component(format_args!("spec.volumes[{i}].name"), &v.name)?;
    }
    Ok(())
}

/// Renders the virt-launcher pod for an admitted (defaulted) VMI.
pub fn render_launcher_pod(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
    inputs: &PodInputs,
) -> Result<core::Pod, PodError> {
    let name = vmi
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(PodError::MissingName)?;
    let namespace = vmi
        .metadata
        .namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or(PodError::MissingNamespace)?;
    check_path_components(vmi, name, namespace)?;
    let non_root = is_non_root(vmi);
    let user_id = if non_root { NON_ROOT_UID } else { 0 };

    let grace = vmi
        .spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
        + GRACE_PERIOD_PADDING_SECONDS;
    let pod_grace = grace + GRACE_PERIOD_PADDING_SECONDS;

    let mut report = ResourceReport::with_auto_limits(vmi, config, &inputs.auto_limits)?;
    if !inputs.vhost_net_available {
        report.compute.limits.remove(VHOST_NET_RESOURCE);
    }
    // virt-controller's sidecar creators, in its order: the hook annotation's, then one per
    // binding plugin with a sidecar image.
    let mut hooks = sidecars::hook_sidecars(vmi)?;
    hooks.extend(sidecars::binding_plugin_sidecars(
        vmi,
        &inputs.network_bindings,
        &inputs.image_pull_policy,
    )?);
    let verbosity = compute::launcher_verbosity(vmi, inputs)?;

    let volumes = volumes::render(vmi, config, inputs, &hooks, non_root)?;
    let mut compute = compute::render(compute::ComputeArgs {
        vmi,
        config,
        inputs,
        name,
        namespace,
        grace,
        hook_count: hooks.len(),
        non_root,
        user_id,
        volumes: &volumes,
        resources: &report.compute,
        verbosity,
    });

    let mut containers = vec![];
    let mut extra_volumes = vec![];
    let virtiofs = sidecars::virtiofs_containers(vmi, config)?;
    let mut hook_containers = Vec::new();
    for (i, hook) in hooks.iter().enumerate() {
        hook_containers.push(sidecars::hook_container(i, hook, vmi, non_root, user_id)?);
        if let Some(cm) = &hook.config_map {
            extra_volumes.push(core::Volume {
                name: cm.name.clone(),
                config_map: Some(core::ConfigMapVolumeSource {
                    name: cm.name.clone(),
                    default_mode: Some(0o755),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(pvc) = &hook.pvc {
            extra_volumes.push(core::Volume {
                name: pvc.name.clone(),
                persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                    claim_name: pvc.name.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
            if !pvc.shared_compute_path.is_empty() {
                compute
                    .volume_mounts
                    .get_or_insert_with(Vec::new)
                    .push(core::VolumeMount {
                        name: pvc.name.clone(),
                        mount_path: pvc.shared_compute_path.clone(),
                        ..Default::default()
                    });
            }
        }
    }
    containers.push(compute);
    containers.extend(virtiofs);
    containers.extend(hook_containers);

    let mut init_containers = Vec::new();
    if let Some(c) = sidecars::console_log_container(vmi, config, inputs, verbosity)? {
        init_containers.push(c);
    }
    init_containers.extend(sidecars::image_volume_init_containers(vmi)?);

    let host_name = scheduling::hostname(vmi, name);
    let reservation = scheduling::reservation_labels(vmi, inputs);
    let mut pod_volumes = volumes.volumes;
    pod_volumes.extend(extra_volumes);

    let mut spec = core::PodSpec {
        hostname: Some(host_name.clone()),
        subdomain: vmi.spec.subdomain.clone().filter(|s| !s.is_empty()),
        security_context: Some(scheduling::pod_security_context(non_root)),
        termination_grace_period_seconds: Some(pod_grace),
        restart_policy: Some("Never".into()),
        containers,
        init_containers: Some(init_containers).filter(|c| !c.is_empty()),
        node_selector: Some(scheduling::node_selector(vmi, config)),
        volumes: Some(pod_volumes),
        image_pull_secrets: scheduling::image_pull_secrets(vmi, inputs),
        dns_config: vmi.spec.dns_config.clone(),
        dns_policy: vmi.spec.dns_policy.clone().filter(|s| !s.is_empty()),
        readiness_gates: Some(vec![core::PodReadinessGate {
            condition_type: "kubevirt.io/virtual-machine-unpaused".into(),
        }]),
        enable_service_links: Some(false),
        scheduler_name: vmi.spec.scheduler_name.clone().filter(|s| !s.is_empty()),
        tolerations: vmi.spec.tolerations.clone(),
        topology_spread_constraints: vmi.spec.topology_spread_constraints.clone(),
        resource_claims: scheduling::resource_claims(vmi),
        priority_class_name: vmi
            .spec
            .priority_class_name
            .clone()
            .filter(|s| !s.is_empty()),
        affinity: scheduling::add_reservation_anti_affinity(
            scheduling::affinity(vmi),
            &reservation,
        ),
        ..Default::default()
    };
    scheduling::service_account(vmi, &mut spec);

    let metadata = ObjectMeta {
        generate_name: Some(format!("virt-launcher-{name}-")),
        labels: Some({
            let mut labels = metadata::labels(vmi, name, &host_name);
            labels.extend(reservation);
            labels
        }),
        annotations: Some(metadata::annotations(
            vmi,
            name,
            namespace,
            &report,
            &inputs.network_bindings,
        )),
        owner_references: Some(vec![OwnerReference {
            api_version: crate::api::API_VERSION.into(),
            kind: "VirtualMachineInstance".into(),
            name: name.into(),
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..Default::default()
    };

    Ok(core::Pod {
        metadata,
        spec: Some(spec),
        status: Some(core::PodStatus::default()),
    })
}

#[cfg(test)]
mod binding_tests;
#[cfg(test)]
mod path_tests;
#[cfg(test)]
mod snapshots;
#[cfg(test)]
mod tests;
