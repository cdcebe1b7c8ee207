//! [`ConvertError`]: why a VMI cannot become a domain, naming the VMI field.

/// A conversion failure; `path` is the VMI field (JSON path) at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {reason}")]
pub struct ConvertError {
    /// Field path in the VMI, e.g. `spec.domain.devices.disks[1].disk.bus`.
    pub path: String,
    /// What is wrong.
    pub reason: String,
}

impl ConvertError {
    /// An error at `path`.
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> ConvertError {
        ConvertError {
            path: path.into(),
            reason: reason.into(),
        }
    }
}

impl From<kvrs_api::names::PathComponentError> for ConvertError {
    fn from(e: kvrs_api::names::PathComponentError) -> ConvertError {
        ConvertError {
            path: e.field,
            reason: e.reason,
        }
    }
}
