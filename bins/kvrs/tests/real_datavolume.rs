//! A VM's DataVolume imported by CDI's own controller and importer on the real node (issue 45,
//! Deliver 2): kvrs deployed as an operator deploys it (`common::real_node::Deployed`), and CDI
//! v1.64.0 built from the Go module proxy by `scripts/cdi.sh` — its CRDs and the controller's
//! RBAC printed by CDI's operator resource generators (`cdi-manifests`), **cdi-controller run as
//! a process on the host** with a kubeconfig holding its own ServiceAccount's token (`cdi/cdi-sa`,
//! so CDI's RBAC is what it runs with), and CDI's importer as the pod image
//! `kvrs.local/cdi-importer:v1.64.0` (cdi-importer plus Debian's qemu-img and nbdkit). No CDI
//! operator, apiserver, upload proxy or webhooks run: the test writes the CDI object and the
//! CDIConfig the operator would (`HonorWaitForFirstConsumer` on, as CDI's operator sets it by
//! default).
//!
//! Storage is a static `local` PersistentVolume of a StorageClass whose volumeBindingMode is
//! `WaitForFirstConsumer`, so the PV binder binds the claim only when a pod using it is
//! scheduled. The VM has a `dataVolumeTemplates` entry importing, over `http`, a raw image from
//! a small server in this test (on the node's bridge address) with a marker at its start and
//! another 2 MiB in.
//!
//! Asserted, in order: kvrs's VM controller creates the DataVolume (owned by the VM); CDI's
//! controller creates the claim and reports the DataVolume `WaitForFirstConsumer`; the VMI waits
//! with `DataVolumesReady` False and no launcher pod; kvrs's temporary pod (KubeVirt's
//! `kubevirt.io/ephemeral-provisioning` pod) is scheduled and the claim is Bound; CDI's importer
//! pod runs and the DataVolume turns `Succeeded`; the importer fetched the image from the server;
//! the claim's `disk.img` holds both markers; `DataVolumesReady` turns True, the VMI runs, and the
//! guest reads both markers from its disk.
//!
//! kvrs's virt-controller decides at start whether the cluster serves CDI's DataVolume CRD (as
//! KubeVirt does); CDI's CRDs are applied after kvrs is deployed, so the test restarts the
//! controller's Deployment (`kubectl rollout restart`) once they are established.
//!
//! Run it alone on the node: `flock /tmp/kvrs-real-node.lock cargo test -p kvrs --test
//! real_datavolume`.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::real_node::Deployed;
use common::volumes::read_at;
use common::{http_get, kubectl_json};
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::{is_root, repo_root};
use serde_json::{Value, json};

const NS: &str = "kvrs-real-datavolume";
/// The namespace cdi-controller believes it runs in (`util.GetNamespace`'s default off-cluster).
const CDI_NS: &str = "cdi";
const CDI_SA: &str = "cdi-sa";
const IMPORTER_IMAGE: &str = "kvrs.local/cdi-importer:v1.64.0";
const STORAGE_CLASS: &str = "kvrs-wffc";
const DV: &str = "guest-disk";
const VM: &str = "dvguest";
const GUEST_PORT: u16 = 8080;
/// The served image's size and where its second marker sits.
const IMAGE_SIZE: usize = 4 * 1024 * 1024;
const SECOND_AT: usize = 2 * 1024 * 1024;
const DV_REQUEST: &str = "64Mi";
const PV_CAPACITY: &str = "128Mi";
/// Where cdi-controller reads its clone token keys (a fixed path in CDI; it exits without them).
const TOKEN_KEY_DIR: &str = "/var/run/cdi/token/keys";

/// The raw image the test serves: `first` at offset 0, `second` at [`SECOND_AT`], zeros between.
fn raw_image(first: &str, second: &str) -> Vec<u8> {
    let mut img = vec![0u8; IMAGE_SIZE];
    img[..first.len()].copy_from_slice(first.as_bytes());
    img[SECOND_AT..SECOND_AT + second.len()].copy_from_slice(second.as_bytes());
    img
}

/// A tiny HTTP/1.1 file server for one image: HEAD and GET, with single `Range: bytes=a-b`
/// requests (nbdkit's curl plugin, which CDI's importer reads http sources through, asks for
/// ranges). Counts the GETs it answered, so the test knows the importer really fetched it.
struct ImageServer {
    port: u16,
    gets: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<String>>>,
}

impl ImageServer {
    fn start(image: Vec<u8>) -> ImageServer {
        let listener = TcpListener::bind("0.0.0.0:0").expect("binding the image server");
        let port = listener.local_addr().unwrap().port();
        let image = Arc::new(image);
        let gets = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (g, r) = (gets.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (image, g, r) = (image.clone(), g.clone(), r.clone());
                std::thread::spawn(move || serve(stream, &image, &g, &r));
            }
        });
        ImageServer {
            port,
            gets,
            requests,
        }
    }
}

/// Answers the requests of one connection until the client closes it.
fn serve(stream: TcpStream, image: &[u8], gets: &AtomicUsize, log: &Mutex<Vec<String>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(stream.try_clone().expect("cloning the stream"));
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut range = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("range")
            {
                range = v.trim().strip_prefix("bytes=").map(str::to_string);
            }
        }
        let method = request_line.split_whitespace().next().unwrap_or("");
        log.lock()
            .unwrap()
            .push(format!("{} range={range:?}", request_line.trim_end()));
        let len = image.len();
        let (status, start, end) = match range.as_deref().and_then(|r| r.split_once('-')) {
            Some((a, b)) => {
                let a: usize = a.parse().unwrap_or(0);
                let b: usize = b.parse().map_or(len - 1, |b: usize| b.min(len - 1));
                ("206 Partial Content", a, b + 1)
            }
            None => ("200 OK", 0, len),
        };
        let mut head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/octet-stream\r\nAccept-Ranges: bytes\r\nContent-Length: {}\r\n",
            end - start
        );
        if range.is_some() {
            head.push_str(&format!(
                "Content-Range: bytes {start}-{}/{len}\r\n",
                end - 1
            ));
        }
        head.push_str("\r\n");
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        if method == "GET" {
            gets.fetch_add(1, Ordering::Relaxed);
            if out.write_all(&image[start..end]).is_err() {
                return;
            }
        }
        let _ = out.flush();
    }
}

/// cdi-controller as a host process; killed (and its ready file removed) when dropped.
struct CdiController {
    child: Child,
    log: PathBuf,
}

impl CdiController {
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for CdiController {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kubectl get -w` of the test namespace's `resource`, one `jsonpath` line per version seen,
/// into a file: short-lived states (CDI's `WaitForFirstConsumer` phase, kvrs's temporary pod)
/// are caught there even when a poll would miss them. Killed when dropped.
struct Watch {
    child: Child,
    out: PathBuf,
}

impl Watch {
    fn start(deployed: &Deployed, resource: &str, jsonpath: &str, out: PathBuf) -> Watch {
        let child = Command::new(deployed.cluster.bin_dir().join("kubectl"))
            .arg(format!(
                "--kubeconfig={}",
                deployed.cluster.admin_kubeconfig_path().display()
            ))
            .args(["get", resource, "-n", NS, "--watch", "-o"])
            .arg(format!("jsonpath={jsonpath}"))
            .stdout(Stdio::from(std::fs::File::create(&out).unwrap()))
            .stderr(Stdio::null())
            .spawn()
            .expect("starting kubectl get --watch");
        Watch { child, out }
    }

    /// The distinct lines seen so far.
    fn seen(&self) -> BTreeSet<String> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Removes the token key directory this test made.
struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `scripts/cdi.sh`'s output directory (cached after the first build).
fn cdi_build() -> PathBuf {
    let started = Instant::now();
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/cdi.sh"))
        .current_dir(repo_root())
        .output()
        .expect("running scripts/cdi.sh");
    assert!(
        out.status.success(),
        "scripts/cdi.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .expect("scripts/cdi.sh prints its bin directory last")
            .trim(),
    );
    eprintln!(
        "CDI build ready in {:.1} s: {}",
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    dir
}

/// CDI's clone token key pair, which cdi-controller reads at start (`openssl`).
fn token_keys() -> RemoveDir {
    let dir = Path::new(TOKEN_KEY_DIR);
    assert!(
        !dir.exists(),
        "{TOKEN_KEY_DIR} exists already: another cdi-controller on this host?"
    );
    std::fs::create_dir_all(dir).unwrap();
    let guard = RemoveDir(PathBuf::from("/var/run/cdi"));
    let key = dir.join("id_rsa");
    for args in [
        vec!["genrsa", "-out", key.to_str().unwrap(), "2048"],
        vec![
            "rsa",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-out",
            dir.join("id_rsa.pub").to_str().unwrap(),
        ],
    ] {
        let out = Command::new("openssl")
            .args(&args)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    }
    guard
}

impl Deployed {
    /// The DataVolume's `status.phase`, if it has one.
    fn dv_phase(&self) -> Option<String> {
        self.get("datavolume", DV)
            .and_then(|d| d["status"]["phase"].as_str().map(str::to_string))
    }

    /// The VMI's condition `kind`, if present.
    fn vmi_condition(&self, kind: &str) -> Option<Value> {
        let vmi = self.get("vmi", VM)?;
        vmi["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
    }
}

/// A static `local` volume `<NS>-<suffix>` of [`STORAGE_CLASS`] on `host`, at `dir`.
fn local_pv(suffix: &str, dir: &Path, host: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "PersistentVolume",
    "metadata": {"name": format!("{NS}-{suffix}")},
    "spec": {
       "capacity": {"storage": PV_CAPACITY},
       "accessModes": ["ReadWriteOnce"],
       "volumeMode": "Filesystem",
       "persistentVolumeReclaimPolicy": "Retain",
       "storageClassName": STORAGE_CLASS,
       "local": {"path": dir.to_str().unwrap()},
       "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
           {"key": "kubernetes.io/hostname", "operator": "In", "values": [host]}
       ]}]}}
    }})
}

/// The VM: the fixture guest with the DataVolume as its third disk (`vdc`), the
/// `dataVolumeTemplates` entry importing `url`, and the guest's checks of both markers.
fn vm_manifest(url: &str, first: &str, second: &str) -> String {
    let run = vec![
        "mkdir -p /srv".to_string(),
        "echo \"dv sectors=$(cat /sys/block/vdc/size)\" >>/srv/r.tmp".to_string(),
        format!(
            "echo \"dv first=[$(head -c {} /dev/vdc | tr -d '\\000')]\" >>/srv/r.tmp",
            first.len()
        ),
        format!(
            "echo \"dv second=[$(dd if=/dev/vdc bs=1048576 skip={} count=1 2>/dev/null | head -c {} | tr -d '\\000')]\" >>/srv/r.tmp",
            SECOND_AT / (1024 * 1024),
            second.len()
        ),
        "echo 'checks done' >>/srv/r.tmp && mv /srv/r.tmp /srv/r".to_string(),
        format!("httpd -p {GUEST_PORT} -h /srv"),
    ];
    let volumes = format!("        - name: dv\n          dataVolume:\n            name: {DV}\n");
    let vm = common::volumes::guest_vm(NS, VM, &["dv"], &volumes, &run);
    let template = format!(
        "  dataVolumeTemplates:\n\
         \x20   - metadata:\n\
         \x20       name: {DV}\n\
         \x20     spec:\n\
         \x20       source:\n\
         \x20         http:\n\
         \x20           url: {url}\n\
         \x20       pvc:\n\
         \x20         accessModes: [ReadWriteOnce]\n\
         \x20         volumeMode: Filesystem\n\
         \x20         storageClassName: {STORAGE_CLASS}\n\
         \x20         resources:\n\
         \x20           requests:\n\
         \x20             storage: {DV_REQUEST}\n"
    );
    let anchor = "  runStrategy: Always\n";
    assert!(vm.contains(anchor), "the fixture VM has {anchor:?}");
    vm.replacen(anchor, &format!("{anchor}{template}"), 1)
}

#[test]
fn cdi_imports_a_datavolume_template_over_http_and_the_vm_boots_from_it() {
    assert!(
        is_root(),
        "the real node runs containerd, runc and the kubelet, and CDI's controller reads keys under /var/run: run as root"
    );
    let stamp = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    let first = format!("KVRS-CDI-FIRST-{stamp}");
    let second = format!("KVRS-CDI-SECOND-{stamp}");

    let cdi = cdi_build();
    let work = tempfile::Builder::new()
        .prefix("kvrs-real-datavolume-")
        .tempdir_in("/var/tmp")
        .expect("a work directory");
    // Two volumes of the class: the DataVolume's claim and CDI's scratch claim (its http
    // import of kubevirt content goes through scratch space), whichever the binder picks.
    let pv_dirs: Vec<PathBuf> = ["pv-a", "pv-b"]
        .iter()
        .map(|d| work.path().join(d))
        .collect();
    for dir in &pv_dirs {
        std::fs::create_dir(dir).unwrap();
        // CDI's importer runs as UID 107 and writes into the volumes.
        std::os::unix::fs::chown(dir, Some(107), Some(107)).unwrap();
    }
    let server = ImageServer::start(raw_image(&first, &second));
    let _keys = token_keys();

    let kvm = kvrs_node::host_devices::kvm_check().is_ok();
    let deployed = Deployed::start(NS, !kvm);
    let host = deployed.wait_schedulable_host();
    let real_node = deployed.node.as_ref().expect("the real node");
    real_node
        .import_image(&cdi.join("cdi-importer.tar"))
        .expect("importing CDI's importer image");
    let url = format!("http://{}:{}/disk.img", real_node.ip(), server.port);

    // CDI's CRDs and the controller's RBAC, as its operator generates them.
    deployed.kubectl_ok(&["create", "namespace", CDI_NS]);
    let manifests = Command::new(cdi.join("cdi-manifests"))
        .arg(CDI_NS)
        .output()
        .expect("running cdi-manifests");
    assert!(manifests.status.success(), "cdi-manifests: {manifests:?}");
    let manifests = String::from_utf8(manifests.stdout).unwrap();
    for kind in [
        "CustomResourceDefinition",
        "ClusterRole",
        "Role",
        "ServiceAccount",
    ] {
        assert!(
            manifests.contains(&format!("kind: {kind}\n")),
            "cdi-manifests printed a {kind}"
        );
    }
    deployed.apply(&manifests);
    deployed
        .cluster
        .wait_for_crds(
            &[
                "datavolumes.cdi.kubevirt.io",
                "cdiconfigs.cdi.kubevirt.io",
                "cdis.cdi.kubevirt.io",
                "storageprofiles.cdi.kubevirt.io",
            ],
            Duration::from_secs(60),
        )
        .expect("CDI's CRDs established");
    // What CDI's operator would have: its CDI object (the import controller refuses to work
    // without an active one: "no active CDI") and the CDIConfig with its default feature gate.
    deployed.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI",
             "metadata": {"name": "cdi"}, "spec": {}},
            {"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDIConfig",
             "metadata": {"name": "config"},
             "spec": {"featureGates": ["HonorWaitForFirstConsumer"]}}
        ]})
        .to_string(),
    );

    // kvrs's virt-controller picks DataVolumes up at start.
    deployed.kubectl_ok(&[
        "-n",
        "kubevirt",
        "rollout",
        "restart",
        "deployment",
        "kvrs-virt-controller",
    ]);
    deployed.kubectl_ok(&[
        "-n",
        "kubevirt",
        "rollout",
        "status",
        "deployment",
        "kvrs-virt-controller",
        "--timeout=240s",
    ]);
    deployed.wait_ready();

    // cdi-controller, on the host, as its own ServiceAccount.
    let token = deployed.cluster.service_account_token(CDI_NS, CDI_SA);
    let kubeconfig = deployed.cluster.kubeconfig_for_token(&token);
    let log = work.path().join("cdi-controller.log");
    let child = Command::new(cdi.join("cdi-controller"))
        .args(["--kubeconfig", kubeconfig.to_str().unwrap(), "-v=3"])
        .env("IMPORTER_IMAGE", IMPORTER_IMAGE)
        .env("CLONER_IMAGE", "kvrs.local/cdi-cloner-unused:v1.64.0")
        .env(
            "UPLOADSERVER_IMAGE",
            "kvrs.local/cdi-uploadserver-unused:v1.64.0",
        )
        .env(
            "OVIRT_POPULATOR_IMAGE",
            "kvrs.local/cdi-ovirt-unused:v1.64.0",
        )
        .env("UPLOADPROXY_SERVICE", "cdi-uploadproxy")
        .env("PULL_POLICY", "IfNotPresent")
        .stdout(Stdio::from(std::fs::File::create(&log).unwrap()))
        .stderr(Stdio::from(
            std::fs::OpenOptions::new().append(true).open(&log).unwrap(),
        ))
        .spawn()
        .expect("starting cdi-controller");
    let cdi_controller = CdiController {
        child,
        log: log.clone(),
    };
    let logs = || {
        format!(
            "--- cdi-controller\n{}\n{}",
            cdi_controller.log_tail(),
            deployed.logs()
        )
    };
    wait_for(
        "cdi-controller reconciling the CDIConfig (its status written)",
        Duration::from_secs(120),
        || {
            deployed
                .get("cdiconfig", "config")
                .filter(|c| !c["status"]["filesystemOverhead"].is_null())
        },
        logs,
    );

    // The WaitForFirstConsumer class and its static local volume (no provisioner).
    deployed.apply(
        &json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
             "metadata": {"name": STORAGE_CLASS},
             "provisioner": "kubernetes.io/no-provisioner",
             "volumeBindingMode": "WaitForFirstConsumer"},
            local_pv("a", &pv_dirs[0], &host),
            local_pv("b", &pv_dirs[1], &host),
        ]})
        .to_string(),
    );
    deployed.kubectl_ok(&["create", "namespace", NS]);
    let dv_watch = Watch::start(
        &deployed,
        "datavolumes",
        "{.status.phase}{\"\\n\"}",
        work.path().join("dv-phases"),
    );
    let pod_watch = Watch::start(
        &deployed,
        "pods",
        "{.metadata.name} {.metadata.annotations.kubevirt\\.io/ephemeral-provisioning} {.spec.nodeName}{\"\\n\"}",
        work.path().join("pods"),
    );
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    deployed.apply(&vm_manifest(&url, &first, &second));

    // kvrs's VM controller creates the DataVolume, owned by the VM.
    let dv = wait_for(
        "the DataVolume created by kvrs's VM controller",
        Duration::from_secs(60),
        || deployed.get("datavolume", DV),
        logs,
    );
    let owner = &dv["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "VirtualMachine", "{dv}");
    assert_eq!(owner["name"], VM, "{dv}");
    assert_eq!(dv["spec"]["source"]["http"]["url"], url.as_str(), "{dv}");

    // CDI's controller creates the claim; with WaitForFirstConsumer the DataVolume waits.
    let pvc = wait_for(
        "the claim created by cdi-controller",
        Duration::from_secs(60),
        || deployed.get("pvc", DV),
        logs,
    );
    assert_eq!(pvc["spec"]["storageClassName"], STORAGE_CLASS, "{pvc}");
    assert!(
        pvc["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|o| o
                .iter()
                .any(|r| r["kind"] == "DataVolume" && r["name"] == DV)),
        "the claim is owned by the DataVolume: {pvc}"
    );

    // Until the claim binds: the DataVolume's phases, kvrs's temporary pod, no launcher.
    let mut phases = BTreeSet::new();
    let mut temp_pods = BTreeSet::new();
    let mut importer_seen = false;
    let mut dv_ready_false = None;
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        if let Some(p) = deployed.dv_phase() {
            phases.insert(p);
        }
        phases.extend(dv_watch.seen());
        for line in pod_watch.seen() {
            let mut f = line.split(' ');
            if let (Some(name), Some("true"), Some(node)) = (f.next(), f.next(), f.next())
                && !node.is_empty()
            {
                temp_pods.insert(format!("{name} (scheduled to {node})"));
            }
        }
        if let Some(pods) = kubectl_json(&deployed.cluster, &["get", "pods", "-n", NS]) {
            for p in pods["items"].as_array().into_iter().flatten() {
                let name = p["metadata"]["name"].as_str().unwrap_or("").to_string();
                if p["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] == "true" {
                    temp_pods.insert(name);
                } else if name.starts_with("importer-") {
                    importer_seen = true;
                } else if name.starts_with("virt-launcher-") && temp_pods.is_empty() {
                    panic!(
                        "a launcher pod before the DataVolume's claim was bound: {p}\n{}",
                        logs()
                    );
                }
            }
        }
        if dv_ready_false.is_none() {
            dv_ready_false = deployed
                .vmi_condition("DataVolumesReady")
                .filter(|c| c["status"] == "False");
        }
        let bound = deployed
            .get("pvc", DV)
            .is_some_and(|p| p["status"]["phase"] == "Bound");
        if bound && !temp_pods.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the claim bound through kvrs's temporary pod: phases {phases:?}, temporary pods \
             {temp_pods:?}, claim {}\n{}",
            deployed.get("pvc", DV).unwrap_or_default(),
            logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!(
        "real datavolume: claim Bound after {:.1} s; DataVolume phases so far {phases:?}; temporary pods {temp_pods:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        phases.contains("WaitForFirstConsumer"),
        "CDI reported WaitForFirstConsumer before the claim was bound: {phases:?}"
    );
    let cond = dv_ready_false.unwrap_or_else(|| {
        panic!(
            "the VMI's DataVolumesReady was False while waiting\n{}",
            logs()
        )
    });
    eprintln!("real datavolume: DataVolumesReady while waiting: {cond}");
    // The scheduler's volume binder bound the claim (static volumes: no selected-node
    // annotation, the binding itself) while placing kvrs's temporary pod.
    let pvc = deployed.get("pvc", DV).unwrap();
    assert_eq!(
        pvc["metadata"]["annotations"]["pv.kubernetes.io/bind-completed"], "yes",
        "{pvc}"
    );
    let pv_name = pvc["spec"]["volumeName"]
        .as_str()
        .expect("the bound volume")
        .to_string();
    let pv_dir = pv_dirs
        .iter()
        .zip(["a", "b"])
        .find(|(_, n)| pv_name == format!("{NS}-{n}"))
        .unwrap_or_else(|| panic!("the claim bound one of the test's volumes: {pvc}"))
        .0
        .clone();

    // CDI's importer runs and the DataVolume succeeds.
    let dv = wait_for(
        "the DataVolume Succeeded (CDI's importer done)",
        Duration::from_secs(300),
        || {
            if kubectl_json(
                &deployed.cluster,
                &["get", "pod", "-n", NS, &format!("importer-{DV}")],
            )
            .is_some()
            {
                importer_seen = true;
            }
            phases.extend(dv_watch.seen());
            let dv = deployed.get("datavolume", DV)?;
            if let Some(p) = dv["status"]["phase"].as_str() {
                phases.insert(p.to_string());
            }
            (dv["status"]["phase"] == "Succeeded").then_some(dv)
        },
        logs,
    );
    eprintln!(
        "real datavolume: DataVolume Succeeded after {:.1} s; phases {phases:?}; {} GETs: {:?}",
        started.elapsed().as_secs_f64(),
        server.gets.load(Ordering::Relaxed),
        server.requests.lock().unwrap()
    );
    assert!(
        importer_seen || phases.contains("ImportInProgress"),
        "CDI's importer pod ran: {phases:?}"
    );
    assert_eq!(dv["status"]["progress"], "100.0%", "{dv}");
    assert!(
        server.gets.load(Ordering::Relaxed) > 0,
        "the importer fetched the image from the test's server"
    );
    // The bytes CDI wrote: the claim's disk.img (a local volume: the test's directory).
    let disk_img = pv_dir.join("disk.img");
    assert_eq!(
        read_at(&disk_img, 0, first.len()),
        first.as_bytes(),
        "disk.img starts with the first marker"
    );
    assert_eq!(
        read_at(&disk_img, u64::try_from(SECOND_AT).unwrap(), second.len()),
        second.as_bytes(),
        "disk.img holds the second marker 2 MiB in"
    );

    // The VMI: DataVolumesReady True, Running, the guest reads both markers.
    wait_for(
        "the VMI's DataVolumesReady True",
        Duration::from_secs(120),
        || {
            deployed
                .vmi_condition("DataVolumesReady")
                .filter(|c| c["status"] == "True")
        },
        logs,
    );
    wait_for(
        "the VMI Running",
        Duration::from_secs(300),
        || {
            deployed
                .get("vmi", VM)
                .filter(|v| v["status"]["phase"] == "Running")
        },
        logs,
    );
    let pod = deployed
        .launcher_of(VM)
        .unwrap_or_else(|| panic!("no launcher pod of {VM}\n{}", logs()));
    let ip = pod["status"]["podIP"]
        .as_str()
        .expect("the pod's IP")
        .to_string();
    let text = wait_for(
        &format!("the guest's results on http://{ip}:{GUEST_PORT}/r"),
        Duration::from_secs(300),
        || {
            let r = http_get(&ip, GUEST_PORT, "/r");
            if r.is_none() {
                std::thread::sleep(Duration::from_secs(1));
            }
            r
        },
        logs,
    );
    eprintln!(
        "real datavolume: guest results after {:.1} s:\n{text}",
        started.elapsed().as_secs_f64()
    );
    assert!(text.contains("checks done"), "{text}");
    assert!(text.contains(&format!("dv first=[{first}]")), "{text}");
    assert!(text.contains(&format!("dv second=[{second}]")), "{text}");
}
