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
