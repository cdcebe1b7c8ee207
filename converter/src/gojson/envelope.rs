//! `api.Domain`: type meta, object meta, spec and status, and the entry points.

use super::{DomainStatus, GoJson, GoJsonError, ObjectMeta, Path, object};
use crate::domain::Domain;
use serde_json::{Map, Value};

/// The whole `api.Domain` object the launcher sends: metadata, the domain spec (the libvirt
/// domain model) and the status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DomainEnvelope {
    /// `kind` from the embedded `metav1.TypeMeta` (written only when set).
    pub kind: String,
    /// `apiVersion` from the embedded `metav1.TypeMeta` (written only when set).
    pub api_version: String,
    /// `ObjectMeta`.
    pub meta: ObjectMeta,
    /// `Spec`: the libvirt domain.
    pub spec: Domain,
    /// `Status`.
    pub status: DomainStatus,
}

impl DomainEnvelope {
    /// A domain for the VMI `namespace/name`, with an empty status (what the launcher reports
    /// right after conversion).
    pub fn new(namespace: &str, name: &str, spec: Domain) -> DomainEnvelope {
        DomainEnvelope {
            meta: ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
                ..ObjectMeta::default()
            },
            spec,
            ..DomainEnvelope::default()
        }
    }
}

impl GoJson for DomainEnvelope {
    fn to_go(&self) -> Value {
        let mut m = Map::with_capacity(5);
        if !self.kind.is_empty() {
            m.insert("kind".into(), Value::String(self.kind.clone()));
        }
        if !self.api_version.is_empty() {
            m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        }
        m.insert("ObjectMeta".into(), self.meta.to_go());
        m.insert("Spec".into(), self.spec.to_go());
        m.insert("Status".into(), self.status.to_go());
        Value::Object(m)
    }

    fn from_go(v: &Value, at: &Path<'_>) -> Result<Self, GoJsonError> {
        let mut out = DomainEnvelope::default();
        let Some(obj) = object(v, at)? else {
            return Ok(out);
        };
        if let Some(x) = obj.get("kind") {
            out.kind = String::from_go(x, &at.key("kind"))?;
        }
        if let Some(x) = obj.get("apiVersion") {
            out.api_version = String::from_go(x, &at.key("apiVersion"))?;
        }
        if let Some(x) = obj.get("ObjectMeta") {
            out.meta = ObjectMeta::from_go(x, &at.key("ObjectMeta"))?;
        }
        if let Some(x) = obj.get("Spec") {
            out.spec = Domain::from_go(x, &at.key("Spec"))?;
        }
        if let Some(x) = obj.get("Status") {
            out.status = DomainStatus::from_go(x, &at.key("Status"))?;
        }
        Ok(out)
    }
}

/// The domain as the JSON value Go's `json.Marshal(api.Domain)` produces.
pub fn to_go_json(domain: &DomainEnvelope) -> Value {
    domain.to_go()
}

/// The domain as the bytes Go's `json.Marshal` writes, ready for `domainJSON` / the `GetDomain`
/// response.
pub fn to_go_json_vec(domain: &DomainEnvelope) -> Vec<u8> {
    // Writing a `Value` to a Vec cannot fail: every key is a string and no number is NaN.
    go_escape(serde_json::to_vec(&domain.to_go()).unwrap_or_default())
}

/// The bytes of Go's `json.MarshalIndent(domain, "", "  ")` (two-space indent, no final newline).
pub fn to_go_json_pretty(domain: &DomainEnvelope) -> Vec<u8> {
    go_escape(serde_json::to_vec_pretty(&domain.to_go()).unwrap_or_default())
}

/// Rewrites serde_json's string escapes into Go's: Go also escapes `<`, `>`, `&`, U+2028 and
/// U+2029, and writes backspace and form feed as `\u0008` / `\u000c`. Outside strings JSON
/// text has none of these bytes, so the rewrite needs no parser; `\\` pairs are copied whole.
fn go_escape(json: Vec<u8>) -> Vec<u8> {
    if !json
        .iter()
        .any(|b| matches!(b, b'<' | b'>' | b'&' | b'\\' | 0xE2))
    {
        return json;
    }
    let mut out = Vec::with_capacity(json.len() + 16);
    let mut i = 0;
    while i < json.len() {
        let b = json[i];
        match b {
            b'<' => out.extend_from_slice(br"\u003c"),
            b'>' => out.extend_from_slice(br"\u003e"),
            b'&' => out.extend_from_slice(br"\u0026"),
            0xE2 if json.get(i + 1) == Some(&0x80)
                && matches!(json.get(i + 2), Some(0xA8 | 0xA9)) =>
            {
                out.extend_from_slice(if json[i + 2] == 0xA8 {
                    br"\u2028"
                } else {
                    br"\u2029"
                });
                i += 2;
            }
            b'\\' => {
                match json.get(i + 1) {
                    Some(b'b') => out.extend_from_slice(br"\u0008"),
                    Some(b'f') => out.extend_from_slice(br"\u000c"),
                    Some(&next) => out.extend_from_slice(&[b'\\', next]),
                    None => out.push(b'\\'),
                }
                i += 1;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    out
}

/// Reads the JSON of an `api.Domain`; errors name the field path (`Spec.Devices.Disks[0]...`).
pub fn from_go_json(v: &Value) -> Result<DomainEnvelope, GoJsonError> {
    DomainEnvelope::from_go(v, &Path::ROOT)
}

/// Reads `api.Domain` JSON bytes (`domainJSON`).
pub fn from_go_json_slice(bytes: &[u8]) -> Result<DomainEnvelope, GoJsonError> {
    let v: Value =
        serde_json::from_slice(bytes).map_err(|e| Path::ROOT.invalid(format!("not JSON: {e}")))?;
    from_go_json(&v)
}
