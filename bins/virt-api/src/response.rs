//! The answers KubeVirt's webhooks give, built once here: a refusal with causes (KubeVirt's
//! `ToAdmissionResponse`: 422 `Invalid`, the first ten causes joined by `, ` as the message), a
//! refusal for input the webhook cannot read (`ToAdmissionResponseError`: 400), and the JSON
//! patch from the object as sent to the object as admitted.

use kvrs_admission::validate::{Cause, ValidationError};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::review::{Status, StatusCause, StatusDetails, Verdict};

/// KubeVirt names at most this many causes in a refusal, then how many more there were.
pub const MAX_CAUSES: usize = 10;

/// A cause as Kubernetes writes it.
pub fn cause(kind: &str, message: impl Into<String>, field: impl Into<String>) -> StatusCause {
    StatusCause {
        kind: kind.to_string(),
        message: message.into(),
        field: field.into(),
    }
}

/// kvrs-admission's causes as Kubernetes' `StatusCause`s.
pub fn causes_of(err: &ValidationError) -> Vec<StatusCause> {
    err.causes.iter().map(status_cause).collect()
}

/// One kvrs-admission cause as a `StatusCause`.
pub fn status_cause(c: &Cause) -> StatusCause {
    cause(c.kind.as_str(), c.message.clone(), c.field.clone())
}

/// Refused for `causes` (none means allowed), as KubeVirt's `ToAdmissionResponse` words it.
pub fn denied(mut causes: Vec<StatusCause>) -> Verdict {
    if causes.is_empty() {
        return Verdict::allow();
    }
    let more = causes.len().saturating_sub(MAX_CAUSES);
    causes.truncate(MAX_CAUSES);
    let mut message = causes
        .iter()
        .map(|c| c.message.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    if more > 0 {
        message.push_str(&format!(", and {more} more validation errors"));
    }
    Verdict::deny(Status {
        message,
        reason: "Invalid".into(),
        details: Some(StatusDetails { causes }),
        code: 422,
    })
}

/// Refused because the request cannot be read as the webhook needs it (400), as KubeVirt's
/// `ToAdmissionResponseError`.
pub fn bad_request(message: impl Into<String>) -> Verdict {
    Verdict::deny(Status {
        message: message.into(),
        reason: String::new(),
        details: None,
        code: 400,
    })
}

/// Reads `object` (the request's `object` or `oldObject`, named `what`) as `T`; a refusal
/// naming the field otherwise.
pub fn read_object<T: DeserializeOwned>(what: &str, object: Option<&Value>) -> Result<T, Verdict> {
    let Some(object) = object else {
        return Err(bad_request(format!("the request has no {what}")));
    };
    serde_path_to_error::deserialize(object).map_err(|e| {
        let path = e.path().to_string();
        bad_request(if path == "." {
            format!("{what}: {}", e.inner())
        } else {
            format!("{what}.{path}: {}", e.inner())
        })
    })
}

/// The JSON patch that turns `original` into `admitted` in the top-level members `keys` only
/// (KubeVirt's webhooks replace `/spec`, `/metadata`, `/status` and nothing else), as the
/// smallest set of operations `json_patch::diff` finds.
pub fn patch_between(original: &Value, admitted: &Value, keys: &[&str]) -> json_patch::Patch {
    let mut target = original.clone();
    if let (Some(out), Some(from)) = (target.as_object_mut(), admitted.as_object()) {
        for key in keys {
            match from.get(*key) {
                Some(v) => {
                    out.insert((*key).to_string(), v.clone());
                }
                None => {
                    out.shift_remove(*key);
                }
            }
        }
    }
    json_patch::diff(original, &target)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_refusal_names_ten_causes_and_counts_the_rest() {
        let causes: Vec<StatusCause> = (0..12)
            .map(|i| cause("FieldValueInvalid", format!("m{i}"), format!("f{i}")))
            .collect();
        let v = denied(causes);
        assert!(!v.allowed);
        let status = v.status.unwrap();
        assert_eq!(status.code, 422);
        assert_eq!(status.reason, "Invalid");
        assert_eq!(
            status.message,
            "m0, m1, m2, m3, m4, m5, m6, m7, m8, m9, and 2 more validation errors"
        );
        assert_eq!(status.details.unwrap().causes.len(), 10);
        assert!(denied(Vec::new()).allowed);
    }

    #[test]
    fn an_unreadable_object_is_refused_naming_the_field() {
        let obj = json!({"spec": {"domain": {"cpu": {"cores": "two"}}}});
        let err =
            read_object::<kvrs_api::VirtualMachineInstance>("object", Some(&obj)).unwrap_err();
        assert_eq!(err.status.as_ref().unwrap().code, 400);
        assert!(
            err.message().starts_with("object.spec.domain.cpu.cores: "),
            "{}",
            err.message()
        );
        let none = read_object::<Value>("oldObject", None).unwrap_err();
        assert_eq!(none.message(), "the request has no oldObject");
    }

    #[test]
    fn the_patch_touches_only_the_named_members() {
        let original = json!({"apiVersion": "v1", "kind": "X", "spec": {"a": 1}, "extra": 1});
        let admitted = json!({"apiVersion": "v2", "spec": {"a": 1, "b": 2}, "status": {"p": 1}});
        let patch = patch_between(&original, &admitted, &["spec", "metadata", "status"]);
        let mut patched = original.clone();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(
            patched,
            json!({"apiVersion": "v1", "kind": "X", "spec": {"a": 1, "b": 2}, "extra": 1,
                "status": {"p": 1}})
        );
    }
}
