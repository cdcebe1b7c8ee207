//! The VM status: created/ready, generations, run strategy, state-change requests, start
//! failures, conditions and the printable status — written as a JSON patch of the fields that
//! changed, each tested against the value the decision saw.

use serde_json::Value;

use super::{
    Reconcile, RunStrategy, SyncError, VM_GENERATION_ANNOTATION, backoff, conditions, finalizer,
    run_strategy, start,
};
use crate::api::{
    VirtualMachineCondition, VirtualMachineInstance, VirtualMachineSpec,
    VirtualMachineStartFailure, VirtualMachineStatus,
};
use crate::small_json::ScanPointer;
use crate::vmi_state::{self as state, phase};
use crate::{meta, patch};

/// Computes the status, records its write when it changed, and removes the controller finalizer
/// from a final VMI once its outcome is recorded. Returns the status when written.
pub(super) fn update_status(
    r: &mut Reconcile<'_, '_>,
    sync_err: Option<&SyncError>,
) -> Option<Value> {
    let mut st = r.vm.status.clone().unwrap_or_default();
    let created = r.vmi.is_some();
    st.created = created.then_some(true);
    let mut ready = false;
    if let Some(v) = r.vmi.as_ref() {
        ready = state::has_condition_status(v, "Ready", "True");
        sync_generation_info(r, &mut st);
    }
    st.ready = ready.then_some(true);
    // Borrowed out of the working state for the rest of the step (and put back at its end)
    // instead of copied: the generation step above only touched the VMI's generation
    // annotation, which nothing below reads.
    let vmi = r.vmi.take();

    if let Ok(rs) = RunStrategy::of(r.w.vm)
        && (st.run_strategy.as_deref().is_some_and(|s| !s.is_empty()) || created)
    {
        st.run_strategy = Some(rs.as_str().into());
    }

    if let Some(requests) = st.volume_requests.as_mut() {
        super::hotplug::trim_done_volume_requests(r.vm.spec.template.spec.as_ref(), requests);
        if requests.is_empty() {
            st.volume_requests = None;
        }
    }

    if trim_first_request_needed(&st, vmi.as_deref())
        && let Some(reqs) = st.state_change_requests.as_mut()
    {
        reqs.remove(0);
    }

    sync_start_failure(r, &mut st, vmi.as_deref());
    conditions::sync_conditions(&mut st, vmi.as_deref(), sync_err, r.w.now.unix());
    st.printable_status = Some(printable_status(r, &st, vmi.as_deref()).into());
    if st.state_change_requests.as_ref().is_some_and(Vec::is_empty) {
        st.state_change_requests = None;
    }
    if st.conditions.as_ref().is_some_and(Vec::is_empty) {
        st.conditions = None;
    }

    let mut written = None;
    // Equal typed statuses serialize equally, so only a typed difference needs the JSON
    // comparison (which ignores zero values) to tell whether anything is written.
    // Each side is serialised once: the new status is what gets written, and the cached one is
    // the stored status the patch tests against unless a write earlier in the plan changed it.
    let mut new_json = None;
    let unchanged = r.w.vm.status.as_ref() == Some(&st) || {
        let orig =
            r.w.vm
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or(Value::Null);
        let new = serde_json::to_value(&st).unwrap_or(Value::Null);
        let same = meta::eq_without_zero_values(&new, &orig);
        if r.stored_status.is_none() {
            r.stored_status = Some(orig);
        }
        new_json = Some(new);
        same
    };
    if !unchanged {
        let new = new_json.unwrap_or_else(|| serde_json::to_value(&st).unwrap_or(Value::Null));
        let ops = patch::field_ops("/status", Some(r.stored_status()), &new);
        if !ops.is_empty() {
            let write = r.vm_patch(Value::Array(ops)).on_subresource("status");
            r.plan.push_write(write);
        }
        r.stored_status = Some(new.clone());
        written = Some(new);
    }
    r.vm.status = Some(st);

    if let Some(v) = vmi.as_ref() {
        let synced_deleted = state::phase_of(v) == phase::WAITING_FOR_SYNC && state::is_deleting(v);
        let has_finalizers = v
            .metadata
            .finalizers
            .as_ref()
            .is_some_and(|f| !f.is_empty());
        if (state::is_final(v) || synced_deleted) && has_finalizers {
            finalizer::remove_vmi_finalizer(r, v);
        }
    }
    r.vmi = vmi;
    written
}

/// `observedGeneration` from the VMI's generation annotation (back-filled from its revision when
/// missing) and `desiredGeneration` from the VM.
fn sync_generation_info(r: &mut Reconcile<'_, '_>, st: &mut VirtualMachineStatus) {
    let Some(current) = r.vmi.as_ref() else {
        return;
    };
    let mut generation = meta::annotation(&current.metadata, VM_GENERATION_ANNOTATION)
        .and_then(|g| g.parse::<i64>().ok());
    if generation.is_none() {
        generation = start::revision_generation(r, current);
        if let Some(g) = generation {
            start::patch_generation_annotation(r, g);
        }
    }
    if let Some(g) = generation {
        st.observed_generation = Some(g);
        st.desired_generation = r.vm.metadata.generation;
    }
}

/// Whether the first state-change request has been carried out (or can never be) and goes.
fn trim_first_request_needed(
    st: &VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
) -> bool {
    let Some(req) = st.state_change_requests.as_ref().and_then(|r| r.first()) else {
        return false;
    };
    match req.action.as_str() {
        "Stop" => match vmi {
            None => true,
            Some(v) => match req.uid.as_deref() {
                None => true,
                Some(uid) => uid != meta::uid(&v.metadata),
            },
        },
        "Start" => vmi.is_some_and(|v| !state::is_deleting(v) && !state::is_final(v)),
        _ => false,
    }
}

/// Counts VMIs that failed before ever running and sets the retry time, or clears the record
/// once a VMI ran (or the strategy does not restart anyway).
fn sync_start_failure(
    r: &Reconcile<'_, '_>,
    st: &mut VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
) {
    let restarts = RunStrategy::of(&r.vm).map(|s| s.restarts_failed_starts());
    let clear = vmi.is_some_and(state::was_ever_running) || restarts == Ok(false);
    if clear {
        st.start_failure = None;
        return;
    }
    let Some(v) = vmi.filter(|v| state::is_final(v)) else {
        return;
    };
    let uid = meta::uid(&v.metadata);
    if st
        .start_failure
        .as_ref()
        .and_then(|f| f.last_failed_vmiuid.as_deref())
        == Some(uid)
    {
        return;
    }
    let count = st
        .start_failure
        .as_ref()
        .map_or(1, |f| i64::from(f.consecutive_fail_count.unwrap_or(0)) + 1);
    let delay = backoff::start_backoff_seconds(count, backoff::MAX_DELAY_SECONDS, r.w.jitter);
    st.start_failure = Some(VirtualMachineStartFailure {
        consecutive_fail_count: i32::try_from(count).ok(),
        last_failed_vmiuid: Some(uid.to_string()),
        retry_after_timestamp: meta::time_at(r.w.now.unix() + delay),
        ..Default::default()
    });
}

/// The one-word status `kubectl get vm` shows; the first matching rule wins.
fn printable_status(
    r: &Reconcile<'_, '_>,
    st: &VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
) -> &'static str {
    let vm = &r.vm;
    let start_expected = r.pending.creations > 0;
    let stop_expected = r.pending.deletions > 0;
    let running = vmi.is_some_and(|v| state::phase_of(v) == phase::RUNNING);
    let paused = vmi.is_some_and(|v| state::has_condition_status(v, "Paused", "True"));
    let sync_reason = |reason: &str| {
        vmi.is_some_and(|v| state::has_condition_status_reason(v, "Synchronized", "False", reason))
    };
    let strategy = RunStrategy::of(vm).ok();
    let volumes = vm
        .spec
        .template
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();

    if vm.metadata.deletion_timestamp.is_some() {
        return "Terminating";
    }
    if vmi.is_some_and(|v| !state::is_final(v) && (state::is_deleting(v) || stop_expected)) {
        return "Stopping";
    }
    if vmi.is_some_and(|v| state::is_migrating(v, r.w.now.unix())) {
        return "Migrating";
    }
    if running && paused {
        return "Paused";
    }
    if running {
        return "Running";
    }
    if sync_reason("FailedPvcNotFound") {
        return "ErrorPvcNotFound";
    }
    if data_volume_error(r, &volumes) {
        return "DataVolumeError";
    }
    if vmi.is_some_and(|v| {
        state::has_condition_status_reason(v, "PodScheduled", "False", "Unschedulable")
    }) {
        return "ErrorUnschedulable";
    }
    if data_volume_provisioning(r, &volumes) {
        return "Provisioning";
    }
    if run_strategy::is_set_to_start(vm, vmi) && unbound_pvc(r, &volumes) {
        return "WaitingForVolumeBinding";
    }
    if sync_reason("ErrImagePull") {
        return "ErrImagePull";
    }
    if sync_reason("ImagePullBackOff") {
        return "ImagePullBackOff";
    }
    let starting = match vmi {
        None => start_expected,
        Some(v) => {
            state::is_unprocessed(v)
                || matches!(state::phase_of(v), phase::SCHEDULING | phase::SCHEDULED)
        }
    };
    if starting {
        return "Starting";
    }
    let crash_loop = (vmi.is_none() || vmi.is_some_and(state::is_final))
        && !start_expected
        && st
            .start_failure
            .as_ref()
            .and_then(|f| f.consecutive_fail_count)
            .unwrap_or(0)
            > 0
        && strategy.is_some_and(|s| s.restarts_failed_starts());
    if crash_loop {
        return "CrashLoopBackOff";
    }
    let stopped = match vmi {
        Some(v) => state::is_final(v),
        None => !start_expected,
    };
    if stopped {
        return "Stopped";
    }
    let waiting = vmi.is_none_or(|v| state::phase_of(v) == phase::WAITING_FOR_SYNC);
    if waiting && strategy == Some(RunStrategy::WaitAsReceiver) {
        return "WaitingForReceiver";
    }
    "Unknown"
}

/// The cached DataVolumes the volumes name (volumes whose DataVolume is not cached are skipped).
fn data_volumes_of<'a>(
    r: &'a Reconcile<'_, '_>,
    volumes: &'a [crate::api::Volume],
) -> impl Iterator<Item = &'a Value> + 'a {
    let ns = r.ns();
    volumes
        .iter()
        .filter_map(|v| v.data_volume.as_ref())
        .filter_map(move |d| meta::find_json(r.w.data_volumes, &ns, &d.name))
}

fn data_volume_error(r: &Reconcile<'_, '_>, volumes: &[crate::api::Volume]) -> bool {
    data_volumes_of(r, volumes).any(|dv| {
        if dv.at("/status/phase").and_then(Value::as_str) == Some("Failed") {
            return true;
        }
        meta::json_condition(dv, "Running").is_some_and(|c| {
            c["status"] == "False" && (c["reason"] == "Error" || c["reason"] == "ImagePullFailed")
        })
    })
}

fn data_volume_provisioning(r: &Reconcile<'_, '_>, volumes: &[crate::api::Volume]) -> bool {
    data_volumes_of(r, volumes).any(|dv| {
        let phase = dv
            .at("/status/phase")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if matches!(phase, "Succeeded" | "PendingPopulation") {
            return false;
        }
        let bound = meta::json_condition(dv, "Bound").is_some_and(|c| c["status"] == "True");
        bound || phase != "WaitForFirstConsumer"
    })
}

fn unbound_pvc(r: &Reconcile<'_, '_>, volumes: &[crate::api::Volume]) -> bool {
    volumes
        .iter()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|p| p.claim_name.clone())
                .or_else(|| v.data_volume.as_ref().map(|d| d.name.clone()))
        })
        .any(|claim| {
            meta::find(r.w.pvcs, &r.ns(), &claim).is_some_and(|pvc| {
                pvc.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound")
            })
        })
}

/// Sets or clears `RestartRequired`: set when the template spec differs from the one the running
/// VMI was started from in a field that cannot be applied live.
pub(super) fn sync_restart_required(
    r: &mut Reconcile<'_, '_>,
    started: Option<&VirtualMachineSpec>,
) {
    let Some(started) = started else { return };
    let empty;
    let current = match r.vm.spec.template.spec.as_ref() {
        Some(s) => s,
        None => {
            empty = crate::api::VirtualMachineInstanceSpec::default();
            &empty
        }
    };
    let mut last = started.template.spec.clone().unwrap_or_default();
    // Hotplug volumes and their disks come and go without a restart.
    let migration = r.vm.spec.update_volumes_strategy.as_deref() == Some("Migration");
    let (volumes_live, disks_live) = super::hotplug::live_updatable(&last, current, migration);
    if volumes_live {
        last.volumes = current.volumes.clone();
    }
    if disks_live {
        last.domain.devices.disks = current.domain.devices.disks.clone();
    }
    if r.w.config.live_update {
        if let (Some(l), Some(c)) = (last.domain.cpu.as_mut(), current.domain.cpu.as_ref()) {
            l.sockets = c.sockets;
        }
        if let Some(guest) = current.domain.memory.as_ref().and_then(|m| m.guest.clone()) {
            last.domain
                .memory
                .get_or_insert_with(Default::default)
                .guest = Some(guest);
        }
        last.node_selector = current.node_selector.clone();
        last.affinity = current.affinity.clone();
        last.tolerations = current.tolerations.clone();
    }
    // Interface hotplug/unplug is live-updatable; treat network changes as not needing a restart.
    last.domain.devices.interfaces = current.domain.devices.interfaces.clone();
    last.networks = current.networks.clone();
    let vmi_uuid = r
        .vmi
        .as_ref()
        .and_then(|v| v.spec.domain.firmware.as_ref())
        .and_then(|f| f.uuid.clone());
    let cur_uuid = current
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.uuid.clone());
    if vmi_uuid.is_some() && vmi_uuid == cur_uuid {
        last.domain
            .firmware
            .get_or_insert_with(Default::default)
            .uuid = cur_uuid;
    }
    // Equal typed specs serialize equally; only a typed difference needs the JSON comparison.
    let json =
        |s: &crate::api::VirtualMachineInstanceSpec| serde_json::to_value(s).unwrap_or_default();
    let differs = last != *current && !meta::eq_without_zero_values(&json(&last), &json(current));
    let st = r.vm.status.get_or_insert_with(Default::default);
    if differs {
        conditions::update(
            st,
            VirtualMachineCondition {
                r#type: "RestartRequired".into(),
                status: "True".into(),
                message: Some("a non-live-updatable field was changed in the template spec".into()),
                last_probe_time: Some(Value::Null),
                last_transition_time: Some(meta::time_json(r.w.now.unix())),
                ..Default::default()
            },
        );
    } else {
        conditions::remove(st, "RestartRequired");
    }
}
