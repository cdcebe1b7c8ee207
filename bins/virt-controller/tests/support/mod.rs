//! The virt-controller end-to-end harness: a real kube-apiserver + etcd + kube-controller-manager
//! (garbage collector), kvrs's CRDs and RBAC from `bins/deploy`, and the real `virt-controller`
//! binary running with its ServiceAccount's token — so a missing permission fails the test.
//! There is no kubelet: the tests play it by binding pods and patching their status.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvrs_test_cluster::{Options, TestCluster, free_loopback_port};
use serde_json::{Value, json};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A cluster with kvrs's CRDs and virt-controller's RBAC applied.
pub struct Harness {
    pub cluster: TestCluster,
    pub controller_kubeconfig: PathBuf,
    controllers: Vec<Controller>,
}

/// One running virt-controller process.
pub struct Controller {
    pub child: Child,
    pub identity: String,
    pub metrics_port: u16,
    pub log: PathBuf,
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Harness {
    /// Starts the cluster and applies `bins/deploy/crds` and virt-controller's RBAC.
    pub fn start() -> Self {
        let cluster = TestCluster::start(Options {
            controller_manager: true,
            scheduler: false,
        })
        .expect("a real kube-apiserver, etcd and kube-controller-manager");
        let deploy = root().join("bins/deploy");
        cluster
            .install_kubevirt_crds(&deploy)
            .expect("CRDs established");
        for f in [
            "00-namespace.yaml",
            "serviceaccount.yaml",
            "clusterrole.yaml",
            "clusterrolebinding.yaml",
            "role.yaml",
            "rolebinding.yaml",
        ] {
            let path = deploy.join("virt-controller").join(f);
            let out = cluster.kubectl(["apply", "-f", path.to_str().unwrap()]);
            assert!(
                out.status.success(),
                "{f}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let token = cluster.service_account_token("kubevirt", "kvrs-controller");
        let controller_kubeconfig = cluster.kubeconfig_for_token(&token);
        let h = Self {
            cluster,
            controller_kubeconfig,
            controllers: Vec::new(),
        };
        h.apply(
            &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node01",
            "labels": {"kubevirt.io/schedulable": "true"}}}),
        );
        h
    }

    /// Starts a virt-controller replica named `identity` with `extra` flags. Unless `extra`
    /// sets the lease timing, replicas use a short lease (4 s / 3 s / 1 s) so fail-over tests
    /// stay short.
    pub fn start_controller(&mut self, identity: &str, extra: &[&str]) -> usize {
        let short_lease = [
            "--lease-duration-seconds",
            "4",
            "--renew-deadline-seconds",
            "3",
            "--retry-period-seconds",
            "1",
        ];
        let lease: &[&str] = if extra.contains(&"--lease-duration-seconds") {
            &[]
        } else {
            &short_lease
        };
        let port = free_loopback_port();
        let log = self
            .cluster
            .dir()
            .join(format!("virt-controller-{identity}.log"));
        let file = std::fs::File::create(&log).expect("controller log");
        let child = Command::new(env!("CARGO_BIN_EXE_virt-controller"))
            .arg("--kubeconfig")
            .arg(&self.controller_kubeconfig)
            .args(["--identity", identity])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(lease)
            .args(extra)
            .env(
                "RUST_LOG",
                "info,kvrs_virt_controller=trace,kvrs_runtime=trace,kvrs_executor=trace",
            )
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("the virt-controller binary");
        self.controllers.push(Controller {
            child,
            identity: identity.into(),
            metrics_port: port,
            log,
        });
        self.controllers.len() - 1
    }

    /// The controller replica `i`.
    pub fn controller(&mut self, i: usize) -> &mut Controller {
        &mut self.controllers[i]
    }

    /// Replica `i`'s metrics port.
    pub fn metrics_port(&self, i: usize) -> u16 {
        self.controllers[i].metrics_port
    }

    /// The last lines of replica `i`'s log.
    pub fn controller_log(&self, i: usize) -> String {
        let text = std::fs::read_to_string(&self.controllers[i].log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(200)..].join("\n")
    }

    /// `kubectl apply` of one object.
    pub fn apply(&self, obj: &Value) {
        let out = self
            .cluster
            .kubectl_with_stdin(["apply", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `kubectl create` of one object.
    pub fn create(&self, obj: &Value) {
        let out = self
            .cluster
            .kubectl_with_stdin(["create", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The object, or `None` when it does not exist.
    pub fn get(&self, kind: &str, ns: &str, name: &str) -> Option<Value> {
        let out = self
            .cluster
            .kubectl(["get", kind, "-n", ns, name, "-o", "json"]);
        if !out.status.success() {
            return None;
        }
        serde_json::from_slice(&out.stdout).ok()
    }

    /// Every object of `kind` in `ns` matching `selector` (may be empty).
    pub fn list(&self, kind: &str, ns: &str, selector: &str) -> Vec<Value> {
        let mut args = vec!["get", kind, "-n", ns, "-o", "json"];
        if !selector.is_empty() {
            args.extend(["-l", selector]);
        }
        let out = self.cluster.kubectl(args);
        assert!(
            out.status.success(),
            "list {kind}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("list json");
        v["items"].as_array().cloned().unwrap_or_default()
    }

    /// A merge patch (on the status subresource when `status`).
    pub fn patch(&self, kind: &str, ns: &str, name: &str, patch: &Value, status: bool) {
        let p = patch.to_string();
        let mut args = vec!["patch", kind, "-n", ns, name, "--type=merge", "-p", &p];
        if status {
            args.push("--subresource=status");
        }
        let out = self.cluster.kubectl(args);
        assert!(
            out.status.success(),
            "patch {kind} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Deletes an object (`extra` e.g. `--cascade=foreground`), without waiting.
    pub fn delete(&self, kind: &str, ns: &str, name: &str, extra: &[&str]) {
        let mut args = vec!["delete", kind, "-n", ns, name, "--wait=false"];
        args.extend(extra);
        let out = self.cluster.kubectl(args);
        assert!(
            out.status.success(),
            "delete {kind} {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits up to `timeout` for `f` to return `Some`.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let start = Instant::now();
        loop {
            if let Some(v) = f() {
                return v;
            }
            if start.elapsed() > timeout {
                let logs: Vec<String> = (0..self.controllers.len())
                    .map(|i| format!("--- controller {i}:\n{}", self.controller_log(i)))
                    .collect();
                let objects: Vec<String> = ["vm", "vmi", "pods", "controllerrevisions"]
                    .iter()
                    .map(|k| {
                        let out = self.cluster.kubectl(["get", k, "-A", "-o", "yaml"]);
                        format!("--- {k}:\n{}", String::from_utf8_lossy(&out.stdout))
                    })
                    .collect();
                panic!(
                    "timed out after {timeout:?} waiting for {what}\n{}\n{}",
                    objects.join("\n"),
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Plays the kubelet for the launcher pod of VMI `ns/name`: binds it to `node` and reports it
    /// Running and Ready. Returns the pod's name.
    pub fn run_launcher_pod(&self, ns: &str, vmi: &str, node: &str) -> String {
        let pod = self.wait_for("the launcher pod", Duration::from_secs(30), || {
            self.list("pods", ns, &format!("vm.kubevirt.io/name={vmi}"))
                .into_iter()
                .find(|p| p["metadata"]["deletionTimestamp"].is_null())
        });
        let name = pod["metadata"]["name"].as_str().unwrap().to_string();
        self.run_pod(ns, &name, node);
        name
    }

    /// Plays the kubelet for pod `ns/name`: binds it to `node` and reports it Running and Ready.
    pub fn run_pod(&self, ns: &str, name: &str, node: &str) {
        let pod = self.get("pod", ns, name).expect("the pod");
        let binding = json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let out = self.cluster.kubectl_with_stdin(
            [
                "create",
                "--raw",
                &format!("/api/v1/namespaces/{ns}/pods/{name}/binding"),
                "-f",
                "-",
            ],
            &binding.to_string(),
        );
        assert!(
            out.status.success(),
            "binding: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let containers: Vec<Value> = pod["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| {
                json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true,
                "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": "2026-12-01T00:00:00Z"}}})
            })
            .collect();
        let status = json!({"status": {
            "phase": "Running",
            "podIP": "10.244.0.10",
            "podIPs": [{"ip": "10.244.0.10"}],
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
            "containerStatuses": containers,
        }});
        self.patch("pods", ns, name, &status, true);
    }
}

impl Harness {
    /// Plays the kubelet for pods being deleted: once a launcher pod of VMI `ns/vmi` has a
    /// deletionTimestamp, it is removed (the containers have stopped). Returns how many.
    pub fn finish_deleted_pods(&self, ns: &str, vmi: &str) -> usize {
        let mut n = 0;
        for p in self.list("pods", ns, &format!("vm.kubevirt.io/name={vmi}")) {
            if p["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let name = p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let out = self.cluster.kubectl([
                "delete",
                "pod",
                "-n",
                ns,
                &name,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ]);
            if out.status.success() {
                n += 1;
            }
        }
        n
    }

    /// Waits until VMI `ns/name` is gone, playing the kubelet for its pods meanwhile.
    pub fn wait_vmi_gone(&self, ns: &str, name: &str, timeout: Duration) {
        self.wait_for(&format!("VMI {ns}/{name} gone"), timeout, || {
            self.finish_deleted_pods(ns, name);
            self.get("vmi", ns, name).is_none().then_some(())
        });
    }

    /// The VMI's UID, once it exists and is not being deleted.
    pub fn wait_live_vmi(&self, ns: &str, name: &str, timeout: Duration) -> Value {
        self.wait_for(&format!("a live VMI {ns}/{name}"), timeout, || {
            self.get("vmi", ns, name)
                .filter(|v| v["metadata"]["deletionTimestamp"].is_null())
        })
    }

    /// Reports the VMI as virt-handler would: `phase` (Ready when Running), with the phase
    /// transition recorded (the VM controller tells a failed start from a failure after running
    /// by these timestamps).
    pub fn set_vmi_phase(&self, ns: &str, name: &str, phase: &str) {
        let vmi = self.get("vmi", ns, name).expect("the VMI");
        let mut transitions = vmi["status"]["phaseTransitionTimestamps"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        transitions.push(json!({"phase": phase, "phaseTransitionTimestamp": now_rfc3339()}));
        let ready = if phase == "Running" { "True" } else { "False" };
        // A JSON patch, as virt-handler writes: a merge patch would drop the condition's
        // `lastProbeTime: null` (RFC 7386 removes nulls), leaving a condition neither KubeVirt's
        // handler nor kvrs's ever stores, and the controllers' `test` preconditions, computed
        // from the object as Go writes it, would never hold.
        let mut ops = Vec::new();
        if vmi["status"].is_null() {
            ops.push(json!({"op": "add", "path": "/status", "value": {}}));
        }
        ops.push(json!({"op": "add", "path": "/status/phase", "value": phase}));
        ops.push(
            json!({"op": "add", "path": "/status/phaseTransitionTimestamps", "value": transitions}),
        );
        ops.push(json!({"op": "add", "path": "/status/conditions", "value": [
            {"type": "Ready", "status": ready, "lastProbeTime": null,
             "lastTransitionTime": now_rfc3339()}]}));
        let p = Value::Array(ops).to_string();
        let out = self
            .cluster
            .kubectl(["patch", "vmi", "-n", ns, name, "--type=json", "-p", &p]);
        assert!(
            out.status.success(),
            "patch vmi {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Harness {
    /// Installs a minimal structural CRD for CDI's `cdi.kubevirt.io/v1beta1` DataVolume (spec
    /// and status kept as sent, the status subresource served) and waits until it is served.
    /// CDI itself is not run: the tests write the DataVolumes' status as CDI would. A
    /// controller started before it restarts when it appears (as KubeVirt re-initialises).
    pub fn install_data_volume_crd(&self) {
        let preserve = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        self.apply(&json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "datavolumes.cdi.kubevirt.io"},
            "spec": {
                "group": "cdi.kubevirt.io",
                "names": {"kind": "DataVolume", "listKind": "DataVolumeList",
                          "plural": "datavolumes", "singular": "datavolume",
                          "shortNames": ["dv", "dvs"]},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1beta1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": preserve, "status": preserve}}},
                }],
            },
        }));
        let out = self.cluster.kubectl([
            "wait",
            "--for=condition=established",
            "--timeout=60s",
            "crd/datavolumes.cdi.kubevirt.io",
        ]);
        assert!(
            out.status.success(),
            "DataVolume CRD: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A small VM: one container disk, masquerade on the pod network.
pub fn vm(name: &str, run_strategy: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "runStrategy": run_strategy,
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

/// `GET path` on a replica's metrics port: `(status code, body)`.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new()); // not listening (yet)
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return (0, String::new());
    }
    let mut text = String::new();
    s.read_to_string(&mut text).ok();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
}

/// The value of the metric line starting with `series` (e.g. `name{label="x"}`), if present.
pub fn metric(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The wall clock as the API server writes timestamps.
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or_default();
    kvrs_api::time::format_rfc3339(secs)
}

impl Harness {
    /// Two schedulable nodes with the CPU labels virt-handler's node labeller sets (a host-model
    /// VMI migrates only to a node that can run its source node's host model).
    pub fn two_labelled_nodes(&self) {
        for node in ["node01", "node02"] {
            self.apply(
                &json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node,
                "labels": {
                    "kubevirt.io/schedulable": "true",
                    "cpu-vendor.node.kubevirt.io/Intel": "true",
                    "host-model-cpu.node.kubevirt.io/Skylake-Client-IBRS": "true",
                    "host-model-required-features.node.kubevirt.io/vmx": "true",
                    "cpu-model-migration.node.kubevirt.io/Skylake-Client-IBRS": "true",
                }}}),
            );
        }
    }
}
