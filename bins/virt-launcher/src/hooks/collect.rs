//! Finding the hook sidecars: scan the pod's hooks directory until as many sidecars as the pod
//! asked for (`--hook-sidecars`) answered the `Info` handshake, as KubeVirt's launcher does
//! before it starts libvirt.
//!
//! Each sidecar container mounts its own sub-directory of the pod's `hook-sidecar-sockets`
//! emptyDir (`hook-sidecar-<i>`) as its `/var/run/kubevirt-hooks`, and the launcher sees them all
//! under its own `/var/run/kubevirt-hooks/hook-sidecar-<i>/<socket>`. A socket that cannot be
//! dialled yet is retried at the next scan (the sidecar is still starting); one that accepts the
//! connection and then fails the handshake, or serves no version the launcher speaks, fails the
//! launcher at once, as in KubeVirt. (One difference: a listener that accepts but never speaks
//! HTTP/2 fails here within the `Info` deadline; KubeVirt's blocking dial waits for the server's
//! preface and so retries it until `--qemu-timeout`. Both end the launcher with an error.)

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvrs_ipc::hooks::{HookCallError, HookClient};

use super::Timeouts;
use super::error::{HookError, HookName};
use super::registry::{Registry, Sidecar};
use crate::log;

/// The candidate sockets in the hooks directory, in KubeVirt's order: sub-directories by name,
/// then their non-directory entries by name (top-level files and deeper levels are ignored).
fn scan(dir: &Path) -> Result<Vec<(PathBuf, HookName)>, HookError> {
    let read = |d: &Path| -> Result<Vec<(String, bool)>, HookError> {
        let err = |source| HookError::Directory {
            dir: d.to_path_buf(),
            source,
        };
        let mut entries = Vec::new();
        for entry in std::fs::read_dir(d).map_err(err)? {
            let entry = entry.map_err(err)?;
            let is_dir = entry.file_type().map_err(err)?.is_dir();
            entries.push((entry.file_name().to_string_lossy().into_owned(), is_dir));
        }
        entries.sort();
        Ok(entries)
    };
    let mut sockets = Vec::new();
    for (container, is_dir) in read(dir)? {
        if !is_dir {
            continue;
        }
        for (file, is_dir) in read(&dir.join(&container))? {
            if is_dir {
                continue;
            }
            let hook = HookName {
                socket: format!("{container}/{file}"),
                name: String::new(),
            };
            sockets.push((dir.join(&container).join(&file), hook));
        }
    }
    Ok(sockets)
}

/// What one socket's handshake came to.
enum Handshake {
    /// Not dialable yet: try again at the next scan.
    NotReady(HookCallError),
    /// Answered.
    Ready(Sidecar),
}

async fn handshake(
    socket: &Path,
    hook: HookName,
    timeouts: &Timeouts,
) -> Result<Handshake, HookError> {
    let client = match HookClient::connect(socket, timeouts.connect).await {
        Ok(c) => c,
        Err(e) => return Ok(Handshake::NotReady(e)),
    };
    let info = client
        .info(timeouts.info)
        .await
        .map_err(|source| HookError::Handshake {
            hook: hook.clone(),
            source: Box::new(source),
        })?;
    Sidecar::from_info(socket.to_path_buf(), hook, info).map(Handshake::Ready)
}

/// Waits until `expected` sidecars in `dir` answered, at most `timeout`; scans every
/// `timeouts.scan_interval`. `owner` (`namespace/name`) keys the log lines.
pub async fn collect(
    dir: &Path,
    expected: u32,
    timeout: Duration,
    timeouts: &Timeouts,
    owner: &str,
) -> Result<Registry, HookError> {
    let mut registry = Registry::default();
    let mut processed: BTreeSet<PathBuf> = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while processed.len() < expected as usize {
        for (socket, hook) in scan(dir)? {
            if processed.contains(&socket) {
                continue;
            }
            match handshake(&socket, hook.clone(), timeouts).await? {
                Handshake::NotReady(e) => {
                    log::info(format_args!("{owner}: {hook} might not be ready yet: {e}"))
                }
                Handshake::Ready(sidecar) => {
                    let points: Vec<String> = sidecar
                        .hook_points
                        .iter()
                        .map(|p| format!("{}({})", p.name, p.priority))
                        .collect();
                    log::info(format_args!(
                        "{owner}: {} answered: Callbacks {}, hook points {points:?}",
                        sidecar.hook, sidecar.version
                    ));
                    registry.add(sidecar);
                    processed.insert(socket);
                }
            }
        }
        if processed.len() >= expected as usize {
            break;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(HookError::CollectTimeout {
                expected,
                found: processed.len(),
                ready: registry.names(),
                after: timeout,
            });
        }
        tokio::time::sleep_until(deadline.min(now + timeouts.scan_interval)).await;
    }
    log::info(format_args!(
        "{owner}: collected all {expected} requested hook sidecars: {:?}",
        registry.names()
    ));
    Ok(registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scan_orders_as_kubevirt_and_skips_what_it_skips() {
        let dir = tempfile::tempdir().unwrap();
        for d in [
            "hook-sidecar-2",
            "hook-sidecar-10",
            "hook-sidecar-0",
            "hook-sidecar-0/nested",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        for f in [
            "stray.sock",
            "hook-sidecar-2/b.sock",
            "hook-sidecar-2/a.sock",
            "hook-sidecar-10/x.sock",
            "hook-sidecar-0/shim.sock",
        ] {
            std::fs::write(dir.path().join(f), b"").unwrap();
        }
        let names: Vec<String> = scan(dir.path())
            .unwrap()
            .into_iter()
            .map(|(_, h)| h.socket)
            .collect();
        assert_eq!(
            names,
            [
                "hook-sidecar-0/shim.sock",
                "hook-sidecar-10/x.sock",
                "hook-sidecar-2/a.sock",
                "hook-sidecar-2/b.sock"
            ]
        );
    }

    #[test]
    fn a_missing_hooks_directory_is_an_error_naming_it() {
        let err = scan(Path::new("/nonexistent/kubevirt-hooks")).unwrap_err();
        assert_eq!(err.label(), "hooks_directory");
        assert!(
            err.to_string().contains("/nonexistent/kubevirt-hooks"),
            "{err}"
        );
    }
}
