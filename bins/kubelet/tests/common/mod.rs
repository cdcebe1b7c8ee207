//! What the runner's tests that start real containers share: root, and runc.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether this process runs as root (namespaces, cgroups, UID 107 need it).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// runc, as `kvrs run` finds it (`PATH`). When it is missing, the repository's
/// `scripts/install-test-deps.sh` installs it (Debian's `runc`, with the rest of the test
/// dependencies; a no-op when everything is there); a machine where that fails fails the test.
pub fn runc() -> PathBuf {
    if let Some(p) = on_path("runc") {
        return p;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-test-deps.sh");
    let status = Command::new("bash")
        .arg(&script)
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} failed ({status}): runc is needed to run pods",
        script.display()
    );
    on_path("runc").unwrap_or_else(|| {
        panic!(
            "runc is still missing after {}: the pod runner runs containers with it",
            script.display()
        )
    })
}
