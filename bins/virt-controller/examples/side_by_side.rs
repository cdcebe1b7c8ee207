//! kvrs's virt-controller and KubeVirt v1.9.0's own, side by side on one API server
//! (`benches/controller-side-by-side.sh`; not run by CI).
//!
//! One real kube-apiserver + etcd + kube-controller-manager (the GC and the namespace
//! controller; no scheduler, no kubelet) carries KubeVirt's own CRDs and both controllers' RBAC
//! (KubeVirt's printed by `benches/kubevirt/manifests`, from its operator's packages; kvrs's from
//! `bins/deploy`), one KubeVirt CR (`useEmulation`) and one schedulable Node. Then, in rounds,
//! each controller in turn (the order alternates between rounds, so neither always runs on the
//! warmer API server):
//!
//! 1. the controller is started alone (KubeVirt's with its ServiceAccount and its leader
//!    election, kvrs's with its own and `--no-leader-elect`) and waited for (KubeVirt's `/leader`,
//!    kvrs's `/readyz`);
//! 2. N VirtualMachines (`runStrategy: Always`, the small VM of the e2e tests) are created in a
//!    fresh namespace, 32 requests in flight, and metadata watches see the VMIs and the launcher
//!    pods appear: VMs/s from the first create to the N-th pod;
//! 3. API requests per VM by verb and resource (`apiserver_request_total` deltas until the write
//!    count is stable for 2 s; the benchmark's own N creates subtracted; the metric has no user
//!    label, so the controller manager's requests are in it for both), and CPU seconds of the
//!    controller, the API server and etcd;
//! 4. the controller is stopped, the round's objects lose their finalizers and the namespace is
//!    deleted and waited for, so the next controller starts on an empty cluster.
//!
//! Without `--virt-api`, no virt-api stands in front of either controller: each admits the VMIs
//! it creates its own way (KubeVirt's controller applies no webhook; kvrs's admits them in
//! process). With `--virt-api`, kvrs's virt-api serves KubeVirt's webhooks (registered by URL on
//! loopback) for both, restarted per run with that controller's service account, and kvrs's
//! controller runs with `--virt-api-webhooks`. (KubeVirt's own virt-api would need its operator's
//! certificates and handler CA; the same webhook for both keeps the comparison about the
//! controllers.)
//!
//! ```text
//! bash benches/controller-side-by-side.sh 300 2   # both set-ups, without and with virt-api
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, PartialObjectMeta, Patch, PatchParams, PostParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kvrs_test_cluster::{Options, TestCluster, free_loopback_port};
use serde_json::json;

#[path = "burst/cpu.rs"]
mod cpu;
#[path = "burst/shared.rs"]
mod shared;

use shared::{
    ControllerProc, Requests, controller_log_tail, count, http_status, is_write, kubectl_ok,
    kubevirt_resource, request_totals, root, vm, watch_names, writes_of,
};

/// The side-by-side benchmark's flags.
#[derive(Debug, Parser)]
struct Args {
    /// VirtualMachines per run.
    #[arg(long, default_value_t = 300)]
    vms: usize,
    /// Rounds; each runs both controllers once.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// kvrs's virt-controller binary.
    #[arg(long)]
    kvrs: PathBuf,
    /// The directory `benches/kubevirt/build.sh` printed (KubeVirt's `virt-controller` and
    /// `kvrs-bench-manifests`).
    #[arg(long)]
    kubevirt_bin: PathBuf,
    /// Requests in flight while creating.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up when a run does not converge within this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// kvrs's virt-api binary: when given, every run goes through virt-api's webhooks (one
    /// virt-api for both controllers, told the running controller's service account, as an
    /// operator deploys it; kvrs's controller then leaves admission to it, `--virt-api-webhooks`).
    #[arg(long)]
    virt_api: Option<PathBuf>,
    /// Keep each run's controller log in this directory (the cluster's is removed at exit).
    #[arg(long)]
    keep_logs: Option<PathBuf>,
}

/// Which controller a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Flavor {
    Kvrs,
    KubeVirt,
}

impl Flavor {
    fn label(self) -> &'static str {
        match self {
            Flavor::Kvrs => "kvrs",
            Flavor::KubeVirt => "KubeVirt",
        }
    }
}

/// What one run measured.
struct Run {
    flavor: Flavor,
    round: usize,
    vms_per_second: f64,
    /// Requests per VM by (verb, resource), the benchmark's own creates subtracted.
    requests: BTreeMap<(String, String), f64>,
    controller_cpu: f64,
    virt_api_cpu: f64,
    /// Admission webhook calls per VM (the benchmark's own VM creates included).
    webhook_calls_per_vm: f64,
    apiserver_cpu: f64,
    etcd_cpu: f64,
}

impl Run {
    fn total(&self, pick: impl Fn(&str) -> bool) -> f64 {
        self.requests
            .iter()
            .filter(|((verb, resource), _)| pick(verb) && resource != "leases")
            .map(|(_, v)| v)
            .sum()
    }
}

const NAMESPACE: &str = "kubevirt";

/// KubeVirt's CRDs and controller RBAC, kvrs's controller RBAC, the KubeVirt CR, one Node; and
/// with `virt_api_port`, virt-api's webhook configurations calling `https://127.0.0.1:PORT`.
fn set_up(cluster: &TestCluster, manifests: &str, virt_api_port: Option<u16>) -> Result<()> {
    let deploy = root().join("bins/deploy/virt-controller");
    for f in [
        "00-namespace.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "role.yaml",
        "rolebinding.yaml",
    ] {
        let path = deploy.join(f);
        kubectl_ok(
            cluster,
            &["apply", "-f", path.to_str().unwrap_or_default()],
            None,
        )
        .with_context(|| f.to_string())?;
    }
    // `create`, not `apply`: KubeVirt's CRDs exceed the last-applied annotation's size limit.
    kubectl_ok(cluster, &["create", "-f", "-"], Some(manifests)).context("KubeVirt's CRDs")?;
    cluster
        .wait_for_crds(
            &[
                "virtualmachines.kubevirt.io",
                "virtualmachineinstances.kubevirt.io",
                "kubevirts.kubevirt.io",
                "virtualmachinepools.pool.kubevirt.io",
            ],
            Duration::from_secs(60),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let objects = [
        json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt", "namespace": NAMESPACE},
            "spec": {"configuration": {"developerConfiguration": {"useEmulation": true}}}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node01",
            "labels": {"kubevirt.io/schedulable": "true"}}}),
    ];
    for obj in objects {
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&obj.to_string()))?;
    }
    if let Some(port) = virt_api_port {
        register_webhooks(cluster, port)?;
    }
    Ok(())
}

/// The shipped webhook configurations (`bins/deploy/virt-api`), each entry calling virt-api on
/// loopback instead of its Service (no kube-proxy here).
fn register_webhooks(cluster: &TestCluster, port: u16) -> Result<()> {
    let dir = root().join("bins/deploy/virt-api");
    for file in [
        "mutatingwebhookconfiguration.yaml",
        "validatingwebhookconfiguration.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file))?;
        let mut conf: serde_json::Value = serde_norway::from_str(&text)?;
        let Some(hooks) = conf["webhooks"].as_array_mut() else {
            bail!("{file}: no webhooks");
        };
        for hook in hooks {
            let path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            hook["clientConfig"] = json!({"url": format!("https://127.0.0.1:{port}{path}")});
        }
        kubectl_ok(cluster, &["create", "-f", "-"], Some(&conf.to_string()))?;
    }
    Ok(())
}

/// virt-api for one run, told `flavor`'s controller service account; ready once its `/healthz`
/// answers and it has published its CA in the webhook configurations.
fn start_virt_api(
    cluster: &TestCluster,
    bin: &std::path::Path,
    port: u16,
    flavor: Flavor,
    log: &std::path::Path,
) -> Result<ControllerProc> {
    let controller_sa = match flavor {
        Flavor::Kvrs => "kvrs-controller",
        Flavor::KubeVirt => "kubevirt-controller",
    };
    let child = Command::new(bin)
        .arg("--kubeconfig")
        .arg(cluster.admin_kubeconfig_path())
        .args([
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--tls-san",
            "127.0.0.1",
        ])
        .args(["--controller-service-account", controller_sa])
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let mut proc = ControllerProc(child);
    let published = || {
        cluster
            .kubectl([
                "get",
                "mutatingwebhookconfiguration",
                "kvrs-virt-api-mutator",
                "-o",
                "jsonpath={.webhooks[0].clientConfig.caBundle}",
            ])
            .stdout
            .len()
            > 100
    };
    let started = Instant::now();
    while !(https_status(port, "/healthz") == 200 && published()) {
        if let Some(status) = proc.0.try_wait()? {
            bail!("virt-api exited ({status}):\n{}", controller_log_tail(log));
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!(
                "virt-api not ready within 60 s:\n{}",
                controller_log_tail(log)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(proc)
}

/// A self-signed serving certificate for KubeVirt's controller's HTTPS endpoint (its
/// `--prom-cert-file` / `--prom-key-file`; the operator would mount one).
fn serving_cert(dir: &std::path::Path) -> Result<(PathBuf, PathBuf)> {
    let (crt, key) = (dir.join("kv-controller.crt"), dir.join("kv-controller.key"));
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=virt-controller"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&crt)
        .output()
        .context("running openssl")?;
    if !out.status.success() {
        bail!("openssl: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok((crt, key))
}

/// KubeVirt's readiness probe: `GET /leader` on its HTTPS port answers 200 once it leads and
/// its informers are synced.
fn https_status(port: u16, path: &str) -> u16 {
    Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// Starts `flavor`'s controller and waits until it is ready.
async fn start_controller(
    cluster: &TestCluster,
    args: &Args,
    flavor: Flavor,
    log: &std::path::Path,
) -> Result<ControllerProc> {
    let port = free_loopback_port();
    let log_file = std::fs::File::create(log)?;
    let mut command = match flavor {
        Flavor::Kvrs => {
            let token = cluster.service_account_token(NAMESPACE, "kvrs-controller");
            let mut c = Command::new(&args.kvrs);
            c.arg("--kubeconfig")
                .arg(cluster.kubeconfig_for_token(&token))
                .args(["--identity", "a", "--no-leader-elect"])
                .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
                .args(args.virt_api.is_some().then_some("--virt-api-webhooks"))
                .env("RUST_LOG", "info")
                .env("NO_COLOR", "1");
            c
        }
        Flavor::KubeVirt => {
            // A new leader would wait out the previous run's lease otherwise.
            let _ = cluster.kubectl(["delete", "lease", "-n", NAMESPACE, "virt-controller"]);
            let token = cluster.service_account_token(NAMESPACE, "kubevirt-controller");
            let (crt, key) = serving_cert(cluster.dir())?;
            let mut c = Command::new(args.kubevirt_bin.join("virt-controller"));
            c.arg("--kubeconfig")
                .arg(cluster.kubeconfig_for_token(&token))
                .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
                .arg("--prom-cert-file")
                .arg(crt)
                .arg("--prom-key-file")
                .arg(key)
                .args(["--launcher-image", "quay.io/kubevirt/virt-launcher:v1.9.0"]);
            c
        }
    };
    let child = command
        .stdout(log_file.try_clone()?)
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("starting {}'s virt-controller", flavor.label()))?;
    let mut proc = ControllerProc(child);
    let started = Instant::now();
    loop {
        let ready = match flavor {
            Flavor::Kvrs => http_status(port, "/readyz") == 200,
            Flavor::KubeVirt => https_status(port, "/leader") == 200,
        };
        if ready {
            break;
        }
        if let Some(status) = proc.0.try_wait()? {
            bail!(
                "{}'s virt-controller exited ({status}):\n{}",
                flavor.label(),
                controller_log_tail(log)
            );
        }
        if started.elapsed() > Duration::from_secs(180) {
            bail!(
                "{}'s virt-controller not ready within 180 s:\n{}",
                flavor.label(),
                controller_log_tail(log)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "side-by-side: {}'s controller ready in {:.1} s",
        flavor.label(),
        started.elapsed().as_secs_f64()
    );
    Ok(proc)
}

/// Requests by (verb, resource[/subresource]) between two samples (the group left out: the
/// resource names of the two controllers' requests do not collide across groups).
fn request_deltas(before: &Requests, after: &Requests) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for (key, v) in after {
        let d = v - before.get(key).copied().unwrap_or_default();
        if d <= 0.0 {
            continue;
        }
        let (verb, _, resource, sub) = key;
        let what = if sub.is_empty() {
            resource.clone()
        } else {
            format!("{resource}/{sub}")
        };
        *out.entry((verb.clone(), what)).or_default() += d;
    }
    out
}

/// Admission webhook calls by webhook name (`apiserver_admission_webhook_admission_duration_
/// seconds_count`, summed over operation, type and rejection): proof that virt-api was asked.
fn webhook_calls(cluster: &TestCluster) -> Result<BTreeMap<String, f64>> {
    let text = kubectl_ok(cluster, &["get", "--raw", "/metrics"], None)?;
    let mut out = BTreeMap::new();
    for line in String::from_utf8_lossy(&text).lines() {
        let Some(rest) =
            line.strip_prefix("apiserver_admission_webhook_admission_duration_seconds_count{")
        else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let name = labels
            .split("\",")
            .find_map(|pair| pair.strip_prefix("name=\""))
            .unwrap_or_default()
            .trim_end_matches('"')
            .to_string();
        *out.entry(name).or_default() += value.trim().parse::<f64>().unwrap_or(0.0);
    }
    Ok(out)
}

/// One run: `flavor`'s controller, N VMs in a fresh namespace, then everything removed.
async fn run(
    cluster: &TestCluster,
    client: &kube::Client,
    args: &Args,
    virt_api_port: Option<u16>,
    flavor: Flavor,
    round: usize,
) -> Result<Run> {
    let n = args.vms;
    let timeout = Duration::from_secs(args.timeout_secs);
    let ns = format!("sbs-{}-{round}", flavor.label().to_lowercase());
    kubectl_ok(
        cluster,
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}).to_string(),
        ),
    )?;
    // Pods need their namespace's `default` ServiceAccount (the controller manager creates it).
    poll(
        &format!("the default ServiceAccount of {ns}"),
        Duration::from_secs(60),
        || {
            cluster
                .kubectl(["get", "serviceaccount", "default", "-n", &ns])
                .status
                .success()
        },
    )?;

    let virt_api = match (&args.virt_api, virt_api_port) {
        (Some(bin), Some(port)) => {
            let log = cluster.dir().join(format!("virt-api-{ns}.log"));
            Some(start_virt_api(cluster, bin, port, flavor, &log)?)
        }
        _ => None,
    };
    let log = cluster.dir().join(format!("controller-{ns}.log"));
    let controller = start_controller(cluster, args, flavor, &log).await?;
    let vm_res = kubevirt_resource("VirtualMachine");
    let vmi_res = kubevirt_resource("VirtualMachineInstance");
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &vm_res);
    let seen_vmis = watch_names(
        Api::<PartialObjectMeta<DynamicObject>>::namespaced_with(client.clone(), &ns, &vmi_res),
        watcher::Config::default(),
        n,
    );
    let seen_pods = watch_names(
        Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), &ns),
        watcher::Config::default().labels("kubevirt.io=virt-launcher"),
        n,
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut watched = vec![("virt-controller", controller.0.id())];
    if let Some(api) = &virt_api {
        watched.push(("virt-api", api.0.id()));
    }
    let cpu = cpu::Watch::new(&cluster.pids(), &watched);
    let before = request_totals(cluster)?;
    let hooks_before = webhook_calls(cluster)?;
    let cpu_start = cpu.sample();

    eprintln!(
        "side-by-side: round {round}, {}: {n} VirtualMachines",
        flavor.label()
    );
    let start = Instant::now();
    let results: Vec<Result<DynamicObject, kube::Error>> = futures::stream::iter(0..n)
        .map(|i| {
            let vms = vms.clone();
            let ns = ns.clone();
            async move {
                let obj: DynamicObject =
                    serde_json::from_value(vm(&format!("vm-{i:05}"), &ns)).expect("a VM");
                vms.create(&PostParams::default(), &obj).await
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        bail!("creating VirtualMachines: {e}");
    }
    let pods_at = loop {
        let (nv, _) = count(&seen_vmis);
        let (np, tp) = count(&seen_pods);
        if let Some(tp) = tp {
            break tp;
        }
        if start.elapsed() > timeout {
            bail!(
                "{} did not converge within {timeout:?}: {nv} VMIs and {np} launcher pods of {n}\n{}",
                flavor.label(),
                controller_log_tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let vms_per_second = n as f64 / pods_at.duration_since(start).as_secs_f64();
    // Until the controller stops writing (status updates trail the pod creates).
    let writes = |r: &Requests| writes_of(&before, r);
    let settle = Instant::now();
    let mut after = request_totals(cluster)?;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let next = request_totals(cluster)?;
        let settled = writes(&next) == writes(&after);
        after = next;
        if settled || settle.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let cpu_end = cpu.sample();
    let hooks_after = webhook_calls(cluster)?;
    let webhook_calls_per_vm = hooks_after
        .iter()
        .map(|(k, v)| v - hooks_before.get(k).copied().unwrap_or_default())
        .sum::<f64>()
        / n as f64;
    drop(controller);
    if let Some(dir) = &args.keep_logs {
        std::fs::create_dir_all(dir)?;
        std::fs::copy(&log, dir.join(format!("controller-{ns}.log")))?;
        let api_log = cluster.dir().join(format!("virt-api-{ns}.log"));
        if api_log.is_file() {
            std::fs::copy(&api_log, dir.join(format!("virt-api-{ns}.log")))?;
        }
    }
    cpu.print(
        &format!(
            "round {round}, {} (first create -> writes settled)",
            flavor.label()
        ),
        &cpu_start,
        &cpu_end,
    );

    let mut requests = request_deltas(&before, &after);
    if let Some(v) = requests.get_mut(&("POST".to_string(), "virtualmachines".to_string())) {
        *v -= n as f64;
    }
    let requests = requests
        .into_iter()
        .map(|(k, v)| (k, v / n as f64))
        .filter(|(_, v)| *v > 0.0)
        .collect();
    let seconds = |name: &str| cpu.seconds(name, &cpu_start, &cpu_end).unwrap_or(0.0);
    let result = Run {
        flavor,
        round,
        vms_per_second,
        requests,
        controller_cpu: seconds("virt-controller"),
        virt_api_cpu: seconds("virt-api"),
        webhook_calls_per_vm,
        apiserver_cpu: seconds("kube-apiserver"),
        etcd_cpu: seconds("etcd"),
    };
    clean_up(cluster, client, &ns).await?;
    drop(virt_api);
    Ok(result)
}

/// Removes a run's objects: with no controller running, the VMs' and VMIs' finalizers would
/// hold the namespace's deletion forever, so they are dropped first.
async fn clean_up(cluster: &TestCluster, client: &kube::Client, ns: &str) -> Result<()> {
    for kind in ["VirtualMachineInstance", "VirtualMachine"] {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &kubevirt_resource(kind));
        let names: Vec<String> = api
            .list_metadata(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .collect();
        let results: Vec<Result<DynamicObject, kube::Error>> = futures::stream::iter(names)
            .map(|name| {
                let api = api.clone();
                async move {
                    api.patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            bail!("dropping finalizers in {ns}: {e}");
        }
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.delete(ns, &DeleteParams::default()).await?;
    poll(
        &format!("namespace {ns} to be gone"),
        Duration::from_secs(300),
        || !cluster.kubectl(["get", "namespace", ns]).status.success(),
    )?;
    Ok(())
}

/// Polls `done` every 200 ms until it holds, or fails naming `what` after `timeout`.
fn poll(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + timeout;
    while !done() {
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn print(runs: &[Run], args: &Args) {
    let n = args.vms;
    println!();
    println!(
        "controller side by side: {n} VMs per run, {} rounds, {} requests in flight, {}; {} cores, load at the end: {}",
        args.rounds,
        args.concurrency,
        if args.virt_api.is_some() {
            "kvrs's virt-api in front of both"
        } else {
            "no virt-api"
        },
        std::thread::available_parallelism().map_or(1, usize::from),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!(
        "{:<6} {:<9} {:>8} {:>10} {:>12} {:>14} {:>15} {:>9}",
        "round",
        "controller",
        "VMs/s",
        "writes/VM",
        "requests/VM",
        "controller CPU",
        "apiserver CPU",
        "etcd CPU"
    );
    for r in runs {
        println!(
            "{:<6} {:<9} {:>8.2} {:>10.2} {:>12.2} {:>13.2}s {:>14.2}s {:>8.2}s",
            r.round,
            r.flavor.label(),
            r.vms_per_second,
            r.total(is_write),
            r.total(|_| true),
            r.controller_cpu,
            r.apiserver_cpu,
            r.etcd_cpu
        );
    }
    let of = |f: Flavor, pick: &dyn Fn(&Run) -> f64| {
        median(runs.iter().filter(|r| r.flavor == f).map(pick).collect())
    };
    type Pick = Box<dyn Fn(&Run) -> f64>;
    let mut figures: Vec<(&str, Pick)> = vec![
        (
            "VMs/s (first create -> N-th launcher pod)",
            Box::new(|r: &Run| r.vms_per_second),
        ),
        (
            "API writes per VM (Leases excluded)",
            Box::new(|r: &Run| r.total(is_write)),
        ),
        (
            "API requests per VM (all verbs, Leases excluded)",
            Box::new(|r: &Run| r.total(|_| true)),
        ),
        (
            "controller CPU seconds per 100 VMs",
            Box::new(move |r: &Run| 100.0 * r.controller_cpu / n as f64),
        ),
        (
            "API server CPU seconds per 100 VMs",
            Box::new(move |r: &Run| 100.0 * r.apiserver_cpu / n as f64),
        ),
    ];
    if args.virt_api.is_some() {
        figures.push((
            "virt-api CPU seconds per 100 VMs",
            Box::new(move |r: &Run| 100.0 * r.virt_api_cpu / n as f64),
        ));
        figures.push((
            "admission webhook calls per VM (VM creates included)",
            Box::new(|r: &Run| r.webhook_calls_per_vm),
        ));
    }
    println!();
    println!(
        "{:<50} {:>10} {:>10} {:>12}",
        "median over rounds", "kvrs", "KubeVirt", "kvrs/KubeVirt"
    );
    for (name, pick) in figures {
        let (k, g) = (of(Flavor::Kvrs, &*pick), of(Flavor::KubeVirt, &*pick));
        println!("{name:<50} {k:>10.2} {g:>10.2} {:>12.2}", k / g);
    }
    println!();
    println!(
        "requests per VM by verb and resource (mean over rounds; the benchmark's own VM creates subtracted; the metric counts every client, the controller manager's too)"
    );
    println!(
        "{:<8} {:<44} {:>10} {:>10}",
        "verb", "resource", "kvrs", "KubeVirt"
    );
    let mut keys: Vec<&(String, String)> = runs.iter().flat_map(|r| r.requests.keys()).collect();
    keys.sort();
    keys.dedup();
    let mean = |f: Flavor, key: &(String, String)| {
        let of_flavor: Vec<&Run> = runs.iter().filter(|r| r.flavor == f).collect();
        of_flavor
            .iter()
            .map(|r| r.requests.get(key).copied().unwrap_or_default())
            .sum::<f64>()
            / of_flavor.len().max(1) as f64
    };
    for key in keys {
        println!(
            "{:<8} {:<44} {:>10.2} {:>10.2}",
            key.0,
            key.1,
            mean(Flavor::Kvrs, key),
            mean(Flavor::KubeVirt, key)
        );
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    if !args.kvrs.is_file() {
        bail!("no kvrs virt-controller at {}", args.kvrs.display());
    }
    let manifests_bin = args.kubevirt_bin.join("kvrs-bench-manifests");
    let manifests = Command::new(&manifests_bin)
        .args(["--namespace", NAMESPACE])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", manifests_bin.display()))?;
    if !manifests.status.success() {
        bail!("{} failed", manifests_bin.display());
    }
    let manifests = String::from_utf8(manifests.stdout)?;

    eprintln!("side-by-side: starting the cluster");
    let cluster = TestCluster::start(Options {
        controller_manager: true,
        scheduler: false,
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let virt_api_port = args.virt_api.as_ref().map(|_| free_loopback_port());
    set_up(&cluster, &manifests, virt_api_port)?;
    let kubeconfig = Kubeconfig::read_from(cluster.admin_kubeconfig_path())?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;

    let mut runs = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [Flavor::Kvrs, Flavor::KubeVirt]
        } else {
            [Flavor::KubeVirt, Flavor::Kvrs]
        };
        for flavor in order {
            runs.push(run(&cluster, &client, &args, virt_api_port, flavor, round).await?);
        }
    }
    print(&runs, &args);
    Ok(())
}
