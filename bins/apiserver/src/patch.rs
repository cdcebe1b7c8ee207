//! Which patches are served, and the checks made before one reaches the store: kube-apiserver
//! serves strategic merge patches for its built-in types only (a custom resource answers 415),
//! and a body that is not a patch of its type is a 400 with Go's decoding message. The
//! strategic merge patch applied here merges `conditions` by `type` and replaces other lists:
//! a directive it does not implement (`$patch`, `$retainKeys`, `$deleteFromPrimitiveList`) is
//! refused rather than stored as data.

use serde_json::Value;

use kvrs_store::{PatchType, ResourceType};

use crate::error::ApiError;

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";

/// Whether `rt` is one of kube-apiserver's own types (its group is the core group, a
/// `*.k8s.io` group or one of the unsuffixed built-in groups) rather than a custom resource.
pub fn is_builtin(rt: &ResourceType) -> bool {
    rt.group.is_empty()
        || rt.group.ends_with(".k8s.io")
        || matches!(
            rt.group.as_str(),
            "apps" | "batch" | "autoscaling" | "policy" | "extensions"
        )
}

/// The patch type of a `Content-Type`, as served for `rt`.
pub fn patch_type(rt: &ResourceType, content_type: &str) -> Result<PatchType, ApiError> {
    let builtin = is_builtin(rt);
    match content_type.split(';').next().unwrap_or("").trim() {
        JSON_PATCH => Ok(PatchType::Json),
        MERGE_PATCH => Ok(PatchType::Merge),
        STRATEGIC_MERGE_PATCH if builtin => Ok(PatchType::StrategicMerge),
        _ => Err(ApiError::UnsupportedMediaType(if builtin {
            [JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH].join(", ")
        } else {
            [JSON_PATCH, MERGE_PATCH].join(", ")
        })),
    }
}

/// Go's name of a JSON value's type in an unmarshal error.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Refuses a patch body kube-apiserver could not decode as its type, and strategic-merge
/// directives this server does not implement.
pub fn check(patch_type: PatchType, patch: &Value) -> Result<(), ApiError> {
    let decode = |into: &str, v: &Value| {
        ApiError::BadRequest(format!(
            "error decoding patch: json: cannot unmarshal {} into Go value of type {into}",
            go_type(v)
        ))
    };
    match patch_type {
        PatchType::Json => {
            let Some(ops) = patch.as_array() else {
                return Err(decode("[]handlers.jsonPatchOp", patch));
            };
            for op in ops {
                if !op.is_object() {
                    return Err(decode("handlers.jsonPatchOp", op));
                }
            }
            Ok(())
        }
        PatchType::Merge | PatchType::StrategicMerge if !patch.is_object() => {
            Err(decode("map[string]interface {}", patch))
        }
        PatchType::Merge => Ok(()),
        PatchType::StrategicMerge => unsupported_directive(patch, &mut String::new()),
    }
}

/// The first `$` key of a strategic merge patch other than `$setElementOrder/...` (an order
/// hint, which this server may ignore), with its path.
fn unsupported_directive(v: &Value, path: &mut String) -> Result<(), ApiError> {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                if k.starts_with('$') && !k.starts_with("$setElementOrder/") {
                    let at = if path.is_empty() { "." } else { path.as_str() };
                    return Err(ApiError::BadRequest(format!(
                        "strategic merge patch directive {k:?} at {at} is not supported by this server: send a JSON patch or a merge patch"
                    )));
                }
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(k);
                unsupported_directive(child, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                unsupported_directive(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_store::lookup;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn strategic_merge_patch_is_for_builtin_types_only() {
        let pods = lookup("", "pods").unwrap();
        let vms = lookup("kubevirt.io", "virtualmachines").unwrap();
        assert!(matches!(
            patch_type(&pods, STRATEGIC_MERGE_PATCH),
            Ok(PatchType::StrategicMerge)
        ));
        assert_eq!(
            patch_type(&vms, STRATEGIC_MERGE_PATCH).unwrap_err().code(),
            415
        );
        assert!(patch_type(&vms, "application/merge-patch+json; charset=utf-8").is_ok());
        assert_eq!(patch_type(&pods, "text/plain").unwrap_err().code(), 415);
    }

    #[test]
    fn directives_and_malformed_bodies_are_refused() {
        let smp = json!({"spec": {"containers": [{"$patch": "delete", "name": "c"}]}});
        let e = check(PatchType::StrategicMerge, &smp).unwrap_err();
        assert_eq!(e.code(), 400);
        assert!(e.to_string().contains("spec.containers[0]"), "{e}");
        let order = json!({"status": {"$setElementOrder/conditions": [{"type": "Ready"}]}});
        assert!(check(PatchType::StrategicMerge, &order).is_ok());
        assert_eq!(
            check(PatchType::Json, &json!({"op": "add"}))
                .unwrap_err()
                .to_string(),
            "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"
        );
        assert_eq!(
            check(PatchType::Merge, &json!([1])).unwrap_err().code(),
            400
        );
    }

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            "[$a-z/]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[$a-z/]{0,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any JSON body of any patch type: accepted or a 400, never a panic.
        #[test]
        fn any_body_is_checked_without_panicking(v in any_json()) {
            for t in [PatchType::Json, PatchType::Merge, PatchType::StrategicMerge] {
                if let Err(e) = check(t, &v) {
                    prop_assert_eq!(e.code(), 400);
                }
            }
        }
    }
}
