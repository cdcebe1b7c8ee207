//! The real kubectl (v1.36, built by `scripts/kube-components.sh`) against the embedded server:
//! `kubectl apply` with its default validation (it reads the OpenAPI v3 documents, then asks
//! the server for strict field validation), an unknown field reported as against
//! kube-apiserver, and `kubectl explain`.

use std::process::{Command, Output};

use kvrs_apiserver::{ApiServer, Options};

fn kubectl(kubeconfig: &std::path::Path, args: &[&str], stdin: Option<&str>) -> Output {
    let bin = kvrs_test_cluster::locate_binaries()
        .expect("the kube binaries")
        .join("kubectl");
    let mut cmd = Command::new(bin);
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    // A fresh cache per run: kubectl caches discovery and OpenAPI documents by server.
    let cache = tempfile::tempdir().unwrap();
    cmd.arg("--cache-dir").arg(cache.path());
    match stdin {
        Some(text) => {
            use std::io::Write;
            cmd.stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .unwrap();
            child.wait_with_output().unwrap()
        }
        None => cmd.output().unwrap(),
    }
}

const VM: &str = "apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: second
spec:
  runStrategy: Halted
  template:
    spec:
      domain:
        devices: {}
        memory:
          guest: 64Mi
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_validates_and_explain_prints() {
    let server = ApiServer::start(Options::default()).await.unwrap();
    let kc = server.kubeconfig_path.clone();
    tokio::task::spawn_blocking(move || {
        let text = |o: &Output| {
            format!(
                "{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        let out = kubectl(&kc, &["apply", "-f", "-"], Some(VM));
        assert!(out.status.success(), "kubectl apply: {}", text(&out));
        assert!(
            text(&out).contains("virtualmachine.kubevirt.io/second created"),
            "{}",
            text(&out)
        );
        // Applied again (a merge patch with the last-applied annotation): unchanged.
        let out = kubectl(&kc, &["apply", "-f", "-"], Some(VM));
        assert!(out.status.success(), "kubectl apply again: {}", text(&out));

        let bad = VM.replace("runStrategy: Halted", "runStrategy: Halted\n  bogus: 1");
        let bad = bad.replace("name: second", "name: third");
        let out = kubectl(&kc, &["apply", "-f", "-"], Some(&bad));
        assert!(!out.status.success());
        assert!(
            text(&out).contains("strict decoding error: unknown field \"spec.bogus\""),
            "{}",
            text(&out)
        );

        let out = kubectl(&kc, &["explain", "vm.spec"], None);
        assert!(out.status.success(), "kubectl explain: {}", text(&out));
        let t = text(&out);
        assert!(t.contains("KIND:") && t.contains("VirtualMachine"), "{t}");
        assert!(t.contains("runStrategy"), "{t}");
        let out = kubectl(&kc, &["explain", "pod.spec.containers.image"], None);
        assert!(out.status.success(), "kubectl explain pod: {}", text(&out));
    })
    .await
    .unwrap();
}
