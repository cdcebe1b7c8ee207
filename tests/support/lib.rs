//! Shared helpers for kvrs's cross-crate tests: where the oracle corpus lives and how to read it.

use std::path::{Path, PathBuf};

/// The directory holding KubeVirt's reference outputs (`../shared/oracle` beside the checkout).
///
/// Panics under CI (`CI=true`) when the directory is missing, so a misplaced corpus fails loudly
/// instead of silently comparing nothing. Locally it returns `None` and tests say so.
pub fn shared_dir(sub: &str) -> Option<PathBuf> {
    // Prefer the directory cargo names at run time: a test binary reused from another checkout
    // through a shared target directory would otherwise look beside that other checkout.
    let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = manifest_dir.join("../../shared").join(sub);
    if root.is_dir() {
        return Some(root);
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the oracle corpus {} is missing under CI", root.display());
    }
    eprintln!(
        "note: {} not found; oracle comparisons skipped",
        root.display()
    );
    None
}

/// Every case name in the oracle directory with a file `NAME.<suffix>`, sorted.
pub fn cases_with(dir: &Path, suffix: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read oracle dir")
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(&format!(".{suffix}")).map(str::to_string)
        })
        .collect();
    names.sort();
    names
}

/// Reads a JSON file of the corpus.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
