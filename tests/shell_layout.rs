//! The `shell-layout` bar: the pure crates never depend on the shell. No crate under `core/`, nor
//! `converter`, `overhead`, `queue` or `ipc` (the crates users embed without kvrs's daemons),
//! depends — directly or through other workspace crates, by a normal or a build dependency — on
//! a crate whose manifest lives under `bins/`. Dev-dependencies are free to.
//!
//! Read from `cargo metadata --no-deps` of the workspace, so a new crate or dependency is checked
//! without this file changing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Top-level directories whose crates must stay pure.
const PURE: [&str; 5] = ["core", "converter", "overhead", "queue", "ipc"];

/// One workspace crate: its name, its directory and the directories of the workspace crates it
/// depends on (normal and build dependencies).
struct Crate {
    name: String,
    dir: PathBuf,
    deps: Vec<PathBuf>,
}

fn metadata() -> Value {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let out = Command::new(&cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", Path::new(&cargo).display()));
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON")
}

fn crates(meta: &Value) -> Vec<Crate> {
    let packages = meta["packages"].as_array().expect("packages");
    packages
        .iter()
        .map(|p| {
            let manifest = Path::new(p["manifest_path"].as_str().expect("manifest_path"));
            let deps = p["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|d| d["kind"].is_null() || d["kind"] == "build")
                .filter_map(|d| d["path"].as_str().map(PathBuf::from))
                .collect();
            Crate {
                name: p["name"].as_str().expect("name").to_string(),
                dir: manifest
                    .parent()
                    .expect("a manifest's directory")
                    .to_path_buf(),
                deps,
            }
        })
        .collect()
}

/// For each pure crate that reaches a crate under `bins/`: the path of crate names that leads
/// there.
fn violations(root: &Path, crates: &[Crate]) -> Vec<String> {
    let by_dir: BTreeMap<&Path, &Crate> = crates.iter().map(|c| (c.dir.as_path(), c)).collect();
    let under = |dir: &Path, top: &str| dir.strip_prefix(root).is_ok_and(|d| d.starts_with(top));
    let mut found = Vec::new();
    for start in crates
        .iter()
        .filter(|c| PURE.iter().any(|t| under(&c.dir, t)))
    {
        // Breadth first over the workspace crates it depends on, remembering how each was reached.
        let mut seen = BTreeSet::from([start.dir.as_path()]);
        let mut frontier = vec![(start, vec![start.name.clone()])];
        'search: while let Some((c, path)) = frontier.pop() {
            for dep in &c.deps {
                let Some(d) = by_dir.get(dep.as_path()) else {
                    continue;
                };
                let mut path = path.clone();
                path.push(d.name.clone());
                if under(&d.dir, "bins") {
                    found.push(format!(
                        "{} depends on {} (bins/): {}",
                        start.name,
                        d.name,
                        path.join(" -> ")
                    ));
                    break 'search;
                }
                if seen.insert(d.dir.as_path()) {
                    frontier.push((d, path));
                }
            }
        }
    }
    found
}

#[test]
fn no_pure_crate_depends_on_a_crate_under_bins() {
    let meta = metadata();
    let root = PathBuf::from(meta["workspace_root"].as_str().expect("workspace_root"));
    let crates = crates(&meta);
    // The check reads something: the pure crates and the shell are where it expects them.
    for (name, top) in [
        ("kvrs-executor", "core"),
        ("kvrs-sim", "core"),
        ("kvrs-runtime", "bins"),
    ] {
        assert!(
            crates
                .iter()
                .any(|c| c.name == name
                    && c.dir.strip_prefix(&root).is_ok_and(|d| d.starts_with(top))),
            "{name} is not under {top}/"
        );
    }
    let found = violations(&root, &crates);
    assert!(
        found.is_empty(),
        "crates under core/ (and converter, overhead, queue, ipc) must not depend on crates \
         under bins/:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn a_dependency_on_bins_through_another_crate_is_named_with_its_path() {
    let root = PathBuf::from("/w");
    let krate = |name: &str, dir: &str, deps: &[&str]| Crate {
        name: name.into(),
        dir: root.join(dir),
        deps: deps.iter().map(|d| root.join(d)).collect(),
    };
    let crates = [
        krate("pure", "core/pure", &["tests/helper"]),
        krate("helper", "tests/helper", &["bins/shell"]),
        krate("shell", "bins/shell", &[]),
        krate("fine", "core/fine", &["core/pure-too"]),
        krate("pure-too", "core/pure-too", &[]),
        krate("daemon", "bins/daemon", &["bins/shell"]),
    ];
    assert_eq!(
        violations(&root, &crates),
        ["pure depends on shell (bins/): pure -> helper -> shell"]
    );
}
