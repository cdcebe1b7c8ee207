//! The target pod's container disks pinned to the images the source runs (KubeVirt v1.9.0's
//! `ExtractImageIDsFromSourcePod` and what `RenderMigrationManifest` does with it): a tag may
//! have moved since the source pulled it, and the target must boot the very same disk, so the
//! target pulls each container disk (and kernel-boot image) by the digest the source pod's
//! status reports. With image volumes, a disk whose digest is known needs no init container to
//! reveal it, and without any such init container the launcher-binary volume goes too.
//!
//! Differs from KubeVirt where the source's runtime reports no repository digest: KubeVirt
//! refuses the migration when the image ID holds no `sha256:` at all (kvrs's own kubelet,
//! serving images from local directories, reports none), and pins a bare image ID
//! (`sha256:<config digest>`, an image imported rather than pulled) as `repo@sha256:<id>`, a
//! reference no registry or runtime resolves. kvrs pins only to a repository digest
//! (`repo@sha256:…`) the runtime itself reported and otherwise keeps the VMI's reference, as the
//! source pod has it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use crate::api::VirtualMachineInstance;

/// The pod volume of a kernel-boot image (KubeVirt's `KernelBootVolumeName`).
const KERNEL_BOOT_VOLUME: &str = "kernel-boot-volume";
/// The image volume holding the launcher's binaries for the digest-revealing init containers.
const LAUNCHER_VOLUME: &str = "launcher-volume";
/// Containers and init containers of a container disk are named `volume<volume name>`.
const CONTAINER_PREFIX: &str = "volume";
const DIGEST_MARK: &str = "@sha256:";

/// Rewrites the rendered target `pod` so that its container disks are those of `source`.
pub(super) fn pin_container_disks(pod: &mut Value, vmi: &VirtualMachineInstance, source: &Pod) {
    let mut ids = disk_images(vmi);
    if ids.is_empty() {
        return;
    }
    let image_volumes = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .is_some_and(|vs| {
            vs.iter().any(|v| {
                v.get("image").is_some() && v["name"].as_str().is_some_and(|n| ids.contains_key(n))
            })
        });
    let status = source.status.as_ref();
    let mut statuses: Vec<_> = status
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default();
    if image_volumes {
        // A source migrated to before runs pinned image volumes and no init containers.
        statuses.extend(
            status
                .and_then(|s| s.init_container_statuses.clone())
                .unwrap_or_default(),
        );
        for v in source
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            if let Some(r) = v.image.as_ref().and_then(|i| i.reference.as_ref())
                && r.contains(DIGEST_MARK)
                && ids.contains_key(&v.name)
            {
                ids.insert(v.name.clone(), r.clone());
            }
        }
    }
    for s in &statuses {
        let Some(volume) = s.name.strip_prefix(CONTAINER_PREFIX) else {
            continue;
        };
        if let Some(pinned) = ids.get(volume).and_then(|i| with_digest(i, &s.image_id)) {
            ids.insert(volume.to_string(), pinned);
        }
    }

    let pinned = |name: &str| ids.get(name).is_some_and(|i| i.contains(DIGEST_MARK));
    let spec = &mut pod["spec"];
    if image_volumes {
        for v in spec["volumes"].as_array_mut().into_iter().flatten() {
            if let Some(image) = v["name"].as_str().and_then(|n| ids.get(n)) {
                v["image"]["reference"] = Value::String(image.clone());
            }
        }
        if let Some(inits) = spec["initContainers"].as_array_mut() {
            inits.retain(|c| {
                c["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix(CONTAINER_PREFIX))
                    .is_none_or(|v| !pinned(v))
            });
        }
        if ids.keys().all(|k| pinned(k))
            && let Some(vs) = spec["volumes"].as_array_mut()
        {
            vs.retain(|v| v["name"] != LAUNCHER_VOLUME);
        }
    } else {
        for list in ["containers", "initContainers"] {
            for c in spec[list].as_array_mut().into_iter().flatten() {
                if let Some(image) = c["name"]
                    .as_str()
                    .and_then(|n| n.strip_prefix(CONTAINER_PREFIX))
                    .and_then(|v| ids.get(v))
                {
                    c["image"] = Value::String(image.clone());
                }
            }
        }
    }
}

/// The image of each container-disk volume, and of the kernel-boot volume, by volume name.
fn disk_images(vmi: &VirtualMachineInstance) -> BTreeMap<String, String> {
    let v = serde_json::to_value(vmi).unwrap_or_default();
    let mut ids: BTreeMap<String, String> = v
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|vol| {
            let image = vol.pointer("/containerDisk/image")?.as_str()?;
            Some((vol["name"].as_str()?.to_string(), image.to_string()))
        })
        .collect();
    if let Some(image) = v
        .pointer("/spec/domain/firmware/kernelBoot/container/image")
        .and_then(Value::as_str)
        .filter(|i| !i.is_empty())
    {
        ids.insert(KERNEL_BOOT_VOLUME.into(), image.into());
    }
    ids
}

/// KubeVirt's `toImageWithDigest`: the image's repository with the digest of `image_id`, when
/// `image_id` is a repository digest (`[docker-pullable://]repo@sha256:…`; see the module
/// header for the other image IDs).
fn with_digest(image: &str, image_id: &str) -> Option<String> {
    let base = match image.find(DIGEST_MARK) {
        Some(i) => &image[..i],
        None => match (image.rfind(':'), image.rfind('/')) {
            (Some(colon), slash) if slash.is_none_or(|s| colon > s) => &image[..colon],
            _ => image,
        },
    };
    let at = image_id.find(DIGEST_MARK)?;
    let digest: String = image_id[at + DIGEST_MARK.len()..]
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!digest.is_empty()).then(|| format!("{base}{DIGEST_MARK}{digest}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn vmi_with_disk() -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "vmi1", "namespace": "default"},
            "spec": {"domain": {"devices": {}},
                     "volumes": [{"name": "cd", "containerDisk": {"image": "reg:5000/disk:v1"}}]},
        }))
        .unwrap()
    }

    fn source(image_id: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "src"},
            "status": {"containerStatuses": [
                {"name": "compute", "image": "l", "imageID": "", "ready": true, "restartCount": 0},
                {"name": "volumecd", "image": "reg:5000/disk:v1", "imageID": image_id,
                 "ready": true, "restartCount": 0}]},
        }))
        .unwrap()
    }

    /// The image-volume rendering: the volume pinned, its init container and the launcher
    /// volume gone (what tests/migration_oracle.rs saw KubeVirt create).
    #[test]
    fn image_volumes_are_pinned_to_the_source_digest() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "guest-console-log"}, {"name": "volumecd", "image": "reg:5000/disk:v1"}],
            "containers": [{"name": "compute"}],
            "volumes": [{"name": "cd", "image": {"reference": "reg:5000/disk:v1"}},
                        {"name": "launcher-volume", "image": {"reference": "launcher"}},
                        {"name": "private", "emptyDir": {}}]}});
        pin_container_disks(
            &mut pod,
            &vmi_with_disk(),
            &source("reg:5000/disk@sha256:abc123"),
        );
        assert_eq!(
            pod["spec"]["volumes"],
            json!([{"name": "cd", "image": {"reference": "reg:5000/disk@sha256:abc123"}},
                   {"name": "private", "emptyDir": {}}])
        );
        assert_eq!(
            pod["spec"]["initContainers"],
            json!([{"name": "guest-console-log"}])
        );
    }

    /// The container rendering: the disk's container runs the pinned image.
    #[test]
    fn container_disk_containers_are_pinned_too() {
        let mut pod = json!({"spec": {
            "containers": [{"name": "compute"}, {"name": "volumecd", "image": "reg:5000/disk:v1"}],
            "volumes": [{"name": "cd", "emptyDir": {}}]}});
        pin_container_disks(
            &mut pod,
            &vmi_with_disk(),
            &source("docker-pullable://reg:5000/disk@sha256:abc123"),
        );
        assert_eq!(
            pod["spec"]["containers"][1]["image"],
            "reg:5000/disk@sha256:abc123"
        );
    }

    /// No repository digest reported (kvrs's kubelet reports none; an imported image only its
    /// config digest): the target keeps the reference, its init container and the launcher
    /// volume, as rendered.
    #[test]
    fn without_a_repository_digest_the_reference_is_kept() {
        let rendered = json!({"spec": {
            "initContainers": [{"name": "volumecd", "image": "reg:5000/disk:v1"}],
            "volumes": [{"name": "cd", "image": {"reference": "reg:5000/disk:v1"}},
                        {"name": "launcher-volume", "image": {"reference": "launcher"}}]}});
        for image_id in ["", "sha256:0123abcd"] {
            let mut pod = rendered.clone();
            pin_container_disks(&mut pod, &vmi_with_disk(), &source(image_id));
            assert_eq!(pod, rendered, "{image_id:?}");
        }
    }

    #[test]
    fn digests_replace_tags_and_older_digests() {
        assert_eq!(
            with_digest("reg:5000/disk:v1", "other/disk@sha256:ab").unwrap(),
            "reg:5000/disk@sha256:ab"
        );
        assert_eq!(
            with_digest("reg:5000/disk", "x@sha256:ab").unwrap(),
            "reg:5000/disk@sha256:ab"
        );
        assert_eq!(
            with_digest("disk@sha256:00", "disk@sha256:ab").unwrap(),
            "disk@sha256:ab"
        );
        assert_eq!(with_digest("disk:v1", "sha256:ab"), None);
    }
}
