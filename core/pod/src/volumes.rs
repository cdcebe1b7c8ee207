//! Pod volumes and the compute container's mounts, in the order KubeVirt adds them.
//!
//! Every pod gets the same six scratch directories; then come config volumes (Secrets,
//! ConfigMaps, downward API), storage volumes (PVCs, DataVolumes, host disks, cloud-init secrets,
//! sysprep), access-credential secrets, backend storage, container-disk image volumes, hook
//! sockets, hugepages, the hotplug directory, network info and virtiofs sockets.

use std::collections::{BTreeSet, HashMap};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::sidecars::HookSidecar;
use super::{PodError, PodInputs, VIRT_PRIVATE_DIR};
use crate::api::{VirtualMachineInstance, Volume};
use crate::config::ClusterConfig;
use kvrs_api::names::path_component;

/// What the controller's PVC informer knows about a claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PvcInfo {
    /// `volumeMode: Block`: attached as a device instead of mounted.
    pub block: bool,
    /// ReadWriteMany access: the mount path is listed as a shared filesystem.
    pub shared: bool,
    /// `metadata.uid`; claims used for SCSI persistent reservation are labelled with it so two
    /// launchers sharing the LUN never land on one node.
    pub uid: Option<String>,
}

/// The rendered volumes.
#[derive(Clone, Debug, Default)]
pub(super) struct RenderedVolumes {
    pub(super) volumes: Vec<core::Volume>,
    pub(super) mounts: Vec<core::VolumeMount>,
    pub(super) devices: Vec<core::VolumeDevice>,
    pub(super) shared_paths: Vec<String>,
}

pub(super) fn empty_dir(name: &str) -> core::Volume {
    core::Volume {
        name: name.into(),
        empty_dir: Some(core::EmptyDirVolumeSource::default()),
        ..Default::default()
    }
}

pub(super) fn mount(name: &str, path: &str) -> core::VolumeMount {
    core::VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

fn read_only(name: &str, path: &str) -> core::VolumeMount {
    core::VolumeMount {
        read_only: Some(true),
        ..mount(name, path)
    }
}

pub(super) fn sub_path(name: &str, path: &str, sub: &str, ro: bool) -> core::VolumeMount {
    core::VolumeMount {
        sub_path: Some(sub.into()),
        read_only: ro.then_some(true),
        ..mount(name, path)
    }
}

fn secret_volume(name: &str, secret: &str) -> core::Volume {
    core::Volume {
        name: name.into(),
        secret: Some(core::SecretVolumeSource {
            secret_name: Some(secret.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(super) fn pvc_volume(name: &str, claim: &str, read_only: Option<bool>) -> core::Volume {
    core::Volume {
        name: name.into(),
        persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
            claim_name: claim.into(),
            read_only: read_only.filter(|r| *r),
        }),
        ..Default::default()
    }
}

/// Where a PVC, DataVolume or host disk directory is mounted in the compute container.
pub(crate) fn mounted_disk_dir(volume: &str) -> String {
    format!("{VIRT_PRIVATE_DIR}/vmi-disks/{volume}")
}

/// Renders all volumes of the pod and the compute container's mounts and devices.
pub(super) fn render(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
    inputs: &PodInputs,
    hooks: &[HookSidecar],
    non_root: bool,
) -> Result<RenderedVolumes, PodError> {
    let mut r = RenderedVolumes::default();
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    config_volumes(vmi, volumes, &mut r);
    storage_volumes(vmi, volumes, inputs, &mut r)?;
    access_credentials(vmi, &mut r)?;
    super::backend_storage::render(vmi, inputs, non_root, &mut r);
    image_volumes(vmi, config, &inputs.image_pull_policy, volumes, &mut r);
    if !hooks.is_empty() {
        r.volumes.push(empty_dir("hook-sidecar-sockets"));
        r.mounts
            .push(mount("hook-sidecar-sockets", "/var/run/kubevirt-hooks"));
    }
    if vmi
        .spec
        .domain
        .memory
        .as_ref()
        .is_some_and(|m| m.hugepages.is_some())
    {
        r.volumes.push(core::Volume {
            name: "hugepages".into(),
            empty_dir: Some(core::EmptyDirVolumeSource {
                medium: Some("HugePages".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        r.mounts.push(mount("hugepages", "/dev/hugepages"));
        r.volumes.push(empty_dir("hugetblfs-dir"));
        r.mounts
            .push(mount("hugetblfs-dir", "/dev/hugepages/libvirt/qemu"));
    }
    if !vmi.spec.domain.devices.disable_hotplug.unwrap_or(false) {
        r.mounts.push(core::VolumeMount {
            mount_propagation: Some("HostToContainer".into()),
            ..mount("hotplug-disks", &inputs.hotplug_disk_dir)
        });
        r.volumes.push(empty_dir("hotplug-disks"));
    }
    let sriov = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.sriov.is_some());
    if sriov {
        r.mounts
            .push(mount("network-info-annotation", "/etc/podinfo"));
        r.volumes.push(core::Volume {
            name: "network-info-annotation".into(),
            downward_api: Some(core::DownwardAPIVolumeSource {
                items: Some(vec![core::DownwardAPIVolumeFile {
                    path: "network-info".into(),
                    field_ref: Some(core::ObjectFieldSelector {
                        field_path: "metadata.annotations['kubevirt.io/network-info']".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        });
    }
    if !vmi
        .spec
        .domain
        .devices
        .filesystems
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        r.mounts.push(mount(
            "virtiofs-containers",
            "/var/run/kubevirt/virtiofs-containers",
        ));
        r.volumes.push(empty_dir("virtiofs-containers"));
    }

    // The fixed directories come first in both lists.
    let mut volumes_out = [
        "private",
        "public",
        "sockets",
        "virt-bin-share-dir",
        "libvirt-runtime",
        "ephemeral-disks",
    ]
    .map(empty_dir)
    .to_vec();
    volumes_out.append(&mut r.volumes);
    r.volumes = volumes_out;
    let mut mounts_out = vec![
        mount("private", VIRT_PRIVATE_DIR),
        mount("public", "/var/run/kubevirt"),
        mount("ephemeral-disks", &inputs.ephemeral_disk_dir),
        mount("libvirt-runtime", "/var/run/libvirt"),
        mount(
            "sockets",
            &format!("{}/sockets", inputs.share_dir.trim_end_matches('/')),
        ),
    ];
    mounts_out.append(&mut r.mounts);
    r.mounts = mounts_out;
    Ok(r)
}

fn config_volumes(vmi: &VirtualMachineInstance, volumes: &[Volume], r: &mut RenderedVolumes) {
    for v in volumes {
        if let Some(s) = &v.secret {
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                secret: Some(core::SecretVolumeSource {
                    secret_name: s.secret_name.clone(),
                    optional: s.optional,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(c) = &v.config_map {
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                config_map: Some(core::ConfigMapVolumeSource {
                    name: c.name.clone().unwrap_or_default(),
                    optional: c.optional,
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        if let Some(d) = &v.downward_api {
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                downward_api: Some(core::DownwardAPIVolumeSource {
                    items: d.fields.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    // The first volume of each name, looked up once per disk (a search of the list per disk
    // was O(disks x volumes)).
    let mut by_name: HashMap<&str, &Volume> = HashMap::with_capacity(volumes.len());
    for v in volumes {
        by_name.entry(v.name.as_str()).or_insert(v);
    }
    for disk in vmi.spec.domain.devices.disks.iter().flatten() {
        let Some(v) = by_name.get(disk.name.as_str()).copied() else {
            continue;
        };
        let dir = if v.secret.is_some() {
            "secret"
        } else if v.config_map.is_some() {
            "config-map"
        } else if v.downward_api.is_some() {
            "downwardapi"
        } else {
            continue;
        };
        r.mounts.push(read_only(
            &v.name,
            &format!("{VIRT_PRIVATE_DIR}/{dir}/{}", v.name),
        ));
    }
}

/// Volumes hotplugged after start are attached by their own pods, not the launcher's.
fn hotplug_names(vmi: &VirtualMachineInstance, volumes: &[Volume]) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = vmi
        .status
        .iter()
        .flat_map(|s| s.volume_status.iter().flatten())
        .filter(|s| s.hotplug_volume.is_some())
        .map(|s| s.name.clone())
        .collect();
    for v in volumes {
        let dv = v.data_volume.as_ref().and_then(|d| d.hotpluggable);
        let pvc = v
            .persistent_volume_claim
            .as_ref()
            .and_then(|p| p.hotpluggable);
        if dv.unwrap_or(false) || pvc.unwrap_or(false) {
            names.insert(v.name.clone());
        }
    }
    names
}

fn add_claim(name: &str, claim: &str, inputs: &PodInputs, r: &mut RenderedVolumes) {
    let info = inputs.pvcs.get(claim).cloned().unwrap_or_default();
    if info.block {
        r.devices.push(core::VolumeDevice {
            name: name.into(),
            device_path: format!("/dev/{name}"),
        });
    } else {
        let path = mounted_disk_dir(name);
        r.mounts.push(mount(name, &path));
        if info.shared {
            r.shared_paths.push(path);
        }
    }
}

fn cloud_init_secrets(
    v: &Volume,
    user: Option<&core::LocalObjectReference>,
    network: Option<&core::LocalObjectReference>,
    r: &mut RenderedVolumes,
) {
    for (suffix, reference, files) in [
        ("-udata", user, ["userdata", "userData"]),
        ("-ndata", network, ["networkdata", "networkData"]),
    ] {
        let Some(reference) = reference else { continue };
        let volume = format!("{}{suffix}", v.name);
        r.volumes.push(secret_volume(&volume, &reference.name));
        for f in files {
            r.mounts.push(sub_path(
                &volume,
                &format!("{VIRT_PRIVATE_DIR}/secret/{}/{f}", v.name),
                f,
                true,
            ));
        }
    }
}

fn storage_volumes(
    vmi: &VirtualMachineInstance,
    volumes: &[Volume],
    inputs: &PodInputs,
    r: &mut RenderedVolumes,
) -> Result<(), PodError> {
    let hotplug = hotplug_names(vmi, volumes);
    for v in volumes.iter().filter(|v| !hotplug.contains(&v.name)) {
        if let Some(pvc) = &v.persistent_volume_claim {
            add_claim(&v.name, &pvc.claim_name, inputs, r);
            r.volumes
                .push(pvc_volume(&v.name, &pvc.claim_name, pvc.read_only));
        }
        if let Some(eph) = &v.ephemeral
            && let Some(pvc) = &eph.persistent_volume_claim
        {
            add_claim(&v.name, &pvc.claim_name, inputs, r);
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                persistent_volume_claim: Some(pvc.clone()),
                ..Default::default()
            });
        }
        if let Some(hd) = &v.host_disk {
            let kind = match hd.r#type.as_str() {
                "Disk" => "Directory",
                "DiskOrCreate" => "DirectoryOrCreate",
                _ => "",
            };
            r.mounts.push(mount(&v.name, &mounted_disk_dir(&v.name)));
            let dir = match hd.path.rfind('/') {
                Some(0) => "/".to_string(),
                Some(i) => hd.path[..i].to_string(),
                None => ".".to_string(),
            };
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                host_path: Some(core::HostPathVolumeSource {
                    path: dir,
                    type_: Some(kind.to_string()),
                }),
                ..Default::default()
            });
        }
        if let Some(dv) = &v.data_volume {
            add_claim(&v.name, &dv.name, inputs, r);
            r.volumes.push(pvc_volume(&v.name, &dv.name, None));
        }
        if v.downward_metrics.is_some() {
            r.volumes.push(core::Volume {
                name: v.name.clone(),
                empty_dir: Some(core::EmptyDirVolumeSource {
                    medium: Some("Memory".into()),
                    size_limit: Some(K8sQuantity("1Mi".into())),
                }),
                ..Default::default()
            });
            r.mounts.push(mount(
                &v.name,
                &format!("{VIRT_PRIVATE_DIR}/downwardmetric-disk"),
            ));
        }
        if let Some(ci) = &v.cloud_init_no_cloud {
            cloud_init_secrets(
                v,
                ci.secret_ref.as_ref(),
                ci.network_data_secret_ref.as_ref(),
                r,
            );
        }
        if let Some(sp) = &v.sysprep {
            let mut volume = core::Volume {
                name: v.name.clone(),
                ..Default::default()
            };
            if let Some(s) = &sp.secret {
                volume.secret = Some(core::SecretVolumeSource {
                    secret_name: Some(s.name.clone()),
                    ..Default::default()
                });
            } else if let Some(c) = &sp.config_map {
                volume.config_map = Some(core::ConfigMapVolumeSource {
                    name: c.name.clone(),
                    ..Default::default()
                });
            } else {
                return Err(PodError::Sysprep(v.name.clone()));
            }
            r.volumes.push(volume);
            r.mounts.push(read_only(
                &v.name,
                &format!("{VIRT_PRIVATE_DIR}/sysprep/{}", v.name),
            ));
        }
        if let Some(ci) = &v.cloud_init_config_drive {
            cloud_init_secrets(
                v,
                ci.secret_ref.as_ref(),
                ci.network_data_secret_ref.as_ref(),
                r,
            );
        }
    }
    Ok(())
}

fn access_credentials(
    vmi: &VirtualMachineInstance,
    r: &mut RenderedVolumes,
) -> Result<(), PodError> {
    for (i, cred) in vmi.spec.access_credentials.iter().flatten().enumerate() {
        let ssh = cred
            .ssh_public_key
            .as_ref()
            .and_then(|k| k.source.secret.as_ref());
        let (kind, secret) = match ssh {
            Some(s) => ("sshPublicKey", Some(s)),
            None => (
                "userPassword",
                cred.user_password
                    .as_ref()
                    .and_then(|p| p.source.secret.as_ref()),
            ),
        };
        let secret = secret
            .map(|s| s.secret_name.clone())
            .filter(|s| !s.is_empty());
        let Some(secret) = secret else { continue };
        let volume = format!("{secret}-access-cred");
        // The mount directory is named after the secret.
        path_component(
            format_args!("spec.accessCredentials[{i}].{kind}.source.secret.secretName"),
            &volume,
        )?;
        r.volumes.push(secret_volume(&volume, &secret));
        r.mounts.push(read_only(
            &volume,
            &format!("{VIRT_PRIVATE_DIR}/secret/{volume}"),
        ));
    }
    Ok(())
}

fn image_volumes(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
    launcher_pull_policy: &str,
    volumes: &[Volume],
    r: &mut RenderedVolumes,
) {
    let mut any = false;
    for (i, v) in volumes.iter().enumerate() {
        let Some(cd) = &v.container_disk else {
            continue;
        };
        any = true;
        r.volumes.push(image_volume(
            &v.name,
            &cd.image,
            cd.image_pull_policy.as_deref(),
        ));
        r.mounts.push(read_only(
            &v.name,
            &format!("/var/run/kubevirt-image-volume/disk_{i}"),
        ));
    }
    if let Some(kb) = kernel_boot_container(vmi) {
        any = true;
        r.volumes.push(image_volume(
            "kernel-boot-volume",
            &kb.image,
            kb.image_pull_policy.as_deref(),
        ));
        r.mounts.push(read_only(
            "kernel-boot-volume",
            "/var/run/kubevirt-kernel-boot",
        ));
    }
    if any {
        r.volumes.push(image_volume(
            "launcher-volume",
            &config.launcher_image,
            Some(launcher_pull_policy),
        ));
    }
}

fn image_volume(name: &str, image: &str, policy: Option<&str>) -> core::Volume {
    core::Volume {
        name: name.into(),
        image: Some(core::ImageVolumeSource {
            reference: Some(image.into()),
            pull_policy: policy.filter(|p| !p.is_empty()).map(str::to_string),
        }),
        ..Default::default()
    }
}

/// The kernel-boot container of the VMI, when it boots a kernel from an image.
pub(super) fn kernel_boot_container(
    vmi: &VirtualMachineInstance,
) -> Option<&crate::api::KernelBootContainer> {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.kernel_boot.as_ref())
        .and_then(|k| k.container.as_ref())
}
