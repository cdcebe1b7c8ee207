//! Volumes: one source each, unique names, a disk or filesystem for every volume, cloud-init
//! data limits, host disks, and references that must not be empty.

use std::collections::{BTreeMap, BTreeSet};

use super::causes::Causes;
use crate::api::{VirtualMachineInstanceSpec, Volume};
use crate::config::ClusterConfig;

const VOLUMES: &str = "spec.volumes";
/// Inline cloud-init user and network data above 2 KiB belong in a Secret.
const CLOUD_INIT_MAX: usize = 2048;

fn source_count(v: &Volume) -> usize {
    [
        v.persistent_volume_claim.is_some(),
        v.sysprep.is_some(),
        v.cloud_init_no_cloud.is_some(),
        v.cloud_init_config_drive.is_some(),
        v.container_disk.is_some(),
        v.ephemeral.is_some(),
        v.empty_disk.is_some(),
        v.host_disk.is_some(),
        v.data_volume.is_some(),
        v.config_map.is_some(),
        v.secret.is_some(),
        v.downward_api.is_some(),
        v.service_account.is_some(),
        v.downward_metrics.is_some(),
        v.memory_dump.is_some(),
        v.container_path.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count()
}

/// An absolute path without `.`/`..` components or doubled slashes, not `/` itself.
pub(super) fn check_path(field: &str, path: &str, causes: &mut Causes) {
    if path == "/" {
        causes.invalid(field, format!("{field} must not point to root"));
        return;
    }
    let trimmed = path.strip_suffix('/').unwrap_or(path);
    let clean = trimmed.starts_with('/')
        && trimmed[1..]
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..");
    if !clean {
        causes.invalid(
            field,
            format!("{field} must be an absolute path to a file without relative components"),
        );
    }
}

pub(super) fn check(
    spec: &VirtualMachineInstanceSpec,
    config: &ClusterConfig,
    causes: &mut Causes,
) {
    let volumes: &[Volume] = spec.volumes.as_deref().unwrap_or(&[]);
    let devices = &spec.domain.devices;
    let disks: BTreeSet<&str> = devices
        .disks
        .iter()
        .flatten()
        .map(|d| d.name.as_str())
        .collect();
    let filesystems: BTreeSet<&str> = devices
        .filesystems
        .iter()
        .flatten()
        .map(|f| f.name.as_str())
        .collect();
    let mut first_index: BTreeMap<&str, usize> = BTreeMap::new();
    let (mut service_accounts, mut downward_metrics, mut memory_dumps) = (0, 0, 0);
    for (idx, v) in volumes.iter().enumerate() {
        let path = format!("{VOLUMES}[{idx}]");
        if let Some(other) = first_index.get(v.name.as_str()) {
            causes.invalid(
                format!("{path}.name"),
                format!("{path} and {VOLUMES}[{other}] must not have the same Name."),
            );
        } else {
            first_index.insert(&v.name, idx);
        }
        if source_count(v) != 1 {
            causes.invalid(
                path.clone(),
                format!("{path} must have exactly one source type set"),
            );
        }
        service_accounts += usize::from(v.service_account.is_some());
        downward_metrics += usize::from(v.downward_metrics.is_some());
        memory_dumps += usize::from(v.memory_dump.is_some());
        if v.data_volume.as_ref().is_some_and(|d| d.name.is_empty()) {
            causes.required(format!("{path}.name"), "DataVolume 'name' must be set");
        }
        if v.persistent_volume_claim
            .as_ref()
            .is_some_and(|p| p.claim_name.is_empty())
        {
            causes.required(
                format!("{path}.persistentVolumeClaim.claimName"),
                format!("{path}.persistentVolumeClaim.claimName is a required field"),
            );
        }
        if let Some(cd) = &v.container_disk {
            if cd.image.is_empty() {
                causes.required(
                    format!("{path}.containerDisk.image"),
                    format!("{path}.containerDisk.image is a required field"),
                );
            }
            if let Some(p) = cd.path.as_deref().filter(|p| !p.is_empty()) {
                check_path(&format!("{path}.containerDisk"), p, causes);
            }
        }
        check_cloud_init(&path, v, causes);
        if v.downward_metrics.is_some() && !super::gate_enabled(config, "DownwardMetrics") {
            causes.invalid(
                path.clone(),
                "downwardMetrics disks are not allowed: DownwardMetrics feature gate is not enabled.",
            );
        }
        if let Some(hd) = &v.host_disk {
            if !super::gate_enabled(config, "HostDisk") {
                causes.invalid(path.clone(), "HostDisk feature gate is not enabled");
            }
            if hd.path.is_empty() {
                causes.required(
                    format!("{path}.hostDisk.path"),
                    format!("{path}.hostDisk.path is required for hostDisk volume"),
                );
            }
            if !matches!(hd.r#type.as_str(), "Disk" | "DiskOrCreate") {
                causes.invalid(
                    format!("{path}.hostDisk.type"),
                    format!(
                        "{path}.hostDisk.type has invalid value '{}', allowed are 'Disk' or 'DiskOrCreate'",
                        hd.r#type
                    ),
                );
            }
            let capacity = hd
                .capacity
                .as_ref()
                .is_some_and(|c| c.value().unwrap_or(0) != 0);
            if hd.r#type == "Disk" && capacity {
                causes.invalid(
                    format!("{path}.hostDisk.capacity"),
                    format!(
                        "{path}.hostDisk.capacity is allowed to pass only with {path}.hostDisk.type equal to 'DiskOrCreate'"
                    ),
                );
            }
        }
        // Sources that name the object they project: the name is required.
        let named_sources = [
            (
                "configMap.name",
                v.config_map.as_ref().map(|c| c.name.as_deref()),
            ),
            (
                "secret.secretName",
                v.secret.as_ref().map(|s| s.secret_name.as_deref()),
            ),
            (
                "serviceAccount.serviceAccountName",
                v.service_account
                    .as_ref()
                    .map(|s| s.service_account_name.as_deref()),
            ),
        ];
        for (field, name) in named_sources {
            if name.is_some_and(|n| n.unwrap_or("").is_empty()) {
                causes.invalid(
                    format!("{path}.{field}"),
                    format!("{path}.{field} is a required field"),
                );
            }
        }
        // Every volume must reach the guest through a disk or a filesystem.
        let (as_disk, as_fs) = (
            disks.contains(v.name.as_str()),
            filesystems.contains(v.name.as_str()),
        );
        if v.memory_dump.is_none() && !as_disk && !as_fs {
            causes.invalid(
                format!("spec.domain.volumes[{idx}].name"),
                format!("spec.domain.volumes[{idx}].name '{}' not found.", v.name),
            );
        }
        if v.container_path.is_some() {
            if as_disk {
                causes.invalid(
                    format!("spec.domain.volumes[{idx}]"),
                    format!(
                        "ContainerPath volume '{}' must be mapped to a filesystem, not a disk",
                        v.name
                    ),
                );
            }
            if !as_fs {
                causes.invalid(
                    format!("spec.domain.volumes[{idx}]"),
                    format!(
                        "ContainerPath volume '{}' must have a matching filesystem defined in spec.domain.devices.filesystems",
                        v.name
                    ),
                );
            }
        }
    }
    for (count, what) in [
        (service_accounts, "serviceAccount"),
        (downward_metrics, "downwardMetric"),
        (memory_dumps, "memory dump"),
    ] {
        if count > 1 {
            causes.invalid(
                VOLUMES,
                format!("{VOLUMES} must have max one {what} volume set"),
            );
        }
    }
}

fn check_cloud_init(path: &str, v: &Volume, causes: &mut Causes) {
    let (kind, user, user64, user_ref, net, net64, net_ref) =
        if let Some(c) = &v.cloud_init_no_cloud {
            (
                "cloudInitNoCloud",
                &c.user_data,
                &c.user_data_base64,
                c.secret_ref.as_ref().map(|r| r.name.as_str()),
                &c.network_data,
                &c.network_data_base64,
                c.network_data_secret_ref.as_ref().map(|r| r.name.as_str()),
            )
        } else if let Some(c) = &v.cloud_init_config_drive {
            (
                "cloudInitConfigDrive",
                &c.user_data,
                &c.user_data_base64,
                c.secret_ref.as_ref().map(|r| r.name.as_str()),
                &c.network_data,
                &c.network_data_base64,
                c.network_data_secret_ref.as_ref().map(|r| r.name.as_str()),
            )
        } else {
            return;
        };
    let field = format!("{path}.{kind}");
    let mut tally =
        |text: &Option<String>, b64: &Option<String>, reference: Option<&str>, what: &str| {
            let mut sources = 0;
            let mut len = 0;
            if reference.is_some_and(|r| !r.is_empty()) {
                sources += 1;
            }
            if let Some(b) = b64.as_deref().filter(|b| !b.is_empty()) {
                sources += 1;
                match base64_decoded_len(b) {
                    Some(n) => len = n,
                    None => causes.invalid(
                        format!("{field}.{what}DataBase64"),
                        format!("{field}.{what}DataBase64 is not a valid base64 value."),
                    ),
                }
            }
            if let Some(t) = text.as_deref().filter(|t| !t.is_empty()) {
                sources += 1;
                len = t.len();
            }
            (sources, len)
        };
    let (user_sources, user_len) = tally(user, user64, user_ref, "user");
    let (net_sources, net_len) = tally(net, net64, net_ref, "network");
    if user_sources > 1 {
        causes.invalid(
            field.clone(),
            format!("{field} must have only one userdatasource set."),
        );
    }
    if user_len > CLOUD_INIT_MAX {
        causes.invalid(
            field.clone(),
            format!("{field} userdata exceeds {CLOUD_INIT_MAX} byte limit. Should use UserDataSecretRef for larger data."),
        );
    }
    if net_sources > 1 {
        causes.invalid(
            field.clone(),
            format!("{field} must have only one networkdata source set."),
        );
    }
    if net_len > CLOUD_INIT_MAX {
        causes.invalid(
            field.clone(),
            format!("{field} networkdata exceeds {CLOUD_INIT_MAX} byte limit. Should use NetworkDataSecretRef for larger data."),
        );
    }
    if user_sources == 0 && net_sources == 0 {
        causes.invalid(
            field.clone(),
            format!("{field} must have at least one userdatasource or one networkdatasource set."),
        );
    }
}

/// Decoded length of standard (padded) base64, or `None` when it is not valid base64.
fn base64_decoded_len(s: &str) -> Option<usize> {
    let bytes = s.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let pad = bytes.iter().rev().take_while(|b| **b == b'=').count();
    if pad > 2 {
        return None;
    }
    let body = &bytes[..bytes.len() - pad];
    if !body
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || *b == b'+' || *b == b'/')
    {
        return None;
    }
    Some(bytes.len() / 4 * 3 - pad)
}
