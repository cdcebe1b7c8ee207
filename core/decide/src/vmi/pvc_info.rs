//! `status.volumeStatus[].persistentVolumeClaimInfo`, as KubeVirt's VMI controller writes it for
//! every PVC, DataVolume and memory-dump volume whose claim is in its cache: the claim's access
//! modes, volume mode, capacity and requests, whether CDI preallocated it, and the file-system
//! overhead. virt-handler reads it to size a filesystem PVC's `disk.img` and to decide whether
//! the VMI is live-migratable (a ReadWriteMany claim); the launcher pod's block devices come from
//! the same claims.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::{Map, Value, json};

/// CDI's default file-system overhead, which KubeVirt records when no CDI is installed (kvrs
/// runs no CDI, so this is always the value).
pub const DEFAULT_FS_OVERHEAD: &str = "0.055";

/// CDI's annotation marking a preallocated claim.
const PREALLOCATION_ANNOTATION: &str = "cdi.kubevirt.io/storage.preallocation";

/// The claim a volume (as the VMI spec's JSON) stands on: a PVC's claim, a DataVolume's name
/// (its PVC has the same name) or a memory dump's claim.
fn claim_name(volume: &Value) -> Option<&str> {
    volume
        .pointer("/persistentVolumeClaim/claimName")
        .or_else(|| volume.pointer("/dataVolume/name"))
        .or_else(|| volume.pointer("/memoryDump/claimName"))
        .and_then(Value::as_str)
}

/// The info of `pvc`, in KubeVirt's JSON (empty fields left out, as Go's `omitempty` does).
pub fn info_of(pvc: &PersistentVolumeClaim) -> Value {
    let mut m = Map::new();
    let name = pvc.metadata.name.clone().unwrap_or_default();
    if !name.is_empty() {
        m.insert("claimName".into(), json!(name));
    }
    let spec = pvc.spec.as_ref();
    if let Some(modes) = spec
        .and_then(|s| s.access_modes.as_ref())
        .filter(|m| !m.is_empty())
    {
        m.insert("accessModes".into(), json!(modes));
    }
    if let Some(mode) = spec.and_then(|s| s.volume_mode.as_ref()) {
        m.insert("volumeMode".into(), json!(mode));
    }
    if let Some(cap) = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .filter(|c| !c.is_empty())
    {
        m.insert("capacity".into(), json!(cap));
    }
    if let Some(req) = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .filter(|r| !r.is_empty())
    {
        m.insert("requests".into(), json!(req));
    }
    let preallocated = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PREALLOCATION_ANNOTATION))
        .is_some_and(|v| v == "true");
    if preallocated {
        m.insert("preallocated".into(), json!(true));
    }
    m.insert("filesystemOverhead".into(), json!(DEFAULT_FS_OVERHEAD));
    Value::Object(m)
}

/// Sets the info on each volume status entry of `v` (the VMI's status view) whose volume's claim
/// is among `pvcs` (the VMI's namespace); entries of claims not found are left as they are, as
/// KubeVirt leaves them.
pub fn fill(v: &mut Value, pvcs: &[PersistentVolumeClaim]) {
    if pvcs.is_empty() {
        return;
    }
    let claims: Vec<(String, String)> = v
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|vol| {
            let name = vol.get("name")?.as_str()?;
            Some((name.to_string(), claim_name(vol)?.to_string()))
        })
        .collect();
    let Some(list) = v
        .pointer_mut("/status/volumeStatus")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for entry in list {
        let Some((_, claim)) = claims.iter().find(|(n, _)| entry["name"] == n.as_str()) else {
            continue;
        };
        if let Some(pvc) = pvcs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(claim.as_str()))
        {
            entry["persistentVolumeClaimInfo"] = info_of(pvc);
        }
    }
}

/// What the launcher pod's renderer needs of each claim (by claim name): block mode becomes a
/// `volumeDevices` entry instead of a mount, ReadWriteMany a shared path.
pub fn pod_claims(
    pvcs: &[PersistentVolumeClaim],
) -> std::collections::BTreeMap<String, kvrs_pod::PvcInfo> {
    pvcs.iter()
        .filter_map(|p| {
            let spec = p.spec.as_ref();
            let info = kvrs_pod::PvcInfo {
                block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
                shared: spec
                    .and_then(|s| s.access_modes.as_ref())
                    .is_some_and(|m| m.iter().any(|m| m == "ReadWriteMany")),
                uid: p.metadata.uid.clone(),
            };
            Some((p.metadata.name.clone()?, info))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pvc(mode: &str, access: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "disk-claim", "namespace": "ns"},
            "spec": {"accessModes": [access], "volumeMode": mode,
                     "resources": {"requests": {"storage": "1Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "2Gi"}}
        }))
        .unwrap()
    }

    #[test]
    fn claims_of_pvc_and_datavolume_volumes_get_their_info() {
        let mut v = json!({
            "spec": {"volumes": [
                {"name": "root", "persistentVolumeClaim": {"claimName": "disk-claim"}},
                {"name": "dv", "dataVolume": {"name": "other"}},
                {"name": "cd", "containerDisk": {"image": "x"}}]},
            "status": {"volumeStatus": [
                {"name": "cd", "target": ""},
                {"name": "dv", "target": ""},
                {"name": "root", "target": ""}]}
        });
        fill(&mut v, &[pvc("Filesystem", "ReadWriteOnce")]);
        assert_eq!(
            v["status"]["volumeStatus"][2]["persistentVolumeClaimInfo"],
            json!({"claimName": "disk-claim", "accessModes": ["ReadWriteOnce"],
                   "volumeMode": "Filesystem", "capacity": {"storage": "2Gi"},
                   "requests": {"storage": "1Gi"}, "filesystemOverhead": "0.055"})
        );
        // No claim named `other`, no info; a container disk never has one.
        assert!(v["status"]["volumeStatus"][1]["persistentVolumeClaimInfo"].is_null());
        assert!(v["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"].is_null());
    }

    #[test]
    fn the_info_is_refreshed_from_the_claim() {
        let mut v = json!({
            "spec": {"volumes": [{"name": "root",
                "persistentVolumeClaim": {"claimName": "disk-claim"}}]},
            "status": {"volumeStatus": [{"name": "root", "target": "vda",
                "persistentVolumeClaimInfo": {"claimName": "disk-claim",
                    "accessModes": ["ReadWriteOnce"]}}]}
        });
        fill(&mut v, &[pvc("Block", "ReadWriteMany")]);
        let info = &v["status"]["volumeStatus"][0]["persistentVolumeClaimInfo"];
        assert_eq!(info["accessModes"], json!(["ReadWriteMany"]));
        assert_eq!(info["volumeMode"], json!("Block"));
        assert_eq!(v["status"]["volumeStatus"][0]["target"], json!("vda"));
    }

    /// The JSON is KubeVirt's type: what virt-handler (LiveMigratable) and the launcher
    /// (disk.img sizing) read back.
    #[test]
    fn the_info_reads_back_as_kubevirts_type() {
        let info: crate::api::PersistentVolumeClaimInfo =
            serde_json::from_value(info_of(&pvc("Filesystem", "ReadWriteMany"))).unwrap();
        assert_eq!(info.access_modes, Some(vec!["ReadWriteMany".to_string()]));
        assert_eq!(
            info.filesystem_overhead.as_deref(),
            Some(DEFAULT_FS_OVERHEAD)
        );
        assert_eq!(
            info.capacity.unwrap()["storage"].value().unwrap(),
            2 * 1024 * 1024 * 1024
        );
        assert!(
            info.extra.is_empty(),
            "every field is known: {:?}",
            info.extra
        );
    }

    #[test]
    fn block_and_shared_claims_reach_the_pod_renderer() {
        let claims = pod_claims(&[pvc("Block", "ReadWriteMany")]);
        let info = &claims["disk-claim"];
        assert!(info.block && info.shared);
        let claims = pod_claims(&[pvc("Filesystem", "ReadWriteOnce")]);
        assert!(!claims["disk-claim"].block && !claims["disk-claim"].shared);
    }
}
