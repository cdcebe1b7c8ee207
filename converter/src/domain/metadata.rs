//! `<metadata><kubevirt xmlns="http://kubevirt.io">`: KubeVirt's bookkeeping inside the domain.

use super::Str;
use kvrs_converter_xml_derive::XmlElement;
use serde::{Deserialize, Serialize};

/// KubeVirt's metadata namespace.
pub const KUBEVIRT_NAMESPACE: &str = "http://kubevirt.io";

fn is_false(b: &bool) -> bool {
    !*b
}

/// `<metadata>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct Metadata {
    /// KubeVirt's element.
    pub kubevirt: KubeVirtMetadata,
}

/// `<kubevirt xmlns="http://kubevirt.io">`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct KubeVirtMetadata {
    /// Always [`KUBEVIRT_NAMESPACE`].
    #[serde(rename = "@xmlns")]
    pub xmlns: Str,
    /// The VMI's UID (empty until the launcher fills it in).
    pub uid: String,
    /// Grace period bookkeeping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub graceperiod: Option<GracePeriodMetadata>,
    /// Migration bookkeeping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationMetadata>,
    /// Backup bookkeeping.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupMetadata>,
    /// Access-credential propagation result.
    #[serde(rename = "accessCredential", skip_serializing_if = "Option::is_none")]
    pub access_credential: Option<AccessCredentialMetadata>,
    /// Memory dump bookkeeping.
    #[serde(rename = "memoryDump", skip_serializing_if = "Option::is_none")]
    pub memory_dump: Option<MemoryDumpMetadata>,
}

impl Default for KubeVirtMetadata {
    fn default() -> Self {
        KubeVirtMetadata {
            xmlns: Str::Borrowed(KUBEVIRT_NAMESPACE),
            uid: String::new(),
            graceperiod: None,
            migration: None,
            backup: None,
            access_credential: None,
            memory_dump: None,
        }
    }
}

/// `<graceperiod>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct GracePeriodMetadata {
    /// Grace period in seconds (always written).
    #[serde(rename = "deletionGracePeriodSeconds")]
    pub deletion_grace_period_seconds: i64,
    /// When deletion started (RFC 3339).
    #[serde(rename = "deletionTimestamp", skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<String>,
    /// Whether a graceful shutdown was sent.
    #[serde(
        rename = "markedForGracefulShutdown",
        skip_serializing_if = "Option::is_none"
    )]
    pub marked_for_graceful_shutdown: Option<bool>,
}

/// `<migration>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MigrationMetadata {
    /// Migration UID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Start (RFC 3339).
    #[serde(rename = "startTimestamp", skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    /// End (RFC 3339).
    #[serde(rename = "endTimestamp", skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<String>,
    /// Failed.
    #[serde(skip_serializing_if = "is_false")]
    pub failed: bool,
    /// Why it failed.
    #[serde(rename = "failureReason", skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Abort status.
    #[serde(rename = "abortStatus", skip_serializing_if = "Option::is_none")]
    pub abort_status: Option<String>,
    /// Pre-copy / post-copy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// `<backup>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct BackupMetadata {
    /// Backup name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// Quiesce skipped.
    #[serde(rename = "skipQuiesce", skip_serializing_if = "is_false")]
    pub skip_quiesce: bool,
    /// Start.
    #[serde(rename = "startTimestamp", skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    /// End.
    #[serde(rename = "endTimestamp", skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<String>,
    /// Completed.
    #[serde(skip_serializing_if = "is_false")]
    pub completed: bool,
    /// Failed.
    #[serde(skip_serializing_if = "is_false")]
    pub failed: bool,
    /// Message.
    #[serde(rename = "backupMsg", skip_serializing_if = "Option::is_none")]
    pub backup_msg: Option<String>,
    /// Checkpoint.
    #[serde(rename = "checkpointName", skip_serializing_if = "Option::is_none")]
    pub checkpoint_name: Option<String>,
    /// Volumes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volumes: Option<String>,
    /// Quiesce status.
    #[serde(rename = "quiesceStatus", skip_serializing_if = "Option::is_none")]
    pub quiesce_status: Option<String>,
}

/// `<accessCredential>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct AccessCredentialMetadata {
    /// Succeeded.
    #[serde(skip_serializing_if = "is_false")]
    pub succeeded: bool,
    /// Message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `<memoryDump>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, XmlElement)]
#[serde(default)]
pub struct MemoryDumpMetadata {
    /// Target file.
    #[serde(rename = "fileName", skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Start.
    #[serde(rename = "startTimestamp", skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<String>,
    /// End.
    #[serde(rename = "endTimestamp", skip_serializing_if = "Option::is_none")]
    pub end_timestamp: Option<String>,
    /// Completed.
    #[serde(skip_serializing_if = "is_false")]
    pub completed: bool,
    /// Failed.
    #[serde(skip_serializing_if = "is_false")]
    pub failed: bool,
    /// Why.
    #[serde(rename = "failureReason", skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}
