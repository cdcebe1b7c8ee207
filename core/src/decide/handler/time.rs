//! Kubernetes timestamps: second precision, `Z` suffix, as `metav1.Time` prints them.

use k8s_openapi::jiff::Timestamp;

/// Formats `t` the way the API server stores a `metav1.Time` (whole seconds, UTC, `Z`).
pub fn format_time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Parses an RFC 3339 timestamp; `None` when it is not one.
pub fn parse_time(s: &str) -> Option<Timestamp> {
    s.parse().ok()
}
