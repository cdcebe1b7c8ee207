//! The exec helper: the process that becomes a pod's container.
//!
//! A container runtime does this between `fork` and `exec`; the workspace forbids `unsafe`, so
//! there is no `pre_exec` hook and the runner starts this helper instead (the `kvrs-pod-exec`
//! binary, or `kvrs __pod-exec`). Single-threaded by construction (no runtime, no threads), it
//! 1. joins the cgroup the runner made for the pod (so every descendant can be killed at once),
//! 2. enters the pod's network namespace and unshares a mount (and UTS) namespace, making every
//!    mount private so nothing propagates back to the host,
//! 3. remounts `/sys` for the new network namespace (as `ip netns exec` does),
//! 4. binds a fresh directory over `/run` and then each volume at its mount path (sources are
//!    opened before `/run` is covered, so a source under the host's `/run` still works),
//! 5. binds the pod's private device nodes (`/dev/kvm` among them when requested), masks the
//!    host's `/dev/kvm` when the container did not request it,
//!    and adds a `qemu` passwd/group entry for the UID when the host has none,
//! 6. drops every supplementary group, then to the container's GID and UID, and `execve`s.
//!
//! Any failure prints `kvrs-pod-exec: ...` on stderr (the container's log) and exits 127, as a
//! runtime that cannot start a container would report it.

use std::ffi::{CString, OsString};
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sched::{CloneFlags, setns, unshare};
use nix::sys::stat::Mode;
use nix::unistd::{Gid, Uid, execve, setgid, setgroups, sethostname, setuid};
use serde::{Deserialize, Serialize};

/// Exit status when the helper cannot start the container (a runtime's "cannot run").
pub const EXIT_CANNOT_RUN: i32 = 127;

/// Everything the helper does, serialised by the runner into a file whose path is the helper's
/// one argument.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSpec {
    /// `/run/netns/<name>` of the pod's network namespace.
    pub netns: Option<PathBuf>,
    /// The pod's hostname, set in a private UTS namespace.
    pub hostname: Option<String>,
    /// The cgroup (v2) directory to join first; `None` when the host has no cgroup2 mount.
    pub cgroup: Option<PathBuf>,
    /// A host directory bound over `/run` before the mounts (the pod's own `/run`).
    pub run_dir: Option<PathBuf>,
    /// Bind mounts, parents before children.
    pub mounts: Vec<BindMount>,
    /// What the container may do with `/dev/kvm`.
    pub kvm: KvmAccess,
    /// An empty file bound over `/dev/kvm` to mask it.
    pub kvm_mask: PathBuf,
    /// Where to write passwd/group copies with a `qemu` entry when the UID has none.
    pub passwd_dir: Option<PathBuf>,
    /// The container's UID.
    pub uid: u32,
    /// The container's GID (no supplementary groups).
    pub gid: u32,
    /// The working directory.
    pub working_dir: PathBuf,
    /// The executable (already mapped to a local binary).
    pub command: PathBuf,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
}

/// One bind mount inside the container's mount namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    /// The host path.
    pub source: PathBuf,
    /// The absolute path in the container.
    pub target: PathBuf,
    /// Remounted read-only after binding.
    pub read_only: bool,
    /// A device node: skipped (with a warning) when the host has no file at `target`, since
    /// creating one would change the host's `/dev`.
    pub device: bool,
}

/// `/dev/kvm` in the container.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum KvmAccess {
    /// Not requested (`devices.kubevirt.io/kvm`): masked, as a container without the device
    /// would not see it.
    #[default]
    Masked,
    /// Requested: the pod's private device node is bound over `/dev/kvm` (one of the plan's
    /// device mounts); virt-handler hands it to QEMU's user before the domain starts.
    Private,
}

/// The helper's entry point: `args` are its arguments after the program (or subcommand) name,
/// i.e. one path to an [`ExecSpec`] JSON file. Never returns: it becomes the container or exits
/// with [`EXIT_CANNOT_RUN`].
pub fn main(args: impl IntoIterator<Item = OsString>) -> ! {
    let err = match run(args) {
        Ok(never) => match never {},
        Err(e) => e,
    };
    eprintln!("kvrs-pod-exec: {err}");
    std::process::exit(EXIT_CANNOT_RUN)
}

enum Never {}

fn run(args: impl IntoIterator<Item = OsString>) -> Result<Never, String> {
    let args: Vec<OsString> = args.into_iter().collect();
    let [spec_path] = args.as_slice() else {
        return Err(format!(
            "usage: kvrs-pod-exec SPEC.json (got {} arguments)",
            args.len()
        ));
    };
    let text = fs::read_to_string(spec_path)
        .map_err(|e| format!("{}: {e}", Path::new(spec_path).display()))?;
    let spec: ExecSpec = serde_json::from_str(&text).map_err(|e| format!("spec: {e}"))?;
    enter(&spec)?;
    exec(&spec)
}

fn enter(spec: &ExecSpec) -> Result<(), String> {
    if let Some(cg) = &spec.cgroup {
        fs::write(cg.join("cgroup.procs"), "0")
            .map_err(|e| format!("join cgroup {}: {e}", cg.display()))?;
    }
    if let Some(ns) = &spec.netns {
        let fd = open(ns, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(|e| format!("open {}: {e}", ns.display()))?;
        setns(&fd, CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns {}: {e}", ns.display()))?;
    }
    let mut flags = CloneFlags::CLONE_NEWNS;
    if spec.hostname.is_some() {
        flags |= CloneFlags::CLONE_NEWUTS;
    }
    unshare(flags).map_err(|e| format!("unshare: {e}"))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| format!("make / private: {e}"))?;
    if let Some(h) = &spec.hostname {
        sethostname(h).map_err(|e| format!("sethostname {h}: {e}"))?;
    }
    if spec.netns.is_some() {
        // /sys shows the network devices of the namespace that mounted it.
        if umount2("/sys", MntFlags::MNT_DETACH).is_ok() {
            mount(
                Some("sysfs"),
                "/sys",
                Some("sysfs"),
                MsFlags::empty(),
                None::<&str>,
            )
            .map_err(|e| format!("mount sysfs: {e}"))?;
        }
    }
    // Open every source before /run is covered: a source may live under the host's /run.
    let sources: Vec<Option<OwnedFd>> = spec
        .mounts
        .iter()
        .map(|m| {
            if m.device && !m.target.exists() {
                eprintln!(
                    "kvrs-pod-exec: warning: {} does not exist on this host; device not bound",
                    m.target.display()
                );
                return Ok(None);
            }
            open(&m.source, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map(Some)
                .map_err(|e| format!("volume source {}: {e}", m.source.display()))
        })
        .collect::<Result<_, String>>()?;
    let kvm_mask = open(
        &spec.kvm_mask,
        OFlag::O_PATH | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok();
    if let Some(run) = &spec.run_dir {
        bind(run, Path::new("/run"), false)?;
    }
    for (m, fd) in spec.mounts.iter().zip(&sources) {
        let Some(fd) = fd else { continue };
        let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        make_target(&m.target, source.is_dir(), spec)?;
        bind(&source, &m.target, m.read_only)?;
    }
    drop(sources);
    let kvm = Path::new("/dev/kvm");
    if spec.kvm == KvmAccess::Masked && kvm.exists() {
        let fd = kvm_mask
            .as_ref()
            .ok_or_else(|| format!("kvm mask {} missing", spec.kvm_mask.display()))?;
        bind(
            Path::new(&format!("/proc/self/fd/{}", fd.as_raw_fd())),
            kvm,
            false,
        )?;
    }
    if let Some(dir) = &spec.passwd_dir
        && spec.uid != 0
    {
        add_qemu_entry(dir, "passwd", spec.uid, |id| {
            format!(
                "qemu:x:{id}:{}:qemu user:/home/qemu:/usr/sbin/nologin\n",
                spec.gid
            )
        })?;
        add_qemu_entry(dir, "group", spec.gid, |id| format!("qemu:x:{id}:\n"))?;
    }
    std::env::set_current_dir(&spec.working_dir)
        .map_err(|e| format!("chdir {}: {e}", spec.working_dir.display()))?;
    setgroups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    setgid(Gid::from_raw(spec.gid)).map_err(|e| format!("setgid {}: {e}", spec.gid))?;
    setuid(Uid::from_raw(spec.uid)).map_err(|e| format!("setuid {}: {e}", spec.uid))?;
    Ok(())
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Result<(), String> {
    let what = || format!("bind {} over {}", source.display(), target.display());
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(|e| format!("{}: {e}", what()))?;
    if read_only {
        mount(
            None::<&str>,
            target,
            None::<&str>,
            MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(|e| format!("{} read-only: {e}", what()))?;
    }
    Ok(())
}

/// Creates the mount point. Under `/run` (the pod's own directory by now) missing parents are
/// made and handed to the container's user, as an image would ship them; elsewhere the host's
/// filesystem shows through, so a missing mount point is an error rather than a change there.
fn make_target(target: &Path, dir: bool, spec: &ExecSpec) -> Result<(), String> {
    if target.exists() {
        return Ok(());
    }
    let under_run = spec.run_dir.is_some()
        && fs::canonicalize(target.parent().unwrap_or(Path::new("/")))
            .map(|p| p.starts_with("/run"))
            .unwrap_or_else(|_| target.starts_with("/run") || target.starts_with("/var/run"));
    if !under_run {
        return Err(format!(
            "mount point {} does not exist on this host (only paths under /run are created)",
            target.display()
        ));
    }
    let parent = target.parent().unwrap_or(Path::new("/run"));
    let mut missing = Vec::new();
    let mut p = parent;
    while !p.exists() {
        missing.push(p.to_path_buf());
        p = p.parent().unwrap_or(Path::new("/"));
    }
    fs::create_dir_all(parent).map_err(|e| format!("mkdir {}: {e}", parent.display()))?;
    for m in missing {
        chown(&m, spec.uid, spec.gid)?;
    }
    if dir {
        fs::create_dir(target).map_err(|e| format!("mkdir {}: {e}", target.display()))?;
        chown(target, spec.uid, spec.gid)?;
    } else {
        fs::File::create(target).map_err(|e| format!("create {}: {e}", target.display()))?;
    }
    Ok(())
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("chown {}: {e}", path.display()))
}

/// Binds a copy of `/etc/<file>` with a `qemu` line for `id` over it, when no line has that
/// ID (libvirt needs a passwd entry for the user it runs as).
fn add_qemu_entry(
    dir: &Path,
    file: &str,
    id: u32,
    line: impl Fn(u32) -> String,
) -> Result<(), String> {
    let etc = Path::new("/etc").join(file);
    let text = fs::read_to_string(&etc).unwrap_or_default();
    let has = text
        .lines()
        .any(|l| l.split(':').nth(2).is_some_and(|f| f == id.to_string()));
    if has {
        return Ok(());
    }
    let copy = dir.join(file);
    let mut new = text;
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&line(id));
    fs::write(&copy, new).map_err(|e| format!("{}: {e}", copy.display()))?;
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o644))
        .map_err(|e| format!("{}: {e}", copy.display()))?;
    bind(&copy, &etc, false)
}

fn exec(spec: &ExecSpec) -> Result<Never, String> {
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("NUL byte in {s:?}"));
    let program = spec
        .command
        .to_str()
        .ok_or_else(|| format!("command {} is not UTF-8", spec.command.display()))?;
    let mut argv = vec![cstr(program)?];
    for a in &spec.args {
        argv.push(cstr(a)?);
    }
    let env: Vec<CString> = spec
        .env
        .iter()
        .map(|(k, v)| cstr(&format!("{k}={v}")))
        .collect::<Result<_, _>>()?;
    let path = cstr(program)?;
    match execve(&path, &argv, &env) {
        Ok(never) => match never {},
        Err(e) => Err(format!("exec {program}: {e}")),
    }
}
