//! Carries out a [`PodPlan`] on this machine, and undoes it: directories, files and the root
//! filesystem's links, the network namespace with its veth (`ip`, `sysctl`), and the container
//! run by runc (`runc run` in the foreground; `runc kill`, `runc delete --force`), whose cgroup
//! runc makes and removes.

use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tracing::{debug, warn};

use crate::error::HostError;
use crate::plan::{NetworkPlan, PodKey, PodPlan, SidecarPlan};
use crate::pod_exec::{ContainerSpec, PID_FILE, Runtime};

/// How long `runc run` may take to create the container (write its PID file).
const CREATE_TIMEOUT: Duration = Duration::from_secs(30);

/// What a pod leaves on the host, derivable from its key alone (so a pod found after a
/// restart, with no plan, can still be cleaned up).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Footprint {
    /// runc's container ID.
    pub container: String,
    /// runc and its state directory.
    pub runtime: Runtime,
    /// The network namespace.
    pub netns: String,
    /// The host end of the veth.
    pub host_veth: String,
    /// `<pods dir>/<uid>`.
    pub pod_dir: PathBuf,
    /// `<state dir>/pods/<uid>`.
    pub state_dir: PathBuf,
    /// The pod's cgroup, when cgroup v2 is available.
    pub cgroup: Option<PathBuf>,
}

impl Footprint {
    /// The footprint of `key` under `pods_dir`/`state_dir`, its container run by `runtime`,
    /// with its cgroup under `cgroup_root`.
    pub fn of(
        key: &PodKey,
        pods_dir: &Path,
        state_dir: &Path,
        runtime: &Runtime,
        cgroup_root: Option<&Path>,
    ) -> Self {
        let short = key.short_id();
        Self {
            container: crate::plan::container_id(key),
            runtime: runtime.clone(),
            netns: format!("kvrs-{short}"),
            host_veth: format!("kvh{short}"),
            pod_dir: pods_dir.join(&key.uid),
            state_dir: state_dir.join("pods").join(&key.uid),
            cgroup: cgroup_root.map(|r| r.join(&short)),
        }
    }
}

/// `<cgroup2 mount>/kvrs-kubelet-<node>`, created; `None` when there is no writable cgroup2.
/// runc puts each pod's container in its child `<short id>` (in every hierarchy: the v1
/// controllers too on a hybrid host), so a pod's processes can be killed at once
/// (`cgroup.kill`) even when runc's state is gone.
pub fn cgroup_root(node: &str) -> Option<PathBuf> {
    let mount = cgroup_mounts().into_iter().find(|(_, v2)| *v2)?.0;
    let root = mount.join(format!("kvrs-kubelet-{node}"));
    fs::create_dir_all(&root).ok()?;
    Some(root)
}

/// Every cgroup hierarchy's mount point, and whether it is cgroup2.
fn cgroup_mounts() -> Vec<(PathBuf, bool)> {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let fs_type = post.split_whitespace().next()?;
            let v2 = match fs_type {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some((PathBuf::from(pre.split_whitespace().nth(4)?), v2))
        })
        .collect()
}

/// Removes the node's cgroup `kvrs-kubelet-<node>` from every hierarchy (with the empty pod
/// cgroups a killed runner may have left in it), and runc's state directory when no container
/// is left in it: what the runner leaves when it stops.
pub fn remove_node_dirs(node: &str, runtime: &Runtime) {
    for (mount, _) in cgroup_mounts() {
        let dir = mount.join(format!("kvrs-kubelet-{node}"));
        if !dir.is_dir() {
            continue;
        }
        for child in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                // Fails (and stays) while a process is in it.
                let _ = fs::remove_dir(child.path());
            }
        }
        if let Err(e) = fs::remove_dir(&dir) {
            warn!(cgroup = %dir.display(), error = %e, "removing the node's cgroup");
        }
    }
    let _ = fs::remove_dir(&runtime.root);
}

/// An IPv4 route of the host's main table: its network and prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// The destination network.
    pub network: std::net::Ipv4Addr,
    /// Its prefix length.
    pub prefix_len: u8,
}

/// The host's IPv4 routes (`/proc/net/route`); empty when they cannot be read.
///
/// Why: a pod's /30 must not already be routed elsewhere. A runner killed without cleaning up
/// (a test run interrupted, a crashed kubelet with another state directory) leaves its veth
/// and its route behind; a new pod given the same block would be unreachable from the host,
/// since the older route wins.
pub fn host_routes() -> Vec<Route> {
    fs::read_to_string("/proc/net/route")
        .map(|t| parse_proc_net_route(&t))
        .unwrap_or_default()
}

/// Parses `/proc/net/route`: a header line, then tab-separated fields where destination
/// and mask are the network-order address printed as a native-endian hex `u32`. Lines that
/// do not parse, and masks that are not prefixes, are skipped.
pub fn parse_proc_net_route(text: &str) -> Vec<Route> {
    let addr = |hex: &str| {
        u32::from_str_radix(hex, 16)
            .ok()
            .map(|v| std::net::Ipv4Addr::from(v.to_ne_bytes()))
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let network = addr(f.get(1)?)?;
            let mask = u32::from(addr(f.get(7)?)?);
            let prefix_len = mask.leading_ones();
            (mask.count_ones() == prefix_len).then_some(Route {
                network,
                prefix_len: u8::try_from(prefix_len).ok()?,
            })
        })
        .collect()
}

fn run_ip(args: &[&str]) -> Result<(), HostError> {
    let out = std::process::Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HostError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: e.to_string(),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(HostError::Command {
        command: format!("ip {}", args.join(" ")),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Creates the network namespace with `eth0` (the pod IP, default route via the host end),
/// `lo` up and the sysctls set; a stale namespace or veth of the same name is removed first.
pub fn setup_network(n: &NetworkPlan) -> Result<(), HostError> {
    remove_network(&n.netns, &n.host_veth);
    let a = n.address;
    let gw = format!("{}/{}", a.gateway, a.prefix_len);
    let ip = format!("{}/{}", a.pod_ip, a.prefix_len);
    let ns = n.netns.as_str();
    run_ip(&["netns", "add", ns])?;
    run_ip(&[
        "link",
        "add",
        &n.host_veth,
        "type",
        "veth",
        "peer",
        "name",
        "eth0",
        "netns",
        ns,
    ])?;
    run_ip(&["addr", "add", &gw, "dev", &n.host_veth])?;
    run_ip(&["link", "set", &n.host_veth, "up"])?;
    run_ip(&["-n", ns, "link", "set", "lo", "up"])?;
    run_ip(&["-n", ns, "addr", "add", &ip, "dev", "eth0"])?;
    run_ip(&["-n", ns, "link", "set", "eth0", "up"])?;
    run_ip(&[
        "-n",
        ns,
        "route",
        "add",
        "default",
        "via",
        &a.gateway.to_string(),
    ])?;
    for (k, v) in &n.sysctls {
        let kv = format!("{k}={v}");
        run_ip(&["netns", "exec", ns, "sysctl", "-q", "-w", &kv])?;
    }
    Ok(())
}

/// Removes the namespace (its `eth0` and so the veth pair go with it) and the host end, if
/// they exist.
pub fn remove_network(netns: &str, host_veth: &str) {
    if Path::new("/run/netns").join(netns).exists()
        && let Err(e) = run_ip(&["netns", "del", netns])
    {
        warn!(netns, error = %e, "removing network namespace");
    }
    if Path::new("/sys/class/net").join(host_veth).exists() {
        let _ = run_ip(&["link", "del", host_veth]);
    }
}

/// Creates the plan's directories, files and links.
pub fn setup_files(plan: &PodPlan) -> Result<(), HostError> {
    for d in &plan.dirs {
        fs::create_dir_all(&d.path).map_err(HostError::io(&d.path))?;
        fs::set_permissions(&d.path, fs::Permissions::from_mode(d.mode))
            .map_err(HostError::io(&d.path))?;
        std::os::unix::fs::chown(&d.path, Some(d.uid), Some(d.gid))
            .map_err(HostError::io(&d.path))?;
    }
    for f in &plan.files {
        if let Some(parent) = f.path.parent() {
            fs::create_dir_all(parent).map_err(HostError::io(parent))?;
        }
        fs::write(&f.path, &f.contents).map_err(HostError::io(&f.path))?;
        fs::set_permissions(&f.path, fs::Permissions::from_mode(f.mode))
            .map_err(HostError::io(&f.path))?;
    }
    for l in &plan.links {
        let _ = fs::remove_file(&l.path);
        std::os::unix::fs::symlink(&l.target, &l.path).map_err(HostError::io(&l.path))?;
    }
    for s in &plan.sidecars {
        if let Some(image) = &s.image_dir {
            fill_tree(image, &s.container_spec.rootfs)?;
        }
    }
    if let Some(parent) = plan.log_path.parent() {
        fs::create_dir_all(parent).map_err(HostError::io(parent))?;
    }
    Ok(())
}

/// Fills `to` with the file tree of `from` (an image's directory): directories made with their
/// modes, files hard-linked (copied when `from` is on another file system), symbolic links
/// made again. The container's root filesystem is read-only, so the links share nothing it
/// could change; removing the pod's state removes the links, never the image's files.
fn fill_tree(from: &Path, to: &Path) -> Result<(), HostError> {
    for entry in fs::read_dir(from).map_err(HostError::io(from))? {
        let entry = entry.map_err(HostError::io(from))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        let meta = fs::symlink_metadata(&src).map_err(HostError::io(&src))?;
        let kind = meta.file_type();
        if kind.is_dir() {
            fs::create_dir_all(&dst).map_err(HostError::io(&dst))?;
            fs::set_permissions(&dst, meta.permissions()).map_err(HostError::io(&dst))?;
            fill_tree(&src, &dst)?;
        } else if kind.is_symlink() {
            let target = fs::read_link(&src).map_err(HostError::io(&src))?;
            let _ = fs::remove_file(&dst);
            std::os::unix::fs::symlink(target, &dst).map_err(HostError::io(&dst))?;
        } else if kind.is_file() {
            let _ = fs::remove_file(&dst);
            if fs::hard_link(&src, &dst).is_err() {
                fs::copy(&src, &dst).map_err(HostError::io(&dst))?;
            }
        }
    }
    Ok(())
}

/// Starts the container: writes the bundle's `config.json` (the plan's runtime spec, optional
/// host files checked now) and runs `runc run` in the foreground, stdin closed, stdout and
/// stderr (runc's own errors, then the container's output) appended to the log, in its own
/// process group (a terminal's Ctrl-C is the runner's to handle, not the container's). Returns
/// runc's process and the container's first process's PID once runc has created the container;
/// an error with runc's words when it could not.
pub async fn spawn(
    plan: &PodPlan,
    runtime: &Runtime,
) -> Result<(tokio::process::Child, u32), HostError> {
    spawn_container(
        &plan.container_spec,
        &plan.state_dir,
        &plan.log_path,
        runtime,
    )
    .await
}

/// Starts one of the pod's other containers, as [`spawn`] starts the main one.
pub async fn spawn_sidecar(
    sidecar: &SidecarPlan,
    runtime: &Runtime,
) -> Result<(tokio::process::Child, u32), HostError> {
    spawn_container(
        &sidecar.container_spec,
        &sidecar.bundle,
        &sidecar.log_path,
        runtime,
    )
    .await
}

async fn spawn_container(
    container: &ContainerSpec,
    bundle: &Path,
    log_path: &Path,
    runtime: &Runtime,
) -> Result<(tokio::process::Child, u32), HostError> {
    let config = bundle.join("config.json");
    let spec = container.runtime_spec(|p| p.exists());
    let json = serde_json::to_vec_pretty(&spec).map_err(|e| HostError::Io {
        path: config.clone(),
        source: e.into(),
    })?;
    fs::write(&config, json).map_err(HostError::io(&config))?;
    fs::create_dir_all(&runtime.root).map_err(HostError::io(&runtime.root))?;
    let pid_file = bundle.join(PID_FILE);
    let _ = fs::remove_file(&pid_file);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(HostError::io(log_path))?;
    let log2 = log.try_clone().map_err(HostError::io(log_path))?;
    let id = &container.id;
    let args = runtime.run(id, bundle);
    let mut child = tokio::process::Command::new(&runtime.program)
        .args(&args)
        .env_clear()
        .env("PATH", crate::plan::DEFAULT_PATH)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(|e| HostError::Command {
            command: command_line(runtime, &args),
            stderr: e.to_string(),
        })?;
    let deadline = tokio::time::Instant::now() + CREATE_TIMEOUT;
    loop {
        if let Some(pid) = fs::read_to_string(&pid_file)
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        {
            return Ok((child, pid));
        }
        let failed = |why: String| HostError::Command {
            command: command_line(runtime, &args),
            stderr: log_tail(log_path).unwrap_or(why),
        };
        match child.try_wait() {
            Ok(Some(status)) => return Err(failed(format!("exited {status} before starting"))),
            Ok(None) if tokio::time::Instant::now() < deadline => {}
            _ => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                let _ = run_runtime(runtime, &runtime.delete(id)).await;
                return Err(failed(format!(
                    "no container after {}s",
                    CREATE_TIMEOUT.as_secs()
                )));
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn command_line(runtime: &Runtime, args: &[OsString]) -> String {
    let mut s = runtime.program.display().to_string();
    for a in args {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs one runc command to its end; `Err` with what runc printed.
async fn run_runtime(runtime: &Runtime, args: &[OsString]) -> Result<(), String> {
    let out = tokio::process::Command::new(&runtime.program)
        .args(args)
        .env_clear()
        .env("PATH", crate::plan::DEFAULT_PATH)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| format!("{}: {e}", command_line(runtime, args)))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}: {}",
        command_line(runtime, args),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Sends `sig` to one process; a process already gone is not an error.
pub fn signal(pid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pid) {
        let _ = kill(Pid::from_raw(p), sig);
    }
}

/// Whether `pid` is a process of the pod (in its cgroup): a recorded PID may have been reused by
/// an unrelated process once the container ended.
fn in_pod(fp: &Footprint, pid: u32) -> bool {
    let short = fp.container.trim_start_matches("kvrs-");
    fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|t| {
        t.lines().any(|l| {
            l.contains("/kvrs-kubelet-")
                && (l.ends_with(&format!("/{short}")) || l.contains(&format!("/{short}-")))
        })
    })
}

/// Sends `sig` to the container's first process through `runc kill`; when runc no longer knows
/// the container (it is ending), to `pid` directly if that is still a process of the pod.
pub async fn signal_container(fp: &Footprint, pid: Option<u32>, sig: Signal) {
    signal_container_id(fp, &fp.container, pid, sig).await;
}

/// [`signal_container`] for the pod's container of runc ID `id` (a sidecar's).
pub async fn signal_container_id(fp: &Footprint, id: &str, pid: Option<u32>, sig: Signal) {
    let name = sig.as_str().trim_start_matches("SIG");
    if let Err(e) = run_runtime(&fp.runtime, &fp.runtime.kill(id, name)).await {
        debug!(container = %id, error = %e, "runc kill");
        if let Some(pid) = pid.filter(|p| in_pod(fp, *p)) {
            signal(pid, sig);
        }
    }
}

/// Removes the pod's containers: `runc delete --force` of each runc still knows (the main
/// one, `kvrs-<short id>`, and its sidecars, `kvrs-<short id>-<name>`: it kills what is left,
/// removes their cgroups and runc's state of them), then, should anything have escaped runc,
/// kills each of the pod's cgroups (`cgroup.kill`, else each process in it; `pid` too while it
/// is in the pod), waits (up to 5 s) for it to empty and removes it.
pub async fn remove_container(fp: &Footprint, pid: Option<u32>) {
    let sidecar_prefix = format!("{}-", fp.container);
    let ids: Vec<String> = fs::read_dir(&fp.runtime.root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| *n == fp.container || n.starts_with(&sidecar_prefix))
        .collect();
    for id in ids {
        if let Err(e) = run_runtime(&fp.runtime, &fp.runtime.delete(&id)).await {
            warn!(container = %id, error = %e, "runc delete");
        }
    }
    if let Some(pid) = pid.filter(|p| in_pod(fp, *p)) {
        signal(pid, Signal::SIGKILL);
    }
    for cg in pod_cgroups(fp) {
        remove_cgroup(&cg).await;
    }
}

/// The pod's cgroups that exist: its main container's (`<root>/<short id>`) and its sidecars'
/// (`<root>/<short id>-<name>`).
fn pod_cgroups(fp: &Footprint) -> Vec<PathBuf> {
    let Some(main) = fp.cgroup.as_deref() else {
        return Vec::new();
    };
    let (Some(root), Some(short)) = (main.parent(), main.file_name()) else {
        return Vec::new();
    };
    let prefix = format!("{}-", short.to_string_lossy());
    fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            n == short || n.to_string_lossy().starts_with(&prefix)
        })
        .map(|e| e.path())
        .collect()
}

async fn remove_cgroup(cg: &Path) {
    let procs = cg.join("cgroup.procs");
    for _ in 0..50 {
        let left = fs::read_to_string(&procs).unwrap_or_default();
        if left.trim().is_empty() {
            break;
        }
        if fs::write(cg.join("cgroup.kill"), "1").is_err() {
            for p in left
                .split_whitespace()
                .filter_map(|p| p.parse::<u32>().ok())
            {
                signal(p, Signal::SIGKILL);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Err(e) = fs::remove_dir(cg) {
        warn!(cgroup = %cg.display(), error = %e, "removing the pod's cgroup");
    }
}

/// Removes everything of the pod but its log: the container, network, directories.
pub async fn teardown(fp: &Footprint, pid: Option<u32>) {
    remove_container(fp, pid).await;
    remove_network(&fp.netns, &fp.host_veth);
    for d in [&fp.pod_dir, &fp.state_dir] {
        if let Err(e) = fs::remove_dir_all(d)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            warn!(dir = %d.display(), error = %e, "removing pod directory");
        }
    }
}

/// The start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22): with the
/// pid, it tells the process apart from a later one that reused the number.
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// The last lines of a log (at most 4 KiB): the termination message of a failed container.
pub fn log_tail(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    let start = bytes.len().saturating_sub(4096);
    let text = String::from_utf8_lossy(&bytes[start..]);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
    (!tail.trim().is_empty()).then_some(tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel prints network-order addresses as native `u32`s; this text is x86's.
    #[cfg(target_endian = "little")]
    #[test]
    fn routes_parse_from_proc_net_route() {
        // A real table: the default route, a pod's /30 left by a killed runner, the LAN.
        let text = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            kvh6081154d32\t0000FB0A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0\n\
            eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            broken line\n";
        let routes = parse_proc_net_route(text);
        let shown: Vec<String> = routes
            .iter()
            .map(|r| format!("{}/{}", r.network, r.prefix_len))
            .collect();
        assert_eq!(shown, ["0.0.0.0/0", "10.251.0.0/30", "192.0.2.0/24"]);
    }

    #[test]
    fn the_hosts_own_table_parses() {
        // Every machine that runs pods has at least one IPv4 route (loopback-only hosts aside,
        // which cannot run a pod network anyway).
        let text = fs::read_to_string("/proc/net/route").expect("/proc/net/route is readable");
        assert_eq!(
            parse_proc_net_route(&text).len(),
            text.lines()
                .skip(1)
                .filter(|l| !l.trim().is_empty())
                .count()
        );
    }
}
