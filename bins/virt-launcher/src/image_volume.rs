//! Container disks from image volumes (KubeVirt v1.9.0's default, the `ImageVolume` feature):
//! the kubelet mounts each `containerDisk` image read-only at
//! `/var/run/kubevirt-image-volume/disk_<i>` and a kernel-boot image at
//! `/var/run/kubevirt-kernel-boot`, and the launcher links the files from there to where the
//! domain XML points (`<container disk dir>/disk_<i>.img`, `<container disk dir>/kernel-boot/<name>`),
//! before converting, as KubeVirt's launcher does.
//!
//! Paths inside an image are resolved with the image's mount point standing for `/`: an image
//! whose disk is a symlink to `/disk/real.qcow2` links to the file in *that image*, never to the
//! pod's own filesystem.

use std::path::{Path, PathBuf};

use kvrs_api::VirtualMachineInstance;
use kvrs_ipc::layout::resolve_in_root;

/// Where the pod mounts container-disk images.
pub const IMAGE_VOLUME_DIR: &str = "/var/run/kubevirt-image-volume";
/// Where the pod mounts the kernel-boot image.
pub const KERNEL_BOOT_VOLUME_DIR: &str = "/var/run/kubevirt-kernel-boot";
/// The directory inside an image that holds the disk when the volume names no `path`.
const DISK_FALLBACK_DIR: &str = "disk";

/// The disk file of container-disk volume `index` inside its image volume.
fn disk_in_image(images: &Path, index: usize, path: Option<&str>) -> Result<PathBuf, String> {
    let root = images.join(format!("disk_{index}"));
    if let Some(p) = path.filter(|p| !p.is_empty()) {
        return resolve_in_root(&root, p);
    }
    let dir = root.join(DISK_FALLBACK_DIR);
    let entries: Vec<_> = std::fs::read_dir(&dir)
        .map_err(|e| format!("failed to check ImageVolume path {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .collect();
    match entries.as_slice() {
        [] => Err(format!(
            "no file found in folder {}, no disk present",
            dir.display()
        )),
        [one] => resolve_in_root(
            &root,
            &format!("{DISK_FALLBACK_DIR}/{}", one.file_name().to_string_lossy()),
        ),
        _ => Err(format!(
            "more than one file found in folder {}, only one disk is allowed",
            dir.display()
        )),
    }
}

fn link(target: &Path, link: &Path) -> Result<(), String> {
    match std::os::unix::fs::symlink(target, link) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!(
            "creating symlink {} -> {}: {e}",
            link.display(),
            target.display()
        )),
    }
}

/// Links every container disk and kernel-boot artifact of `vmi` from the image volumes
/// (`images`, `kernel_boot`) into `container_disk_dir`.
pub fn link_image_volumes(
    vmi: &VirtualMachineInstance,
    images: &Path,
    kernel_boot: &Path,
    container_disk_dir: &Path,
) -> Result<(), String> {
    // In image-volume mode nothing else makes this directory: the pod mounts the `public`
    // emptyDir over its parent and no container-disk container runs.
    std::fs::create_dir_all(container_disk_dir)
        .map_err(|e| format!("{}: {e}", container_disk_dir.display()))?;
    for (i, v) in vmi.spec.volumes.iter().flatten().enumerate() {
        let Some(cd) = &v.container_disk else {
            continue;
        };
        let file = disk_in_image(images, i, cd.path.as_deref()).map_err(|e| {
            format!(
                "spec.volumes[{i}] ({}): failed to find disk file from ImageVolume: {e}",
                v.name
            )
        })?;
        link(&file, &container_disk_dir.join(format!("disk_{i}.img")))?;
    }
    let container = vmi
        .spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref())
        .and_then(|k| k.container.as_ref());
    if let Some(c) = container {
        let dir = container_disk_dir.join("kernel-boot");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (field, artifact) in [
            ("kernelPath", &c.kernel_path),
            ("initrdPath", &c.initrd_path),
        ] {
            let Some(a) = artifact.as_deref().filter(|a| !a.is_empty()) else {
                continue;
            };
            let file = resolve_in_root(kernel_boot, a)
                .map_err(|e| format!("spec.domain.firmware.kernelBoot.container.{field}: {e}"))?;
            let name = Path::new(a).file_name().ok_or_else(|| {
                format!("spec.domain.firmware.kernelBoot.container.{field}: {a:?} names no file")
            })?;
            link(&file, &dir.join(name))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kvrs-iv-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn disks_and_kernel_artifacts_are_linked_from_their_image_volumes() {
        let t = tmp("link");
        let (images, kb, cd) = (t.join("iv"), t.join("kb"), t.join("cd"));
        std::fs::create_dir_all(images.join("disk_0/disk")).unwrap();
        std::fs::write(images.join("disk_0/disk/root.qcow2"), b"q").unwrap();
        std::fs::create_dir_all(kb.join("boot")).unwrap();
        std::fs::write(kb.join("boot/vmlinuz"), b"k").unwrap();
        // An absolute symlink inside the image resolves inside the image.
        std::os::unix::fs::symlink("/boot/vmlinuz", kb.join("boot/linux")).unwrap();
        std::fs::create_dir_all(&cd).unwrap();
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"domain": {"devices": {}, "firmware": {"kernelBoot": {"container": {
                "image": "k", "kernelPath": "/boot/linux"}}}},
                "volumes": [{"name": "root", "containerDisk": {"image": "d"}}]}
        }))
        .unwrap();
        link_image_volumes(&vmi, &images, &kb, &cd).unwrap();
        assert_eq!(std::fs::read(cd.join("disk_0.img")).unwrap(), b"q");
        assert_eq!(std::fs::read(cd.join("kernel-boot/linux")).unwrap(), b"k");
        // Linking again (a second sync) is fine.
        link_image_volumes(&vmi, &images, &kb, &cd).unwrap();
        let _ = std::fs::remove_dir_all(&t);
    }

    #[test]
    fn an_empty_or_ambiguous_image_names_the_volume() {
        let t = tmp("empty");
        std::fs::create_dir_all(t.join("iv/disk_0/disk")).unwrap();
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a"},
            "spec": {"domain": {"devices": {}}, "volumes": [{"name": "root", "containerDisk": {"image": "d"}}]}
        }))
        .unwrap();
        let err = link_image_volumes(&vmi, &t.join("iv"), &t.join("kb"), &t).unwrap_err();
        assert!(
            err.contains("spec.volumes[0] (root)") && err.contains("no file found"),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&t);
    }

    #[test]
    fn dot_dot_never_leaves_the_image() {
        let t = tmp("dots");
        std::fs::write(t.join("f"), b"x").unwrap();
        assert_eq!(resolve_in_root(&t, "../../f").unwrap(), t.join("f"));
        let _ = std::fs::remove_dir_all(&t);
    }
}
