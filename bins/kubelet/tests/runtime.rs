//! The runner's OCI runtime check at start, with the real runtimes of this machine: Debian 12's
//! runc 1.1.5 on `PATH` (`scripts/install-test-deps.sh`), which lacks the November 2025 fixes,
//! is refused before anything is made (naming the CVEs and the ways out) and accepted only when
//! the operator says so; the runc 1.5.3 `kvrs run` uses by default passes; a runtime that
//! cannot run is a typed error.

use std::path::Path;

use kvrs_kubelet::runc::{self, RuncVersion, RuntimeCheck, Verdict};
use kvrs_kubelet::{Kubelet, KubeletConfig};

mod common;

#[tokio::test]
async fn a_runc_without_the_2025_fixes_is_refused_before_anything_is_made() {
    let debian = common::on_path("runc").expect("runc on PATH (scripts/install-test-deps.sh)");
    let out = std::process::Command::new(&debian)
        .arg("--version")
        .output()
        .unwrap();
    let version = RuncVersion::parse_output(&String::from_utf8_lossy(&out.stdout)).unwrap();
    assert_eq!(
        version.verdict(),
        Verdict::Vulnerable,
        "this test needs a runc without the fixes on PATH (Debian 12's 1.1.5, which \
         scripts/install-test-deps.sh installs); {} is {version}",
        debian.display()
    );

    let root = std::env::temp_dir().join(format!("kvrs-rt{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut cfg = KubeletConfig::new("kvrs-rt-node", root.join("p"), root.join("s"));
    cfg.runtime = debian.clone();
    // Never contacted: the refusal comes first.
    let client =
        kube::Client::try_from(kube::Config::new("https://127.0.0.1:9".parse().unwrap())).unwrap();
    let err = Kubelet::new(client, cfg)
        .run(std::future::pending())
        .await
        .expect_err("Debian's runc is refused");
    assert_eq!(err.label(), "runtime-vulnerable");
    let text = err.to_string();
    for needle in runc::CVES
        .iter()
        .copied()
        .chain([&*version.to_string(), "--allow-vulnerable-runtime"])
    {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    assert!(!root.exists(), "nothing made before the refusal");

    match runc::check(&debian, true).await {
        Ok(RuntimeCheck::AcceptedVulnerable(v)) => assert_eq!(v, version),
        other => panic!("accepted when told: {other:?}"),
    }
    let fixed = common::runc();
    match runc::check(&fixed, false).await {
        Ok(RuntimeCheck::Fixed(v)) => assert_eq!(v.verdict(), Verdict::Fixed),
        other => panic!("{}: {other:?}", fixed.display()),
    }
    let e = runc::check(Path::new("/nonexistent/runc"), false)
        .await
        .unwrap_err();
    assert_eq!(e.label(), "runtime-not-runnable");
}
