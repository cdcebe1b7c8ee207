//! The runner's errors. Each has a stable [`label`](PlanError::label) for logs and metrics;
//! a pod that cannot be planned or started becomes `Failed` with the error's text as message.

use std::path::PathBuf;

/// A bad configuration value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The pod CIDR does not parse or leaves no room.
    #[error("pod CIDR {value:?}: {reason}")]
    PodCidr {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A map file line is not `key=value`.
    #[error("line {line}: expected REFERENCE=PATH, got {text:?}")]
    MapLine {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// An `--image-entrypoint` value that is not `REFERENCE=/PATH [ARG...]`.
    #[error("image entrypoint {value:?}: {reason}")]
    Entrypoint {
        /// The value given.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl ConfigError {
    /// A stable name of the variant.
    pub fn label(&self) -> &'static str {
        match self {
            Self::PodCidr { .. } => "pod_cidr",
            Self::MapLine { .. } => "map_line",
            Self::Entrypoint { .. } => "entrypoint",
        }
    }
}

/// Why a pod cannot run on this node: found while planning, before anything is set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The Pod lacks a field the runner needs.
    #[error("pod has no {field}")]
    Missing {
        /// The field path, e.g. `metadata.uid`.
        field: &'static str,
    },
    /// The pod's UID cannot name a directory.
    #[error(transparent)]
    BadUid(#[from] kvrs_ipc::layout::BadPodUid),
    /// No container to run (neither `compute` nor any other).
    #[error("pod has no container to run")]
    NoContainer,
    /// An image volume whose reference is not in the image map.
    #[error("volume {volume}: image {reference} is not in {where_}")]
    UnknownImage {
        /// The volume name.
        volume: String,
        /// The image reference.
        reference: String,
        /// Where it was looked for, e.g. `--images DIR (looked for DIR/x)`.
        where_: String,
    },
    /// A container image (of a container without `command`) that is not in the image map.
    #[error("container {container}: image {reference} is not in {where_}")]
    UnknownContainerImage {
        /// The container name.
        container: String,
        /// The image reference.
        reference: String,
        /// Where it was looked for.
        where_: String,
    },
    /// A container without `command` whose image has no entrypoint configured.
    #[error(
        "container {container}: no command, and image {reference} has no entrypoint in the image map (--image-entrypoint)"
    )]
    NoEntrypoint {
        /// The container name.
        container: String,
        /// The image reference.
        reference: String,
    },
    /// A container command that is not in the binary map.
    #[error("container {container}: command {command} is not in the binary map")]
    UnknownBinary {
        /// The container name.
        container: String,
        /// The command path.
        command: String,
    },
    /// A volumeMount naming no volume of the pod.
    #[error("container {container}: volumeMount {mount} names no volume of the pod")]
    NoSuchVolume {
        /// The container name.
        container: String,
        /// The mount's volume name.
        mount: String,
    },
    /// Something the runner deliberately does not do.
    #[error("{what} is not supported by the kvrs pod runner")]
    Unsupported {
        /// What, with its field path, e.g. `volume data: persistentVolumeClaim`.
        what: String,
    },
    /// A name or image reference that would become a path, and is not what the real
    /// components accept (a namespace `../x`, a volume `..`, an image `..`).
    #[error("{field}: invalid value {value:?}: {reason}")]
    Invalid {
        /// The field path, e.g. `metadata.namespace`.
        field: String,
        /// The value.
        value: String,
        /// Why.
        reason: &'static str,
    },
    /// A volume whose source object is missing or unusable: the kubelet's `FailedMount`.
    #[error("MountVolume.SetUp failed for volume \"{volume}\" : {reason}")]
    VolumeSource {
        /// The volume name.
        volume: String,
        /// Why, e.g. `configmap "x" not found`.
        reason: String,
    },
    /// A path field that is not absolute or escapes its directory.
    #[error("{field}: {path:?} {reason}")]
    BadPath {
        /// The field path.
        field: String,
        /// The value.
        path: String,
        /// Why it is rejected.
        reason: &'static str,
    },
}

impl PlanError {
    /// A stable name of the variant.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Missing { .. } => "missing_field",
            Self::BadUid(_) => "bad_uid",
            Self::NoContainer => "no_container",
            Self::UnknownImage { .. } => "unknown_image",
            Self::UnknownContainerImage { .. } => "unknown_container_image",
            Self::NoEntrypoint { .. } => "no_entrypoint",
            Self::UnknownBinary { .. } => "unknown_binary",
            Self::NoSuchVolume { .. } => "no_such_volume",
            Self::Unsupported { .. } => "unsupported",
            Self::BadPath { .. } => "bad_path",
            Self::Invalid { .. } => "invalid",
            Self::VolumeSource { .. } => "volume_source",
        }
    }

    /// The pod status `reason` a kubelet would give: image errors look like a failed pull so
    /// virt-controller reports them on the VMI as it does for a real pull error.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::UnknownImage { .. } | Self::UnknownContainerImage { .. } => "ErrImagePull",
            _ => "CreateContainerConfigError",
        }
    }
}

/// A failure setting up, running or tearing down a pod on this machine.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// A command (`ip`, `sysctl`) failed.
    #[error("{command}: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed (or why it did not start).
        stderr: String,
    },
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The address range is full.
    #[error("no free address left in pod CIDR {0}")]
    CidrExhausted(String),
}

impl HostError {
    /// A stable name of the variant.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Command { .. } => "command",
            Self::Io { .. } => "io",
            Self::CidrExhausted(_) => "cidr_exhausted",
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}

/// Why [`crate::Kubelet::run`] stopped before its shutdown future resolved.
#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    /// An API call the runner cannot go on without (Node registration) failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The state directory cannot be used.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The OCI runtime cannot run or lacks the November 2025 runc fixes.
    #[error(transparent)]
    Runtime(#[from] crate::runc::RuntimeError),
}

impl KubeletError {
    /// A stable name of the variant.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Api { .. } => "api",
            Self::Host(e) => e.label(),
            Self::Runtime(e) => e.label(),
        }
    }
}
