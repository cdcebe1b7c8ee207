//! The VMI subresources the whole way, as a user reaches them: kube-apiserver's aggregator (the
//! APIServices of `bins/deploy/virt-api`) → virt-api's daemon (in this process, with its
//! ServiceAccount and RBAC) → the virt-handler binary's REST server over mutual TLS (its
//! serving certificate the one virt-api itself wrote into `kubevirt/kvrs-virt-handler-certs`).
//! `rest_aggregated.rs` drives it with kubectl and raw clients, `virtctl.rs` with KubeVirt's own
//! virtctl.
//!
//! The aggregator dials the Service's endpoints, which may not be loopback addresses: virt-api
//! listens on an address of its own, added to a dummy link (or `lo`) and removed after, as
//! virt-api's own `subresources` test does (each test its own address and link, so they may run
//! at once).

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Cluster, Handler, NodeDirs, condition, root, wait_for};

/// An address of this machine for virt-api, on a dummy link (or on `lo` where dummy links
/// cannot be made), removed when dropped.
pub struct LocalAddress {
    link: &'static str,
    address: &'static str,
    dev: &'static str,
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"))
}

impl LocalAddress {
    /// Adds `address` on a new dummy link `link` (or on `lo`).
    pub fn create(link: &'static str, address: &'static str) -> LocalAddress {
        let _ = ip(&["link", "del", link]);
        let _ = ip(&["addr", "del", &format!("{address}/32"), "dev", "lo"]);
        let dev = if ip(&["link", "add", link, "type", "dummy"]).status.success() {
            assert!(ip(&["link", "set", link, "up"]).status.success());
            link
        } else {
            "lo"
        };
        let guard = LocalAddress { link, address, dev };
        let out = ip(&["addr", "add", &format!("{address}/32"), "dev", dev]);
        assert!(
            out.status.success(),
            "ip addr add {address}/32 dev {dev}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        if self.dev == self.link {
            let _ = ip(&["link", "del", self.link]);
        } else {
            let _ = ip(&[
                "addr",
                "del",
                &format!("{}/32", self.address),
                "dev",
                self.dev,
            ]);
        }
    }
}

/// The YAML documents of a manifest file.
pub fn yaml_docs(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

/// virt-api's daemon task and the sender that stops it.
type ApiTask = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), String>>,
);

/// The cluster with virt-api behind the aggregator and this node's virt-handler serving its
/// REST API, both APIServices `Available`. Fields drop in order: the handler, the node's
/// directories, virt-api's runtime, the cluster, the address.
pub struct Aggregated {
    pub handler: Handler,
    pub dirs: NodeDirs,
    /// The runtime virt-api's daemon runs on (tests may use it for their own clients).
    pub rt: tokio::runtime::Runtime,
    api: Option<ApiTask>,
    pub cluster: Cluster,
    _address: LocalAddress,
}

impl Aggregated {
    /// Starts it all: virt-api listening on `address` (added to dummy link `link`), the node's
    /// directories tagged `tag` ([`NodeDirs::new`]).
    pub fn start(link: &'static str, address: &'static str, tag: &str) -> Aggregated {
        let local = LocalAddress::create(link, address);
        let cluster = Cluster::start();
        let c = &cluster.cluster;
        let deploy = root().join("bins/deploy/virt-api");
        for f in [
            "serviceaccount.yaml",
            "clusterrole.yaml",
            "clusterrolebinding.yaml",
            "role.yaml",
            "rolebinding.yaml",
            "auth-reader-rolebinding.yaml",
        ] {
            c.apply_path(&deploy.join(f))
                .unwrap_or_else(|e| panic!("{f}: {e}"));
        }
        for doc in yaml_docs(&deploy.join("apiservice.yaml")) {
            cluster.apply(&doc);
        }
        cluster.apply(&json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {"configuration": {}}}));
        let api_port = std::net::TcpListener::bind((address, 0))
            .and_then(|l| l.local_addr())
            .expect("a port on the dummy address")
            .port();
        let api_addr: SocketAddr = format!("{address}:{api_port}").parse().unwrap();
        cluster.apply(&json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": api_port, "protocol": "TCP"}]}}));
        cluster.apply(&json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
            "subsets": [{"addresses": [{"ip": address}],
                "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}]}]}));
        cluster.apply(
            &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kvrs-virt-api-1", "namespace": "kubevirt",
                "labels": {"kubernetes.io/service-name": "kvrs-virt-api"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}]}),
        );

        // virt-api's daemon, as its Deployment runs it, with its ServiceAccount.
        let handler_port = kvrs_test_cluster::free_loopback_port();
        let token = c.service_account_token("kubevirt", "kvrs-virt-api");
        let api_kubeconfig = c.kubeconfig_for_token(&token);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let flags = kvrs_virt_api::Flags::try_parse_from([
            "virt-api",
            "--listen",
            &api_addr.to_string(),
            "--console-server-port",
            &handler_port.to_string(),
        ])
        .expect("flags");
        let client = rt
            .block_on(kvrs_runtime::kube::setup::connect_as(
                "virt-api",
                Some(&api_kubeconfig),
            ))
            .expect("virt-api's client");
        let (stop_api, api_stopped) = tokio::sync::oneshot::channel::<()>();
        let api = rt.spawn(async move {
            let shutdown = async move {
                let _ = api_stopped.await;
            };
            kvrs_virt_api::run(flags, client, shutdown)
                .await
                .map(drop)
                .map_err(|e| format!("{e:#}"))
        });

        // The handler's certificate, as virt-api wrote it and the DaemonSet mounts it.
        let secret = wait_for(
            "virt-api's Secret kvrs-virt-handler-certs",
            Duration::from_secs(60),
            || cluster.get("secret", Some("kubevirt"), "kvrs-virt-handler-certs"),
            || "virt-api wrote no handler Secret".into(),
        );
        let dirs = NodeDirs::new(tag);
        let cert_dir = dirs.root.join("certs");
        std::fs::create_dir_all(&cert_dir).unwrap();
        for file in ["tls.crt", "tls.key", "ca.crt"] {
            let b64 = secret["data"][file].as_str().expect(file);
            let out = Command::new("sh")
                .args(["-c", &format!("echo '{b64}' | base64 -d")])
                .output()
                .unwrap();
            assert!(out.status.success());
            std::fs::write(cert_dir.join(file), out.stdout).unwrap();
        }
        let handler =
            dirs.start_rest_handler(&cluster, handler_port, &cert_dir, "virt-handler-agg");

        for name in [
            "v1.subresources.kubevirt.io",
            "v1alpha3.subresources.kubevirt.io",
        ] {
            wait_for(
                &format!("APIService {name} Available"),
                Duration::from_secs(90),
                || {
                    let svc = cluster.get("apiservice", None, name)?;
                    condition(&svc, "Available")
                        .is_some_and(|c| c["status"] == "True")
                        .then_some(())
                },
                || "not available".into(),
            );
        }
        Aggregated {
            handler,
            dirs,
            rt,
            api: Some((stop_api, api)),
            cluster,
            _address: local,
        }
    }

    /// Stops virt-api's daemon and checks that it ended without an error.
    pub fn stop_api(&mut self) {
        let Some((stop, task)) = self.api.take() else {
            return;
        };
        let _ = stop.send(());
        let ended = self.rt.block_on(task).expect("virt-api's task");
        assert!(ended.is_ok(), "virt-api: {ended:?}");
    }
}
