//! The launcher client manager: for each VMI, where its launcher's command socket is, whether it
//! answers, a connected client, the launcher's PID (for its network namespace and root) and the
//! notify pipe placed in its pod.
//!
//! What a sync learns here becomes [`LauncherFacts`], the shape the handler decision reads:
//! a socket that has not appeared yet is "not initialized", one that stopped answering is
//! "unresponsive", one that vanished after it answered is "gone".

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::facts::LauncherFacts;
use kvrs_ipc::{LauncherClient, PipeHandle};
use tracing::{debug, info, warn};

use crate::lock;

/// KubeVirt's qemu user, owner of the notify pipe in non-root launcher pods.
pub(crate) const QEMU_USER: (u32, u32) = (107, 107);

/// How long a launcher pod may exist without its command socket before the handler stops
/// waiting (KubeVirt's three minutes): a launcher that died before it made the socket leaves a
/// pod that will never answer, and the VMI must fail so that its VM can start a new one.
pub const INIT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// Whether the wait that began at `since` has lasted [`INIT_TIMEOUT`] at `now` (both RFC 3339;
/// an unreadable time never times out, so a bad clock string cannot fail a VMI).
pub fn waited_too_long(since: &str, now: &str) -> bool {
    use k8s_openapi::jiff::Timestamp;
    match (since.parse::<Timestamp>(), now.parse::<Timestamp>()) {
        (Ok(since), Ok(now)) => {
            now.as_second() - since.as_second() >= INIT_TIMEOUT.as_secs().cast_signed()
        }
        _ => false,
    }
}

/// One VMI's launcher, by VMI UID.
struct Entry {
    socket: PathBuf,
    client: Option<LauncherClient>,
    pid: Option<u32>,
    answered: bool,
    waiting_since: Option<String>,
    _pipe: Option<PipeHandle>,
}

/// A launcher a sync may talk to.
pub struct Reached {
    /// Its client, when it answers.
    pub client: Option<LauncherClient>,
    /// Its PID, when it answers.
    pub pid: Option<u32>,
    /// What the decision is told.
    pub facts: LauncherFacts,
}

/// Every launcher of this node's VMIs.
pub struct Launchers {
    pods_dir: PathBuf,
    share_dir: PathBuf,
    node: String,
    entries: Mutex<HashMap<String, Entry>>,
}

/// The UIDs of `vmi`'s launcher pods on `node`, from `status.activePods`.
pub(crate) fn pods_on<'v>(
    vmi: &'v VirtualMachineInstance,
    node: &'v str,
) -> impl Iterator<Item = &'v str> {
    vmi.status
        .as_ref()
        .and_then(|s| s.active_pods.as_ref())
        .into_iter()
        .flatten()
        .filter(move |(_, on)| on.as_str() == node)
        .map(|(uid, _)| uid.as_str())
}

/// The command sockets of `vmi`'s launcher pods on `node`.
pub fn sockets_of(vmi: &VirtualMachineInstance, node: &str, pods_dir: &Path) -> Vec<PathBuf> {
    pods_on(vmi, node)
        .filter_map(|uid| kvrs_ipc::layout::launcher_socket_on_host(pods_dir, uid).ok())
        .collect()
}

/// The `private` emptyDirs (the pod's `/var/run/kubevirt-private`, where QEMU's serial socket
/// is) of `vmi`'s launcher pods on `node`, where the kubelet keeps them beside `sockets`.
pub fn private_dirs_of(vmi: &VirtualMachineInstance, node: &str, pods_dir: &Path) -> Vec<PathBuf> {
    pods_on(vmi, node)
        .filter_map(|uid| kvrs_ipc::layout::pod_sockets_dir_on_host(pods_dir, uid).ok())
        .filter_map(|sockets| Some(sockets.parent()?.join(PRIVATE_VOLUME)))
        .collect()
}

/// The launcher pod's emptyDir mounted at `/var/run/kubevirt-private` (KubeVirt's `private`).
pub const PRIVATE_VOLUME: &str = "private";

impl Launchers {
    /// Launchers found under `pods_dir`, notifying the server in `share_dir`.
    pub fn new(pods_dir: PathBuf, share_dir: PathBuf, node: String) -> Self {
        Self {
            pods_dir,
            share_dir,
            node,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The launcher of the VMI with `uid` (`vmi` when it is still stored), connected if it can
    /// be; `now` (RFC 3339) is remembered as the start of a wait for a socket.
    pub async fn reach(
        &self,
        uid: &str,
        vmi: Option<&VirtualMachineInstance>,
        now: &str,
    ) -> Reached {
        // Take the entry out while talking to the socket: no lock across an await.
        let entry = lock(&self.entries).remove(uid);
        // The VMI's pods name the socket; once the VMI is gone from the cluster, the socket
        // its launcher was reached on still serves the domain that is left.
        let candidates = match vmi {
            Some(v) => sockets_of(v, &self.node, &self.pods_dir),
            None => entry.iter().map(|e| e.socket.clone()).collect(),
        };
        let existing = candidates
            .iter()
            .find(|s| !s.as_os_str().is_empty() && s.exists())
            .cloned();
        let mut facts = LauncherFacts::default();
        let mut entry = match (entry, existing) {
            (Some(e), Some(socket)) if e.socket == socket => e,
            (_, Some(socket)) => Entry {
                socket,
                client: None,
                pid: None,
                answered: false,
                waiting_since: None,
                _pipe: None,
            },
            (Some(mut e), None) => {
                if e.answered || !e.socket.exists() && vmi.is_none() {
                    facts.gone = true;
                } else if vmi.is_some_and(|v| !self.pod_dir_present(v)) {
                    // No pod directory: waiting for its launcher makes no sense.
                    facts.unresponsive = true;
                } else if waited_too_long(
                    e.waiting_since.get_or_insert_with(|| now.to_string()),
                    now,
                ) {
                    // A pod whose launcher never made its socket (it died first): give up,
                    // as KubeVirt does, after INIT_TIMEOUT.
                    warn!(uid, "the launcher made no socket in {INIT_TIMEOUT:?}");
                    facts.unresponsive = true;
                } else {
                    facts.not_initialized = true;
                    facts.not_initialized_since = Some(
                        e.waiting_since
                            .get_or_insert_with(|| now.to_string())
                            .clone(),
                    );
                }
                e.client = None;
                lock(&self.entries).insert(uid.to_string(), e);
                return Reached {
                    client: None,
                    pid: None,
                    facts,
                };
            }
            (None, None) => {
                if vmi.is_some_and(|v| !self.pod_dir_present(v)) {
                    facts.unresponsive = true;
                } else if vmi.is_some() {
                    facts.not_initialized = true;
                    facts.not_initialized_since = Some(now.to_string());
                    lock(&self.entries).insert(
                        uid.to_string(),
                        Entry {
                            socket: PathBuf::new(),
                            client: None,
                            pid: None,
                            answered: false,
                            waiting_since: Some(now.to_string()),
                            _pipe: None,
                        },
                    );
                } else {
                    facts.gone = true;
                }
                return Reached {
                    client: None,
                    pid: None,
                    facts,
                };
            }
        };
        if entry.client.is_none() {
            match LauncherClient::connect(&entry.socket).await {
                Ok(client) => {
                    if !entry.answered {
                        info!(uid, socket = %entry.socket.display(), version = client.version(), "launcher reached");
                    }
                    entry.client = Some(client);
                    entry.answered = true;
                }
                Err(e) => {
                    debug!(uid, socket = %entry.socket.display(), "launcher does not answer: {e}");
                    facts.unresponsive = true;
                }
            }
        } else if let Some(c) = &entry.client
            && let Err(e) = c.ping().await
        {
            warn!(uid, "launcher stopped answering: {e}");
            entry.client = None;
            facts.unresponsive = true;
        }
        if entry.client.is_some() && entry.pid.is_none() {
            match kvrs_node::launcher_pid_of_socket(&entry.socket) {
                Ok(pid) => entry.pid = Some(pid),
                Err(e) => warn!(uid, "cannot tell the launcher's PID: {e}"),
            }
        }
        if let (Some(pid), None) = (entry.pid, &entry._pipe) {
            entry._pipe = self.place_pipe(pid, vmi);
        }
        let reached = Reached {
            client: entry.client.clone(),
            pid: entry.pid,
            facts,
        };
        lock(&self.entries).insert(uid.to_string(), entry);
        reached
    }

    /// Whether one of `vmi`'s launcher pods on this node still has its socket directory
    /// (KubeVirt's `FindPodDirOnHost`): without one, no launcher is coming.
    fn pod_dir_present(&self, vmi: &VirtualMachineInstance) -> bool {
        pods_on(vmi, &self.node)
            .filter_map(|uid| kvrs_ipc::layout::pod_sockets_dir_on_host(&self.pods_dir, uid).ok())
            .any(|dir| dir.is_dir())
    }

    /// Puts the notify pipe into the launcher pod, so the launcher's domain events reach this
    /// handler's notify server whatever the node's paths are.
    fn place_pipe(&self, pid: u32, vmi: Option<&VirtualMachineInstance>) -> Option<PipeHandle> {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        // `/var/run` is a symlink to `/run` in most images: an absolute symlink followed
        // through `/proc/<pid>/root` would land in *this* process's root, so the share dir is
        // resolved with the pod's root standing for `/`.
        let share =
            match kvrs_ipc::layout::resolve_in_root(&root, kvrs_ipc::layout::DEFAULT_SHARE_DIR) {
                Ok(p) => p,
                Err(e) => {
                    warn!("cannot find the launcher's share dir: {e}");
                    return None;
                }
            };
        let pipe = share.join(kvrs_ipc::layout::NOTIFY_PIPE_SOCKET);
        let handler = kvrs_ipc::layout::handler_notify_socket(&self.share_dir);
        let non_root =
            vmi.is_some_and(|v| v.status.as_ref().and_then(|s| s.runtime_user).unwrap_or(0) != 0);
        let owner = non_root.then_some(QEMU_USER);
        match kvrs_ipc::serve_notify_pipe(&pipe, &handler, 0o660, owner) {
            Ok(p) => {
                debug!(pipe = %pipe.display(), "notify pipe placed");
                Some(p)
            }
            Err(e) => {
                warn!(pipe = %pipe.display(), "cannot place the notify pipe: {e}");
                None
            }
        }
    }

    /// Closes and forgets the launcher of `uid` (its pod is gone or the VMI is final).
    pub fn close(&self, uid: &str) {
        lock(&self.entries).remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODE: &str = "node01";
    const POD_UID: &str = "6a1f3c2e-0000-4000-8000-000000000001";

    fn vmi_with_pod() -> VirtualMachineInstance {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Scheduled", "activePods": {POD_UID: NODE}},
        }))
        .unwrap()
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kvrs-launchers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn waits_time_out_after_three_minutes() {
        let since = "2026-01-01T00:00:00Z";
        assert!(!waited_too_long(since, "2026-01-01T00:02:59Z"));
        assert!(waited_too_long(since, "2026-01-01T00:03:00Z"));
        assert!(
            !waited_too_long(since, "2025-12-31T23:00:00Z"),
            "a clock going back"
        );
        assert!(!waited_too_long("not a time", "2026-01-01T01:00:00Z"));
    }

    /// A launcher pod that never made its socket: first "not initialized" (the decision
    /// requeues), then unresponsive once the pod has waited three minutes (the VMI fails and
    /// its VM can start another) — not a VMI Scheduled for ever.
    #[tokio::test]
    async fn a_launcher_that_never_made_its_socket_is_given_up_after_the_timeout() {
        let pods = scratch("never");
        std::fs::create_dir_all(kvrs_ipc::layout::pod_sockets_dir_on_host(&pods, POD_UID).unwrap())
            .unwrap();
        let launchers = Launchers::new(pods.clone(), pods.join("share"), NODE.into());
        let vmi = vmi_with_pod();

        let first = launchers
            .reach("vmi-uid", Some(&vmi), "2026-01-01T00:00:00Z")
            .await;
        assert!(first.facts.not_initialized && !first.facts.unresponsive);
        let later = launchers
            .reach("vmi-uid", Some(&vmi), "2026-01-01T00:02:00Z")
            .await;
        assert!(later.facts.not_initialized && !later.facts.unresponsive);
        assert_eq!(
            later.facts.not_initialized_since.as_deref(),
            Some("2026-01-01T00:00:00Z"),
            "the wait is counted from the first look"
        );
        let timed_out = launchers
            .reach("vmi-uid", Some(&vmi), "2026-01-01T00:03:01Z")
            .await;
        assert!(timed_out.facts.unresponsive && !timed_out.facts.not_initialized);
        let _ = std::fs::remove_dir_all(&pods);
    }

    /// Without the pod's socket directory on this node there is nothing to wait for.
    #[tokio::test]
    async fn no_pod_directory_means_unresponsive_at_once() {
        let pods = scratch("nodir");
        let launchers = Launchers::new(pods.clone(), pods.join("share"), NODE.into());
        let vmi = vmi_with_pod();
        let first = launchers
            .reach("vmi-uid", Some(&vmi), "2026-01-01T00:00:00Z")
            .await;
        assert!(first.facts.unresponsive && !first.facts.not_initialized);
        let _ = std::fs::remove_dir_all(&pods);
    }
}
