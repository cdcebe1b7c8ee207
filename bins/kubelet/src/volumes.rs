//! Volumes whose content comes from other API objects, as a kubelet sets them up: configMap,
//! secret and projected volumes become files in a directory of the pod; a persistentVolumeClaim
//! bound to a `hostPath` or `local` PersistentVolume is bind-mounted (filesystem mode) or becomes
//! a block device node in the container (block mode, through the pod's `volumeDevices`).
//!
//! [`fetch`] reads the objects the pod names (the only IO: API reads and the `stat` of a block
//! PV's device); [`plan_object_volume`] and [`device_of`] are pure and turn them into the plan's
//! directories, files, mount source or device.

use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Volume,
};
use kube::api::Api;

use crate::error::PlanError;
use crate::plan::{DirPlan, FilePlan};

/// The API objects behind a pod's volumes, by name, read before the pod is planned.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VolumeObjects {
    /// ConfigMaps of the pod's namespace that its volumes name (absent optional ones left out).
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets likewise.
    pub secrets: BTreeMap<String, Secret>,
    /// Claims by claim name, resolved to their PersistentVolume's storage on this node.
    pub claims: BTreeMap<String, BoundClaim>,
}

/// Where a bound claim's data is on this node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundClaim {
    /// The PV's `hostPath.path` or `local.path`.
    pub path: PathBuf,
    /// `volumeMode: Block`.
    pub block: bool,
    /// For block mode: the device's (major, minor).
    pub device: Option<(i64, i64)>,
}

fn source_error(volume: &str, reason: impl Into<String>) -> PlanError {
    PlanError::VolumeSource {
        volume: volume.into(),
        reason: reason.into(),
    }
}

/// Reads every object `pod`'s volumes name. A missing required object is the kubelet's mount
/// failure for that volume (`configmap "x" not found`); a missing optional one is left out.
pub async fn fetch(client: &kube::Client, pod: &Pod) -> Result<VolumeObjects, PlanError> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let mut out = VolumeObjects::default();
    let api_error = |v: &str, e: kube::Error| source_error(v, e.to_string());
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let mut wanted_cms: Vec<(&str, bool)> = Vec::new();
        let mut wanted_secrets: Vec<(&str, bool)> = Vec::new();
        if let Some(c) = &v.config_map {
            wanted_cms.push((c.name.as_str(), c.optional == Some(true)));
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.as_deref().unwrap_or_default();
            wanted_secrets.push((name, s.optional == Some(true)));
        }
        for p in v.projected.iter().flat_map(|p| p.sources.iter().flatten()) {
            if let Some(c) = &p.config_map {
                wanted_cms.push((c.name.as_str(), c.optional == Some(true)));
            }
            if let Some(s) = &p.secret {
                wanted_secrets.push((s.name.as_str(), s.optional == Some(true)));
            }
        }
        for (name, optional) in wanted_cms {
            match config_maps
                .get_opt(name)
                .await
                .map_err(|e| api_error(&v.name, e))?
            {
                Some(cm) => {
                    out.config_maps.insert(name.into(), cm);
                }
                None if optional => {}
                None => {
                    return Err(source_error(
                        &v.name,
                        format!("configmap \"{name}\" not found"),
                    ));
                }
            }
        }
        for (name, optional) in wanted_secrets {
            match secrets
                .get_opt(name)
                .await
                .map_err(|e| api_error(&v.name, e))?
            {
                Some(s) => {
                    out.secrets.insert(name.into(), s);
                }
                None if optional => {}
                None => {
                    return Err(source_error(
                        &v.name,
                        format!("secret \"{name}\" not found"),
                    ));
                }
            }
        }
        if let Some(c) = &v.persistent_volume_claim {
            let name = c.claim_name.as_str();
            let pvc = claims
                .get_opt(name)
                .await
                .map_err(|e| api_error(&v.name, e))?
                .ok_or_else(|| {
                    source_error(
                        &v.name,
                        format!("persistentvolumeclaim \"{name}\" not found"),
                    )
                })?;
            let pv_name = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.clone())
                .filter(|n| !n.is_empty())
                .ok_or_else(|| {
                    source_error(
                        &v.name,
                        format!("persistentvolumeclaim \"{name}\" is not bound"),
                    )
                })?;
            let pv = pvs
                .get_opt(&pv_name)
                .await
                .map_err(|e| api_error(&v.name, e))?
                .ok_or_else(|| {
                    source_error(&v.name, format!("persistentvolume \"{pv_name}\" not found"))
                })?;
            let mut bound = bind(&v.name, &pvc, &pv)?;
            if bound.block {
                let meta = std::fs::metadata(&bound.path)
                    .map_err(|e| source_error(&v.name, format!("{}: {e}", bound.path.display())))?;
                bound.device = Some(device_numbers(&v.name, &bound.path, &meta)?);
            }
            out.claims.insert(name.into(), bound);
        }
    }
    Ok(out)
}

/// The storage of `pvc` on this node from its PV: a `hostPath` or `local` source, in the
/// claim's volume mode.
pub fn bind(
    volume: &str,
    pvc: &PersistentVolumeClaim,
    pv: &PersistentVolume,
) -> Result<BoundClaim, PlanError> {
    let spec = pv.spec.as_ref();
    let path = spec
        .and_then(|s| s.host_path.as_ref().map(|h| h.path.clone()))
        .or_else(|| spec.and_then(|s| s.local.as_ref().map(|l| l.path.clone())))
        .ok_or_else(|| PlanError::Unsupported {
            what: format!(
                "volume {volume}: persistentvolume \"{}\" without a hostPath or local source",
                pv.metadata.name.as_deref().unwrap_or_default()
            ),
        })?;
    let path = Path::new(&path);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(PlanError::BadPath {
            field: format!("volume {volume}: persistentvolume path"),
            path: path.display().to_string(),
            reason: "is not an absolute path without ..",
        });
    }
    let block = pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block");
    Ok(BoundClaim {
        path: path.to_path_buf(),
        block,
        device: None,
    })
}

fn device_numbers(
    volume: &str,
    path: &Path,
    meta: &std::fs::Metadata,
) -> Result<(i64, i64), PlanError> {
    if !meta.file_type().is_block_device() {
        return Err(source_error(
            volume,
            format!("{} is not a block device", path.display()),
        ));
    }
    let rdev = meta.rdev();
    // glibc's gnu_dev_major / gnu_dev_minor.
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    Ok((
        i64::try_from(major).unwrap_or(0),
        i64::try_from(minor).unwrap_or(0),
    ))
}

/// The device of a `volumeDevices` entry's volume: a bound block claim.
pub fn device_of(v: &Volume, objects: &VolumeObjects) -> Result<(i64, i64), PlanError> {
    let Some(c) = &v.persistent_volume_claim else {
        return Err(PlanError::Unsupported {
            what: format!(
                "volumeDevice {}: a volume that is not a persistentVolumeClaim",
                v.name
            ),
        });
    };
    let claim = objects.claims.get(&c.claim_name).ok_or_else(|| {
        source_error(
            &v.name,
            format!("persistentvolumeclaim \"{}\" not read", c.claim_name),
        )
    })?;
    match (claim.block, claim.device) {
        (true, Some(d)) => Ok(d),
        _ => Err(source_error(
            &v.name,
            format!(
                "persistentvolumeclaim \"{}\" is in Filesystem mode, not Block, and cannot be a volumeDevice",
                c.claim_name
            ),
        )),
    }
}

/// What a volume backed by objects mounts.
pub struct ObjectVolume {
    /// The directory or file bind-mounted at the mount path.
    pub path: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Where and for whom an object-backed volume is planned.
pub struct VolumeSetup<'a> {
    /// The pod's `volumes` directory (`<pods dir>/<uid>/volumes`).
    pub volumes_dir: &'a Path,
    /// The objects read for the pod.
    pub objects: &'a VolumeObjects,
    /// (UID, GID) a claim's directory is given: the container's user and the pod's fsGroup.
    pub owner: (u32, u32),
    /// The first mount of the volume (its files are planned once).
    pub first_use: bool,
}

/// The directories and files of a configMap, secret or projected volume, or the source of a
/// claim's; `None` when `v` is none of these. `downward` gives a projected downwardAPI item's
/// value (the pod's fields, as for downwardAPI volumes).
pub fn plan_object_volume(
    v: &Volume,
    setup: &VolumeSetup<'_>,
    dirs: &mut Vec<DirPlan>,
    files: &mut Vec<FilePlan>,
    downward: &dyn Fn(&str, &str) -> Result<String, PlanError>,
) -> Result<Option<ObjectVolume>, PlanError> {
    let VolumeSetup {
        volumes_dir,
        objects,
        owner,
        first_use,
    } = *setup;
    let dir_plan = |dir: &Path, dirs: &mut Vec<DirPlan>| {
        if first_use {
            dirs.push(DirPlan {
                path: dir.to_path_buf(),
                uid: 0,
                gid: 0,
                mode: 0o755,
            });
        }
    };
    if let Some(c) = &v.config_map {
        let dir = volumes_dir.join("kubernetes.io~configmap").join(&v.name);
        dir_plan(&dir, dirs);
        if first_use && let Some(cm) = objects.config_maps.get(&c.name) {
            let data = config_map_data(cm);
            key_files(
                &v.name,
                &dir,
                &data,
                c.items.as_deref(),
                c.default_mode,
                files,
            )?;
        }
        return Ok(Some(ObjectVolume {
            path: dir,
            read_only: true,
        }));
    }
    if let Some(s) = &v.secret {
        let dir = volumes_dir.join("kubernetes.io~secret").join(&v.name);
        dir_plan(&dir, dirs);
        let name = s.secret_name.as_deref().unwrap_or_default();
        if first_use && let Some(secret) = objects.secrets.get(name) {
            let data = secret_data(secret);
            key_files(
                &v.name,
                &dir,
                &data,
                s.items.as_deref(),
                s.default_mode,
                files,
            )?;
        }
        return Ok(Some(ObjectVolume {
            path: dir,
            read_only: true,
        }));
    }
    if let Some(p) = &v.projected {
        let dir = volumes_dir.join("kubernetes.io~projected").join(&v.name);
        dir_plan(&dir, dirs);
        if first_use {
            for source in p.sources.iter().flatten() {
                if let Some(c) = &source.config_map
                    && let Some(cm) = objects.config_maps.get(&c.name)
                {
                    key_files(
                        &v.name,
                        &dir,
                        &config_map_data(cm),
                        c.items.as_deref(),
                        p.default_mode,
                        files,
                    )?;
                }
                if let Some(s) = &source.secret
                    && let Some(secret) = objects.secrets.get(&s.name)
                {
                    key_files(
                        &v.name,
                        &dir,
                        &secret_data(secret),
                        s.items.as_deref(),
                        p.default_mode,
                        files,
                    )?;
                }
                for item in source
                    .downward_api
                    .iter()
                    .flat_map(|d| d.items.iter().flatten())
                {
                    let field = format!(
                        "volume {}: projected downwardAPI item {}",
                        v.name, item.path
                    );
                    let Some(f) = &item.field_ref else {
                        return Err(PlanError::Unsupported {
                            what: format!("{field}: resourceFieldRef"),
                        });
                    };
                    files.push(FilePlan {
                        path: dir.join(relative(&field, &item.path)?),
                        contents: downward(&field, &f.field_path)?.into_bytes(),
                        mode: mode_bits(item.mode.or(p.default_mode)),
                    });
                }
                if source.service_account_token.is_some() || source.cluster_trust_bundle.is_some() {
                    return Err(PlanError::Unsupported {
                        what: format!(
                            "volume {}: projected serviceAccountToken / clusterTrustBundle",
                            v.name
                        ),
                    });
                }
            }
        }
        return Ok(Some(ObjectVolume {
            path: dir,
            read_only: true,
        }));
    }
    if let Some(c) = &v.persistent_volume_claim {
        let claim = objects.claims.get(&c.claim_name).ok_or_else(|| {
            source_error(
                &v.name,
                format!("persistentvolumeclaim \"{}\" not read", c.claim_name),
            )
        })?;
        if claim.block {
            return Err(source_error(
                &v.name,
                format!(
                    "persistentvolumeclaim \"{}\" is in Block mode and cannot be mounted as a filesystem",
                    c.claim_name
                ),
            ));
        }
        if first_use {
            // As a kubelet applies the pod's fsGroup to a local volume: the pod's user can
            // write it (virt-launcher creates its `disk.img` there as UID 107).
            dirs.push(DirPlan {
                path: claim.path.clone(),
                uid: owner.0,
                gid: owner.1,
                mode: 0o770,
            });
        }
        return Ok(Some(ObjectVolume {
            path: claim.path.clone(),
            read_only: c.read_only == Some(true),
        }));
    }
    Ok(None)
}

fn mode_bits(mode: Option<i32>) -> u32 {
    // Only the permission bits count; a negative mode keeps its low bits, as kubelet does.
    mode.unwrap_or(0o644).cast_unsigned() & 0o777
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.iter().flatten() {
        out.insert(k.clone(), v.0.clone());
    }
    out
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut out: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect();
    // `stringData` is folded into `data` by kube-apiserver; a store that keeps it as written
    // still means the same bytes.
    for (k, v) in s.string_data.iter().flatten() {
        out.insert(k.clone(), v.clone().into_bytes());
    }
    out
}

/// One file per key (or per listed item, at its path and mode), as the kubelet's atomic writer
/// lays them out (without its `..data` indirection: the files do not change while the pod runs).
fn key_files(
    volume: &str,
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    files: &mut Vec<FilePlan>,
) -> Result<(), PlanError> {
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let field = format!("volume {volume}: item {}", item.key);
                let contents = data.get(&item.key).ok_or_else(|| {
                    source_error(
                        volume,
                        format!("couldn't find key {} in the source", item.key),
                    )
                })?;
                files.push(FilePlan {
                    path: dir.join(relative(&field, &item.path)?),
                    contents: contents.clone(),
                    mode: mode_bits(item.mode.or(default_mode)),
                });
            }
        }
        _ => {
            for (key, contents) in data {
                let field = format!("volume {volume}: key {key}");
                files.push(FilePlan {
                    path: dir.join(relative(&field, key)?),
                    contents: contents.clone(),
                    mode: mode_bits(default_mode),
                });
            }
        }
    }
    Ok(())
}

fn relative(field: &str, path: &str) -> Result<PathBuf, PlanError> {
    let p = Path::new(path);
    let ok = p
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)));
    if !ok || path.is_empty() {
        return Err(PlanError::BadPath {
            field: field.to_string(),
            path: path.to_string(),
            reason: "must be a relative path without ..",
        });
    }
    Ok(p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn volume(v: serde_json::Value) -> Volume {
        serde_json::from_value(v).unwrap()
    }

    fn objects() -> VolumeObjects {
        let mut o = VolumeObjects::default();
        o.config_maps.insert(
            "app-config".into(),
            serde_json::from_value(json!({"metadata": {"name": "app-config"},
                "data": {"greeting": "hello", "level": "3"}}))
            .unwrap(),
        );
        o.secrets.insert(
            "app-secret".into(),
            serde_json::from_value(json!({"metadata": {"name": "app-secret"},
                "data": {"password": "czNjcjN0"}}))
            .unwrap(),
        );
        o.claims.insert(
            "data".into(),
            BoundClaim {
                path: "/srv/pv/data".into(),
                block: false,
                device: None,
            },
        );
        o.claims.insert(
            "raw".into(),
            BoundClaim {
                path: "/dev/loop7".into(),
                block: true,
                device: Some((7, 7)),
            },
        );
        o
    }

    type Planned = (Option<ObjectVolume>, Vec<DirPlan>, Vec<FilePlan>);

    fn plan(v: &Volume) -> Result<Planned, PlanError> {
        let mut dirs = Vec::new();
        let mut files = Vec::new();
        let downward = |_: &str, f: &str| Ok(format!("value of {f}"));
        let objects = objects();
        let setup = VolumeSetup {
            volumes_dir: Path::new("/pods/u/volumes"),
            objects: &objects,
            owner: (107, 107),
            first_use: true,
        };
        let out = plan_object_volume(v, &setup, &mut dirs, &mut files, &downward)?;
        Ok((out, dirs, files))
    }

    #[test]
    fn config_maps_and_secrets_become_one_file_per_key() {
        let (src, _, files) = plan(&volume(
            json!({"name": "cfg", "configMap": {"name": "app-config"}}),
        ))
        .unwrap();
        let src = src.unwrap();
        assert_eq!(
            src.path,
            Path::new("/pods/u/volumes/kubernetes.io~configmap/cfg")
        );
        assert!(src.read_only);
        let names: Vec<_> = files
            .iter()
            .map(|f| f.path.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(names, ["greeting", "level"]);
        assert_eq!(files[0].contents, b"hello");
        assert_eq!(files[0].mode, 0o644);

        let (_, _, files) = plan(&volume(json!({"name": "sec",
            "secret": {"secretName": "app-secret", "defaultMode": 0o400}})))
        .unwrap();
        assert_eq!(
            files[0].path,
            Path::new("/pods/u/volumes/kubernetes.io~secret/sec/password")
        );
        assert_eq!(files[0].contents, b"s3cr3t");
        assert_eq!(files[0].mode, 0o400);
    }

    #[test]
    fn items_select_keys_and_a_missing_key_is_refused() {
        let (_, _, files) = plan(&volume(
            json!({"name": "cfg", "configMap": {"name": "app-config",
            "items": [{"key": "level", "path": "sub/level.txt", "mode": 0o600}]}}),
        ))
        .unwrap();
        assert_eq!(files.len(), 1);
        assert!(files[0].path.ends_with("cfg/sub/level.txt"));
        assert_eq!(files[0].mode, 0o600);
        let e = plan(&volume(
            json!({"name": "cfg", "configMap": {"name": "app-config",
            "items": [{"key": "nope", "path": "x"}]}}),
        ))
        .err()
        .unwrap();
        assert_eq!(e.label(), "volume_source");
        let e = plan(&volume(
            json!({"name": "cfg", "configMap": {"name": "app-config",
            "items": [{"key": "level", "path": "../x"}]}}),
        ))
        .err()
        .unwrap();
        assert_eq!(e.label(), "bad_path");
    }

    #[test]
    fn projected_sources_share_one_directory() {
        let (src, _, files) = plan(&volume(json!({"name": "all", "projected": {"sources": [
            {"configMap": {"name": "app-config", "items": [{"key": "greeting", "path": "greeting"}]}},
            {"secret": {"name": "app-secret"}},
            {"downwardAPI": {"items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]}}
        ]}})))
        .unwrap();
        assert!(src.unwrap().path.ends_with("kubernetes.io~projected/all"));
        let got: Vec<(String, Vec<u8>)> = files
            .iter()
            .map(|f| {
                (
                    f.path.file_name().unwrap().to_string_lossy().into_owned(),
                    f.contents.clone(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("greeting".to_string(), b"hello".to_vec()),
                ("password".to_string(), b"s3cr3t".to_vec()),
                ("name".to_string(), b"value of metadata.name".to_vec()),
            ]
        );
    }

    #[test]
    fn claims_mount_their_pv_path_owned_by_the_pod_user_and_block_ones_are_devices() {
        let (src, dirs, _) = plan(&volume(
            json!({"name": "disk", "persistentVolumeClaim": {"claimName": "data"}}),
        ))
        .unwrap();
        let src = src.unwrap();
        assert_eq!(src.path, Path::new("/srv/pv/data"));
        assert!(!src.read_only);
        assert_eq!(
            dirs,
            [DirPlan {
                path: "/srv/pv/data".into(),
                uid: 107,
                gid: 107,
                mode: 0o770
            }]
        );
        // A block claim mounted as a filesystem, a filesystem claim as a device: refused.
        let block = volume(json!({"name": "disk", "persistentVolumeClaim": {"claimName": "raw"}}));
        let e = plan(&block).err().unwrap();
        assert!(e.to_string().contains("Block mode"), "{e}");
        assert_eq!(device_of(&block, &objects()).unwrap(), (7, 7));
        let fs = volume(json!({"name": "disk", "persistentVolumeClaim": {"claimName": "data"}}));
        assert!(device_of(&fs, &objects()).is_err());
    }

    #[test]
    fn a_pv_without_a_node_local_source_is_refused() {
        let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "spec": {"volumeMode": "Block", "volumeName": "pv"}}))
        .unwrap();
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"}, "spec": {"local": {"path": "/dev/loop3"}}}))
        .unwrap();
        let b = bind("disk", &pvc, &pv).unwrap();
        assert!(b.block);
        assert_eq!(b.path, Path::new("/dev/loop3"));
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv"}, "spec": {"nfs": {"server": "s", "path": "/x"}}}))
        .unwrap();
        assert_eq!(bind("disk", &pvc, &pv).unwrap_err().label(), "unsupported");
    }
}
