//! The VMI status written after a sync (KubeVirt's `updateVMIStatus`): fields copied from the
//! domain, the phase, conditions, the sync-failure condition, phase transition timestamps.

use super::ctx::{Ctx, SyncResult};
use super::domain::Domain;
use super::flows::{IRRECOVERABLE_POST_COPY, SECURE_BOOT_PREFIX};
use super::view::{self, phases};
use super::{HandlerWorld, conditions, netstat, phase};
use crate::api::{
    Machine, MemoryStatus, VirtualMachineInstance, VirtualMachineInstanceGuestOSInfo,
    VirtualMachineInstancePhaseTransitionTimestamp, VirtualMachineInstanceStatus,
};
use crate::quantity::{Quantity, QuantityFormat};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kvrs_api::time::format_time;

/// Refreshes the status of an existing, non-final VMI and records the write when it changed.
pub(super) fn update(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    old: Option<VirtualMachineInstanceStatus>,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
    sync_err: Option<&str>,
) -> SyncResult {
    if view::is_final(vmi) {
        return Ok(());
    }
    from_domain(w, cx, vmi, domain);
    let phase = phase::calculate(w, cx, domain, vmi)?;
    vmi.status.get_or_insert_with(Default::default).phase = (!phase.is_empty()).then_some(phase);
    conditions::update(w, cx, vmi, domain)?;
    handle_sync_error(w, vmi, sync_err);

    let old_phase = view::status_phase(old.as_ref()).to_string();
    let new_phase = view::phase(vmi).to_string();
    let status = vmi.status.get_or_insert_with(Default::default);
    if old_phase != new_phase {
        let stamps = status
            .phase_transition_timestamps
            .get_or_insert_with(Vec::new);
        if !stamps
            .iter()
            .any(|s| s.phase.as_deref() == Some(new_phase.as_str()))
        {
            stamps.push(VirtualMachineInstancePhaseTransitionTimestamp {
                phase: Some(new_phase.clone()),
                phase_transition_timestamp: Some(Time(w.now.timestamp())),
                ..Default::default()
            });
        }
    }
    if !semantically_equal(old.as_ref(), Some(status)) {
        cx.status = Some(status.clone());
    }
    if old_phase != new_phase {
        match new_phase.as_str() {
            phases::RUNNING => cx.event("Normal", "Started", "VirtualMachineInstance started."),
            phases::SUCCEEDED => cx.event(
                "Normal",
                "Stopped",
                "The VirtualMachineInstance was shut down.",
            ),
            phases::FAILED => cx.event("Warning", "Stopped", "The VirtualMachineInstance crashed."),
            _ => {}
        }
    }
    Ok(())
}

/// Errors that make the VMI fail for good, and the `Synchronized` condition for any error.
fn handle_sync_error(w: &HandlerWorld<'_>, vmi: &mut VirtualMachineInstance, err: Option<&str>) {
    let status = vmi.status.get_or_insert_with(Default::default);
    if let Some(e) = err
        && (e == IRRECOVERABLE_POST_COPY || e.starts_with(SECURE_BOOT_PREFIX))
    {
        status.phase = Some(phases::FAILED.into());
    }
    conditions::check_failure(
        status,
        err,
        "Synchronizing with the Domain failed.",
        w.now.timestamp(),
    );
}

/// Copies what the domain knows into the status (guest OS, disk targets, machine type, memory,
/// interfaces, freeze state).
fn from_domain(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) {
    let status = vmi.status.get_or_insert_with(Default::default);
    if let Some(ctx) = &w.facts.selinux_context {
        status.selinux_context = Some(ctx.clone());
    }
    if let Some(d) = domain {
        guest_os_info(status, d);
    }
    super::hotplug::update_volume_statuses(w, cx, vmi, domain);
    let status = vmi.status.get_or_insert_with(Default::default);
    if let Some(d) = domain {
        let fs = d.status.fs_freeze_status.status.as_str();
        if !fs.is_empty() {
            status.fs_freeze_status = (fs != "thawed").then(|| fs.to_string());
        }
        if !d.spec.os.r#type.machine.is_empty() {
            let m = status.machine.get_or_insert_with(Machine::default);
            m.r#type = Some(d.spec.os.r#type.machine.clone());
        }
        if let Some(mem) = &d.spec.current_memory
            && let Some(q) = libvirt_quantity(mem.value, &mem.unit)
        {
            status
                .memory
                .get_or_insert_with(MemoryStatus::default)
                .guest_current = Some(q);
        }
    }
    netstat::update(w, vmi, domain);
}

fn guest_os_info(status: &mut VirtualMachineInstanceStatus, d: &Domain) {
    let os = &d.status.os_info;
    let current = status
        .guest_os_info
        .as_ref()
        .and_then(|g| g.name.as_deref())
        .unwrap_or("");
    if os.name.is_empty() || current == os.name {
        return;
    }
    let some = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let info = status
        .guest_os_info
        .get_or_insert_with(VirtualMachineInstanceGuestOSInfo::default);
    info.name = some(&os.name);
    info.version = some(&os.version);
    info.kernel_release = some(&os.kernel_release);
    info.pretty_name = some(&os.pretty_name);
    info.version_id = some(&os.version_id);
    info.kernel_version = some(&os.kernel_version);
    info.machine = some(&os.machine);
    info.id = some(&os.id);
}

/// A libvirt memory amount as a Kubernetes quantity.
fn libvirt_quantity(value: u64, unit: &str) -> Option<Quantity> {
    let v = i64::try_from(value).ok()?;
    let (mult, format): (i64, QuantityFormat) = match unit {
        "b" | "bytes" => (1, QuantityFormat::BinarySI),
        "KB" => (1_000, QuantityFormat::DecimalSI),
        "MB" => (1_000_000, QuantityFormat::DecimalSI),
        "GB" => (1_000_000_000, QuantityFormat::DecimalSI),
        "TB" => (1_000_000_000_000, QuantityFormat::DecimalSI),
        "k" | "KiB" => (1 << 10, QuantityFormat::BinarySI),
        "M" | "MiB" => (1 << 20, QuantityFormat::BinarySI),
        "G" | "GiB" => (1 << 30, QuantityFormat::BinarySI),
        "T" | "TiB" => (1 << 40, QuantityFormat::BinarySI),
        _ => return None,
    };
    Some(Quantity::from_value(v.checked_mul(mult)?, format))
}

/// Equality as Kubernetes' semantic DeepEqual sees a status: a missing list or map equals an
/// empty one, an empty guest OS info equals none, and a condition timestamp written as `null`
/// (Go's zero time) equals an absent one. Compared on the typed value (no JSON round
/// trip: this runs on every sync); nested values are written canonically by the decision itself.
pub fn semantically_equal(
    a: Option<&VirtualMachineInstanceStatus>,
    b: Option<&VirtualMachineInstanceStatus>,
) -> bool {
    if a == b {
        return true;
    }
    let empty = VirtualMachineInstanceStatus::default();
    canonical(a.unwrap_or(&empty)) == canonical(b.unwrap_or(&empty))
}

fn canonical(s: &VirtualMachineInstanceStatus) -> VirtualMachineInstanceStatus {
    fn vec<T>(v: &mut Option<Vec<T>>) {
        if v.as_ref().is_some_and(Vec::is_empty) {
            *v = None;
        }
    }
    let mut c = s.clone();
    // Go's zero metav1.Time is written as `null`; absent and null are the same time.
    for cond in c.conditions.iter_mut().flatten() {
        for t in [&mut cond.last_probe_time, &mut cond.last_transition_time] {
            if t.as_ref().is_some_and(serde_json::Value::is_null) {
                *t = None;
            }
        }
    }
    vec(&mut c.conditions);
    vec(&mut c.interfaces);
    vec(&mut c.volume_status);
    vec(&mut c.phase_transition_timestamps);
    vec(&mut c.migrated_volumes);
    if c.active_pods.as_ref().is_some_and(|m| m.is_empty()) {
        c.active_pods = None;
    }
    if c.guest_os_info
        .as_ref()
        .is_some_and(|g| *g == VirtualMachineInstanceGuestOSInfo::default())
    {
        c.guest_os_info = None;
    }
    if c.phase.as_deref() == Some("") {
        c.phase = None;
    }
    c
}

/// Removes nulls, empty lists and empty objects, recursively (Go's `omitempty` view of JSON).
pub fn prune_empty(v: &mut serde_json::Value) {
    use serde_json::Value;
    let empty = |v: &Value| match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    };
    match v {
        Value::Object(map) => {
            for child in map.values_mut() {
                prune_empty(child);
            }
            map.retain(|_, c| !empty(c));
        }
        Value::Array(items) => items.iter_mut().for_each(prune_empty),
        _ => {}
    }
}

/// The current time as a condition timestamp.
pub(super) fn now_value(w_now: k8s_openapi::jiff::Timestamp) -> serde_json::Value {
    serde_json::Value::String(format_time(w_now))
}
