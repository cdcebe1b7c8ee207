//! The subset of the OCI runtime specification (`config.json`, runtime-spec 1.0.2) the runner
//! writes, as small serde structs, and the container runtime defaults a Kubernetes node applies
//! to every container: containerd's capability set, masked and read-only `/proc` paths, and its
//! default seccomp profile (the pod's `RuntimeDefault`).
//!
//! Pure data: [`crate::pod_exec::ContainerSpec::runtime_spec`] fills a [`Spec`] in, the host
//! module writes it next to the pod's root filesystem and hands the bundle to runc.

use serde::{Deserialize, Serialize};

/// The runtime-spec version written (what runc 1.1 and later accept).
pub const OCI_VERSION: &str = "1.0.2";

/// A container's `config.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// [`OCI_VERSION`].
    pub oci_version: String,
    /// The process to run.
    pub process: Process,
    /// The root filesystem.
    pub root: Root,
    /// The UTS namespace's hostname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Mounts, in order (parents before children).
    pub mounts: Vec<Mount>,
    /// Linux specifics: namespaces, cgroup, devices, seccomp, masked paths.
    pub linux: Linux,
}

/// `process`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    /// Never a terminal: stdout and stderr go to the pod's log.
    pub terminal: bool,
    /// Who it runs as.
    pub user: User,
    /// `argv`, the program first (a path in the container).
    pub args: Vec<String>,
    /// `NAME=value` entries.
    pub env: Vec<String>,
    /// The working directory (in the container).
    pub cwd: String,
    /// Capability sets.
    pub capabilities: Capabilities,
    /// `PR_SET_NO_NEW_PRIVS`.
    pub no_new_privileges: bool,
    /// `/proc/<pid>/oom_score_adj` (the pod's QoS class); absent: inherited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_score_adj: Option<i32>,
}

/// `process.user`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    /// UID.
    pub uid: u32,
    /// Primary GID.
    pub gid: u32,
    /// Supplementary GIDs (none when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_gids: Vec<u32>,
}

/// `process.capabilities`: the sets as containerd fills them (no inheritable, no ambient set,
/// so a non-root process keeps only the bounding set across `execve`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The bounding set.
    pub bounding: Vec<String>,
    /// The effective set (before `execve`).
    pub effective: Vec<String>,
    /// The permitted set (before `execve`).
    pub permitted: Vec<String>,
}

/// `root`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// The root filesystem's directory on the host.
    pub path: String,
    /// Remounted read-only once every mount is in place.
    pub readonly: bool,
}

/// One entry of `mounts`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// Where in the container.
    pub destination: String,
    /// The filesystem type (`bind` for bind mounts).
    #[serde(rename = "type")]
    pub kind: String,
    /// The host path (bind mounts) or the device name.
    pub source: String,
    /// mount(8) options.
    pub options: Vec<String>,
}

impl Mount {
    fn special(destination: &str, kind: &str, source: &str, options: &[&str]) -> Self {
        Self {
            destination: destination.into(),
            kind: kind.into(),
            source: source.into(),
            options: options.iter().map(|o| (*o).to_string()).collect(),
        }
    }
}

/// `linux`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Linux {
    /// Namespaces: new ones, or joined by `path`.
    pub namespaces: Vec<Namespace>,
    /// The container's cgroup, relative to each hierarchy's root.
    pub cgroups_path: String,
    /// Device nodes created in the container's `/dev`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<Device>,
    /// The device cgroup rules.
    pub resources: Resources,
    /// The seccomp filter; `None`: unconfined.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seccomp: Option<Seccomp>,
    /// Paths hidden (an empty file or directory over them).
    pub masked_paths: Vec<String>,
    /// Paths remounted read-only.
    pub readonly_paths: Vec<String>,
}

/// One entry of `linux.namespaces`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Namespace {
    /// `pid`, `network`, `ipc`, `uts`, `mount`, `cgroup`.
    #[serde(rename = "type")]
    pub kind: String,
    /// An existing namespace to join instead of a new one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// One entry of `linux.devices`: a node runc creates in the container's `/dev`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// The path in the container.
    pub path: String,
    /// `c` (character device).
    #[serde(rename = "type")]
    pub kind: String,
    /// Major number.
    pub major: i64,
    /// Minor number.
    pub minor: i64,
    /// Permission bits.
    pub file_mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// `linux.resources`: the device rules, and the container's memory and CPU limits
/// ([`crate::limits`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    /// Evaluated in order; runc appends its always-allowed defaults (`/dev/null`, `zero`,
    /// `full`, `tty`, `random`, `urandom`, ptys).
    pub devices: Vec<DeviceRule>,
    /// `limits.memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryResources>,
    /// `requests.cpu` as shares, `limits.cpu` as a CFS quota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuResources>,
}

/// `linux.resources.memory`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryResources {
    /// Bytes.
    pub limit: i64,
}

/// `linux.resources.cpu`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuResources {
    /// Relative weight (runc converts it to cgroup v2's `cpu.weight`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<u64>,
    /// µs of CPU per period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
    /// The period, µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
}

/// One device cgroup rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceRule {
    /// Allow or deny.
    pub allow: bool,
    /// `c`, `b`, or absent for all.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Major number; absent for all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub major: Option<i64>,
    /// Minor number; absent for all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minor: Option<i64>,
    /// `rwm` (read, write, mknod).
    pub access: String,
}

/// `linux.seccomp`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seccomp {
    /// What any other syscall gets.
    pub default_action: String,
    /// The ABIs the filter covers.
    pub architectures: Vec<String>,
    /// Rules, in order.
    pub syscalls: Vec<Syscall>,
}

/// One seccomp rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Syscall {
    /// Syscall names (names this runc's libseccomp does not know are skipped by runc).
    pub names: Vec<String>,
    /// `SCMP_ACT_ALLOW` or `SCMP_ACT_ERRNO`.
    pub action: String,
    /// The errno of an `SCMP_ACT_ERRNO` rule (EPERM when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errno_ret: Option<u32>,
    /// Argument conditions (all must hold).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<SeccompArg>,
}

/// An argument condition of a seccomp rule.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeccompArg {
    /// Which argument.
    pub index: u32,
    /// The value compared with.
    pub value: u64,
    /// The second value (`SCMP_CMP_MASKED_EQ`: the argument masked by `value` must equal it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_two: Option<u64>,
    /// `SCMP_CMP_EQ`, `SCMP_CMP_LT`, `SCMP_CMP_MASKED_EQ`.
    pub op: String,
}

/// The capabilities containerd gives a container that asks for no change (its
/// `defaultUnixCaps`), in its order.
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability Linux 6.x knows, by number (`CAP_CHOWN` is 0): what `ALL` means, and which
/// names a pod may add or drop.
pub const ALL_CAPABILITIES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// A Kubernetes capability name (`NET_BIND_SERVICE`, or `CAP_NET_BIND_SERVICE`, any case) as
/// the runtime spells it, or `None` when Linux has no such capability.
pub fn capability_name(k8s: &str) -> Option<&'static str> {
    let upper = k8s.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    ALL_CAPABILITIES
        .iter()
        .find(|c| c.strip_prefix("CAP_") == Some(bare))
        .copied()
}

/// The `/proc` and `/sys` paths containerd masks in every container (without the per-CPU
/// `thermal_throttle` directories, which depend on the host's CPUs).
pub const MASKED_PATHS: [&str; 12] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
];

/// The `/proc` paths containerd makes read-only in every container.
pub const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The mounts every container gets before its own (containerd's `defaultMounts` and the CRI's
/// read-only cgroup filesystem): its own `/proc`, a `/dev` tmpfs with ptys, shared memory and
/// message queues, a read-only `/sys` of its network namespace and of its cgroup.
pub fn default_mounts() -> Vec<Mount> {
    vec![
        Mount::special("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        Mount::special(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        Mount::special(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        Mount::special(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        Mount::special(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        Mount::special(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        Mount::special(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
    ]
}

const ALLOW: &str = "SCMP_ACT_ALLOW";
const ERRNO: &str = "SCMP_ACT_ERRNO";
/// `ENOSYS`: what `clone3` gets without `CAP_SYS_ADMIN`, so glibc falls back to `clone`.
const ENOSYS: u32 = 38;
/// The namespace flags of `clone(2)`: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
const CLONE_NAMESPACE_FLAGS: u64 =
    0x0002_0000 | 0x0200_0000 | 0x0400_0000 | 0x0800_0000 | 0x1000_0000 | 0x2000_0000 | 0x4000_0000;
/// `AF_UNIX` .. `AF_CAIF` (1..=37): the socket families allowed as one range.
const AF_CAIF: u64 = 37;
/// Allowed one by one past the range: AF_NFC, AF_KCM, AF_QIPCRTR, AF_SMC, AF_XDP, AF_MCTP
/// (AF_ALG 38 and AF_VSOCK 40 stay refused).
const MORE_SOCKET_FAMILIES: [u64; 6] = [39, 41, 42, 43, 44, 45];

/// The syscalls containerd's default profile allows to every container (containerd 2.4's
/// `contrib/seccomp`, amd64, whitespace-separated), with the two its kernel (>= 4.8: `ptrace`
/// can no longer bypass seccomp) and architecture (amd64) checks add.
const DEFAULT_SYSCALLS: &str = "\
    accept accept4 access adjtimex alarm bind brk cachestat capget capset chdir chmod chown \
    chown32 clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime \
    clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range connect \
    copy_file_range creat dup dup2 dup3 epoll_create epoll_create1 epoll_ctl epoll_ctl_old \
    epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old eventfd eventfd2 execve execveat exit \
    exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark fchdir fchmod \
    fchmodat fchmodat2 fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr flistxattr \
    flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate \
    ftruncate64 futex futex_requeue futex_time64 futex_wait futex_waitv futex_wake futimesat \
    getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32 getgid getgid32 \
    getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid getppid getpriority \
    getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list getrusage \
    getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr \
    getxattrat inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl \
    io_destroy io_getevents io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup \
    io_submit ipc kill landlock_add_rule landlock_create_ruleset landlock_restrict_self lchown \
    lchown32 lgetxattr link linkat listen listmount listxattr listxattrat llistxattr _llseek \
    lremovexattr lseek lsetxattr lsm_get_self_attr lsm_list_modules lsm_set_self_attr lstat \
    lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir mkdirat mknod mknodat \
    mlock mlock2 mlockall map_shadow_stack mmap mmap2 mprotect mq_getsetattr mq_notify mq_open \
    mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap \
    mseal msgctl msgget msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at \
    nanosleep newfstatat _newselect open openat openat2 pause pidfd_open pidfd_send_signal pipe \
    pipe2 pkey_alloc pkey_free pkey_mprotect poll ppoll ppoll_time64 prctl pread64 preadv \
    preadv2 prlimit64 process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read \
    readahead readlink readlinkat readv recv recvfrom recvmmsg recvmmsg_time64 recvmsg \
    remap_file_pages removexattr removexattrat rename renameat renameat2 restart_syscall rmdir \
    rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend \
    rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr \
    sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler \
    sched_rr_get_interval sched_rr_get_interval_time64 sched_setaffinity sched_setattr \
    sched_setparam sched_setscheduler sched_yield seccomp select semctl semget semop semtimedop \
    semtimedop_time64 send sendfile sendfile64 sendmmsg sendmsg sendto setfsgid setfsgid32 \
    setfsuid setfsuid32 setgid setgid32 setgroups setgroups32 setitimer setpgid setpriority \
    setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid setreuid32 \
    setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32 \
    setxattr setxattrat shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 \
    sigprocmask sigreturn socketcall socketpair splice stat stat64 statfs statfs64 statmount \
    statx symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time timer_create \
    timer_delete timer_getoverrun timer_gettime timer_gettime64 timer_settime timer_settime64 \
    timerfd_create timerfd_gettime timerfd_gettime64 timerfd_settime timerfd_settime64 times \
    tkill truncate truncate64 ugetrlimit umask uname unlink unlinkat uretprobe utime utimensat \
    utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev process_vm_readv \
    process_vm_writev ptrace arch_prctl modify_ldt";

/// Syscalls containerd's profile allows only with a capability in the bounding set.
const BY_CAPABILITY: &[(&str, &[&str])] = &[
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    (
        "CAP_SYS_NICE",
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// The container runtime's default seccomp profile (`RuntimeDefault`) for a container with
/// `bounding` capabilities: containerd 2.4's, an **allowlist** — every syscall not listed fails
/// with `EPERM`. Listed: the ~370 syscalls any container may make; `socket` for every family
/// but `AF_ALG` and `AF_VSOCK`; `personality` with the five harmless personas; `clone` without
/// namespace flags and `clone3` as `ENOSYS` unless `CAP_SYS_ADMIN` is held; and the syscalls of
/// the privileged capabilities the container holds (`mount`, `bpf`, `ptrace`'s kin, ...).
/// The architectures are x86-64 and its two compat ABIs.
pub fn runtime_default_seccomp(bounding: &[String]) -> Seccomp {
    let allow = |names: &[&str]| Syscall {
        names: names.iter().map(|n| (*n).to_string()).collect(),
        action: ALLOW.into(),
        errno_ret: None,
        args: Vec::new(),
    };
    let allow_if = |name: &str, index, value, value_two, op: &str| Syscall {
        names: vec![name.into()],
        action: ALLOW.into(),
        errno_ret: None,
        args: vec![SeccompArg {
            index,
            value,
            value_two,
            op: op.into(),
        }],
    };
    let defaults: Vec<&str> = DEFAULT_SYSCALLS.split_whitespace().collect();
    let mut syscalls = vec![allow(&defaults)];
    // `socket`: runc ORs the conditions of separate rules, so the range is one "less than" rule
    // (AF_UNSPEC, 0, cannot be created) and the rest one rule each.
    syscalls.push(allow_if("socket", 0, AF_CAIF + 1, None, "SCMP_CMP_LT"));
    for family in MORE_SOCKET_FAMILIES {
        syscalls.push(allow_if("socket", 0, family, None, "SCMP_CMP_EQ"));
    }
    for persona in [0x0, 0x0008, 0x20000, 0x20008, 0xffff_ffff] {
        syscalls.push(allow_if("personality", 0, persona, None, "SCMP_CMP_EQ"));
    }
    let holds = |cap: &str| bounding.iter().any(|b| b == cap);
    for (cap, names) in BY_CAPABILITY {
        if holds(cap) {
            syscalls.push(allow(names));
        }
    }
    if !holds("CAP_SYS_ADMIN") {
        syscalls.push(allow_if(
            "clone",
            0,
            CLONE_NAMESPACE_FLAGS,
            Some(0),
            "SCMP_CMP_MASKED_EQ",
        ));
        syscalls.push(Syscall {
            names: vec!["clone3".into()],
            action: ERRNO.into(),
            errno_ret: Some(ENOSYS),
            args: Vec::new(),
        });
    }
    Seccomp {
        default_action: ERRNO.into(),
        architectures: vec![
            "SCMP_ARCH_X86_64".into(),
            "SCMP_ARCH_X86".into(),
            "SCMP_ARCH_X32".into(),
        ],
        syscalls,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_names_take_the_kubernetes_spelling() {
        assert_eq!(
            capability_name("NET_BIND_SERVICE"),
            Some("CAP_NET_BIND_SERVICE")
        );
        assert_eq!(capability_name("cap_sys_nice"), Some("CAP_SYS_NICE"));
        assert_eq!(capability_name("ALL"), None);
        assert_eq!(capability_name("NOPE"), None);
        for c in DEFAULT_CAPABILITIES {
            assert!(ALL_CAPABILITIES.contains(&c), "{c}");
        }
    }

    #[test]
    fn the_default_profile_is_an_allowlist_without_the_privileged_syscalls() {
        let p = runtime_default_seccomp(&["CAP_NET_BIND_SERVICE".into()]);
        assert_eq!(p.default_action, "SCMP_ACT_ERRNO");
        let allowed = |name: &str| {
            p.syscalls.iter().any(|s| {
                s.action == ALLOW && s.args.is_empty() && s.names.iter().any(|n| n == name)
            })
        };
        for ok in ["read", "openat", "ioctl", "execve", "ptrace", "seccomp"] {
            assert!(allowed(ok), "{ok}");
        }
        for refused in [
            "mount",
            "umount2",
            "unshare",
            "setns",
            "bpf",
            "keyctl",
            "add_key",
            "kexec_load",
            "init_module",
            "reboot",
            "chroot",
            "clone3",
            "io_uring_setup",
            "userfaultfd",
            "open_by_handle_at",
            "perf_event_open",
        ] {
            assert!(!allowed(refused), "{refused}");
        }
        // clone only without namespace flags; clone3 answers ENOSYS.
        assert!(p.syscalls.iter().any(|s| s.names == ["clone"]
            && s.args[0].op == "SCMP_CMP_MASKED_EQ"
            && s.args[0].value == CLONE_NAMESPACE_FLAGS));
        assert!(
            p.syscalls
                .iter()
                .any(|s| s.names == ["clone3"] && s.errno_ret == Some(ENOSYS))
        );
        // CAP_SYS_ADMIN brings the mount family and unrestricted clone.
        let admin = runtime_default_seccomp(&["CAP_SYS_ADMIN".into()]);
        assert!(
            admin
                .syscalls
                .iter()
                .any(|s| s.names.iter().any(|n| n == "mount"))
        );
        assert!(!admin.syscalls.iter().any(|s| s.errno_ret.is_some()));
    }
}
