//! VMI conditions the handler owns: LiveMigratable / StorageLiveMigratable (and the migration
//! method), AgentConnected / AgentVersionNotSupported, Paused, AccessCredentialsSynchronized and
//! Synchronized (sync failures).

use k8s_openapi::jiff::Timestamp;

use super::ctx::{Ctx, SyncResult};
use super::domain::Domain;
use super::plan::LauncherCall;
use super::status::now_value;
use super::view;
use super::{HandlerWorld, migratable};
use crate::api::{
    VirtualMachineInstance, VirtualMachineInstanceCondition, VirtualMachineInstanceStatus,
};

pub(super) const LIVE_MIGRATABLE: &str = "LiveMigratable";
pub(super) const STORAGE_LIVE_MIGRATABLE: &str = "StorageLiveMigratable";
pub(super) const AGENT_CONNECTED: &str = "AgentConnected";
pub(super) const UNSUPPORTED_AGENT: &str = "AgentVersionNotSupported";
pub(super) const PAUSED: &str = "Paused";
pub(super) const SYNCHRONIZED: &str = "Synchronized";
pub(super) const ACCESS_CREDENTIALS: &str = "AccessCredentialsSynchronized";

fn conds(status: &mut VirtualMachineInstanceStatus) -> &mut Vec<VirtualMachineInstanceCondition> {
    status.conditions.get_or_insert_with(Vec::new)
}

pub(super) fn get<'a>(
    status: &'a VirtualMachineInstanceStatus,
    kind: &str,
) -> Option<&'a VirtualMachineInstanceCondition> {
    status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.r#type == kind)
}

fn has(status: &VirtualMachineInstanceStatus, kind: &str) -> bool {
    get(status, kind).is_some()
}

fn remove(status: &mut VirtualMachineInstanceStatus, kind: &str) {
    if let Some(c) = status.conditions.as_mut() {
        c.retain(|c| c.r#type != kind);
    }
}

/// Conditions equal as Kubernetes' semantic DeepEqual sees them: a timestamp written as `null`
/// (Go's zero `metav1.Time`, which the API server hands back) is the same as none.
fn same_condition(
    a: &VirtualMachineInstanceCondition,
    b: &VirtualMachineInstanceCondition,
) -> bool {
    let time = |t: &Option<serde_json::Value>| t.as_ref().filter(|v| !v.is_null()).cloned();
    a.r#type == b.r#type
        && a.status == b.status
        && a.reason == b.reason
        && a.message == b.message
        && a.extra == b.extra
        && time(&a.last_probe_time) == time(&b.last_probe_time)
        && time(&a.last_transition_time) == time(&b.last_transition_time)
}

/// A condition with only type, status, reason and message set (no timestamps).
pub(super) fn bare(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> VirtualMachineInstanceCondition {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
    VirtualMachineInstanceCondition {
        r#type: kind.into(),
        status: status.into(),
        reason: opt(reason),
        message: opt(message),
        ..Default::default()
    }
}

/// Replaces a condition of the same type unless status and reason already match; appends otherwise.
fn update_condition(
    status: &mut VirtualMachineInstanceStatus,
    cond: VirtualMachineInstanceCondition,
) {
    let list = conds(status);
    match list.iter_mut().find(|c| c.r#type == cond.r#type) {
        Some(c) if c.status != cond.status || c.reason != cond.reason => *c = cond,
        Some(_) => {}
        None => list.push(cond),
    }
}

/// Refreshes every condition the handler owns.
pub(super) fn update(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    domain: Option<&Domain>,
) -> SyncResult {
    access_credentials(w, cx, vmi, domain);
    live_migration(w, cx, vmi);
    guest_agent(w, cx, vmi, domain)?;
    paused(w, vmi, domain);
    Ok(())
}

fn access_credentials(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    d: Option<&Domain>,
) {
    let Some(ac) = d.and_then(|d| d.spec.metadata.kubevirt.access_credential.as_ref()) else {
        return;
    };
    let want = if ac.succeeded { "True" } else { "False" };
    let status = vmi.status.get_or_insert_with(Default::default);
    let current = get(status, ACCESS_CREDENTIALS);
    let message = (!ac.message.is_empty()).then(|| ac.message.clone());
    if current.is_some_and(|c| c.status == want && c.message == message) {
        return;
    }
    remove(status, ACCESS_CREDENTIALS);
    let mut cond = bare(ACCESS_CREDENTIALS, want, "", &ac.message);
    cond.last_transition_time = Some(now_value(w.now.timestamp()));
    conds(status).push(cond);
    if ac.succeeded {
        let msg = if ac.message.is_empty() {
            "Access credentials sync successful.".to_string()
        } else {
            format!("Access credentials sync successful: {}", ac.message)
        };
        cx.event("Normal", "AccessCredentialsSyncSuccess", msg);
    } else {
        cx.event(
            "Warning",
            "AccessCredentialsSyncFailed",
            format!("Access credentials sync failed: {}", ac.message),
        );
    }
}

fn live_migration(w: &HandlerWorld<'_>, cx: &mut Ctx, vmi: &mut VirtualMachineInstance) {
    let verdict = migratable::assess(w.config, vmi);
    let status = vmi.status.get_or_insert_with(Default::default);
    let cond = verdict.live_condition.clone();
    match get(status, LIVE_MIGRATABLE) {
        None => conds(status).push(cond),
        Some(c) if !same_condition(c, &cond) => {
            remove(status, LIVE_MIGRATABLE);
            conds(status).push(cond);
        }
        Some(_) => {}
    }
    status.migration_method = Some(
        if verdict.block_migration {
            "BlockMigration"
        } else {
            "LiveMigration"
        }
        .into(),
    );
    update_condition(status, verdict.storage_condition);
    if verdict.live_condition.status == "False" && migratable::migratable_on_eviction(w.config, vmi)
    {
        let msg = verdict.live_condition.message.unwrap_or_default();
        cx.event(
            "Warning",
            "Migrated",
            format!("EvictionStrategy is set but vmi is not migratable; {msg}"),
        );
    }
}

fn guest_agent(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    vmi: &mut VirtualMachineInstance,
    d: Option<&Domain>,
) -> SyncResult {
    let connected = d.is_some_and(Domain::guest_agent_connected);
    let status = vmi.status.get_or_insert_with(Default::default);
    if connected && !has(status, AGENT_CONNECTED) {
        let mut c = bare(AGENT_CONNECTED, "True", "", "");
        c.last_probe_time = Some(now_value(w.now.timestamp()));
        conds(status).push(c);
    } else if !connected {
        remove(status, AGENT_CONNECTED);
    }
    if !has(status, AGENT_CONNECTED) {
        return Ok(());
    }
    cx.call(LauncherCall::GetGuestInfo);
    if let Some(e) = w.facts.launcher_error(LauncherCall::GetGuestInfo.name()) {
        return Err(e.to_string());
    }
    let info = w.facts.guest_info.clone().unwrap_or_default();
    let (supported, reason) = if info.supported_commands.is_empty() {
        let ok = w
            .config
            .supported_agent_versions
            .iter()
            .any(|re| unanchored_match(re, &info.guest_agent_version));
        (
            ok,
            format!(
                "Guest agent version '{}' is not supported",
                info.guest_agent_version
            ),
        )
    } else {
        migratable::agent_supported(vmi, &info.supported_commands)
    };
    let status = vmi.status.get_or_insert_with(Default::default);
    if supported {
        remove(status, UNSUPPORTED_AGENT);
    } else if !has(status, UNSUPPORTED_AGENT) {
        let mut c = bare(UNSUPPORTED_AGENT, "True", &reason, "");
        c.last_probe_time = Some(now_value(w.now.timestamp()));
        conds(status).push(c);
    }
    Ok(())
}

fn paused(w: &HandlerWorld<'_>, vmi: &mut VirtualMachineInstance, d: Option<&Domain>) {
    let Some(d) = d.filter(|d| d.status.status == "Paused") else {
        if let Some(s) = vmi.status.as_mut() {
            remove(s, PAUSED);
        }
        return;
    };
    let migration_paused = view::migration_state(vmi).is_some_and(|m| {
        m.mode.as_deref() == Some("Paused")
            && m.completed != Some(true)
            && m.source_node.as_deref() == Some(w.node)
            && m.target_node_address
                .as_deref()
                .is_some_and(|a| !a.is_empty())
    });
    let status = vmi.status.get_or_insert_with(Default::default);
    if has(status, PAUSED) {
        return;
    }
    let (reason, message) = match d.status.reason.as_str() {
        "Migration" if migration_paused => (
            "PausedByMigrationMonitor",
            "VMI was paused by the migration monitor",
        ),
        "User" => ("PausedByUser", "VMI was paused by user"),
        "IOError" => (
            "PausedIOError",
            "VMI was paused, low-level IO error detected",
        ),
        _ => return,
    };
    let mut c = bare(PAUSED, "True", reason, message);
    c.last_probe_time = Some(now_value(w.now.timestamp()));
    c.last_transition_time = Some(now_value(w.now.timestamp()));
    conds(status).push(c);
}

/// The `Synchronized` condition: False with the error while syncs fail, removed once one succeeds.
pub(super) fn check_failure(
    status: &mut VirtualMachineInstanceStatus,
    err: Option<&str>,
    reason: &str,
    now: Timestamp,
) {
    match err {
        Some(e) => {
            if get(status, SYNCHRONIZED)
                .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some(reason))
            {
                return;
            }
            remove(status, SYNCHRONIZED);
            let mut c = bare(SYNCHRONIZED, "False", reason, e);
            c.last_transition_time = Some(now_value(now));
            conds(status).push(c);
        }
        None => remove(status, SYNCHRONIZED),
    }
}

/// Unanchored match of the tiny regular-expression subset KubeVirt's agent version list uses
/// (literals, `.` and `*`), as Go's `regexp.MatchString` does it.
pub(super) fn unanchored_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    (0..=t.len()).any(|start| match_here(&p, &t[start..]))
}

fn match_here(p: &[char], t: &[char]) -> bool {
    match p {
        [] => true,
        [c, '*', rest @ ..] => {
            let mut i = 0;
            loop {
                if match_here(rest, &t[i..]) {
                    return true;
                }
                if i < t.len() && (*c == '.' || t[i] == *c) {
                    i += 1;
                } else {
                    return false;
                }
            }
        }
        [c, rest @ ..] => !t.is_empty() && (*c == '.' || t[0] == *c) && match_here(rest, &t[1..]),
    }
}
