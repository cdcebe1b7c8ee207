//! The controller burst benchmark (`benches/controller-burst.sh`; not run by CI).
//!
//! On one real kube-apiserver + etcd + kube-controller-manager (the GC; no scheduler, no
//! kubelet) with kvrs's CRDs and virt-controller's RBAC, as the e2e tests set it up:
//!
//! 1. the raw create ceiling: N small ConfigMaps created by the admin with 32 requests in
//!    flight (objects/s, first request sent to last answer);
//! 2. the real `virt-controller` binary (ServiceAccount token, `--no-leader-elect`) is started
//!    and waited for (`/readyz` 200);
//! 3. N VirtualMachines (`runStrategy: Always`, the small VM of the e2e tests) are created with
//!    the same concurrency, and metadata watches see the VMIs and the launcher pods
//!    (`kubevirt.io=virt-launcher`) appear: VMs/s from the first create to the N-th pod;
//! 4. API writes per VM: the deltas of the apiserver's `apiserver_request_total` over write
//!    verbs (POST, PUT, PATCH, DELETE, APPLY, DELETECOLLECTION) from before (3) until the write
//!    count settles, minus the benchmark's own N VM creates, minus Lease writes (the controller
//!    manager's leader election). The metric has no user label, so this counts every client's
//!    writes — in practice kvrs's, since nothing else writes in that window;
//! 5. where the controller's work went, from its own log: reconciles per VM by queue, those that
//!    wrote nothing, failed reconciles and the writes the API server refused (`reconciles.rs`);
//! 6. the raw create ceiling of the objects themselves: with the controller stopped, the VMIs and
//!    launcher pods it wrote are copied (without server-set fields) into the raw namespace, one
//!    VMI then its pod per pair, with the same concurrency (`raw_pairs.rs`): VMs/s against
//!    the API server's own VMI + pod pairs/s;
//! 7. KubeVirt's API writes for the steps that take a new VM to a VMI and a launcher pod, counted
//!    from KubeVirt v1.9.0's recorded reconciles in `../shared/oracle-vm`, next to kvrs's
//!    decisions on the same scenarios (`oracle_chain.rs`; the benchmark fails without them).
//!
//! The controller runs with KubeVirt's worker counts (3 VM, 10 VMI) unless `--vm-workers` /
//! `--vmi-workers` raise them, as an operator of a busy cluster would; the output says which.
//!
//! ```text
//! cargo run --release -p kvrs-virt-controller --example burst -- --vms 1000 \
//!     --controller target/release/virt-controller
//! ```

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DynamicObject, PartialObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use kvrs_test_cluster::{Options, TestCluster, free_loopback_port};
use serde_json::json;

#[path = "burst/cpu.rs"]
mod cpu;
#[path = "burst/oracle_chain.rs"]
mod oracle_chain;
#[path = "burst/queues.rs"]
mod queues;
#[path = "burst/raw_pairs.rs"]
mod raw_pairs;
#[path = "burst/reconciles.rs"]
mod reconciles;
#[path = "burst/shared.rs"]
mod shared;
#[path = "burst/single.rs"]
mod single;

use shared::{
    ControllerProc, Requests, controller_log_tail, count, http_status, kubectl_ok,
    kubevirt_resource, request_totals, root, vm, watch_names, write_deltas, writes_of,
};

/// The burst benchmark's flags.
#[derive(Debug, Parser)]
struct Args {
    /// How many ConfigMaps and VirtualMachines to create.
    #[arg(long, default_value_t = 1000)]
    vms: usize,
    /// The virt-controller binary (relative paths: from the current directory).
    #[arg(long)]
    controller: Option<PathBuf>,
    /// Requests in flight while creating.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Give up when a phase does not converge within this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// The controller's `--vm-workers` (default: the binary's, KubeVirt's 3).
    #[arg(long)]
    vm_workers: Option<usize>,
    /// The controller's `--vmi-workers` (default: the binary's, KubeVirt's 10).
    #[arg(long)]
    vmi_workers: Option<usize>,
    /// VMs created one at a time on the idle controller before the burst (first decision ->
    /// VMI created); 0 skips them.
    #[arg(long, default_value_t = 5)]
    single_runs: usize,
    /// Keep a copy of the controller's log here (the cluster's directory is removed at exit).
    #[arg(long)]
    keep_log: Option<PathBuf>,
}

const VM_NS: &str = "burst-vms";
const RAW_NS: &str = "burst-raw";

/// CRDs, RBAC and the Node, as `tests/support/mod.rs` applies them.
fn set_up(cluster: &TestCluster) -> Result<()> {
    let deploy = root().join("bins/deploy");
    cluster.install_kubevirt_crds(&deploy)?;
    for f in [
        "00-namespace.yaml",
        "serviceaccount.yaml",
        "clusterrole.yaml",
        "clusterrolebinding.yaml",
        "role.yaml",
        "rolebinding.yaml",
    ] {
        let path = deploy.join("virt-controller").join(f);
        kubectl_ok(
            cluster,
            &["apply", "-f", path.to_str().unwrap_or_default()],
            None,
        )
        .with_context(|| f.to_string())?;
    }
    let objects = [
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node01",
            "labels": {"kubevirt.io/schedulable": "true"}}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": VM_NS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RAW_NS}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": single::NS}}),
    ];
    for obj in objects {
        kubectl_ok(cluster, &["apply", "-f", "-"], Some(&obj.to_string()))?;
    }
    // Pods need their namespace's `default` ServiceAccount (the controller manager creates it).
    let start = Instant::now();
    for ns in [VM_NS, RAW_NS, single::NS] {
        while !cluster
            .kubectl(["get", "serviceaccount", "default", "-n", ns])
            .status
            .success()
        {
            if start.elapsed() > Duration::from_secs(60) {
                bail!("no default ServiceAccount in {ns} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let n = args.vms;
    let timeout = Duration::from_secs(args.timeout_secs);
    let controller_bin = args
        .controller
        .clone()
        .unwrap_or_else(|| root().join("target/release/virt-controller"));
    // The corpus first: a benchmark that cannot print its comparison fails before it starts.
    let oracle_dir = oracle_chain::corpus_dir()?;
    let oracle_steps = oracle_chain::count(&oracle_dir)?;
    if !controller_bin.is_file() {
        bail!(
            "no virt-controller binary at {} (cargo build --release -p kvrs-virt-controller)",
            controller_bin.display()
        );
    }

    eprintln!("burst: starting the cluster");
    let cluster_start = Instant::now();
    let cluster = TestCluster::start(Options {
        controller_manager: true,
        scheduler: false,
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    set_up(&cluster)?;
    let cluster_wall = cluster_start.elapsed();

    let kubeconfig = Kubeconfig::read_from(cluster.admin_kubeconfig_path())?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;

    // (a) The raw create ceiling.
    eprintln!(
        "burst: raw ceiling: {n} ConfigMaps, {} in flight",
        args.concurrency
    );
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), RAW_NS);
    let cluster_cpu = cpu::Watch::new(
        &cluster.pids(),
        &[("burst (this benchmark)", std::process::id())],
    );
    let raw_cpu_start = cluster_cpu.sample();
    let raw_start = Instant::now();
    let results: Vec<Result<ConfigMap, kube::Error>> = futures::stream::iter(0..n)
        .map(|i| {
            let cms = cms.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:05}"), "namespace": RAW_NS},
                    "data": {"key": "value"},
                }))
                .expect("a ConfigMap");
                cms.create(&PostParams::default(), &cm).await
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    let raw_wall = raw_start.elapsed();
    let raw_cpu_end = cluster_cpu.sample();
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        bail!("creating ConfigMaps: {e}");
    }
    let raw_rate = n as f64 / raw_wall.as_secs_f64();

    // (b) The controller.
    let token = cluster.service_account_token("kubevirt", "kvrs-controller");
    let controller_kubeconfig = cluster.kubeconfig_for_token(&token);
    let port = free_loopback_port();
    let log = cluster.dir().join("virt-controller-burst.log");
    let log_file = std::fs::File::create(&log)?;
    let mut command = Command::new(&controller_bin);
    command
        .arg("--kubeconfig")
        .arg(&controller_kubeconfig)
        .args(["--identity", "a", "--no-leader-elect"])
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")]);
    if let Some(w) = args.vm_workers {
        command.args(["--vm-workers", &w.to_string()]);
    }
    if let Some(w) = args.vmi_workers {
        command.args(["--vmi-workers", &w.to_string()]);
    }
    let child = command
        .env("RUST_LOG", reconciles::CONTROLLER_LOG)
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .with_context(|| format!("starting {}", controller_bin.display()))?;
    let mut controller = ControllerProc(child);
    let ready_start = Instant::now();
    while http_status(port, "/readyz") != 200 {
        if let Some(status) = controller.0.try_wait()? {
            bail!(
                "virt-controller exited ({status}):\n{}",
                controller_log_tail(&log)
            );
        }
        if ready_start.elapsed() > Duration::from_secs(120) {
            bail!(
                "virt-controller not ready within 120 s:\n{}",
                controller_log_tail(&log)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ready_wall = ready_start.elapsed();
    let vm_res = kubevirt_resource("VirtualMachine");
    let vmi_res = kubevirt_resource("VirtualMachineInstance");

    // (b') One VM at a time on the idle controller.
    eprintln!("burst: {} VMs one at a time", args.single_runs);
    let singles = single::run(&client, &vm_res, &vmi_res, vm, args.single_runs, timeout).await?;

    // (c) The VM burst.
    let cpu_watch = cpu::Watch::new(
        &cluster.pids(),
        &[
            ("virt-controller", controller.0.id()),
            ("burst (this benchmark)", std::process::id()),
        ],
    );
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), VM_NS, &vm_res);
    let vmis: Api<PartialObjectMeta<DynamicObject>> =
        Api::namespaced_with(client.clone(), VM_NS, &vmi_res);
    let pods: Api<PartialObjectMeta<Pod>> = Api::namespaced(client.clone(), VM_NS);
    let seen_vmis = watch_names(vmis, watcher::Config::default(), n);
    let seen_pods = watch_names(
        pods,
        watcher::Config::default().labels("kubevirt.io=virt-launcher"),
        n,
    );
    // Let both watches finish their initial list before the clock starts.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = request_totals(&cluster)?;
    let queues_before = queues::scrape(port);
    let cpu_start = cpu_watch.sample();

    eprintln!("burst: {n} VirtualMachines, {} in flight", args.concurrency);
    let burst_start = Instant::now();
    let results: Vec<Result<DynamicObject, kube::Error>> = futures::stream::iter(0..n)
        .map(|i| {
            let vms = vms.clone();
            async move {
                let obj: DynamicObject =
                    serde_json::from_value(vm(&format!("vm-{i:05}"), VM_NS)).expect("a VM");
                vms.create(&PostParams::default(), &obj).await
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    let creates_wall = burst_start.elapsed();
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        bail!("creating VirtualMachines: {e}");
    }
    let mut last_report = Instant::now();
    let (vmis_at, pods_at) = loop {
        let (nv, tv) = count(&seen_vmis);
        let (np, tp) = count(&seen_pods);
        if let (Some(tv), Some(tp)) = (tv, tp) {
            break (tv, tp);
        }
        if let Some(status) = controller.0.try_wait()? {
            bail!(
                "virt-controller exited ({status}) with {nv} VMIs and {np} pods of {n}:\n{}",
                controller_log_tail(&log)
            );
        }
        if burst_start.elapsed() > timeout {
            bail!(
                "did not converge within {timeout:?}: {nv} VMIs and {np} launcher pods of {n}\n\
                 controller log tail:\n{}",
                controller_log_tail(&log)
            );
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "burst: {:>5.1} s: {nv} VMIs, {np} launcher pods",
                burst_start.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cpu_at_pods = cpu_watch.sample();
    let queues_at_pods = queues::scrape(port);
    let at_pods = request_totals(&cluster)?;
    let vmi_wall = vmis_at.duration_since(burst_start);
    let pod_wall = pods_at.duration_since(burst_start);
    let vm_rate = n as f64 / pod_wall.as_secs_f64();

    // (d) Writes per VM, once the controller has stopped writing (status updates trail the
    // pod creates): two samples 2 s apart with the same write count, at most 60 s.
    let writes = |r: &Requests| writes_of(&before, r);
    let settle_start = Instant::now();
    let mut after = request_totals(&cluster)?;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let next = request_totals(&cluster)?;
        let settled = writes(&next) == writes(&after);
        after = next;
        if settled || settle_start.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    let settled_wall = burst_start.elapsed();
    let deltas = write_deltas(&before, &after);
    let total_writes: f64 = deltas.values().sum();
    let controller_writes = total_writes - n as f64;

    // (e) The raw ceiling of the same objects, with the controller stopped (it would
    // reconcile the copies). The log is complete once the process is gone.
    drop(controller);
    eprintln!(
        "burst: raw ceiling: {n} VMI + launcher pod pairs, {} in flight",
        args.concurrency
    );
    let pairs = raw_pairs::copy_pairs(&client, &vmi_res, VM_NS, RAW_NS, n).await?;
    let pairs_cpu_start = cluster_cpu.sample();
    let raw = raw_pairs::create(&client, &vmi_res, RAW_NS, pairs, args.concurrency).await?;
    let pairs_cpu_end = cluster_cpu.sample();
    let pair_rate = raw.rate();

    println!();
    println!(
        "controller burst: {n} VMs, {} requests in flight",
        args.concurrency
    );
    let workers = |flag: Option<usize>, default: usize| match flag {
        Some(w) => format!("{w} (raised by flag; KubeVirt's default is {default})"),
        None => format!("{default} (KubeVirt's default)"),
    };
    // The binary's own defaults, which are KubeVirt's.
    let defaults = <kvrs_virt_controller::Flags as clap::Parser>::parse_from(["virt-controller"]);
    println!(
        "controller workers: VM {}, VMI {}",
        workers(args.vm_workers, defaults.vm_workers),
        workers(args.vmi_workers, defaults.vmi_workers)
    );
    println!("{:<52} {:>12}", "figure", "value");
    println!(
        "{:<52} {:>12.1}",
        "raw create ceiling (ConfigMaps/s)", raw_rate
    );
    println!(
        "{:<52} {:>12.1}",
        "kvrs VMs/s (first VM create -> N-th launcher pod)", vm_rate
    );
    println!(
        "{:<52} {:>12.2}",
        "ratio kvrs / raw (goal >= 0.50)",
        vm_rate / raw_rate
    );
    println!(
        "{:<52} {:>12.1}",
        "raw VMI + launcher pod creates (pairs/s)", pair_rate
    );
    println!(
        "{:<52} {:>12.2}",
        "ratio kvrs VMs/s / raw pairs/s",
        vm_rate / pair_rate
    );
    let per_vm = controller_writes / n as f64;
    println!("{:<52} {:>12.2}", "API writes per VM (see below)", per_vm);
    // The arithmetic of the goal: W writes per VM at C writes/s is at most C/W VMs/s.
    let writes_to_pods = writes_of(&before, &at_pods) - n as f64;
    let write_rate = writes_to_pods / pod_wall.as_secs_f64();
    // W for the bound: the writes sent by the time the N-th pod exists, per VM (the status
    // writes that trail a VM's pod and are still to come are not on its way to the pod).
    let per_vm_to_pods = writes_to_pods / n as f64;
    println!(
        "{:<52} {:>12.2}",
        "  of which sent by the N-th pod (W)", per_vm_to_pods
    );
    let bound = raw_rate / per_vm_to_pods;
    println!(
        "{:<52} {:>12.1}",
        "controller API writes/s (first create -> N-th pod)", write_rate
    );
    println!(
        "{:<52} {:>12.2}",
        "  as a fraction of the raw ceiling",
        write_rate / raw_rate
    );
    println!(
        "{:<52} {:>12.1}",
        "C/W: ceiling / writes per VM (VMs/s bound)", bound
    );
    println!("{:<52} {:>12.2}", "kvrs VMs/s / (C/W)", vm_rate / bound);
    println!(
        "{:<52} {:>11.2}s",
        "wall: cluster start + setup",
        cluster_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: raw ConfigMap creates",
        raw_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: controller start -> /readyz 200",
        ready_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: VM creates (benchmark's own requests)",
        creates_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: first VM create -> N-th VMI seen",
        vmi_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: first VM create -> N-th launcher pod seen",
        pod_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: first VM create -> writes settled",
        settled_wall.as_secs_f64()
    );
    println!(
        "{:<52} {:>11.2}s",
        "wall: raw VMI + pod pair creates",
        raw.wall.as_secs_f64()
    );
    println!();
    println!(
        "writes counted: apiserver_request_total deltas, verbs POST/PUT/PATCH/DELETE/APPLY/\n\
         DELETECOLLECTION, from before the VM creates until the write count was stable for 2 s;\n\
         Lease writes excluded; the benchmark's own {n} VM creates subtracted. The metric has no\n\
         user label: every client's writes are in it (kvrs's, the controller manager's)."
    );
    println!(
        "{:<8} {:<40} {:>10} {:>9}",
        "verb", "resource", "requests", "per VM"
    );
    for ((verb, group, resource, sub), d) in &deltas {
        let mut what = if group.is_empty() {
            resource.clone()
        } else {
            format!("{resource}.{group}")
        };
        if !sub.is_empty() {
            what = format!("{what}/{sub}");
        }
        println!("{verb:<8} {what:<40} {d:>10} {:>9.2}", d / n as f64);
    }
    println!(
        "\nthe goal's arithmetic: each VM takes W = {per_vm_to_pods:.2} API writes (events included) by\n\
         the time the N-th pod exists ({per_vm:.2} once the trailing status writes are in) and the\n\
         API server creates at most C = {raw_rate:.0} small objects/s here, so no controller turns\n\
         VMs into VMIs and pods faster than C/W = {bound:.1} VMs/s; the goal of 0.5 C = {:.0} VMs/s\n\
         would need W <= 2. The controller's own rate is its API writes/s against C ({:.2} of it)\n\
         and its VMs/s against C/W ({:.2} of it). (A VM or VMI write costs the server more than\n\
         a ConfigMap create: custom resources are JSON, larger, and patches read-modify-write.)\n\
         Against the objects themselves: the API server creates {pair_rate:.1} VMI + launcher pod\n\
         pairs/s when nothing else happens (2 writes per VM); kvrs starts {vm_rate:.1} VMs/s with\n\
         W = {per_vm_to_pods:.2} writes each, {:.2} of that ceiling.",
        raw_rate / 2.0,
        write_rate / raw_rate,
        vm_rate / bound,
        vm_rate / pair_rate
    );
    cluster_cpu.print("the raw ConfigMap creates", &raw_cpu_start, &raw_cpu_end);
    cluster_cpu.print(
        "the raw VMI + launcher pod creates",
        &pairs_cpu_start,
        &pairs_cpu_end,
    );
    cpu_watch.print(
        "the burst (first VM create -> N-th launcher pod)",
        &cpu_start,
        &cpu_at_pods,
    );
    let vm_workers = args.vm_workers.unwrap_or(defaults.vm_workers);
    let vmi_workers = args.vmi_workers.unwrap_or(defaults.vmi_workers);
    queues::print(
        &queues_before,
        &queues_at_pods,
        pod_wall,
        &[
            ("virt-controller-vm", vm_workers),
            ("virt-controller-vmi", vmi_workers),
        ],
    );
    let log_text = std::fs::read_to_string(&log).with_context(|| log.display().to_string())?;
    if let Some(keep) = &args.keep_log {
        std::fs::copy(&log, keep).with_context(|| keep.display().to_string())?;
    }
    single::print(&singles, &log_text);
    reconciles::print(&reconciles::read(&log_text, VM_NS), n);
    oracle_chain::print(&oracle_steps, &oracle_dir);
    println!(
        "{:<60} {:>9.2}",
        "kvrs in the cluster: API writes per VM (measured above)",
        controller_writes / n as f64
    );
    Ok(())
}
