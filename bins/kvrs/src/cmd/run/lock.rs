//! Who owns a `--state-dir`: the run that holds the `flock` of `STATE_DIR/run.lock`.
//!
//! Why a lock and not the presence of a file: a run that is SIGKILLed (or whose machine loses
//! power) cannot remove anything, so "the kubeconfig exists" cannot tell a live run from a dead
//! one. The kernel releases a `flock` when its holder dies, however it dies, so a run that gets
//! the lock of a state directory that is not empty knows that what is there was left by a dead
//! run, and only by a dead run: a live run holds its lock until it exits. The lock file also
//! records where the run kept what lives outside its state directory (the pods directory, the
//! node name its cgroups are named after, its OCI runtime), so the next run cleans up after it
//! even when started with other flags.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::input::CliError;

/// The lock file's name in the state directory.
pub const LOCK_FILE: &str = "run.lock";

/// What a run records in its lock file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// The run's process (for the message another run prints when it finds the lock held).
    pub pid: u32,
    /// `--node-name`: the kubelet's cgroups are `kvrs-kubelet-<node>/<pod>`.
    pub node: String,
    /// The kubelet's pods directory (outside the state directory by default).
    pub pods_dir: PathBuf,
    /// The OCI runtime that ran the pods' containers (`runc delete` of what it left).
    pub runtime: PathBuf,
}

impl Owner {
    /// The record of a lock file's text; `None` for an empty or unreadable one (a run killed
    /// between taking the lock and writing it).
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

/// The held lock of a state directory: released when dropped or when the process dies.
#[derive(Debug)]
pub struct RunLock {
    /// Kept open: closing it releases the lock.
    _file: File,
}

impl RunLock {
    /// Creates `root`, takes its lock and records `ours` in it. Returns what the previous run
    /// recorded when `root` holds anything a dead run left (`None`: a fresh directory). A lock
    /// held by another process is an error naming its pid.
    pub fn acquire(root: &Path, ours: &Owner) -> Result<(Self, Option<Owner>), CliError> {
        let failed = |what: &str, e: std::io::Error| {
            CliError::Failed(format!("{what} {}: {e}", root.join(LOCK_FILE).display()))
        };
        std::fs::create_dir_all(root)
            .map_err(|e| CliError::Failed(format!("creating {}: {e}", root.display())))?;
        let path = root.join(LOCK_FILE);
        // `File` opens with O_CLOEXEC: no child (runc, ip) inherits the lock and keeps it
        // after this process dies.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| failed("opening", e))?;
        let mut text = String::new();
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let _ = file.read_to_string(&mut text);
                let pid = Owner::parse(&text).map_or("unknown".to_string(), |o| o.pid.to_string());
                return Err(CliError::Failed(format!(
                    "--state-dir {}: in use by a live kvrs run (pid {pid}); give each run its own --state-dir",
                    root.display()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(failed("locking", e)),
        }
        file.read_to_string(&mut text)
            .map_err(|e| failed("reading", e))?;
        let left_something = std::fs::read_dir(root)
            .map_err(|e| CliError::Failed(format!("reading {}: {e}", root.display())))?
            .flatten()
            .any(|e| e.file_name() != LOCK_FILE);
        // A record without anything beside it is a run that got no further than its lock (or
        // whose stop was cut after removing everything else): its pods directory may remain.
        let previous = match Owner::parse(&text) {
            Some(prev) => Some(prev),
            // Killed before writing its record: it started nothing outside the state directory
            // yet but may have made directories; it was started like this run (it had no
            // chance to tell otherwise).
            None if left_something => Some(Owner {
                pid: 0,
                ..ours.clone()
            }),
            None => None,
        };
        let json = serde_json::to_string(ours).map_err(|e| CliError::Failed(e.to_string()))?;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
            .and_then(|()| file.write_all(json.as_bytes()))
            .and_then(|()| file.sync_data())
            .map_err(|e| failed("writing", e))?;
        Ok((Self { _file: file }, previous))
    }
}

/// Removes the state directory `root`, its lock file last: until then a run starting on the
/// same directory finds it in use rather than removing files of a run still stopping.
pub fn remove_state_dir(root: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root)?.flatten() {
        if entry.file_name() == LOCK_FILE {
            continue;
        }
        let p = entry.path();
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    std::fs::remove_file(root.join(LOCK_FILE))?;
    std::fs::remove_dir(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(pid: u32) -> Owner {
        Owner {
            pid,
            node: "kvrs-local".into(),
            pods_dir: "/run/kvrs/pods".into(),
            runtime: "runc".into(),
        }
    }

    #[test]
    fn a_fresh_directory_has_no_previous_run_and_a_held_lock_names_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        let (held, previous) = RunLock::acquire(&root, &owner(std::process::id())).unwrap();
        assert_eq!(previous, None);
        let err = RunLock::acquire(&root, &owner(1)).unwrap_err().to_string();
        assert!(
            err.contains(&format!(
                "in use by a live kvrs run (pid {})",
                std::process::id()
            )),
            "{err}"
        );
        drop(held);
        // Released: the record of the run that held it is what the next one reads.
        let (_again, previous) = RunLock::acquire(&root, &owner(2)).unwrap();
        assert_eq!(previous, Some(owner(std::process::id())));
    }

    #[test]
    fn an_unrecorded_lock_beside_leftovers_is_taken_as_a_run_started_like_this_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        std::fs::create_dir_all(root.join("kubelet")).unwrap();
        std::fs::write(root.join(LOCK_FILE), "").unwrap();
        let (_held, previous) = RunLock::acquire(&root, &owner(7)).unwrap();
        assert_eq!(previous, Some(owner(0)));
        remove_state_dir(&root).unwrap();
        assert!(!root.exists());
    }
}
