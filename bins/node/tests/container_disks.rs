//! Container-disk checks against a temporary pod root laid out as the ImageVolume mode does.

use kvrs_api::VirtualMachineInstance;
use kvrs_node::{PodRef, check_container_disks};
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn vmi(volumes: serde_json::Value) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "metadata": {"name": "vm1", "namespace": "default"},
        "spec": {"domain": {"devices": {}}, "volumes": volumes},
    }))
    .expect("fixture")
}

fn write(root: &Path, rel: &str, mode: u32) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(&p, b"qcow2").expect("write");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn pod(root: &tempfile::TempDir) -> PodRef {
    PodRef {
        netns: "/proc/self/ns/net".into(),
        root: root.path().to_path_buf(),
    }
}

const IV: &str = "var/run/kubevirt-image-volume";

#[test]
fn default_and_custom_paths_are_found() {
    let root = tempfile::tempdir().expect("tempdir");
    write(
        root.path(),
        &format!("{IV}/disk_1/disk/fedora.qcow2"),
        0o644,
    );
    write(
        root.path(),
        &format!("{IV}/disk_2/images/custom.raw"),
        0o440,
    );
    std::os::unix::fs::chown(
        root.path().join(format!("{IV}/disk_2/images/custom.raw")),
        Some(107),
        Some(107),
    )
    .expect("chown");
    let v = vmi(json!([
        {"name": "cloudinit", "cloudInitNoCloud": {"userData": "x"}},
        {"name": "root", "containerDisk": {"image": "quay.io/fedora"}},
        {"name": "data", "containerDisk": {"image": "quay.io/data", "path": "/images/custom.raw"}},
    ]));
    check_container_disks(&pod(&root), &v).expect("disks present");
}

#[test]
fn symlinks_inside_the_image_resolve_within_it() {
    let root = tempfile::tempdir().expect("tempdir");
    write(root.path(), &format!("{IV}/disk_0/real/disk.img"), 0o644);
    std::fs::create_dir_all(root.path().join(format!("{IV}/disk_0/disk"))).expect("mkdir");
    // An absolute target means "from the image volume root", as the launcher resolves it.
    std::os::unix::fs::symlink(
        "/disk_0/real/disk.img",
        root.path().join(format!("{IV}/disk_0/disk/link.img")),
    )
    .expect("symlink");
    let v = vmi(json!([{"name": "root", "containerDisk": {"image": "x"}}]));
    check_container_disks(&pod(&root), &v).expect("resolved within the image root");

    // Climbing out is clamped at the image volume root: /etc/passwd of the node is not found.
    let v = vmi(
        json!([{"name": "root", "containerDisk": {"image": "x", "path": "../../../../../etc/passwd"}}]),
    );
    let err = check_container_disks(&pod(&root), &v).expect_err("escape");
    assert_eq!(err.label(), "container_disk");
    assert!(err.to_string().starts_with("spec.volumes[0]: "), "{err}");
}

#[test]
fn problems_name_the_volume_and_the_path() {
    let root = tempfile::tempdir().expect("tempdir");
    let v = vmi(json!([{"name": "root", "containerDisk": {"image": "x"}}]));
    let err = check_container_disks(&pod(&root), &v).expect_err("no volume");
    assert_eq!(err.label(), "container_disk");
    assert_eq!(
        err.to_string(),
        format!("spec.volumes[0]: container disk /{IV}/disk_0: image volume does not exist")
    );

    std::fs::create_dir_all(root.path().join(format!("{IV}/disk_0/disk"))).expect("mkdir");
    let err = check_container_disks(&pod(&root), &v).expect_err("empty");
    assert!(err.to_string().contains("no file found"), "{err}");

    write(root.path(), &format!("{IV}/disk_0/disk/a.img"), 0o644);
    write(root.path(), &format!("{IV}/disk_0/disk/b.img"), 0o644);
    let err = check_container_disks(&pod(&root), &v).expect_err("two");
    assert!(
        err.to_string().contains("only one disk is allowed"),
        "{err}"
    );

    let v = vmi(json!([{"name": "root", "containerDisk": {"image": "x", "path": "disk"}}]));
    let err = check_container_disks(&pod(&root), &v).expect_err("dir");
    assert!(err.to_string().contains("not a regular file"), "{err}");

    write(root.path(), &format!("{IV}/disk_0/secret.img"), 0o600);
    let v = vmi(json!([{"name": "root", "containerDisk": {"image": "x", "path": "secret.img"}}]));
    let err = check_container_disks(&pod(&root), &v).expect_err("unreadable");
    assert!(
        err.to_string()
            .contains("not readable by the launcher's user 107"),
        "{err}"
    );
}

#[test]
fn init_container_mode_is_reported_as_unsupported() {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(root.path().join("var/run/kubevirt/container-disks")).expect("mkdir");
    let v = vmi(json!([{"name": "root", "containerDisk": {"image": "x"}}]));
    let err = check_container_disks(&pod(&root), &v).expect_err("init mode");
    assert_eq!(err.label(), "unsupported");
    assert!(err.to_string().contains("not supported yet"), "{err}");
}
