//! The migration target controller: on the node labelled as the migration target, prepare the
//! target pod (volumes, network, devices), `SyncMigrationTarget`, start the target proxy and
//! publish its address and ports; follow the incoming domain (detected, running); when the
//! launcher records the end of the migration with the domain running here, take the VMI over
//! (`nodeName`, node label) and finalize; when it ended otherwise, clean the target up.

use std::collections::BTreeMap;

use super::super::ctx::{Ctx, SyncResult};
use super::super::domain::Domain;
use super::super::plan::{Decision, LauncherCall, NodeStep};
use super::super::{HandlerWorld, flows, view};
use super::{
    CREATE_MIGRATION_TARGET_ANNOTATION, EVICTION_SOURCE_ANNOTATION, MIGRATION_TARGET_NODE_LABEL,
    NODE_NAME_LABEL, OUTDATED_LAUNCHER_IMAGE_LABEL, abort_in_progress, check_launcher, is_done,
    label, launcher_client, state, state_mut,
};
use crate::api::{MemoryStatus, VirtualMachineInstance};
use crate::handler::parse_time;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Event message once the target is prepared.
pub(super) const PREPARED: &str = "VirtualMachineInstance Migration Target Prepared.";
/// The libvirt daemon socket, relative to the launcher's run directory.
pub(super) const LIBVIRT_SOCKET: &str = "libvirt/virtqemud-sock";
/// libvirt's direct migration port and block migration port.
pub(super) const MIGRATION_PORTS: [u16; 2] = [49152, 49153];

/// `execute`: whether this node is the target, then `sync`.
pub(super) fn execute(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
) -> (SyncResult, Option<VirtualMachineInstance>) {
    cx.decision = Decision::MigrationNotInvolved;
    // The target controller's informer only holds VMIs labelled with this node as the target.
    let Some(vmi) = w
        .vmi
        .filter(|v| label(v, MIGRATION_TARGET_NODE_LABEL) == Some(w.node))
    else {
        return (Ok(()), None);
    };
    if view::is_final(vmi) || view::is_deleting(vmi) {
        cx.decision = Decision::MigrationTargetTerminated;
        cx.step(NodeStep::UnmountHotplugVolumes);
        cx.step(NodeStep::CloseLauncherClient);
        return (Ok(()), None);
    }
    if !w.facts.expectations_satisfied.unwrap_or(true) {
        cx.decision = Decision::WaitingForExpectations;
        return (Ok(()), None);
    }
    let domain = w.domain.filter(|d| !d.is_deleted());
    if let Some(d) = domain
        && !d.uid().is_empty()
        && d.uid() != view::uid(vmi)
    {
        cx.step(NodeStep::Cleanup {
            uid: d.uid().to_string(),
        });
        return (
            Err(format!(
                "had to delete stale domain (UID {}) that didn't match current VMI (UID {})",
                d.uid(),
                view::uid(vmi)
            )),
            None,
        );
    }
    if domain.is_some_and(|d| !d.is_alive()) && !abort_in_progress(vmi) {
        return (Ok(()), None);
    }
    if state(vmi).is_none() {
        return (Ok(()), None);
    }
    sync(w, cx, vmi, domain)
}

fn sync(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
    domain: Option<&Domain>,
) -> (SyncResult, Option<VirtualMachineInstance>) {
    let mut new = vmi.clone();
    if state(vmi).is_some_and(|m| is_done(Some(m))) {
        cx.decision = Decision::MigrationTargetFinalCleanup;
        let result = final_cleanup(w, cx, &mut new, domain);
        return (result, Some(new));
    }
    cx.decision = Decision::MigrationTargetSync;
    if needs_finalization(&new) && !active_on_target(domain) {
        // The launcher ended the migration but the domain does not run here: it was aborted.
        if let Some(m) = state_mut(&mut new) {
            m.failed = Some(true);
            m.completed = Some(true);
        }
    }
    let result = process(w, cx, &mut new);
    if let Err(e) = &result {
        cx.event("Warning", "SyncFailed", e.clone());
    }
    if let Err(e) = update_status(w, cx, &mut new, domain) {
        // KubeVirt returns before updating the VMI.
        return (Err(e), None);
    }
    (result, Some(new))
}

/// `migrationNeedsFinalization`: started and ended, neither completed nor failed yet.
fn needs_finalization(vmi: &VirtualMachineInstance) -> bool {
    state(vmi).is_some_and(|m| {
        m.start_timestamp.is_some()
            && m.end_timestamp.is_some()
            && m.completed != Some(true)
            && m.failed != Some(true)
    })
}

/// `domainIsActiveOnTarget`: running, or paused by the user.
fn active_on_target(domain: Option<&Domain>) -> bool {
    domain.is_some_and(|d| {
        d.status.status == "Running" || (d.status.status == "Paused" && d.status.reason == "User")
    })
}

/// `migrationProxyKey`: the VMI UID (the source's UID for a decentralized target over unix).
fn proxy_key(vmi: &VirtualMachineInstance) -> String {
    let unix = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_transport.as_deref())
        == Some("Unix");
    let source_uid = state(vmi)
        .and_then(|m| m.source_state.as_ref())
        .and_then(|s| s.virtual_machine_instance_uid.clone());
    match source_uid {
        Some(uid) if unix && view::is_migration_target(vmi) => uid,
        _ => view::uid(vmi).to_string(),
    }
}

/// The sockets the target proxy forwards into, relative to the launcher's run directory.
pub(super) fn target_sockets(vmi: &VirtualMachineInstance) -> Vec<String> {
    let key = proxy_key(vmi);
    let status = vmi.status.as_ref();
    let block = status.and_then(|s| s.migration_method.as_deref()) == Some("BlockMigration")
        || status
            .and_then(|s| s.migrated_volumes.as_ref())
            .is_some_and(|v| !v.is_empty());
    let ports = if block {
        &MIGRATION_PORTS[..]
    } else {
        &MIGRATION_PORTS[..1]
    };
    let mut sockets = vec![LIBVIRT_SOCKET.to_string()];
    sockets.extend(
        ports
            .iter()
            .map(|p| format!("kubevirt/migrationproxy/{key}-{p}-source.sock")),
    );
    sockets
}

/// `processVMI`: finalize, or prepare the target once.
fn process(w: &HandlerWorld<'_>, cx: &mut Ctx, vmi: &mut VirtualMachineInstance) -> SyncResult {
    if needs_finalization(vmi) {
        return finalize(w, cx, vmi);
    }
    if !w.facts.migration.target_listener_ports.is_empty() && !abort_in_progress(vmi) {
        // Prepared already: nothing to do until the migration ends.
        return Ok(());
    }
    launcher_client(w, vmi)?;
    if view::phase(vmi) == view::phases::WAITING_FOR_SYNC {
        if let Some(m) = state_mut(vmi) {
            m.start_timestamp = None;
        }
    } else if let Some(r) = check_launcher(w, cx) {
        return r;
    }
    if view::is_migrating(vmi, w.now.timestamp()) {
        return Ok(());
    }
    let f = w.facts;
    if !f.container_disks_ready.unwrap_or(true) && f.container_disk_error.is_none() {
        cx.add_after(1);
        return Ok(());
    }
    if let Some(e) = &f.container_disk_error {
        return Err(e.clone());
    }
    cx.step(NodeStep::MountContainerDisks);
    if let Some(e) = &f.mount_and_verify_error {
        return Err(e.clone());
    }
    cx.step(NodeStep::MountHotplugVolumes);
    match f.hotplug_mount_error.as_deref() {
        Some(e) if e.contains("waiting for hotplug") => {
            cx.add_after(1);
            return Ok(());
        }
        Some(e) => return Err(e.to_string()),
        None => {}
    }
    let networks: Vec<String> = vmi
        .spec
        .networks
        .iter()
        .flatten()
        .map(|n| n.name.clone())
        .collect();
    if !networks.is_empty() {
        cx.step(NodeStep::SetupNetworks { networks });
        if let Some(e) = &f.network_setup_error {
            return Err(format!(
                "failed to configure vmi network for migration target: {e}"
            ));
        }
    }
    cx.step(NodeStep::ClaimDevices {
        paths: flows::device_paths(vmi),
    });
    if let Some(e) = &f.claim_devices_error {
        return Err(e.clone());
    }
    cx.call(LauncherCall::SyncMigrationTarget);
    if let Some(e) = f.launcher_error(LauncherCall::SyncMigrationTarget.name()) {
        return Err(format!("syncing migration target failed: {e}"));
    }
    cx.step(NodeStep::StartTargetProxy {
        key: proxy_key(vmi),
        sockets: target_sockets(vmi),
    });
    if let Some(e) = &f.migration.target_proxy_error {
        return Err(format!("failed to handle post sync migration proxy: {e}"));
    }
    cx.event("Normal", "PreparingTarget", PREPARED);
    Ok(())
}

/// `finalizeMigration`: the domain runs here; tell the launcher, mark the migration completed.
fn finalize(w: &HandlerWorld<'_>, cx: &mut Ctx, vmi: &mut VirtualMachineInstance) -> SyncResult {
    const PREFIX: &str = "failed to finalize migration";
    let l = &w.facts.launcher;
    if l.gone || l.unresponsive {
        return Err(format!(
            "{PREFIX}: launcher client for vmi {} is unresponsive",
            view::uid(vmi)
        ));
    }
    if let Some(s) = vmi.status.as_mut() {
        if let Some(c) = s.conditions.as_mut() {
            c.retain(|c| c.r#type != "VolumesChange");
        }
        s.migrated_volumes = None;
    }
    cx.call(LauncherCall::FinalizeVirtualMachineMigration);
    if let Some(e) = w
        .facts
        .launcher_error(LauncherCall::FinalizeVirtualMachineMigration.name())
    {
        return Err(format!("{PREFIX}: {e}"));
    }
    if let Some(m) = state_mut(vmi) {
        m.completed = Some(true);
    }
    Ok(())
}

/// `finalCleanup`: the migration is over. Failed: let the target pod go and clean up locally;
/// succeeded: finalize. Either way stop the proxy, close the client, drop the target label.
fn final_cleanup(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) -> SyncResult {
    if domain.is_some_and(Domain::paused_failed_post_copy) {
        match view::phase(vmi) {
            view::phases::RUNNING => {
                // Only this pod's domain knows the post-copy failed; keep it until the VMI fails.
                cx.add_after(1);
                return Ok(());
            }
            view::phases::SUCCEEDED => {
                if let Some(s) = vmi.status.as_mut() {
                    s.phase = Some(view::phases::FAILED.to_string());
                }
            }
            _ => {}
        }
    }
    let key = proxy_key(vmi);
    let result = final_cleanup_calls(w, cx, vmi);
    // KubeVirt's deferred calls: close the client, then stop the proxy.
    cx.step(NodeStep::CloseLauncherClient);
    cx.step(NodeStep::StopTargetProxy { key });
    result?;
    let failed = state(vmi).is_some_and(|m| m.failed == Some(true));
    if let Some(l) = vmi.metadata.labels.as_mut() {
        l.remove(MIGRATION_TARGET_NODE_LABEL);
    }
    if !failed && let Some(a) = vmi.metadata.annotations.as_mut() {
        a.remove(CREATE_MIGRATION_TARGET_ANNOTATION);
    }
    Ok(())
}

fn final_cleanup_calls(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &VirtualMachineInstance,
) -> SyncResult {
    launcher_client(w, vmi)?;
    if state(vmi).is_some_and(|m| m.failed == Some(true)) {
        // Errors are ignored: the pod goes away anyway.
        cx.call(LauncherCall::SignalTargetPodCleanup);
        cx.step(NodeStep::UnmountHotplugVolumes);
        cx.step(NodeStep::Cleanup {
            uid: view::uid(vmi).to_string(),
        });
        return Ok(());
    }
    cx.call(LauncherCall::FinalizeVirtualMachineMigration);
    match w
        .facts
        .launcher_error(LauncherCall::FinalizeVirtualMachineMigration.name())
    {
        Some(e) => Err(e.to_string()),
        None => Ok(()),
    }
}

/// `updateStatus`: what the target reports into `migrationState`.
fn update_status(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) -> SyncResult {
    if state(vmi).is_some_and(|m| m.failed == Some(true)) {
        return Ok(());
    }
    let now = Time(w.now.timestamp());
    if let Some(m) = state_mut(vmi)
        && domain.is_some()
        && m.target_node_domain_detected != Some(true)
    {
        m.target_node_domain_detected = Some(true);
        if let Some(t) = m.target_state.as_mut() {
            t.domain_detected = Some(true);
        }
    }
    let newly_ready = active_on_target(domain)
        && state(vmi).is_some_and(|m| m.target_node_domain_ready_timestamp.is_none());
    if newly_ready {
        if let Some(m) = state_mut(vmi) {
            m.target_node_domain_ready_timestamp = Some(now.clone());
            if let Some(t) = m.target_state.as_mut() {
                t.domain_ready_timestamp = Some(now.clone());
            }
        }
        if let Some(c) = vmi.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            c.retain(|c| c.r#type != "MigrationRequired");
        }
    }
    let record = domain.and_then(|d| d.spec.metadata.kubevirt.migration.as_ref());
    if let Some(r) = record
        && let Some(end) = r.end_timestamp.as_deref().and_then(parse_time)
    {
        let start = r.start_timestamp.as_deref().and_then(parse_time);
        if active_on_target(domain) {
            ack_completion(w, cx, vmi, start, end);
        } else if let Some(m) = state_mut(vmi) {
            // Ended without the domain running here: QEMU's migration was aborted.
            m.end_timestamp = Some(Time(end));
            if m.start_timestamp.is_none() {
                m.start_timestamp = start.map(Time);
            }
            m.failed = Some(true);
            m.completed = Some(true);
        }
    }
    if view::is_migrating(vmi, w.now.timestamp()) && !abort_in_progress(vmi) {
        return Ok(());
    }
    let ports = &w.facts.migration.target_listener_ports;
    if ports.is_empty() {
        // The target proxy is not listening yet.
        cx.add_after(1);
        return Ok(());
    }
    let address = &w.facts.migration.migration_ip_address;
    if state(vmi).and_then(|m| m.target_node_address.as_deref()) != Some(address.as_str()) {
        publish_address(cx, vmi, address, ports);
    }
    if vmi
        .spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        == Some(true)
    {
        publish_topology(w, vmi)?;
    }
    Ok(())
}

/// Advertises where the source's proxy must connect.
fn publish_address(
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    address: &str,
    ports: &BTreeMap<String, u16>,
) {
    let list: Vec<&str> = ports.keys().map(String::as_str).collect();
    cx.event(
        "Normal",
        "PreparingTarget",
        format!(
            "Migration Target is listening at {address}, on ports: {}",
            list.join(",")
        ),
    );
    let published: BTreeMap<String, i32> = ports
        .iter()
        .map(|(k, v)| (k.clone(), i32::from(*v)))
        .collect();
    if let Some(m) = state_mut(vmi) {
        m.target_node_address = Some(address.to_string());
        m.target_direct_migration_node_ports = Some(published.clone());
        if let Some(t) = m.target_state.as_mut() {
            t.node_address = Some(address.to_string());
            t.direct_migration_node_ports = Some(published);
        }
    }
}

/// Dedicated-CPU VMIs: the source needs the target's CPU set and NUMA topology to rewrite the
/// domain before migrating.
fn publish_topology(w: &HandlerWorld<'_>, vmi: &mut VirtualMachineInstance) -> SyncResult {
    let f = &w.facts.migration;
    let cpus = f
        .target_cpu_set
        .clone()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| "failed to detect the target pod's CPU set (targetCPUSet)".to_string())?;
    let topology = f.target_node_topology.clone().ok_or_else(|| {
        "failed to detect the target node's topology (targetNodeTopology)".to_string()
    })?;
    if let Some(m) = state_mut(vmi) {
        m.target_cpu_set = Some(cpus.clone());
        m.target_node_topology = Some(topology.clone());
        if let Some(t) = m.target_state.as_mut() {
            t.cpu_set = Some(cpus);
            t.node_topology = Some(topology);
        }
    }
    Ok(())
}

/// `ackMigrationCompletion`: the domain runs here; this node owns the VMI from now on.
fn ack_completion(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    start: Option<k8s_openapi::jiff::Timestamp>,
    end: k8s_openapi::jiff::Timestamp,
) {
    if let Some(m) = state_mut(vmi) {
        if m.start_timestamp.is_none() {
            m.start_timestamp = start.map(Time);
        }
        m.end_timestamp = Some(Time(end));
    }
    let labels = vmi.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(NODE_NAME_LABEL.to_string(), w.node.to_string());
    labels.remove(OUTDATED_LAUNCHER_IMAGE_LABEL);
    if let Some(a) = vmi.metadata.annotations.as_mut() {
        a.remove(EVICTION_SOURCE_ANNOTATION);
    }
    let overhead = state(vmi).and_then(|m| m.target_memory_overhead.clone());
    if let Some(s) = vmi.status.as_mut() {
        s.launcher_container_image_version = None;
        s.node_name = Some(w.node.to_string());
        s.evacuation_node_name = None;
        s.migration_transport = Some("Unix".to_string());
        if let Some(o) = overhead {
            s.memory
                .get_or_insert_with(MemoryStatus::default)
                .memory_overhead = Some(o);
        }
    }
    cx.event(
        "Normal",
        "Migrated",
        format!("The VirtualMachineInstance migrated to node {}.", w.node),
    );
}
