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
const QEMU_USER: (u32, u32) = (107, 107);

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

/// The command sockets of `vmi`'s launcher pods on `node`, from `status.activePods`.
pub fn sockets_of(vmi: &VirtualMachineInstance, node: &str, pods_dir: &Path) -> Vec<PathBuf> {
    vmi.status
        .as_ref()
        .and_then(|s| s.active_pods.as_ref())
        .into_iter()
        .flatten()
        .filter(|(_, on)| on.as_str() == node)
        .filter_map(|(uid, _)| kvrs_ipc::layout::launcher_socket_on_host(pods_dir, uid).ok())
        .collect()
}

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
                if vmi.is_some() {
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
