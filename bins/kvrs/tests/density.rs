//! KubeVirt v1.9.0's density scenario (`tests/performance/density.go`) on the real node of
//! `real_node.rs`: a primer VMI, then N minimal VMIs (container disk, masquerade, 90Mi memory
//! and 100m CPU as request and limit) created 100 ms apart, then N VMs with runStrategy Always
//! created the same way. Per batch it prints creation → Running (P50 / P95 / max), the API
//! calls per VMI against the thresholds of that test (VMI patches per pod create ≤ 2, VMI
//! updates per pod create ≤ 10, from kube-apiserver's `apiserver_request_total`), CPU seconds
//! per component and per VM, resident memory per VM outside QEMU, and where the time goes (the
//! first moment each step of every VMI was seen through a watch, the handler's log).
//!
//! A bench, not a test: it asserts nothing about the figures and is `#[ignore]`d; run it with
//! `benches/density.sh` (as root). `N` (default 100) sets the batch size.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::kubectl_json;
use common::real_node::{Deployed, qemu_processes};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kvrs_test_cluster::{NODE_NAME, wait_for};
use kvrs_test_guest::pod::{is_root, repo_root};
use serde_json::{Value, json};

const NS: &str = "kvrs-density";
/// density.go's pause between two creates.
const CREATE_INTERVAL: Duration = Duration::from_millis(100);
/// The machine is shared with other sessions: no more creates below this much available
/// memory, and a batch is given up (and deleted) below half of it.
const MEM_FLOOR_MIB: u64 = 2048;

/// `MemAvailable` of `/proc/meminfo`, in MiB.
fn mem_available_mib() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024)
}

/// Seconds since the epoch: watch events, client calls and container log lines on one clock.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The first moment each step of each VMI (by name) was seen.
type Marks = Arc<Mutex<HashMap<String, BTreeMap<&'static str, f64>>>>;

fn mark(marks: &Marks, vmi: &str, step: &'static str, at: f64) {
    let mut marks = marks.lock().unwrap();
    marks
        .entry(vmi.to_string())
        .or_default()
        .entry(step)
        .or_insert(at);
}

/// The steps a VMI, its launcher pod and virt-handler go through; the breakdown lists them in
/// the order of their median moment.
const STEPS: &[&str] = &[
    "created",
    "vmi seen",
    "vmi Pending",
    "vmi Scheduling",
    "pod seen",
    "pod scheduled",
    "pod sandbox ready",
    "pod initialized",
    "pod Running",
    "vmi Scheduled",
    "launcher reached",
    "network ready",
    "domain synced",
    "vmi Running",
];

fn vmi_step(phase: &str) -> Option<&'static str> {
    Some(match phase {
        "Pending" => "vmi Pending",
        "Scheduling" => "vmi Scheduling",
        "Scheduled" => "vmi Scheduled",
        "Running" => "vmi Running",
        _ => return None,
    })
}

/// Records the steps of the VMIs and launcher pods of [`NS`] as the watches deliver them, until
/// the returned tasks are aborted. The watches back off after an error (a spinning retry would
/// take a core, and never reach an await point where the runtime could stop it).
fn watch(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    marks: &Marks,
) -> [tokio::task::JoinHandle<()>; 2] {
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &vmi_resource());
    let m = Arc::clone(marks);
    let vmi_watch = rt.spawn(async move {
        let mut events =
            std::pin::pin!(watcher(vmis, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            let (watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = (match event {
                Ok(e) => e,
                Err(_) => continue,
            }) else {
                continue;
            };
            let at = now();
            let name = o.metadata.name.clone().unwrap_or_default();
            mark(&m, &name, "vmi seen", at);
            if let Some(step) = o.data["status"]["phase"].as_str().and_then(vmi_step) {
                mark(&m, &name, step, at);
            }
        }
    });
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        NS,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
    );
    let m = Arc::clone(marks);
    let pod_watch = rt.spawn(async move {
        let mut events =
            std::pin::pin!(watcher(pods, watcher::Config::default()).default_backoff());
        while let Some(event) = events.next().await {
            let (watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = (match event {
                Ok(e) => e,
                Err(_) => continue,
            }) else {
                continue;
            };
            let at = now();
            let Some(vmi) = o
                .metadata
                .owner_references
                .as_ref()
                .and_then(|r| r.iter().find(|r| r.kind == "VirtualMachineInstance"))
                .map(|r| r.name.clone())
            else {
                continue;
            };
            mark(&m, &vmi, "pod seen", at);
            if o.data["spec"]["nodeName"].is_string() {
                mark(&m, &vmi, "pod scheduled", at);
            }
            let condition = |t: &str| {
                o.data["status"]["conditions"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
            };
            if condition("PodReadyToStartContainers") {
                mark(&m, &vmi, "pod sandbox ready", at);
            }
            if condition("Initialized") {
                mark(&m, &vmi, "pod initialized", at);
            }
            if o.data["status"]["phase"] == "Running" {
                mark(&m, &vmi, "pod Running", at);
            }
        }
    });
    [vmi_watch, pod_watch]
}

fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

/// density.go's VMI: the fixture guest of `fixtures/run/guest-vm.yaml` (kernel boot and an
/// empty container disk, the images the real-node test boots) without its cloud-init disk,
/// masquerade on the pod network, 90Mi memory and 100m CPU as request and limit.
fn vmi_spec() -> Value {
    let text = std::fs::read_to_string(repo_root().join("fixtures/run/guest-vm.yaml"))
        .expect("the fixture VM");
    let vm: Value = serde_norway::from_str(&text).expect("the fixture VM's YAML");
    let mut spec = vm["spec"]["template"]["spec"].clone();
    spec["domain"]["devices"]["disks"]
        .as_array_mut()
        .expect("disks")
        .retain(|d| d["name"] != "cloudinitdisk");
    spec["volumes"]
        .as_array_mut()
        .expect("volumes")
        .retain(|v| v["name"] != "cloudinitdisk");
    let limits = json!({"memory": "90Mi", "cpu": "100m"});
    spec["domain"]["resources"] = json!({"requests": limits, "limits": limits});
    spec
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Vmi,
    Vm,
}

/// Creates `names` one after the other, 100 ms apart (density.go's rate control), recording
/// when each create was sent.
async fn create_batch(client: &kube::Client, kind: Kind, names: &[String], marks: &Marks) {
    let spec = vmi_spec();
    let (vmis, vms): (Api<DynamicObject>, Api<DynamicObject>) = (
        Api::namespaced_with(client.clone(), NS, &vmi_resource()),
        Api::namespaced_with(client.clone(), NS, &vm_resource()),
    );
    for name in names {
        if let Some(free) = mem_available_mib()
            && free < MEM_FLOOR_MIB
        {
            println!(
                "density: stopped creating at {name}: only {free} MiB available (floor {MEM_FLOOR_MIB} MiB; the machine is shared)"
            );
            return;
        }
        let labels = json!({"kvrs.io/density": name});
        let object = match kind {
            Kind::Vmi => json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": NS, "labels": labels},
                "spec": spec,
            }),
            Kind::Vm => json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"runStrategy": "Always",
                         "template": {"metadata": {"labels": labels}, "spec": spec}},
            }),
        };
        let object: DynamicObject = serde_json::from_value(object).expect("a VMI or VM");
        mark(marks, name, "created", now());
        let api = if kind == Kind::Vmi { &vmis } else { &vms };
        if let Err(e) = api.create(&PostParams::default(), &object).await {
            eprintln!("density: creating {name}: {e}");
        }
        tokio::time::sleep(CREATE_INTERVAL).await;
    }
}

// --- what the machine did ------------------------------------------------------------------

/// Whether a process belongs to the real node: its cgroup (containerd, the shims, the kubelet,
/// kube-proxy and every pod) is `kvrs-node`'s. Other sessions on this machine may run QEMUs and
/// API servers of their own; they are not counted.
fn in_node(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
        c.lines()
            .any(|l| l.contains(":/kvrs-node/") || l.ends_with(":/kvrs-node"))
    })
}

/// CPU ticks (own + reaped children) and resident KiB of the node's processes and the control
/// plane's (`cluster_pids`), by PID, with their names.
fn processes(cluster_pids: &[u32]) -> HashMap<u32, (String, u64, u64)> {
    let mut out = HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        if !cluster_pids.contains(&pid) && !in_node(pid) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let fields: Vec<u64> = stat[close + 2..]
            .split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect();
        if fields.len() < 22 {
            continue;
        }
        // After the name: state(0) ... utime(11) stime(12) cutime(13) cstime(14) ... rss(21).
        let ticks = fields[11] + fields[12] + fields[13] + fields[14];
        out.insert(pid, (comm, ticks, fields[21] * 4));
    }
    out
}

/// The component a process belongs to, by its name (`comm`, cut at 15 bytes).
fn component(comm: &str) -> &'static str {
    match comm {
        "virt-controller" => "virt-controller",
        "virt-handler" => "virt-handler",
        "virt-api" => "virt-api",
        "virt-launcher" | "virt-launcher-m" | "libvirtd" | "virtqemud" | "virtlogd" => {
            "launchers (outside QEMU)"
        }
        c if c.starts_with("qemu-system") => "QEMU",
        "kubelet" => "kubelet",
        "containerd" | "containerd-shim" | "runc" | "pause" => "containerd + shims + runc",
        "kube-apiserver" => "kube-apiserver",
        "etcd" => "etcd",
        "kube-controller" | "kube-scheduler" | "kube-proxy" => {
            "kube-controller-manager/scheduler/proxy"
        }
        _ => "other",
    }
}

/// Proportional set size of a process in KiB (`smaps_rollup`): shared pages split among
/// their users.
fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Pss:"))?
                .trim()
                .trim_end_matches(" kB")
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The machine's busy and total jiffies (`/proc/stat`).
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().unwrap_or(0))
        .collect();
    let total: u64 = cpu.iter().sum();
    let idle = cpu.get(3).copied().unwrap_or(0) + cpu.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `apiserver_request_total` summed by (verb, resource, subresource).
fn api_requests(deployed: &Deployed) -> BTreeMap<(String, String, String), f64> {
    let out = deployed.cluster.kubectl(["get", "--raw", "/metrics"]);
    let mut sums = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |key: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{key}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        *sums
            .entry((label("verb"), label("resource"), label("subresource")))
            .or_insert(0.0) += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    sums
}

/// What the machine looked like when a batch started.
struct Before {
    processes: HashMap<u32, (String, u64, u64)>,
    jiffies: (u64, u64),
    requests: BTreeMap<(String, String, String), f64>,
    at: Instant,
}

impl Before {
    fn take(deployed: &Deployed) -> Before {
        Before {
            processes: processes(&deployed.cluster.pids()),
            jiffies: machine_jiffies(),
            requests: api_requests(deployed),
            at: Instant::now(),
        }
    }
}

fn percentile(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    // Nearest rank, as Prometheus' histogram_quantile approximates it.
    let rank = (p * sorted.len()).div_ceil(100);
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn sorted(mut v: Vec<f64>) -> Vec<f64> {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

/// virt-handler's steps for each VMI, from its log with the container runtime's timestamps:
/// the launcher reached, the pod network ready, and the end of the first sync that sent
/// `SyncVirtualMachine` (the launcher's capability probe, define and start of the domain). The
/// log is kept in `DENSITY_LOGS`.
fn handler_marks(deployed: &Deployed, label: &str, names: &[String], marks: &Marks) {
    let out = deployed.cluster.kubectl([
        "logs",
        "-n",
        "kubevirt",
        "-l",
        "kubevirt.io=virt-handler",
        "--tail",
        "-1",
        "--timestamps",
        "-c",
        "virt-handler",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let dir = std::env::var("DENSITY_LOGS").unwrap_or_else(|_| "/tmp/kvrs-density".into());
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(format!("{dir}/virt-handler-{label}.log"), text.as_bytes());
    let wanted: std::collections::HashSet<&str> = names.iter().map(String::as_str).collect();
    for line in text.lines() {
        let Some((stamp, rest)) = line.split_once(' ') else {
            continue;
        };
        // The span names the VMI: `object=NS/NAME}` (syncs) or `vmi=NS/NAME}` (pod network).
        let Some(name) = rest
            .split_once(&format!("={NS}/"))
            .and_then(|(_, after)| after.split_once('}'))
            .map(|(name, _)| name)
            .filter(|name| wanted.contains(name))
        else {
            continue;
        };
        let Some(at) = rfc3339_utc(stamp) else {
            continue;
        };
        if rest.contains("launcher reached") {
            mark(marks, name, "launcher reached", at);
        }
        if rest.contains("pod network ready") {
            mark(marks, name, "network ready", at);
        }
        if rest.contains(": synced ") && rest.contains("\"SyncVirtualMachine\"") {
            mark(marks, name, "domain synced", at);
        }
    }
}

/// Seconds since the epoch of an RFC 3339 UTC timestamp (`2026-12-05T21:40:01.123456789Z`).
fn rfc3339_utc(stamp: &str) -> Option<f64> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.splitn(3, ':');
    let (h, min) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    let sec: f64 = t.next()?.parse().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3_600.0 + min * 60.0 + sec)
}

/// Prints a batch's figures.
fn report(
    deployed: &Deployed,
    label: &str,
    names: &[String],
    marks: &Marks,
    before: &Before,
    all_running: bool,
) {
    let wall = before.at.elapsed().as_secs_f64();
    let after = processes(&deployed.cluster.pids());
    let (busy, total) = machine_jiffies();
    let requests = api_requests(deployed);
    let n = names.len();
    let marks_now = marks.lock().unwrap().clone();
    let to_running = sorted(
        names
            .iter()
            .filter_map(|name| {
                let m = marks_now.get(name)?;
                Some(m.get("vmi Running")? - m.get("created")?)
            })
            .collect(),
    );
    println!(
        "{label}: {} of {n} Running{}; creation -> Running P50 {:.2} s, P95 {:.2} s, max {:.2} s \
         (wall {wall:.1} s from the first create)",
        to_running.len(),
        if all_running {
            ""
        } else {
            " (not all: figures of those Running)"
        },
        percentile(&to_running, 50),
        percentile(&to_running, 95),
        to_running.last().copied().unwrap_or(f64::NAN),
    );

    if !all_running {
        let pods = kubectl_json(&deployed.cluster, &["get", "pods", "-n", NS]);
        let items = pods
            .as_ref()
            .and_then(|p| p["items"].as_array().cloned())
            .unwrap_or_default();
        let unschedulable: Vec<String> = items
            .iter()
            .filter_map(|p| {
                p["status"]["conditions"]
                    .as_array()?
                    .iter()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")?["message"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        let node = kubectl_json(&deployed.cluster, &["get", "node", NODE_NAME]);
        let requests = items.first().map(|p| {
            p["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{}: {}", c["name"], c["resources"]["requests"]))
                .collect::<Vec<_>>()
                .join("; ")
        });
        println!(
            "{label}: {} launcher pods unschedulable ({}); the node allocates cpu {} memory {}; a launcher pod requests {}",
            unschedulable.len(),
            unschedulable.first().map_or("", String::as_str),
            node.as_ref()
                .map_or(Value::Null, |n| n["status"]["allocatable"]["cpu"].clone()),
            node.as_ref()
                .map_or(Value::Null, |n| n["status"]["allocatable"]["memory"]
                    .clone()),
            requests.unwrap_or_default(),
        );
    }
    let delta = |verb: &str, resource: &str| -> (f64, String) {
        let mut sum = 0.0;
        let mut parts = Vec::new();
        for ((v, r, s), value) in &requests {
            if v == verb && r == resource {
                let d = value
                    - before
                        .requests
                        .get(&(v.clone(), r.clone(), s.clone()))
                        .unwrap_or(&0.0);
                if d > 0.0 {
                    sum += d;
                    parts.push(format!(
                        "{}: {d:.0}",
                        if s.is_empty() { "object" } else { s }
                    ));
                }
            }
        }
        (sum, parts.join(", "))
    };
    let pods = requests
        .get(&("POST".into(), "pods".into(), String::new()))
        .map_or(0.0, |after| {
            after
                - before
                    .requests
                    .get(&("POST".into(), "pods".into(), String::new()))
                    .unwrap_or(&0.0)
        });
    let (patches, patch_parts) = delta("PATCH", "virtualmachineinstances");
    let (updates, update_parts) = delta("PUT", "virtualmachineinstances");
    let per_pod = |x: f64| if pods > 0.0 { x / pods } else { f64::NAN };
    println!(
        "{label}: API calls (apiserver_request_total): pod creates {pods:.0}; VMI patches {patches:.0} ({patch_parts}) = {:.2} per pod create (KubeVirt's threshold <= 2: {}); VMI updates {updates:.0} ({update_parts}) = {:.2} per pod create (threshold <= 10: {})",
        per_pod(patches),
        if per_pod(patches) <= 2.0 {
            "met"
        } else {
            "NOT met"
        },
        per_pod(updates),
        if per_pod(updates) <= 10.0 {
            "met"
        } else {
            "NOT met"
        },
    );
    let mut all: Vec<_> = requests
        .iter()
        .map(|(k, v)| (k, v - before.requests.get(k).unwrap_or(&0.0)))
        .filter(|(_, d)| *d >= 1.0)
        .collect();
    all.sort_by(|a, b| b.1.partial_cmp(&a.1).unwrap());
    println!(
        "{label}: all API requests in the batch, per VMI: {}",
        all.iter()
            .map(|((v, r, s), d)| format!(
                "{v} {r}{}{} {:.2}",
                if s.is_empty() { "" } else { "/" },
                s,
                d / n as f64
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );

    let tick = 100.0; // USER_HZ on Linux
    let mut cpu: BTreeMap<&str, f64> = BTreeMap::new();
    let mut rss: BTreeMap<String, (u64, u64, u64)> = BTreeMap::new();
    for (pid, (comm, ticks, kib)) in &after {
        let was = before
            .processes
            .get(pid)
            .filter(|(c, ..)| c == comm)
            .map_or(0, |p| p.1);
        *cpu.entry(component(comm)).or_default() += ticks.saturating_sub(was) as f64 / tick;
        if component(comm) == "launchers (outside QEMU)" || comm.starts_with("qemu-system") {
            let e = rss.entry(comm.clone()).or_default();
            e.0 += kib;
            e.1 += 1;
            e.2 += pss_kib(*pid);
        }
    }
    let machine = (busy - before.jiffies.0) as f64 / tick;
    let machine_share = (busy - before.jiffies.0) as f64 / (total - before.jiffies.1) as f64;
    println!(
        "{label}: CPU seconds from the first create to the end of the wait ({wall:.1} s wall; the machine {machine:.1} CPU-s, {:.0}% of its {} cores busy; processes' own + reaped children's):",
        machine_share * 100.0,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut rows: Vec<_> = cpu.iter().collect();
    rows.sort_by(|a, b| b.1.partial_cmp(a.1).unwrap());
    for (name, secs) in rows {
        println!(
            "  {name:<42} {secs:>8.2} s  {:>7.3} s per VM",
            secs / n as f64
        );
    }
    let launchers = rss.get("virt-launcher-m").map_or(0, |e| e.1).max(1);
    let (outside, outside_pss) = rss
        .iter()
        .filter(|(c, _)| !c.starts_with("qemu-system"))
        .fold((0, 0), |(r, p), (_, e)| (r + e.0, p + e.2));
    println!(
        "{label}: RSS per VM outside QEMU {:.1} MiB (PSS {:.1} MiB: shared library pages counted once) ({} launcher pods: {}); QEMU {:.1} MiB per VM",
        outside as f64 / 1024.0 / launchers as f64,
        outside_pss as f64 / 1024.0 / launchers as f64,
        launchers,
        rss.iter()
            .filter(|(c, _)| !c.starts_with("qemu-system"))
            .map(|(c, e)| format!("{c} {:.1}", e.0 as f64 / 1024.0 / e.1 as f64))
            .collect::<Vec<_>>()
            .join(", "),
        rss.iter()
            .filter(|(c, _)| c.starts_with("qemu-system"))
            .map(|(_, e)| e.0 as f64 / 1024.0 / e.1.max(1) as f64)
            .sum::<f64>(),
    );

    handler_marks(deployed, label, names, marks);
    let marks_now = marks.lock().unwrap().clone();
    // Over the VMIs that reached Running: those the node had no room for took other steps only.
    let names: Vec<&String> = names
        .iter()
        .filter(|n| {
            marks_now
                .get(*n)
                .is_some_and(|m| m.contains_key("vmi Running"))
        })
        .collect();
    println!(
        "{label}: where the time goes (seconds after the create, over the {} VMIs Running: median / P95; \
         each step's gain over the step before it, mean):",
        names.len()
    );
    let offsets = |step: &str| -> Vec<f64> {
        sorted(
            names
                .iter()
                .filter_map(|name| {
                    let m = marks_now.get(*name)?;
                    Some(m.get(step)? - m.get("created")?)
                })
                .collect(),
        )
    };
    let mut steps: Vec<(&str, Vec<f64>)> = STEPS
        .iter()
        .map(|step| (*step, offsets(step)))
        .filter(|(_, o)| !o.is_empty())
        .collect();
    steps.sort_by(|a, b| {
        percentile(&a.1, 50)
            .partial_cmp(&percentile(&b.1, 50))
            .unwrap()
    });
    let mut biggest = ("", "", 0.0);
    for (i, (step, offsets)) in steps.iter().enumerate() {
        let gain = i.checked_sub(1).map(|p| {
            let previous = steps[p].0;
            let gains: Vec<f64> = names
                .iter()
                .filter_map(|name| {
                    let m = marks_now.get(*name)?;
                    Some(m.get(step)? - m.get(previous)?)
                })
                .collect();
            (
                previous,
                gains.iter().sum::<f64>() / gains.len().max(1) as f64,
            )
        });
        if let Some((previous, g)) = gain
            && g > biggest.2
        {
            biggest = (previous, step, g);
        }
        println!(
            "  {step:<19} {:>7.2} / {:>7.2} s{}",
            percentile(offsets, 50),
            percentile(offsets, 95),
            gain.map_or(String::new(), |(p, g)| format!("   {g:+.2} s after {p}"))
        );
    }
    println!(
        "{label}: the biggest cost: {} -> {} (+{:.2} s mean per VMI)",
        biggest.0, biggest.1, biggest.2
    );
    println!("{label}: load average at the end: {}", loadavg());
}

/// Deletes every VMI and VM of the namespace and waits until no VMI, pod or QEMU is left.
fn delete_all(deployed: &Deployed, n: usize) {
    deployed.kubectl_ok(&["delete", "vm,vmi", "--all", "-n", NS, "--wait=false"]);
    wait_for(
        "every VMI, launcher pod and QEMU gone",
        Duration::from_secs(120 + 6 * n as u64),
        || {
            let vmis = kubectl_json(&deployed.cluster, &["get", "vm,vmi", "-n", NS])?;
            let pods = kubectl_json(&deployed.cluster, &["get", "pods", "-n", NS])?;
            (vmis["items"].as_array()?.is_empty()
                && pods["items"].as_array()?.is_empty()
                && !qemu_processes().into_iter().any(in_node))
            .then_some(())
        },
        || deployed.logs(),
    );
}

/// Runs one batch: creates it, waits until every VMI is Running (or the time is up), reports.
fn batch(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    deployed: &Deployed,
    marks: &Marks,
    (label, kind, names): (&str, Kind, Vec<String>),
) {
    let before = Before::take(deployed);
    rt.block_on(create_batch(client, kind, &names, marks));
    // density.go waits 5 minutes for 100; this node has 2 cores and runs the guests under TCG.
    let deadline = Instant::now() + Duration::from_secs(300.max(6 * names.len() as u64));
    let running = |m: &Marks| {
        let m = m.lock().unwrap();
        names
            .iter()
            .filter(|n| m.get(*n).is_some_and(|m| m.contains_key("vmi Running")))
            .count()
    };
    let mut lowest = u64::MAX;
    // Stalled: no step of any VMI of the batch seen for a minute (pods the node has no room
    // for stay Pending).
    let progress = |m: &Marks| {
        let m = m.lock().unwrap();
        names
            .iter()
            .filter_map(|n| m.get(n))
            .map(|m| m.len())
            .sum::<usize>()
    };
    let (mut seen, mut moved) = (progress(marks), Instant::now());
    while running(marks) < names.len() && Instant::now() < deadline {
        let now_seen = progress(marks);
        if now_seen != seen {
            (seen, moved) = (now_seen, Instant::now());
        } else if moved.elapsed() > Duration::from_secs(60) {
            println!("{label}: no VMI moved for 60 s: given up waiting");
            break;
        }
        let free = mem_available_mib().unwrap_or(u64::MAX);
        lowest = lowest.min(free);
        if free < MEM_FLOOR_MIB / 2 {
            println!("{label}: given up: only {free} MiB available");
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    lowest = lowest.min(mem_available_mib().unwrap_or(u64::MAX));
    println!("{label}: lowest MemAvailable while waiting: {lowest} MiB");
    let all = running(marks) == names.len();
    report(deployed, label, &names, marks, &before, all);
    delete_all(deployed, names.len());
}

#[test]
#[ignore = "a bench: run by benches/density.sh"]
fn density() {
    assert!(is_root(), "the real node needs root");
    let n: usize = std::env::var("N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let kvm = kvrs_node::host_devices::kvm_check();
    let accel = match &kvm {
        Ok(()) => "KVM".to_string(),
        Err(e) => format!(
            "TCG with useEmulation (no KVM for ordinary guests here: {e}; KubeVirt's anchor ran under KVM)"
        ),
    };
    println!(
        "density: N={n}; guests under {accel}; load average at the start {}",
        loadavg()
    );
    let deployed = Deployed::start(NS, kvm.is_err());
    if kvm.is_err() {
        deployed.wait_emulation_taken();
    }
    deployed.wait_node_schedulable();
    deployed.kubectl_ok(&["create", "namespace", NS]);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let client = rt.block_on(async {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(deployed.cluster.admin_kubeconfig_path())
                .expect("the admin kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("a client config");
        kube::Client::try_from(config).expect("a client")
    });
    let marks: Marks = Default::default();
    let watches = watch(&rt, &client, &marks);

    let names = |prefix: &str, count: usize| -> Vec<String> {
        (1..=count).map(|i| format!("{prefix}-{i}")).collect()
    };
    // density.go's primer: one VMI Running before the batches (image volumes, caches).
    batch(
        &rt,
        &client,
        &deployed,
        &marks,
        ("primer", Kind::Vmi, names("primer", 1)),
    );
    batch(
        &rt,
        &client,
        &deployed,
        &marks,
        ("VMIs", Kind::Vmi, names("vmi", n)),
    );
    batch(
        &rt,
        &client,
        &deployed,
        &marks,
        ("VMs", Kind::Vm, names("vm", n)),
    );
    println!("density: load average at the end {}", loadavg());
    for task in watches {
        task.abort();
    }
    drop(client);
    rt.shutdown_timeout(Duration::from_secs(5));

    let mut deployed = deployed;
    let node = deployed.node.take().expect("the node");
    node.stop()
        .unwrap_or_else(|e| panic!("the node left something behind: {e}"));
}
