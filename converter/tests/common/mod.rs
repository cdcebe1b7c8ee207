//! Helpers shared by the Go-JSON shape tests.

use serde_json::Value;

/// The first place where `found` differs from `expected` (values, missing or unexpected keys,
/// then key order, which Go's encoder fixes), as a readable path; `None` when they are equal.
pub fn first_difference(expected: &Value, found: &Value, at: &str) -> Option<String> {
    match (expected, found) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, va) in a {
                let Some(vb) = b.get(k) else {
                    return Some(format!("{at}.{k}: missing"));
                };
                if let Some(d) = first_difference(va, vb, &format!("{at}.{k}")) {
                    return Some(d);
                }
            }
            if let Some(k) = b.keys().find(|k| !a.contains_key(*k)) {
                return Some(format!("{at}.{k}: unexpected"));
            }
            let (ka, kb): (Vec<_>, Vec<_>) = (a.keys().collect(), b.keys().collect());
            (ka != kb).then(|| format!("{at}: key order {ka:?} vs {kb:?}"))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| first_difference(x, y, &format!("{at}[{i}]"))),
        _ => (expected != found).then(|| format!("{at}: expected {expected}, found {found}")),
    }
}
