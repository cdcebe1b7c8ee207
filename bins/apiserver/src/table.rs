//! `kubectl get` asks for a `meta.k8s.io/v1` Table; this renders one with Name, Status (the
//! `status.phase`, when there is one) and Age columns, the object metadata in each row so that
//! `kubectl get -A` adds its NAMESPACE column.

use serde_json::{Value, json};

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix seconds of `YYYY-MM-DDTHH:MM:SSZ`.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let n = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let days = days_from_civil(n(0..4)?, n(5..7)?, n(8..10)?);
    Some(days * 86_400 + n(11..13)? * 3600 + n(14..16)? * 60 + n(17..19)?)
}

/// kubectl's short age: `42s`, `5m`, `3h`, `2d`.
fn age(secs: i64) -> String {
    match secs.max(0) {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// Whether the `Accept` header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.contains("as=Table")
}

/// A Table of `items`, listed at `rv`.
pub fn table(items: &[Value], rv: u64, now: i64) -> Value {
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            let md = o.get("metadata").cloned().unwrap_or(json!({}));
            let created = md
                .get("creationTimestamp")
                .and_then(Value::as_str)
                .and_then(parse_rfc3339);
            json!({
                "cells": [
                    md.get("name").cloned().unwrap_or(json!("")),
                    o.pointer("/status/phase").cloned().unwrap_or(json!("")),
                    created.map(|c| age(now - c)).unwrap_or_default(),
                ],
                "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": md},
            })
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv.to_string()},
        "columnDefinitions": [
            {"name": "Name", "type": "string", "format": "name", "description": "Name", "priority": 0},
            {"name": "Status", "type": "string", "format": "", "description": "status.phase", "priority": 0},
            {"name": "Age", "type": "string", "format": "", "description": "since creation", "priority": 0},
        ],
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_timestamps() {
        assert_eq!(super::parse_rfc3339("1970-01-01T00:02:10Z"), Some(130));
        assert_eq!(
            super::parse_rfc3339("2026-12-01T13:42:43Z"),
            Some(1_796_132_563)
        );
        assert_eq!(super::parse_rfc3339("bad"), None);
    }
}
