//! What the controller benchmarks share: the cluster helpers, the small VM they create, the
//! API server's request counters and metadata watches that count objects as they appear.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, GroupVersionKind, PartialObjectMeta};
use kube::runtime::watcher;
use kvrs_test_cluster::TestCluster;
use serde_json::{Value, json};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The controller process; killed on drop (also on an error path).
pub struct ControllerProc(pub Child);

impl Drop for ControllerProc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn kubectl_ok(cluster: &TestCluster, args: &[&str], stdin: Option<&str>) -> Result<Vec<u8>> {
    let out = match stdin {
        Some(s) => cluster.kubectl_with_stdin(args, s),
        None => cluster.kubectl(args),
    };
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// The small VM of the e2e tests (`support::vm`), in namespace `ns`.
pub fn vm(name: &str, ns: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "domain": {
                        "memory": {"guest": "128Mi"},
                        "devices": {
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "masquerade": {}}],
                        },
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "terminationGracePeriodSeconds": 0,
                    "volumes": [{"name": "root",
                        "containerDisk": {"image": "quay.io/containerdisks/busybox:1.36"}}],
                },
            },
        },
    })
}

pub fn kubevirt_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", kind))
}

/// `apiserver_request_total` by (verb, group, resource, subresource), summed over the other
/// labels (code, scope, component, ...).
pub type Requests = BTreeMap<(String, String, String, String), f64>;

pub fn request_totals(cluster: &TestCluster) -> Result<Requests> {
    let text = kubectl_ok(cluster, &["get", "--raw", "/metrics"], None)?;
    let text = String::from_utf8_lossy(&text);
    let mut out = Requests::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let mut get = BTreeMap::new();
        for pair in labels.split("\",") {
            if let Some((k, v)) = pair.split_once("=\"") {
                get.insert(k, v.trim_end_matches('"'));
            }
        }
        let l = |k: &str| get.get(k).copied().unwrap_or_default().to_string();
        *out.entry((l("verb"), l("group"), l("resource"), l("subresource")))
            .or_default() += value;
    }
    Ok(out)
}

pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "APPLY" | "DELETECOLLECTION"
    )
}

/// Write deltas between two samples, without Lease writes.
#[allow(dead_code)] // burst's; side_by_side keeps the resource names apart
pub fn write_deltas(before: &Requests, after: &Requests) -> Requests {
    after
        .iter()
        .filter(|((verb, _, resource, _), _)| is_write(verb) && resource != "leases")
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or_default()))
        .filter(|(_, d)| *d > 0.0)
        .collect()
}

/// Names seen by a metadata watch, and when the count first reached the target.
#[derive(Default)]
pub struct Seen {
    pub names: HashSet<String>,
    pub reached: Option<Instant>,
}

pub fn watch_names<K>(
    api: Api<PartialObjectMeta<K>>,
    cfg: watcher::Config,
    target: usize,
) -> Arc<Mutex<Seen>>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(ev)) => {
                    let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                    match ev {
                        watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                            if let Some(n) = o.metadata.name {
                                s.names.insert(n);
                            }
                        }
                        watcher::Event::Delete(o) => {
                            if let Some(n) = o.metadata.name {
                                s.names.remove(&n);
                            }
                        }
                        _ => {}
                    }
                    if s.reached.is_none() && s.names.len() >= target {
                        s.reached = Some(Instant::now());
                    }
                }
                Ok(None) => break,
                // The watcher retries by itself on the next poll; don't spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    seen
}

pub fn count(seen: &Mutex<Seen>) -> (usize, Option<Instant>) {
    let s = seen.lock().unwrap_or_else(|e| e.into_inner());
    (s.names.len(), s.reached)
}

pub fn controller_log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

pub fn http_status(port: u16, path: &str) -> u16 {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return 0;
    }
    let mut text = String::new();
    s.read_to_string(&mut text).ok();
    text.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

pub fn writes_of(before: &Requests, after: &Requests) -> f64 {
    write_deltas(before, after).values().sum()
}
