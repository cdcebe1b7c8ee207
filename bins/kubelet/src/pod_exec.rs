//! How a pod's container is executed: as an OCI container, through runc.
//!
//! The plan ([`crate::plan`]) describes the container as a [`ContainerSpec`]; its
//! [`runtime_spec`](ContainerSpec::runtime_spec) is the OCI runtime spec (`config.json`) runc
//! gets, and [`Runtime`] spells runc's command lines. Both are pure; [`crate::host`] writes the
//! bundle and runs them. What the container gets, as KubeVirt's launcher gets it from a
//! Kubernetes node:
//! - its own root filesystem, read-only, that is **not** the host's `/`: a directory of the
//!   pod's with `bin`, `sbin`, `lib`, `lib64` → `usr/...` links and a `/usr` of its image's
//!   (the launcher image unpacked, when its reference resolves to a directory) or else only the
//!   host's libraries, data and the launcher's programs (libvirt, QEMU, swtpm, `qemu-img`,
//!   `xorrisofs`), read-only ([`crate::root`]); a pod-owned `/etc` (passwd and group with the
//!   container's user, nsswitch, the managed hosts file, the host's `resolv.conf` and
//!   `localtime`, and the image's or else the host's `ld.so.cache` and `alternatives`, bound
//!   read-only), its private `/run` and `/tmp`, the container's mapped command binaries
//!   read-only at their host paths, and each volume at its mount path;
//! - its own PID, mount, IPC, UTS and cgroup namespaces, the pod's network namespace (joined by
//!   path), the pod's cgroup;
//! - the capability set the pod's `securityContext` asks for over the runtime's defaults
//!   (KubeVirt's non-root launcher: drop `ALL`, add `NET_BIND_SERVICE`), no inheritable or
//!   ambient capabilities, `no_new_privs`, and the runtime's default seccomp profile (an
//!   allowlist, see [`crate::oci::runtime_default_seccomp`]);
//! - a `/dev` of its own with only the default nodes and the device-plugin nodes it requested
//!   (`/dev/kvm`, `/dev/net/tun`, `/dev/vhost-net`), allowed in its device cgroup; root-owned
//!   0600, handed to QEMU's user by virt-handler through `/proc/<pid>/root`.
//!
//! runc runs in the foreground (`runc run`): it is the runner's child, the container's parent
//! and subreaper, and exits with the container's status (128 + the signal when killed), so the
//! runner learns how the container ended without being a subreaper itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::oci;

/// The file name of the container's init PID in the bundle (`runc run --pid-file`).
pub const PID_FILE: &str = "container.pid";

/// Everything about one container, as the plan decides it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// runc's container ID: `kvrs-<short id of the pod UID>`.
    pub id: String,
    /// `/run/netns/<name>` of the pod's network namespace, joined.
    pub netns: PathBuf,
    /// The pod's hostname (its own UTS namespace).
    pub hostname: String,
    /// The root filesystem's directory (mount points and links only; read-only once running).
    pub rootfs: PathBuf,
    /// The pod's cgroup, relative to each hierarchy's root: `/kvrs-kubelet-<node>/<short id>`.
    pub cgroups_path: String,
    /// Bind mounts (host paths into the container), parents before children.
    pub mounts: Vec<BindMount>,
    /// Device nodes created in the container's `/dev`.
    pub devices: Vec<DeviceNode>,
    /// The container's UID.
    pub uid: u32,
    /// The container's GID.
    pub gid: u32,
    /// Supplementary groups (`supplementalGroups`, `fsGroup`), without the GID.
    pub additional_gids: Vec<u32>,
    /// The bounding set (`CAP_...`).
    pub capabilities: Vec<String>,
    /// `no_new_privs` (unless `allowPrivilegeEscalation: true`).
    pub no_new_privileges: bool,
    /// The seccomp profile.
    pub seccomp: SeccompProfile,
    /// The working directory.
    pub working_dir: PathBuf,
    /// The executable, as a path in the container (the local binary's path: it is bound there).
    pub command: PathBuf,
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Memory and CPU limits and the OOM score, from the container's resources (absent in a
    /// state file written before limits were applied: none).
    #[serde(default)]
    pub limits: crate::limits::ContainerLimits,
}

/// One bind mount into the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    /// The host path.
    pub source: PathBuf,
    /// The absolute path in the container.
    pub target: PathBuf,
    /// Read-only.
    pub read_only: bool,
    /// How mounts propagate into it.
    pub propagation: Propagation,
    /// What the mount is: it decides its options.
    pub kind: MountKind,
}

/// What a bind mount carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MountKind {
    /// A pod volume: recursive, no further options (as containerd's CRI binds volumes).
    Volume,
    /// Part of the root filesystem from the host or the pod's state (`/usr`, `/etc`, `/run`):
    /// `nosuid`, `nodev`.
    System,
    /// A host file that may be absent (`/etc/resolv.conf`): the mount is left out then.
    OptionalSystem,
    /// A command binary: one file, `nosuid`, `nodev`.
    Binary,
    /// A command binary that may be absent (one of the binary map's other entries).
    OptionalBinary,
}

/// Mount propagation of a volume (`volumeMounts[].mountPropagation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Propagation {
    /// `None`: nothing propagates (`rprivate`).
    #[default]
    Private,
    /// `HostToContainer`: mounts made on the host below the source appear inside (`rslave`).
    HostToContainer,
}

/// A character device node in the container's `/dev`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceNode {
    /// The path in the container.
    pub path: PathBuf,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// A block device (a block-mode claim's) rather than a character device.
    pub block: bool,
    /// Owner (UID, GID) and mode 0660 for a claim's device; `None`: root's, 0600.
    pub owner: Option<(u32, u32)>,
}

/// The seccomp profile (`securityContext.seccompProfile`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SeccompProfile {
    /// `RuntimeDefault`, and what a pod that names none gets (a kubelet's `--seccomp-default`).
    #[default]
    RuntimeDefault,
    /// `Unconfined`, asked for explicitly.
    Unconfined,
}

impl ContainerSpec {
    /// The OCI runtime spec. Pure: `exists` answers whether a host path exists (a mount of
    /// [`MountKind::OptionalSystem`] or [`MountKind::OptionalBinary`] whose source does not is
    /// left out; every other source must exist or runc refuses the container).
    pub fn runtime_spec(&self, exists: impl Fn(&Path) -> bool) -> oci::Spec {
        let text = |p: &Path| p.to_string_lossy().into_owned();
        let mut mounts = oci::default_mounts();
        mounts.push(oci::Mount {
            destination: "/tmp".into(),
            kind: "tmpfs".into(),
            source: "tmpfs".into(),
            options: ["nosuid", "nodev", "mode=1777"].map(String::from).to_vec(),
        });
        for m in &self.mounts {
            let optional = matches!(
                m.kind,
                MountKind::OptionalSystem | MountKind::OptionalBinary
            );
            if optional && !exists(&m.source) {
                continue;
            }
            let mut options: Vec<String> = match m.kind {
                MountKind::Volume => vec!["rbind".into()],
                _ => vec!["bind".into(), "nosuid".into(), "nodev".into()],
            };
            options.push(if m.read_only { "ro" } else { "rw" }.into());
            options.push(
                match m.propagation {
                    Propagation::Private => "rprivate",
                    Propagation::HostToContainer => "rslave",
                }
                .into(),
            );
            mounts.push(oci::Mount {
                destination: text(&m.target),
                kind: "bind".into(),
                source: text(&m.source),
                options,
            });
        }
        let mut rules = vec![oci::DeviceRule {
            allow: false,
            kind: None,
            major: None,
            minor: None,
            access: "rwm".into(),
        }];
        let devices = self
            .devices
            .iter()
            .map(|d| {
                let kind = if d.block { "b" } else { "c" };
                rules.push(oci::DeviceRule {
                    allow: true,
                    kind: Some(kind.into()),
                    major: Some(d.major),
                    minor: Some(d.minor),
                    access: "rwm".into(),
                });
                let (uid, gid, file_mode) = match d.owner {
                    Some((uid, gid)) => (uid, gid, 0o660),
                    None => (0, 0, 0o600),
                };
                oci::Device {
                    path: text(&d.path),
                    kind: kind.into(),
                    major: d.major,
                    minor: d.minor,
                    file_mode,
                    uid,
                    gid,
                }
            })
            .collect();
        let ns = |kind: &str| oci::Namespace {
            kind: kind.into(),
            path: None,
        };
        let mut args = vec![text(&self.command)];
        args.extend(self.args.iter().cloned());
        oci::Spec {
            oci_version: oci::OCI_VERSION.into(),
            process: oci::Process {
                terminal: false,
                user: oci::User {
                    uid: self.uid,
                    gid: self.gid,
                    additional_gids: self.additional_gids.clone(),
                },
                args,
                env: self.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
                cwd: text(&self.working_dir),
                capabilities: oci::Capabilities {
                    bounding: self.capabilities.clone(),
                    effective: self.capabilities.clone(),
                    permitted: self.capabilities.clone(),
                },
                no_new_privileges: self.no_new_privileges,
                oom_score_adj: self.limits.oom_score_adj,
            },
            root: oci::Root {
                path: text(&self.rootfs),
                readonly: true,
            },
            hostname: Some(self.hostname.clone()),
            mounts,
            linux: oci::Linux {
                namespaces: vec![
                    ns("pid"),
                    oci::Namespace {
                        kind: "network".into(),
                        path: Some(text(&self.netns)),
                    },
                    ns("ipc"),
                    ns("uts"),
                    ns("mount"),
                    ns("cgroup"),
                ],
                cgroups_path: self.cgroups_path.clone(),
                devices,
                resources: oci::Resources {
                    devices: rules,
                    memory: self
                        .limits
                        .memory_bytes
                        .map(|limit| oci::MemoryResources { limit }),
                    cpu: (self.limits.cpu_shares.is_some() || self.limits.cpu_quota_us.is_some())
                        .then(|| oci::CpuResources {
                            shares: self.limits.cpu_shares,
                            quota: self.limits.cpu_quota_us,
                            period: self
                                .limits
                                .cpu_quota_us
                                .map(|_| crate::limits::CPU_PERIOD_US),
                        }),
                },
                seccomp: match self.seccomp {
                    SeccompProfile::RuntimeDefault => {
                        Some(oci::runtime_default_seccomp(&self.capabilities))
                    }
                    SeccompProfile::Unconfined => None,
                },
                masked_paths: oci::MASKED_PATHS.map(String::from).to_vec(),
                readonly_paths: oci::READONLY_PATHS.map(String::from).to_vec(),
            },
        }
    }
}

/// The OCI runtime (runc) and the directory where it keeps its containers' state
/// (`<state dir>/runc`): the command lines the runner runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// The runc executable (a bare name is looked up on `PATH`).
    pub program: PathBuf,
    /// `runc --root`.
    pub root: PathBuf,
}

impl Runtime {
    fn with_root(&self, rest: &[&std::ffi::OsStr]) -> Vec<OsString> {
        let mut v: Vec<OsString> = vec!["--root".into(), self.root.clone().into()];
        v.extend(rest.iter().map(|a| a.to_os_string()));
        v
    }

    /// `runc --root R run --bundle B --pid-file B/container.pid ID`: creates and starts the
    /// container and stays in the foreground until it ends.
    pub fn run(&self, id: &str, bundle: &Path) -> Vec<OsString> {
        let pid_file = bundle.join(PID_FILE);
        self.with_root(&[
            "run".as_ref(),
            "--bundle".as_ref(),
            bundle.as_os_str(),
            "--pid-file".as_ref(),
            pid_file.as_os_str(),
            id.as_ref(),
        ])
    }

    /// `runc --root R kill ID SIGNAL` (`TERM`, `KILL`): to the container's first process; when
    /// that ends, its PID namespace ends with it.
    pub fn kill(&self, id: &str, signal: &str) -> Vec<OsString> {
        self.with_root(&["kill".as_ref(), id.as_ref(), signal.as_ref()])
    }

    /// `runc --root R delete --force ID`: kills what is left, removes its cgroup and state.
    pub fn delete(&self, id: &str) -> Vec<OsString> {
        self.with_root(&["delete".as_ref(), "--force".as_ref(), id.as_ref()])
    }
}
