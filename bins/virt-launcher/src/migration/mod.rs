//! Live migration, as KubeVirt v1.9.0's launcher does it: the source's libvirt migrates the
//! domain peer to peer to the target's libvirt, both through Unix sockets that virt-handler's
//! migration proxy connects across nodes.
//!
//! This module holds the plain decisions (options, flags, parameters, socket paths, the
//! metadata's bookkeeping); [`monitor`] decides what a running migration needs, and [`shell`]
//! talks to libvirt.

pub mod monitor;
pub mod shell;

use std::path::Path;

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::domain::MigrationMetadata;
use serde::Deserialize;

use crate::libvirt::{WireParam, WireValue};

/// `migrationproxy.LibvirtDirectMigrationPort`: the key suffix of QEMU's memory stream socket.
pub const DIRECT_MIGRATION_PORT: u16 = 49152;
/// `migrationproxy.LibvirtBlockMigrationPort`: the key suffix of the disks' (NBD) socket.
pub const BLOCK_MIGRATION_PORT: u16 = 49153;
/// QEMU's largest accepted max downtime (KubeVirt's `QEMUMaxMigrationDowntimeMS`).
pub const QEMU_MAX_DOWNTIME_MS: u64 = 2_000_000;

/// `virDomainMigrateFlags` bits KubeVirt uses.
pub mod flag {
    /// `VIR_MIGRATE_LIVE`.
    pub const LIVE: u32 = 1 << 0;
    /// `VIR_MIGRATE_PEER2PEER`.
    pub const PEER2PEER: u32 = 1 << 1;
    /// `VIR_MIGRATE_PERSIST_DEST`.
    pub const PERSIST_DEST: u32 = 1 << 3;
    /// `VIR_MIGRATE_PAUSED`.
    pub const PAUSED: u32 = 1 << 5;
    /// `VIR_MIGRATE_NON_SHARED_INC`.
    pub const NON_SHARED_INC: u32 = 1 << 7;
    /// `VIR_MIGRATE_UNSAFE`.
    pub const UNSAFE: u32 = 1 << 9;
    /// `VIR_MIGRATE_COMPRESSED`.
    pub const COMPRESSED: u32 = 1 << 11;
    /// `VIR_MIGRATE_AUTO_CONVERGE`.
    pub const AUTO_CONVERGE: u32 = 1 << 13;
    /// `VIR_MIGRATE_POSTCOPY`.
    pub const POSTCOPY: u32 = 1 << 15;
    /// `VIR_MIGRATE_PARALLEL`.
    pub const PARALLEL: u32 = 1 << 17;
}

/// virt-handler's `cmdclient.MigrationOptions` as its JSON arrives (Go field names, no tags).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, rename_all = "PascalCase")]
pub struct MigrationOptions {
    /// `resource.Quantity` per second; "0" is unlimited.
    pub bandwidth: Option<String>,
    /// Seconds without progress before an abort (0: never).
    pub progress_timeout: i64,
    /// Seconds per GiB of data to move before the migration is helped or aborted (0: never).
    #[serde(rename = "CompletionTimeoutPerGiB")]
    pub completion_timeout_per_gib: i64,
    /// The downtime QEMU may take when the stall detector asks for a soft stop-and-copy.
    pub max_downtime_ms: u64,
    /// `VIR_MIGRATE_UNSAFE`.
    pub unsafe_migration: bool,
    /// `VIR_MIGRATE_AUTO_CONVERGE`.
    pub allow_auto_converge: bool,
    /// `VIR_MIGRATE_POSTCOPY`, and switching to post-copy on a completion timeout.
    pub allow_post_copy: bool,
    /// Parallel connections (`VIR_MIGRATE_PARALLEL`) when set.
    pub parallel_migration_threads: Option<u32>,
    /// Pause the guest (or post-copy) rather than abort on a completion timeout.
    pub allow_workload_disruption: bool,
    /// The stall detector's settings (kvrs keeps KubeVirt's legacy convergence handling, see
    /// [`monitor`]); read so the JSON is accepted.
    pub stall_detector_options: Option<serde_json::Value>,
    /// `zstd` or `none`.
    pub compression: Option<String>,
}

/// Why a request cannot be acted on; each names the field at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MigrationError {
    /// The options JSON does not parse.
    #[error("migration options: {0}")]
    Options(String),
    /// `Bandwidth` is not a usable quantity.
    #[error("migration options: Bandwidth {0:?} is not a non-negative quantity")]
    Bandwidth(String),
    /// The handler has not recorded the migration on the VMI yet.
    #[error("cannot migrate VMI until migrationState is ready")]
    NoMigrationState,
    /// The VMI has no UID (the target's XML is rewritten with it).
    #[error("the VMI has no metadata.uid")]
    NoUid,
    /// This migration already ran.
    #[error(
        "migration job {uid} already executed, finished at {end}, failed: {failed}, abortStatus: {abort}"
    )]
    AlreadyExecuted {
        /// Migration UID.
        uid: String,
        /// When it ended.
        end: String,
        /// Whether it failed.
        failed: bool,
        /// Its abort status.
        abort: String,
    },
}

impl MigrationOptions {
    /// Parses virt-handler's JSON.
    pub fn parse(json: &[u8]) -> Result<MigrationOptions, MigrationError> {
        if json.iter().all(u8::is_ascii_whitespace) {
            return Ok(MigrationOptions::default());
        }
        serde_json::from_slice(json).map_err(|e| MigrationError::Options(e.to_string()))
    }

    /// The bandwidth in MiB/s as KubeVirt rounds it (below 1 MiB is 1, 0 is unlimited).
    pub fn bandwidth_mib(&self) -> Result<u64, MigrationError> {
        let Some(text) = self.bandwidth.as_deref().filter(|t| !t.is_empty()) else {
            return Ok(0);
        };
        let bytes = kvrs_api::Quantity::new(text)
            .value()
            .ok()
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| MigrationError::Bandwidth(text.to_string()))?;
        Ok(match bytes {
            0 => 0,
            1..1_048_576 => 1,
            // Rounded to the nearest MiB, as KubeVirt's float arithmetic does.
            b => (b + 524_288) / 1_048_576,
        })
    }

    /// The libvirt compression method, when compression is asked for and supported.
    pub fn compression_method(&self) -> Option<&'static str> {
        match self.compression.as_deref() {
            Some("zstd") => Some("zstd"),
            _ => None,
        }
    }
}

/// `generateMigrationFlags`: live, peer to peer, persistent on the target, plus what the
/// options and the VMI ask for.
pub fn migration_flags(block_migration: bool, paused: bool, o: &MigrationOptions) -> u32 {
    let mut f = flag::LIVE | flag::PEER2PEER | flag::PERSIST_DEST;
    for (on, bit) in [
        (block_migration, flag::NON_SHARED_INC),
        (o.unsafe_migration, flag::UNSAFE),
        (o.allow_auto_converge, flag::AUTO_CONVERGE),
        (o.allow_post_copy, flag::POSTCOPY),
        (paused, flag::PAUSED),
        (o.parallel_migration_threads.is_some(), flag::PARALLEL),
        (o.compression_method().is_some(), flag::COMPRESSED),
    ] {
        if on {
            f |= bit;
        }
    }
    f
}

/// `migrationproxy.SourceUnixFile`: `<share>/migrationproxy/<key>-source.sock`, the key being
/// the VMI UID, with `-<port>` for the data streams.
pub fn source_socket(share_dir: &Path, vmi_uid: &str, port: Option<u16>) -> std::path::PathBuf {
    let key = match port {
        Some(p) => format!("{vmi_uid}-{p}"),
        None => vmi_uid.to_string(),
    };
    share_dir
        .join("migrationproxy")
        .join(format!("{key}-source.sock"))
}

/// The destination libvirt's URI: the handler's proxy socket for the target's daemon.
pub fn destination_uri(share_dir: &Path, vmi_uid: &str, non_root: bool) -> String {
    format!(
        "qemu+unix:///{}?socket={}",
        if non_root { "session" } else { "system" },
        source_socket(share_dir, vmi_uid, None).display()
    )
}

/// `MigrationUID`: the source state's UID when there is one, else the state's.
pub fn migration_uid(vmi: &VirtualMachineInstance) -> Option<String> {
    let state = vmi.status.as_ref()?.migration_state.as_ref()?;
    match &state.source_state {
        Some(s) => s.migration_uid.clone(),
        None => state.migration_uid.clone(),
    }
}

/// `vmi.IsBlockMigration()`.
pub fn is_block_migration(vmi: &VirtualMachineInstance) -> bool {
    vmi.status.as_ref().is_some_and(|s| {
        s.migration_method.as_deref() == Some("BlockMigration")
            || s.migrated_volumes.as_ref().is_some_and(|v| !v.is_empty())
    })
}

/// The volumes libvirt copies (`getDiskTargetsForMigration`): every file or block disk that is
/// not a CD-ROM, not read-only unless generated (cloud-init, container disks, config maps...),
/// and not on shared storage (a PVC/DataVolume not being migrated, a shared host disk).
/// `disks`: (alias, device, type, target device, read-only) from the live domain.
pub fn disks_to_copy(vmi: &VirtualMachineInstance, disks: &[DiskFacts]) -> Vec<String> {
    let migrated: std::collections::BTreeSet<&str> = vmi
        .status
        .as_ref()
        .and_then(|s| s.migrated_volumes.as_ref())
        .map(|v| v.iter().map(|m| m.volume_name.as_str()).collect())
        .unwrap_or_default();
    let mut shared = std::collections::BTreeSet::new();
    let mut generated = std::collections::BTreeSet::new();
    for v in vmi.spec.volumes.iter().flatten() {
        let name = v.name.as_str();
        if v.persistent_volume_claim.is_some() || v.data_volume.is_some() {
            if !migrated.contains(name) {
                shared.insert(name);
            }
        } else if let Some(h) = &v.host_disk {
            if !migrated.contains(name) && h.shared == Some(true) {
                shared.insert(name);
            }
        } else if v.config_map.is_some()
            || v.secret.is_some()
            || v.downward_api.is_some()
            || v.service_account.is_some()
            || v.cloud_init_no_cloud.is_some()
            || v.cloud_init_config_drive.is_some()
            || v.container_disk.is_some()
        {
            generated.insert(name);
        }
    }
    disks
        .iter()
        .filter(|d| d.device != "cdrom")
        .filter(|d| !d.read_only || generated.contains(d.alias.as_str()))
        .filter(|d| (d.kind == "file" || d.kind == "block") && !shared.contains(d.alias.as_str()))
        .map(|d| d.target.clone())
        .collect()
}

/// What [`disks_to_copy`] needs of one domain disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskFacts {
    /// The alias without libvirt's `ua-` prefix: the VMI volume's name.
    pub alias: String,
    /// `disk`, `cdrom`, `lun`.
    pub device: String,
    /// `file`, `block`, `network`...
    pub kind: String,
    /// `vda`...
    pub target: String,
    /// `<readonly/>`.
    pub read_only: bool,
}

/// Everything `generateMigrationParams` decides besides the XML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamsInput<'a> {
    /// `/var/run/kubevirt`.
    pub share_dir: &'a Path,
    /// The VMI's UID.
    pub vmi_uid: &'a str,
    /// The target's domain name.
    pub dest_name: String,
    /// The migratable XML, rewritten for the target.
    pub xml: String,
    /// Disks to copy (their target devices).
    pub copy_disks: Vec<String>,
}

/// The typed parameters of `virDomainMigrateToURI3`, in KubeVirt's choice.
pub fn migration_params(
    input: &ParamsInput<'_>,
    o: &MigrationOptions,
) -> Result<Vec<WireParam>, MigrationError> {
    let s = |field: &str, v: String| WireParam {
        field: field.into(),
        value: WireValue::String(v),
    };
    let uri = |port| {
        format!(
            "unix://{}",
            source_socket(input.share_dir, input.vmi_uid, Some(port)).display()
        )
    };
    let mut p = vec![
        s("migrate_uri", uri(DIRECT_MIGRATION_PORT)),
        s("destination_xml", input.xml.clone()),
        s("persistent_xml", input.xml.clone()),
        s("destination_name", input.dest_name.clone()),
    ];
    let bandwidth = o.bandwidth_mib()?;
    if bandwidth > 0 {
        p.push(WireParam {
            field: "bandwidth".into(),
            value: WireValue::ULLong(bandwidth),
        });
    }
    if let Some(n) = o.parallel_migration_threads {
        p.push(WireParam {
            field: "parallel.connections".into(),
            value: WireValue::Int(i32::try_from(n).unwrap_or(i32::MAX)),
        });
    }
    if !input.copy_disks.is_empty() {
        for d in &input.copy_disks {
            p.push(s("migrate_disks", d.clone()));
        }
        p.push(s("disks_uri", uri(BLOCK_MIGRATION_PORT)));
        for d in &input.copy_disks {
            p.push(s("migrate_disks_detect_zeroes", d.clone()));
        }
    }
    if let Some(m) = o.compression_method() {
        p.push(s("compression", m.to_string()));
    }
    Ok(p)
}

/// The target's domain name (`generateDomainName`): the target state's namespace and name when
/// the handler set both, else the VMI's own.
pub fn destination_name(vmi: &VirtualMachineInstance) -> String {
    let target = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.target_state.as_ref());
    let pick = |v: Option<&String>| v.filter(|s| !s.is_empty()).cloned();
    match target.map(|t| {
        (
            pick(t.domain_namespace.as_ref()),
            pick(t.domain_name.as_ref()),
        )
    }) {
        Some((Some(ns), Some(name))) => format!("{ns}_{name}"),
        _ => format!(
            "{}_{}",
            vmi.metadata.namespace.as_deref().unwrap_or_default(),
            vmi.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// The XML for the target: the VMI's UID replaced by the target VMI's when the handler names a
/// different one (a decentralized migration), as KubeVirt does.
pub fn rewrite_for_target(xml: &str, vmi: &VirtualMachineInstance) -> String {
    let target_uid = vmi
        .status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.target_state.as_ref())
        .and_then(|t| t.virtual_machine_instance_uid.as_deref())
        .filter(|u| !u.is_empty());
    match (vmi.metadata.uid.as_deref(), target_uid) {
        (Some(uid), Some(target)) if !uid.is_empty() && uid != target => xml.replace(uid, target),
        _ => xml.to_string(),
    }
}

/// Data to move, in GB rounded up as Kubernetes' `ScaledValue(Giga)` does: the guest memory
/// (`memory.guest`, else the memory request) plus, for a block migration, the local disks.
pub fn data_size_gb(vmi: &VirtualMachineInstance, ephemeral_disk_bytes: u64) -> i64 {
    let d = &vmi.spec.domain;
    let memory = d
        .memory
        .as_ref()
        .and_then(|m| m.guest.as_ref())
        .or_else(|| {
            d.resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get("memory"))
        })
        .and_then(|q| q.value().ok())
        .unwrap_or(0);
    let mut bytes = u64::try_from(memory).unwrap_or(0);
    if vmi
        .status
        .as_ref()
        .is_some_and(|s| s.migration_method.as_deref() == Some("BlockMigration"))
    {
        bytes = bytes.saturating_add(ephemeral_disk_bytes);
    }
    i64::try_from(bytes.div_ceil(1_000_000_000)).unwrap_or(i64::MAX)
}

/// The metadata of a migration starting now (source or target).
pub fn started(uid: String, now: String) -> MigrationMetadata {
    MigrationMetadata {
        uid: Some(uid),
        start_timestamp: Some(now),
        mode: Some("PreCopy".into()),
        ..MigrationMetadata::default()
    }
}

/// `initializeMigrationMetadata`: `Ok(None)` when this migration is already running (nothing
/// to do), `Ok(Some(new))` to start it, an error when it already ran.
pub fn initialize(
    current: Option<&MigrationMetadata>,
    uid: &str,
    now: String,
) -> Result<Option<MigrationMetadata>, MigrationError> {
    if let Some(m) = current.filter(|m| m.uid.as_deref() == Some(uid)) {
        return match &m.end_timestamp {
            None => Ok(None),
            Some(end) => Err(MigrationError::AlreadyExecuted {
                uid: uid.to_string(),
                end: end.clone(),
                failed: m.failed,
                abort: m.abort_status.clone().unwrap_or_default(),
            }),
        };
    }
    Ok(Some(started(uid.to_string(), now)))
}

/// `setMigrationResult`: the end, and for a failure the reason as KubeVirt words it. A result
/// already recorded stays.
pub fn finish(m: &mut MigrationMetadata, failure: Option<&str>, now: String) {
    if m.end_timestamp.is_some() {
        return;
    }
    if let Some(reason) = failure {
        let squeezed = reason.split_whitespace().collect::<Vec<_>>().join(" ");
        let reason = if reason.contains("canceled by client") {
            "Live migration has been aborted".to_string()
        } else if squeezed
            .contains("has to be smaller or equal to the actual size of the containing file")
        {
            format!(
                "Volume migration cannot be performed because the destination volume is smaller than the source volume: {reason}"
            )
        } else {
            reason.to_string()
        };
        m.failed = true;
        m.failure_reason = Some(reason);
    }
    m.end_timestamp = Some(now);
}

/// Whether a cancel should start an abort (`cancelMigration`): only a running migration whose
/// abort is not already under way or done.
pub fn should_abort(m: &MigrationMetadata) -> bool {
    m.end_timestamp.is_none()
        && !m.failed
        && m.start_timestamp.is_some()
        && !matches!(m.abort_status.as_deref(), Some("Aborting" | "Succeeded"))
}

#[cfg(test)]
mod tests;
