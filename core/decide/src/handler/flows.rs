//! The four things a sync can do to a domain: shut it down, destroy it, delete it, update it.

use super::ctx::{Ctx, SyncResult};
use super::domain::Domain;
use super::facts::is_disconnected;
use super::plan::{LauncherCall, NodeStep};
use super::view::{self, unix_seconds};
use super::{HandlerWorld, netstat};
use crate::api::VirtualMachineInstance;

/// Error text of a destroyed irrecoverable domain (fails the VMI).
pub(super) const IRRECOVERABLE_POST_COPY: &str =
    "VMI is irrecoverable due to failed post-copy migration";
/// Error text when the launcher's command server does not answer.
pub(super) const UNRESPONSIVE: &str =
    "Can not update a VirtualMachineInstance with unresponsive command server.";
/// Marker of a Secure Boot / firmware mismatch reported by the launcher (fails the VMI).
pub(super) const SECURE_BOOT_PREFIX: &str = "mismatch of Secure Boot setting and bootloaders: ";

/// `GetVerifiedLauncherClient`: only a launcher that answers can be told to stop.
fn verified_client(w: &HandlerWorld<'_>, vmi: &VirtualMachineInstance) -> Result<(), String> {
    let l = &w.facts.launcher;
    if l.gone {
        return Err(format!(
            "no launcher client: virt-launcher socket for vmi {} not found",
            view::uid(vmi)
        ));
    }
    if l.unresponsive {
        return Err(format!(
            "launcher client for vmi {} is unresponsive",
            view::uid(vmi)
        ));
    }
    Ok(())
}

/// Runs a launcher command; a disconnect counts as success when `tolerate_disconnect`.
fn run(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    call: LauncherCall,
    tolerate_disconnect: bool,
) -> SyncResult {
    let name = call.name();
    cx.call(call);
    match w.facts.launcher_error(name) {
        Some(e) if !(tolerate_disconnect && is_disconnected(e)) => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// The grace period has not started yet: send the first ACPI signal.
const FIRST_ATTEMPT: i64 = -1;

/// Whether the grace period is over, and otherwise the seconds left (`FIRST_ATTEMPT` before it starts).
fn grace_expired(
    w: &HandlerWorld<'_>,
    vmi: &VirtualMachineInstance,
    d: Option<&Domain>,
) -> (bool, i64) {
    let grace = vmi
        .spec
        .termination_grace_period_seconds
        .unwrap_or_else(|| d.map_or(0, Domain::grace_period_seconds));
    if grace == 0 {
        return (true, 0);
    }
    let start = d
        .and_then(|d| d.spec.metadata.kubevirt.grace_period.as_ref())
        .and_then(|g| g.deletion_timestamp.as_deref())
        .and_then(unix_seconds)
        .unwrap_or(0);
    if start == 0 {
        return (false, FIRST_ATTEMPT);
    }
    let elapsed = w.now.unix() - start;
    if elapsed >= grace {
        return (true, 0);
    }
    (false, (grace - elapsed).max(1))
}

/// Shutdown (`graceful`) or destroy: ACPI while the grace period lasts, then kill.
pub(super) fn shutdown(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    d: Option<&Domain>,
    graceful: bool,
) -> SyncResult {
    verified_client(w, vmi)?;
    if graceful && d.is_some_and(|d| d.grace_period_seconds() != 0) {
        let (expired, left) = grace_expired(w, vmi, d);
        if !expired {
            if d.is_some_and(|d| d.status.status == "ShuttingDown") {
                return Ok(());
            }
            return signal_shutdown(w, cx, vmi, left);
        }
    }
    run(w, cx, LauncherCall::KillVirtualMachine, true)?;
    cx.event("Normal", "Deleted", "VirtualMachineInstance stopping");
    Ok(())
}

fn signal_shutdown(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    left: i64,
) -> SyncResult {
    run(w, cx, LauncherCall::ShutdownVirtualMachine, true)?;
    let mut left = left;
    if left == FIRST_ATTEMPT {
        // One event per shutdown, not per retry: long grace periods would hit the event spam filter.
        cx.event("Normal", "ShuttingDown", "Signaled Graceful Shutdown");
        left = 5.min(
            vmi.spec
                .termination_grace_period_seconds
                .filter(|g| *g < 5)
                .unwrap_or(5),
        );
    }
    // A booting guest can miss ACPI: resend at least every 5 s.
    cx.add_after(left.clamp(0, 5).unsigned_abs());
    Ok(())
}

/// Delete the domain (if the launcher still answers) and clean up locally.
pub(super) fn delete_vm(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
) -> SyncResult {
    let deleted = match verified_client(w, vmi) {
        Ok(()) => {
            cx.event("Normal", "Deleted", "Signaled Deletion");
            run(w, cx, LauncherCall::DeleteDomain, true)
        }
        // No launcher: the domain is gone with its pod.
        Err(_) => Ok(()),
    };
    cx.step(NodeStep::CloseLauncherClient);
    deleted?;
    cx.step(NodeStep::Cleanup {
        uid: view::uid(vmi).to_string(),
    });
    Ok(())
}

/// The start flow (prepare the pod, then `SyncVirtualMachine`) or the refresh of a running domain.
pub(super) fn update(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    d: Option<&Domain>,
) -> SyncResult {
    let l = &w.facts.launcher;
    if let Some(e) = &l.unresponsive_error {
        return Err(e.clone());
    }
    if l.not_initialized {
        cx.add_after(1);
        return Ok(());
    }
    if l.unresponsive || l.gone {
        return Err(UNRESPONSIVE.to_string());
    }

    let mut tolerated: Vec<String> = Vec::new();
    let running = view::is_running(vmi);
    if running {
        mount_hotplug(w, cx)?;
        let nets = netstat::nets_for_live_update(vmi);
        if !nets.is_empty() {
            cx.step(NodeStep::SetupNetworks { networks: nets });
            if let Some(e) = &w.facts.network_setup_error {
                cx.event("Warning", "NicHotplug", e.clone());
                tolerated.push(e.clone());
            }
        }
    } else if !view::is_final(vmi) && !prepare_start(w, cx, vmi)? {
        return Ok(());
    }

    cx.call(LauncherCall::SyncVirtualMachine);
    if let Some(e) = w
        .facts
        .launcher_error(LauncherCall::SyncVirtualMachine.name())
    {
        if e.contains("EFI OVMF rom missing") {
            return Err(format!("{SECURE_BOOT_PREFIX}{e}"));
        }
        return Err(e.to_string());
    }
    if d.is_none() {
        cx.event("Normal", "Created", "VirtualMachineInstance defined.");
    }
    if running {
        cx.step(NodeStep::UnmountHotplugVolumes);
    }
    match tolerated.len() {
        0 => Ok(()),
        1 => Err(tolerated.remove(0)),
        _ => Err(format!("[{}]", tolerated.join(", "))),
    }
}

fn mount_hotplug(w: &HandlerWorld<'_>, cx: &mut Ctx) -> SyncResult {
    cx.step(NodeStep::MountHotplugVolumes);
    match w.facts.hotplug_mount_error.as_deref() {
        None => Ok(()),
        Some(e) if e.contains("waiting for hotplug") => {
            cx.add_after(1);
            Ok(())
        }
        Some(e) if e.contains("no such file or directory") => {
            cx.event("Warning", "HotplugFailed", e);
            Ok(())
        }
        Some(e) => Err(e.to_string()),
    }
}

/// Prepares the launcher pod before the first `SyncVirtualMachine`; `false` = not ready yet.
fn prepare_start(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
) -> Result<bool, String> {
    let f = w.facts;
    if f.launcher.no_client_info {
        cx.add_rate_limited();
        return Ok(false);
    }
    if !f.container_disks_ready.unwrap_or(true) || f.container_disk_error.is_some() {
        if let Some(e) = &f.container_disk_error {
            return Err(e.clone());
        }
        // Give the container disks time to be pulled before treating it as an error.
        cx.add_after(1);
        return Ok(false);
    }
    cx.step(NodeStep::MountContainerDisks);
    if let Some(e) = &f.mount_and_verify_error {
        return Err(e.clone());
    }
    mount_hotplug(w, cx)?;
    if !hotplug_volumes_ready(vmi) {
        cx.add_after(1);
        return Ok(false);
    }
    let nets = netstat::nets_for_startup(vmi);
    if !nets.is_empty() {
        cx.step(NodeStep::SetupNetworks { networks: nets });
        if let Some(e) = &f.network_setup_error {
            return Err(format!("failed to configure vmi network: {e}"));
        }
    }
    cx.step(NodeStep::ClaimDevices {
        paths: device_paths(vmi),
    });
    if let Some(e) = &f.claim_devices_error {
        return Err(e.clone());
    }
    Ok(true)
}

/// Hotplugged volumes must be mounted before the domain starts.
fn hotplug_volumes_ready(vmi: &VirtualMachineInstance) -> bool {
    let hotplug = vmi
        .spec
        .utility_volumes
        .as_ref()
        .is_some_and(|u| !u.is_empty())
        || vmi.spec.volumes.iter().flatten().any(|v| {
            v.persistent_volume_claim
                .as_ref()
                .is_some_and(|p| p.hotpluggable == Some(true))
                || v.data_volume
                    .as_ref()
                    .is_some_and(|p| p.hotpluggable == Some(true))
                || v.memory_dump.is_some()
        });
    if !hotplug {
        return true;
    }
    let statuses = vmi.status.as_ref().and_then(|s| s.volume_status.as_ref());
    let Some(statuses) = statuses.filter(|s| !s.is_empty()) else {
        return false;
    };
    statuses.iter().all(|vs| {
        vs.hotplug_volume.is_none()
            || matches!(vs.phase.as_deref(), Some("Ready") | Some("MountedToPod"))
    })
}

/// Device nodes the (non-root) launcher needs to own: what the device plugins hand the pod, and
/// for a non-root VMI the device node of every block-mode claim ([`block_claim_devices`]).
pub(super) fn device_paths(vmi: &VirtualMachineInstance) -> Vec<String> {
    let mut paths = vec!["/dev/kvm".to_string()];
    if vmi.spec.domain.devices.autoattach_vsock == Some(true) {
        paths.push("/dev/vhost-vsock".into());
    }
    if vmi
        .spec
        .domain
        .launch_security
        .as_ref()
        .is_some_and(|l| l.sev.is_some())
    {
        paths.push("/dev/sev".into());
    }
    paths.push("/dev/vhost-net".into());
    paths.push("/dev/net/tun".into());
    paths.extend(block_claim_devices(vmi));
    paths
}

/// `/dev/<volume>` of each `persistentVolumeClaim` volume the VMI's status records in Block mode,
/// when QEMU runs as a non-root user (`status.runtimeUser` not 0), as KubeVirt's virt-handler
/// hands them over (`changeOwnershipOfBlockDevices`): the runtime creates a claim's device node
/// owned by root unless it derives ownership from the pod's security context (containerd's
/// `device_ownership_from_security_context`, off by default), and QEMU as 107 could not open it.
/// A claim without a volume status is left out: KubeVirt's virt-controller records every
/// claim's mode before the pod runs.
fn block_claim_devices(vmi: &VirtualMachineInstance) -> Vec<String> {
    let status = vmi.status.as_ref();
    if status.and_then(|s| s.runtime_user).unwrap_or(0) == 0 {
        return Vec::new();
    }
    let statuses = status
        .and_then(|s| s.volume_status.as_deref())
        .unwrap_or_default();
    let is_block = |name: &str| {
        statuses.iter().any(|vs| {
            vs.name == name
                && vs
                    .persistent_volume_claim_info
                    .as_ref()
                    .and_then(|i| i.volume_mode.as_deref())
                    == Some("Block")
        })
    };
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.persistent_volume_claim.is_some() && is_block(&v.name))
        .map(|v| format!("/dev/{}", v.name))
        .collect()
}
