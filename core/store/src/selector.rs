//! Label and field selectors, as `?labelSelector=` and `?fieldSelector=` spell them.
//!
//! Labels: `a=b`, `a==b`, `a!=b`, `a` (exists), `!a` (absent), `a in (x,y)`, `a notin (x,y)`,
//! comma-separated requirements all of which must hold. Fields: `path=value`, `path==value`,
//! `path!=value` where `path` is a dotted JSON path such as `metadata.name`, `spec.nodeName` or
//! `status.phase`; a missing field reads as the empty string, so `spec.nodeName=` selects
//! unscheduled pods as the real API server does.

use serde_json::Value;

use crate::error::StoreError;
use kvrs_decide::small_json::ScanPointer;

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelReq {
    Eq(String, String),
    NotEq(String, String),
    Exists(String),
    Absent(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector; the empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<LabelReq>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn set_values(s: &str, whole: &str) -> Result<Vec<String>, StoreError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| StoreError::BadSelector(format!("{whole}: expected (v1,v2)")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses a selector; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let bad = || StoreError::BadSelector(format!("label selector {part:?}"));
            let req = if let Some((k, v)) = part.split_once("!=") {
                LabelReq::NotEq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                LabelReq::Eq(k.trim().into(), v.trim().into())
            } else if let Some(k) = part.strip_prefix('!') {
                LabelReq::Absent(k.trim().into())
            } else if let Some((k, vs)) = part.split_once(" notin ") {
                LabelReq::NotIn(k.trim().into(), set_values(vs, part)?)
            } else if let Some((k, vs)) = part.split_once(" in ") {
                LabelReq::In(k.trim().into(), set_values(vs, part)?)
            } else {
                LabelReq::Exists(part.into())
            };
            let key = match &req {
                LabelReq::Eq(k, _)
                | LabelReq::NotEq(k, _)
                | LabelReq::Exists(k)
                | LabelReq::Absent(k)
                | LabelReq::In(k, _)
                | LabelReq::NotIn(k, _) => k,
            };
            if !valid_key(key) {
                return Err(bad());
            }
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `obj`'s `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.at("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::Absent(k) => get(k).is_none(),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => get(k).is_none_or(|x| vs.iter().all(|v| v != x)),
        })
    }
}

/// A parsed field selector; the empty selector selects everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(Vec<String>, bool, String)>);

impl FieldSelector {
    /// Parses a selector; an empty string selects everything.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(StoreError::BadSelector(format!("field selector {part:?}")));
            };
            let path: Vec<String> = path.trim().split('.').map(str::to_string).collect();
            if path.iter().any(String::is_empty) {
                return Err(StoreError::BadSelector(format!("field selector {part:?}")));
            }
            reqs.push((path, eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    /// Whether the selector selects everything.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `obj`'s fields satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for seg in path {
                cur = cur.and_then(|c| c.get(seg));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

/// A namespace plus label and field selectors: which objects a list or watch returns.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    /// Only objects of this namespace (all namespaces when `None`).
    pub namespace: Option<String>,
    /// Label requirements.
    pub labels: LabelSelector,
    /// Field requirements.
    pub fields: FieldSelector,
}

impl Selector {
    /// Everything.
    pub fn all() -> Self {
        Self::default()
    }

    /// Parses `?labelSelector=` and `?fieldSelector=`.
    pub fn parse(
        namespace: Option<&str>,
        labels: Option<&str>,
        fields: Option<&str>,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            namespace: namespace.map(str::to_string),
            labels: LabelSelector::parse(labels.unwrap_or(""))?,
            fields: FieldSelector::parse(fields.unwrap_or(""))?,
        })
    }

    /// Whether `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| obj.at("/metadata/namespace").and_then(Value::as_str) == Some(ns))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value, node: Option<&str>) -> Value {
        let mut p =
            json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "spec": {}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    #[test]
    fn label_requirements() {
        let p = pod(json!({"app": "web", "tier": "front"}), None);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app", true),
            ("!app", false),
            ("missing", false),
            ("!missing", true),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("app=web,tier=back", false),
            ("app in (web),tier", true),
            ("other!=x", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&p),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a in x").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn field_requirements() {
        let bound = pod(json!({}), Some("node1"));
        let unbound = pod(json!({}), None);
        let s = FieldSelector::parse("spec.nodeName=node1").unwrap();
        assert!(s.matches(&bound) && !s.matches(&unbound));
        let s = FieldSelector::parse("spec.nodeName=").unwrap();
        assert!(!s.matches(&bound) && s.matches(&unbound));
        let s = FieldSelector::parse("metadata.name==p,metadata.namespace!=other").unwrap();
        assert!(s.matches(&bound));
        assert!(FieldSelector::parse("nonsense").is_err());
        let sel = Selector::parse(Some("ns"), Some("!x"), Some("metadata.name=p")).unwrap();
        assert!(sel.matches(&bound));
        let sel = Selector::parse(Some("other"), None, None).unwrap();
        assert!(!sel.matches(&bound));
    }
}
