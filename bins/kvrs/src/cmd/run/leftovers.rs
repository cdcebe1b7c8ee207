//! What a killed `kvrs run` left, found and removed by the next run on its state directory
//! before anything starts.
//!
//! Why this is needed: the API server, the controllers, virt-handler and the kubelet live in the
//! `kvrs run` process and die with it, but the launcher pods do not. Each pod's containers are
//! runc containers (their own PID namespace, reparented to init when their `runc run` parent
//! goes), with QEMU, virtqemud and the launcher in the pod's cgroup; the pod has a network
//! namespace and a host veth; the kubelet's state (runc's state, each pod's bundle and record),
//! the pods directory and the kubeconfig stay on disk. As with a real kubelet, nothing can make
//! a container die with the process that started it; so the next run is what guarantees the
//! machine gets them back.
//!
//! Only what the dead run recorded as its own is touched: the pods its kubelet recorded in its
//! state directory (a pod's runc containers, cgroups, network namespace, veth and directory in
//! the pods directory are named after the pod's UID), runc containers in its runc state
//! directory, mounts under its state directory and its pods' directories. Another live run has its own state directory (its lock is held, see
//! [`super::lock`]) and pods of other UIDs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kvrs_kubelet::host::{self, Footprint};
use kvrs_kubelet::pod_exec::Runtime;
use kvrs_kubelet::{PodKey, state};

use super::lock::{LOCK_FILE, Owner};
use crate::input::CliError;

/// The prefix of every line the cleanup prints.
const PREFIX: &str = "removed what a previous run left:";

/// One pod of the dead run as found on the host, before its removal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FoundPod {
    /// `namespace/name` when its record says, else `uid <uid>`.
    pub pod: String,
    /// runc containers runc still knows.
    pub containers: Vec<String>,
    /// The processes in the pod's cgroups, by `comm` (QEMU, the launcher, libvirt's daemons).
    pub processes: Vec<String>,
    /// Its network namespace, when it exists.
    pub netns: Option<String>,
    /// Its host veth, when it exists.
    pub veth: Option<String>,
    /// Its cgroups that exist.
    pub cgroups: Vec<PathBuf>,
}

/// The lines saying what was removed of `found`, one per thing.
pub fn pod_lines(found: &FoundPod) -> Vec<String> {
    let of = &found.pod;
    let mut lines = Vec::new();
    for c in &found.containers {
        lines.push(format!("{PREFIX} runc container {c} of pod {of}"));
    }
    if !found.processes.is_empty() {
        let mut names: Vec<&str> = found.processes.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        lines.push(format!(
            "{PREFIX} {} processes of pod {of} ({})",
            found.processes.len(),
            names.join(", ")
        ));
    }
    if let Some(n) = &found.netns {
        lines.push(format!("{PREFIX} network namespace {n} of pod {of}"));
    }
    if let Some(v) = &found.veth {
        lines.push(format!("{PREFIX} veth {v} of pod {of}"));
    }
    for cg in &found.cgroups {
        lines.push(format!("{PREFIX} cgroup {} of pod {of}", cg.display()));
    }
    lines
}

/// The mount points in `mountinfo` (the text of `/proc/self/mountinfo`) under one of `roots`
/// (not a root itself: a directory the user mounted to hold the state stays), deepest first (the order they can be unmounted in). The kernel escapes space, tab,
/// newline and backslash in paths as octal (`\040`).
pub fn mounts_under(mountinfo: &str, roots: &[&Path]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape_octal(p)))
        .filter(|p| roots.iter().any(|r| p.starts_with(r) && p != r))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found.dedup();
    found
}

fn unescape_octal(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where cgroup v2 is mounted (the kubelet makes its pods' cgroups there).
fn cgroup2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .ok()?
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let point = pre.split(' ').nth(4)?;
            (post.split_whitespace().next()? == "cgroup2")
                .then(|| PathBuf::from(unescape_octal(point)))
        })
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}

/// The pod's cgroups (`<root>/<short id>`, its sidecars' `<root>/<short id>-<name>`).
fn pod_cgroups(fp: &Footprint) -> Vec<PathBuf> {
    let Some(main) = fp.cgroup.as_deref() else {
        return Vec::new();
    };
    let (Some(root), Some(short)) = (main.parent(), main.file_name()) else {
        return Vec::new();
    };
    let short = short.to_string_lossy().into_owned();
    entries(root)
        .into_iter()
        .filter(|n| *n == short || n.starts_with(&format!("{short}-")))
        .map(|n| root.join(n))
        .filter(|p| p.is_dir())
        .collect()
}

/// What of the pod of `fp` exists on the host now.
fn find_pod(fp: &Footprint, pod: String) -> FoundPod {
    let prefix = format!("{}-", fp.container);
    let containers = entries(&fp.runtime.root)
        .into_iter()
        .filter(|n| *n == fp.container || n.starts_with(&prefix))
        .collect();
    let cgroups = pod_cgroups(fp);
    let processes = cgroups
        .iter()
        .flat_map(|cg| {
            std::fs::read_to_string(cg.join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .map(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .map(|c| c.trim().to_string())
                        .unwrap_or_else(|_| format!("pid {p}"))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    FoundPod {
        pod,
        containers,
        processes,
        netns: Path::new("/run/netns")
            .join(&fp.netns)
            .exists()
            .then(|| fp.netns.clone()),
        veth: Path::new("/sys/class/net")
            .join(&fp.host_veth)
            .exists()
            .then(|| fp.host_veth.clone()),
        cgroups,
    }
}

/// Finds and removes what the run recorded in `previous` left under the state directory
/// `root` and its pods directory, printing a line for each thing removed. Errors when
/// something could not be removed (the new run would otherwise run beside it).
pub async fn remove(previous: &Owner, root: &Path) -> Result<(), CliError> {
    let kubelet = root.join("kubelet");
    let runtime = Runtime {
        program: previous.runtime.clone(),
        root: kubelet.join("runc"),
    };
    let cgroup_root = cgroup2_mount().map(|m| m.join(format!("kvrs-kubelet-{}", previous.node)));
    let records: Vec<state::PodRecord> = state::load_all(&kubelet);
    // The pods the dead run's kubelet set up: each has its state directory (made right after
    // its directory in the pods directory, before its network and containers). Entries of
    // the pods directory alone are not taken: a pods directory given to two runs holds the
    // other's pods too.
    let uids: BTreeSet<String> = state::pod_uids(&kubelet).into_iter().collect();
    let mut still_there = Vec::new();
    // Unmounted first: removing a directory must never descend into what is mounted there.
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let pod_dirs: Vec<PathBuf> = uids.iter().map(|u| previous.pods_dir.join(u)).collect();
    let mut roots: Vec<&Path> = vec![root];
    roots.extend(pod_dirs.iter().map(PathBuf::as_path));
    for m in mounts_under(&mountinfo, &roots) {
        let out = tokio::process::Command::new("umount")
            .arg("--lazy")
            .arg(&m)
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        match out {
            Ok(o) if o.status.success() => println!("{PREFIX} mount {}", m.display()),
            Ok(o) => still_there.push(format!(
                "mount {} ({})",
                m.display(),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => still_there.push(format!("mount {} ({e})", m.display())),
        }
    }
    for uid in &uids {
        let record = records.iter().find(|r| r.key.uid == *uid);
        let key = record.map_or_else(
            || PodKey {
                namespace: String::new(),
                name: String::new(),
                uid: uid.clone(),
            },
            |r| r.key.clone(),
        );
        let label = if key.name.is_empty() {
            format!("uid {uid}")
        } else {
            format!("{}/{}", key.namespace, key.name)
        };
        let fp = Footprint::of(
            &key,
            &previous.pods_dir,
            &kubelet,
            &runtime,
            cgroup_root.as_deref(),
        );
        let found = find_pod(&fp, label.clone());
        let pid = record.filter(|r| r.process_alive()).and_then(|r| r.pid);
        host::teardown(&fp, pid).await;
        let after = find_pod(&fp, label);
        let nothing = FoundPod {
            pod: after.pod.clone(),
            ..FoundPod::default()
        };
        if after != nothing {
            still_there.push(format!("{after:?}"));
        }
        for line in pod_lines(&found) {
            println!("{line}");
        }
    }
    // Containers runc knows of no pod directory (a run killed as it removed one).
    for id in entries(&runtime.root) {
        let out = tokio::process::Command::new(&runtime.program)
            .args(runtime.delete(&id))
            .stdin(std::process::Stdio::null())
            .output()
            .await;
        match out {
            Ok(o) if o.status.success() => println!("{PREFIX} runc container {id}"),
            Ok(o) => still_there.push(format!(
                "runc container {id} ({})",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => still_there.push(format!("runc container {id} ({e})")),
        }
    }
    for d in &pod_dirs {
        if d.exists() {
            match std::fs::remove_dir_all(d) {
                Ok(()) => println!("{PREFIX} {}", d.display()),
                Err(e) => still_there.push(format!("{} ({e})", d.display())),
            }
        }
    }
    // The pods directory itself once empty (another run's pods keep it).
    if std::fs::remove_dir(&previous.pods_dir).is_ok() {
        println!("{PREFIX} directory {}", previous.pods_dir.display());
    }
    for name in entries(root) {
        if name == LOCK_FILE {
            continue;
        }
        let p = root.join(&name);
        let removed = if p.is_dir() && !p.is_symlink() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        match removed {
            Ok(()) => println!("{PREFIX} {}", p.display()),
            Err(e) => still_there.push(format!("{} ({e})", p.display())),
        }
    }
    // The node's cgroup, unless another run of the same node name still has pods in it.
    if let Some(cg) = &cgroup_root {
        let _ = std::fs::remove_dir(cg);
    }
    if still_there.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "could not remove what a previous run left in {}: {}",
            root.display(),
            still_there.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_thing_of_a_pod_gets_its_own_line() {
        let found = FoundPod {
            pod: "default/virt-launcher-guest-x7k2p".into(),
            containers: vec!["kvrs-0a1b2c3d4e".into(), "kvrs-0a1b2c3d4e-hook".into()],
            processes: vec![
                "virt-launcher".into(),
                "qemu-system-x86".into(),
                "virtqemud".into(),
                "virtqemud".into(),
            ],
            netns: Some("kvrs-0a1b2c3d4e".into()),
            veth: None,
            cgroups: vec![PathBuf::from("/sys/fs/cgroup/kvrs-kubelet-n/0a1b2c3d4e")],
        };
        let lines = pod_lines(&found);
        let of = "of pod default/virt-launcher-guest-x7k2p";
        assert_eq!(
            lines,
            [
                format!("{PREFIX} runc container kvrs-0a1b2c3d4e {of}"),
                format!("{PREFIX} runc container kvrs-0a1b2c3d4e-hook {of}"),
                format!("{PREFIX} 4 processes {of} (qemu-system-x86, virt-launcher, virtqemud)"),
                format!("{PREFIX} network namespace kvrs-0a1b2c3d4e {of}"),
                format!("{PREFIX} cgroup /sys/fs/cgroup/kvrs-kubelet-n/0a1b2c3d4e {of}"),
            ]
        );
        assert!(pod_lines(&FoundPod::default()).is_empty());
    }

    #[test]
    fn mounts_under_the_runs_directories_deepest_first_with_escapes_undone() {
        let info = "\
22 1 8:1 / / rw - ext4 /dev/sda1 rw
90 22 0:50 / /tmp/kvrs-run-k rw - tmpfs tmpfs rw
91 90 0:51 / /tmp/kvrs-run-k/kubelet/pods/u/rootfs rw - tmpfs tmpfs rw
92 22 0:52 / /tmp/kp\\040x/u/vol rw - tmpfs tmpfs rw
93 22 0:53 / /tmp/kvrs-run-kk rw - tmpfs tmpfs rw
";
        let got = mounts_under(
            info,
            &[Path::new("/tmp/kvrs-run-k"), Path::new("/tmp/kp x")],
        );
        assert_eq!(
            got,
            [
                PathBuf::from("/tmp/kvrs-run-k/kubelet/pods/u/rootfs"),
                PathBuf::from("/tmp/kp x/u/vol"),
            ]
        );
    }
}
