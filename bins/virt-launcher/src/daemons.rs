//! The libvirt daemon (`virtqemud` where installed, else the monolithic `libvirtd`) and
//! `virtlogd`, started as the launcher's children with a private configuration, as KubeVirt's
//! launcher does: session mode when non-root (runtime files under `$XDG_RUNTIME_DIR/libvirt`,
//! configuration under `$XDG_CONFIG_HOME/libvirt`), no TCP/TLS, QEMU's output through virtlogd,
//! no cgroup or namespace handling by libvirt (the pod already is the sandbox).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

use crate::libvirt::{self, Connection, Libvirt};
use crate::log;

/// How long the libvirt daemon gets to open its socket.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the socket is tried meanwhile: the daemon opens it ~0.1 s after its start, and every
/// millisecond between that and the connection is on the way to a running domain.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// Where libvirt's files live, from the pod's environment (KubeVirt's values as defaults).
#[derive(Debug, Clone)]
pub struct LibvirtLayout {
    /// `$XDG_RUNTIME_DIR` (`/var/run`).
    pub runtime: PathBuf,
    /// `$XDG_CONFIG_HOME` (`/var/run/kubevirt-private`).
    pub config: PathBuf,
    /// `$XDG_CACHE_HOME`.
    pub cache: PathBuf,
    /// `$HOME`.
    pub home: PathBuf,
    /// The launcher runs as root (system mode) or not (session mode).
    pub root: bool,
}

impl LibvirtLayout {
    /// Reads the environment.
    pub fn from_env() -> LibvirtLayout {
        let var = |k: &str, d: &str| {
            std::env::var_os(k)
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(d))
        };
        LibvirtLayout {
            runtime: var("XDG_RUNTIME_DIR", "/var/run"),
            config: var("XDG_CONFIG_HOME", "/var/run/kubevirt-private"),
            cache: var("XDG_CACHE_HOME", "/var/run/kubevirt-private"),
            home: var("HOME", "/var/run/kubevirt-private"),
            root: nix::unistd::geteuid().is_root(),
        }
    }

    /// `<runtime>/libvirt`: sockets, PID files, QEMU runtime state.
    pub fn libvirt_runtime(&self) -> PathBuf {
        self.runtime.join("libvirt")
    }

    /// The connection URI of the daemon.
    pub fn uri(&self) -> &'static str {
        if self.root {
            "qemu:///system"
        } else {
            "qemu:///session"
        }
    }
}

/// The running daemons.
pub struct Daemons {
    children: Vec<(&'static str, Child)>,
    /// The daemon's client socket.
    pub socket: PathBuf,
}

/// `virtqemud` when the system has it, else `libvirtd`.
fn daemon_binary() -> (&'static str, &'static str) {
    for dir in ["/usr/sbin", "/usr/bin"] {
        if Path::new(dir).join("virtqemud").is_file() {
            return ("virtqemud", "virtqemud-sock");
        }
    }
    ("libvirtd", "libvirt-sock")
}

fn write_configs(layout: &LibvirtLayout, log_filters: &str) -> std::io::Result<PathBuf> {
    let run = layout.libvirt_runtime();
    std::fs::create_dir_all(&run)?;
    let qemu_conf_dir = if layout.root {
        run.clone()
    } else {
        layout.config.join("libvirt")
    };
    std::fs::create_dir_all(&qemu_conf_dir)?;
    // KubeVirt's qemu.conf settings that matter outside a cluster: virtlogd for QEMU's stdio,
    // libvirt neither moves QEMU into cgroups nor builds mount namespaces (the pod is the sandbox).
    std::fs::write(
        qemu_conf_dir.join("qemu.conf"),
        "stdio_handler = \"logd\"\nnamespaces = [ ]\ncgroup_controllers = [ ]\nremember_owner = 0\n",
    )?;
    let mut daemon_conf = format!(
        "listen_tls = 0\nlisten_tcp = 0\nunix_sock_dir = \"{}\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\nlog_outputs = \"2:stderr\"\n",
        run.display()
    );
    if !log_filters.is_empty() && !log_filters.contains('"') {
        daemon_conf.push_str(&format!(
            "log_filters = \"{log_filters}\"\nlog_outputs = \"1:stderr\"\n"
        ));
    }
    let conf = run.join("virtqemud.conf");
    std::fs::write(&conf, daemon_conf)?;
    Ok(conf)
}

impl Daemons {
    /// Writes the configuration and starts virtlogd and the libvirt daemon. Returns once both
    /// are spawned; the caller waits for the socket by connecting.
    pub fn start(layout: &LibvirtLayout, log_filters: &str) -> std::io::Result<Daemons> {
        let conf = write_configs(layout, log_filters)?;
        let (binary, socket_name) = daemon_binary();
        let env = [
            ("XDG_RUNTIME_DIR", layout.runtime.as_os_str()),
            ("XDG_CONFIG_HOME", layout.config.as_os_str()),
            ("XDG_CACHE_HOME", layout.cache.as_os_str()),
            ("HOME", layout.home.as_os_str()),
        ];
        let spawn = |program: &str, args: &[&std::ffi::OsStr]| -> std::io::Result<Child> {
            Command::new(program)
                .args(args)
                .envs(env)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .kill_on_drop(true)
                .spawn()
        };
        let virtlogd = spawn("virtlogd", &[])?;
        let daemon = spawn(binary, &["-f".as_ref(), conf.as_os_str()])?;
        log::info(format_args!(
            "started virtlogd (pid {:?}) and {binary} (pid {:?})",
            virtlogd.id(),
            daemon.id()
        ));
        let run = layout.libvirt_runtime();
        Ok(Daemons {
            children: vec![("virtlogd", virtlogd), (binary, daemon)],
            socket: run.join(socket_name),
        })
    }

    /// Connects to the daemon as soon as its socket accepts, opening `uri`; fails when a daemon
    /// exits first or the socket does not come within [`CONNECT_TIMEOUT`].
    pub async fn connect(
        &mut self,
        uri: &str,
    ) -> Result<(Arc<Connection>, mpsc::UnboundedReceiver<libvirt::Event>), String> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        let mut last = String::from("socket not created");
        loop {
            if self.socket.exists() {
                match Connection::open(&self.socket, uri).await {
                    Ok(c) => return Ok(c),
                    Err(e) => last = e.to_string(),
                }
            }
            if let Some(name) = self.exited() {
                return Err(format!("{name} exited before it accepted connections"));
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "could not connect to libvirt at {}: {last}",
                    self.socket.display()
                ));
            }
            tokio::time::sleep(CONNECT_RETRY).await;
        }
    }

    /// Gives clients expecting KubeVirt's socket name (`virtqemud-sock`) a way in.
    pub fn link_kubevirt_socket_name(&self) {
        if let (Some(dir), Some(name)) = (self.socket.parent(), self.socket.file_name())
            && name != "virtqemud-sock"
        {
            let link = dir.join("virtqemud-sock");
            let _ = std::fs::remove_file(&link);
            let _ = std::os::unix::fs::symlink(name, link);
        }
    }

    /// A daemon exited on its own (its name), if any.
    pub fn exited(&mut self) -> Option<&'static str> {
        self.children
            .iter_mut()
            .find_map(|(name, c)| matches!(c.try_wait(), Ok(Some(_))).then_some(*name))
    }

    /// SIGTERM, a short wait, then SIGKILL: no domain is left to protect when this runs.
    pub async fn stop(mut self) {
        for (_, child) in self.children.iter().rev() {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        for (name, child) in self.children.iter_mut().rev() {
            if tokio::time::timeout(Duration::from_millis(300), child.wait())
                .await
                .is_err()
            {
                log::info(format_args!("{name} did not stop within 300ms, killing it"));
                let _ = child.kill().await;
            }
        }
    }
}
