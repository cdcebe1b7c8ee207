//! JSON patches sent with their bytes as Go writes JSON.
//!
//! The API server applies a JSON patch with evanphx/json-patch, whose `test` operation compares a
//! string (any scalar) by its raw bytes against the stored document's — and the stored document
//! is Go's encoding, which escapes `<`, `>` and `&` (as `\u003c`, `\u003e`, `\u0026`) and the
//! line and paragraph separators U+2028 / U+2029. serde_json writes them as they are, so a
//! `test` of a value holding `>` (a cloud-init script's `2>/dev/null`, an HTML annotation) never
//! matched: kvrs's conditional patches of such objects failed as if the object had changed, for
//! ever. KubeVirt's own patches are Go-encoded, so they never meet this; kvrs's now are too.

use kube::api::{Patch, PatchParams};
use kube::core::DynamicObject;
use kube::{Api, Error};
use serde_json::Value;

/// `value` as JSON, with the characters Go's `encoding/json` escapes escaped the same way.
/// Outside strings JSON has none of them, so the escaping only ever rewrites string contents,
/// into an encoding every JSON reader decodes to the same text.
pub fn go_json(value: &Value) -> Vec<u8> {
    let text = value.to_string();
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out.into_bytes()
}

/// PATCH of `name` (or its `subresource`) in `api` with the JSON patch `ops`, its body written
/// by [`go_json`].
pub async fn send_json_patch(
    api: &Api<DynamicObject>,
    name: &str,
    subresource: Option<&str>,
    params: &PatchParams,
    ops: &Value,
) -> Result<DynamicObject, Error> {
    let parsed: json_patch::Patch =
        serde_json::from_value(ops.clone()).map_err(Error::SerdeError)?;
    let patch = Patch::<()>::Json(parsed);
    let request = kube::core::Request::new(api.resource_url());
    let built = match subresource {
        Some(sub) => request.patch_subresource(sub, name, params, &patch),
        None => request.patch(name, params, &patch),
    }
    .map_err(Error::BuildRequest)?;
    let (parts, _) = built.into_parts();
    let request = http::Request::from_parts(parts, go_json(ops));
    api.clone()
        .into_client()
        .request::<DynamicObject>(request)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_escapes_what_go_escapes_and_nothing_else() {
        let v = json!({"s": "a<b>c&d\u{2028}e\u{2029}f \"q\" \\ é ü 2>/dev/null"});
        let bytes = go_json(&v);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert_eq!(
            text,
            r#"{"s":"a\u003cb\u003ec\u0026d\u2028e\u2029f \"q\" \\ é ü 2\u003e/dev/null"}"#
        );
        let back: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(back, v, "the same JSON value");
    }

    proptest::proptest! {
        #[test]
        fn any_string_reads_back_unchanged(s in "\\PC*") {
            let v = json!({"k": s, "l": [s.clone()]});
            let back: Value = serde_json::from_slice(&go_json(&v)).unwrap();
            proptest::prop_assert_eq!(back, v);
        }
    }
}
