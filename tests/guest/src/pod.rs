//! Launcher pods for the end-to-end tests: the kvrs binaries a pod runs, and the `compute`
//! container's command — `virt-launcher-monitor` as UID 107 in its own mount namespace
//! (`scripts/libvirt-sandbox.sh`), optionally in a network namespace, with the pod's directories
//! bound where KubeVirt's paths point.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// The workspace root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>-<hash>`).
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Whether this process runs as root (namespaces, UID 107 and device nodes need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// Runs `cmd`, panicking with its stderr when it fails; returns its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(virt-launcher-monitor, virt-launcher)` of this checkout: from `KVRS_E2E_BIN_DIR` when set
/// (benches/launcher-figures.sh measures release binaries), else the test's target dir, built
/// there if missing or when `KVRS_E2E_REBUILD` is set. (`cargo test --workspace --all-targets`
/// builds them fresh; a nested cargo would wait on the running one's lock.)
pub fn launcher_binaries() -> (PathBuf, PathBuf) {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(dir) = std::env::var_os("KVRS_E2E_BIN_DIR").map(PathBuf::from) {
        return (dir.join("virt-launcher-monitor"), dir.join("virt-launcher"));
    }
    let dir = target_dir();
    let (monitor, launcher) = (dir.join("virt-launcher-monitor"), dir.join("virt-launcher"));
    if !monitor.is_file() || !launcher.is_file() || std::env::var_os("KVRS_E2E_REBUILD").is_some() {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(repo_root()).args([
            "build",
            "-p",
            "virt-launcher",
            "-p",
            "virt-launcher-monitor",
        ]);
        if dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        run(&mut cmd);
    }
    (monitor, launcher)
}

/// The `compute` container of a launcher pod, as the tests start it.
#[derive(Clone, Debug)]
pub struct MonitorCommand {
    /// VMI name.
    pub name: String,
    /// VMI UID.
    pub uid: String,
    /// VMI namespace.
    pub namespace: String,
    /// `--qemu-timeout`, e.g. `60s`.
    pub qemu_timeout: String,
    /// `--grace-period-seconds` of the launcher.
    pub grace_period_seconds: u32,
    /// `--image-volume`: container disks come from image volumes.
    pub image_volume: bool,
    /// The network namespace to run in (`ip netns exec`), if any.
    pub netns: Option<String>,
    /// `SRC:DST` bind mounts inside the pod's mount namespace, in order.
    pub binds: Vec<(PathBuf, String)>,
    /// Where libvirt-sandbox.sh keeps its masked files.
    pub sandbox_state: PathBuf,
    /// `--hook-sidecars`: how many hook sidecars the launcher waits for.
    pub hook_sidecars: u32,
}

impl MonitorCommand {
    /// A pod for VMI `namespace/name` (`uid`) whose `/run` is `run_dir`.
    pub fn new(namespace: &str, name: &str, uid: &str, run_dir: &Path) -> Self {
        Self {
            name: name.into(),
            uid: uid.into(),
            namespace: namespace.into(),
            qemu_timeout: "60s".into(),
            grace_period_seconds: 5,
            image_volume: false,
            netns: None,
            binds: vec![(run_dir.to_path_buf(), "/run".into())],
            sandbox_state: run_dir.with_extension("sandbox"),
            hook_sidecars: 0,
        }
    }

    /// The command; stdin is closed, output is the caller's to direct. The child it spawns IS the
    /// monitor (every wrapper `exec`s).
    pub fn command(&self) -> Command {
        let (monitor, _) = launcher_binaries();
        let mut cmd = match &self.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "bash"]);
                c
            }
            None => Command::new("bash"),
        };
        cmd.arg(repo_root().join("scripts/libvirt-sandbox.sh"))
            .args(["--uid", "107", "--state-dir"])
            .arg(&self.sandbox_state);
        for (src, dst) in &self.binds {
            cmd.arg("--bind").arg(format!("{}:{dst}", src.display()));
        }
        cmd.arg("--")
            .arg(monitor)
            .args(["--qemu-timeout", &self.qemu_timeout])
            .args(["--name", &self.name, "--uid", &self.uid])
            .args(["--namespace", &self.namespace])
            .args(["--kubevirt-share-dir", "/var/run/kubevirt"])
            .args(["--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks"])
            .args(["--container-disk-dir", "/var/run/kubevirt/container-disks"])
            .args([
                "--grace-period-seconds",
                &self.grace_period_seconds.to_string(),
            ])
            .args(["--hook-sidecars", &self.hook_sidecars.to_string()])
            .args(["--hypervisor", "kvm"])
            .args(["--run-as-nonroot", "--allow-emulation"]);
        if self.image_volume {
            cmd.arg("--image-volume");
        }
        cmd.env("XDG_RUNTIME_DIR", "/var/run")
            .env("XDG_CONFIG_HOME", "/var/run/kubevirt-private")
            .env("XDG_CACHE_HOME", "/var/run/kubevirt-private")
            .env("HOME", "/var/run/kubevirt-private")
            .stdin(Stdio::null());
        cmd
    }
}

/// The binary `name` of workspace package `package` in the test's target dir, built there if
/// missing or when `KVRS_E2E_REBUILD` is set (`cargo test --workspace --all-targets` builds
/// every binary fresh first).
pub fn workspace_binary(package: &str, name: &str) -> PathBuf {
    static BUILD: Mutex<()> = Mutex::new(());
    let _guard = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let path = target_dir().join(name);
    if !path.is_file() || std::env::var_os("KVRS_E2E_REBUILD").is_some() {
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(repo_root())
            .args(["build", "-p", package, "--bin", name]);
        if target_dir().file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        run(&mut cmd);
    }
    path
}

/// A launcher pod's `/run` for the tests that run the launcher without a kubelet: the
/// directories KubeVirt's paths point into, under the system's temporary directory; removed
/// with its launcher log and sandbox state when the test passes (kept for a look when it
/// fails).
pub struct PodDir {
    /// The directory bound at the pod's `/run`.
    pub dir: PathBuf,
    vmi_uid: String,
}

impl PodDir {
    /// An empty pod directory `kvrs-<tag>-<pid>` for VMI `vmi_uid`.
    pub fn new(tag: &str, vmi_uid: &str) -> PodDir {
        let dir = std::env::temp_dir().join(format!("kvrs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in [
            "kubevirt/container-disks/kernel-boot",
            "kubevirt/sockets",
            "kubevirt-private",
            "kubevirt-ephemeral-disks",
        ] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        PodDir {
            dir,
            vmi_uid: vmi_uid.into(),
        }
    }

    /// [`PodDir::new`] holding the test guest (kernel and initramfs as the kernel-boot
    /// container's, an empty 64 MiB qcow2 as the container disk), handed to UID 107.
    pub fn with_test_guest(tag: &str, vmi_uid: &str) -> PodDir {
        let pod = PodDir::new(tag, vmi_uid);
        let g = crate::guest(&target_dir());
        std::fs::copy(
            &g.kernel,
            pod.path("kubevirt/container-disks/kernel-boot/vmlinuz"),
        )
        .unwrap();
        std::fs::copy(
            &g.initrd,
            pod.path("kubevirt/container-disks/kernel-boot/initramfs.gz"),
        )
        .unwrap();
        run(Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2"])
            .arg(pod.path("kubevirt/container-disks/disk_0.img"))
            .arg("64M"));
        pod.hand_to_qemu_user();
        pod
    }

    /// `rel` inside the pod's `/run`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    /// Gives the directory to the pod's QEMU user, as a pod's emptyDirs are.
    pub fn hand_to_qemu_user(&self) {
        run(Command::new("chown")
            .arg("-R")
            .arg("107:107")
            .arg(&self.dir));
        run(Command::new("chmod").arg("755").arg(&self.dir));
    }

    /// The guest's serial console log so far.
    pub fn serial_log(&self) -> String {
        std::fs::read(self.path(&format!(
            "kubevirt-private/{}/virt-serial0-log",
            self.vmi_uid
        )))
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
    }

    /// Where the monitor's and launcher's output goes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.with_extension("log")
    }

    /// The monitor's and launcher's output so far.
    pub fn launcher_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Starts `virt-launcher-monitor` for VMI `namespace/name` in this pod (`command` may
    /// adjust the [`MonitorCommand`]), its output to [`PodDir::log_path`].
    pub fn start_monitor(
        &self,
        namespace: &str,
        name: &str,
        adjust: impl FnOnce(&mut MonitorCommand),
    ) -> RunningMonitor {
        let log = std::fs::File::create(self.log_path()).unwrap();
        let mut monitor = MonitorCommand::new(namespace, name, &self.vmi_uid, &self.dir);
        adjust(&mut monitor);
        monitor
            .command()
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map(RunningMonitor)
            .expect("start virt-launcher-monitor through libvirt-sandbox.sh")
    }
}

impl Drop for PodDir {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
            let _ = std::fs::remove_file(self.log_path());
            let _ = std::fs::remove_dir_all(self.dir.with_extension("sandbox"));
        }
    }
}

/// The running monitor. A test that fails mid-way still ends it (SIGTERM, which makes it stop
/// QEMU and the daemons, then SIGKILL after 30 s): a failed run must not leave a guest running
/// behind for the next run's "nothing left behind" checks.
pub struct RunningMonitor(pub std::process::Child);

impl std::ops::Deref for RunningMonitor {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for RunningMonitor {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for RunningMonitor {
    fn drop(&mut self) {
        if !matches!(self.0.try_wait(), Ok(None)) {
            return;
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if !matches!(self.0.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
