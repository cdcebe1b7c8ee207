//! Seed inputs for the targets whose input is binary (protobuf, XDR), written by the target
//! binaries themselves so that `scripts/fuzz.sh` needs no second build: a target started with
//! `KVRS_FUZZ_WRITE_SEEDS=DIR` (and `KVRS_FUZZ_ORACLE=../shared/oracle`) writes its seeds into
//! `DIR` from its libFuzzer init hook and exits.

use std::path::{Path, PathBuf};

/// The directory a target writes its seeds to, then exits.
pub const WRITE_SEEDS_ENV: &str = "KVRS_FUZZ_WRITE_SEEDS";
/// The oracle corpus the seeds are made from (`../shared/oracle`).
pub const ORACLE_ENV: &str = "KVRS_FUZZ_ORACLE";

/// The contents of every oracle file whose name ends with `suffix` (e.g. `.vmi.json`), sorted
/// by name; none when the oracle is not there.
pub fn oracle_files(suffix: &str) -> Vec<Vec<u8>> {
    let Some(dir) = std::env::var_os(ORACLE_ENV).map(PathBuf::from) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// When [`WRITE_SEEDS_ENV`] names a directory: writes `make()`'s seeds there as `seed-NNNN`
/// and exits the process. Called from each binary target's init hook.
pub fn write_if_asked(make: impl FnOnce() -> Vec<Vec<u8>>) {
    let Some(dir) = std::env::var_os(WRITE_SEEDS_ENV).map(PathBuf::from) else {
        return;
    };
    let code = match write_all(&dir, make()) {
        Ok(n) => {
            eprintln!("wrote {n} seeds to {}", dir.display());
            0
        }
        Err(e) => {
            eprintln!("writing seeds to {}: {e}", dir.display());
            1
        }
    };
    std::process::exit(code);
}

fn write_all(dir: &Path, seeds: Vec<Vec<u8>>) -> std::io::Result<usize> {
    std::fs::create_dir_all(dir)?;
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:04}")), seed)?;
    }
    Ok(seeds.len())
}
