//! VM conditions: Ready mirrored from the VMI, Failure from the sync error, the VMI's other
//! conditions copied through, and RestartRequired kept by the restart check.

use serde_json::Value;

use super::SyncError;
use crate::api::{VirtualMachineCondition, VirtualMachineInstance, VirtualMachineStatus};
use crate::meta;
use crate::vmi_state as state;

/// Conditions the VM owns itself rather than copying from the VMI.
const NOT_COPIED: [&str; 3] = ["Ready", "Failure", "RestartRequired"];

/// Sets `cond` unless a condition of the same type with the same status and reason is already
/// there (then its timestamps are kept: a condition only transitions when its meaning changes).
pub(crate) fn update(st: &mut VirtualMachineStatus, cond: VirtualMachineCondition) {
    let conds = st.conditions.get_or_insert_with(Vec::new);
    match conds.iter_mut().find(|c| c.r#type == cond.r#type) {
        Some(c) => {
            if c.status != cond.status || c.reason != cond.reason {
                *c = cond;
            }
        }
        None => conds.push(cond),
    }
}

/// Removes the condition of type `t`.
pub(crate) fn remove(st: &mut VirtualMachineStatus, t: &str) {
    if let Some(conds) = st.conditions.as_mut() {
        conds.retain(|c| c.r#type != t);
    }
}

fn time_or_null(v: &Option<Value>) -> Option<Value> {
    Some(v.clone().unwrap_or(Value::Null))
}

fn cond(t: &str, status: &str, reason: &str, message: &str) -> VirtualMachineCondition {
    VirtualMachineCondition {
        r#type: t.into(),
        status: status.into(),
        reason: Some(reason.to_string()).filter(|s| !s.is_empty()),
        message: Some(message.to_string()).filter(|s| !s.is_empty()),
        ..Default::default()
    }
}

/// Brings the VM's conditions in line with the VMI and the sync outcome.
pub(crate) fn sync_conditions(
    st: &mut VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
    sync_err: Option<&SyncError>,
    now: i64,
) {
    // Ready persists whether or not a VMI exists.
    let ready = match vmi {
        None => {
            let mut c = cond("Ready", "False", "VMINotExists", "VMI does not exist");
            c.last_probe_time = Some(meta::time_json(now));
            c.last_transition_time = Some(meta::time_json(now));
            c
        }
        Some(v) => match state::condition(v, "Ready") {
            None => {
                let mut c = cond(
                    "Ready",
                    "False",
                    "VMIConditionMissing",
                    "VMI is missing the Ready condition",
                );
                c.last_probe_time = Some(meta::time_json(now));
                c.last_transition_time = Some(meta::time_json(now));
                c
            }
            Some(rc) => VirtualMachineCondition {
                r#type: "Ready".into(),
                status: rc.status.clone(),
                reason: rc.reason.clone().filter(|s| !s.is_empty()),
                message: rc.message.clone().filter(|s| !s.is_empty()),
                last_probe_time: time_or_null(&rc.last_probe_time),
                last_transition_time: time_or_null(&rc.last_transition_time),
                ..Default::default()
            },
        },
    };
    update(st, ready);

    match sync_err {
        None => remove(st, "Failure"),
        Some(e) => {
            let mut c = cond("Failure", "True", &e.reason, &e.message);
            c.last_probe_time = Some(Value::Null);
            c.last_transition_time = Some(meta::time_json(now));
            update(st, c);
        }
    }

    let Some(vmi) = vmi else { return };
    let vmi_conds = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    for c in vmi_conds
        .iter()
        .filter(|c| !NOT_COPIED.contains(&c.r#type.as_str()))
    {
        update(
            st,
            VirtualMachineCondition {
                r#type: c.r#type.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().filter(|s| !s.is_empty()),
                message: c.message.clone().filter(|s| !s.is_empty()),
                last_probe_time: time_or_null(&c.last_probe_time),
                last_transition_time: time_or_null(&c.last_transition_time),
                ..Default::default()
            },
        );
    }
    if let Some(conds) = st.conditions.as_mut() {
        conds.retain(|c| {
            NOT_COPIED.contains(&c.r#type.as_str())
                || vmi_conds.iter().any(|v| v.r#type == c.r#type)
        });
    }
}
