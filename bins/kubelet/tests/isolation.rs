//! Pods are containers (issue 43): two pods planned as KubeVirt renders its non-root launcher
//! (UID 107; capabilities drop ALL, add NET_BIND_SERVICE; allowPrivilegeEscalation false), set
//! up and run with real runc, each probing from inside as UID 107:
//! - no host file outside its volumes is readable or writable (`/work`, `/root`, `/home`,
//!   `/etc/shadow`, and world-readable / world-writable marker files the test leaves in the
//!   host's `/tmp`), its root is its own and read-only;
//! - no host PID is visible (`/proc` holds only the pod's own process);
//! - the neighbour's Unix socket is unreachable, by its host path, through
//!   `/proc/<neighbour's host pid>/root`, through any `/proc/<pid>/root` it can see, and as an
//!   abstract socket — while its own socket answers;
//! - capabilities, `no_new_privs` and seccomp are as planned (`/proc/self/status`; `keyctl` and
//!   `clone3` answer as the runtime's default profile makes them);
//! - from the host, the pod's socket is reachable through `/proc/<pid>/root` as virt-handler
//!   reaches the launcher's.
//!
//! Neither has an image directory, so each gets the host's `/usr` narrowed to the launcher's
//! libraries, data and programs: host programs outside that set (`runc`, `gcc`), `/usr/include`
//! and `/usr/local` are not there either.
//!
//! A third pod's image resolves to a directory (a merged-`/usr` image holding only a static
//! busybox): its root is that image, and from inside, as UID 107, no host file is there — not
//! `/etc/shadow`, `/root`, the host's `python3` (which the binary map names for the other two),
//! its `runc`, `gcc` or C library — while the image's own busybox runs.
//!
//! Then all are stopped (SIGTERM, `runc delete --force`) and nothing is left: runc state,
//! cgroups, network namespaces, mounts, directories. Needs root; runs the runc `kvrs run` uses
//! (built by `scripts/install-test-deps.sh` when missing, see `common::runc`), never skips.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kvrs_kubelet::host::{self, Footprint};
use kvrs_kubelet::plan::PodPlan;
use kvrs_kubelet::root::RootSource;
use kvrs_kubelet::{BinaryMap, ImageMap, KubeletConfig, VolumeObjects, plan_pod, plan_pod_on};
use nix::sys::signal::Signal;
use serde_json::{Value, json};

mod common;
use common::{is_root, runc};

const NODE: &str = "kvrs-iso-node";

/// The probe: runs as the pod's first process (python3 from the host's /usr, which the
/// container sees read-only), serves its socket, waits for the test to name the neighbour, then
/// probes and writes `result.json` into its own volume.
const PROBE: &str = r#"
import ctypes, json, os, signal, socket, sys, time
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
vol = "/run/kubevirt/sockets"
role = os.environ["ROLE"]
srv = socket.socket(socket.AF_UNIX); srv.bind(f"{vol}/{role}.sock"); srv.listen(16)
abstract = socket.socket(socket.AF_UNIX); abstract.bind(b"\0kvrs-iso-" + role.encode()); abstract.listen(16)
open(f"{vol}/ready", "w").write("1")
while not os.path.exists(f"{vol}/peer.json"):
    time.sleep(0.02)
peer = json.load(open(f"{vol}/peer.json"))

def err(e):
    return f"errno {e.errno}"

def connect(addr):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(2)
    try:
        s.connect(addr)
        return "connected"
    except OSError as e:
        return err(e)
    finally:
        s.close()

def read(path):
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").read(64)
        return "read"
    except OSError as e:
        return err(e)

def write(path):
    try:
        with open(path, "w") as f:
            f.write("written by the pod")
        return "written"
    except OSError as e:
        return err(e)

out = {}
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["pids"] = pids
out["cmdlines"] = [open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0].decode() for p in pids]
out["own_socket"] = connect(f"{vol}/{role}.sock")
out["own_abstract"] = connect(b"\0kvrs-iso-" + role.encode())
out["peer_host_path"] = connect(peer["host_socket"])
out["peer_proc_root"] = connect(f"/proc/{peer['host_pid']}/root/run/kubevirt/sockets/{peer['role']}.sock")
out["peer_abstract"] = connect(b"\0kvrs-iso-" + peer["role"].encode())
out["peer_via_visible_roots"] = sorted({connect(f"/proc/{p}/root/run/kubevirt/sockets/{peer['role']}.sock") for p in pids})
out["read"] = {p: read(p) for p in peer["host_paths"] + ["/work", "/root", "/home", "/etc/shadow", "/etc/sudoers"]}
out["write"] = {p: write(p) for p in peer["host_writable"] + ["/work/x", "/root/x", "/home/x", "/x", "/etc/x", "/usr/x", "/usr/bin/x", "/etc/passwd"]}
out["own_volume_write"] = write(f"{vol}/{role}-wrote")
out["own_tmp_write"] = write(f"/tmp/{peer['tmp_name']}")
out["root_entries"] = sorted(os.listdir("/"))
out["dev_entries"] = sorted(os.listdir("/dev"))
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
out["status"] = {k: status[k].strip() for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]}
out["ids"] = [os.getuid(), os.getgid(), os.getgroups()]
libc = ctypes.CDLL(None, use_errno=True)
def syscall(nr, *args):
    r = libc.syscall(nr, *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else f"errno {ctypes.get_errno()}"
# keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): allowed to anyone, refused by the
# runtime's default profile (EPERM); clone3(NULL, 0): ENOSYS from the profile, else EINVAL.
out["keyctl"] = syscall(250, 0, -3, 0)
out["clone3"] = syscall(435, 0, 0)
out["hostname"] = socket.gethostname()
json.dump(out, open(f"{vol}/result.json.tmp", "w"))
os.rename(f"{vol}/result.json.tmp", f"{vol}/result.json")
while True:
    time.sleep(1)
"#;

/// The image-root pod's probe (busybox's shell, from the image): which paths exist, its IDs
/// and its root's entries, as `path state` lines in its volume; then it waits for SIGTERM.
const IMAGE_PROBE: &str = r#"
bb=/usr/bin/busybox
vol=/run/kubevirt/sockets
trap 'exit 0' TERM
{
  for p in $($bb cat $vol/paths); do
    if [ -e "$p" ] || [ -L "$p" ]; then echo "$p exists"; else echo "$p absent"; fi
  done
  if $bb cat /etc/shadow >/dev/null 2>&1; then echo "/etc/shadow read"; fi
  echo "uid $($bb id -u)"
  echo "root $($bb ls / | $bb tr '
' ' ')"
} > $vol/result.tmp
$bb mv $vol/result.tmp $vol/result
while true; do $bb sleep 1; done
"#;

/// The image the third pod runs on: `example/probe-image` under the test's `--images`.
const PROBE_IMAGE: &str = "example/probe-image";

fn pod(name: &str, uid: &str) -> Pod {
    let mut pod = pod_of(name, uid);
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.command = Some(
        ["/usr/bin/python3", "-u", "/run/kubevirt/sockets/probe.py"]
            .map(String::from)
            .to_vec(),
    );
    pod
}

/// The pod on [`PROBE_IMAGE`], running the image's own busybox (not in the binary map).
fn image_pod(name: &str, uid: &str) -> Pod {
    let mut pod = pod_of(name, uid);
    let c = &mut pod.spec.as_mut().unwrap().containers[0];
    c.image = Some(PROBE_IMAGE.into());
    c.command = Some(
        ["/usr/bin/busybox", "sh", "/run/kubevirt/sockets/probe.sh"]
            .map(String::from)
            .to_vec(),
    );
    pod
}

fn pod_of(name: &str, uid: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kvrs-iso", "uid": uid},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 5,
            "securityContext": {"runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": true, "fsGroup": 107},
            "volumes": [{"name": "sockets", "emptyDir": {}}],
            "containers": [{
                "name": "compute", "image": "example/probe",
                "env": [{"name": "ROLE", "value": name}],
                "securityContext": {
                    "runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": true,
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                },
                "resources": {
                    "limits": {"devices.kubevirt.io/tun": "1", "memory": "64Mi", "cpu": "250m"},
                    "requests": {"memory": "64Mi", "cpu": "250m"},
                },
                "volumeMounts": [{"name": "sockets", "mountPath": "/var/run/kubevirt/sockets"}],
            }],
        },
    }))
    .expect("a pod")
}

struct Running {
    plan: PodPlan,
    fp: Footprint,
    runc: tokio::process::Child,
    pid: u32,
    volume: PathBuf,
}

async fn start(cfg: &KubeletConfig, name: &str, slot: u32) -> Running {
    let uid = format!("0000{}-{name}-4000-8000-000000000043", std::process::id());
    let plan = plan_pod(&pod(name, &uid), cfg, cfg.pod_cidr.address(slot).unwrap()).expect("plan");
    assert!(
        matches!(plan.root, Some(RootSource::Host { .. })),
        "{name}: {:?}",
        plan.root
    );
    launch(cfg, plan, &uid, "probe.py", PROBE).await
}

/// The third pod, planned as the runner plans (image directories looked up on disk).
async fn start_on_image(cfg: &KubeletConfig, name: &str, slot: u32, paths: &[&Path]) -> Running {
    let uid = format!("0000{}-{name}-4000-8000-000000000043", std::process::id());
    let address = cfg.pod_cidr.address(slot).unwrap();
    let plan = plan_pod_on(
        &image_pod(name, &uid),
        cfg,
        address,
        &VolumeObjects::default(),
        Path::is_dir,
    )
    .expect("plan");
    assert!(
        matches!(&plan.root, Some(RootSource::Image { reference, .. }) if reference == PROBE_IMAGE),
        "{name}: {:?}",
        plan.root
    );
    let paths: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
    launch_with(cfg, plan, &uid, "probe.sh", IMAGE_PROBE, |v| {
        std::fs::write(v.join("paths"), &paths).unwrap();
    })
    .await
}

async fn launch(cfg: &KubeletConfig, plan: PodPlan, uid: &str, file: &str, probe: &str) -> Running {
    launch_with(cfg, plan, uid, file, probe, |_| {}).await
}

async fn launch_with(
    cfg: &KubeletConfig,
    plan: PodPlan,
    uid: &str,
    file: &str,
    probe: &str,
    before: impl FnOnce(&Path),
) -> Running {
    let name = plan.key.name.clone();
    let fp = Footprint::of(
        &plan.key,
        &cfg.pods_dir,
        &cfg.state_dir,
        &cfg.oci_runtime(),
        host::cgroup_root(NODE).as_deref(),
    );
    host::setup_files(&plan).expect("files");
    host::setup_network(&plan.network).expect("network");
    let volume = kvrs_ipc::layout::pod_sockets_dir_on_host(&cfg.pods_dir, uid).unwrap();
    std::fs::write(volume.join(file), probe).unwrap();
    before(&volume);
    let (runc, pid) = host::spawn(&plan, &fp.runtime).await.unwrap_or_else(|e| {
        panic!(
            "{name}: {e}\n{}",
            std::fs::read_to_string(&plan.log_path).unwrap_or_default()
        )
    });
    Running {
        plan,
        fp,
        runc,
        pid,
        volume,
    }
}

async fn wait_for(what: &str, path: &Path, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} ({})\nlog:\n{}",
            path.display(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Removes what a failed run left (containers, network namespaces, directories), so a failure
/// does not leak into the machine.
struct Cleanup {
    root: PathBuf,
    cfg: KubeletConfig,
    netns: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let rt = self.cfg.oci_runtime();
        if rt.root.exists() {
            let ids = std::process::Command::new(&rt.program)
                .arg("--root")
                .arg(&rt.root)
                .args(["list", "-q"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for id in ids.split_whitespace() {
                let _ = std::process::Command::new(&rt.program)
                    .args(rt.delete(id))
                    .status();
            }
        }
        for n in &self.netns {
            if Path::new("/run/netns").join(n).exists() {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", n])
                    .status();
            }
        }
        host::remove_node_dirs(NODE, &rt);
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn lines(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_sees_nothing_of_the_host_or_its_neighbour() {
    assert!(
        is_root(),
        "the isolation tests need root (namespaces, cgroups, UID 107)"
    );
    let runc = runc();
    let root = PathBuf::from(format!("/tmp/kiso{}", std::process::id() % 100_000));
    let _ = std::fs::remove_dir_all(&root);
    let mut cfg = KubeletConfig::new(NODE, root.join("p"), root.join("s"));
    cfg.pod_cidr = "10.252.0.0/16".parse().unwrap();
    // As `Kubelet::new` sets it: a sandbox without CAP_SYS_RESOURCE cannot lower a score.
    cfg.oom_score_floor = kvrs_kubelet::node::oom_score_floor();
    cfg.runtime = runc;
    let mut b = BinaryMap::default();
    b.insert("/usr/bin/python3", "/usr/bin/python3");
    cfg.binaries = b;
    for d in [cfg.state_dir.join("logs"), cfg.pods_dir.clone()] {
        std::fs::create_dir_all(d).unwrap();
    }
    // The third pod's image: a merged-/usr tree with only a static busybox.
    cfg.images = ImageMap::from_dir(root.join("images"));
    common::busybox_image(&root.join("images").join(ImageMap::sanitise(PROBE_IMAGE)));
    // Host files that exist here (each checked) and must not be in any pod: the narrowed
    // /usr leaves out the host's other programs, /usr/include and /usr/local.
    let host_only: Vec<&Path> = [
        "/usr/sbin/runc",
        "/usr/bin/gcc",
        "/usr/include",
        "/usr/local",
    ]
    .into_iter()
    .map(Path::new)
    .collect();
    for p in &host_only {
        assert!(
            p.exists(),
            "{} is on this host (scripts/install-test-deps.sh)",
            p.display()
        );
    }

    // What UID 107 could read and write on the host, were it there.
    let marks = root.join("host");
    std::fs::create_dir_all(marks.join("open")).unwrap();
    let secret = marks.join("secret");
    std::fs::write(&secret, "HOST SECRET").unwrap();
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path, m| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m));
    for (p, m) in [(&root, 0o755), (&marks, 0o755), (&secret, 0o644)] {
        mode(p, m).unwrap();
    }
    mode(&marks.join("open"), 0o777).unwrap();
    let tmp_name = format!("kvrs-iso-{}", std::process::id());

    let mut cleanup = Cleanup {
        root: root.clone(),
        cfg: cfg.clone(),
        netns: Vec::new(),
    };
    let alpha = start(&cfg, "alpha", 0).await;
    cleanup.netns.push(alpha.plan.network.netns.clone());
    let beta = start(&cfg, "beta", 1).await;
    cleanup.netns.push(beta.plan.network.netns.clone());
    // What the image-root pod must not see: everything the others must not, the host's
    // python3, its C library, and the test's own host files.
    let libc = Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
    let mut hidden: Vec<&Path> = vec![
        Path::new("/etc/shadow"),
        Path::new("/root"),
        Path::new("/home"),
        Path::new("/work"),
        Path::new("/usr/bin/python3"),
        libc,
        &secret,
        &root,
        Path::new(env!("CARGO_MANIFEST_DIR")),
    ];
    hidden.extend(host_only.iter().copied());
    for p in &hidden {
        assert!(p.exists(), "{} is on this host", p.display());
    }
    let own = Path::new("/usr/bin/busybox");
    let probe_paths: Vec<&Path> = hidden.iter().copied().chain([own]).collect();
    let gamma = start_on_image(&cfg, "gamma", 2, &probe_paths).await;
    cleanup.netns.push(gamma.plan.network.netns.clone());
    let pods = [alpha, beta];
    for p in &pods {
        wait_for(
            "the probe's socket",
            &p.volume.join("ready"),
            &p.plan.log_path,
        )
        .await;
    }
    let host_paths: Vec<PathBuf> = [
        secret.clone(),
        marks.clone(),
        root.clone(),
        cfg.pods_dir.clone(),
        cfg.state_dir.clone(),
        env!("CARGO_MANIFEST_DIR").into(),
    ]
    .into_iter()
    .chain(host_only.iter().map(|p| p.to_path_buf()))
    .collect();
    for (me, peer) in [(0, 1), (1, 0)] {
        let peer = &pods[peer];
        let info = json!({
            "role": peer.plan.key.name,
            "host_pid": peer.pid,
            "host_socket": peer.volume.join(format!("{}.sock", peer.plan.key.name)),
            "host_paths": host_paths,
            "host_writable": [marks.join("open/x"), peer.volume.join("x")],
            "tmp_name": tmp_name,
        });
        std::fs::write(pods[me].volume.join("peer.json"), info.to_string()).unwrap();
    }
    let mut results = Vec::new();
    for p in &pods {
        let file = p.volume.join("result.json");
        wait_for("the probe's result", &file, &p.plan.log_path).await;
        let r: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        eprintln!("{}: {r:#}", p.plan.key.name);
        results.push(r);
    }

    const ENOENT: &str = "errno 2";
    for (p, r) in pods.iter().zip(&results) {
        let name = &p.plan.key.name;
        // Its own processes only: the probe as PID 1.
        assert_eq!(r["pids"], json!([1]), "{name}: {r:#}");
        assert_eq!(r["cmdlines"], json!(["/usr/bin/python3"]), "{name}");
        // Its own socket answers, the neighbour's never.
        assert_eq!(r["own_socket"], "connected", "{name}");
        assert_eq!(r["own_abstract"], "connected", "{name}");
        assert_eq!(r["peer_host_path"], ENOENT, "{name}: {r:#}");
        assert_eq!(r["peer_proc_root"], ENOENT, "{name}: {r:#}");
        assert_eq!(
            r["peer_via_visible_roots"],
            json!([ENOENT]),
            "{name}: {r:#}"
        );
        assert_ne!(
            r["peer_abstract"], "connected",
            "{name}: a network namespace of its own"
        );
        // No host file outside its volumes exists for it; nothing outside them is writable.
        for (path, got) in r["read"].as_object().unwrap() {
            assert_eq!(got, ENOENT, "{name} reading {path}");
        }
        for (path, got) in r["write"].as_object().unwrap() {
            assert_ne!(got, "written", "{name} writing {path}");
        }
        assert_eq!(r["own_volume_write"], "written", "{name}");
        assert_eq!(r["own_tmp_write"], "written", "{name}: its own /tmp");
        assert_eq!(
            r["root_entries"],
            json!([
                "bin", "dev", "etc", "lib", "lib64", "proc", "run", "sbin", "sys", "tmp", "usr",
                "var"
            ]),
            "{name}: a root of its own"
        );
        assert_eq!(
            r["dev_entries"],
            json!([
                "fd", "full", "mqueue", "net", "null", "ptmx", "pts", "random", "shm", "stderr",
                "stdin", "stdout", "tty", "urandom", "zero"
            ]),
            "{name}: only the default nodes and the requested tun"
        );
        // As planned: UID 107 without groups, only NET_BIND_SERVICE in the bounding set and
        // none effective (no ambient or file capabilities), no_new_privs, a seccomp filter.
        assert_eq!(r["ids"], json!([107, 107, []]), "{name}");
        let status = &r["status"];
        assert_eq!(status["CapBnd"], "0000000000000400", "{name}");
        for set in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
            assert_eq!(status[set], "0000000000000000", "{name} {set}");
        }
        assert_eq!(status["NoNewPrivs"], "1", "{name}");
        assert_eq!(status["Seccomp"], "2", "{name}");
        assert_eq!(
            r["keyctl"], "errno 1",
            "{name}: keyctl is not in the profile"
        );
        assert_eq!(r["clone3"], "errno 38", "{name}: clone3 answers ENOSYS");
        assert_eq!(r["hostname"], p.plan.key.name.as_str(), "{name}");
        // virt-handler reaches the pod's files through /proc/<pid>/root, as root on the host.
        let via_root = PathBuf::from(format!(
            "/proc/{}/root/run/kubevirt/sockets/{name}.sock",
            p.pid
        ));
        assert!(
            std::os::unix::net::UnixStream::connect(&via_root).is_ok(),
            "{}",
            via_root.display()
        );
        assert!(
            std::os::unix::net::UnixStream::connect(p.volume.join(format!("{name}.sock"))).is_ok()
        );
    }
    // The image-root pod: the image's busybox runs, no host file is there.
    let file = gamma.volume.join("result");
    wait_for("the image probe's result", &file, &gamma.plan.log_path).await;
    let result = std::fs::read_to_string(&file).unwrap();
    eprintln!("gamma:\n{result}");
    let state = |p: &Path| {
        result
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{} ", p.display())))
            .unwrap_or_else(|| panic!("gamma did not probe {}: {result}", p.display()))
            .to_string()
    };
    assert_eq!(state(own), "exists", "the image's own file");
    for p in &hidden {
        assert_eq!(state(p), "absent", "gamma sees the host's {}", p.display());
    }
    assert!(!result.contains("/etc/shadow read"), "{result}");
    assert!(result.contains("\nuid 107\n"), "{result}");
    assert!(
        result.contains("\nroot bin dev etc lib lib64 proc run sbin sys tmp usr var \n"),
        "a root of its own: {result}"
    );
    let mut pods = {
        let [a, b] = pods;
        [a, b, gamma]
    };

    // Nothing the pods wrote reached the host.
    assert!(!marks.join("open/x").exists());
    assert!(!Path::new(&format!("/tmp/{tmp_name}")).exists());
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "HOST SECRET");
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !host_mounts.contains(root.to_str().unwrap()),
        "no pod mount on the host"
    );

    // The pod's limits are the process's: a Guaranteed pod (limits equal requests) gets the
    // kubelet's OOM score, its memory limit and its CPU quota in its own cgroup.
    for p in &pods {
        let name = &p.plan.key.name;
        let oom = std::fs::read_to_string(format!("/proc/{}/oom_score_adj", p.pid)).unwrap();
        let expected = cfg.oom_score_floor.map_or(-997, |floor| floor.max(-997));
        assert_eq!(oom.trim(), expected.to_string(), "{name}: oom_score_adj");
        let (memory, cpu) = cgroup_limits(p.pid);
        assert_eq!(memory, (64 << 20).to_string(), "{name}: memory limit");
        assert_eq!(cpu, "25000 100000", "{name}: CPU quota and period");
    }

    // Stop: SIGTERM through runc, the probe exits 0, runc with it; then nothing is left.
    for p in &mut pods {
        host::signal_container(&p.fp, Some(p.pid), Signal::SIGTERM).await;
        let status = tokio::time::timeout(Duration::from_secs(10), p.runc.wait())
            .await
            .expect("the probe ends on SIGTERM")
            .unwrap();
        assert!(status.success(), "{}: {status}", p.plan.key.name);
        host::teardown(&p.fp, Some(p.pid)).await;
        assert!(!Path::new(&format!("/proc/{}", p.pid)).exists());
        assert!(!p.plan.state_dir.exists() && !p.plan.pod_dir.exists());
        assert!(
            !lines("ip", &["netns", "list"]).contains(&p.plan.network.netns),
            "netns left"
        );
    }
    host::remove_node_dirs(NODE, &cfg.oci_runtime());
    assert!(!cfg.state_dir.join("runc").exists(), "runc state left");
    let cgroups = lines(
        "find",
        &[
            "/sys/fs/cgroup",
            "-maxdepth",
            "2",
            "-name",
            &format!("kvrs-kubelet-{NODE}"),
        ],
    );
    assert!(cgroups.trim().is_empty(), "cgroups left: {cgroups}");
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!host_mounts.contains(root.to_str().unwrap()));
    drop(cleanup);
}

/// The memory limit (bytes) and the CPU quota and period (µs) of process `pid`'s cgroup, from
/// cgroup v2's `memory.max` / `cpu.max` or v1's memory and cpu hierarchies.
fn cgroup_limits(pid: u32) -> (String, String) {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let path_of = |controller: &str| {
        cgroups
            .lines()
            .find_map(|l| {
                let mut f = l.splitn(3, ':');
                let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
                controllers
                    .split(',')
                    .any(|c| c == controller)
                    .then(|| path.to_string())
            })
            .unwrap_or_else(|| panic!("{pid} has a {controller} cgroup: {cgroups}"))
    };
    let read = |p: String| {
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{p}: {e}"))
            .trim()
            .to_string()
    };
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let path = cgroups
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap()
            .to_string();
        let cpu = read(format!("/sys/fs/cgroup{path}/cpu.max"));
        (read(format!("/sys/fs/cgroup{path}/memory.max")), cpu)
    } else {
        let memory = read(format!(
            "/sys/fs/cgroup/memory{}/memory.limit_in_bytes",
            path_of("memory")
        ));
        let cpu_path = path_of("cpu");
        let quota = read(format!("/sys/fs/cgroup/cpu{cpu_path}/cpu.cfs_quota_us"));
        let period = read(format!("/sys/fs/cgroup/cpu{cpu_path}/cpu.cfs_period_us"));
        (memory, format!("{quota} {period}"))
    }
}
