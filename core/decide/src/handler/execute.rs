//! `execute()` and `sync()`: which branch one handler sync takes.

use super::ctx::{Ctx, SyncResult};
use super::domain::Domain;
use super::plan::{Decision, NodeStep};
use super::view::{self, phases};
use super::{HandlerWorld, flows, phase, status};
use crate::api::VirtualMachineInstance;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The VMI as the sync sees it: the stored one, or a stub named after the key when it is gone.
pub(super) struct Subject {
    pub vmi: VirtualMachineInstance,
    pub exists: bool,
}

fn stub_vmi(key: &str) -> VirtualMachineInstance {
    let (namespace, name) = key.split_once('/').unwrap_or(("", key));
    let metadata = ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..Default::default()
    };
    VirtualMachineInstance {
        metadata,
        ..Default::default()
    }
}

pub(super) fn execute(w: &HandlerWorld<'_>, cx: &mut Ctx) -> SyncResult {
    let exists = w.vmi.is_some();
    if exists && !w.facts.expectations_satisfied.unwrap_or(true) {
        cx.decision = Decision::WaitingForExpectations;
        return Ok(());
    }

    // A domain the launcher reported gone still tells us the UID it ran for.
    let (domain, cached_uid) = match w.domain {
        Some(d) if d.is_deleted() => (None, d.uid()),
        Some(d) => (Some(d), d.uid()),
        None => (None, ""),
    };

    let mut vmi = w.vmi.cloned().unwrap_or_else(|| stub_vmi(w.key));
    if !exists && !cached_uid.is_empty() {
        vmi.metadata.uid = Some(cached_uid.to_string());
    }
    if view::uid(&vmi).is_empty()
        && let Some(ghost) = w
            .facts
            .ghost_record_uid
            .as_deref()
            .filter(|u| !u.is_empty())
    {
        vmi.metadata.uid = Some(ghost.to_string());
    }

    if let (true, Some(d)) = (exists, domain)
        && d.uid() != view::uid(&vmi)
    {
        return stale_domain(w, cx, d);
    }

    if domain.is_some_and(Domain::migrated) {
        cx.decision = Decision::OrphanDelete;
        return flows::delete_vm(w, cx, &vmi);
    }

    if view::is_migrating(&vmi, w.now.timestamp()) && view::phase(&vmi) == phases::FAILED {
        cx.step(NodeStep::Cleanup {
            uid: view::uid(&vmi).to_string(),
        });
    }

    if !view::is_deleting(&vmi) && view::migration_in_progress(&vmi, domain) {
        cx.decision = Decision::MigrationInProgress;
        return Ok(());
    }
    if exists && !view::owned_by_node(&vmi, w.node) {
        cx.decision = Decision::NotOwnedByNode;
        return Ok(());
    }
    if exists && view::is_migration_source(&vmi) {
        cx.decision = Decision::MigrationSource;
        return Ok(());
    }

    sync(w, cx, Subject { vmi, exists }, domain)
}

/// The domain belongs to an older VMI with the same name: clean it up once its launcher is dead.
fn stale_domain(w: &HandlerWorld<'_>, cx: &mut Ctx, d: &Domain) -> SyncResult {
    let old = &w.facts.old_launcher;
    if let Some(e) = &old.unresponsive_error {
        cx.decision = Decision::StaleDomainWait;
        return Err(e.clone());
    }
    if old.not_initialized {
        cx.decision = Decision::StaleDomainWait;
        cx.add_after(1);
    } else if old.unresponsive || old.gone {
        cx.decision = Decision::StaleDomainCleanup;
        cx.step(NodeStep::Cleanup {
            uid: d.uid().to_string(),
        });
        cx.add_after(5);
    } else {
        cx.decision = Decision::StaleDomainWait;
    }
    Ok(())
}

fn sync(
    w: &HandlerWorld<'_>,
    cx: &mut Ctx,
    subject: Subject,
    domain: Option<&Domain>,
) -> SyncResult {
    let Subject { mut vmi, exists } = subject;
    if domain.is_some_and(|d| d.status.status == "Unknown") {
        cx.decision = Decision::DomainUnknown;
        return Ok(());
    }
    let old_status = vmi.status.clone();

    let domain_exists = domain.is_some();
    let alive = domain.is_some_and(Domain::is_alive);
    let irrecoverable = domain.is_some_and(Domain::paused_failed_post_copy);
    let is_final = view::is_final(&vmi);

    let mut should_shutdown = false;
    let mut should_delete = false;
    let mut should_update = false;

    let graceful = domain.is_some_and(Domain::marked_for_graceful_shutdown);
    if graceful && view::is_running(&vmi) {
        if alive {
            should_shutdown = true
        } else {
            should_delete = true
        }
    }
    if !exists || view::is_deleting(&vmi) {
        if alive {
            should_shutdown = true
        } else {
            should_delete = true
        }
    }
    if exists && is_final {
        should_delete = true;
    }
    if !alive && domain_exists && !is_final {
        should_delete = true;
    }
    if exists && !is_final {
        let phase = phase::calculate(w, cx, domain, &vmi)?;
        if view::phase(&vmi) == phase {
            should_update = true;
        }
        // A domain paused on an IO error is resumed by the next sync; retry with backoff.
        if should_update
            && domain.is_some_and(|d| d.status.status == "Paused" && d.status.reason == "IOError")
        {
            let (state, delay) =
                super::retry::IO_ERROR_RETRY.on_failure(cx.io_error_retry, w.now.unix());
            cx.io_error_retry = Some(state);
            if let Some(delay) = delay {
                should_update = false;
                cx.add_after(delay);
            }
        }
    }

    let sync_err: SyncResult = if should_shutdown {
        cx.decision = Decision::Shutdown;
        flows::shutdown(w, cx, &vmi, domain, true)
    } else if irrecoverable {
        cx.decision = Decision::DestroyIrrecoverable;
        flows::shutdown(w, cx, &vmi, domain, false)
            .and(Err(flows::IRRECOVERABLE_POST_COPY.to_string()))
    } else if should_delete {
        cx.decision = Decision::Delete;
        flows::delete_vm(w, cx, &vmi)
    } else if should_update {
        cx.decision = Decision::Update;
        flows::update(w, cx, &vmi, domain)
    } else {
        cx.decision = Decision::None;
        Ok(())
    };

    if let Err(e) = &sync_err
        && !is_final
    {
        cx.event("Warning", "SyncFailed", e.clone());
    }

    if exists {
        status::update(
            w,
            cx,
            old_status,
            &mut vmi,
            domain,
            sync_err.as_ref().err().map(String::as_str),
        )?;
    }
    sync_err
}
