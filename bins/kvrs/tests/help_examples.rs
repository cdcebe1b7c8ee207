//! Every example in a subcommand's `--help` is run from the repository root and must exit 0, so
//! no help text can point at a file that is gone or a command line that no longer works; and no
//! help text mentions the project's internal test data.
//!
//! `kvrs run` is left out: it boots a VM (its own end-to-end test covers it).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use kvrs_ipc::{CmdResult, LauncherService, ServeOptions, VmiCommand, serve_launcher};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");

/// The subcommands whose examples run here.
const SUBCOMMANDS: &[&str] = &[
    "convert", "defaults", "overhead", "pod", "decide", "launcher",
];

/// The socket path the launcher examples show; the test serves a launcher in its place.
const EXAMPLE_SOCKET: &str = "/var/run/kubevirt/sockets/launcher-sock";

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn kvrs(args: &[String]) -> Output {
    Command::new(KVRS)
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run kvrs")
}

fn help(args: &[&str]) -> String {
    let out = kvrs(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>());
    assert!(out.status.success(), "kvrs {args:?}");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The command lines of the help's `Examples` section: its lines that start with `kvrs `,
/// split on blanks (examples use no quoting), without the leading `kvrs`.
fn examples(help: &str) -> Vec<Vec<String>> {
    let Some(start) = help.lines().position(|l| l.starts_with("Examples")) else {
        return Vec::new();
    };
    help.lines()
        .skip(start + 1)
        .filter_map(|l| l.trim().strip_prefix("kvrs "))
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

fn run_examples(sub: &str, socket: Option<&str>) -> usize {
    let text = help(&[sub, "--help"]);
    let examples = examples(&text);
    assert!(
        !examples.is_empty(),
        "kvrs {sub} --help has no examples:\n{text}"
    );
    for example in &examples {
        assert_eq!(
            example[0], sub,
            "an example of {sub} runs another subcommand"
        );
        let args: Vec<String> = example
            .iter()
            .map(|a| match socket {
                Some(s) if a == EXAMPLE_SOCKET => s.to_string(),
                _ => a.clone(),
            })
            .collect();
        let out = kvrs(&args);
        assert!(
            out.status.success(),
            "`kvrs {}` from `kvrs {sub} --help` exits {:?}: {}",
            example.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !out.stdout.is_empty(),
            "`kvrs {}` prints nothing",
            example.join(" ")
        );
    }
    examples.len()
}

#[test]
fn every_example_of_the_vmi_and_decide_subcommands_exits_0() {
    for sub in SUBCOMMANDS.iter().filter(|s| **s != "launcher") {
        run_examples(sub, None);
    }
}

/// A launcher that accepts everything and runs no domain.
struct Accepting;

#[kvrs_ipc::async_trait]
impl LauncherService for Accepting {
    async fn sync_vmi(&self, _cmd: VmiCommand) -> CmdResult {
        Ok(())
    }
    async fn get_domain(&self) -> CmdResult<Option<String>> {
        Ok(None)
    }
}

#[test]
fn every_launcher_example_exits_0_against_a_launcher() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sockets/launcher-sock");
    let _server = runtime
        .block_on(serve_launcher(
            &socket,
            Arc::new(Accepting),
            ServeOptions::default(),
        ))
        .unwrap();
    let text = help(&["launcher", "--help"]);
    assert!(text.contains(EXAMPLE_SOCKET), "{text}");
    let n = run_examples("launcher", Some(socket.to_str().unwrap()));
    assert!(n >= 2);
}

#[test]
fn the_decide_help_documents_the_scenario_format() {
    let long = help(&["decide", "--help"]);
    for field in [
        "vm ",
        "vmi ",
        "now ",
        "key ",
        "pods",
        "featureGates",
        "expectations",
        "jitter",
        "domain",
        "extra",
        "Output:",
    ] {
        assert!(long.contains(field), "`{field}` not described:\n{long}");
    }
    let short = help(&["decide", "-h"]);
    assert!(short.contains("kvrs decide --help"), "{short}");
    assert!(!examples(&short).is_empty(), "{short}");
}

#[test]
fn no_help_mentions_internal_test_data_and_every_subcommand_is_covered() {
    let top = help(&["--help"]);
    let listed: Vec<&str> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        // `run` and `kubelet` need root, libvirt and (for kubelet) a cluster: their examples
        // are what bins/kvrs/tests/run.rs and cluster_e2e.rs run.
        .filter(|c| !["help", "run", "kubelet"].contains(c))
        .collect();
    assert_eq!(
        listed, SUBCOMMANDS,
        "a new subcommand needs its examples run here"
    );
    for sub in SUBCOMMANDS.iter().chain(&["run", "kubelet"]) {
        for flag in ["-h", "--help"] {
            let text = help(&[sub, flag]);
            for internal in ["../", "shared/", "oracle", ".featuregates.txt"] {
                assert!(
                    !text.contains(internal),
                    "kvrs {sub} {flag} mentions {internal:?}:\n{text}"
                );
            }
        }
    }
}
