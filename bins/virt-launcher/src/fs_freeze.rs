//! Freezing and thawing the guest's filesystems (`FreezeVirtualMachine`,
//! `UnfreezeVirtualMachine`), as KubeVirt v1.9.0's launcher does for snapshots and backups:
//! through libvirt's `virDomainFSFreeze` / `virDomainFSThaw` (the guest agent's
//! `guest-fsfreeze-freeze` / `-thaw` underneath), idempotent on the agent's reported state, and
//! with a safety thaw after the caller's timeout, so a caller that never comes back (a snapshot
//! controller that crashed) cannot leave the guest's disks frozen for good.
//!
//! The decisions ([`FreezeStatus`], [`swtpm_state_dir`]) are plain functions; the launcher's
//! service runs them against libvirt.

use std::path::PathBuf;
use std::time::Duration;

use kvrs_api::VirtualMachineInstance;

use crate::agent::parse_fs_freeze;

/// What the guest agent says about its filesystems (`guest-fsfreeze-status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreezeStatus {
    /// `frozen`: a freeze is a no-op (KubeVirt returns success without asking libvirt).
    Frozen,
    /// `thawed`: an unfreeze is a no-op (and must not re-run the guest's thaw hooks).
    Thawed,
}

impl FreezeStatus {
    /// The agent's answer to `guest-fsfreeze-status`, or `None` when it is not one of the two
    /// states (KubeVirt's freeze then fails; its unfreeze goes on and asks libvirt).
    pub fn parse(reply: &str) -> Option<Self> {
        match parse_fs_freeze(reply)?.status.as_str() {
            "frozen" => Some(FreezeStatus::Frozen),
            "thawed" => Some(FreezeStatus::Thawed),
            _ => None,
        }
    }
}

/// The raw agent command that asks for the freeze state.
pub const STATUS_COMMAND: &str = r#"{"execute":"guest-fsfreeze-status"}"#;

/// When the safety thaw runs after a freeze: `None` for a timeout of 0 (the caller thaws
/// itself). KubeVirt turns a negative timeout into an immediate safety thaw (Go's `time.After`
/// of a negative duration fires at once); kvrs does the same rather than refuse it here, since
/// virt-api already validated the grace period.
pub fn safety_thaw_after(unfreeze_timeout_seconds: i32) -> Option<Duration> {
    match unfreeze_timeout_seconds {
        0 => None,
        s => Some(Duration::from_secs(u64::try_from(s).unwrap_or(0))),
    }
}

/// The swtpm state directory to flush before a freeze, for a VMI with a persistent TPM: the
/// agent's freeze does not cover the TPM's backing files, so KubeVirt syncs them first. The
/// directory depends on whether the VMI runs as root (`status.runtimeUser` 0), as in KubeVirt.
pub fn swtpm_state_dir(vmi: &VirtualMachineInstance) -> Option<PathBuf> {
    let persistent = vmi
        .spec
        .domain
        .devices
        .tpm
        .as_ref()
        .and_then(|t| t.persistent)
        .unwrap_or(false);
    if !persistent {
        return None;
    }
    let non_root = vmi
        .status
        .as_ref()
        .and_then(|s| s.runtime_user)
        .is_some_and(|u| u != 0);
    Some(PathBuf::from(if non_root {
        "/var/run/kubevirt-private/libvirt/qemu/swtpm"
    } else {
        "/var/lib/libvirt/swtpm"
    }))
}

/// Flushes `dir` and the files directly in it to disk (what `sync DIR` does for the directory,
/// extended to the state files swtpm writes there, which live one level down).
pub fn sync_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for entry in walk(dir)? {
        std::fs::File::open(&entry)?.sync_all()?;
    }
    std::fs::File::open(dir)?.sync_all()
}

fn walk(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            out.extend(walk(&entry.path())?);
            out.push(entry.path());
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(json: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn the_agents_two_states_parse_and_anything_else_is_unknown() {
        assert_eq!(
            FreezeStatus::parse(r#"{"return":"frozen"}"#),
            Some(FreezeStatus::Frozen)
        );
        assert_eq!(
            FreezeStatus::parse(r#"{"return":"thawed"}"#),
            Some(FreezeStatus::Thawed)
        );
        assert_eq!(FreezeStatus::parse(r#"{"return":"melting"}"#), None);
        assert_eq!(FreezeStatus::parse(r#"{"error":{"class":"x"}}"#), None);
        assert_eq!(FreezeStatus::parse("not json"), None);
    }

    #[test]
    fn a_zero_timeout_leaves_the_thaw_to_the_caller_and_a_negative_one_thaws_at_once() {
        assert_eq!(safety_thaw_after(0), None);
        assert_eq!(safety_thaw_after(300), Some(Duration::from_secs(300)));
        assert_eq!(safety_thaw_after(-5), Some(Duration::ZERO));
    }

    #[test]
    fn only_a_persistent_tpm_is_flushed_and_its_directory_follows_the_runtime_user() {
        let spec = |tpm: serde_json::Value| serde_json::json!({"spec": {"domain": {"devices": {"tpm": tpm}}}});
        assert_eq!(
            swtpm_state_dir(&vmi(
                serde_json::json!({"spec": {"domain": {"devices": {}}}})
            )),
            None
        );
        assert_eq!(swtpm_state_dir(&vmi(spec(serde_json::json!({})))), None);
        assert_eq!(
            swtpm_state_dir(&vmi(spec(serde_json::json!({"persistent": false})))),
            None
        );
        assert_eq!(
            swtpm_state_dir(&vmi(spec(serde_json::json!({"persistent": true})))),
            Some(PathBuf::from("/var/lib/libvirt/swtpm"))
        );
        let mut non_root = spec(serde_json::json!({"persistent": true}));
        non_root["status"] = serde_json::json!({"runtimeUser": 107});
        assert_eq!(
            swtpm_state_dir(&vmi(non_root)),
            Some(PathBuf::from(
                "/var/run/kubevirt-private/libvirt/qemu/swtpm"
            ))
        );
    }

    #[test]
    fn a_state_directory_syncs_with_its_nested_files_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("uuid/tpm2")).unwrap();
        std::fs::write(dir.path().join("uuid/tpm2/tpm2-00.permall"), b"state").unwrap();
        sync_dir(dir.path()).expect("synced");
        assert!(sync_dir(&dir.path().join("absent")).is_err());
    }
}
