//! virt-api as the aggregated API `subresources.kubevirt.io` behind a real kube-apiserver:
//! the APIServices of `bins/deploy/virt-api` point at the `kvrs-virt-api` Service, the
//! apiserver's aggregator (`--enable-aggregator-routing`, its front-proxy client certificate
//! signed by the requestheader CA) proxies `PUT .../virtualmachines/NAME/start|stop|restart`
//! to virt-api running in this process, and the VM changes as KubeVirt v1.9.0 changes it.
//!
//! The aggregator dials the Service's endpoints, and an endpoint may not be a loopback
//! address: virt-api listens on 10.253.0.1, an address this test adds to a dummy link (or to
//! `lo` where the kernel has no dummy links) and removes (a Drop guard, also on failure). The Service has no selector; its Endpoints and
//! EndpointSlice are written here (no controller-manager in this cluster).
//!
//! `migrate` creates KubeVirt's VirtualMachineInstanceMigration for the running VMI (through
//! `kubectl replace --raw` and KubeVirt's own `virtctl migrate`, from `scripts/virtctl-harness.sh`),
//! refuses as KubeVirt refuses, and virt-controller's migration controller (run here at the end)
//! takes the migrations up; `expand-spec` and `expand-vm-spec` (and `virtctl expand --vm`) answer
//! the VM with its instancetype applied.
//!
//! `addvolume` and `removevolume` (KubeVirt's own `virtctl addvolume VM --volume-name=CLAIM`)
//! change the VM's template, refuse a volume already attached with KubeVirt's message, and
//! fall back to a VMI without a VM.
//!
//! Also checked: the apiserver's discovery lists the group; a request straight to virt-api
//! without the front-proxy certificate is refused (401); a ServiceAccount bound to
//! `kvrs-kubevirt.io:view` may not start a VM (403 from the apiserver's RBAC), one bound to
//! `kvrs-kubevirt.io:edit` may.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use clap::Parser;
use kvrs_test_cluster::{Options, TestCluster};
use serde::Deserialize;
use serde_json::{Value, json};
use support::{VirtApi, create, kubectl, must, root, runtime, wait_for};

const LINK: &str = "kvrs-api0";
const ADDRESS: &str = "10.253.0.1";

/// `virtctl --kubeconfig KC -n default ARGS`: (success, stdout, stderr).
fn virtctl(bin: &Path, kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-n", "default"])
        .args(args)
        .output()
        .expect("virtctl-harness");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// [`ADDRESS`] on a dummy link [`LINK`] (or, where the kernel has no dummy links, on `lo`:
/// still not a loopback address to the apiserver's validation), removed when dropped.
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
        // Left over from a killed run.
        let _ = ip(&["link", "del", LINK]);
        let _ = ip(&["addr", "del", &format!("{ADDRESS}/32"), "dev", "lo"]);
        let dev = if ip(&["link", "add", LINK, "type", "dummy"]).status.success() {
            let up = ip(&["link", "set", LINK, "up"]);
            assert!(
                up.status.success(),
                "{}",
                String::from_utf8_lossy(&up.stderr)
            );
            LINK
        } else {
            "lo"
        };
        let guard = LocalAddress { dev };
        let out = ip(&["addr", "add", &format!("{ADDRESS}/32"), "dev", dev]);
        assert!(
            out.status.success(),
            "ip addr add {ADDRESS}/32 dev {dev} (needs CAP_NET_ADMIN): {}",
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

/// A free TCP port on [`ADDRESS`].
fn free_port() -> u16 {
    std::net::TcpListener::bind((ADDRESS, 0))
        .and_then(|l| l.local_addr())
        .expect("a port on the dummy address")
        .port()
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).expect("yaml"))
        .filter(|v| !v.is_null())
        .collect()
}

fn get_json(cluster: &TestCluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend(["-o", "json"]);
    serde_json::from_str(&must(cluster, &all, None)).expect("json")
}

/// `PUT url` with `body` through curl (`auth`: extra arguments, e.g. a bearer token or the CA):
/// the HTTP code and the JSON answer (`Null` when empty).
fn put(url: &str, body: &str, auth: &[String]) -> (u16, Value) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", "-X", "PUT"])
        .args([
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
        ])
        .args(auth)
        .arg(url)
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (json, code) = text.rsplit_once('\n').expect("a status code line");
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(json).unwrap_or(Value::Null),
    )
}

/// The Service the APIServices name, its endpoints at `addr` (port named as the Service's).
fn service_at(cluster: &TestCluster, addr: SocketAddr) {
    let port = addr.port();
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}]}}),
    );
    create(
        cluster,
        &json!({"apiVersion": "v1", "kind": "Endpoints",
            "metadata": {"name": "kvrs-virt-api", "namespace": "kubevirt"},
            "subsets": [{"addresses": [{"ip": ADDRESS}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]}),
    );
    create(
        cluster,
        &json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kvrs-virt-api-1", "namespace": "kubevirt",
                "labels": {"kubernetes.io/service-name": "kvrs-virt-api"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [ADDRESS], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}),
    );
}

fn vm_runstrategy(cluster: &TestCluster, name: &str) -> String {
    get_json(cluster, &["vm", name, "-n", "default"])["spec"]["runStrategy"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn kubevirts_subresources_through_the_aggregator() {
    let virtctl_bin = kvrs_test_guest::virtctl::harness();
    let _address = LocalAddress::create();
    let cluster = TestCluster::start(Options::apiserver_only()).expect("kube-apiserver and etcd");
    cluster
        .install_kubevirt_crds(&root().join("bins/deploy"))
        .expect("CRDs");
    must(&cluster, &["create", "namespace", "kubevirt"], None);
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
            "spec": {"configuration": {}}}),
    );
    let deploy = root().join("bins/deploy/virt-api");
    for file in ["apiservice.yaml", "aggregated-clusterroles.yaml"] {
        for doc in yaml_docs(&deploy.join(file)) {
            create(&cluster, &doc);
        }
    }
    let addr: SocketAddr = format!("{ADDRESS}:{}", free_port()).parse().unwrap();
    service_at(&cluster, addr);

    let rt = runtime();
    let api = VirtApi::start(&rt, cluster.admin_kubeconfig_path(), addr, &[]);

    // --- the APIServices get virt-api's CA and become available ---
    for name in [
        "v1.subresources.kubevirt.io",
        "v1alpha3.subresources.kubevirt.io",
    ] {
        wait_for(
            &format!("APIService {name} Available"),
            Duration::from_secs(90),
            || {
                let svc = get_json(&cluster, &["apiservice", name]);
                let available = svc["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True");
                (svc["spec"]["caBundle"].is_string() && available).then_some(())
            },
        );
    }

    // --- discovery, through the apiserver ---
    let groups: Value =
        serde_json::from_str(&must(&cluster, &["get", "--raw", "/apis"], None)).unwrap();
    let group = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "subresources.kubevirt.io")
        .unwrap_or_else(|| {
            panic!("the apiserver's /apis lists subresources.kubevirt.io: {groups}")
        });
    assert_eq!(group["preferredVersion"]["version"], "v1");
    let list: Value = serde_json::from_str(&must(
        &cluster,
        &["get", "--raw", "/apis/subresources.kubevirt.io/v1"],
        None,
    ))
    .unwrap();
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for r in [
        "virtualmachines/start",
        "virtualmachines/stop",
        "virtualmachines/restart",
    ] {
        assert!(names.contains(&r), "{r} in {names:?}");
    }
    let health = must(
        &cluster,
        &["get", "--raw", "/apis/subresources.kubevirt.io/v1/healthz"],
        None,
    );
    assert!(health.contains("ok"), "{health}");

    // --- start / stop / restart as KubeVirt does them ---
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}}}),
    );
    let sub = |verb: &str| {
        format!("/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/{verb}")
    };
    let replace = |verb: &str, body: &str| {
        kubectl(
            &cluster,
            &["replace", "--raw", &sub(verb), "-f", "-"],
            Some(body),
        )
    };
    let (ok, _, err) = replace("start", "{}");
    assert!(ok, "start: {err}");
    assert_eq!(vm_runstrategy(&cluster, "vm1"), "Always");
    let (ok, _, err) = replace("start", "{}");
    assert!(!ok);
    assert!(
        err.contains("Always does not support manual start requests"),
        "a second start: {err}"
    );
    // No VMI: a restart is refused as KubeVirt refuses it.
    let (ok, _, err) = replace("restart", "{}");
    assert!(!ok);
    assert!(err.contains("VM is not running: Halted"), "restart: {err}");
    let (ok, _, err) = replace("stop", r#"{"gracePeriod": 0}"#);
    assert!(ok, "stop: {err}");
    assert_eq!(vm_runstrategy(&cluster, "vm1"), "Halted");
    let (ok, _, err) = replace("stop", "{}");
    assert!(!ok);
    assert!(err.contains("VM is not running"), "a second stop: {err}");
    // Manual with a VMI: restart asks virt-controller for stop (that VMI) + start.
    must(
        &cluster,
        &[
            "patch",
            "vm",
            "vm1",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"runStrategy":"Manual"}}"#,
        ],
        None,
    );
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1", "namespace": "default"},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}),
    );
    let vmi_uid = get_json(&cluster, &["vmi", "vm1", "-n", "default"])["metadata"]["uid"].clone();
    let (ok, _, err) = replace("restart", "{}");
    assert!(ok, "restart: {err}");
    let vm = get_json(&cluster, &["vm", "vm1", "-n", "default"]);
    assert_eq!(
        vm["status"]["stateChangeRequests"],
        json!([{"action": "Stop", "uid": vmi_uid}, {"action": "Start"}]),
        "{vm}"
    );
    assert_eq!(vm["spec"]["runStrategy"], "Manual");
    // A dry run changes nothing.
    let (ok, _, err) = replace("stop", r#"{"dryRun": ["All"]}"#);
    assert!(ok, "dry-run stop: {err}");
    assert_eq!(
        get_json(&cluster, &["vm", "vm1", "-n", "default"])["status"]["stateChangeRequests"],
        vm["status"]["stateChangeRequests"]
    );

    // --- the VMI subresources: virt-api's preconditions through the aggregator (the calls
    // on to a real virt-handler and its launcher: bins/virt-handler/tests/rest.rs) ---
    let vmi_sub = |verb: &str| {
        format!(
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/vm1/{verb}"
        )
    };
    let (ok, _, err) = kubectl(
        &cluster,
        &["replace", "--raw", &vmi_sub("pause"), "-f", "-"],
        Some("{}"),
    );
    assert!(!ok);
    assert!(
        err.contains("Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"vm1\": VM is not running"),
        "pause of a VMI that is not running: {err}"
    );
    let (ok, _, err) = kubectl(&cluster, &["get", "--raw", &vmi_sub("guestosinfo")], None);
    assert!(!ok);
    assert!(err.contains("VMI is not running"), "guestosinfo: {err}");
    // Running on a node without a virt-handler pod: KubeVirt's 400.
    must(
        &cluster,
        &[
            "patch",
            "vmi",
            "vm1",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Running","nodeName":"node-without-handler"}}"#,
        ],
        None,
    );
    let (ok, _, err) = kubectl(
        &cluster,
        &["replace", "--raw", &vmi_sub("pause"), "-f", "-"],
        Some("{}"),
    );
    assert!(!ok);
    assert!(
        err.contains("No virt-handler on node node-without-handler found"),
        "pause without a handler: {err}"
    );
    let (ok, _, err) = kubectl(
        &cluster,
        &["replace", "--raw", &vmi_sub("unpause"), "-f", "-"],
        Some("{}"),
    );
    assert!(!ok);
    assert!(err.contains("VMI is not paused"), "unpause: {err}");
    let (ok, _, err) = kubectl(
        &cluster,
        &[
            "replace",
            "--raw",
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachineinstances/nothing/pause",
            "-f",
            "-",
        ],
        Some("{}"),
    );
    assert!(!ok);
    assert!(
        err.contains("virtualmachineinstance.kubevirt.io \"nothing\" not found"),
        "pause of a missing VMI: {err}"
    );

    // --- migrate: a VirtualMachineInstanceMigration for the running VMI ---
    let migrations = || {
        get_json(&cluster, &["vmim", "-n", "default"])["items"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    let (ok, _, err) = replace("migrate", r#"{"dryRun": ["All"]}"#);
    assert!(ok, "dry-run migrate: {err}");
    assert!(migrations().is_empty(), "a dry run creates nothing");
    let (ok, _, err) = replace("migrate", r#"{"addedNodeSelector": {"zone": "b"}}"#);
    assert!(ok, "migrate: {err}");
    let created = migrations();
    assert_eq!(created.len(), 1, "{created:?}");
    let m = &created[0];
    assert_eq!(m["metadata"]["generateName"], "kubevirt-migrate-vm-");
    assert!(
        m["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("kubevirt-migrate-vm-")
    );
    assert_eq!(
        m["spec"],
        json!({"vmiName": "vm1", "addedNodeSelector": {"zone": "b"}})
    );
    // KubeVirt's virtctl: `virtctl migrate` (its dry run first) through the aggregator.
    let kubeconfig = cluster.admin_kubeconfig_path();
    let (ok, out, err) = virtctl(&virtctl_bin, kubeconfig, &["migrate", "vm1", "--dry-run"]);
    assert!(ok, "virtctl migrate --dry-run: {out}{err}");
    assert_eq!(migrations().len(), 1, "a dry run creates nothing");
    let (ok, out, err) = virtctl(&virtctl_bin, kubeconfig, &["migrate", "vm1"]);
    assert!(ok, "virtctl migrate: {out}{err}");
    assert!(out.contains("VM vm1 was scheduled to migrate"), "{out}");
    let created = migrations();
    assert_eq!(created.len(), 2, "{created:?}");
    assert!(
        created
            .iter()
            .any(|m| m["spec"] == json!({"vmiName": "vm1"})),
        "{created:?}"
    );
    let (ok, _, err) = replace("migrate", "{nope");
    assert!(!ok);
    assert!(
        err.contains("Can not unmarshal Request body to struct"),
        "a bad migrate body: {err}"
    );
    let (ok, _, err) = kubectl(
        &cluster,
        &[
            "replace",
            "--raw",
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/nothing/migrate",
            "-f",
            "-",
        ],
        Some("{}"),
    );
    assert!(!ok);
    assert!(
        err.contains("virtualmachine.kubevirt.io \"nothing\" not found"),
        "migrate of a missing VM: {err}"
    );
    // A VMI that is not Running: KubeVirt's 409.
    must(
        &cluster,
        &[
            "patch",
            "vmi",
            "vm1",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Scheduling"}}"#,
        ],
        None,
    );
    let (ok, _, err) = replace("migrate", "{}");
    assert!(!ok);
    assert!(
        err.contains(
            "Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": VM is not running"
        ),
        "migrate of a VMI that is not running: {err}"
    );
    assert_eq!(migrations().len(), 2, "a refused migrate creates nothing");

    // --- expand-spec: the instancetype and preference applied, the matchers dropped ---
    create(
        &cluster,
        &json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "u1.small"},
            "spec": {"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}}}),
    );
    let typed_vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm3", "namespace": "default"},
        "spec": {"runStrategy": "Halted", "instancetype": {"name": "u1.small"},
            "template": {"spec": {"domain": {"devices": {}}}}}});
    create(&cluster, &typed_vm);
    let expanded: Value = serde_json::from_str(&must(
        &cluster,
        &[
            "get",
            "--raw",
            "/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm3/expand-spec",
        ],
        None,
    ))
    .unwrap();
    assert!(expanded["spec"].get("instancetype").is_none(), "{expanded}");
    assert_eq!(expanded["metadata"]["name"], "vm3");
    let domain = &expanded["spec"]["template"]["spec"]["domain"];
    assert_eq!(domain["cpu"]["sockets"], 2, "{expanded}");
    assert_eq!(domain["memory"]["guest"], "2Gi", "{expanded}");
    // `virtctl expand --vm` prints the same expansion.
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["expand", "--vm", "vm3", "-o", "json"],
    );
    assert!(ok, "virtctl expand: {out}{err}");
    let printed: Value = serde_json::from_str(&out).expect("virtctl's JSON");
    assert_eq!(
        printed["spec"]["template"]["spec"]["domain"]["cpu"]["sockets"], 2,
        "{out}"
    );
    assert!(printed["spec"].get("instancetype").is_none(), "{out}");
    // A VM without references comes back as stored.
    let plain: Value = serde_json::from_str(&must(
        &cluster,
        &["get", "--raw", &sub("expand-spec")],
        None,
    ))
    .unwrap();
    assert_eq!(plain["spec"]["runStrategy"], "Manual");
    // A VM in the body, at the namespace's expand-vm-spec.
    let expand_url = "/apis/subresources.kubevirt.io/v1/namespaces/default/expand-vm-spec";
    let mut sent = typed_vm.clone();
    sent["metadata"] = json!({"name": "not-stored"});
    let out = must(
        &cluster,
        &["replace", "--raw", expand_url, "-f", "-"],
        Some(&sent.to_string()),
    );
    let out: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["metadata"]["namespace"], "default");
    assert_eq!(
        out["spec"]["template"]["spec"]["domain"]["cpu"]["sockets"], 2,
        "{out}"
    );
    sent["metadata"]["namespace"] = json!("elsewhere");
    let (ok, _, err) = kubectl(
        &cluster,
        &["replace", "--raw", expand_url, "-f", "-"],
        Some(&sent.to_string()),
    );
    assert!(!ok);
    assert!(
        err.contains("VM namespace must be empty or default"),
        "expand-vm-spec in another namespace: {err}"
    );
    sent["metadata"] = json!({"name": "x"});
    sent["spec"]["instancetype"] = json!({"name": "missing"});
    let (ok, _, err) = kubectl(
        &cluster,
        &["replace", "--raw", expand_url, "-f", "-"],
        Some(&sent.to_string()),
    );
    assert!(!ok);
    assert!(
        err.contains("missing") && err.contains("not found"),
        "expand-vm-spec with a missing instancetype: {err}"
    );

    // --- addvolume / removevolume with KubeVirt's own virtctl: the VM's template changes
    // (DeclarativeHotplugVolumes), a volume already there is refused, a VMI without a VM is
    // changed itself ---
    must(
        &cluster,
        &["create", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "claim1", "namespace": "default"},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "16Mi"}}}})
            .to_string(),
        ),
    );
    let template =
        || get_json(&cluster, &["vm", "vm1", "-n", "default"])["spec"]["template"]["spec"].clone();
    let before = template();
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["addvolume", "vm1", "--volume-name=claim1", "--dry-run"],
    );
    assert!(ok, "virtctl addvolume --dry-run: {out}{err}");
    assert_eq!(template(), before, "a dry run changes nothing");
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["addvolume", "vm1", "--volume-name=claim1"],
    );
    assert!(ok, "virtctl addvolume: {out}{err}");
    assert_eq!(
        out.trim_end(),
        "Successfully submitted add volume request to VM vm1 for volume claim1"
    );
    let added = template();
    assert_eq!(
        added["volumes"],
        json!([{"name": "claim1", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}]),
        "{added}"
    );
    assert_eq!(
        added["domain"]["devices"]["disks"],
        json!([{"name": "claim1", "serial": "claim1", "disk": {"bus": "scsi"}}]),
        "{added}"
    );
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["addvolume", "vm1", "--volume-name=claim1"],
    );
    assert!(!ok, "a second addvolume: {out}");
    assert_eq!(
        err.trim_end(),
        "error adding volume, Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": Unable to add volume [claim1] because volume with that name already exists"
    );
    assert_eq!(template(), added, "a refused add changes nothing");
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["removevolume", "vm1", "--volume-name=claim1"],
    );
    assert!(ok, "virtctl removevolume: {out}{err}");
    assert_eq!(
        out.trim_end(),
        "Successfully submitted remove volume request to VM vm1 for volume claim1"
    );
    let removed = template();
    assert_eq!(removed["volumes"], json!([]), "{removed}");
    assert_eq!(
        removed["domain"]["devices"]["disks"],
        json!([]),
        "{removed}"
    );
    let (ok, _, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["removevolume", "vm1", "--volume-name=claim1"],
    );
    assert!(!ok);
    assert!(
        err.contains("error removing volume, Operation cannot be fulfilled on virtualmachine.kubevirt.io \"vm1\": Unable to remove volume [claim1] because it does not exist"),
        "{err}"
    );
    // No VM of that name: virtctl falls back to the VMI, which takes the volume into its spec
    // once running.
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "solo", "namespace": "default"},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}),
    );
    let (ok, _, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["addvolume", "solo", "--volume-name=claim1"],
    );
    assert!(!ok);
    assert!(
        err.contains("Operation cannot be fulfilled on virtualmachineinstance.kubevirt.io \"solo\": VMI is not running"),
        "{err}"
    );
    must(
        &cluster,
        &[
            "patch",
            "vmi",
            "solo",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ],
        None,
    );
    let (ok, out, err) = virtctl(
        &virtctl_bin,
        kubeconfig,
        &["addvolume", "solo", "--volume-name=claim1"],
    );
    assert!(ok, "virtctl addvolume of a VMI: {out}{err}");
    let solo = get_json(&cluster, &["vmi", "solo", "-n", "default"]);
    assert_eq!(
        solo["spec"]["volumes"],
        json!([{"name": "claim1", "persistentVolumeClaim": {"claimName": "claim1", "hotpluggable": true}}]),
        "{solo}"
    );

    // --- straight to virt-api, without the aggregator's certificate: 401 ---
    let direct = format!(
        "https://{addr}/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm1/start"
    );
    let (code, status) = put(&direct, "{}", &["-k".to_string()]);
    assert_eq!(code, 401, "a direct request: {status}");
    assert_eq!(status["reason"], "Unauthorized");
    // ... even claiming a user in the headers.
    let (code, _) = put(
        &direct,
        "{}",
        &[
            "-k".into(),
            "-H".into(),
            "X-Remote-User: system:admin".into(),
        ],
    );
    assert_eq!(code, 401);

    // A certificate signed by the requestheader CA but not named front-proxy-client: 403.
    let pki = cluster.dir().join("pki");
    let p = |n: &str| pki.join(n).display().to_string();
    for args in [
        vec![
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &p("other.key"),
            "-out",
            &p("other.csr"),
            "-subj",
            "/CN=not-the-front-proxy",
        ],
        vec![
            "x509",
            "-req",
            "-in",
            &p("other.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-set_serial",
            "99",
            "-days",
            "1",
            "-extfile",
            &p("client.ext"),
            "-out",
            &p("other.crt"),
        ],
    ] {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let with_cert = |name: &str, user: bool| {
        let mut args = vec![
            "-k".to_string(),
            "--cert".into(),
            p(&format!("{name}.crt")),
            "--key".into(),
            p(&format!("{name}.key")),
        ];
        if user {
            args.extend(["-H".into(), "X-Remote-User: someone".into()]);
        }
        args
    };
    let (code, status) = put(&direct, "{}", &with_cert("other", true));
    assert_eq!(code, 403, "a certificate with another name: {status}");
    // The aggregator's own certificate without a user: 401.
    let (code, status) = put(&direct, "{}", &with_cert("proxy-client", false));
    assert_eq!(code, 401, "no user: {status}");

    // --- RBAC on the subresources, by the apiserver ---
    create(
        &cluster,
        &json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm2", "namespace": "default"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {
                "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}}}),
    );
    for (sa, role) in [
        ("viewer", "kvrs-kubevirt.io:view"),
        ("editor", "kvrs-kubevirt.io:edit"),
    ] {
        must(
            &cluster,
            &["create", "serviceaccount", sa, "-n", "default"],
            None,
        );
        must(
            &cluster,
            &[
                "create",
                "rolebinding",
                sa,
                "-n",
                "default",
                "--clusterrole",
                role,
                "--serviceaccount",
                &format!("default:{sa}"),
            ],
            None,
        );
    }
    let as_sa = |sa: &str| {
        vec![
            "--cacert".to_string(),
            cluster.ca_cert_path().display().to_string(),
            "-H".to_string(),
            format!(
                "Authorization: Bearer {}",
                cluster.service_account_token("default", sa)
            ),
        ]
    };
    let url = format!(
        "{}/apis/subresources.kubevirt.io/v1/namespaces/default/virtualmachines/vm2/start",
        cluster.server_url()
    );
    let (code, status) = put(&url, "{}", &as_sa("viewer"));
    assert_eq!(code, 403, "view may not start a VM: {status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap_or_default()
            .contains("virtualmachines/start"),
        "{status}"
    );
    assert_eq!(vm_runstrategy(&cluster, "vm2"), "Halted");
    let (code, status) = put(&url, "{}", &as_sa("editor"));
    assert_eq!(code, 202, "edit may start a VM: {status}");
    assert_eq!(vm_runstrategy(&cluster, "vm2"), "Always");

    // --- the migrations `migrate` created are the migration controller's: virt-controller
    // (its library's `run`, in this process) gives each a phase (in this cluster, with no
    // kubelet and no launcher pod behind the VMI, they end Failed; a migration's way to a
    // target pod is bins/virt-controller/tests/migration.rs) ---
    // vm1 itself goes (its pending stop would have the VM controller delete the VMI, and the
    // migration controller then the migrations of a VMI that is gone); its VMI runs again.
    must(&cluster, &["delete", "vm", "vm1", "-n", "default"], None);
    must(
        &cluster,
        &[
            "patch",
            "vmi",
            "vm1",
            "-n",
            "default",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ],
        None,
    );
    let flags = kvrs_virt_controller::Flags::try_parse_from([
        "virt-controller".to_string(),
        "--no-leader-elect".into(),
        "--metrics-addr".into(),
        format!("127.0.0.1:{}", free_port()),
    ])
    .expect("virt-controller's flags");
    let client = rt
        .block_on(kvrs_runtime::kube::setup::connect_as(
            "virt-controller",
            Some(cluster.admin_kubeconfig_path()),
        ))
        .expect("a client");
    let (stop_controller, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = rt.spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        kvrs_virt_controller::run(flags, client, shutdown)
            .await
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    });
    let phases = wait_for(
        "the migration controller to set the migrations' phases",
        Duration::from_secs(60),
        || {
            let phases: Vec<String> = migrations()
                .iter()
                .map(|m| m["status"]["phase"].as_str().unwrap_or("").to_string())
                .collect();
            phases.iter().all(|p| !p.is_empty()).then_some(phases)
        },
    );
    assert_eq!(phases.len(), 2, "{phases:?}");
    let _ = stop_controller.send(());
    rt.block_on(controller)
        .expect("virt-controller's task")
        .expect("virt-controller ended cleanly");

    api.stop(&rt);
}
