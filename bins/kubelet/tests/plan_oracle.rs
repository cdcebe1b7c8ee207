//! The pure planner on KubeVirt's own launcher pods (the oracle's rendered pods): every volume,
//! device, user and argument of a real `compute` container lands where the launcher expects it.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use kvrs_kubelet::pod_exec::KvmAccess;
use kvrs_kubelet::{BinaryMap, ImageMap, KubeletConfig, PlanError, plan_pod};

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
    let e = &plan.exec;

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
    assert_eq!(
        e.netns.as_deref(),
        Some(Path::new("/run/netns").join(&plan.network.netns).as_path())
    );

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
    assert_eq!(e.hostname.as_deref(), Some("clock-utc-timers"));

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
        e.run_dir.as_deref(),
        Some(Path::new(&format!("/var/lib/kvrs/pods/{UID}/run")))
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

    // Devices: private tun, vhost-net and kvm nodes bound over /dev.
    let dev = |t: &str| {
        e.mounts
            .iter()
            .find(|m| m.target == Path::new(t) && m.device)
            .unwrap_or_else(|| panic!("no device at {t}"))
    };
    let tun = dev("/dev/net/tun");
    assert!(
        plan.devices
            .iter()
            .any(|d| d.path == tun.source && (d.major, d.minor) == (10, 200))
    );
    let vhost = dev("/dev/vhost-net");
    assert!(
        plan.devices
            .iter()
            .any(|d| d.path == vhost.source && (d.major, d.minor) == (10, 238))
    );
    // /dev/kvm: the pod's own node too (virt-handler hands it to QEMU's user).
    let kvm = dev("/dev/kvm");
    assert!(
        plan.devices
            .iter()
            .any(|d| d.path == kvm.source && (d.major, d.minor) == (10, 232))
    );
    assert_eq!(e.kvm, KvmAccess::Private);

    // Ready once the launcher's socket exists; the pod's grace period; what is not run.
    assert_eq!(
        plan.readiness_file,
        Some(kvrs_ipc::layout::launcher_socket_on_host(Path::new("/p"), UID).unwrap())
    );
    assert_eq!(plan.grace.as_secs(), 60);
    for s in [
        "init container guest-console-log",
        "init container volumerootdisk",
        "volume launcher-volume (not mounted by compute)",
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
        .exec
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
    for entry in std::fs::read_dir(ORACLE).expect("the oracle directory") {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".pod.json") else {
            continue;
        };
        match plan_pod(&oracle_pod(stem), &cfg, cfg.pod_cidr.address(1).unwrap()) {
            Ok(p) => {
                planned += 1;
                assert_eq!(p.container, "compute", "{stem}");
            }
            Err(e) => assert!(
                matches!(
                    e,
                    PlanError::Unsupported { .. } | PlanError::UnknownBinary { .. }
                ),
                "{stem}: {e}"
            ),
        }
    }
    // The rest use PVCs, configMaps/secrets or sidecar images: typed Unsupported errors.
    assert!(planned >= 70, "most oracle pods plan: {planned}");
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
