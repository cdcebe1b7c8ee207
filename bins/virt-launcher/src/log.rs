//! One JSON object per line on stderr, shaped like KubeVirt's launcher logs (`component`, `level`,
//! `msg`, `timestamp`): the pod log is what people read. A full tracing subscriber would cost more
//! memory than the launcher's whole job needs.

use std::time::{SystemTime, UNIX_EPOCH};

fn write(level: &str, msg: std::fmt::Arguments<'_>) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let line = serde_json::json!({
        "component": "virt-launcher",
        "level": level,
        "msg": msg.to_string(),
        "timestamp": ts,
    });
    eprintln!("{line}");
}

/// An info line.
pub fn info(msg: std::fmt::Arguments<'_>) {
    write("info", msg);
}

/// A warning line.
pub fn warn(msg: std::fmt::Arguments<'_>) {
    write("warning", msg);
}

/// An error line.
pub fn error(msg: std::fmt::Arguments<'_>) {
    write("error", msg);
}
