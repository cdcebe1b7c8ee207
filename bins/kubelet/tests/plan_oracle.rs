//! The pure planner on KubeVirt's own launcher pods (the oracle's rendered pods): every volume,
//! device, user and argument of a real `compute` container lands where the launcher expects it,
//! and the OCI runtime spec runc gets is the container a Kubernetes node would make of it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kvrs_kubelet::pod_exec::{MountKind, Propagation, SeccompProfile};
use kvrs_kubelet::root::RootSource;
use kvrs_kubelet::volumes::{BoundClaim, VolumeObjects};
use kvrs_kubelet::{
    BinaryMap, ImageMap, KubeletConfig, PlanError, plan_pod, plan_pod_on, plan_pod_with,
};

const ORACLE: &str = "/work/shared/oracle";
const UID: &str = "6f1c2d3e-0000-4000-8000-000000000001";

/// An oracle pod with the identity the API server would have given it. Fails (never skips)
/// when the file is missing.
fn oracle_pod(name: &str) -> Pod {
    let path = Path::new(ORACLE).join(format!("{name}.pod.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the oracle pods are required)", path.display()));
    let mut pod: Pod = serde_json::from_str(&text).expect("an oracle pod parses as a Pod");
    pod.metadata.name = Some(format!("virt-launcher-{name}-abcde"));
    pod.metadata.namespace = Some("kv-oracle".into());
    pod.metadata.uid = Some(UID.into());
    pod
}

fn config() -> KubeletConfig {
    let mut c = KubeletConfig::new("node1", "/p".into(), "/var/lib/kvrs".into());
    c.images = ImageMap::from_dir("/images");
    c.binaries = BinaryMap::kubevirt_launcher(Path::new("/opt/kvrs/bin"));
    c.extra_compute_args = vec!["--allow-emulation".into()];
    c
}

#[test]
fn a_container_disk_launcher_pod() {
    let cfg = config();
    let pod = oracle_pod("clock-utc-timers");
    let plan = plan_pod(&pod, &cfg, cfg.pod_cidr.address(0).unwrap()).expect("planned");
    let e = &plan.container_spec;

    // Network: a short netns name from the UID, the pod's /30.
    assert!(plan.network.netns.starts_with("kvrs-") && plan.network.netns.len() <= 15);
    assert!(
        plan.network.host_veth.len() <= 15,
        "an interface name fits IFNAMSIZ"
    );
    assert_eq!(plan.network.address.pod_ip, Ipv4Addr::new(10, 251, 0, 2));
    assert_eq!(plan.network.address.gateway, Ipv4Addr::new(10, 251, 0, 1));
    assert!(
        plan.network
            .sysctls
            .contains(&("net.ipv4.ip_unprivileged_port_start".into(), "0".into())),
        "the runtime default KubeVirt relies on: {:?}",
        plan.network.sysctls
    );
    assert_eq!(e.netns, Path::new("/run/netns").join(&plan.network.netns));

    // The compute container: the monitor mapped to the local binary, KubeVirt's arguments, the
    // extra one appended; UID/GID 107.
    assert_eq!(e.command, Path::new("/opt/kvrs/bin/virt-launcher-monitor"));
    assert_eq!(e.args.first().map(String::as_str), Some("--qemu-timeout"));
    assert!(
        e.args
            .windows(2)
            .any(|w| w == ["--name", "clock-utc-timers"])
    );
    assert_eq!(e.args.last().map(String::as_str), Some("--allow-emulation"));
    assert_eq!((e.uid, e.gid), (107, 107));
    let env = |k: &str| e.env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(
        env("POD_NAME"),
        Some("virt-launcher-clock-utc-timers-abcde")
    );
    assert_eq!(env("XDG_RUNTIME_DIR"), Some("/var/run"));
    assert!(env("PATH").is_some());
    assert_eq!(e.hostname, "clock-utc-timers");

    // A container as KubeVirt's non-root launcher gets it: capabilities drop ALL, add
    // NET_BIND_SERVICE; no_new_privs (allowPrivilegeEscalation: false); RuntimeDefault seccomp.
    assert_eq!(e.capabilities, ["CAP_NET_BIND_SERVICE"]);
    assert!(e.no_new_privileges);
    assert_eq!(e.seccomp, SeccompProfile::RuntimeDefault);
    assert!(e.additional_gids.is_empty(), "fsGroup 107 is the GID");
    assert_eq!(e.id, format!("kvrs-{}", plan.key.short_id()));
    assert_eq!(
        e.cgroups_path,
        format!("/kvrs-kubelet-node1/{}", plan.key.short_id())
    );

    // Volumes: emptyDirs under the pods dir (sockets where virt-handler looks), the container
    // disk from the images dir read-only, targets under the pod's own /run, parents first.
    let empty = |n: &str| PathBuf::from(format!("/p/{UID}/volumes/kubernetes.io~empty-dir/{n}"));
    let target = |t: &str| {
        e.mounts
            .iter()
            .find(|m| m.target == Path::new(t))
            .unwrap_or_else(|| panic!("no mount at {t}: {:#?}", e.mounts))
    };
    assert_eq!(target("/run/kubevirt-private").source, empty("private"));
    assert_eq!(target("/run/kubevirt").source, empty("public"));
    assert_eq!(target("/run/libvirt").source, empty("libvirt-runtime"));
    assert_eq!(
        target("/run/kubevirt-ephemeral-disks").source,
        empty("ephemeral-disks")
    );
    assert_eq!(
        target("/run/kubevirt/hotplug-disks").source,
        empty("hotplug-disks")
    );
    assert_eq!(
        target("/run/kubevirt/sockets").source,
        kvrs_ipc::layout::pod_sockets_dir_on_host(Path::new("/p"), UID).unwrap()
    );
    let disk = target("/run/kubevirt-image-volume/disk_0");
    assert_eq!(
        disk.source,
        Path::new("/images/quay.io_containerdisks_fedora_41")
    );
    assert!(disk.read_only);
    let pos = |t: &str| {
        e.mounts
            .iter()
            .position(|m| m.target == Path::new(t))
            .unwrap()
    };
    assert!(pos("/run/kubevirt") < pos("/run/kubevirt/sockets"));
    assert!(pos("/run/kubevirt") < pos("/run/kubevirt/hotplug-disks"));
    assert_eq!(
        target("/run/kubevirt/hotplug-disks").propagation,
        Propagation::HostToContainer
    );
    assert_eq!(target("/run/kubevirt").propagation, Propagation::Private);
    // The root filesystem: the pod's own directory, the host's /usr narrowed to the launcher's
    // libraries, data and programs (no image directory here), read-only, the pod's /etc and
    // /run; the command binaries read-only at their host paths.
    let state = PathBuf::from(format!("/var/lib/kvrs/pods/{UID}"));
    assert_eq!(e.rootfs, state.join("rootfs"));
    assert_eq!(target("/run").source, state.join("run"));
    assert!(!target("/run").read_only);
    assert_eq!(target("/etc").source, state.join("etc"));
    assert!(target("/etc").read_only);
    assert!(
        matches!(&plan.root, Some(RootSource::Host { why }) if why.contains("quay.io_kubevirt_virt-launcher_v1.9.0")),
        "{:?}",
        plan.root
    );
    assert!(!e.mounts.iter().any(|m| m.target == Path::new("/usr")));
    for d in [
        "/usr/lib",
        "/usr/share",
        "/usr/bin/qemu-system-x86_64",
        "/usr/sbin/virtlogd",
    ] {
        assert_eq!(target(d).source, Path::new(d));
        assert!(target(d).read_only, "{d}");
    }
    assert_eq!(
        target("/etc/ld.so.cache").source,
        Path::new("/etc/ld.so.cache")
    );
    assert_eq!(target("/etc/resolv.conf").kind, MountKind::OptionalSystem);
    let monitor = target("/opt/kvrs/bin/virt-launcher-monitor");
    assert_eq!((monitor.kind, monitor.read_only), (MountKind::Binary, true));
    assert_eq!(
        target("/opt/kvrs/bin/virt-launcher").kind,
        MountKind::OptionalBinary
    );
    assert!(
        plan.links
            .iter()
            .any(|l| l.path == state.join("rootfs/bin") && l.target == Path::new("usr/bin"))
    );
    assert!(
        plan.links
            .iter()
            .any(|l| l.path == state.join("rootfs/var/run") && l.target == Path::new("../run"))
    );
    let passwd = plan
        .files
        .iter()
        .find(|f| f.path == state.join("etc/passwd"))
        .expect("the pod's passwd");
    assert!(
        String::from_utf8_lossy(&passwd.contents).contains("qemu:x:107:107:"),
        "{}",
        String::from_utf8_lossy(&passwd.contents)
    );
    for n in [
        "private",
        "public",
        "sockets",
        "virt-bin-share-dir",
        "libvirt-runtime",
        "ephemeral-disks",
        "hotplug-disks",
    ] {
        assert!(
            plan.dirs.iter().any(|d| d.path == empty(n)),
            "emptyDir {n} is created"
        );
    }
    assert_eq!(
        plan.images.len(),
        1,
        "only the mounted image volume: {:?}",
        plan.images
    );

    // Devices: the container's own tun, vhost-net and kvm nodes (virt-handler hands them to
    // QEMU's user), nothing else of the host's /dev.
    let devices: Vec<(&Path, i64, i64)> = e
        .devices
        .iter()
        .map(|d| (d.path.as_path(), d.major, d.minor))
        .collect();
    assert_eq!(
        devices,
        [
            (Path::new("/dev/kvm"), 10, 232),
            (Path::new("/dev/net/tun"), 10, 200),
            (Path::new("/dev/vhost-net"), 10, 238),
        ]
    );

    // Ready once the launcher's socket exists; the pod's grace period; what is not run.
    assert_eq!(
        plan.readiness_file,
        Some(kvrs_ipc::layout::launcher_socket_on_host(Path::new("/p"), UID).unwrap())
    );
    assert_eq!(plan.grace.as_secs(), 60);
    for s in [
        "init container guest-console-log",
        "init container volumerootdisk",
        "volume launcher-volume (not mounted by a run container)",
    ] {
        assert!(
            plan.skipped.iter().any(|k| k == s),
            "{s} in {:?}",
            plan.skipped
        );
    }
}

#[test]
fn a_kernel_boot_launcher_pod_needs_both_images() {
    let cfg = config();
    let pod = oracle_pod("firmware-kernel-boot");
    let plan = plan_pod(&pod, &cfg, cfg.pod_cidr.address(3).unwrap()).expect("planned");
    let kb = plan
        .container_spec
        .mounts
        .iter()
        .find(|m| m.target == Path::new("/run/kubevirt-kernel-boot"))
        .unwrap();
    assert_eq!(
        kb.source,
        Path::new("/images/quay.io_example_kernel-boot_1.0")
    );
    assert!(kb.read_only);
    // Only the disk image is present: the pod fails naming the kernel-boot volume.
    let err = plan
        .missing_image(|p| p.ends_with("quay.io_containerdisks_fedora_41"))
        .expect("kernel-boot image missing");
    assert!(matches!(err, PlanError::UnknownImage { .. }));
    assert_eq!(
        err.to_string(),
        "volume kernel-boot-volume: image quay.io/example/kernel-boot:1.0 is not in --images /images (looked for /images/quay.io_example_kernel-boot_1.0)"
    );
    assert_eq!(err.reason(), "ErrImagePull");
}

#[test]
fn every_oracle_pod_plans_or_fails_with_a_typed_error() {
    let cfg = config();
    let mut planned = 0;
    let mut with_objects = 0;
    for entry in std::fs::read_dir(ORACLE).expect("the oracle directory") {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".pod.json") else {
            continue;
        };
        let pod = oracle_pod(stem);
        let address = cfg.pod_cidr.address(1).unwrap();
        // Without the objects its volumes name, such a pod is the kubelet's mount failure;
        // with them, it plans.
        let result = match plan_pod(&pod, &cfg, address) {
            Err(PlanError::VolumeSource { .. }) => {
                with_objects += 1;
                plan_pod_with(&pod, &cfg, address, &objects_for(&pod))
            }
            other => other,
        };
        match result {
            Ok(p) => {
                planned += 1;
                assert_eq!(p.container, "compute", "{stem}");
            }
            Err(e) => assert!(
                matches!(
                    e,
                    PlanError::Unsupported { .. }
                        | PlanError::UnknownBinary { .. }
                        | PlanError::NoEntrypoint { .. }
                ) || matches!(&e, PlanError::Invalid { field, .. } if field.ends_with(": image")),
                "{stem}: {e}"
            ),
        }
    }
    // The rest use sidecar images or what the runner does not do: typed Unsupported errors.
    assert!(planned >= 80, "most oracle pods plan: {planned}");
    assert!(
        with_objects >= 5,
        "PVC/configMap/secret pods: {with_objects}"
    );
}

#[test]
fn unmapped_commands_and_images_are_errors() {
    let mut cfg = config();
    cfg.binaries = BinaryMap::default();
    let pod = oracle_pod("clock-utc-timers");
    let err = plan_pod(&pod, &cfg, cfg.pod_cidr.address(0).unwrap()).unwrap_err();
    assert_eq!(err.label(), "unknown_binary");
    assert!(
        err.to_string().contains("/usr/bin/virt-launcher-monitor"),
        "{err}"
    );

    let mut cfg = config();
    cfg.images = ImageMap::default();
    let err = plan_pod(&pod, &cfg, cfg.pod_cidr.address(0).unwrap()).unwrap_err();
    assert_eq!(err.label(), "unknown_image");
    assert!(
        err.to_string()
            .starts_with("volume rootdisk: image quay.io/containerdisks/fedora:41"),
        "{err}"
    );
}

/// Issue 43: names that would become paths outside the kubelet's directories (a namespace
/// `../../x`, an emptyDir `../../y`, an image `..`) are refused before any path is built.
#[test]
fn names_and_images_that_leave_the_kubelets_directories_are_refused() {
    let cfg = config();
    let addr = cfg.pod_cidr.address(0).unwrap();
    let mut pod = oracle_pod("clock-utc-timers");
    pod.metadata.namespace = Some("../../../../../../tmp/x".into());
    let e = plan_pod(&pod, &cfg, addr).unwrap_err();
    assert_eq!(e.label(), "invalid", "{e}");
    assert!(e.to_string().contains("metadata.namespace"), "{e}");

    let mut pod = oracle_pod("clock-utc-timers");
    let volumes = pod.spec.as_mut().unwrap().volumes.get_or_insert_default();
    volumes.push(
        serde_json::from_value(serde_json::json!({"name": "../../../../tmp/y", "emptyDir": {}}))
            .unwrap(),
    );
    let e = plan_pod(&pod, &cfg, addr).unwrap_err();
    assert_eq!(e.label(), "invalid", "{e}");

    let mut pod = oracle_pod("clock-utc-timers");
    let volumes = pod.spec.as_mut().unwrap().volumes.get_or_insert_default();
    volumes.push(
        serde_json::from_value(serde_json::json!({"name": "kernel", "image": {"reference": ".."}}))
            .unwrap(),
    );
    let e = plan_pod(&pod, &cfg, addr).unwrap_err();
    assert_eq!(e.label(), "invalid", "{e}");
    assert!(e.to_string().contains("image.reference"), "{e}");
}

/// The OCI runtime spec (`config.json`) runc gets for KubeVirt's container-disk launcher pod,
/// with the host's optional files present and the binary map's virt-tail, virt-freezer and
/// container-disk absent (kvrs builds none of them).
#[test]
fn the_runtime_spec_of_a_launcher_pod() {
    let cfg = config();
    let pod = oracle_pod("clock-utc-timers");
    let plan = plan_pod(&pod, &cfg, cfg.pod_cidr.address(0).unwrap()).expect("planned");
    let absent = ["virt-tail", "virt-freezer", "container-disk"];
    let spec = plan.runtime_spec(|p| !absent.iter().any(|a| p.ends_with(a)));
    let json = serde_json::to_value(&spec).unwrap();

    // What the isolation rests on, spelled out before the snapshot.
    assert_eq!(json["root"]["readonly"], true);
    assert_ne!(json["root"]["path"], "/", "not the host's root");
    let namespaces: Vec<(&str, Option<&str>)> = json["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["type"].as_str().unwrap(), n["path"].as_str()))
        .collect();
    let netns = format!("/run/netns/{}", plan.network.netns);
    assert_eq!(
        namespaces,
        [
            ("pid", None),
            ("network", Some(netns.as_str())),
            ("ipc", None),
            ("uts", None),
            ("mount", None),
            ("cgroup", None),
        ]
    );
    assert_eq!(json["process"]["user"]["uid"], 107);
    assert_eq!(json["process"]["noNewPrivileges"], true);
    for set in ["bounding", "effective", "permitted"] {
        assert_eq!(
            json["process"]["capabilities"][set],
            serde_json::json!(["CAP_NET_BIND_SERVICE"]),
            "{set}"
        );
    }
    assert_eq!(json["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ERRNO");
    assert_eq!(
        json["linux"]["resources"]["devices"][0],
        serde_json::json!({"allow": false, "access": "rwm"}),
        "every device denied but the defaults and the pod's"
    );
    let sources: Vec<&str> = json["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "bind")
        .map(|m| m["source"].as_str().unwrap())
        .collect();
    assert!(!sources.contains(&"/"), "the host's / is never bound");
    assert!(
        !sources.iter().any(|s| s.ends_with("virt-tail")),
        "{sources:?}"
    );
    assert!(sources.contains(&"/opt/kvrs/bin/virt-launcher"));
    assert!(
        !sources
            .iter()
            .any(|s| ["/usr", "/usr/bin", "/usr/sbin", "/usr/local"].contains(s)),
        "the host's /usr narrowed: {sources:?}"
    );

    insta::assert_json_snapshot!(spec);
}

/// The same pod when its image, `quay.io/kubevirt/virt-launcher:v1.9.0`, resolves to a
/// directory under `--images`: the image's `/usr` and its own `ld.so.cache` and
/// `alternatives` are the container's, nothing of the host's `/usr` is bound, and the mapped
/// launcher binaries are still bound at their host paths.
#[test]
fn the_runtime_spec_of_a_launcher_pod_on_its_image() {
    let cfg = config();
    let pod = oracle_pod("clock-utc-timers");
    let image = Path::new("/images/quay.io_kubevirt_virt-launcher_v1.9.0");
    let addr = cfg.pod_cidr.address(0).unwrap();
    let plan =
        plan_pod_on(&pod, &cfg, addr, &VolumeObjects::default(), |d| d == image).expect("planned");
    assert_eq!(
        plan.root,
        Some(RootSource::Image {
            reference: "quay.io/kubevirt/virt-launcher:v1.9.0".into(),
            dir: image.to_path_buf(),
        })
    );
    let absent = ["virt-tail", "virt-freezer", "container-disk"];
    let spec = plan.runtime_spec(|p| !absent.iter().any(|a| p.ends_with(a)));
    let json = serde_json::to_value(&spec).unwrap();
    let binds: Vec<(&str, &str)> = json["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["type"] == "bind")
        .map(|m| {
            (
                m["destination"].as_str().unwrap(),
                m["source"].as_str().unwrap(),
            )
        })
        .collect();
    let from_host_usr: Vec<_> = binds
        .iter()
        .filter(|(_, s)| s.starts_with("/usr"))
        .collect();
    assert!(from_host_usr.is_empty(), "{from_host_usr:?}");
    let at = |d: &str| binds.iter().find(|(t, _)| *t == d).map(|(_, s)| *s);
    let image = image.display().to_string();
    assert_eq!(at("/usr"), Some(format!("{image}/usr").as_str()));
    assert_eq!(
        at("/etc/ld.so.cache"),
        Some(format!("{image}/etc/ld.so.cache").as_str())
    );
    assert_eq!(
        at("/etc/resolv.conf"),
        Some("/etc/resolv.conf"),
        "the node's DNS"
    );
    assert_eq!(
        at("/opt/kvrs/bin/virt-launcher-monitor"),
        Some("/opt/kvrs/bin/virt-launcher-monitor")
    );
    assert_eq!(
        json["process"]["args"][0],
        "/opt/kvrs/bin/virt-launcher-monitor"
    );
    assert_eq!(json["root"]["readonly"], true);
    assert_eq!(
        json["root"]["path"],
        format!("/var/lib/kvrs/pods/{UID}/rootfs")
    );

    // Without a binary map the image's own monitor runs; a command outside the map and the
    // image is refused only when there is no image root.
    let mut unmapped = cfg.clone();
    unmapped.binaries = BinaryMap::default();
    let plan = plan_pod_on(&pod, &unmapped, addr, &VolumeObjects::default(), |d| {
        d == Path::new(&image)
    })
    .expect("planned on the image");
    assert_eq!(
        plan.container_spec.command,
        Path::new("/usr/bin/virt-launcher-monitor")
    );
    assert!(
        !plan
            .container_spec
            .mounts
            .iter()
            .any(|m| m.kind == MountKind::Binary),
        "nothing of the host's to bind"
    );
    assert!(matches!(
        plan_pod(&pod, &unmapped, addr),
        Err(PlanError::UnknownBinary { .. })
    ));

    insta::assert_json_snapshot!(spec);
}

/// KubeVirt's example hook sidecar pod: the sidecar is a container of its own (its own
/// bundle, root filesystem filled from the image's directory, `/run`, cgroup and runc ID) in the
/// pod's network namespace, running the image's entrypoint with the pod's `args`, its
/// `hook-sidecar-0` sub-directory of the sockets emptyDir at `/var/run/kubevirt-hooks` where the
/// launcher sees the whole volume; the same securityContext mapping as the launcher's.
#[test]
fn the_runtime_spec_of_a_hook_sidecar() {
    const IMAGE: &str = "registry:5000/kubevirt/example-hook-sidecar:devel";
    let mut cfg = config();
    let pod = oracle_pod("example-vmi-with-sidecar-hook");
    let addr = cfg.pod_cidr.address(0).unwrap();
    match plan_pod(&pod, &cfg, addr) {
        Err(PlanError::NoEntrypoint {
            container,
            reference,
        }) => assert_eq!(
            (container.as_str(), reference.as_str()),
            ("hook-sidecar-0", IMAGE)
        ),
        other => panic!("an image without an entrypoint: {other:?}"),
    }
    cfg.images
        .parse_entrypoint(&format!("{IMAGE}=/sidecar-shim"))
        .unwrap();
    let plan = plan_pod(&pod, &cfg, addr).expect("planned");
    assert_eq!(plan.container, "compute");
    assert!(
        plan.skipped
            .iter()
            .any(|s| s == "init container guest-console-log"),
        "{:?}",
        plan.skipped
    );
    assert_eq!(plan.sidecars.len(), 1);
    let side = &plan.sidecars[0];
    assert_eq!(side.name, "hook-sidecar-0");
    assert_eq!(side.image, IMAGE);
    let image_dir = Path::new("/images/registry_5000_kubevirt_example-hook-sidecar_devel");
    assert_eq!(side.image_dir.as_deref(), Some(image_dir));
    // The image directory is checked like an image volume's, as the sidecar's image.
    match plan.missing_image(|p| p != image_dir) {
        Some(PlanError::UnknownContainerImage { container, .. }) => {
            assert_eq!(container, "hook-sidecar-0")
        }
        other => panic!("a missing sidecar image: {other:?}"),
    }
    assert_eq!(plan.missing_image(|_| true), None);

    let (main, s) = (&plan.container_spec, &side.container_spec);
    assert_eq!(s.netns, main.netns, "one network namespace per pod");
    assert_ne!(s.rootfs, main.rootfs);
    assert_eq!(s.rootfs, side.bundle.join("rootfs"));
    assert_eq!(s.id, format!("{}-hook-sidecar-0", main.id));
    assert_eq!(
        s.cgroups_path,
        format!("{}-hook-sidecar-0", main.cgroups_path)
    );
    assert_eq!(s.command, Path::new("/sidecar-shim"));
    assert_eq!(s.args, ["--version", "v1alpha2"]);
    assert_eq!((s.uid, s.gid), (107, 107));
    assert!(s.capabilities.is_empty(), "drop ALL: {:?}", s.capabilities);
    assert!(s.no_new_privileges);
    let emptydir = Path::new("/p")
        .join(UID)
        .join("volumes/kubernetes.io~empty-dir/hook-sidecar-sockets");
    let at = |c: &kvrs_kubelet::pod_exec::ContainerSpec, target: &str| {
        c.mounts
            .iter()
            .find(|m| m.target == Path::new(target))
            .map(|m| m.source.clone())
    };
    assert_eq!(at(main, "/run/kubevirt-hooks"), Some(emptydir.clone()));
    assert_eq!(
        at(s, "/run/kubevirt-hooks"),
        Some(emptydir.join("hook-sidecar-0"))
    );
    assert_eq!(at(s, "/usr"), None, "the image is the sidecar's filesystem");
    assert_eq!(at(main, "/usr"), None, "never the host's /usr whole");
    assert_eq!(at(main, "/usr/lib"), Some(PathBuf::from("/usr/lib")));
    let sub = plan
        .dirs
        .iter()
        .find(|d| d.path == emptydir.join("hook-sidecar-0"))
        .expect("the subPath directory is made");
    assert_eq!((sub.uid, sub.mode), (107, 0o777));

    let spec = side.runtime_spec(|_| true);
    insta::assert_json_snapshot!(spec);
}

/// The securityContext decides capabilities, no_new_privs and seccomp as a kubelet with
/// containerd does; what the runner cannot honour is refused, not ignored.
#[test]
fn security_contexts_map_onto_the_container() {
    let cfg = config();
    let addr = cfg.pod_cidr.address(0).unwrap();
    let on = |cfg: &KubeletConfig, sc: serde_json::Value| {
        let mut pod = oracle_pod("clock-utc-timers");
        let c = pod
            .spec
            .as_mut()
            .unwrap()
            .containers
            .iter_mut()
            .find(|c| c.name == "compute")
            .unwrap();
        c.security_context = Some(serde_json::from_value(sc).unwrap());
        plan_pod(&pod, cfg, addr)
    };
    let with = |sc: serde_json::Value| on(&cfg, sc);
    // Nothing asked: containerd's default capabilities, no_new_privs, RuntimeDefault.
    let p = with(serde_json::json!({"runAsUser": 107})).unwrap();
    let caps = &p.container_spec.capabilities;
    assert_eq!(caps.len(), 14, "{caps:?}");
    assert!(caps.iter().any(|c| c == "CAP_CHOWN") && !caps.iter().any(|c| c == "CAP_SYS_ADMIN"));
    assert!(p.container_spec.no_new_privileges);
    assert_eq!(p.container_spec.seccomp, SeccompProfile::RuntimeDefault);
    // KubeVirt's root launcher adds to the defaults and drops some.
    let p = with(serde_json::json!({"capabilities": {"add": ["SYS_NICE", "NET_ADMIN"], "drop": ["NET_RAW"]}, "allowPrivilegeEscalation": true, "seccompProfile": {"type": "Unconfined"}})).unwrap();
    let caps = &p.container_spec.capabilities;
    assert!(caps.iter().any(|c| c == "CAP_SYS_NICE") && caps.iter().any(|c| c == "CAP_NET_ADMIN"));
    assert!(!caps.iter().any(|c| c == "CAP_NET_RAW"));
    assert!(!p.container_spec.no_new_privileges);
    assert_eq!(p.container_spec.seccomp, SeccompProfile::Unconfined);
    assert!(p.runtime_spec(|_| true).linux.seccomp.is_none());
    // A node without the seccomp default (the kubelet's own default) leaves a container that
    // names no profile unconfined; one that asks for RuntimeDefault still gets it.
    let mut unconfined_node = config();
    unconfined_node.seccomp_default = false;
    let on_node = |sc: serde_json::Value| on(&unconfined_node, sc).unwrap().container_spec.seccomp;
    assert_eq!(
        on_node(serde_json::json!({"runAsUser": 107})),
        SeccompProfile::Unconfined
    );
    assert_eq!(
        on_node(serde_json::json!({"seccompProfile": {"type": "RuntimeDefault"}})),
        SeccompProfile::RuntimeDefault
    );
    // Refused: privileged, unknown capabilities, Localhost profiles, root with runAsNonRoot.
    for sc in [
        serde_json::json!({"privileged": true}),
        serde_json::json!({"capabilities": {"add": ["NOT_A_CAP"]}}),
        serde_json::json!({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}}),
        serde_json::json!({"runAsUser": 0, "runAsNonRoot": true}),
    ] {
        let e = with(sc.clone()).unwrap_err();
        assert!(matches!(e.label(), "unsupported" | "invalid"), "{sc}: {e}");
    }
}

/// Objects for every configMap, secret and claim `pod` names: one key each; claims bound under
/// `/srv/pv`, in Block mode when the container uses them as devices.
fn objects_for(pod: &Pod) -> VolumeObjects {
    let spec = pod.spec.as_ref().unwrap();
    let devices: Vec<&str> = spec
        .containers
        .iter()
        .flat_map(|c| c.volume_devices.iter().flatten())
        .map(|d| d.name.as_str())
        .collect();
    let mut o = VolumeObjects::default();
    let data =
        |name: &str| serde_json::json!({"metadata": {"name": name}, "data": {"key": "dmFsdWU="}});
    for v in spec.volumes.iter().flatten() {
        if let Some(c) = &v.config_map {
            let cm = serde_json::json!({"metadata": {"name": c.name}, "data": {"key": "value"}});
            o.config_maps
                .insert(c.name.clone(), serde_json::from_value(cm).unwrap());
        }
        if let Some(name) = v.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            o.secrets
                .insert(name.clone(), serde_json::from_value(data(&name)).unwrap());
        }
        if let Some(c) = &v.persistent_volume_claim {
            let block = devices.contains(&v.name.as_str());
            o.claims.insert(
                c.claim_name.clone(),
                BoundClaim {
                    path: Path::new("/srv/pv").join(&c.claim_name),
                    block,
                    device: block.then_some((7, 0)),
                },
            );
        }
    }
    o
}
