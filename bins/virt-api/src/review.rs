//! `admission.k8s.io/v1` AdmissionReview, the one message the API server sends a webhook and
//! the one it expects back: the request is read with every field the webhooks look at (the
//! objects stay JSON until a webhook reads them as its kind), the response is written as
//! KubeVirt's virt-api writes it.
//!
//! A body that is not an AdmissionReview is a [`DecodeError`] naming the field (the server
//! answers 400 with it); an object that does not read as its kind is the webhook's business
//! ([`crate::response::read_object`]: an AdmissionReview refusal naming the field).

use std::collections::BTreeMap;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The only AdmissionReview version the webhook configurations ask for.
pub const API_VERSION: &str = "admission.k8s.io/v1";

/// An AdmissionReview as the API server sends it.
#[derive(Clone, Debug, Deserialize)]
pub struct AdmissionReview {
    /// `admission.k8s.io/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// `AdmissionReview`.
    pub kind: String,
    /// What is asked (absent only in a malformed review).
    pub request: Option<AdmissionRequest>,
}

/// `group`/`version`/`resource` of the request.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct GroupVersionResource {
    /// API group (`kubevirt.io`, `""` for core).
    #[serde(default)]
    pub group: String,
    /// Version (`v1`).
    #[serde(default)]
    pub version: String,
    /// Plural resource (`virtualmachineinstances`).
    #[serde(default)]
    pub resource: String,
}

/// Who sent the request, as the API server authenticated them.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct UserInfo {
    /// `system:serviceaccount:NS:NAME` for a service account.
    #[serde(default)]
    pub username: String,
    /// The user's groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Extra attributes (`authentication.kubernetes.io/node-name` for a node-bound token).
    #[serde(default)]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Operation {
    /// `CREATE`.
    #[serde(rename = "CREATE")]
    Create,
    /// `UPDATE`.
    #[serde(rename = "UPDATE")]
    Update,
    /// `DELETE`.
    #[serde(rename = "DELETE")]
    Delete,
    /// `CONNECT`.
    #[serde(rename = "CONNECT")]
    Connect,
}

/// `AdmissionRequest`: the fields the webhooks read.
#[derive(Clone, Debug, Deserialize)]
pub struct AdmissionRequest {
    /// Echoed in the response.
    pub uid: String,
    /// The resource the request is about.
    #[serde(default)]
    pub resource: GroupVersionResource,
    /// `status`, `scale`, ... when a subresource is written.
    #[serde(rename = "subResource", default)]
    pub sub_resource: Option<String>,
    /// The object's name (may be empty on CREATE with `generateName`).
    #[serde(default)]
    pub name: Option<String>,
    /// The request's namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// CREATE, UPDATE, DELETE or CONNECT.
    pub operation: Operation,
    /// Who asks.
    #[serde(rename = "userInfo", default)]
    pub user_info: UserInfo,
    /// The object as it would be stored (CREATE, UPDATE).
    #[serde(default)]
    pub object: Option<Value>,
    /// The stored object (UPDATE, DELETE).
    #[serde(rename = "oldObject", default)]
    pub old_object: Option<Value>,
    /// A dry run: nothing the webhook does may outlive the request.
    #[serde(rename = "dryRun", default)]
    pub dry_run: Option<bool>,
}

impl AdmissionRequest {
    /// Whether the request is about `group`/`resource` in one of KubeVirt's webhook versions
    /// (`v1`, `v1alpha3`), as KubeVirt's `ValidateRequestResource` checks.
    pub fn is_kubevirt_resource(&self, resource: &str) -> bool {
        self.resource.group == "kubevirt.io"
            && self.resource.resource == resource
            && matches!(self.resource.version.as_str(), "v1" | "v1alpha3")
    }

    /// `namespace/name` for the logs (the name may still be empty on CREATE).
    pub fn key(&self) -> String {
        let name = self.name.as_deref().unwrap_or("");
        match self.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => format!("{ns}/{name}"),
            None => name.to_string(),
        }
    }
}

/// Why a body is not an AdmissionReview the webhooks can answer.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not JSON, or a field of the wrong type; `path` names the field (`.` for the top).
    #[error("the body is not an AdmissionReview: {path}: {message}")]
    Json {
        /// Where the problem is, e.g. `request.operation`.
        path: String,
        /// serde's description.
        message: String,
    },
    /// `apiVersion`/`kind` are not `admission.k8s.io/v1` `AdmissionReview`.
    #[error(
        "the body is a {api_version} {kind}; this webhook answers only {API_VERSION} AdmissionReview"
    )]
    WrongKind {
        /// The body's apiVersion.
        api_version: String,
        /// The body's kind.
        kind: String,
    },
    /// The review has no `request`.
    #[error("the AdmissionReview has no request")]
    NoRequest,
}

impl DecodeError {
    /// A stable label for metrics and logs.
    pub fn label(&self) -> &'static str {
        match self {
            DecodeError::Json { .. } => "malformed_json",
            DecodeError::WrongKind { .. } => "wrong_kind",
            DecodeError::NoRequest => "no_request",
        }
    }
}

/// Reads an AdmissionReview body.
pub fn decode(body: &[u8]) -> Result<AdmissionRequest, DecodeError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let review: AdmissionReview =
        serde_path_to_error::deserialize(&mut de).map_err(|e| DecodeError::Json {
            path: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
    // One document: what follows it is not ignored (the fuzzer sent `{...}garbage`).
    de.end().map_err(|e| DecodeError::Json {
        path: String::new(),
        message: e.to_string(),
    })?;
    if review.api_version != API_VERSION || review.kind != "AdmissionReview" {
        return Err(DecodeError::WrongKind {
            api_version: review.api_version,
            kind: review.kind,
        });
    }
    review.request.ok_or(DecodeError::NoRequest)
}

/// `metav1.StatusCause`: one reason for a refusal, on a field.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusCause {
    /// The cause type (`FieldValueInvalid`, ...), `reason` in JSON as in Kubernetes.
    #[serde(rename = "reason", skip_serializing_if = "String::is_empty", default)]
    pub kind: String,
    /// What is wrong.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub message: String,
    /// The field path (`spec.domain.devices.disks[0].disk.bus`), empty for the whole object.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub field: String,
}

/// `metav1.StatusDetails`, as far as a webhook fills it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDetails {
    /// The causes.
    pub causes: Vec<StatusCause>,
}

/// `metav1.Status`: why a request is refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// The message the API server prefixes with `admission webhook "NAME" denied the request: `.
    pub message: String,
    /// `Invalid` for validation refusals.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub reason: String,
    /// The causes (validation refusals).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub details: Option<StatusDetails>,
    /// The HTTP code the API server answers with (422 for validation, 400 for bad input).
    pub code: u16,
}

/// `AdmissionResponse` before the request's UID is put in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether the request may go on.
    pub allowed: bool,
    /// Why not (boxed: a verdict is passed around by value, a refusal is the rare case).
    pub status: Option<Box<Status>>,
    /// A JSON patch (RFC 6902) of the object, for mutating webhooks.
    pub patch: Option<json_patch::Patch>,
    /// Warnings shown to the client.
    pub warnings: Vec<String>,
}

impl Verdict {
    /// Allowed, unchanged.
    pub fn allow() -> Self {
        Verdict {
            allowed: true,
            ..Verdict::default()
        }
    }

    /// Allowed, with `patch` applied (none when the patch is empty).
    pub fn allow_patched(patch: json_patch::Patch) -> Self {
        Verdict {
            allowed: true,
            patch: (!patch.0.is_empty()).then_some(patch),
            ..Verdict::default()
        }
    }

    /// Refused with `status`.
    pub fn deny(status: Status) -> Self {
        Verdict {
            allowed: false,
            status: Some(Box::new(status)),
            ..Verdict::default()
        }
    }

    /// The refusal's message (empty when allowed).
    pub fn message(&self) -> &str {
        self.status.as_ref().map_or("", |s| s.message.as_str())
    }
}

#[derive(Serialize)]
struct ResponseReview<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'static str,
    response: Response<'a>,
}

#[derive(Serialize)]
struct Response<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a Status>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(rename = "patchType", skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    warnings: &'a [String],
}

/// The AdmissionReview answering request `uid` with `verdict` (the patch base64-encoded, as
/// the API expects it).
pub fn encode(uid: &str, verdict: &Verdict) -> Vec<u8> {
    let patch = verdict.patch.as_ref().map(|p| {
        let json = serde_json::to_vec(p).unwrap_or_else(|_| b"[]".to_vec());
        base64::engine::general_purpose::STANDARD.encode(json)
    });
    let review = ResponseReview {
        api_version: API_VERSION,
        kind: "AdmissionReview",
        response: Response {
            uid,
            allowed: verdict.allowed,
            status: verdict.status.as_deref(),
            patch_type: patch.as_ref().map(|_| "JSONPatch"),
            patch,
            warnings: &verdict.warnings,
        },
    };
    // Plain data with string keys: serialising it cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn review(request: Value) -> Vec<u8> {
        json!({"apiVersion": API_VERSION, "kind": "AdmissionReview", "request": request})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn a_body_with_anything_after_the_review_is_refused() {
        let mut body = review(json!({"uid": "u", "operation": "CREATE",
            "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"}}));
        body.extend_from_slice(b" {}");
        let err = decode(&body).unwrap_err();
        assert_eq!(err.label(), "malformed_json");
        assert!(err.to_string().contains("trailing characters"), "{err}");
    }

    #[test]
    fn reads_a_review_and_echoes_its_uid() {
        let body = review(json!({
            "uid": "u-1", "operation": "CREATE", "namespace": "ns", "name": "a",
            "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
            "userInfo": {"username": "alice", "extra": {"k": ["v"]}},
            "object": {"kind": "VirtualMachineInstance"},
        }));
        let req = decode(&body).unwrap();
        assert_eq!(req.operation, Operation::Create);
        assert!(req.is_kubevirt_resource("virtualmachineinstances"));
        assert!(!req.is_kubevirt_resource("virtualmachines"));
        assert_eq!(req.key(), "ns/a");
        assert_eq!(req.user_info.extra["k"], ["v"]);
        let out: Value = serde_json::from_slice(&encode(&req.uid, &Verdict::allow())).unwrap();
        assert_eq!(
            out,
            json!({"apiVersion": API_VERSION, "kind": "AdmissionReview",
                "response": {"uid": "u-1", "allowed": true}})
        );
    }

    #[test]
    fn a_patch_goes_out_base64_encoded() {
        let patch: json_patch::Patch =
            serde_json::from_value(json!([{"op": "add", "path": "/a", "value": 1}])).unwrap();
        let out: Value =
            serde_json::from_slice(&encode("u", &Verdict::allow_patched(patch))).unwrap();
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        let raw = base64::engine::general_purpose::STANDARD
            .decode(out["response"]["patch"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&raw).unwrap(),
            json!([{"op": "add", "path": "/a", "value": 1}])
        );
        let empty = Verdict::allow_patched(json_patch::Patch(Vec::new()));
        assert!(empty.patch.is_none(), "an empty patch is no patch");
    }

    #[test]
    fn malformed_bodies_are_named_errors() {
        let err = decode(b"{not json").unwrap_err();
        assert_eq!(err.label(), "malformed_json");
        let err = decode(&review(json!({"uid": "u", "operation": 7}))).unwrap_err();
        assert!(
            err.to_string().contains("request.operation"),
            "the field is named: {err}"
        );
        let err = decode(&review(json!({"uid": "u", "operation": "PATCH"}))).unwrap_err();
        assert!(err.to_string().contains("request.operation"), "{err}");
        let err = decode(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}"#)
            .unwrap_err();
        assert_eq!(err.label(), "wrong_kind");
        let err = decode(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#)
            .unwrap_err();
        assert_eq!(err.label(), "no_request");
    }
}
