//! Processes libvirt reports by PID file: QEMU (one `<domain>.pid` per running domain), libvirtd
//! and virtlogd. The monitor signals one of them only if it is its own child (re-parented to it),
//! so a stale PID file can never make it signal a stranger.

use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getpid};
use std::path::{Path, PathBuf};

/// libvirt's runtime directory as the launcher configured it (`$XDG_RUNTIME_DIR/libvirt` in
/// session mode, KubeVirt sets `XDG_RUNTIME_DIR=/var/run`), plus the system-mode one.
fn runtime_dirs() -> Vec<PathBuf> {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/run"));
    vec![base.join("libvirt"), PathBuf::from("/run/libvirt")]
}

fn pid_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for qemu_dir in [dir.join("qemu/run"), dir.join("qemu")] {
        if let Ok(entries) = std::fs::read_dir(&qemu_dir) {
            files.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "pid")),
            );
        }
    }
    // Daemons after QEMU: QEMU first gets the signal, the daemons that manage it second.
    files.push(dir.join("virtlogd.pid"));
    files.push(dir.join("libvirtd.pid"));
    files.push(dir.join("virtqemud.pid"));
    files
}

fn read_pid(path: &Path) -> Option<Pid> {
    let text = std::fs::read_to_string(path).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    (pid > 1).then(|| Pid::from_raw(pid))
}

/// The parent PID from `/proc/<pid>/stat` (the field after the parenthesised command name).
fn parent_of(pid: Pid) -> Option<Pid> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let ppid: i32 = after.split_whitespace().nth(1)?.parse().ok()?;
    Some(Pid::from_raw(ppid))
}

/// Sends `sig` to every libvirt-reported process that is this monitor's child.
pub fn signal_reported_children(sig: Signal) {
    let me = getpid();
    for dir in runtime_dirs() {
        for file in pid_files(&dir) {
            let Some(pid) = read_pid(&file) else { continue };
            if parent_of(pid) == Some(me) {
                let _ = kill(pid, sig);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_of_self_is_the_test_runner() {
        let me = getpid();
        assert_eq!(parent_of(me), Some(nix::unistd::getppid()));
        assert_eq!(parent_of(Pid::from_raw(i32::MAX)), None);
    }

    #[test]
    fn pid_files_parse_and_ignore_garbage() {
        let dir = std::env::temp_dir().join(format!("kvrs-monitor-pid-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("qemu/run")).unwrap();
        std::fs::write(dir.join("qemu/run/default_vm.pid"), "1234\n").unwrap();
        std::fs::write(dir.join("qemu/run/notes.txt"), "x").unwrap();
        std::fs::write(dir.join("libvirtd.pid"), "garbage").unwrap();
        let files = pid_files(&dir);
        assert_eq!(files[0], dir.join("qemu/run/default_vm.pid"));
        assert_eq!(read_pid(&files[0]), Some(Pid::from_raw(1234)));
        assert_eq!(read_pid(&dir.join("libvirtd.pid")), None);
        assert!(!files.iter().any(|f| f.ends_with("notes.txt")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
