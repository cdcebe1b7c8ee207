//! The causes of a rejection, each naming the field it is about.

use std::fmt;

/// The kind of problem, as Kubernetes' `metav1.CauseType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CauseKind {
    /// A value is not acceptable (`FieldValueInvalid`).
    Invalid,
    /// A required value is missing (`FieldValueRequired`).
    Required,
    /// A value is not supported (`FieldValueNotSupported`), e.g. a discontinued feature.
    NotSupported,
    /// A value appears twice where it must be unique (`FieldValueDuplicate`).
    Duplicate,
    /// The value is forbidden here (`FieldValueForbidden`).
    Forbidden,
    /// A list has more items than allowed (`FieldValueTooMany`).
    TooMany,
}

impl CauseKind {
    /// Kubernetes' name of the cause type.
    pub fn as_str(self) -> &'static str {
        match self {
            CauseKind::Invalid => "FieldValueInvalid",
            CauseKind::Required => "FieldValueRequired",
            CauseKind::NotSupported => "FieldValueNotSupported",
            CauseKind::Duplicate => "FieldValueDuplicate",
            CauseKind::Forbidden => "FieldValueForbidden",
            CauseKind::TooMany => "FieldValueTooMany",
        }
    }
}

/// One reason a VMI is rejected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// What kind of problem.
    pub kind: CauseKind,
    /// The field path, e.g. `spec.domain.devices.disks[0].disk.bus` (may be empty for
    /// object-wide causes).
    pub field: String,
    /// What is wrong, in words.
    pub message: String,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.field, self.message)
        }
    }
}

/// The VMI is not valid; `causes` says why (never empty).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ValidationError {
    /// Every problem found, in the order the checks ran.
    pub causes: Vec<Cause>,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, cause) in self.causes.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{cause}")?;
        }
        Ok(())
    }
}

/// Collects causes while the checks run.
#[derive(Default)]
pub(super) struct Causes(Vec<Cause>);

impl Causes {
    pub(super) fn invalid(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.push(CauseKind::Invalid, field, message);
    }

    pub(super) fn required(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.push(CauseKind::Required, field, message);
    }

    pub(super) fn push(
        &mut self,
        kind: CauseKind,
        field: impl Into<String>,
        message: impl Into<String>,
    ) {
        self.0.push(Cause {
            kind,
            field: field.into(),
            message: message.into(),
        });
    }

    pub(super) fn into_result(self) -> Result<(), ValidationError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(ValidationError { causes: self.0 })
        }
    }
}
