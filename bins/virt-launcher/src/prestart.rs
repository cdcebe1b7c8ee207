//! Everything the converted domain refers to that must exist before libvirt starts it: qcow2
//! overlays over container disks and ephemeral volumes, empty disks, the cloud-init ISO
//! (NoCloud `cidata` / ConfigDrive `config-2`), config-map/secret/downward-API disks, the
//! per-VMI private directory for the serial console.
//!
//! Paths are the converter's (KubeVirt's); each is checked to stay inside its directory before
//! anything is written. External tools (`qemu-img`, `xorrisofs`) get their arguments directly,
//! never through a shell.

use std::path::{Path, PathBuf};

use base64::Engine;
use kvrs_api::VirtualMachineInstance;
use kvrs_api::api::Volume;
use kvrs_converter::Domain;
use tokio::process::Command;

use crate::flags::Flags;
use crate::hooks::HookSidecars;
use crate::hooks::cloud_init::{self, CloudInitFiles};
use crate::log;
use crate::paths::{check_name, check_within, check_within_any};

const PRIVATE: &str = "/var/run/kubevirt-private";
const LIBVIRT_RUN: &str = "/var/run/libvirt";
const EMPTY_DISKS: &str = "/var/run/libvirt/empty-disks";
const CLOUD_INIT_DIR: &str = "/var/run/libvirt/cloud-init-dir";
/// Where the kubelet mounts the pod's ServiceAccount token, CA and namespace: KubeVirt builds a
/// `serviceAccount` disk from it.
const SERVICE_ACCOUNT_SOURCE_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// Runs a tool with direct arguments; its stderr becomes the error.
async fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|e| format!("run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn mkdir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))
}

/// One file a disk of the domain needs, with its paths already checked.
enum Job<'a> {
    Overlay {
        overlay: PathBuf,
        backing: PathBuf,
        format: String,
    },
    EmptyDisk {
        path: PathBuf,
        size: String,
    },
    CloudInit {
        volume: &'a Volume,
        iso: PathBuf,
    },
    ConfigDisk {
        iso: PathBuf,
        source: PathBuf,
    },
}

impl Job<'_> {
    async fn run(self, vmi: &VirtualMachineInstance, hooks: &HookSidecars) -> Result<(), String> {
        match self {
            Job::Overlay {
                overlay,
                backing,
                format,
            } => create_overlay(&overlay, &backing, &format).await,
            Job::EmptyDisk { path, size } => {
                if path.exists() {
                    return Ok(());
                }
                mkdir(Path::new(EMPTY_DISKS))?;
                run(
                    "qemu-img",
                    &[
                        "create".as_ref(),
                        "-f".as_ref(),
                        "qcow2".as_ref(),
                        path.as_os_str(),
                        size.as_ref(),
                    ],
                )
                .await
            }
            Job::CloudInit { volume, iso } => build_cloud_init(vmi, volume, &iso, hooks).await,
            Job::ConfigDisk { iso, source } => build_iso(&iso, &source, "cfgdata").await,
        }
    }
}

/// Prepares every file the domain needs.
///
/// Every path is checked first, in disk order, so a bad volume is reported before anything is
/// written; the files are then made concurrently: each job is an external tool (`qemu-img`,
/// `xorrisofs`) on its own file, and they sit on SyncVirtualMachine's path to a running domain.
pub async fn prepare(
    vmi: &VirtualMachineInstance,
    domain: &Domain,
    flags: &Flags,
    hooks: &HookSidecars,
) -> Result<(), String> {
    let volumes: Vec<&Volume> = vmi.spec.volumes.iter().flatten().collect();
    for v in &volumes {
        check_name("volume name", &v.name)?;
    }
    let ephemeral = flags.ephemeral_disk_dir.join("disk-data");
    let private = Path::new(PRIVATE);
    if let Some(uid) = vmi.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        check_name("VMI uid", uid)?;
        mkdir(&private.join(uid))?;
    }
    mkdir(&private.join("libvirt/qemu/nvram"))?;

    let mut jobs = Vec::new();
    for disk in &domain.devices.disks {
        let volume_name = disk
            .alias
            .as_ref()
            .and_then(|a| a.name.strip_prefix("ua-"))
            .unwrap_or("");
        let volume = volumes.iter().find(|v| v.name == volume_name);
        let Some(file) = disk.source.file.as_deref().map(PathBuf::from) else {
            continue;
        };

        if let Some(backing) = disk
            .backing_store
            .as_ref()
            .and_then(|b| b.source.as_ref())
            .and_then(|s| s.file.as_deref())
        {
            let overlay = check_within("overlay", &file, &ephemeral)?;
            let backing = check_within_any(
                "backing image",
                Path::new(backing),
                &[
                    &flags.container_disk_dir,
                    private,
                    &flags.hotplug_disk_dir,
                    Path::new("/dev"),
                ],
            )?;
            let format = disk
                .backing_store
                .as_ref()
                .and_then(|b| b.format.as_ref())
                .map(|f| f.kind.to_string())
                .unwrap_or_else(|| "raw".into());
            jobs.push(Job::Overlay {
                overlay,
                backing,
                format,
            });
            continue;
        }
        let Some(volume) = volume else { continue };
        // KubeVirt's host-disk step: a filesystem PVC's `disk.img`, made once, before the rest.
        if let Some(info) = crate::host_disk::pvc_info(vmi, volume) {
            let path = check_within("PVC disk image", &file, &private.join("vmi-disks"))?;
            crate::host_disk::ensure(vmi, &volume.name, info, &path).map_err(|e| {
                log::error(format_args!("host disk ({}): {e}", e.label()));
                e.to_string()
            })?;
            continue;
        }
        if let Some(empty) = &volume.empty_disk {
            let path = check_within("empty disk", &file, Path::new(EMPTY_DISKS))?;
            let size = empty
                .capacity
                .value()
                .map_err(|e| format!("emptyDisk {} capacity: {e}", volume.name))?
                .to_string();
            jobs.push(Job::EmptyDisk { path, size });
        } else if volume.cloud_init_no_cloud.is_some() || volume.cloud_init_config_drive.is_some() {
            let iso = check_within("cloud-init ISO", &file, Path::new(CLOUD_INIT_DIR))?;
            jobs.push(Job::CloudInit { volume, iso });
        } else if volume.service_account.is_some() {
            // No pod volume carries it: the kubelet mounts the pod's own token (the launcher pod
            // runs as the volume's ServiceAccount) where every container finds it.
            let iso = check_within("config disk", &file, private)?;
            let source = PathBuf::from(SERVICE_ACCOUNT_SOURCE_DIR);
            jobs.push(Job::ConfigDisk { iso, source });
        } else if let Some(kind) = config_volume_dir(volume) {
            let iso = check_within("config disk", &file, private)?;
            let source = private.join(kind).join(&volume.name);
            jobs.push(Job::ConfigDisk { iso, source });
        }
    }
    futures::future::try_join_all(jobs.into_iter().map(|job| job.run(vmi, hooks))).await?;

    // Kernel boot artifacts come from the kernel-boot container: say clearly when absent.
    for (what, path) in [
        ("kernel", domain.os.kernel.as_deref()),
        ("initrd", domain.os.initrd.as_deref()),
    ] {
        if let Some(p) = path
            && !Path::new(p).exists()
        {
            return Err(format!("{what} {p} for kernel boot does not exist"));
        }
    }
    Ok(())
}

/// `qemu-img create -f qcow2 -b <backing> -F <format> <overlay>`, unless the overlay exists.
async fn create_overlay(overlay: &Path, backing: &Path, format: &str) -> Result<(), String> {
    if overlay.exists() {
        return Ok(());
    }
    if !backing.exists() {
        return Err(format!(
            "backing image {} does not exist",
            backing.display()
        ));
    }
    if let Some(dir) = overlay.parent() {
        mkdir(dir)?;
    }
    let format = if format.chars().all(|c| c.is_ascii_alphanumeric()) {
        format
    } else {
        "raw"
    };
    run(
        "qemu-img",
        &[
            "create".as_ref(),
            "-f".as_ref(),
            "qcow2".as_ref(),
            "-b".as_ref(),
            backing.as_os_str(),
            "-F".as_ref(),
            format.as_ref(),
            overlay.as_os_str(),
        ],
    )
    .await?;
    log::info(format_args!(
        "created overlay {} over {}",
        overlay.display(),
        backing.display()
    ));
    Ok(())
}

/// The private directory a config-map / secret / downward-API volume is mounted under, for
/// volumes shown to the guest as a disk (a service-account disk has no volume of its own).
fn config_volume_dir(v: &Volume) -> Option<&'static str> {
    if v.config_map.is_some() {
        Some("config-map")
    } else if v.secret.is_some() {
        Some("secret")
    } else if v.downward_api.is_some() {
        Some("downwardapi")
    } else {
        None
    }
}

fn decode_b64(what: &str, text: &str) -> Result<String, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| format!("{what}: invalid base64: {e}"))?;
    String::from_utf8(bytes).map_err(|_| format!("{what}: not UTF-8"))
}

/// Reads a key of a secret the handler mounted for a cloud-init `secretRef`.
fn secret_key(volume: &str, keys: &[&str]) -> Result<Option<String>, String> {
    let dir = Path::new(PRIVATE).join("secret").join(volume);
    for key in keys {
        let path = dir.join(key);
        if path.exists() {
            return std::fs::read_to_string(&path)
                .map(Some)
                .map_err(|e| format!("read {}: {e}", path.display()));
        }
    }
    Ok(None)
}

/// User data and network data of a cloud-init volume, from inline, base64 or secret sources.
fn cloud_init_data(volume: &Volume) -> Result<(String, Option<String>), String> {
    let (ud, ud64, ud_secret, nd, nd64, nd_secret) = if let Some(s) = &volume.cloud_init_no_cloud {
        (
            &s.user_data,
            &s.user_data_base64,
            s.secret_ref.is_some(),
            &s.network_data,
            &s.network_data_base64,
            s.network_data_secret_ref.is_some(),
        )
    } else if let Some(s) = &volume.cloud_init_config_drive {
        (
            &s.user_data,
            &s.user_data_base64,
            s.secret_ref.is_some(),
            &s.network_data,
            &s.network_data_base64,
            s.network_data_secret_ref.is_some(),
        )
    } else {
        return Err(format!("volume {} is not a cloud-init volume", volume.name));
    };
    let user = match (ud, ud64) {
        (Some(u), _) => u.clone(),
        (None, Some(b)) => decode_b64("userDataBase64", b)?,
        _ if ud_secret => {
            secret_key(&volume.name, &["userdata", "userData"])?.ok_or_else(|| {
                format!(
                    "cloud-init secret of volume {} has no userdata key",
                    volume.name
                )
            })?
        }
        _ => String::new(),
    };
    let network = match (nd, nd64) {
        (Some(n), _) => Some(n.clone()),
        (None, Some(b)) => Some(decode_b64("networkDataBase64", b)?),
        _ if nd_secret => secret_key(&volume.name, &["networkdata", "networkData"])?,
        _ => None,
    };
    Ok((user, network))
}

/// Writes the NoCloud or ConfigDrive files and turns them into the ISO the domain mounts.
pub(crate) async fn build_cloud_init(
    vmi: &VirtualMachineInstance,
    volume: &Volume,
    iso: &Path,
    hooks: &HookSidecars,
) -> Result<(), String> {
    let (user, network) = cloud_init_data(volume)?;
    let name = vmi.metadata.name.clone().unwrap_or_default();
    let namespace = vmi.metadata.namespace.clone().unwrap_or_default();
    let hostname = vmi.spec.hostname.clone().unwrap_or_else(|| name.clone());
    let no_cloud = volume.cloud_init_no_cloud.is_some();
    let meta = if no_cloud {
        serde_json::json!({"instance-id": format!("{name}.{namespace}"), "local-hostname": hostname})
    } else {
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        serde_json::json!({"uuid": uid, "hostname": hostname, "name": name})
    };
    // The hook sidecars' turn (KubeVirt's PreCloudInitIso), before anything is written.
    let files = CloudInitFiles {
        user_data: user,
        network_data: network,
        meta_data: meta,
    };
    let CloudInitFiles {
        user_data: user,
        network_data: network,
        meta_data: meta,
    } = cloud_init::pre_cloud_init_iso(hooks, vmi, &volume.name, no_cloud, files)
        .await
        .map_err(|e| format!("PreCloudInitIso hook ({}): {e}", e.label()))?;
    let staging = iso.with_extension("staging");
    let _ = std::fs::remove_dir_all(&staging);
    mkdir(&staging)?;
    let write = |rel: &str, text: &str| -> Result<(), String> {
        let path = staging.join(rel);
        if let Some(d) = path.parent() {
            mkdir(d)?;
        }
        std::fs::write(&path, text).map_err(|e| format!("write {}: {e}", path.display()))
    };
    let label = if no_cloud {
        write("meta-data", &meta.to_string())?;
        write("user-data", &user)?;
        if let Some(n) = &network {
            write("network-config", n)?;
        }
        "cidata"
    } else {
        write("openstack/latest/meta_data.json", &meta.to_string())?;
        write("openstack/latest/user_data", &user)?;
        if let Some(n) = &network {
            write("openstack/latest/network_data.json", n)?;
        }
        "config-2"
    };
    let result = build_iso(iso, &staging, label).await;
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// `xorrisofs -output <iso> -volid <label> -joliet -rock -partition_cyl_align on <dir>`, as
/// KubeVirt builds its cloud-init and config disks. Rebuilt on every sync (the data may change).
async fn build_iso(iso: &Path, dir: &Path, label: &str) -> Result<(), String> {
    if !dir.is_dir() {
        return Err(format!(
            "source directory {} for {} does not exist",
            dir.display(),
            iso.display()
        ));
    }
    if let Some(parent) = iso.parent() {
        mkdir(parent)?;
    }
    let tmp = iso.with_extension("iso.tmp");
    run(
        "xorrisofs",
        &[
            "-quiet".as_ref(),
            "-output".as_ref(),
            tmp.as_os_str(),
            // The kubelet writes ConfigMap, Secret, downward-API and token volumes as symlinks
            // into a timestamped `..data` directory: the guest gets the files, not the links.
            "-follow-links".as_ref(),
            "-volid".as_ref(),
            label.as_ref(),
            "-joliet".as_ref(),
            "-rock".as_ref(),
            "-partition_cyl_align".as_ref(),
            "on".as_ref(),
            dir.as_os_str(),
        ],
    )
    .await?;
    std::fs::rename(&tmp, iso).map_err(|e| format!("rename {}: {e}", iso.display()))?;
    log::info(format_args!("built {label} ISO {}", iso.display()));
    Ok(())
}

/// Directories the launcher creates at start (KubeVirt's pod layout).
pub fn create_directories(flags: &Flags) -> Result<(), String> {
    for dir in [
        flags.kubevirt_share_dir.join("sockets"),
        flags.ephemeral_disk_dir.join("disk-data"),
        PathBuf::from(PRIVATE),
        PathBuf::from(LIBVIRT_RUN),
        PathBuf::from(CLOUD_INIT_DIR),
        PathBuf::from(EMPTY_DISKS),
    ] {
        mkdir(&dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn volume(json: serde_json::Value) -> Volume {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn cloud_init_data_from_inline_and_base64() {
        let v = volume(
            serde_json::json!({"name": "ci", "cloudInitNoCloud": {"userDataBase64": "I2Nsb3VkLWNvbmZpZwo=", "networkData": "version: 2"}}),
        );
        let (user, net) = cloud_init_data(&v).unwrap();
        assert_eq!(user, "#cloud-config\n");
        assert_eq!(net.as_deref(), Some("version: 2"));
        let bad = volume(
            serde_json::json!({"name": "ci", "cloudInitNoCloud": {"userDataBase64": "%%%"}}),
        );
        assert!(
            cloud_init_data(&bad)
                .unwrap_err()
                .contains("invalid base64")
        );
    }

    #[test]
    fn config_volumes_map_to_private_dirs() {
        assert_eq!(
            config_volume_dir(&volume(
                serde_json::json!({"name": "c", "configMap": {"name": "x"}})
            )),
            Some("config-map")
        );
        assert_eq!(
            config_volume_dir(&volume(
                serde_json::json!({"name": "s", "secret": {"secretName": "x"}})
            )),
            Some("secret")
        );
        assert_eq!(
            config_volume_dir(&volume(
                serde_json::json!({"name": "e", "emptyDisk": {"capacity": "1Gi"}})
            )),
            None
        );
        // The service-account disk is built from the pod's own token mount, not a volume.
        assert_eq!(
            config_volume_dir(&volume(serde_json::json!(
                {"name": "sa", "serviceAccount": {"serviceAccountName": "x"}}
            ))),
            None
        );
    }
}
