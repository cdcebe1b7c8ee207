//! `kvrs decide handler SCENARIO` end to end: every oracle-handler scenario gives KubeVirt's
//! decision and launcher calls; a bad scenario gives a one-line error and exit code 2.

use std::path::PathBuf;
use std::process::{Command, Output};

fn corpus() -> PathBuf {
    kvrs_corpus::shared_dir("oracle-handler")
}

fn kvrs(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kvrs"))
        .args(args)
        .output()
        .expect("run kvrs")
}

#[test]
fn every_scenario_prints_kubevirts_decision_and_launcher_calls() {
    let dir = corpus();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read corpus")
        .filter_map(|e| {
            e.ok()?
                .file_name()
                .into_string()
                .ok()?
                .strip_suffix(".out.json")
                .map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in &names {
        let scenario = dir.join(format!("{name}.json"));
        let out = kvrs(&["decide", "handler", scenario.to_str().expect("utf-8 path")]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON output");
        let want: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.out.json"))).expect("read"),
        )
        .expect("oracle JSON");
        assert_eq!(got["decision"], want["decision"], "{name}");
        assert_eq!(got["launcherCalls"], want["launcherCalls"], "{name}");
        assert_eq!(got["statusUpdated"], want["statusUpdated"], "{name}");
    }
}

#[test]
fn bad_scenario_is_a_one_line_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.json");
    std::fs::write(&path, r#"{"now": "yesterday", "vmi": null}"#).expect("write");
    let out = kvrs(&["decide", "handler", path.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("now"), "{err}");
}
