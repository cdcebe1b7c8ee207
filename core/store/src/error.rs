//! Why the store refused a request; each variant maps to one Kubernetes `Status` reason.

use crate::names::{FieldCause, go_quote};

/// One cause as kube-apiserver writes it, several in brackets (`ToAggregate`).
fn causes_text(causes: &[FieldCause]) -> String {
    match causes {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Why the store refused a request.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The object is not there (404 NotFound).
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// Resource (`pods`, `virtualmachines.kubevirt.io`).
        resource: String,
        /// Object key (`namespace/name` or `name`).
        name: String,
    },
    /// Create of a name that is taken (409 AlreadyExists).
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// Resource.
        resource: String,
        /// Object key.
        name: String,
    },
    /// A resourceVersion or UID precondition failed, or the object changed since it was read
    /// (409 Conflict).
    #[error("operation cannot be fulfilled on {resource} {name:?}: {reason}")]
    Conflict {
        /// Resource.
        resource: String,
        /// Object key.
        name: String,
        /// What did not match.
        reason: String,
    },
    /// The object or patch is not acceptable: a JSON-patch `test` failed, a patch path is
    /// malformed, admission refused it (422 Invalid).
    #[error("{resource} {name:?} is invalid: {reason}")]
    Invalid {
        /// Resource.
        resource: String,
        /// Object key.
        name: String,
        /// Why.
        reason: String,
    },
    /// The request is malformed: a name missing, a body of the wrong shape (400 BadRequest).
    #[error("{0}")]
    BadRequest(String),
    /// Fields kube-apiserver's validation refuses, an invalid name or a changed UID
    /// (422 Invalid, with the causes).
    #[error("{kind} {} is invalid: {}", go_quote(name), causes_text(causes))]
    FieldInvalid {
        /// The kind qualified by its group (`Pod`, `VirtualMachine.kubevirt.io`).
        kind: String,
        /// The object's name (not its key).
        name: String,
        /// What is wrong.
        causes: Vec<FieldCause>,
    },
    /// A selector does not parse (400 BadRequest).
    #[error("unable to parse requirement: {0}")]
    BadSelector(String),
    /// The resourceVersion a watch starts from is older than the kept history (410 Gone).
    #[error("too old resource version: {requested} ({oldest})")]
    Expired {
        /// The resourceVersion asked for.
        requested: u64,
        /// The oldest resourceVersion a watch can start from.
        oldest: u64,
    },
}

impl StoreError {
    /// A stable name of the variant, for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "not_found",
            StoreError::AlreadyExists { .. } => "already_exists",
            StoreError::Conflict { .. } => "conflict",
            StoreError::Invalid { .. } => "invalid",
            StoreError::FieldInvalid { .. } => "field_invalid",
            StoreError::BadRequest(_) => "bad_request",
            StoreError::BadSelector(_) => "bad_selector",
            StoreError::Expired { .. } => "expired",
        }
    }

    /// The HTTP status code the API server answers with.
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound { .. } => 404,
            StoreError::AlreadyExists { .. } | StoreError::Conflict { .. } => 409,
            StoreError::Invalid { .. } | StoreError::FieldInvalid { .. } => 422,
            StoreError::BadRequest(_) | StoreError::BadSelector(_) => 400,
            StoreError::Expired { .. } => 410,
        }
    }

    /// The Kubernetes `Status.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "NotFound",
            StoreError::AlreadyExists { .. } => "AlreadyExists",
            StoreError::Conflict { .. } => "Conflict",
            StoreError::Invalid { .. } | StoreError::FieldInvalid { .. } => "Invalid",
            StoreError::BadRequest(_) | StoreError::BadSelector(_) => "BadRequest",
            StoreError::Expired { .. } => "Expired",
        }
    }

    /// The object key the error is about, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            StoreError::NotFound { name, .. }
            | StoreError::AlreadyExists { name, .. }
            | StoreError::Conflict { name, .. }
            | StoreError::Invalid { name, .. }
            | StoreError::FieldInvalid { name, .. } => Some(name),
            _ => None,
        }
    }
}
