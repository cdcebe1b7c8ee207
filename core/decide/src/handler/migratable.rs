//! Whether a VMI can be live-migrated (and its storage migrated), and whether its guest agent is
//! recent enough. Inputs are the VMI and cluster settings only.

use super::conditions::{LIVE_MIGRATABLE, STORAGE_LIVE_MIGRATABLE, bare};
use super::facts::{GuestAgentCommand, HandlerConfig};
use crate::api::{VirtualMachineInstance, VirtualMachineInstanceCondition};

/// The migratability conditions computed for a VMI.
pub(super) struct Verdict {
    pub live_condition: VirtualMachineInstanceCondition,
    pub storage_condition: VirtualMachineInstanceCondition,
    /// Some volume is node-local, so a migration must copy disks.
    pub block_migration: bool,
}

const NOT_SHARED_HINT: &str =
    "live migration requires that all PVCs must be shared (using ReadWriteMany access mode)";

/// Volumes: which ones force a block migration, and which make migration impossible.
fn check_volumes(vmi: &VirtualMachineInstance) -> (bool, Option<String>) {
    let status = vmi.status.as_ref();
    let volume_status = |name: &str| {
        status
            .and_then(|s| s.volume_status.as_ref())
            .and_then(|v| v.iter().find(|vs| vs.name == name))
    };
    let migrated = |name: &str| {
        status
            .and_then(|s| s.migrated_volumes.as_ref())
            .is_some_and(|m| m.iter().any(|v| v.volume_name == name))
    };
    let shared =
        |modes: Option<&Vec<String>>| modes.is_some_and(|m| m.iter().any(|a| a == "ReadWriteMany"));
    let mut block = status
        .and_then(|s| s.migrated_volumes.as_ref())
        .is_some_and(|m| !m.is_empty());
    let filesystems = vmi
        .spec
        .domain
        .devices
        .filesystems
        .as_deref()
        .unwrap_or_default();
    let disks = vmi.spec.domain.devices.disks.as_deref().unwrap_or_default();

    for volume in vmi.spec.volumes.iter().flatten() {
        let claim = volume
            .persistent_volume_claim
            .as_ref()
            .map(|p| p.claim_name.as_str())
            .or(volume.data_volume.as_ref().map(|d| d.name.as_str()));
        if let Some(claim) = claim {
            let info =
                volume_status(&volume.name).and_then(|vs| vs.persistent_volume_claim_info.as_ref());
            let Some(info) = info else {
                let msg = format!(
                    "cannot migrate VMI: Unable to determine if PVC {claim} is shared, {NOT_SHARED_HINT}"
                );
                return (true, Some(msg));
            };
            if !shared(info.access_modes.as_ref()) && !migrated(&volume.name) {
                return (
                    true,
                    Some(format!(
                        "cannot migrate VMI: PVC {claim} is not shared, {NOT_SHARED_HINT}"
                    )),
                );
            }
        } else if let Some(host_disk) = &volume.host_disk {
            if let Some(info) =
                volume_status(&volume.name).and_then(|vs| vs.persistent_volume_claim_info.as_ref())
            {
                if !shared(info.access_modes.as_ref()) && !migrated(&volume.name) {
                    let claim = info.claim_name.clone().unwrap_or_default();
                    return (
                        true,
                        Some(format!(
                            "cannot migrate VMI: PVC {claim} is not shared, {NOT_SHARED_HINT}"
                        )),
                    );
                }
                continue;
            }
            if host_disk.shared != Some(true) {
                return (
                    true,
                    Some("cannot migrate VMI with non-shared HostDisk".into()),
                );
            }
        } else {
            if filesystems.iter().any(|f| f.name == volume.name) {
                continue;
            }
            let read_only_cdrom = disks.iter().any(|d| {
                d.name == volume.name
                    && d.cdrom.as_ref().is_some_and(|c| c.readonly.unwrap_or(true))
            });
            if !read_only_cdrom {
                block = true;
            }
        }
    }
    (block, None)
}

/// Pod-network binding check (masquerade and passt migrate; bridge only with an opt-in annotation).
fn check_network(config: &HandlerConfig, vmi: &VirtualMachineInstance) -> Option<String> {
    let ifaces = vmi
        .spec
        .domain
        .devices
        .interfaces
        .as_deref()
        .unwrap_or_default();
    if ifaces.is_empty() {
        return None;
    }
    let pod_net = vmi
        .spec
        .networks
        .iter()
        .flatten()
        .find(|n| n.pod.is_some())?;
    let Some(primary) = ifaces.iter().find(|i| i.name == pod_net.name) else {
        return Some(format!(
            "no primary interface found for network {}",
            pod_net.name
        ));
    };
    let allowed = primary.masquerade.is_some()
        || primary.passt_binding.is_some()
        || (primary.bridge.is_some()
            && vmi.metadata.annotations.as_ref().is_some_and(|a| {
                a.contains_key("kubevirt.io/allow-pod-bridge-network-live-migration")
            }))
        || primary
            .binding
            .as_ref()
            .is_some_and(|b| config.migratable_bindings.contains(&b.name));
    (!allowed).then(|| {
        "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to the pod network".into()
    })
}

fn check_host_model(config: &HandlerConfig, vmi: &VirtualMachineInstance) -> Option<String> {
    let host_model = vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.model.as_deref())
        == Some("host-model");
    (host_model && config.host_cpu_model.is_empty()).then(|| {
        let node = vmi
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        format!("the node \"{node}\" does not allow migration with host-model")
    })
}

fn check_host_devices(config: &HandlerConfig, vmi: &VirtualMachineInstance) -> Option<String> {
    let devices = &vmi.spec.domain.devices;
    if devices.host_devices.as_ref().is_some_and(|h| !h.is_empty()) {
        return Some("VMI specifies non-migratable generic PCI host device".into());
    }
    let gpus = devices.gpus.as_deref().unwrap_or_default();
    match gpus.len() {
        0 => None,
        1 if !config.gate("VGPULiveMigration") => {
            Some("VMI specifies a GPU but feature gate VGPULiveMigration is not enabled".into())
        }
        // Mediated devices are not modelled; a single GPU counts as a non-migratable one.
        1 => Some("VMI specifies non-migratable GPU device".into()),
        _ => Some("VMI specifies too many GPUs".into()),
    }
}

fn hyperv_passthrough(vmi: &VirtualMachineInstance) -> bool {
    vmi.spec
        .domain
        .features
        .as_ref()
        .and_then(|f| f.hyperv_passthrough.as_ref())
        .and_then(|h| h.enabled)
        .unwrap_or(false)
}

/// Computes LiveMigratable, StorageLiveMigratable and the migration method.
pub(super) fn assess(config: &HandlerConfig, vmi: &VirtualMachineInstance) -> Verdict {
    let (block_migration, block_err) = check_volumes(vmi);
    let net = check_network(config, vmi);
    let host_model = check_host_model(config, vmi);
    let devices = check_host_devices(config, vmi);
    let sec = vmi.spec.domain.launch_security.as_ref();
    let sev = sec.is_some_and(|s| s.sev.is_some() || s.snp.is_some());
    let tdx = sec.is_some_and(|s| s.tdx.is_some());
    let hyperv = hyperv_passthrough(vmi);

    let not = |reason: &str, msg: &str| bare(LIVE_MIGRATABLE, "False", reason, msg);
    let live_condition = if let Some(m) = &net {
        not("InterfaceNotLiveMigratable", m)
    } else if let Some(m) = &host_model {
        not("CPUModeLiveMigratable", m)
    } else if let Some(m) = &devices {
        not("HostDeviceNotLiveMigratable", m)
    } else if sev {
        not("SEVNotLiveMigratable", "VMI uses SEV")
    } else if tdx {
        not("TDXNotLiveMigratable", "VMI uses TDX")
    } else if hyperv {
        not(
            "HypervPassthroughNotLiveMigratable",
            "VMI uses hyperv passthrough",
        )
    } else if let Some(m) = &block_err {
        not("DisksNotLiveMigratable", m)
    } else {
        bare(LIVE_MIGRATABLE, "True", "", "")
    };

    let mut reasons: Vec<(&str, String)> = Vec::new();
    if let Some(m) = net {
        reasons.push(("InterfaceNotLiveMigratable", m));
    }
    if let Some(m) = host_model {
        reasons.push(("CPUModeLiveMigratable", m));
    }
    if let Some(m) = devices {
        reasons.push(("HostDeviceNotLiveMigratable", m));
    }
    if sev {
        reasons.push(("SEVNotLiveMigratable", "VMI uses SEV".into()));
    } else if tdx {
        reasons.push(("TDXNotLiveMigratable", "VMI uses TDX".into()));
    }
    let reservation = vmi
        .spec
        .domain
        .devices
        .disks
        .iter()
        .flatten()
        .any(|d| d.lun.as_ref().and_then(|l| l.reservation).unwrap_or(false));
    if reservation {
        reasons.push((
            "PersistentReservationNotLiveMigratable",
            "VMI uses SCSI persistent reservation".into(),
        ));
    }
    if hyperv {
        reasons.push((
            "HypervPassthroughNotLiveMigratable",
            "VMI uses hyperv passthrough".into(),
        ));
    }
    let storage_condition = if reasons.is_empty() {
        bare(STORAGE_LIVE_MIGRATABLE, "True", "", "")
    } else {
        let msg = reasons
            .iter()
            .map(|(r, m)| format!("{r}: {m}"))
            .collect::<Vec<_>>()
            .join(", ");
        bare(STORAGE_LIVE_MIGRATABLE, "False", "NotMigratable", &msg)
    };
    Verdict {
        live_condition,
        storage_condition,
        block_migration,
    }
}

/// Whether the eviction strategy asks for a live migration on node drain.
pub(super) fn migratable_on_eviction(config: &HandlerConfig, vmi: &VirtualMachineInstance) -> bool {
    let strategy = vmi
        .spec
        .eviction_strategy
        .as_deref()
        .or(config.eviction_strategy.as_deref());
    match strategy {
        Some("LiveMigrate") => true,
        Some("LiveMigrateIfPossible") => vmi
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.r#type == LIVE_MIGRATABLE && c.status == "True")
            }),
        _ => false,
    }
}

const REQUIRED_AGENT_COMMANDS: [&str; 10] = [
    "guest-ping",
    "guest-get-time",
    "guest-info",
    "guest-shutdown",
    "guest-network-get-interfaces",
    "guest-get-fsinfo",
    "guest-get-host-name",
    "guest-get-users",
    "guest-get-timezone",
    "guest-get-osinfo",
];
const SSH_COMMANDS: [&str; 3] = [
    "guest-ssh-get-authorized-keys",
    "guest-ssh-add-authorized-keys",
    "guest-ssh-remove-authorized-keys",
];
const OLD_SSH_COMMANDS: [&str; 6] = [
    "guest-exec-status",
    "guest-exec",
    "guest-file-open",
    "guest-file-close",
    "guest-file-read",
    "guest-file-write",
];

/// Whether the agent's command list covers what KubeVirt needs for this VMI, and why not.
pub(super) fn agent_supported(
    vmi: &VirtualMachineInstance,
    commands: &[GuestAgentCommand],
) -> (bool, String) {
    let enabled = |names: &[&str]| {
        names
            .iter()
            .all(|n| commands.iter().any(|c| c.name == *n && c.enabled))
    };
    if !enabled(&REQUIRED_AGENT_COMMANDS) {
        return (
            false,
            "This guest agent doesn't support required basic commands".into(),
        );
    }
    let creds = vmi.spec.access_credentials.as_deref().unwrap_or_default();
    let ssh = creds.iter().any(|c| {
        c.ssh_public_key
            .as_ref()
            .is_some_and(|s| s.propagation_method.qemu_guest_agent.is_some())
    });
    let pass = creds.iter().any(|c| {
        c.user_password
            .as_ref()
            .is_some_and(|p| p.propagation_method.qemu_guest_agent.is_some())
    });
    if ssh && !(enabled(&SSH_COMMANDS) || enabled(&OLD_SSH_COMMANDS)) {
        return (
            false,
            "This guest agent doesn't support required public key commands".into(),
        );
    }
    if pass && !enabled(&["guest-set-user-password"]) {
        return (
            false,
            "This guest agent doesn't support required password commands".into(),
        );
    }
    (true, "This guest agent is supported".into())
}
