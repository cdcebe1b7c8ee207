//! `defaults`, `convert`, `overhead` and `pod` accept and refuse the same inputs for the same
//! reasons: one pipeline (VM webhook, VM -> VMI, admission) in front of all of them.

use std::path::PathBuf;
use std::process::{Command, Output};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");
const SUBCOMMANDS: &[&str] = &["defaults", "convert", "overhead", "pod"];

fn manifest(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/manifests")
        .join(name)
}

fn kvrs(sub: &str, file: &str) -> Output {
    Command::new(KVRS)
        .arg(sub)
        .arg(manifest(file))
        .output()
        .expect("run kvrs")
}

#[test]
fn spec_running_alone_is_accepted_by_every_subcommand() {
    for sub in SUBCOMMANDS {
        let out = kvrs(sub, "vm-running.yaml");
        assert!(
            out.status.success(),
            "{sub}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.stdout.is_empty(), "{sub}");
    }
}

#[test]
fn vm_webhook_refusals_are_the_same_for_every_subcommand() {
    let cases = [
        (
            "vm-running-and-runstrategy.yaml",
            "spec.running",
            "Running and RunStrategy are mutually exclusive",
        ),
        (
            "vm-unreferenced-dvt.yaml",
            "spec.dataVolumeTemplate[0]",
            "must be referenced in the VMI template's 'volumes' list",
        ),
    ];
    for (file, field, reason) in cases {
        let mut messages = Vec::new();
        for sub in SUBCOMMANDS {
            let out = kvrs(sub, file);
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            assert_eq!(out.status.code(), Some(2), "{sub} {file}: {err}");
            assert!(out.stdout.is_empty(), "{sub} {file}");
            assert!(err.contains(file), "{sub}: error names the file: {err}");
            assert!(err.contains(field) && err.contains(reason), "{sub}: {err}");
            messages.push(err);
        }
        assert!(
            messages.windows(2).all(|w| w[0] == w[1]),
            "{file}: same message from every subcommand: {messages:#?}"
        );
    }
}

#[test]
fn an_unknown_feature_gate_is_refused_by_every_subcommand_and_a_known_one_accepted() {
    for sub in SUBCOMMANDS {
        let run = |gates: &str| {
            Command::new(KVRS)
                .arg(sub)
                .arg(manifest("vm-running.yaml"))
                .args(["--feature-gates", gates])
                .output()
                .expect("run kvrs")
        };
        let out = run("Sidecar,sidcar");
        assert_eq!(out.status.code(), Some(2), "{sub}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--feature-gates: unknown feature gate \"sidcar\""),
            "{sub}: {err}"
        );
        assert!(
            err.contains("HostDisk"),
            "the known gates are listed: {err}"
        );
        let out = run("Sidecar,HostDisk");
        assert!(
            out.status.success(),
            "{sub}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
