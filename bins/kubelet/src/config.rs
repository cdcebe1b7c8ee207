//! What the runner is told about this node: its name, where pods' files live, the pod address
//! range, and how container images and container commands map onto this machine's files.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// The runner's configuration. [`KubeletConfig::new`] gives the defaults for everything but the
/// node name and the directories.
#[derive(Clone, Debug)]
pub struct KubeletConfig {
    /// The node this runner is the kubelet of (`spec.nodeName` of its pods, the Node's name).
    pub node_name: String,
    /// Where emptyDirs live: `<pods dir>/<pod uid>/volumes/kubernetes.io~empty-dir/<name>`, as
    /// the kubelet's `/var/lib/kubelet/pods` — virt-handler's `--pods-dir`. Keep it short: the
    /// launcher's socket path under it must fit a Unix socket address (107 bytes).
    pub pods_dir: PathBuf,
    /// The runner's own state: per-pod records (pid, start time, address slot), each pod's
    /// container bundle (`config.json`, its root filesystem's directory, its `/run` and `/etc`),
    /// runc's state (`runc/`) and the containers' logs (`logs/`).
    pub state_dir: PathBuf,
    /// Addresses for pods on this node; each pod gets one /30 of it (skipping any /30 the host
    /// already routes elsewhere, e.g. a veth another runner left behind).
    pub pod_cidr: PodCidr,
    /// The address reported as `status.hostIP` and on the Node.
    pub host_ip: Ipv4Addr,
    /// Image references → local directories (image volumes: container disks, kernel boot).
    pub images: ImageMap,
    /// Container command paths → local binaries.
    pub binaries: BinaryMap,
    /// Arguments appended to the `compute` container's command, e.g. `--allow-emulation` for
    /// virt-launcher-monitor on a machine whose `/dev/kvm` UID 107 cannot open.
    pub extra_compute_args: Vec<String>,
    /// Sysctls set in every pod's network namespace before the pod's own
    /// `securityContext.sysctls` (which win). The default is what containerd 2 and CRI-O do for
    /// every pod (`enable_unprivileged_ports`, `enable_unprivileged_icmp`): KubeVirt's launcher
    /// pod relies on it without asking (its DHCP server binds port 67 as UID 107).
    pub default_sysctls: Vec<(String, String)>,
    /// Binds every pod that has no `spec.nodeName` to this node (`kvrs run` has no scheduler).
    pub bind_unscheduled: bool,
    /// Creates/refreshes this node's Node object (capacity with KubeVirt's device resources)
    /// so kube-scheduler can place launcher pods here.
    pub register_node: bool,
    /// Labels merged into the Node when registering it (default: `kubernetes.io/hostname`,
    /// `kubernetes.io/os`, `kubernetes.io/arch`). KubeVirt's launcher pods also select
    /// `machine-type.node.kubevirt.io/<machine>=true` (KubeVirt's node labeller's) and
    /// `kubevirt.io/schedulable=true` (virt-handler's).
    pub node_labels: BTreeMap<String, String>,
    /// The OCI runtime that runs each container (see [`crate::pod_exec`]): by default the runc
    /// 1.5.3 `scripts/node-components.sh` builds into `~/.cache/kvrs/node/bin` when it is there,
    /// else `runc` on `PATH` ([`crate::runc::default_runtime`]). Checked at start
    /// ([`crate::runc::check`]): a runc without the November 2025 fixes is refused.
    pub runtime: PathBuf,
    /// Runs pods even with a runc that lacks the November 2025 fixes (CVE-2025-31133,
    /// CVE-2025-52565, CVE-2025-52881), logging a warning instead of refusing to start: for a
    /// machine that has only Debian 12's runc 1.1.5 and cannot build a newer one.
    pub allow_vulnerable_runtime: bool,
    /// The seccomp profile of a container whose pod and container name none: `RuntimeDefault`
    /// when true (the kubelet's `--seccomp-default`), `Unconfined` when false (the kubelet's own
    /// default). kvrs's default is true: a launcher pod is a container a compromised QEMU should
    /// not leave. KubeVirt's passt binding needs false (or a profile of the cluster's): libvirt
    /// starts `passt`, which always creates a user namespace, and the runtime's default profile
    /// refuses `unshare(CLONE_NEWUSER)` without `CAP_SYS_ADMIN` — as on a Kubernetes node with
    /// `--seccomp-default`.
    pub seccomp_default: bool,
    /// The node's memory in bytes, for a Burstable pod's OOM score ([`crate::limits`]); `None`
    /// in [`Self::new`] so that a plan does not depend on the machine, filled from
    /// `/proc/meminfo` by [`crate::Kubelet::new`].
    pub memory_capacity: Option<u64>,
    /// The lowest OOM score the runner may give a container ([`crate::node::oom_score_floor`]):
    /// `None` (the default) when it may lower scores; filled by [`crate::Kubelet::new`].
    pub oom_score_floor: Option<i32>,
}

impl KubeletConfig {
    /// Defaults for `node_name` with pods in `pods_dir` and state in `state_dir` (made absolute
    /// against the working directory: runc resolves a relative path against the bundle): the
    /// 10.251.0.0/16 pod range, host IP 127.0.0.1, empty image and binary maps, no extra
    /// arguments, no binding, no Node registration, and the default runc
    /// ([`crate::runc::default_runtime`]: the cached runc 1.5.3, else `runc` from `PATH`),
    /// which must carry the November 2025 fixes.
    pub fn new(node_name: impl Into<String>, pods_dir: PathBuf, state_dir: PathBuf) -> Self {
        let node_name = node_name.into();
        Self {
            node_labels: crate::node::default_labels(&node_name),
            node_name,
            pods_dir: absolute(pods_dir),
            state_dir: absolute(state_dir),
            pod_cidr: PodCidr::default(),
            host_ip: Ipv4Addr::LOCALHOST,
            images: ImageMap::default(),
            binaries: BinaryMap::default(),
            extra_compute_args: Vec::new(),
            default_sysctls: vec![
                ("net.ipv4.ip_unprivileged_port_start".into(), "0".into()),
                ("net.ipv4.ping_group_range".into(), "0 2147483647".into()),
            ],
            bind_unscheduled: false,
            register_node: false,
            runtime: crate::runc::default_runtime(),
            allow_vulnerable_runtime: false,
            seccomp_default: true,
            memory_capacity: None,
            oom_score_floor: None,
        }
    }

    /// runc and its state directory under [`Self::state_dir`].
    pub fn oci_runtime(&self) -> crate::pod_exec::Runtime {
        crate::pod_exec::Runtime {
            program: self.runtime.clone(),
            root: self.state_dir.join("runc"),
        }
    }
}

/// An IPv4 range pods take their addresses from, one /30 each: `.1` the host end (the pod's
/// gateway), `.2` the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCidr {
    base: Ipv4Addr,
    prefix: u8,
}

impl Default for PodCidr {
    fn default() -> Self {
        Self {
            base: Ipv4Addr::new(10, 251, 0, 0),
            prefix: 16,
        }
    }
}

impl std::str::FromStr for PodCidr {
    type Err = ConfigError;

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = |why: &str| ConfigError::PodCidr {
            value: s.to_string(),
            reason: why.to_string(),
        };
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| bad("expected ADDRESS/PREFIX"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad("not an IPv4 address"))?;
        let prefix: u8 = prefix.parse().map_err(|_| bad("prefix is not a number"))?;
        if prefix > 30 {
            return Err(bad("prefix longer than /30 leaves no room for a pod"));
        }
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Ok(Self {
            base: Ipv4Addr::from(u32::from(addr) & mask),
            prefix,
        })
    }
}

impl std::fmt::Display for PodCidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// A pod's addresses: its /30 of the [`PodCidr`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodAddress {
    /// The host end of the veth, the pod's default gateway.
    pub gateway: Ipv4Addr,
    /// The pod's `eth0` address (`status.podIP`).
    pub pod_ip: Ipv4Addr,
    /// The prefix length on both ends (30).
    pub prefix_len: u8,
}

impl PodAddress {
    /// Whether a host route already claims this /30 (the route is at least as specific and
    /// lies inside it), so the host would send the pod's traffic elsewhere.
    pub fn shadowed_by(&self, routes: &[crate::host::Route]) -> bool {
        let block = u32::from(self.gateway) & !3;
        routes
            .iter()
            .any(|r| r.prefix_len >= 30 && u32::from(r.network) & !3 == block)
    }
}

impl PodCidr {
    /// How many pods fit.
    pub fn slots(&self) -> u32 {
        1u32 << (30 - u32::from(self.prefix))
    }

    /// The addresses of slot `n`, or `None` past the end of the range.
    pub fn address(&self, n: u32) -> Option<PodAddress> {
        if n >= self.slots() {
            return None;
        }
        let block = u32::from(self.base) + n * 4;
        Some(PodAddress {
            gateway: Ipv4Addr::from(block + 1),
            pod_ip: Ipv4Addr::from(block + 2),
            prefix_len: 30,
        })
    }
}

/// Image references → directories whose contents an image volume of that reference shows.
///
/// Built from `--images DIR` ([`ImageMap::from_dir`]): the reference `quay.io/x/y:tag` is looked
/// for at `DIR/<sanitised reference>`, where sanitising replaces every character outside
/// `[A-Za-z0-9._-]` with `_` (`quay.io/containerdisks/fedora:41` →
/// `quay.io_containerdisks_fedora_41`, a digest's `@sha256:` → `_sha256_`). Explicit entries
/// (a map file of `ref=path` lines, [`ImageMap::parse_map_file`]) win over the directory.
///
/// A container whose pod gives it no `command` runs its image's entrypoint: for such an image
/// (a hook sidecar's, e.g. KubeVirt's `sidecar-shim` based `example-hook-sidecar`) the
/// directory holds the image's whole file tree (`sidecar-shim`, `usr/bin/onDefineDomain`) and
/// [`ImageMap::set_entrypoint`] says what its config's `Entrypoint` is — what a registry's image
/// config would say, given here since no registry is contacted.
///
/// A container that does run a `command` (the launcher's `compute`) whose image resolves to a
/// directory gets that image's `/usr` as its own — `scripts/images.sh`'s
/// `kvrs/virt-launcher:<tag>` unpacked at `DIR/kvrs_virt-launcher_<tag>` makes the launcher's
/// libvirt and QEMU the image's, not the host's ([`crate::root`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMap {
    dir: Option<PathBuf>,
    entries: BTreeMap<String, PathBuf>,
    entrypoints: BTreeMap<String, Vec<String>>,
}

impl ImageMap {
    /// Images under `dir` (made absolute against the working directory), one directory per
    /// sanitised reference.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: Some(absolute(dir.into())),
            entries: BTreeMap::new(),
            entrypoints: BTreeMap::new(),
        }
    }

    /// Adds (or replaces) one explicit mapping (a relative path is made absolute against the
    /// working directory).
    pub fn insert(&mut self, reference: impl Into<String>, path: impl Into<PathBuf>) {
        self.entries.insert(reference.into(), absolute(path.into()));
    }

    /// Adds the `ref=path` lines of a map file's `text` (blank lines and `#` comments skipped;
    /// relative paths are relative to `base`, the file's directory).
    pub fn parse_map_file(&mut self, text: &str, base: &Path) -> Result<(), ConfigError> {
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((reference, path)) = line.split_once('=') else {
                return Err(ConfigError::MapLine {
                    line: i + 1,
                    text: line.to_string(),
                });
            };
            self.insert(reference.trim(), base.join(path.trim()));
        }
        Ok(())
    }

    /// The directory name a reference is looked for under `--images DIR`.
    pub fn sanitise(reference: &str) -> String {
        reference
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    }

    /// Where `reference` would be: its explicit entry, else `DIR/<sanitised>`; `None` when
    /// neither is configured, or when the reference is not one (the distribution grammar:
    /// `..` is none, and would name `DIR`'s parent). Pure: whether the directory exists is the
    /// caller's to check.
    pub fn candidate(&self, reference: &str) -> Option<PathBuf> {
        if let Some(p) = self.entries.get(reference) {
            return Some(p.clone());
        }
        crate::names::check_image_reference(reference).ok()?;
        self.dir.as_ref().map(|d| d.join(Self::sanitise(reference)))
    }

    /// Whether an explicit entry names `reference` (entries are trusted; directory candidates
    /// are checked).
    pub fn is_explicit(&self, reference: &str) -> bool {
        self.entries.contains_key(reference)
    }

    /// The images directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Sets the entrypoint (an absolute path in the image, then its fixed arguments) a
    /// container of `reference` without a `command` runs, the pod's `args` appended.
    pub fn set_entrypoint(&mut self, reference: impl Into<String>, entrypoint: Vec<String>) {
        self.entrypoints.insert(reference.into(), entrypoint);
    }

    /// The entrypoint of `reference`, if one was set.
    pub fn entrypoint(&self, reference: &str) -> Option<&[String]> {
        self.entrypoints.get(reference).map(Vec::as_slice)
    }

    /// Parses an `--image-entrypoint` value, `REFERENCE=PATH [ARG...]` (split at whitespace),
    /// and sets it.
    pub fn parse_entrypoint(&mut self, value: &str) -> Result<(), ConfigError> {
        let bad = |reason: &str| ConfigError::Entrypoint {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let (reference, argv) = value
            .split_once('=')
            .ok_or_else(|| bad("expected REFERENCE=PATH"))?;
        let reference = reference.trim();
        crate::names::check_image_reference(reference).map_err(bad)?;
        let argv: Vec<String> = argv.split_whitespace().map(String::from).collect();
        match argv.first() {
            None => return Err(bad("no entrypoint after =")),
            Some(p) if !p.starts_with('/') => {
                return Err(bad("the entrypoint must be an absolute path in the image"));
            }
            Some(_) => {}
        }
        self.set_entrypoint(reference, argv);
        Ok(())
    }
}

/// Container command paths (`/usr/bin/virt-launcher-monitor`) → the local binaries to run.
/// A container whose command is not in the map cannot run: the host's file of the same name is
/// never used by accident.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BinaryMap {
    entries: BTreeMap<String, PathBuf>,
}

impl BinaryMap {
    /// Adds (or replaces) one mapping (a relative local path is made absolute against the
    /// working directory).
    pub fn insert(&mut self, container_path: impl Into<String>, local: impl Into<PathBuf>) {
        self.entries
            .insert(container_path.into(), absolute(local.into()));
    }

    /// `virt-launcher-monitor`, `virt-launcher`, `virt-tail`, `virt-freezer` and
    /// `container-disk` of KubeVirt's images, mapped to the same names in `dir` (where the kvrs
    /// launcher binaries were built).
    pub fn kubevirt_launcher(dir: &Path) -> Self {
        let mut m = Self::default();
        for name in [
            "virt-launcher-monitor",
            "virt-launcher",
            "virt-tail",
            "virt-freezer",
            "container-disk",
        ] {
            m.insert(format!("/usr/bin/{name}"), dir.join(name));
        }
        m
    }

    /// The local binary for `container_path`.
    pub fn get(&self, container_path: &str) -> Option<&Path> {
        self.entries.get(container_path).map(PathBuf::as_path)
    }

    /// Every local binary of the map (a container may run any of them: the monitor starts
    /// `virt-launcher`, found beside itself).
    pub fn local_binaries(&self) -> impl Iterator<Item = &Path> {
        self.entries.values().map(PathBuf::as_path)
    }
}

/// `path` against the working directory (lexically: no symlink is resolved), or as it is when
/// there is none.
fn absolute(path: PathBuf) -> PathBuf {
    std::path::absolute(&path).unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_routed_elsewhere_is_shadowed_and_wider_routes_are_not() {
        use crate::host::Route;
        let c: PodCidr = "10.251.0.0/16".parse().unwrap();
        let route = |net: [u8; 4], prefix_len| Route {
            network: net.into(),
            prefix_len,
        };
        let left_over = [route([10, 251, 0, 0], 30), route([0, 0, 0, 0], 0)];
        assert!(c.address(0).unwrap().shadowed_by(&left_over));
        assert!(!c.address(1).unwrap().shadowed_by(&left_over));
        // A host route to the pod IP alone also wins over the pod's /30.
        assert!(
            c.address(1)
                .unwrap()
                .shadowed_by(&[route([10, 251, 0, 6], 32)])
        );
        // A wider route (the whole range sent somewhere) loses to the pod's own /30.
        assert!(
            !c.address(2)
                .unwrap()
                .shadowed_by(&[route([10, 251, 0, 0], 16)])
        );
    }

    #[test]
    fn cidr_slots_are_slash_30s() {
        let c: PodCidr = "10.251.7.9/16".parse().unwrap();
        assert_eq!(c.to_string(), "10.251.0.0/16");
        assert_eq!(c.slots(), 16384);
        let a = c.address(1).unwrap();
        assert_eq!(a.gateway, Ipv4Addr::new(10, 251, 0, 5));
        assert_eq!(a.pod_ip, Ipv4Addr::new(10, 251, 0, 6));
        assert!(c.address(16384).is_none());
        assert!("10.0.0.0/31".parse::<PodCidr>().is_err());
        assert!("10.0.0.0".parse::<PodCidr>().is_err());
    }

    #[test]
    fn image_references_are_sanitised_and_map_files_win() {
        assert_eq!(
            ImageMap::sanitise("quay.io/containerdisks/fedora:41"),
            "quay.io_containerdisks_fedora_41"
        );
        let mut m = ImageMap::from_dir("/img");
        assert_eq!(
            m.candidate("a/b@sha256:0123456789abcdef0123456789abcdef")
                .unwrap(),
            Path::new("/img/a_b_sha256_0123456789abcdef0123456789abcdef")
        );
        // Not references: never a path under (or above) the images directory.
        for bad in ["..", ".", "../x", "a/../../b"] {
            assert_eq!(m.candidate(bad), None, "{bad}");
        }
        m.parse_map_file("# c\n\nexample/disk = disk\n", Path::new("/maps"))
            .unwrap();
        assert_eq!(
            m.candidate("example/disk").unwrap(),
            Path::new("/maps/disk")
        );
        assert!(m.parse_map_file("nope", Path::new("/")).is_err());
        assert_eq!(ImageMap::default().candidate("x"), None);
    }

    #[test]
    fn entrypoints_are_absolute_paths_of_real_references() {
        let mut m = ImageMap::default();
        m.parse_entrypoint("quay.io/kubevirt/sidecar-shim:v1.9.0=/sidecar-shim --x")
            .unwrap();
        assert_eq!(
            m.entrypoint("quay.io/kubevirt/sidecar-shim:v1.9.0"),
            Some(&["/sidecar-shim".to_string(), "--x".to_string()][..])
        );
        for bad in ["noequals", "img=", "img=relative", "..=/x"] {
            let e = m.parse_entrypoint(bad).unwrap_err();
            assert_eq!(e.label(), "entrypoint", "{bad}");
        }
    }
}
