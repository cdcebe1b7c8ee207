//! Building the Go test harnesses (scripts/*-harness.sh, scripts/gotags.sh): each script builds
//! (or finds in ~/.cache/kvrs) one binary or directory and prints its path on its last line.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde::de::DeserializeOwned;
use serde_json::Value;

/// Runs `script` (relative to the repository root) once per test process and returns the path it
/// printed last. Panics with the script's output when it fails or prints no existing path: the
/// tests that need KubeVirt's Go code never skip. `needs` says what the build needs, for the
/// message.
pub fn go_harness(script: &str, needs: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(script) {
        return p.clone();
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(script);
    let out = Command::new("bash")
        .arg(&path)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} could not build its Go harness ({needs} are needed): exited {}\n{}{}",
        out.status,
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = PathBuf::from(stdout.lines().last().unwrap_or_default().trim());
    assert!(
        printed.exists(),
        "{script} printed {printed:?}, which does not exist"
    );
    built.insert(script.to_string(), printed.clone());
    printed
}

/// Runs the harness binary `bin` with `args`, `input` as JSON on its standard input, and decodes
/// the JSON it writes to its standard output (its standard error goes to the test's). Panics
/// when it fails or writes something else: an oracle comparison never passes without KubeVirt's
/// answers.
pub fn run_json<T: DeserializeOwned>(bin: &Path, args: &[&str], input: &Value) -> T {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the harness {}: {e}", bin.display()));
    child
        .stdin
        .take()
        .expect("the harness's standard input")
        .write_all(input.to_string().as_bytes())
        .expect("writing the harness's input");
    let out = child.wait_with_output().expect("the harness's answer");
    assert!(
        out.status.success(),
        "the harness {} failed: {}",
        bin.display(),
        out.status
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("the harness {} wrote no JSON: {e}", bin.display()))
}
