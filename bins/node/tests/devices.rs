//! Device ownership under a temporary pod root, with real device nodes (needs root).

use kvrs_node::{PodRef, claim_devices};
use nix::sys::stat::{Mode, SFlag, makedev, mknod};
use std::os::unix::fs::MetadataExt;

fn pod_with_dev() -> (tempfile::TempDir, PodRef) {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(root.path().join("dev/net")).expect("dev");
    for (path, minor) in [("dev/kvm", 232), ("dev/net/tun", 200)] {
        mknod(
            &root.path().join(path),
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o660),
            makedev(10, minor),
        )
        .expect("mknod needs root: run the tests as root");
    }
    let pod = PodRef {
        netns: "/proc/self/ns/net".into(),
        root: root.path().to_path_buf(),
    };
    (root, pod)
}

fn owner(path: &std::path::Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(path).expect("stat");
    (m.uid(), m.gid())
}

#[test]
fn devices_are_handed_to_qemu() {
    let (root, pod) = pod_with_dev();
    claim_devices(&pod, &["dev/kvm".into(), "/dev/net/tun".into()]).expect("claim");
    assert_eq!(owner(&root.path().join("dev/kvm")), (107, 107));
    assert_eq!(owner(&root.path().join("dev/net/tun")), (107, 107));
    // Again: already owned, still fine.
    claim_devices(&pod, &["dev/kvm".into()]).expect("claim again");
}

#[test]
fn symlinks_and_dotdot_are_refused() {
    let (root, pod) = pod_with_dev();
    let outside = tempfile::NamedTempFile::new().expect("outside file");
    std::os::unix::fs::symlink(outside.path(), root.path().join("dev/vhost-net")).expect("symlink");
    let err = claim_devices(&pod, &["dev/vhost-net".into()]).expect_err("symlink");
    assert_eq!(err.label(), "device");
    assert!(
        err.to_string().contains("dev/vhost-net") && err.to_string().contains("symlink"),
        "{err}"
    );
    assert_eq!(
        owner(outside.path()),
        (0, 0),
        "the symlink target must not be chowned"
    );

    // A symlinked directory on the way is refused too.
    std::os::unix::fs::symlink("/dev", root.path().join("hostdev")).expect("symlink");
    let err = claim_devices(&pod, &["hostdev/null".into()]).expect_err("dir symlink");
    assert_eq!(err.label(), "device");

    let err = claim_devices(&pod, &["dev/../../etc/passwd".into()]).expect_err("dotdot");
    assert!(err.to_string().contains(".."), "{err}");
}

#[test]
fn a_missing_device_is_named() {
    let (_root, pod) = pod_with_dev();
    let err = claim_devices(&pod, &["dev/vhost-vsock".into()]).expect_err("missing");
    assert_eq!(err.label(), "device");
    assert_eq!(err.to_string(), "device dev/vhost-vsock: does not exist");
}

#[test]
fn a_masked_device_is_not_handed_to_qemu() {
    // An empty file bound over /dev/kvm is how a runtime hides a device the pod did not get;
    // chowning it to 107 would make it look usable to the launcher.
    let (root, pod) = pod_with_dev();
    let kvm = root.path().join("dev/kvm");
    std::fs::remove_file(&kvm).unwrap();
    std::fs::write(&kvm, b"").unwrap();
    claim_devices(&pod, &["dev/kvm".into()]).expect("a mask is no error");
    assert_eq!(owner(&kvm), (0, 0), "the mask stays root's");
}
