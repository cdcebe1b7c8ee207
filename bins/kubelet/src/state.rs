//! The runner's records of the pods it set up, one `record.json` in each pod's state dir: which
//! address slot the pod holds and which process is its container. After a restart they tell a
//! container that still runs (adopted) from one that is gone (the pod is marked Failed).

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::HostError;
use crate::plan::PodKey;

/// One pod's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod.
    pub key: PodKey,
    /// Its slot of the pod CIDR.
    pub slot: u32,
    /// The container's pid, once started.
    pub pid: Option<u32>,
    /// Its start time in clock ticks since boot ([`crate::host::start_ticks`]).
    pub start_ticks: Option<u64>,
    /// When it started (RFC 3339), for the status.
    pub started_at: Option<String>,
    /// The pod's other containers that were started (absent in records of older runners).
    #[serde(default)]
    pub sidecars: Vec<SidecarRecord>,
}

/// One sidecar container's process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SidecarRecord {
    /// The container's name.
    pub name: String,
    /// Its first process's pid.
    pub pid: u32,
    /// Its start time in clock ticks since boot.
    pub start_ticks: u64,
    /// When it started (RFC 3339).
    pub started_at: String,
}

impl PodRecord {
    /// Whether the recorded process still runs (same pid, same start time).
    pub fn process_alive(&self) -> bool {
        match (self.pid, self.start_ticks) {
            (Some(pid), Some(t)) => crate::host::start_ticks(pid) == Some(t),
            _ => false,
        }
    }
}

fn path(state_dir: &Path, uid: &str) -> PathBuf {
    state_dir.join("pods").join(uid).join("record.json")
}

/// Writes (replaces) the record.
pub fn save(state_dir: &Path, r: &PodRecord) -> Result<(), HostError> {
    let p = path(state_dir, &r.key.uid);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir).map_err(HostError::io(dir))?;
    }
    let tmp = p.with_extension("tmp");
    let json = serde_json::to_vec_pretty(r).map_err(|e| HostError::Io {
        path: p.clone(),
        source: e.into(),
    })?;
    fs::write(&tmp, json).map_err(HostError::io(&tmp))?;
    fs::rename(&tmp, &p).map_err(HostError::io(&p))
}

/// Every readable record under `state_dir` (unreadable ones are skipped with a warning: their
/// directories are still removed by the start-up sweep).
pub fn load_all(state_dir: &Path) -> Vec<PodRecord> {
    let Ok(entries) = fs::read_dir(state_dir.join("pods")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path().join("record.json");
        match fs::read(&p).map(|b| serde_json::from_slice::<PodRecord>(&b)) {
            Ok(Ok(r)) => out.push(r),
            Ok(Err(err)) => {
                tracing::warn!(record = %p.display(), error = %err, "unreadable pod record")
            }
            Err(_) => {}
        }
    }
    out
}

/// Pod state dirs (by UID) that exist under `state_dir`, with or without a record.
pub fn pod_uids(state_dir: &Path) -> Vec<String> {
    fs::read_dir(state_dir.join("pods"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect()
}
