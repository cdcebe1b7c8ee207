//! What the real-apiserver tests of virt-api need: the repository's files, kubectl, waiting for
//! a condition, and virt-api run in the test's process (its library's `run`, stopped through the
//! shutdown future).

#![allow(dead_code)] // each test binary uses its part

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use kvrs_test_cluster::TestCluster;
use kvrs_virt_api::Flags;
use serde::Deserialize;
use serde_json::Value;

/// The repository's root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first YAML document of `path`.
pub fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc = serde_norway::Deserializer::from_str(&text)
        .next()
        .expect("a document");
    Value::deserialize(doc).expect("yaml")
}

/// kubectl with `stdin`; (success, stdout, stderr).
pub fn kubectl(
    cluster: &TestCluster,
    args: &[&str],
    stdin: Option<&str>,
) -> (bool, String, String) {
    let out = match stdin {
        Some(s) => cluster.kubectl_with_stdin(args, s),
        None => cluster.kubectl(args),
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// kubectl that must succeed; its stdout.
pub fn must(cluster: &TestCluster, args: &[&str], stdin: Option<&str>) -> String {
    let (ok, out, err) = kubectl(cluster, args, stdin);
    assert!(ok, "kubectl {args:?}: {err}");
    out
}

/// `kubectl create` of `object`.
pub fn create(cluster: &TestCluster, object: &Value) {
    must(cluster, &["create", "-f", "-"], Some(&object.to_string()));
}

/// `kubectl get ARGS -o json`, `None` when kubectl fails (e.g. not found).
pub fn get_json(cluster: &TestCluster, args: &[&str]) -> Option<Value> {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    let (ok, out, _) = kubectl(cluster, &all, None);
    ok.then(|| serde_json::from_str(&out).expect("json"))
}

/// Polls `f` until it gives a value; fails naming `what` after `timeout`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The tokio runtime virt-api runs on in a test (two workers).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A free loopback address for virt-api to listen on.
pub fn loopback_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], kvrs_test_cluster::free_loopback_port()))
}

/// The namespace `kubevirt` and its KubeVirt CR with an empty configuration (what virt-api
/// reads its cluster configuration from).
pub fn kubevirt_cr(cluster: &TestCluster) {
    must(cluster, &["create", "namespace", "kubevirt"], None);
    must(
        cluster,
        &["create", "-f", "-"],
        Some(
            &serde_json::json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": {}}})
            .to_string(),
        ),
    );
}

/// virt-api running in this process.
pub struct VirtApi {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl VirtApi {
    /// virt-api listening on `addr` with the client of `kubeconfig` and the `extra` flags;
    /// returns once its `/healthz` answers over TLS.
    pub fn start(
        rt: &tokio::runtime::Runtime,
        kubeconfig: &Path,
        addr: SocketAddr,
        extra: &[&str],
    ) -> VirtApi {
        let mut argv = vec!["virt-api".to_string(), "--listen".into(), addr.to_string()];
        argv.extend(extra.iter().map(|s| s.to_string()));
        let flags = Flags::try_parse_from(&argv).expect("flags");
        let client = rt
            .block_on(kvrs_runtime::kube::setup::connect_as(
                "virt-api",
                Some(kubeconfig),
            ))
            .expect("a client");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let done = rt.spawn(async move {
            let shutdown = async move {
                let _ = stopped.await;
            };
            if let Err(e) = kvrs_virt_api::run(flags, client, shutdown).await {
                panic!("virt-api: {e:#}");
            }
        });
        wait_for("virt-api's /healthz", Duration::from_secs(60), || {
            let out = std::process::Command::new("curl")
                .args(["-sk", "-o", "/dev/null", "-w", "%{http_code}"])
                .arg(format!("https://{addr}/healthz"))
                .output()
                .ok()?;
            (out.stdout == b"200").then_some(())
        });
        VirtApi {
            stop: Some(stop),
            done: Some(done),
        }
    }

    /// Stops it and waits until it has ended.
    pub fn stop(mut self, rt: &tokio::runtime::Runtime) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            rt.block_on(d).expect("virt-api ended");
        }
    }
}
