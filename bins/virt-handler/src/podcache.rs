//! virt-handler's pod interface cache: the pod IPs each VMI interface had when its network was
//! set up, kept on disk (`<private dir>/network-info-cache/<VMI UID>/<interface>`, the layout
//! KubeVirt uses) so a restarted handler still reports them in `status.interfaces`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kvrs_decide::handler::facts::PodInterface;

/// The cache directory of one VMI.
fn dir(private_dir: &Path, uid: &str) -> Option<PathBuf> {
    // A UID is a path component: refuse anything that could leave the cache directory.
    let safe = !uid.is_empty() && uid != "." && uid != ".." && !uid.contains(['/', '\0']);
    safe.then(|| private_dir.join("network-info-cache").join(uid))
}

/// Every cached interface of the VMI `uid`, by interface name.
pub fn read(private_dir: &Path, uid: &str) -> BTreeMap<String, PodInterface> {
    let Some(dir) = dir(private_dir, uid) else {
        return BTreeMap::new();
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BTreeMap::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let bytes = std::fs::read(e.path()).ok()?;
            let iface: PodInterface = serde_json::from_slice(&bytes).ok()?;
            Some((name, iface))
        })
        .collect()
}

/// Stores the interface `name` of the VMI `uid`.
pub fn write(
    private_dir: &Path,
    uid: &str,
    name: &str,
    iface: &PodInterface,
) -> Result<(), String> {
    let dir = dir(private_dir, uid).ok_or_else(|| format!("VMI UID {uid:?} is not a path name"))?;
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        return Err(format!("interface name {name:?} is not a path name"));
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let json = serde_json::to_vec(iface).map_err(|e| e.to_string())?;
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, json).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Forgets the VMI `uid`.
pub fn remove(private_dir: &Path, uid: &str) {
    if let Some(dir) = dir(private_dir, uid) {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interfaces_survive_a_round_trip_and_bad_uids_are_refused() {
        let tmp = std::env::temp_dir().join(format!("kvrs-podcache-{}", std::process::id()));
        let iface = PodInterface {
            pod_ip: "10.244.0.7".into(),
            pod_ips: vec!["10.244.0.7".into()],
        };
        write(&tmp, "uid-1", "default", &iface).unwrap();
        assert_eq!(
            read(&tmp, "uid-1"),
            BTreeMap::from([("default".to_string(), iface.clone())])
        );
        assert!(write(&tmp, "../x", "default", &iface).is_err());
        assert!(write(&tmp, "uid-1", "../x", &iface).is_err());
        assert!(read(&tmp, "..").is_empty());
        remove(&tmp, "uid-1");
        assert!(read(&tmp, "uid-1").is_empty());
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
