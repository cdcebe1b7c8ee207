//! `--log-format` of both cluster daemons (virt-controller, virt-handler): their stderr through a
//! pipe (as in a pod) is JSON lines with `--log-format json`, and plain text without ANSI
//! colours otherwise. One test for both, since they share the setup in `kvrs-runtime`.

use std::path::{Path, PathBuf};
use std::process::Command;

use kvrs_test_guest::pod::workspace_binary;

/// The daemons: (cargo package, binary).
const DAEMONS: [(&str, &str); 2] = [
    ("kvrs-virt-controller", "virt-controller"),
    ("kvrs-virt-handler", "virt-handler"),
];

fn daemons() -> impl Iterator<Item = (&'static str, PathBuf)> {
    DAEMONS
        .into_iter()
        .map(|(package, name)| (name, workspace_binary(package, name)))
}

/// Runs `binary` against a kubeconfig that does not exist (it logs why and exits 1) with
/// `args`; answers its stderr.
fn stderr_of(binary: &Path, args: &[&str]) -> String {
    let missing = "/nonexistent/kvrs-log-format-test/no-such-kubeconfig";
    let out = Command::new(binary)
        .arg("--kubeconfig")
        .arg(missing)
        .args(args)
        .env("RUST_LOG", "debug")
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", binary.display()));
    assert_eq!(out.status.code(), Some(1), "{}: {out:?}", binary.display());
    String::from_utf8(out.stderr).expect("UTF-8 stderr")
}

#[test]
fn json_lines_carry_level_message_and_target() {
    for (name, binary) in daemons() {
        let stderr = stderr_of(&binary, &["--log-format", "json"]);
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(!lines.is_empty(), "{name}: nothing logged");
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{name}: not a JSON line ({e}): {line}"));
            for key in ["level", "message", "target", "timestamp"] {
                assert!(v[key].is_string(), "{name}: no {key} in {line}");
            }
        }
        let last: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
        assert_eq!(last["level"], "ERROR", "{name}");
        assert!(
            last["message"]
                .as_str()
                .is_some_and(|m| m.contains("no-such-kubeconfig")),
            "{name}: {last}"
        );
    }
}

#[test]
fn text_through_a_pipe_has_no_colours() {
    for (name, binary) in daemons() {
        for args in [&[][..], &["--log-format", "text"][..]] {
            let stderr = stderr_of(&binary, args);
            assert!(stderr.contains("no-such-kubeconfig"), "{name}: {stderr}");
            assert!(
                !stderr.contains("\x1b["),
                "{name}: ANSI escape in {stderr:?}"
            );
        }
    }
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_flag() {
    for (name, binary) in daemons() {
        let out = Command::new(&binary)
            .args(["--log-format", "xml"])
            .output()
            .unwrap_or_else(|e| panic!("run {name}: {e}"));
        assert_eq!(out.status.code(), Some(2), "{name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("--log-format"), "{name}: {stderr}");
        assert!(stderr.contains("expected text or json"), "{name}: {stderr}");
    }
}
