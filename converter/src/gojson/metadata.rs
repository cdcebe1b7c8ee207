//! `<metadata><kubevirt>` (`api.Metadata`, `api.KubeVirtMetadata` and its parts).
//!
//! Timestamps are `*metav1.Time` in Go: `null` or RFC 3339 text in UTC with whole seconds; the
//! model keeps the XML text (nanoseconds), normalised on output by `modes::time`.

use super::go_struct;
use crate::domain::{
    AccessCredentialMetadata, BackupMetadata, GracePeriodMetadata, KubeVirtMetadata,
    MemoryDumpMetadata, Metadata, MigrationMetadata,
};

go_struct!(Metadata {
    "KubeVirt" => kubevirt,
});

// `xmlns` is an XML detail Go keeps in the struct tag; the model's default already holds it.
go_struct!(KubeVirtMetadata {
    "UID" => uid,
    "GracePeriod" => graceperiod,
    "Migration" => migration,
    "Backup" => backup,
    "AccessCredential" => access_credential,
    "MemoryDump" => memory_dump,
});

go_struct!(GracePeriodMetadata {
    "DeletionGracePeriodSeconds" => deletion_grace_period_seconds,
    "DeletionTimestamp" => deletion_timestamp as time,
    "MarkedForGracefulShutdown" => marked_for_graceful_shutdown,
});

go_struct!(MigrationMetadata {
    "UID" => uid as omit,
    "StartTimestamp" => start_timestamp as time,
    "EndTimestamp" => end_timestamp as time,
    "Failed" => failed,
    "FailureReason" => failure_reason as omit,
    "AbortStatus" => abort_status as omit,
    "Mode" => mode as omit,
});

go_struct!(BackupMetadata {
    "Name" => name as omit,
    "Mode" => mode as omit,
    "SkipQuiesce" => skip_quiesce,
    "StartTimestamp" => start_timestamp as time,
    "EndTimestamp" => end_timestamp as time,
    "Completed" => completed,
    "Failed" => failed,
    "BackupMsg" => backup_msg as omit,
    "CheckpointName" => checkpoint_name as omit,
    "Volumes" => volumes as omit,
    "QuiesceStatus" => quiesce_status as omit,
});

go_struct!(AccessCredentialMetadata {
    "Succeeded" => succeeded,
    "Message" => message as omit,
});

go_struct!(MemoryDumpMetadata {
    "FileName" => file_name as omit,
    "StartTimestamp" => start_timestamp as time,
    "EndTimestamp" => end_timestamp as time,
    "Completed" => completed,
    "Failed" => failed,
    "FailureReason" => failure_reason as omit,
});
