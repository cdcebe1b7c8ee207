//! What both real-apiserver tests of virt-api need: waiting for a condition, and virt-api run
//! in the test's process (its library's `run`, stopped through the shutdown future).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use kvrs_virt_api::Flags;

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
