//! `kvrs-bench-convert FILE --serve`, the kvrs side of `benches/compare-kubevirt.sh`: each line
//! `N` on stdin times N conversions and answers their median on a line of its own; a line that
//! is no count ends it with an error naming the line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

#[test]
fn bench_server_answers_each_window_and_names_a_bad_line() {
    let file = kvrs_corpus::shared_dir("oracle").join("example-vmi-fedora.defaulted.json");
    assert!(file.is_file(), "missing {}", file.display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvrs-bench-convert"))
        .arg(&file)
        .arg("--serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting kvrs-bench-convert");
    let mut stdin = child.stdin.take().expect("piped stdin");
    let mut answers = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    for n in [5, 1] {
        writeln!(stdin, "{n}").expect("writing a window");
        let line = answers
            .next()
            .expect("an answer per window")
            .expect("reading an answer");
        let median: u64 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("MEDIAN_NS, got {line:?}"));
        assert!(median > 0, "a conversion takes time: {line:?}");
    }
    writeln!(stdin, "0").expect("writing a bad window");
    drop(stdin);
    let out = child.wait_with_output().expect("waiting for the server");
    assert!(
        !out.status.success(),
        "a zero window must end the server with an error"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("each line must be a positive integer, got \"0\""),
        "the error names the line: {err}"
    );
}

#[test]
fn bench_server_refuses_a_vmi_it_cannot_read() {
    let out = Command::new(env!("CARGO_BIN_EXE_kvrs-bench-convert"))
        .args(["/nonexistent/vmi.json", "--serve"])
        .output()
        .expect("starting kvrs-bench-convert");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/vmi.json"),
        "the error names the file: {err}"
    );
}
