//! The one place kvrs's tests and benchmarks find KubeVirt's reference outputs.
//!
//! The corpus (`shared/oracle`, `shared/oracle-vm`, `shared/oracle-handler`, ...) lives beside
//! the checkout and is never copied into it. A conformance test that cannot find it must fail,
//! never pass having compared nothing, so [`shared_dir`] panics with the places it looked.

use std::path::{Path, PathBuf};

/// Overrides where the corpus is: a directory holding `oracle/`, `oracle-vm/`, ...
pub const SHARED_DIR_ENV: &str = "KVRS_SHARED_DIR";

/// The corpus directory `sub` (e.g. `oracle`), found as `shared/<sub>` beside the nearest
/// ancestor of the running package (`CARGO_MANIFEST_DIR` at run time, so a test binary reused
/// from another checkout looks beside this one), or under `$KVRS_SHARED_DIR`.
///
/// # Panics
/// When no such directory exists: the tests that call this compare against it and must not
/// pass without it.
pub fn shared_dir(sub: &str) -> PathBuf {
    match find_shared_dir(sub) {
        Ok(dir) => dir,
        Err(looked) => panic!(
            "KubeVirt's reference corpus `{sub}` is missing (looked in: {}); it lives in \
             ../shared beside the checkout, or set {SHARED_DIR_ENV}",
            looked
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// [`shared_dir`] without the panic: the directory, or every place looked in.
pub fn find_shared_dir(sub: &str) -> Result<PathBuf, Vec<PathBuf>> {
    let mut looked = Vec::new();
    if let Some(root) = std::env::var_os(SHARED_DIR_ENV) {
        let dir = PathBuf::from(root).join(sub);
        if dir.is_dir() {
            return Ok(dir);
        }
        looked.push(dir);
    }
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    for ancestor in start.ancestors() {
        let dir = ancestor.join("shared").join(sub);
        if dir.is_dir() {
            return Ok(dir);
        }
        looked.push(dir);
    }
    Err(looked)
}

/// Every case name in `dir` with a file `NAME.<suffix>`, sorted.
///
/// # Panics
/// When the directory cannot be read or holds no such case: an empty corpus compares nothing.
pub fn cases_with(dir: &Path, suffix: &str) -> Vec<String> {
    let ending = format!(".{suffix}");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            name.strip_suffix(&ending).map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(
        !names.is_empty(),
        "no *{ending} cases in {}: nothing to compare",
        dir.display()
    );
    names
}

/// Reads a JSON file of the corpus.
///
/// # Panics
/// When the file is missing or not JSON.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_corpus_beside_the_checkout() {
        let dir = shared_dir("oracle");
        assert!(dir.join("README.txt").is_file(), "{}", dir.display());
        assert!(!cases_with(&dir, "vmi.json").is_empty());
    }

    #[test]
    fn a_missing_corpus_lists_where_it_looked() {
        let looked = find_shared_dir("no-such-corpus").unwrap_err();
        assert!(looked.iter().any(|p| p.ends_with("shared/no-such-corpus")));
    }
}
