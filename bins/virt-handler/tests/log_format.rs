//! `--log-format`: the binary's stderr through a pipe (as in a pod) is JSON lines with
//! `--log-format json`, and plain text without ANSI colours otherwise.

use std::process::Command;

/// Runs the binary against a kubeconfig that does not exist (it logs why and exits 1) with
/// `args`; answers its stderr.
fn stderr_of(args: &[&str]) -> String {
    let missing = "/nonexistent/kvrs-log-format-test/no-such-kubeconfig";
    let out = Command::new(env!("CARGO_BIN_EXE_virt-handler"))
        .arg("--kubeconfig")
        .arg(missing)
        .args(args)
        .env("RUST_LOG", "debug")
        .output()
        .expect("run virt-handler");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8(out.stderr).expect("UTF-8 stderr")
}

#[test]
fn json_lines_carry_level_message_and_target() {
    let stderr = stderr_of(&["--log-format", "json"]);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(!lines.is_empty(), "nothing logged");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        for key in ["level", "message", "target", "timestamp"] {
            assert!(v[key].is_string(), "no {key} in {line}");
        }
    }
    let last: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["level"], "ERROR");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("no-such-kubeconfig"),
        "{last}"
    );
}

#[test]
fn text_through_a_pipe_has_no_colours() {
    for args in [&[][..], &["--log-format", "text"][..]] {
        let stderr = stderr_of(args);
        assert!(stderr.contains("no-such-kubeconfig"), "{stderr}");
        assert!(!stderr.contains("\x1b["), "ANSI escape in {stderr:?}");
    }
}

#[test]
fn an_unknown_log_format_is_refused_naming_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_virt-handler"))
        .args(["--log-format", "xml"])
        .output()
        .expect("run virt-handler");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--log-format"), "{stderr}");
    assert!(stderr.contains("expected text or json"), "{stderr}");
}
