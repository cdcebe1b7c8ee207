//! A JSON patch written as KubeVirt's handler writes a VMI: by update (PUT) of the object read.
//!
//! KubeVirt v1.9.0's ClusterRole for its handler (`kubevirt-handler`) grants on
//! `virtualmachineinstances` only `update`, `list` and `watch` — no `patch`, no `get` — because
//! KubeVirt's handler writes a VMI by PUT of the whole object it read. kvrs's handler writes the
//! same status as a conditional JSON patch (a `test` of the resourceVersion read, then the
//! change). Dropped in under KubeVirt's operator (the KubeVirt CR's `customizeComponents`, which
//! changes images and nothing else, so not the RBAC), every such patch was refused with 403 and
//! the VMI's phase never left `Scheduled` although the guest ran. A patch the server forbids is
//! therefore applied here to the object as just listed (`list` with a `metadata.name` field
//! selector: allowed where `get` is not) and the result sent as an update: its `test`
//! operations are checked on that object, and the update carries that object's resourceVersion,
//! so a change made meanwhile fails it with 409 — the same condition the patch states.

use kube::api::{Api as KubeResourceApi, DynamicObject, ListParams, PostParams};
use kvrs_decide::ApiWrite;
use kvrs_executor::{ApiError, ApiErrorKind};
use serde_json::Value;

use super::api::{api_error, precondition_failed};
use super::go_patch::go_json;

/// Whether `w`, refused with `refused`, is sent again as a read-modify-update: a JSON patch of
/// the object itself (a subresource has no update of the whole object to fall back on) that
/// the server forbade.
pub fn update_instead(w: &ApiWrite, refused: ApiErrorKind) -> bool {
    refused == ApiErrorKind::Forbidden && is_object_json_patch(w)
}

/// Whether `w` is a JSON patch of the object itself (no subresource).
pub fn is_object_json_patch(w: &ApiWrite) -> bool {
    w.subresource.is_none()
        && matches!(
            &w.op,
            kvrs_decide::WriteOp::Patch {
                patch_type: kvrs_decide::PatchType::Json,
                ..
            }
        )
}

/// The object to send as the update: `current` (as the server answered it) with the JSON patch
/// `ops` applied. A `test` that does not hold on `current` is the conflict the server's 422
/// would have been ([`precondition_failed`]); any other failing operation is invalid, named.
/// The resourceVersion stays `current`'s unless the patch sets one, so the update is
/// conditional on the version the patch was checked against.
pub fn patched(w: &ApiWrite, mut current: Value, ops: &Value) -> Result<Value, ApiError> {
    let parsed: json_patch::Patch = serde_json::from_value(ops.clone()).map_err(|e| {
        ApiError::new(
            ApiErrorKind::Invalid,
            format!(
                "{} {}/{}: the JSON patch is not one: {e}",
                w.resource, w.namespace, w.name
            ),
        )
    })?;
    match json_patch::patch(&mut current, &parsed) {
        Ok(()) => Ok(current),
        Err(e) if matches!(e.kind, json_patch::PatchErrorKind::TestFailed) => {
            Err(precondition_failed(w, &e.to_string()))
        }
        Err(e) => Err(ApiError::new(
            ApiErrorKind::Invalid,
            format!(
                "{} {}/{}: the patch does not apply to the object read: {e}",
                w.resource, w.namespace, w.name
            ),
        )),
    }
}

/// Lists `w`'s object by name (answering `NotFound` when there is none) and updates it with
/// `ops` applied; answers the resourceVersion the server gave the object written.
pub async fn read_modify_update(
    api: &KubeResourceApi<DynamicObject>,
    w: &ApiWrite,
    field_manager: &str,
    ops: &Value,
) -> Result<Option<String>, ApiError> {
    let client = api.clone().into_client();
    let request = kube::core::Request::new(api.resource_url());
    let lp = ListParams::default().fields(&format!("metadata.name={}", w.name));
    let list = request
        .list(&lp)
        .map_err(|e| api_error(kube::Error::BuildRequest(e)))?;
    let listed: Value = client.request(list).await.map_err(api_error)?;
    let current = listed["items"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .find(|o| o["metadata"]["name"] == w.name.as_str())
        })
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ApiErrorKind::NotFound,
                format!("{} {}/{} not found", w.resource, w.namespace, w.name),
            )
        })?;
    let mut object = patched(w, current, ops)?;
    // A list's items may omit their kind and apiVersion; an update needs them.
    if let Some(map) = object.as_object_mut() {
        let (kind, api_version) = (listed["kind"].as_str(), listed["apiVersion"].as_str());
        if let (Some(kind), Some(api_version)) = (kind, api_version) {
            map.entry("kind")
                .or_insert_with(|| Value::from(kind.trim_end_matches("List")));
            map.entry("apiVersion")
                .or_insert_with(|| Value::from(api_version));
        }
    }
    let pp = PostParams {
        field_manager: Some(field_manager.to_string()),
        ..PostParams::default()
    };
    let put = request
        .replace(&w.name, &pp, go_json(&object))
        .map_err(|e| api_error(kube::Error::BuildRequest(e)))?;
    let written: DynamicObject = client.request(put).await.map_err(api_error)?;
    Ok(written.metadata.resource_version)
}

/// `name` in `api`, read by a list with a `metadata.name` field selector: KubeVirt's handler
/// ClusterRole grants VMIs `list` but not `get`, so a GET of a VMI by kvrs's handler dropped in
/// under it is refused, where this read works under kvrs's own role and KubeVirt's alike.
pub async fn get_by_list<K>(api: &KubeResourceApi<K>, name: &str) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let lp = ListParams::default().fields(&format!("metadata.name={name}"));
    Ok(api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .find(|o| o.meta().name.as_deref() == Some(name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrs_decide::{PatchType, WriteOp};
    use serde_json::json;

    fn write(patch_type: PatchType, subresource: Option<&str>) -> ApiWrite {
        let mut w = ApiWrite::new(
            "virtualmachineinstances",
            "default",
            "after",
            WriteOp::Patch {
                patch_type,
                patch: json!([]),
            },
        );
        w.subresource = subresource.map(str::to_string);
        w
    }

    #[test]
    fn only_a_forbidden_json_patch_of_the_object_is_sent_again_as_an_update() {
        let json = write(PatchType::Json, None);
        assert!(update_instead(&json, ApiErrorKind::Forbidden));
        for other in [
            ApiErrorKind::Conflict,
            ApiErrorKind::Invalid,
            ApiErrorKind::NotFound,
            ApiErrorKind::Other,
        ] {
            assert!(!update_instead(&json, other), "{other:?}");
        }
        let status = write(PatchType::Json, Some("status"));
        assert!(!update_instead(&status, ApiErrorKind::Forbidden));
        let merge = write(PatchType::Merge, None);
        assert!(!update_instead(&merge, ApiErrorKind::Forbidden));
    }

    fn vmi(rv: &str) -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "after", "namespace": "default", "resourceVersion": rv,
                         "annotations": {"unknown.example.org/kept": "<&>"}},
            "spec": {"domain": {"devices": {}}, "someFieldKvrsDoesNotModel": {"x": 1}},
            "status": {"phase": "Scheduled", "nodeName": "node1"},
        })
    }

    #[test]
    fn the_patch_applies_to_the_object_read_keeping_everything_else() {
        let w = write(PatchType::Json, None);
        let ops = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
            {"op": "replace", "path": "/status", "value": {"phase": "Running", "nodeName": "node1"}},
        ]);
        let out = patched(&w, vmi("7"), &ops).expect("applies");
        let mut want = vmi("7");
        want["status"]["phase"] = json!("Running");
        assert_eq!(
            out, want,
            "only the status changed; the resourceVersion is the one read"
        );
    }

    #[test]
    fn a_test_that_does_not_hold_is_a_conflict_and_a_bad_op_is_invalid() {
        let w = write(PatchType::Json, None);
        let stale = json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
            {"op": "replace", "path": "/status/phase", "value": "Running"},
        ]);
        let e = patched(&w, vmi("7"), &stale).expect_err("a stale version");
        assert_eq!(e.kind, ApiErrorKind::Conflict);
        assert!(
            e.message
                .starts_with("virtualmachineinstances default/after changed since it was read"),
            "{}",
            e.message
        );
        let missing = json!([{"op": "replace", "path": "/status/nowhere/phase", "value": 1}]);
        let e = patched(&w, vmi("7"), &missing).expect_err("a path that is not there");
        assert_eq!(e.kind, ApiErrorKind::Invalid);
        assert!(e.message.contains("default/after"), "{}", e.message);
        let not_a_patch = json!({"op": "replace"});
        let e = patched(&w, vmi("7"), &not_a_patch).expect_err("not a JSON patch");
        assert_eq!(e.kind, ApiErrorKind::Invalid);
    }
}
