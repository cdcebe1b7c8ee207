//! The pod runner against a real kube-apiserver (kvrs-test-cluster), running trivial `/bin/sh`
//! pods for real as runc containers, on their own images (`example/runner`, `example/side`:
//! busybox, `common::busybox_image`; no binary map, so `/bin/sh` is the image's): network namespace and `eth0`, UID 107 with no groups, env
//! fieldRefs, volumes bound at their mount paths, the container's own `/dev/net/tun`, status
//! through the pod's life, a second container beside the first (shared emptyDir, its own runc
//! container and cgroup), deletion (graceful and SIGKILL), binding, Node registration,
//! restart-safety and a shutdown that leaves nothing behind. Needs root (namespaces, cgroups,
//! UID 107) and a runc with the November 2025 fixes, which the runner checks at start
//! (`common::runc`). What a pod can
//! see of the host and its neighbours is `isolation.rs`'s.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use kvrs_kubelet::{BinaryMap, ImageMap, Kubelet, KubeletConfig};

mod common;
use common::{is_root, runc};
use kvrs_test_cluster::{Options, TestCluster};
use serde_json::{Value, json};

const NS: &str = "kvrs-kl";
const NODE: &str = "kvrs-kl-node";

/// A runner on its own thread and runtime; `stop` shuts it down gracefully, `crash` drops it
/// mid-flight (as a SIGKILL of the runner would: its containers keep running).
struct Runner {
    thread: Option<std::thread::JoinHandle<()>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    crash: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Runner {
    fn start(kubeconfig: &Path, config: KubeletConfig) -> Self {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
        let kubeconfig = kubeconfig.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
                let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                    .await
                    .unwrap();
                let client = kube::Client::try_from(cfg).unwrap();
                let run = Kubelet::new(client, config).run(async {
                    let _ = stop_rx.await;
                });
                tokio::select! {
                    r = run => r.expect("the runner ends cleanly"),
                    _ = crash_rx => {}
                }
            });
            rt.shutdown_background();
        });
        Self {
            thread: Some(thread),
            stop: Some(stop_tx),
            crash: Some(crash_tx),
        }
    }

    fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("runner thread");
        }
    }

    fn crash(&mut self) {
        if let Some(s) = self.crash.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            t.join().expect("runner thread");
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Env {
    cluster: TestCluster,
    root: PathBuf,
}

impl Env {
    fn config(&self) -> KubeletConfig {
        let mut c = KubeletConfig::new(NODE, self.root.join("p"), self.root.join("s"));
        c.images = ImageMap::from_dir(self.root.join("images"));
        // No binary map: each pod's /bin/sh is its image's busybox.
        c.binaries = BinaryMap::default();
        c.bind_unscheduled = true;
        c.register_node = true;
        c.runtime = runc();
        c
    }

    fn kubectl(&self, args: &[&str]) -> String {
        let out = self.cluster.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn create(&self, obj: &Value) {
        let out = self
            .cluster
            .kubectl_with_stdin(["create", "-f", "-"], &obj.to_string());
        assert!(
            out.status.success(),
            "create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn pod(&self, name: &str) -> Option<Value> {
        let out = self
            .cluster
            .kubectl(["get", "pod", name, "-n", NS, "-o", "json"]);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).unwrap())
    }

    fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        ok: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let p = self.pod(name);
            if let Some(p) = p.as_ref().filter(|p| ok(p)) {
                return p.clone();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for pod {name}: {what}\nlast: {p:#?}\nlogs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn wait_gone(&self, name: &str, timeout: Duration) -> Duration {
        let start = Instant::now();
        while self.pod(name).is_some() {
            assert!(
                start.elapsed() < timeout,
                "pod {name} still exists after {timeout:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        start.elapsed()
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for e in std::fs::read_dir(self.root.join("s/logs"))
            .into_iter()
            .flatten()
            .flatten()
        {
            s += &format!(
                "--- {}\n{}\n",
                e.path().display(),
                std::fs::read_to_string(e.path()).unwrap_or_default()
            );
        }
        s
    }
}

fn sh_pod(name: &str, script: &str, extra_spec: Value) -> Value {
    let mut pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 20,
            "securityContext": {"runAsUser": 107, "runAsGroup": 107},
            "volumes": [
                {"name": "public", "emptyDir": {}},
                {"name": "sockets", "emptyDir": {}},
                {"name": "rootdisk", "image": {"reference": "example/disk:1"}},
            ],
            "containers": [{
                "name": "compute", "image": "example/runner",
                "command": ["/bin/sh", "-c"], "args": [script],
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                    {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                    {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "PLAIN", "value": "plain-value"},
                ],
                "resources": {"limits": {"devices.kubevirt.io/tun": "1"}},
                "volumeMounts": [
                    {"name": "public", "mountPath": "/var/run/kubevirt"},
                    {"name": "sockets", "mountPath": "/var/run/kubevirt/sockets"},
                    {"name": "rootdisk", "mountPath": "/var/run/kubevirt-image-volume/disk_0", "readOnly": true},
                ],
            }],
        },
    });
    if let (Some(spec), Some(extra)) = (pod["spec"].as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    pod
}

fn out_file(env: &Env, uid: &str) -> String {
    std::fs::read_to_string(env.root.join(format!(
        "p/{uid}/volumes/kubernetes.io~empty-dir/public/out"
    )))
    .unwrap_or_default()
}

fn netns_list() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["netns", "list"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

fn links() -> String {
    String::from_utf8_lossy(
        &Command::new("ip")
            .args(["-br", "link"])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned()
}

/// A route for the pod range's first /30 on a veth of its own, as a runner killed without cleaning
/// up leaves behind (its veth and route outlive it); removed on drop.
struct LeftOverRoute(Option<String>);

impl LeftOverRoute {
    fn add() -> Self {
        let routed = Command::new("ip")
            .args(["-4", "route", "show", "10.251.0.0/30"])
            .output()
            .unwrap();
        if !routed.stdout.is_empty() {
            // A real leftover already claims it: it plays the part.
            return Self(None);
        }
        let name = format!("kvstale{}", std::process::id() % 100_000);
        let peer = format!("kvpeer{}", std::process::id() % 100_000);
        let ip = |args: &[&str]| {
            let out = Command::new("ip").args(args).output().unwrap();
            assert!(out.status.success(), "ip {args:?}: {out:?}");
        };
        ip(&["link", "add", &name, "type", "veth", "peer", "name", &peer]);
        let guard = Self(Some(name.clone()));
        ip(&["addr", "add", "10.251.0.1/30", "dev", &name]);
        ip(&["link", "set", &peer, "up"]);
        ip(&["link", "set", &name, "up"]);
        guard
    }
}

impl Drop for LeftOverRoute {
    fn drop(&mut self) {
        if let Some(name) = &self.0 {
            let _ = Command::new("ip").args(["link", "del", name]).status();
        }
    }
}

/// The device the host routes `ip` through.
fn route_device(ip: &str) -> String {
    let out = Command::new("ip")
        .args(["-4", "route", "get", ip])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut words = text.split_whitespace();
    words.find(|w| *w == "dev");
    words.next().unwrap_or_default().to_string()
}

fn short_id(uid: &str) -> String {
    kvrs_kubelet::PodKey {
        namespace: NS.into(),
        name: String::new(),
        uid: uid.into(),
    }
    .short_id()
}

fn uid_of(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap().to_string()
}

fn container_state(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]["state"]
}

fn condition<'a>(p: &'a Value, t: &str) -> &'a str {
    p["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == t)
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
}

const WRITE_FACTS: &str = r#"
o=/run/kubevirt/out
echo "name=$POD_NAME ns=$POD_NS uid=$POD_UID ip=$POD_IP node=$NODE plain=$PLAIN" > $o
echo "id=$(id -u) groups=$(id -G)" >> $o
echo "tun=$(stat -c '%t:%T %u' /dev/net/tun)" >> $o
echo "disk=$(cat /run/kubevirt-image-volume/disk_0/disk/hello)" >> $o
echo "hostname=$(hostname)" >> $o
ip -4 addr show eth0 >> $o
cat /proc/self/mounts >> $o
"#;

#[test]
fn the_runner_runs_pods_for_real() {
    assert!(
        is_root(),
        "the pod runner tests need root (namespaces, device nodes, UID 107)"
    );
    let cluster =
        TestCluster::start(Options::apiserver_only()).expect("a real kube-apiserver and etcd");
    let root = PathBuf::from(format!("/tmp/kl{}", std::process::id() % 100_000));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("images/example_disk_1/disk")).unwrap();
    std::fs::write(
        root.join("images/example_disk_1/disk/hello"),
        "from-the-image\n",
    )
    .unwrap();
    for image in ["example/runner", "example/side"] {
        common::busybox_image(&root.join("images").join(ImageMap::sanitise(image)));
    }
    let env = Env { cluster, root };
    env.kubectl(&["create", "namespace", NS]);
    let left_over_route = LeftOverRoute::add();
    // Leftovers of other (crashed) runs are not this run's to judge.
    let netns_before = netns_list();
    let links_before = links();
    let host_run_before: Vec<_> = std::fs::read_dir("/run")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();

    let mut runner = Runner::start(env.cluster.admin_kubeconfig_path(), env.config());

    // Node registration, with KubeVirt's device resources.
    let deadline = Instant::now() + Duration::from_secs(30);
    let node: Value = loop {
        let out = env.cluster.kubectl(["get", "node", NODE, "-o", "json"]);
        if out.status.success() {
            break serde_json::from_slice(&out.stdout).unwrap();
        }
        assert!(Instant::now() < deadline, "Node not registered");
        std::thread::sleep(Duration::from_millis(200));
    };
    // vhost-net only where this machine has the device.
    let vhost_net = std::path::Path::new("/dev/vhost-net").exists();
    assert_eq!(
        node["status"]["allocatable"]
            .get("devices.kubevirt.io/vhost-net")
            .is_some(),
        vhost_net,
        "{:#}",
        node["status"]
    );
    for r in [
        "devices.kubevirt.io/kvm",
        "devices.kubevirt.io/tun",
        "devices.kubevirt.io/vhost-net",
    ]
    .into_iter()
    .filter(|r| vhost_net || !r.ends_with("vhost-net"))
    {
        assert_eq!(
            node["status"]["allocatable"][r], "1k",
            "{r}: {:#}",
            node["status"]
        );
        assert_eq!(node["status"]["capacity"][r], "1k");
    }
    assert!(node["status"]["allocatable"]["cpu"].is_string());
    assert_eq!(node["metadata"]["labels"]["kubernetes.io/hostname"], NODE);
    assert_eq!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap()["status"],
        "True"
    );

    // 1. An unscheduled pod is bound here, runs, becomes Ready with its socket, is deleted
    //    gracefully (SIGTERM trapped).
    let script = format!(
        "{WRITE_FACTS}\ntrap 'echo TERM >> /run/kubevirt/out; exit 0' TERM\nsleep 1; : > /run/kubevirt/sockets/launcher-sock\nwhile true; do sleep 0.1; done"
    );
    env.create(&sh_pod("facts", &script, json!({})));
    let p = env.wait_pod("facts", "Running", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(p["spec"]["nodeName"], NODE, "bound by bind_unscheduled");
    let uid = uid_of(&p);
    let ip = p["status"]["podIP"].as_str().unwrap().to_string();
    assert!(ip.starts_with("10.251."), "{ip}");
    assert_ne!(
        ip, "10.251.0.2",
        "the block a left-over route claims is skipped"
    );
    assert_eq!(
        route_device(&ip),
        format!("kvh{}", short_id(&uid)),
        "the host reaches the pod IP through the pod's own veth"
    );
    assert!(
        container_state(&p)["running"]["startedAt"].is_string(),
        "{:#}",
        p["status"]
    );
    assert!(p["status"]["startTime"].is_string());
    let p = env.wait_pod("facts", "Ready", Duration::from_secs(30), |p| {
        condition(p, "Ready") == "True"
    });
    assert_eq!(condition(&p, "ContainersReady"), "True");
    assert_eq!(p["status"]["containerStatuses"][0]["ready"], true);
    let facts = out_file(&env, &uid);
    assert!(
        facts.contains(&format!(
            "name=facts ns={NS} uid={uid} ip={ip} node={NODE} plain=plain-value"
        )),
        "{facts}"
    );
    assert!(
        facts.contains("id=107 groups=107\n"),
        "UID 107, no supplementary groups: {facts}"
    );
    assert!(
        facts.contains("tun=a:c8 0\n"),
        "a private root-owned 10:200 node: {facts}"
    );
    assert!(facts.contains("disk=from-the-image\n"), "{facts}");
    assert!(facts.contains("hostname=facts\n"), "{facts}");
    assert!(
        facts.contains(&format!("inet {ip}/30")),
        "eth0 carries the pod IP: {facts}"
    );
    assert!(
        facts.contains(" /run/kubevirt/sockets "),
        "volumes bound at their mount paths: {facts}"
    );
    assert!(
        facts.contains(" /run/kubevirt-image-volume/disk_0 "),
        "{facts}"
    );
    let short = short_id(&uid);
    assert!(
        netns_list().contains(&format!("kvrs-{short}")),
        "{}",
        netns_list()
    );
    assert!(links().contains(&format!("kvh{short}")));
    // The host's /run and mount table are unchanged by the pod's mounts.
    assert!(!Path::new("/run/kubevirt-image-volume").exists());
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !host_mounts.contains(env.root.to_str().unwrap()),
        "no pod mount leaked to the host"
    );
    // The host's /dev/net/tun keeps its own owner and mode.
    let tun = Command::new("stat")
        .args(["-c", "%u %a", "/dev/net/tun"])
        .output()
        .unwrap();
    let before = String::from_utf8_lossy(&tun.stdout).to_string();

    env.kubectl(&["delete", "pod", "facts", "-n", NS, "--wait=false"]);
    env.wait_gone("facts", Duration::from_secs(30));
    assert!(
        out_file(&env, &uid).is_empty(),
        "the pod's directories are removed"
    );
    assert!(
        !netns_list().contains(&format!("kvrs-{short}")),
        "netns removed"
    );
    assert!(!links().contains(&format!("kvh{short}")), "veth removed");
    let log = std::fs::read_to_string(env.root.join(format!("s/logs/{NS}_facts_{uid}.log")))
        .unwrap_or_default();
    assert!(!log.contains("level=error"), "runc reported nothing: {log}");
    let tun = Command::new("stat")
        .args(["-c", "%u %a", "/dev/net/tun"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&tun.stdout), before);

    // 2. Exit codes: Succeeded with 0, Failed with 3; the netns goes with the container.
    env.create(&sh_pod("ok", "echo done", json!({})));
    env.create(&sh_pod("bad", "echo failing >&2; exit 3", json!({})));
    let ok = env.wait_pod("ok", "Succeeded", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Succeeded"
    });
    assert_eq!(container_state(&ok)["terminated"]["exitCode"], 0);
    assert_eq!(container_state(&ok)["terminated"]["reason"], "Completed");
    let bad = env.wait_pod("bad", "Failed", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Failed"
    });
    assert_eq!(container_state(&bad)["terminated"]["exitCode"], 3);
    assert!(
        container_state(&bad)["terminated"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("failing"),
        "{:#}",
        bad["status"]
    );
    assert!(!netns_list().contains(&format!("kvrs-{}", short_id(&uid_of(&bad)))));
    // 2b. A second container: its own runc container in the pod's network namespace, the
    // `sockets` emptyDir shared (the second container mounts its own subPath of it, as a hook
    // sidecar does); each container reported; Ready once both run and the launcher socket
    // exists; deletion stops both and leaves no runc container or cgroup.
    let mut two = sh_pod(
        "two",
        "while [ ! -e /var/run/kubevirt/sockets/side/hello ]; do sleep 0.1; done; \
         cat /var/run/kubevirt/sockets/side/hello > /var/run/kubevirt/sockets/seen; \
         touch /var/run/kubevirt/sockets/launcher-sock; exec sleep 1000",
        json!({}),
    );
    two["spec"]["containers"].as_array_mut().unwrap().push(json!({
        "name": "side", "image": "example/side",
        "command": ["/bin/sh", "-c"],
        "args": ["echo \"$HOSTNAME $(grep -c eth0 /proc/net/dev) $(id -u)\" > /hooks/hello; exec sleep 1000"],
        "securityContext": {"capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": false},
        "volumeMounts": [{"name": "sockets", "mountPath": "/hooks", "subPath": "side"}],
    }));
    env.create(&two);
    let p = env.wait_pod(
        "two",
        "Ready with both containers",
        Duration::from_secs(60),
        |p| condition(p, "Ready") == "True",
    );
    let names: Vec<&str> = p["status"]["containerStatuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["compute", "side"], "{:#}", p["status"]);
    let two_uid = uid_of(&p);
    let two_short = short_id(&two_uid);
    let seen = std::fs::read_to_string(env.root.join(format!(
        "p/{two_uid}/volumes/kubernetes.io~empty-dir/sockets/seen"
    )))
    .unwrap();
    assert_eq!(
        seen.trim(),
        "two 1 107",
        "the sidecar's hostname, eth0 and user"
    );
    let runc_ids = || {
        let out = Command::new(runc())
            .arg("--root")
            .arg(env.root.join("s/runc"))
            .args(["list", "-q"])
            .output()
            .unwrap();
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(&two_short))
            .map(str::to_string)
            .collect();
        ids
    };
    let mut ids = runc_ids();
    ids.sort();
    assert_eq!(
        ids,
        [
            format!("kvrs-{two_short}"),
            format!("kvrs-{two_short}-side")
        ]
    );
    env.kubectl(&[
        "delete",
        "pod",
        "two",
        "-n",
        NS,
        "--wait=false",
        "--grace-period=2",
    ]);
    env.wait_gone("two", Duration::from_secs(30));
    assert!(runc_ids().is_empty(), "no runc container left");
    let cgroups = Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "3", "-path"])
        .arg(format!("*kvrs-kubelet-{NODE}/{two_short}*"))
        .output()
        .unwrap();
    assert!(
        cgroups.stdout.is_empty(),
        "cgroups left: {}",
        String::from_utf8_lossy(&cgroups.stdout)
    );
    assert!(!netns_list().contains(&format!("kvrs-{two_short}")));

    // Deleted gracefully ("bad") or forced ("ok"): either way the runner removes the pod's
    // directories.
    for (n, p, force) in [("ok", &ok, true), ("bad", &bad, false)] {
        let mut args = vec!["delete", "pod", n, "-n", NS, "--wait=false"];
        if force {
            args.extend(["--grace-period=0", "--force"]);
        }
        env.kubectl(&args);
        env.wait_gone(n, Duration::from_secs(30));
        let dir = env.root.join("p").join(uid_of(p));
        let deadline = Instant::now() + Duration::from_secs(10);
        while dir.exists() {
            assert!(
                Instant::now() < deadline,
                "{n}: pod directory {} left after the pod was deleted",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // 3. An image that is not in --images: Failed, naming the volume and the reference.
    let mut pod = sh_pod("noimage", "true", json!({}));
    pod["spec"]["volumes"][2]["image"]["reference"] = json!("example/nope:2");
    env.create(&pod);
    let p = env.wait_pod("noimage", "Failed", Duration::from_secs(30), |p| {
        p["status"]["phase"] == "Failed"
    });
    let msg = p["status"]["message"].as_str().unwrap_or("");
    let want = format!(
        "volume rootdisk: image example/nope:2 is not in --images {} (looked for {})",
        env.root.join("images").display(),
        env.root.join("images/example_nope_2").display()
    );
    assert_eq!(msg, want);
    assert_eq!(container_state(&p)["waiting"]["reason"], "ErrImagePull");
    env.kubectl(&["delete", "pod", "noimage", "-n", NS, "--wait=false"]);
    env.wait_gone("noimage", Duration::from_secs(30));

    // 4. SIGTERM ignored: SIGKILL once the grace period is over.
    env.create(&sh_pod(
        "stubborn",
        "trap '' TERM; while true; do sleep 0.1; done",
        json!({"terminationGracePeriodSeconds": 2}),
    ));
    let p = env.wait_pod("stubborn", "Running", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    });
    let record: Value = serde_json::from_slice(
        &std::fs::read(env.root.join(format!("s/pods/{}/record.json", uid_of(&p)))).unwrap(),
    )
    .unwrap();
    let pid = record["pid"].as_u64().unwrap();
    env.kubectl(&["delete", "pod", "stubborn", "-n", NS, "--wait=false"]);
    let took = env.wait_gone("stubborn", Duration::from_secs(30));
    assert!(
        took >= Duration::from_millis(1500),
        "waited for the grace period: {took:?}"
    );
    assert!(!Path::new(&format!("/proc/{pid}")).exists(), "killed");

    // 5. Restart-safety: the runner dies, the container with it; the next runner marks the pod
    //    Failed instead of restarting it.
    env.create(&sh_pod("lost", "while true; do sleep 0.1; done", json!({})));
    let p = env.wait_pod("lost", "Running", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    });
    let lost_uid = uid_of(&p);
    let record: Value = serde_json::from_slice(
        &std::fs::read(env.root.join(format!("s/pods/{lost_uid}/record.json"))).unwrap(),
    )
    .unwrap();
    let pid = record["pid"].as_u64().unwrap();
    runner.crash();
    // The container's first process: its PID namespace, and runc with it, end.
    let _ = Command::new("kill")
        .args(["-s", "KILL", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}/stat")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z"))
    {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut runner = Runner::start(env.cluster.admin_kubeconfig_path(), env.config());
    let p = env.wait_pod(
        "lost",
        "Failed after restart",
        Duration::from_secs(30),
        |p| p["status"]["phase"] == "Failed",
    );
    assert_eq!(p["status"]["reason"], "NodeRestart");
    assert!(!netns_list().contains(&format!("kvrs-{}", short_id(&lost_uid))));

    // 6. Shutdown: every pod stopped (gracefully), nothing left behind.
    let script = "trap 'exit 0' TERM; while true; do sleep 0.1; done";
    env.create(&sh_pod("last", script, json!({})));
    let p = env.wait_pod("last", "Running", Duration::from_secs(60), |p| {
        p["status"]["phase"] == "Running"
    });
    let last_uid = uid_of(&p);
    let record: Value = serde_json::from_slice(
        &std::fs::read(env.root.join(format!("s/pods/{last_uid}/record.json"))).unwrap(),
    )
    .unwrap();
    let pid = record["pid"].as_u64().unwrap();
    runner.stop();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the container is gone"
    );
    let p = env.pod("last").unwrap();
    assert_eq!(p["status"]["phase"], "Failed");
    assert_eq!(p["status"]["reason"], "Terminated");
    let ns = netns_list();
    for l in ns.lines().filter(|l| l.starts_with("kvrs-")) {
        assert!(
            netns_before.contains(l.split_whitespace().next().unwrap()),
            "netns left: {l}"
        );
    }
    for l in links().lines().filter(|l| l.starts_with("kvh")) {
        assert!(
            links_before.contains(l.split('@').next().unwrap()),
            "veth left: {l}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(env.root.join("p"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "pods dir empty: {left:?}");
    let left: Vec<_> = std::fs::read_dir(env.root.join("s/pods"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "state dir empty: {left:?}");
    let host_run_after: Vec<_> = std::fs::read_dir("/run")
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    for n in &host_run_after {
        assert!(
            host_run_before.contains(n) || n.to_string_lossy() == "netns",
            "new entry in the host's /run: {n:?}"
        );
    }
    drop(left_over_route);
    let _ = std::fs::remove_dir_all(&env.root);
}
