//! `PUT .../virtualmachineinstances/guest/pause` through kube-apiserver, the whole way: the
//! apiserver's aggregator (APIServices of `bins/deploy/virt-api`) → virt-api (its daemon, in
//! this process, with its ServiceAccount and RBAC) → the virt-handler pod of the VMI's node over
//! mutual TLS (the binary, its serving certificate the one virt-api itself wrote into
//! `kubevirt/kvrs-virt-handler-certs`) → the launcher → the paused domain and the VMI's Paused
//! condition; `unpause` and `guestosinfo` likewise (`kubectl replace|get --raw`).
//!
//! The aggregator dials the Service's endpoints, which may not be loopback addresses: virt-api
//! listens on [`ADDRESS`], added to a dummy link (or `lo`) and removed after, as virt-api's own
//! `subresources` test does (other address, other link: the two may run at once).

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};
use support::*;

const LINK: &str = "kvrs-api1";
const ADDRESS: &str = "10.253.0.2";

struct LocalAddress {
    dev: &'static str,
}

fn ip(args: &[&str]) -> std::process::Output {
    Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("ip {args:?}: {e}"))
}

impl LocalAddress {
    fn create() -> LocalAddress {
        let _ = ip(&["link", "del", LINK]);
        let _ = ip(&["addr", "del", &format!("{ADDRESS}/32"), "dev", "lo"]);
        let dev = if ip(&["link", "add", LINK, "type", "dummy"]).status.success() {
            assert!(ip(&["link", "set", LINK, "up"]).status.success());
            LINK
        } else {
            "lo"
        };
        let guard = LocalAddress { dev };
        let out = ip(&["addr", "add", &format!("{ADDRESS}/32"), "dev", dev]);
        assert!(
            out.status.success(),
            "ip addr add {ADDRESS}/32 dev {dev}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        guard
    }
}

impl Drop for LocalAddress {
    fn drop(&mut self) {
        if self.dev == LINK {
            let _ = ip(&["link", "del", LINK]);
        } else {
            let _ = ip(&["addr", "del", &format!("{ADDRESS}/32"), "dev", self.dev]);
        }
    }
}

fn yaml_docs(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

#[test]
fn pause_unpause_and_guestosinfo_through_the_aggregator() {
    let _one = serial();
    let _address = LocalAddress::create();
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
    let api_port = std::net::TcpListener::bind((ADDRESS, 0))
        .and_then(|l| l.local_addr())
        .expect("a port on the dummy address")
        .port();
    let api_addr: SocketAddr = format!("{ADDRESS}:{api_port}").parse().unwrap();
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
        "spec": {"ports": [{"name": "https", "port": 443, "targetPort": api_port, "protocol": "TCP"}]}}));
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
        "subsets": [{"addresses": [{"ip": ADDRESS}],
            "ports": [{"name": "https", "port": api_port, "protocol": "TCP"}]}]}));
    cluster.apply(
        &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "kvrs-virt-api-1", "namespace": "kubevirt",
            "labels": {"kubernetes.io/service-name": "kvrs-virt-api"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ADDRESS], "conditions": {"ready": true}}],
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
    let dirs = NodeDirs::new("aggregated");
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
    let handler = dirs.start_handler(
        &cluster,
        0,
        &[
            "--console-server-port",
            &handler_port.to_string(),
            "--listen-address",
            "127.0.0.1",
            "--server-cert-dir",
            cert_dir.to_str().unwrap(),
        ],
    );
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "virt-handler-agg", "namespace": "kubevirt",
            "labels": {"kubevirt.io": "virt-handler"}},
        "spec": {"nodeName": NODE, "serviceAccountName": "kvrs-handler",
            "automountServiceAccountToken": false,
            "containers": [{"name": "virt-handler", "image": "kvrs/virt-handler:v0.1.0"}]}}));
    let out = c.kubectl([
        "patch",
        "pod",
        "virt-handler-agg",
        "-n",
        "kubevirt",
        "--subresource=status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"podIP":"127.0.0.1","podIPs":[{"ip":"127.0.0.1"}]}}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

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

    let (_, mut pod) = boot_guest_with_agent(&cluster, &dirs, &handler, 1, "guest");
    let ctx = || guest_context(&cluster, &handler, &pod, "guest");

    let path = |sub: &str| {
        format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/{NS}/virtualmachineinstances/guest/{sub}"
        )
    };
    let replace = |sub: &str| {
        let out = c.kubectl_with_stdin(["replace", "--raw", &path(sub), "-f", "-"], "{}");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    let (ok, err) = replace("pause");
    assert!(ok, "pause: {err}\n{}", ctx());
    let vmi = wait_for(
        "the Paused condition",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_some().then_some(v)
        },
        ctx,
    );
    assert_eq!(condition(&vmi, "Paused").unwrap()["reason"], "PausedByUser");
    let (ok, err) = replace("pause");
    assert!(!ok);
    assert!(err.contains("VMI is already paused"), "{err}");

    let (ok, err) = replace("unpause");
    assert!(ok, "unpause: {err}\n{}", ctx());
    wait_for(
        "the Paused condition removed",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_none().then_some(())
        },
        ctx,
    );

    let out = c.kubectl(["get", "--raw", &path("guestosinfo")]);
    assert!(
        out.status.success(),
        "guestosinfo: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let info: Value = serde_json::from_slice(&out.stdout).expect("guestosinfo JSON");
    assert_eq!(info["os"]["id"], kvrs_test_guest::OS_ID, "{info}");
    assert_eq!(
        info["os"]["prettyName"],
        kvrs_test_guest::OS_PRETTY_NAME,
        "{info}"
    );

    pod.delete();
    let _ = stop_api.send(());
    let ended = rt.block_on(api).expect("virt-api's task");
    assert!(ended.is_ok(), "virt-api: {ended:?}");
}
