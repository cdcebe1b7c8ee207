//! A `kvrs run` whose launcher pod the test watches while it runs: the pods' UIDs (for the
//! leftover check), the launcher pod as the API server has it (every 2 s), its Ready condition
//! while it ran, and the domain libvirt runs in it. Shared by the hook-sidecar and the
//! binding-plugin tests (each adds its own `kvrs run` flags).

#![allow(dead_code)] // each test binary uses its part

use crate::lines::lines_of;
use crate::run_driver::{self, Output, Running};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A `kvrs run`, and what the test saw of its pods while it ran.
pub struct Run {
    pub run: Running,
    pub seen: Seen,
}

/// What the test reads of a run's pods while it runs.
pub struct Seen {
    state: PathBuf,
    pods: PathBuf,
    /// The UIDs of the pods seen in the pods directory.
    pub uids: BTreeSet<String>,
    /// The launcher pod as last read while the run ran.
    pub pod: Option<serde_json::Value>,
    /// The pod's Ready condition as last read while the pod was Running: once every container
    /// has ended (the launcher too, after the VMI failed) it reads `PodCompleted` instead.
    pub ready_while_running: Option<serde_json::Value>,
    /// The run's tag (names the short socket link of [`Seen::domain_xml`]).
    tag: String,
    last_poll: Option<Instant>,
}

impl Run {
    /// Spawns `cmd` (a [`run_driver::command`] for `tag` with the test's flags) and watches it.
    pub fn spawn(cmd: Command, tag: &str) -> Self {
        Self {
            run: Running::spawn(cmd),
            seen: Seen {
                state: run_driver::state_dir(tag),
                pods: run_driver::pods_dir(tag),
                uids: BTreeSet::new(),
                pod: None,
                ready_while_running: None,
                tag: tag.to_string(),
                last_poll: None,
            },
        }
    }

    /// Waits (at most `within`) for a line containing `text`; the line. Fails with the run's
    /// output when it ends first or the time is up (the run is stopped then).
    pub fn wait_for(&mut self, text: &str, within: Duration) -> String {
        let seen = &mut self.seen;
        self.run.expect_line(text, within, || seen.poll())
    }

    /// Stops the run and panics with `why` and its output.
    pub fn fail(&mut self, why: &str) -> ! {
        self.run.signal("TERM");
        let out = self.finish();
        panic!("{why}:\n{}", out.text());
    }

    pub fn finish(&mut self) -> Output {
        let seen = &mut self.seen;
        self.run.finish(|| seen.poll())
    }

    /// Stops the run with SIGTERM (as a user does) and checks it cleaned up after itself.
    pub fn stop_and_check_cleanup(mut self) {
        self.run.signal("TERM");
        let out = self.finish();
        let text = out.text();
        assert!(out.success(), "kvrs run after SIGTERM failed:\n{text}");
        assert!(
            out.stdout.contains("stopped; nothing left behind"),
            "{text}"
        );
        let uids = &self.seen.uids;
        assert_eq!(uids.len(), 1, "one launcher pod: {uids:?}");
        assert_eq!(
            self.seen.leftovers(),
            Vec::<String>::new(),
            "the run left something behind:\n{text}"
        );
    }
}

impl Seen {
    /// Notes the pods' UIDs, and (every 2 s) the launcher pod as the API server has it.
    pub fn poll(&mut self) {
        for e in std::fs::read_dir(&self.pods)
            .into_iter()
            .flatten()
            .flatten()
        {
            self.uids
                .insert(e.file_name().to_string_lossy().into_owned());
        }
        if self
            .last_poll
            .is_some_and(|t| t.elapsed() < Duration::from_secs(2))
        {
            return;
        }
        self.last_poll = Some(Instant::now());
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(self.state.join("kubeconfig"))
            .args([
                "get",
                "pods",
                "-n",
                "default",
                "-l",
                "kubevirt.io=virt-launcher",
            ])
            .args(["-o", "json", "--request-timeout", "2s"])
            .output();
        if let Ok(out) = out
            && out.status.success()
            && let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout)
            && v["items"][0].is_object()
        {
            let pod = v["items"][0].clone();
            if pod["status"]["phase"] == "Running"
                && let Some(ready) = pod["status"]["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
            {
                self.ready_while_running = Some(ready.clone());
            }
            self.pod = Some(pod);
        }
    }

    /// The launcher pod, read now.
    pub fn pod_now(&mut self) -> serde_json::Value {
        self.last_poll = None;
        self.poll();
        self.pod.clone().expect("the launcher pod")
    }

    /// What the run's pods left on the machine: their network namespaces, host veths,
    /// cgroups, processes, mounts of the run's directories, and the directories themselves.
    pub fn leftovers(&self) -> Vec<String> {
        let mut left = Vec::new();
        let dirs = [self.state.clone(), self.pods.clone()];
        for d in &dirs {
            if d.exists() {
                left.push(format!("directory {}", d.display()));
            }
        }
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for l in mountinfo.lines() {
            if dirs.iter().any(|d| l.contains(&*d.to_string_lossy())) {
                left.push(format!("mount {l}"));
            }
        }
        for uid in &self.uids {
            let short = kvrs_kubelet::PodKey {
                namespace: String::new(),
                name: String::new(),
                uid: uid.clone(),
            }
            .short_id();
            if Path::new("/run/netns")
                .join(format!("kvrs-{short}"))
                .exists()
            {
                left.push(format!("netns kvrs-{short}"));
            }
            if Path::new("/sys/class/net")
                .join(format!("kvh{short}"))
                .exists()
            {
                left.push(format!("link kvh{short}"));
            }
            for cg in lines_of(Command::new("find").args([
                "/sys/fs/cgroup",
                "-maxdepth",
                "3",
                "-path",
                &format!("*kvrs-kubelet-*/{short}*"),
            ])) {
                left.push(format!("cgroup {cg}"));
            }
            for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
                let cgroup = std::fs::read_to_string(e.path().join("cgroup")).unwrap_or_default();
                if cgroup.contains(&format!("/{short}")) && cgroup.contains("kvrs-kubelet-") {
                    left.push(format!("process {}", e.file_name().to_string_lossy()));
                }
            }
        }
        left
    }

    /// The XML of the domain the launcher's libvirt runs, through its socket in the pod's
    /// `libvirt-runtime` emptyDir.
    pub fn domain_xml(&self) -> String {
        let socket = std::fs::read_dir(&self.pods)
            .expect("the kubelet's pods directory")
            .flatten()
            .map(|e| {
                e.path()
                    .join("volumes/kubernetes.io~empty-dir/libvirt-runtime/virtqemud-sock")
            })
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no libvirt socket under {}", self.pods.display()));
        // The socket's path is longer than a Unix socket address holds: a short link to it.
        let link = PathBuf::from(format!(
            "/tmp/kvrs-{}-{}.sock",
            self.tag,
            std::process::id()
        ));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&socket, &link).unwrap();
        let out = Command::new("virsh")
            .arg("-c")
            .arg(format!("qemu+unix:///session?socket={}", link.display()))
            .args(["dumpxml", "default_guest"])
            .output()
            .expect("run virsh");
        let _ = std::fs::remove_file(&link);
        assert!(
            out.status.success(),
            "virsh dumpxml: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}
