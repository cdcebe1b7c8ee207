//! Pod + configuration → [`PodPlan`]: everything the runner will do on the host for one pod,
//! as plain data, down to the container's OCI runtime spec ([`PodPlan::runtime_spec`]). Pure (no
//! file system, no API): the executor ([`crate::host`]) carries it out, and the host facts the
//! plan cannot know are passed in — which image directories exist (the `is_dir` of
//! [`plan_pod_on`], which decides whether a container's root is its image's or the host's
//! narrowed `/usr`, [`crate::root`]; [`PodPlan::missing_image`], checked before anything is set
//! up) and which optional host files exist (the `exists` of [`PodPlan::runtime_spec`]).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod, Volume, VolumeMount};
use serde::{Deserialize, Serialize};

use crate::config::{KubeletConfig, PodAddress};
use crate::error::PlanError;
use crate::oci;
use crate::pod_exec::{
    BindMount, ContainerSpec, DeviceNode, MountKind, Propagation, SeccompProfile,
};
use crate::root::RootSource;
use crate::volumes::VolumeObjects;

/// The pod's main container: KubeVirt's launcher container. The pod lives as long as it runs.
pub const COMPUTE: &str = "compute";
/// The default of `spec.terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// `PATH` when the container sets none (an image's usual default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Who a pod is: the key of logs and of the runner's records.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PodKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl PodKey {
    /// The key of `pod`, or which metadata field is missing.
    pub fn of(pod: &Pod) -> Result<Self, PlanError> {
        let m = &pod.metadata;
        let get = |v: &Option<String>, field| {
            v.clone()
                .filter(|s| !s.is_empty())
                .ok_or(PlanError::Missing { field })
        };
        let key = Self {
            namespace: m.namespace.clone().unwrap_or_else(|| "default".into()),
            name: get(&m.name, "metadata.name")?,
            uid: get(&m.uid, "metadata.uid")?,
        };
        // The UID names the pod's directories and records.
        if matches!(key.uid.as_str(), "." | "..") || key.uid.contains(['/', '\0']) {
            return Err(PlanError::Invalid {
                field: "metadata.uid".into(),
                value: key.uid.clone(),
                reason: "not a path component",
            });
        }
        Ok(key)
    }

    /// The namespace and name as kube-apiserver accepts them (a DNS-1123 label and subdomain):
    /// both become parts of file names (the pod's log). Checked when the pod is planned, so a
    /// refused pod still gets a status and can be deleted.
    pub fn check_names(&self) -> Result<(), PlanError> {
        let invalid = |field: &str, value: &str, reason| PlanError::Invalid {
            field: field.into(),
            value: value.into(),
            reason,
        };
        if !crate::names::is_dns1123_label(&self.namespace) {
            return Err(invalid(
                "metadata.namespace",
                &self.namespace,
                "not a DNS-1123 label",
            ));
        }
        if !crate::names::is_dns1123_subdomain(&self.name) {
            return Err(invalid(
                "metadata.name",
                &self.name,
                "not a DNS-1123 subdomain",
            ));
        }
        Ok(())
    }

    /// A short hex digest of the UID: names of host objects (netns, veth) that must be short.
    pub fn short_id(&self) -> String {
        use sha2::Digest;
        let d = sha2::Sha256::digest(self.uid.as_bytes());
        d.iter().take(5).map(|b| format!("{b:02x}")).collect()
    }
}

/// Everything done on the host for one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodPlan {
    /// The pod.
    pub key: PodKey,
    /// Its network namespace.
    pub network: NetworkPlan,
    /// `<pods dir>/<uid>`: removed when the pod ends.
    pub pod_dir: PathBuf,
    /// `<state dir>/pods/<uid>`: the container's bundle (`config.json`, the root filesystem's
    /// directory), the pod's `/run` and `/etc`; removed too.
    pub state_dir: PathBuf,
    /// The container's stdout and stderr (kept after the pod, like a kubelet's logs).
    pub log_path: PathBuf,
    /// Directories to create before the container starts, in order.
    pub dirs: Vec<DirPlan>,
    /// Files to write (downwardAPI volumes, the pod's `/etc`), after the directories.
    pub files: Vec<FilePlan>,
    /// Symbolic links to make (the root filesystem's `bin` → `usr/bin` and the like).
    pub links: Vec<LinkPlan>,
    /// Image volumes whose directory must exist.
    pub images: Vec<ImageCheck>,
    /// The container, as runc will run it.
    pub container_spec: ContainerSpec,
    /// Where the container's `/usr` comes from (its image, unpacked, or the host's narrowed);
    /// `None`: the container runs its image's entrypoint on the image's whole file tree.
    pub root: Option<RootSource>,
    /// The container's name.
    pub container: String,
    /// The container's image (reported in its status).
    pub image: String,
    /// The file whose appearance makes the pod Ready (the launcher's command socket in the
    /// `sockets` emptyDir, KubeVirt's readiness probe in effect); `None`: ready once running.
    pub readiness_file: Option<PathBuf>,
    /// How long SIGTERM is given before SIGKILL when the pod is deleted.
    pub grace: Duration,
    /// The pod's other containers (hook sidecars, network binding plugins), in the pod's
    /// order: started after the main one, each stopped with the grace period once the pod is
    /// deleted or the main container ends.
    pub sidecars: Vec<SidecarPlan>,
    /// What was not run or not mounted, for the log.
    pub skipped: Vec<String>,
}

/// One of the pod's other containers: its own bundle, root filesystem, `/run`, cgroup and log,
/// the pod's network namespace, `/etc` and volumes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidecarPlan {
    /// The container's name.
    pub name: String,
    /// Its image (reported in its status).
    pub image: String,
    /// `<state dir>/pods/<uid>/containers/<name>`: `config.json`, `rootfs`, `run`.
    pub bundle: PathBuf,
    /// Its stdout and stderr (kept after the pod).
    pub log_path: PathBuf,
    /// The container, as runc will run it.
    pub container_spec: ContainerSpec,
    /// The image directory whose files make its root filesystem (hard-linked, else copied,
    /// before it starts), when it runs its image's entrypoint.
    pub image_dir: Option<PathBuf>,
    /// Where its `/usr` comes from when it runs a command (see [`PodPlan::root`]).
    pub root: Option<RootSource>,
}

impl SidecarPlan {
    /// The container's OCI runtime spec (see [`PodPlan::runtime_spec`]).
    pub fn runtime_spec(&self, exists: impl Fn(&Path) -> bool) -> oci::Spec {
        self.container_spec.runtime_spec(exists)
    }
}

/// The pod's network namespace and veth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkPlan {
    /// The namespace's name (`ip netns`): `kvrs-<short id>`.
    pub netns: String,
    /// The host end of the veth: `kvh<short id>` (the pod end is `eth0`).
    pub host_veth: String,
    /// The addresses.
    pub address: PodAddress,
    /// Sysctls set inside, in order (runtime defaults first, the pod's own last).
    pub sysctls: Vec<(String, String)>,
}

/// An image volume's directory, which must exist before the pod starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageCheck {
    /// The volume name (`container <name>` for a container's image).
    pub volume: String,
    /// The container whose root filesystem the image is; `None`: an image volume.
    pub container: Option<String>,
    /// The image reference.
    pub reference: String,
    /// The directory standing for the image.
    pub path: PathBuf,
    /// Where it was looked for, for the error: `--images DIR (looked for DIR/x)`.
    pub looked_in: String,
}

/// A directory to create with an owner and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirPlan {
    /// The host path.
    pub path: PathBuf,
    /// Owner UID.
    pub uid: u32,
    /// Owner GID.
    pub gid: u32,
    /// Permission bits.
    pub mode: u32,
}

/// A file to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilePlan {
    /// The host path.
    pub path: PathBuf,
    /// Its contents (a secret's may be any bytes).
    pub contents: Vec<u8>,
    /// Permission bits.
    pub mode: u32,
}

/// A symbolic link to make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkPlan {
    /// The link's host path.
    pub path: PathBuf,
    /// What it points to (relative: it resolves inside the container's root).
    pub target: PathBuf,
}

/// Device nodes for KubeVirt's device-plugin resources: (resource, major, minor, path). runc
/// creates them, root-owned 0600, in the container's own `/dev` (so the host's nodes are neither
/// changed nor relied on) and allows them in its device cgroup; virt-handler hands `/dev/kvm`
/// and the network nodes to QEMU's user through `/proc/<pid>/root`, as with KubeVirt's device
/// plugins.
const DEVICES: [(&str, i64, i64, &str); 4] = [
    ("devices.kubevirt.io/kvm", 10, 232, "/dev/kvm"),
    ("devices.kubevirt.io/tun", 10, 200, "/dev/net/tun"),
    ("devices.kubevirt.io/vhost-net", 10, 238, "/dev/vhost-net"),
    (
        "devices.kubevirt.io/vhost-vsock",
        10,
        241,
        "/dev/vhost-vsock",
    ),
];

/// The root filesystem's links into its `/usr` (the image's or the host's narrowed one, both
/// Debian's merged `/usr`), and `/var/run`, `/var/tmp` into the pod's own `/run` and `/tmp`:
/// (link, target).
const ROOTFS_LINKS: [(&str, &str); 6] = [
    ("bin", "usr/bin"),
    ("sbin", "usr/sbin"),
    ("lib", "usr/lib"),
    ("lib64", "usr/lib64"),
    ("var/run", "../run"),
    ("var/tmp", "../tmp"),
];

/// Host files of `/etc` the launcher's libraries read, bound read-only over placeholders in the
/// pod's `/etc` when the host has them: the resolver configuration (a kubelet gives a pod
/// without cluster DNS the node's), the dynamic linker's cache, the time zone, and Debian's
/// alternatives links (the last two the image's own instead on an image root,
/// [`crate::root::IMAGE_ETC`]).
const HOST_ETC_FILES: [&str; 3] = ["resolv.conf", "ld.so.cache", "localtime"];
const HOST_ETC_DIRS: [&str; 1] = ["alternatives"];

/// `nsswitch.conf` of the pod: files, then DNS for hosts.
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n";

/// The cluster domain the managed hosts file names a pod's subdomain FQDN in (the kubelet's
/// default `--cluster-domain`).
const CLUSTER_DOMAIN: &str = "cluster.local";

/// The kubelet's `/etc/hosts` for a pod on the pod network: localhost entries, then the pod IP
/// with its hostname (and `<hostname>.<subdomain>.<namespace>.svc.<cluster domain>` first when
/// the pod has a subdomain), in the kubelet's layout.
pub fn managed_hosts(
    pod_ip: std::net::Ipv4Addr,
    hostname: &str,
    subdomain: Option<&str>,
    namespace: &str,
) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file.
127.0.0.1\tlocalhost
::1\tlocalhost ip6-localhost ip6-loopback
         fe00::0\tip6-localnet
fe00::0\tip6-mcastprefix
fe00::1\tip6-allnodes
fe00::2\tip6-allrouters
",
    );
    match subdomain.filter(|s| !s.is_empty()) {
        Some(sub) => out.push_str(&format!(
            "{pod_ip}\t{hostname}.{sub}.{namespace}.svc.{CLUSTER_DOMAIN}\t{hostname}\n"
        )),
        None => out.push_str(&format!("{pod_ip}\t{hostname}\n")),
    }
    out
}

/// Plans `pod` for this node with `address` (its slot of the pod CIDR), for a pod whose volumes
/// name no API objects (configMap, secret, projected, persistentVolumeClaim): those are refused
/// as not read.
pub fn plan_pod(
    pod: &Pod,
    config: &KubeletConfig,
    address: PodAddress,
) -> Result<PodPlan, PlanError> {
    plan_pod_with(pod, config, address, &VolumeObjects::default())
}

/// Plans `pod` with the objects its volumes name, read beforehand ([`crate::volumes::fetch`]),
/// as if no image directory existed: every container that runs a command gets the host's
/// narrowed `/usr` ([`crate::root`]). The runner plans with [`plan_pod_on`].
pub fn plan_pod_with(
    pod: &Pod,
    config: &KubeletConfig,
    address: PodAddress,
    objects: &VolumeObjects,
) -> Result<PodPlan, PlanError> {
    plan_pod_on(pod, config, address, objects, |_| false)
}

/// Plans `pod` with the objects its volumes name, `is_dir` telling which image directories
/// exist: a container running a command whose image resolves to one gets that image's `/usr`
/// as its own ([`RootSource::choose`]).
pub fn plan_pod_on(
    pod: &Pod,
    config: &KubeletConfig,
    address: PodAddress,
    objects: &VolumeObjects,
    is_dir: impl Fn(&Path) -> bool,
) -> Result<PodPlan, PlanError> {
    let key = PodKey::of(pod)?;
    key.check_names()?;
    let spec = pod
        .spec
        .as_ref()
        .ok_or(PlanError::Missing { field: "spec" })?;
    // Volume names become directories of the pod: DNS-1123 labels, as kube-apiserver's pod
    // validation requires, before any is joined to a path.
    for v in spec.volumes.iter().flatten() {
        if !crate::names::is_dns1123_label(&v.name) {
            return Err(PlanError::Invalid {
                field: "spec.volumes[].name".into(),
                value: v.name.clone(),
                reason: "not a DNS-1123 label",
            });
        }
        // Every image volume's reference, mounted or not.
        if let Some(reference) = v.image.as_ref().and_then(|i| i.reference.as_deref()) {
            crate::names::check_image_reference(reference).map_err(|reason| {
                PlanError::Invalid {
                    field: format!("volume {}: image.reference", v.name),
                    value: reference.to_string(),
                    reason,
                }
            })?;
        }
    }
    let pod_dir = kvrs_ipc::layout::pod_sockets_dir_on_host(&config.pods_dir, &key.uid)?
        .ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .ok_or(PlanError::Missing {
            field: "metadata.uid",
        })?;
    let state_dir = config.state_dir.join("pods").join(&key.uid);
    let mut skipped = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        skipped.push(format!("init container {}", c.name));
    }
    let container = spec
        .containers
        .iter()
        .find(|c| c.name == COMPUTE)
        .or_else(|| spec.containers.first())
        .ok_or(PlanError::NoContainer)?;
    let mut others = Vec::new();
    for c in spec.containers.iter().filter(|c| c.name != container.name) {
        // The name becomes a directory, a runc ID and a cgroup: a DNS-1123 label, as
        // kube-apiserver's pod validation requires.
        if !crate::names::is_dns1123_label(&c.name) {
            return Err(PlanError::Invalid {
                field: "spec.containers[].name".into(),
                value: c.name.clone(),
                reason: "not a DNS-1123 label",
            });
        }
        others.push(c);
    }

    let pod_sc = spec.security_context.as_ref();
    let (uid, gid) = user_of(container, pod_sc);

    let mut sysctls = config.default_sysctls.clone();
    for s in pod_sc
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
    {
        sysctls.retain(|(k, _)| k != &s.name);
        sysctls.push((s.name.clone(), s.value.clone()));
    }
    let short = key.short_id();
    let network = NetworkPlan {
        netns: format!("kvrs-{short}"),
        host_veth: format!("kvh{short}"),
        address,
        sysctls,
    };

    let run_dir = state_dir.join("run");
    let etc_dir = state_dir.join("etc");
    let rootfs = state_dir.join("rootfs");
    let root_dir = |path: PathBuf| DirPlan {
        path,
        uid: 0,
        gid: 0,
        mode: 0o755,
    };
    let mut dirs = vec![
        DirPlan {
            path: pod_dir.clone(),
            uid: 0,
            gid: 0,
            mode: 0o750,
        },
        root_dir(state_dir.clone()),
        DirPlan {
            path: run_dir.clone(),
            uid,
            gid,
            mode: 0o755,
        },
        root_dir(etc_dir.clone()),
        root_dir(rootfs.clone()),
        root_dir(rootfs.join("var")),
    ];
    for d in HOST_ETC_DIRS {
        dirs.push(root_dir(etc_dir.join(d)));
    }
    let mut links = rootfs_links(&rootfs);
    let mut files = Vec::new();
    let volumes: BTreeMap<&str, &Volume> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect();
    for v in spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.empty_dir.is_some())
    {
        // Every emptyDir, mounted by a run container or not (as the kubelet does);
        // world-writable as the kubelet makes them, owned by the container's user as fsGroup
        // and the handler's e2e harness leave them.
        let path = pod_dir
            .join("volumes/kubernetes.io~empty-dir")
            .join(&v.name);
        dirs.push(DirPlan {
            path,
            uid,
            gid,
            mode: 0o777,
        });
    }
    for f in HOST_ETC_FILES {
        // The mount point: /etc is read-only by the time runc gets to it.
        files.push(FilePlan {
            path: etc_dir.join(f),
            contents: Vec::new(),
            mode: 0o644,
        });
    }
    let hostname = pod_hostname(spec.hostname.as_deref().unwrap_or(&key.name));
    let pod_ctx = PodContext {
        pod,
        key: &key,
        config,
        objects,
        address,
        pod_dir: &pod_dir,
        etc_dir: &etc_dir,
        volumes: &volumes,
        fs_group: pod_sc
            .and_then(|s| s.fs_group)
            .and_then(|g| u32::try_from(g).ok()),
        hostname: &hostname,
        is_dir: &is_dir,
    };
    let mut acc = Accumulated {
        dirs,
        files,
        images: Vec::new(),
        mounted: std::collections::BTreeSet::new(),
        skipped,
    };
    let main = plan_container(
        &pod_ctx,
        container,
        ContainerLayout {
            id: container_id(&key),
            rootfs,
            run_dir,
            cgroups_path: cgroups_path(&config.node_name, &key),
        },
        &mut acc,
    )?;
    let mut sidecars = Vec::new();
    for c in others {
        let bundle = state_dir.join("containers").join(&c.name);
        let (c_uid, c_gid) = user_of(c, pod_sc);
        let layout = ContainerLayout {
            id: format!("{}-{}", container_id(&key), c.name),
            rootfs: bundle.join("rootfs"),
            run_dir: bundle.join("run"),
            cgroups_path: format!("{}-{}", cgroups_path(&config.node_name, &key), c.name),
        };
        acc.dirs.push(root_dir(state_dir.join("containers")));
        acc.dirs.push(root_dir(bundle.clone()));
        acc.dirs.push(DirPlan {
            path: layout.run_dir.clone(),
            uid: c_uid,
            gid: c_gid,
            mode: 0o755,
        });
        acc.dirs.push(root_dir(layout.rootfs.clone()));
        let rootfs = layout.rootfs.clone();
        let PlannedContainer {
            spec: container_spec,
            image_dir,
            root,
        } = plan_container(&pod_ctx, c, layout, &mut acc)?;
        acc.dirs.push(root_dir(rootfs.join("var")));
        links.extend(rootfs_links(&rootfs).into_iter().filter(|l| {
            // An image is its own /usr: only its /var/run and /var/tmp lead to the container's
            // own /run and /tmp (where mounts at /var/run/... are made).
            image_dir.is_none() || l.path.starts_with(rootfs.join("var"))
        }));
        sidecars.push(SidecarPlan {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            bundle,
            log_path: config.state_dir.join("logs").join(format!(
                "{}_{}_{}_{}.log",
                key.namespace, key.name, key.uid, c.name
            )),
            container_spec,
            image_dir,
            root,
        });
    }
    let Accumulated {
        dirs,
        mut files,
        images,
        mounted,
        mut skipped,
    } = acc;
    for v in spec.volumes.iter().flatten() {
        if !mounted.contains(v.name.as_str()) && v.empty_dir.is_none() {
            skipped.push(format!(
                "volume {} (not mounted by a run container)",
                v.name
            ));
        }
    }
    // The kubelet's managed /etc/hosts: the pod's own name resolves from the file. Without it
    // every getaddrinfo of the hostname goes to DNS — libvirt does one while starting a domain,
    // which took 10 s of resolver timeouts in a pod with no reachable name server.
    files.push(FilePlan {
        path: etc_dir.join("hosts"),
        contents: managed_hosts(
            address.pod_ip,
            &hostname,
            spec.subdomain.as_deref(),
            &key.namespace,
        )
        .into_bytes(),
        mode: 0o644,
    });
    for (name, contents) in [
        ("passwd", passwd(uid, gid)),
        ("group", group(gid)),
        ("nsswitch.conf", NSSWITCH.to_string()),
    ] {
        files.push(FilePlan {
            path: etc_dir.join(name),
            contents: contents.into_bytes(),
            mode: 0o644,
        });
    }

    let readiness_file = volumes
        .get(kvrs_ipc::layout::SOCKETS_VOLUME)
        .filter(|v| v.empty_dir.is_some())
        .map(|_| kvrs_ipc::layout::launcher_socket_on_host(&config.pods_dir, &key.uid))
        .transpose()?;
    let grace = spec
        .termination_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs);
    let log_path = config
        .state_dir
        .join("logs")
        .join(format!("{}_{}_{}.log", key.namespace, key.name, key.uid));
    Ok(PodPlan {
        key,
        network,
        pod_dir,
        state_dir,
        log_path,
        dirs,
        files,
        links,
        images,
        container_spec: main.spec,
        root: main.root,
        container: container.name.clone(),
        image: container.image.clone().unwrap_or_default(),
        readiness_file,
        grace,
        sidecars,
        skipped,
    })
}

/// The root filesystem's links of a container on the host's `/usr`.
fn rootfs_links(rootfs: &Path) -> Vec<LinkPlan> {
    ROOTFS_LINKS
        .iter()
        .map(|(link, target)| LinkPlan {
            path: rootfs.join(link),
            target: target.into(),
        })
        .collect()
}

/// The container's UID and GID: its `securityContext` over the pod's, else root.
fn user_of(
    c: &Container,
    pod_sc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>,
) -> (u32, u32) {
    let sc = c.security_context.as_ref();
    let id = |v: Option<i64>| v.and_then(|v| u32::try_from(v).ok());
    let uid = id(sc.and_then(|s| s.run_as_user))
        .or(id(pod_sc.and_then(|s| s.run_as_user)))
        .unwrap_or(0);
    let gid = id(sc.and_then(|s| s.run_as_group))
        .or(id(pod_sc.and_then(|s| s.run_as_group)))
        .unwrap_or(0);
    (uid, gid)
}

/// What every container of one pod is planned against.
struct PodContext<'a> {
    pod: &'a Pod,
    key: &'a PodKey,
    config: &'a KubeletConfig,
    objects: &'a VolumeObjects,
    address: PodAddress,
    pod_dir: &'a Path,
    etc_dir: &'a Path,
    volumes: &'a BTreeMap<&'a str, &'a Volume>,
    fs_group: Option<u32>,
    hostname: &'a str,
    /// Whether an image directory exists.
    is_dir: &'a dyn Fn(&Path) -> bool,
}

/// One container as planned.
struct PlannedContainer {
    spec: ContainerSpec,
    /// The image directory whose files make its root filesystem, when it runs its image's
    /// entrypoint.
    image_dir: Option<PathBuf>,
    /// Where its `/usr` comes from, when it runs a command.
    root: Option<RootSource>,
}

/// What the containers of a pod add to its plan, in order.
struct Accumulated<'a> {
    dirs: Vec<DirPlan>,
    files: Vec<FilePlan>,
    images: Vec<ImageCheck>,
    /// Volumes some container mounted (object volumes are written once, at their first mount).
    mounted: std::collections::BTreeSet<&'a str>,
    skipped: Vec<String>,
}

/// Where one container's own things are.
struct ContainerLayout {
    id: String,
    rootfs: PathBuf,
    run_dir: PathBuf,
    cgroups_path: String,
}

/// One container's spec: one running its image's entrypoint (no `command`) gets the image's
/// file tree as its root filesystem; one running a command gets its image's `/usr` when the
/// image resolves to a directory, else the host's narrowed `/usr` ([`crate::root`]).
fn plan_container<'a>(
    p: &PodContext<'a>,
    container: &'a Container,
    layout: ContainerLayout,
    acc: &mut Accumulated<'a>,
) -> Result<PlannedContainer, PlanError> {
    let spec = p
        .pod
        .spec
        .as_ref()
        .ok_or(PlanError::Missing { field: "spec" })?;
    let pod_sc = spec.security_context.as_ref();
    let (uid, gid) = user_of(container, pod_sc);
    let image_mode = container.command.as_ref().is_none_or(Vec::is_empty);
    let system = |source: PathBuf, target: &str, read_only: bool, kind: MountKind| BindMount {
        source,
        target: target.into(),
        read_only,
        propagation: Propagation::Private,
        kind,
    };
    // The root filesystem: /usr from the image or the narrowed host (unless the image is the
    // whole filesystem), the pod's /etc, the container's own /run.
    let root = (!image_mode).then(|| {
        let reference = container.image.clone().unwrap_or_default();
        let candidate = crate::names::check_image_reference(&reference)
            .ok()
            .and_then(|()| p.config.images.candidate(&reference));
        RootSource::choose(&reference, candidate, p.is_dir)
    });
    let mut mounts = root.as_ref().map(RootSource::mounts).unwrap_or_default();
    mounts.push(system(
        p.etc_dir.to_path_buf(),
        "/etc",
        true,
        MountKind::System,
    ));
    mounts.push(system(
        layout.run_dir.clone(),
        "/run",
        false,
        MountKind::System,
    ));
    let host_etc: Vec<&str> = HOST_ETC_FILES
        .iter()
        .chain(&HOST_ETC_DIRS)
        .copied()
        .collect();
    let host_etc = root
        .as_ref()
        .map_or_else(|| host_etc.clone(), |r| r.host_etc(&host_etc));
    for f in host_etc {
        mounts.push(system(
            Path::new("/etc").join(f),
            &format!("/etc/{f}"),
            true,
            MountKind::OptionalSystem,
        ));
    }
    for vm in container.volume_mounts.iter().flatten() {
        let volume = p
            .volumes
            .get(vm.name.as_str())
            .ok_or_else(|| PlanError::NoSuchVolume {
                container: container.name.clone(),
                mount: vm.name.clone(),
            })?;
        let source = volume_source(
            volume,
            p.pod_dir,
            p.config,
            p.pod,
            p.key,
            VolumeContext {
                objects: p.objects,
                owner: (uid, p.fs_group.unwrap_or(gid)),
            },
            &mut acc.dirs,
            &mut acc.files,
            &mut acc.images,
            acc.mounted.insert(vm.name.as_str()),
        )?;
        let mount = mount_of(vm, source.path.clone(), source.read_only)?;
        if volume.empty_dir.is_some() && mount.source != source.path {
            // A subPath of an emptyDir: the kubelet creates it with the volume's mode (how
            // each hook sidecar gets its own `hook-sidecar-<i>` directory of the sockets
            // volume, which the launcher sees whole).
            acc.dirs.push(DirPlan {
                path: mount.source.clone(),
                uid,
                gid,
                mode: 0o777,
            });
        }
        mounts.push(mount);
    }

    let limits: Vec<&str> = container
        .resources
        .iter()
        .flat_map(|r| r.limits.iter().chain(r.requests.iter()))
        .flat_map(|m| m.keys().map(String::as_str))
        .collect();
    let mut devices: Vec<DeviceNode> = DEVICES
        .iter()
        .filter(|(resource, ..)| limits.contains(resource))
        .map(|(_, major, minor, path)| DeviceNode {
            path: path.into(),
            major: *major,
            minor: *minor,
            block: false,
            owner: None,
        })
        .collect();
    // Block-mode claims: the PV's device node at `devicePath`, owned by the pod's user as
    // CRI runtimes do with `device_ownership_from_security_context` (KubeVirt relies on it for
    // QEMU, UID 107, to open the disk).
    for d in container.volume_devices.iter().flatten() {
        let volume = p
            .volumes
            .get(d.name.as_str())
            .ok_or_else(|| PlanError::NoSuchVolume {
                container: container.name.clone(),
                mount: d.name.clone(),
            })?;
        let (major, minor) = crate::volumes::device_of(volume, p.objects)?;
        acc.mounted.insert(d.name.as_str());
        devices.push(DeviceNode {
            path: absolute(
                &format!("volumeDevice {}: devicePath", d.name),
                &d.device_path,
            )?,
            major,
            minor,
            block: true,
            owner: Some((uid, p.fs_group.unwrap_or(gid))),
        });
    }
    for r in limits
        .iter()
        .filter(|r| r.contains('/') && !r.starts_with("hugepages"))
    {
        if !DEVICES.iter().any(|d| d.0 == *r) {
            acc.skipped.push(format!(
                "container {}: resource {r} (no such device on this node)",
                container.name
            ));
        }
    }

    let (command, image_dir) = if image_mode {
        let (command, dir) = image_command(container, p.config, &mut acc.images)?;
        (command, Some(dir))
    } else {
        let root = root.as_ref().ok_or(PlanError::Missing { field: "image" })?;
        let command = container_command(container, p.config, root)?;
        // The command's binary at its own host path (read-only), and the binary map's other
        // binaries beside it where they exist: virt-launcher-monitor starts the virt-launcher
        // next to it. A binary the root already shows at that path needs no mount, one below
        // an image's /usr is the image's; a command the map does not name runs from the image.
        let mut binaries = Vec::new();
        if command.1 {
            binaries.push((command.0.0.clone(), MountKind::Binary));
        }
        for b in p.config.binaries.local_binaries() {
            if b != command.0.0.as_path() && !binaries.iter().any(|(p, _)| p == b) {
                binaries.push((b.to_path_buf(), MountKind::OptionalBinary));
            }
        }
        for (path, kind) in binaries {
            let path = absolute("binary map entry", &path.to_string_lossy())?;
            if root.binds_host_binary(&path) {
                mounts.push(BindMount {
                    source: path.clone(),
                    target: path,
                    read_only: true,
                    propagation: Propagation::Private,
                    kind,
                });
            }
        }
        (command.0, None)
    };
    let env = container_env(container, p.pod, p.key, p.config, p.address)?;
    // Parents before children, whatever the spelling (/var/run is /run).
    mounts.sort_by(|a, b| a.target.cmp(&b.target));

    let security = security(container, pod_sc, uid, p.config.seccomp_default)?;
    let mut additional_gids: Vec<u32> = pod_sc
        .and_then(|s| s.supplemental_groups.as_ref())
        .into_iter()
        .flatten()
        .copied()
        .chain(pod_sc.and_then(|s| s.fs_group))
        .filter_map(|g| u32::try_from(g).ok())
        .filter(|g| *g != gid)
        .collect();
    additional_gids.sort_unstable();
    additional_gids.dedup();
    let spec = ContainerSpec {
        id: layout.id,
        netns: Path::new("/run/netns").join(format!("kvrs-{}", p.key.short_id())),
        hostname: p.hostname.to_string(),
        rootfs: layout.rootfs,
        cgroups_path: layout.cgroups_path,
        mounts,
        devices,
        uid,
        gid,
        additional_gids,
        capabilities: security.capabilities,
        no_new_privileges: security.no_new_privileges,
        seccomp: security.seccomp,
        working_dir: container
            .working_dir
            .clone()
            .map_or_else(|| "/".into(), PathBuf::from),
        command: command.0,
        args: command.1,
        env,
        limits: crate::limits::container_limits(
            container,
            crate::limits::qos_class(p.pod)?,
            p.config.memory_capacity,
            p.config.oom_score_floor,
        )?,
    };
    Ok(PlannedContainer {
        spec,
        image_dir,
        root,
    })
}

/// The image's entrypoint (from the image map) with the container's `args`, and the image's
/// directory, whose existence is checked before the pod starts ([`PodPlan::missing_image`]).
fn image_command(
    c: &Container,
    config: &KubeletConfig,
    images: &mut Vec<ImageCheck>,
) -> Result<((PathBuf, Vec<String>), PathBuf), PlanError> {
    let reference = c.image.clone().unwrap_or_default();
    crate::names::check_image_reference(&reference).map_err(|reason| PlanError::Invalid {
        field: format!("container {}: image", c.name),
        value: reference.clone(),
        reason,
    })?;
    let Some(path) = config.images.candidate(&reference) else {
        return Err(PlanError::UnknownContainerImage {
            container: c.name.clone(),
            reference,
            where_: "the image map (no --images directory or map entry)".into(),
        });
    };
    let entrypoint =
        config
            .images
            .entrypoint(&reference)
            .ok_or_else(|| PlanError::NoEntrypoint {
                container: c.name.clone(),
                reference: reference.clone(),
            })?;
    let mut argv = entrypoint.to_vec();
    argv.extend(c.args.iter().flatten().cloned());
    let program = PathBuf::from(argv.remove(0));
    let looked_in = match config.images.dir() {
        Some(d) if !config.images.is_explicit(&reference) => {
            format!("--images {} (looked for {})", d.display(), path.display())
        }
        _ => format!("the image map (looked for {})", path.display()),
    };
    images.push(ImageCheck {
        volume: format!("container {}", c.name),
        container: Some(c.name.clone()),
        reference,
        path: path.clone(),
        looked_in,
    });
    Ok(((program, argv), path))
}

/// runc's ID of the pod's container.
pub fn container_id(key: &PodKey) -> String {
    format!("kvrs-{}", key.short_id())
}

/// The pod's cgroup below each hierarchy's root, where the runner's own lives
/// ([`crate::host::cgroup_root`]).
pub fn cgroups_path(node: &str, key: &PodKey) -> String {
    format!("/kvrs-kubelet-{node}/{}", key.short_id())
}

/// A hostname as the kubelet makes it of a longer pod name: at most 63 bytes, without a
/// trailing `-` or `.`.
fn pod_hostname(name: &str) -> String {
    let cut = name.get(..63).unwrap_or(name);
    cut.trim_end_matches(['-', '.']).to_string()
}

/// The pod's `/etc/passwd`: root, and `qemu` for the container's UID (libvirt needs an entry
/// for the user it runs as; KubeVirt's launcher image has `qemu:x:107:107`).
fn passwd(uid: u32, gid: u32) -> String {
    let mut s = String::from("root:x:0:0:root:/root:/usr/sbin/nologin\n");
    if uid != 0 {
        s.push_str(&format!(
            "qemu:x:{uid}:{gid}:qemu user:/home/qemu:/usr/sbin/nologin\n"
        ));
    }
    s.push_str("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
    s
}

/// The pod's `/etc/group`: root, `qemu` for the container's GID, nogroup.
fn group(gid: u32) -> String {
    let mut s = String::from("root:x:0:\n");
    if gid != 0 {
        s.push_str(&format!("qemu:x:{gid}:\n"));
    }
    s.push_str("nogroup:x:65534:\n");
    s
}

/// The container's privileges, from its `securityContext` over the pod's.
struct Security {
    capabilities: Vec<String>,
    no_new_privileges: bool,
    seccomp: SeccompProfile,
}

/// Capabilities as containerd's CRI computes them (the runtime's defaults; `add: [ALL]` all of
/// them; `drop: [ALL]` none; then each added, then each dropped), `no_new_privs` unless
/// `allowPrivilegeEscalation: true`, and the seccomp profile the container or pod names, else
/// the node's default ([`KubeletConfig::seccomp_default`]).
fn security(
    c: &Container,
    pod_sc: Option<&k8s_openapi::api::core::v1::PodSecurityContext>,
    uid: u32,
    seccomp_default: bool,
) -> Result<Security, PlanError> {
    let sc = c.security_context.as_ref();
    let unsupported = |what: String| PlanError::Unsupported {
        what: format!("container {}: {what}", c.name),
    };
    if sc.and_then(|s| s.privileged) == Some(true) {
        return Err(unsupported("privileged".into()));
    }
    let non_root = sc
        .and_then(|s| s.run_as_non_root)
        .or(pod_sc.and_then(|s| s.run_as_non_root));
    if non_root == Some(true) && uid == 0 {
        return Err(PlanError::Invalid {
            field: format!("container {}: securityContext.runAsNonRoot", c.name),
            value: "true".into(),
            reason: "the container would run as UID 0",
        });
    }
    let caps = sc.and_then(|s| s.capabilities.as_ref());
    let add: &[String] = caps.and_then(|c| c.add.as_deref()).unwrap_or_default();
    let drop: &[String] = caps.and_then(|c| c.drop.as_deref()).unwrap_or_default();
    let is_all = |n: &String| n.eq_ignore_ascii_case("ALL");
    let mut set: Vec<&str> = if add.iter().any(is_all) {
        oci::ALL_CAPABILITIES.to_vec()
    } else {
        oci::DEFAULT_CAPABILITIES.to_vec()
    };
    if drop.iter().any(is_all) {
        set.clear();
    }
    let name = |n: &String| {
        oci::capability_name(n).ok_or_else(|| PlanError::Invalid {
            field: format!("container {}: securityContext.capabilities", c.name),
            value: n.clone(),
            reason: "not a Linux capability",
        })
    };
    for n in add.iter().filter(|n| !is_all(n)) {
        set.push(name(n)?);
    }
    for n in drop.iter().filter(|n| !is_all(n)) {
        let n = name(n)?;
        set.retain(|c| *c != n);
    }
    // In the kernel's order, once each.
    let capabilities = oci::ALL_CAPABILITIES
        .iter()
        .filter(|c| set.contains(c))
        .map(|c| (*c).to_string())
        .collect();
    let profile = sc
        .and_then(|s| s.seccomp_profile.as_ref())
        .or(pod_sc.and_then(|s| s.seccomp_profile.as_ref()));
    let seccomp = match profile.map(|p| p.type_.as_str()) {
        None if seccomp_default => SeccompProfile::RuntimeDefault,
        None => SeccompProfile::Unconfined,
        Some("RuntimeDefault") => SeccompProfile::RuntimeDefault,
        Some("Unconfined") => SeccompProfile::Unconfined,
        Some(other) => return Err(unsupported(format!("seccompProfile {other}"))),
    };
    Ok(Security {
        capabilities,
        no_new_privileges: sc.and_then(|s| s.allow_privilege_escalation) != Some(true),
        seccomp,
    })
}

impl PodPlan {
    /// The container's OCI runtime spec (`config.json`); `exists` tells which optional host
    /// files are there (see [`ContainerSpec::runtime_spec`]).
    pub fn runtime_spec(&self, exists: impl Fn(&Path) -> bool) -> oci::Spec {
        self.container_spec.runtime_spec(exists)
    }

    /// The first image volume whose directory is missing, as the error the pod fails with.
    pub fn missing_image(&self, exists: impl Fn(&Path) -> bool) -> Option<PlanError> {
        self.images
            .iter()
            .find(|i| !exists(&i.path))
            .map(|i| match &i.container {
                Some(c) => PlanError::UnknownContainerImage {
                    container: c.clone(),
                    reference: i.reference.clone(),
                    where_: i.looked_in.clone(),
                },
                None => PlanError::UnknownImage {
                    volume: i.volume.clone(),
                    reference: i.reference.clone(),
                    where_: i.looked_in.clone(),
                },
            })
    }
}

struct Source {
    path: PathBuf,
    read_only: bool,
}

/// What object-backed volumes need: the objects read for the pod, and the owner (the
/// container's user and the pod's fsGroup) a claim's directory gets.
#[derive(Clone, Copy)]
struct VolumeContext<'a> {
    objects: &'a VolumeObjects,
    owner: (u32, u32),
}

#[allow(clippy::too_many_arguments)]
fn volume_source(
    v: &Volume,
    pod_dir: &Path,
    config: &KubeletConfig,
    pod: &Pod,
    key: &PodKey,
    ctx: VolumeContext<'_>,
    dirs: &mut Vec<DirPlan>,
    files: &mut Vec<FilePlan>,
    images: &mut Vec<ImageCheck>,
    first_use: bool,
) -> Result<Source, PlanError> {
    let volumes = pod_dir.join("volumes");
    let downward = |field: &str, path: &str| {
        field_value(pod, key, path, None, config).ok_or_else(|| PlanError::Unsupported {
            what: format!("{field}: fieldRef {path}"),
        })
    };
    let setup = crate::volumes::VolumeSetup {
        volumes_dir: &volumes,
        objects: ctx.objects,
        owner: ctx.owner,
        first_use,
    };
    if let Some(o) = crate::volumes::plan_object_volume(v, &setup, dirs, files, &downward)? {
        return Ok(Source {
            path: o.path,
            read_only: o.read_only,
        });
    }
    if v.empty_dir.is_some() {
        let path = volumes.join("kubernetes.io~empty-dir").join(&v.name);
        return Ok(Source {
            path,
            read_only: false,
        });
    }
    if let Some(image) = &v.image {
        let reference = image.reference.clone().unwrap_or_default();
        // Parsed as the container runtime parses it before it becomes a directory name:
        // `..` or `.` would name the images directory's parent or itself.
        crate::names::check_image_reference(&reference).map_err(|reason| PlanError::Invalid {
            field: format!("volume {}: image.reference", v.name),
            value: reference.clone(),
            reason,
        })?;
        let Some(path) = config.images.candidate(&reference) else {
            return Err(PlanError::UnknownImage {
                volume: v.name.clone(),
                reference,
                where_: "the image map (no --images directory or map entry)".into(),
            });
        };
        let looked_in = match config.images.dir() {
            Some(d) if !config.images.is_explicit(&reference) => {
                format!("--images {} (looked for {})", d.display(), path.display())
            }
            _ => format!("the image map (looked for {})", path.display()),
        };
        if first_use {
            images.push(ImageCheck {
                volume: v.name.clone(),
                container: None,
                reference,
                path: path.clone(),
                looked_in,
            });
        }
        return Ok(Source {
            path,
            read_only: true,
        });
    }
    if let Some(hp) = &v.host_path {
        let path = absolute(&format!("volume {}: hostPath.path", v.name), &hp.path)?;
        if first_use && hp.type_.as_deref() == Some("DirectoryOrCreate") {
            dirs.push(DirPlan {
                path: path.clone(),
                uid: 0,
                gid: 0,
                mode: 0o755,
            });
        }
        return Ok(Source {
            path,
            read_only: false,
        });
    }
    if let Some(d) = &v.downward_api {
        let dir = volumes.join("kubernetes.io~downward-api").join(&v.name);
        if first_use {
            dirs.push(DirPlan {
                path: dir.clone(),
                uid: 0,
                gid: 0,
                mode: 0o755,
            });
            for item in d.items.iter().flatten() {
                let field = format!("volume {}: downwardAPI item {}", v.name, item.path);
                let rel = relative(&field, &item.path)?;
                let Some(f) = &item.field_ref else {
                    return Err(PlanError::Unsupported {
                        what: format!("{field}: resourceFieldRef"),
                    });
                };
                let contents =
                    field_value(pod, key, &f.field_path, None, config).ok_or_else(|| {
                        PlanError::Unsupported {
                            what: format!("{field}: fieldRef {}", f.field_path),
                        }
                    })?;
                let mode = item.mode.or(d.default_mode).unwrap_or(0o644);
                files.push(FilePlan {
                    path: dir.join(rel),
                    contents: contents.into_bytes(),
                    // Only the permission bits count; a negative mode keeps its low bits, as kubelet does.
                    mode: mode.cast_unsigned() & 0o777,
                });
            }
        }
        return Ok(Source {
            path: dir,
            read_only: true,
        });
    }
    Err(PlanError::Unsupported {
        what: format!("volume {}: this volume type", v.name),
    })
}

fn mount_of(vm: &VolumeMount, source: PathBuf, read_only: bool) -> Result<BindMount, PlanError> {
    let field = format!("volumeMount {}: mountPath", vm.name);
    let mut target = absolute(&field, &vm.mount_path)?;
    // FHS 3.0: /var/run is a symlink to /run, over which the pod's own /run is mounted.
    if let Ok(rest) = target.strip_prefix("/var/run") {
        target = Path::new("/run").join(rest);
    }
    let mut source = source;
    if let Some(sub) = vm.sub_path.as_deref().filter(|s| !s.is_empty()) {
        source = source.join(relative(&format!("volumeMount {}: subPath", vm.name), sub)?);
    }
    if vm.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(PlanError::Unsupported {
            what: format!("volumeMount {}: subPathExpr", vm.name),
        });
    }
    let propagation = match vm.mount_propagation.as_deref() {
        None | Some("None") => Propagation::Private,
        Some("HostToContainer") => Propagation::HostToContainer,
        Some(other) => {
            // Bidirectional needs a privileged container.
            return Err(PlanError::Unsupported {
                what: format!("volumeMount {}: mountPropagation {other}", vm.name),
            });
        }
    };
    Ok(BindMount {
        source,
        target,
        read_only: read_only || vm.read_only == Some(true),
        propagation,
        kind: MountKind::Volume,
    })
}

fn absolute(field: &str, path: &str) -> Result<PathBuf, PlanError> {
    let p = Path::new(path);
    let bad = |reason| PlanError::BadPath {
        field: field.to_string(),
        path: path.to_string(),
        reason,
    };
    if !p.is_absolute() {
        return Err(bad("is not absolute"));
    }
    if p.components().any(|c| c == Component::ParentDir) {
        return Err(bad("contains .."));
    }
    Ok(p.components().collect())
}

fn relative(field: &str, path: &str) -> Result<PathBuf, PlanError> {
    let p = Path::new(path);
    let ok = p
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !ok || path.is_empty() {
        return Err(PlanError::BadPath {
            field: field.to_string(),
            path: path.to_string(),
            reason: "must be a relative path without ..",
        });
    }
    Ok(p.to_path_buf())
}

/// The command (mapped to a local binary, or, with an image root, the image's own file when the
/// map does not name it) and its arguments, with the configured extra arguments appended to the
/// `compute` container's; and whether it is a mapped host binary (bound into the container).
fn container_command(
    c: &Container,
    config: &KubeletConfig,
    root: &RootSource,
) -> Result<((PathBuf, Vec<String>), bool), PlanError> {
    let mut argv: Vec<String> = c
        .command
        .iter()
        .flatten()
        .chain(c.args.iter().flatten())
        .cloned()
        .collect();
    if argv.is_empty() {
        return Err(PlanError::Unsupported {
            what: format!("container {}: no command (image entrypoints)", c.name),
        });
    }
    let program = argv.remove(0);
    if c.name == COMPUTE {
        argv.extend(config.extra_compute_args.iter().cloned());
    }
    match (config.binaries.get(&program), root.image_dir()) {
        (Some(local), _) => Ok(((local.to_path_buf(), argv), true)),
        (None, Some(_)) => {
            let in_image = absolute(&format!("container {}: command", c.name), &program)?;
            Ok(((in_image, argv), false))
        }
        (None, None) => Err(PlanError::UnknownBinary {
            container: c.name.clone(),
            command: program,
        }),
    }
}

fn container_env(
    c: &Container,
    pod: &Pod,
    key: &PodKey,
    config: &KubeletConfig,
    address: PodAddress,
) -> Result<Vec<(String, String)>, PlanError> {
    if c.env_from.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(PlanError::Unsupported {
            what: format!("container {}: envFrom", c.name),
        });
    }
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        (
            "HOSTNAME".into(),
            pod.spec
                .as_ref()
                .and_then(|s| s.hostname.clone())
                .unwrap_or_else(|| key.name.clone()),
        ),
    ];
    for EnvVar {
        name,
        value,
        value_from,
    } in c.env.iter().flatten()
    {
        let v = match (value, value_from) {
            (_, Some(from)) => {
                let field = from
                    .field_ref
                    .as_ref()
                    .ok_or_else(|| PlanError::Unsupported {
                        what: format!(
                            "container {}: env {name}: valueFrom other than fieldRef",
                            c.name
                        ),
                    })?;
                field_value(pod, key, &field.field_path, Some(address), config).ok_or_else(
                    || PlanError::Unsupported {
                        what: format!(
                            "container {}: env {name}: fieldRef {}",
                            c.name, field.field_path
                        ),
                    },
                )?
            }
            (Some(v), None) => v.clone(),
            (None, None) => String::new(),
        };
        env.retain(|(k, _)| k != name);
        env.push((name.clone(), v));
    }
    Ok(env)
}

/// A downward-API field: the pod's identity, labels/annotations, node and addresses.
fn field_value(
    pod: &Pod,
    key: &PodKey,
    path: &str,
    address: Option<PodAddress>,
    config: &KubeletConfig,
) -> Option<String> {
    let map_entry = |m: &Option<BTreeMap<String, String>>, prefix: &str| -> Option<String> {
        let k = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(
            m.as_ref()
                .and_then(|m| m.get(k))
                .cloned()
                .unwrap_or_default(),
        )
    };
    let map_all = |m: &Option<BTreeMap<String, String>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v:?}\n"))
            .collect::<String>()
    };
    let spec = pod.spec.as_ref();
    Some(match path {
        "metadata.name" => key.name.clone(),
        "metadata.namespace" => key.namespace.clone(),
        "metadata.uid" => key.uid.clone(),
        "metadata.labels" => map_all(&pod.metadata.labels),
        "metadata.annotations" => map_all(&pod.metadata.annotations),
        "spec.nodeName" => spec
            .and_then(|s| s.node_name.clone())
            .unwrap_or_else(|| config.node_name.clone()),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => address?.pod_ip.to_string(),
        "status.hostIP" | "status.hostIPs" => config.host_ip.to_string(),
        _ => {
            return map_entry(&pod.metadata.labels, "metadata.labels['")
                .or_else(|| map_entry(&pod.metadata.annotations, "metadata.annotations['"));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::managed_hosts;

    #[test]
    fn the_hosts_file_names_the_pod_like_the_kubelet() {
        let ip = std::net::Ipv4Addr::new(10, 251, 0, 2);
        let plain = managed_hosts(ip, "guest", None, "default");
        assert!(plain.starts_with("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"));
        assert!(
            plain.ends_with("fe00::2\tip6-allrouters\n10.251.0.2\tguest\n"),
            "{plain}"
        );
        let sub = managed_hosts(ip, "guest", Some("web"), "prod");
        assert!(
            sub.ends_with("10.251.0.2\tguest.web.prod.svc.cluster.local\tguest\n"),
            "{sub}"
        );
    }
}
