//! The migration's I/O: libvirt calls on the source (migrate, monitor, abort) and the target
//! (prepare, watch the incoming domain), and the migration metadata the handler reads in the
//! domain's `Spec.Metadata.KubeVirt.Migration` (KubeVirt's launcher keeps it in its metadata
//! cache and sends a domain event on each change; so does this one).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::Domain;
use kvrs_converter::domain::MigrationMetadata;
use tokio::sync::mpsc::WeakUnboundedSender;

use super::monitor::{Action, Monitor};
use super::{DiskFacts, MigrationError, MigrationOptions, ParamsInput};
use crate::events::Notice;
use crate::libvirt::{Connection, DomainRef, Libvirt, LibvirtError};
use crate::log;
use crate::state::rfc3339_now;

/// How often the source's monitor polls the job (KubeVirt: 400 ms).
const MONITOR_EVERY: Duration = Duration::from_millis(400);
/// How often the target looks for the end of the incoming migration.
const TARGET_POLL_EVERY: Duration = Duration::from_millis(200);
/// How long an abort may wait for libvirt (KubeVirt: 30 s).
const ABORT_TIMEOUT: Duration = Duration::from_secs(30);
/// `VIR_DOMAIN_JOB_UNBOUNDED`: a migration job in flight.
const JOB_UNBOUNDED: i32 = 2;
/// `VIR_DOMAIN_JOB_BOUNDED`.
const JOB_BOUNDED: i32 = 1;

/// The migration metadata and the way to tell the handler it changed.
#[derive(Default)]
pub struct Tracker {
    metadata: Mutex<Option<MigrationMetadata>>,
    notices: OnceLock<WeakUnboundedSender<Notice>>,
    /// The abort in flight: the migration's result waits for it (KubeVirt's `abortWg`).
    abort: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Tracker {
    /// The metadata as it is now.
    pub fn snapshot(&self) -> Option<MigrationMetadata> {
        self.metadata.lock().ok().and_then(|m| m.clone())
    }

    /// Connects the handler's notification queue.
    pub(crate) fn attach(&self, queue: &tokio::sync::mpsc::UnboundedSender<Notice>) {
        let _ = self.notices.set(queue.downgrade());
    }

    fn update<T>(&self, f: impl FnOnce(&mut Option<MigrationMetadata>) -> T) -> T {
        let out = match self.metadata.lock() {
            Ok(mut m) => f(&mut m),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        };
        if let Some(q) = self.notices.get().and_then(|q| q.upgrade()) {
            let _ = q.send(Notice::Refresh(None));
        }
        out
    }

    fn set_abort_status(&self, status: &str) {
        self.update(|m| {
            if let Some(m) = m {
                m.abort_status = Some(status.to_string());
            }
        });
    }

    fn set_mode(&self, mode: &str) {
        self.update(|m| {
            if let Some(m) = m {
                m.mode = Some(mode.to_string());
            }
        });
    }

    fn finish(&self, failure: Option<&str>) {
        self.update(|m| {
            if let Some(m) = m {
                super::finish(m, failure, rfc3339_now());
            }
        });
    }

    /// Records the start of `uid` unless it already runs; an error if it already ran.
    fn begin(&self, uid: &str) -> Result<bool, MigrationError> {
        let current = self.snapshot();
        match super::initialize(current.as_ref(), uid, rfc3339_now())? {
            None => Ok(false),
            Some(new) => {
                self.update(|m| *m = Some(new));
                Ok(true)
            }
        }
    }

    fn abort_in_progress(&self) -> bool {
        self.snapshot()
            .and_then(|m| m.abort_status)
            .is_some_and(|s| !s.is_empty() && s != "Failed")
    }
}

/// What the source needs besides the VMI.
#[derive(Debug, Clone)]
pub struct Source {
    /// `<namespace>_<name>`.
    pub domain_name: String,
    /// `/var/run/kubevirt`.
    pub share_dir: PathBuf,
    /// `/var/run/kubevirt-ephemeral-disks`: its size counts for a block migration's timeout.
    pub ephemeral_disk_dir: PathBuf,
    /// The launcher runs as non-root (session libvirt on the target too).
    pub non_root: bool,
}

/// `MigrateVirtualMachine`: checks and records the request, then migrates in the background
/// (the handler follows the metadata). A repeated request for a running migration is a no-op.
pub fn start(
    conn: Arc<Connection>,
    tracker: Arc<Tracker>,
    source: Source,
    vmi: VirtualMachineInstance,
    options_json: &[u8],
) -> Result<(), MigrationError> {
    let options = MigrationOptions::parse(options_json)?;
    options.bandwidth_mib()?;
    if vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .is_none()
    {
        return Err(MigrationError::NoMigrationState);
    }
    if vmi.metadata.uid.as_deref().unwrap_or_default().is_empty() {
        return Err(MigrationError::NoUid);
    }
    let uid = super::migration_uid(&vmi).unwrap_or_default();
    if !tracker.begin(&uid)? {
        return Ok(());
    }
    tokio::spawn(async move {
        log::info(format_args!(
            "{}: Initiating live migration {uid}.",
            source.domain_name
        ));
        if options.unsafe_migration {
            log::info(format_args!(
                "UNSAFE_MIGRATION flag is set, libvirt's migration checks will be disabled!"
            ));
        }
        let result = migrate(&conn, &tracker, &source, &vmi, &options).await;
        // An abort in flight decides the abort status before the result is told.
        let abort = tracker.abort.lock().ok().and_then(|mut a| a.take());
        if let Some(abort) = abort {
            let _ = abort.await;
        }
        match result {
            Ok(()) => {
                log::info(format_args!(
                    "{}: Live migration succeeded.",
                    source.domain_name
                ));
                tracker.finish(None);
            }
            Err(e) => {
                log::error(format_args!(
                    "{}: Live migration failed. {e}",
                    source.domain_name
                ));
                tracker.finish(Some(&e));
            }
        }
    });
    Ok(())
}

/// The disks of a libvirt domain XML, as [`super::disks_to_copy`] reads them.
fn disk_facts(xml: &str) -> Vec<DiskFacts> {
    let Ok(d) = Domain::from_xml(xml) else {
        return Vec::new();
    };
    d.devices
        .disks
        .iter()
        .map(|disk| DiskFacts {
            alias: disk
                .alias
                .as_ref()
                .map(|a| a.name.trim_start_matches("ua-").to_string())
                .unwrap_or_default(),
            device: disk.device.to_string(),
            kind: disk.kind.to_string(),
            target: disk.target.dev.as_deref().unwrap_or_default().to_string(),
            read_only: disk.readonly.is_some(),
        })
        .collect()
}

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

async fn migrate(
    conn: &Arc<Connection>,
    tracker: &Arc<Tracker>,
    source: &Source,
    vmi: &VirtualMachineInstance,
    options: &MigrationOptions,
) -> Result<(), String> {
    let dom = conn
        .lookup(&source.domain_name)
        .await
        .map_err(|e| e.to_string())?;
    let (state, _) = conn.state(&dom).await.map_err(|e| e.to_string())?;
    let paused = state == 3;
    let xml = conn
        .migratable_xml(&dom)
        .await
        .map_err(|e| format!("Live migration failed. Failed to get XML: {e}"))?;
    let copy_disks = super::disks_to_copy(vmi, &disk_facts(&xml));
    let vmi_uid = vmi.metadata.uid.clone().unwrap_or_default();
    let input = ParamsInput {
        share_dir: &source.share_dir,
        vmi_uid: &vmi_uid,
        dest_name: super::destination_name(vmi),
        xml: super::rewrite_for_target(&xml, vmi),
        copy_disks,
    };
    let params = super::migration_params(&input, options).map_err(|e| e.to_string())?;
    let flags = super::migration_flags(super::is_block_migration(vmi), paused, options);
    let uri = super::destination_uri(&source.share_dir, &vmi_uid, source.non_root);
    log::info(format_args!(
        "{}: migrating to {uri} with flags {flags:#x}, disks {:?}",
        source.domain_name, input.copy_disks
    ));
    let data_gb = super::data_size_gb(vmi, dir_size(&source.ephemeral_disk_dir));
    let monitor = tokio::spawn(watch(
        conn.clone(),
        tracker.clone(),
        dom.clone(),
        Monitor::new(options, data_gb, false),
    ));
    let result = conn
        .migrate_perform3_params(&dom, &uri, &params, flags)
        .await
        .map_err(|e| match e {
            LibvirtError::Remote { message, .. } => message,
            other => other.to_string(),
        });
    monitor.abort();
    result
}

/// The source's monitor: polls the job, feeds [`Monitor`] and carries out its decisions.
async fn watch(conn: Arc<Connection>, tracker: Arc<Tracker>, dom: DomainRef, mut m: Monitor) {
    let start = Instant::now();
    let mut polls = 0u32;
    loop {
        tokio::time::sleep(MONITOR_EVERY).await;
        let elapsed = i64::try_from(start.elapsed().as_secs()).unwrap_or(i64::MAX);
        match conn.job_stats(&dom).await {
            Ok(stats) if stats.kind == JOB_UNBOUNDED => {
                m.observe(elapsed, stats.uint("data_remaining"));
                polls += 1;
                if polls.is_multiple_of(10) {
                    log::info(format_args!(
                        "{}: migration info: TimeElapsed:{}ms DataProcessed:{}MiB DataRemaining:{}MiB DataTotal:{}MiB",
                        dom.name,
                        stats.uint("time_elapsed").unwrap_or(0),
                        stats.uint("data_processed").unwrap_or(0) >> 20,
                        stats.uint("data_remaining").unwrap_or(0) >> 20,
                        stats.uint("data_total").unwrap_or(0) >> 20
                    ));
                }
            }
            Ok(_) => {}
            Err(e) => log::info(format_args!(
                "{}: failed to get domain job info: {e}",
                dom.name
            )),
        }
        let action = m.decide(elapsed, tracker.abort_in_progress());
        let done = match &action {
            Action::Continue => Ok(()),
            Action::Abort(reason) => {
                log::warn(format_args!("{}: {reason}", dom.name));
                abort(&conn, &tracker, &dom.name);
                Ok(())
            }
            Action::StartPostCopy => {
                log::info(format_args!(
                    "{}: Starting post copy mode for migration",
                    dom.name
                ));
                conn.migrate_start_post_copy(&dom).await
            }
            Action::Suspend => {
                log::info(format_args!(
                    "{}: Pausing the guest to allow migration to complete",
                    dom.name
                ));
                conn.suspend(&dom).await
            }
            Action::SetMaxDowntime(ms) => conn.migrate_set_max_downtime(&dom, *ms).await,
        };
        match done {
            Ok(()) => {
                m.applied(&action);
                if matches!(
                    action,
                    Action::StartPostCopy | Action::Suspend | Action::SetMaxDowntime(_)
                ) {
                    tracker.set_mode(m.mode.as_str());
                }
            }
            Err(e) => log::error(format_args!("{}: {action:?} failed: {e}", dom.name)),
        }
    }
}

/// `CancelVirtualMachineMigration`: aborts a running migration once (a finished, failed or
/// already aborting one is left alone, as in KubeVirt).
pub fn cancel(conn: &Arc<Connection>, tracker: &Arc<Tracker>, domain_name: &str) {
    let go = tracker.update(|m| match m {
        Some(m) if super::should_abort(m) => {
            m.abort_status = Some("Aborting".into());
            true
        }
        _ => false,
    });
    if !go {
        log::info(format_args!(
            "{domain_name}: cancel migration ignored: no migration to abort"
        ));
        return;
    }
    abort(conn, tracker, domain_name);
}

/// The abort itself, in the background with a time limit; the migration's end waits for it.
fn abort(conn: &Arc<Connection>, tracker: &Arc<Tracker>, domain_name: &str) {
    tracker.update(|m| {
        if let Some(m) = m {
            m.abort_status = Some("Aborting".into());
        }
    });
    let (conn, t, name) = (conn.clone(), tracker.clone(), domain_name.to_string());
    let task = tokio::spawn(async move {
        let attempt = async {
            let dom = conn.lookup(&name).await?;
            let kind = conn.job_type(&dom).await?;
            if kind != JOB_UNBOUNDED {
                log::info(format_args!(
                    "{name}: migration job is not active (type={kind}), nothing to abort"
                ));
                return Ok(false);
            }
            conn.abort_job(&dom).await.map(|()| true)
        };
        let status = match tokio::time::timeout(ABORT_TIMEOUT, attempt).await {
            Ok(Ok(true)) => {
                log::info(format_args!("{name}: Live migration abort succeeded"));
                "Succeeded"
            }
            Ok(Ok(false)) => "Failed",
            Ok(Err(e)) => {
                log::error(format_args!("{name}: failed to cancel migration: {e}"));
                "Failed"
            }
            Err(_) => {
                log::error(format_args!(
                    "{name}: migration abort timed out waiting for libvirt"
                ));
                "Failed"
            }
        };
        t.set_abort_status(status);
    });
    if let Ok(mut slot) = tracker.abort.lock() {
        *slot = Some(task);
    }
}

/// The target's part of `SyncMigrationTarget` once the pod is prepared: the directory for the
/// migration sockets (QEMU and libvirt listen there for the handler's proxy), the metadata, and
/// a watcher that records the end once the incoming domain runs with no migration job left.
pub fn prepare_target(
    conn: &Arc<Connection>,
    tracker: &Arc<Tracker>,
    share_dir: &Path,
    domain_name: &str,
    vmi: &VirtualMachineInstance,
) -> Result<(), String> {
    let dir = share_dir.join("migrationproxy");
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("failed to create the migration sockets directory: {e}"))?;
    let uid = super::migration_uid(vmi).unwrap_or_default();
    if !tracker.begin(&uid).map_err(|e| e.to_string())? {
        return Ok(());
    }
    let (conn, tracker, name) = (conn.clone(), tracker.clone(), domain_name.to_string());
    tokio::spawn(async move {
        let mut arrived = false;
        loop {
            tokio::time::sleep(TARGET_POLL_EVERY).await;
            let dom = match conn.lookup(&name).await {
                Ok(dom) => dom,
                // The incoming domain went away again: the migration failed or was aborted, and
                // the source reports that; nothing is left to watch here.
                Err(e) if arrived && e.is_not_found() => {
                    log::info(format_args!(
                        "{name}: the incoming domain is gone, the migration did not complete"
                    ));
                    return;
                }
                Err(_) => continue,
            };
            arrived = true;
            if !matches!(conn.state(&dom).await, Ok((1, _))) {
                continue;
            }
            match conn.job_type(&dom).await {
                Ok(JOB_UNBOUNDED | JOB_BOUNDED) => continue,
                _ => {
                    log::info(format_args!(
                        "{name}: Incoming migration job completed, setting EndTimestamp"
                    ));
                    tracker.update(|m| match m {
                        Some(m) if m.end_timestamp.is_none() => {
                            m.end_timestamp = Some(rfc3339_now());
                        }
                        Some(_) => {}
                        None => {
                            *m = Some(MigrationMetadata {
                                end_timestamp: Some(rfc3339_now()),
                                ..MigrationMetadata::default()
                            });
                        }
                    });
                    return;
                }
            }
        }
    });
    Ok(())
}

/// `FinalizeVirtualMachineMigration` on the target: the guest's clock, which stood still while
/// the vCPUs were stopped for the switch-over, is set from the host's (KubeVirt's
/// `setGuestTime`; an agent that does not answer is logged, not an error).
pub async fn finalize(conn: &Arc<Connection>, dom: &DomainRef) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let cmd = format!(
        r#"{{"execute":"guest-set-time","arguments":{{"time":{}}}}}"#,
        now.as_nanos()
    );
    if let Err(e) = conn.agent_command(dom, &cmd).await {
        log::warn(format_args!(
            "{}: failed to set the guest time after migration: {e}",
            dom.name
        ));
    }
}
