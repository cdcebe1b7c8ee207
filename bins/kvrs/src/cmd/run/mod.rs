//! `kvrs run VM.yaml`: boots a KubeVirt VirtualMachine (or VirtualMachineInstance) on this
//! machine with no cluster, through the same code the cluster binaries run:
//!
//! - an embedded Kubernetes API server (kvrs-apiserver over kvrs-store) on loopback, with
//!   KubeVirt's admission (defaulting and validation, what virt-api's webhooks do) plugged in;
//! - kvrs's virt-controller (VM and VMI controllers) and virt-handler, in this process, talking
//!   to it through kube-rs exactly as they talk to a real cluster;
//! - kvrs-kubelet as this node's kubelet: it binds the launcher pod here, gives it a network
//!   namespace, its volumes and devices, and runs its `compute` container (kvrs's
//!   virt-launcher-monitor) as a container through runc: UID 107, its own read-only root
//!   filesystem and PID, mount, IPC and UTS namespaces, KubeVirt's capabilities, the runtime's
//!   default seccomp profile and `no_new_privs`.
//!
//! It prints KubeVirt's phases as they happen, the guest's address, and (with `--console`) the
//! serial console. Ctrl-C or SIGTERM stops the VM gracefully (runStrategy Halted, the guest gets
//! its ACPI shutdown), then stops every component and removes everything it made.
//!
//! The manifest is checked first, with the same one-line errors as `kvrs convert`: nothing
//! starts for a manifest KubeVirt would refuse. Beside the VM it may hold what the VM's volumes
//! name — ConfigMaps, Secrets, PersistentVolumeClaims and the `hostPath`/`local`
//! PersistentVolumes they bind to ([`supporting`]) — created before the VM.

mod admission;
mod console;
mod leftovers;
mod lock;
mod owned;
mod progress;
mod stack;
mod subresources;
mod supporting;
mod vmi_subresources;

pub use stack::Signals;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kvrs_core::ClusterConfig;

use crate::input::CliError;
use crate::pipeline::admit_workload;

/// Arguments of `kvrs run`.
#[derive(clap::Args, Clone, Debug)]
#[command(after_help = "Examples:\n  \
    bash scripts/run-demo.sh   # installs libvirt/QEMU, builds kvrs and the guest images, runs:\n  \
    kvrs run fixtures/run/guest-vm.yaml --images ~/.cache/kvrs/images --console\n  \
    kvrs run fixtures/run/guest-vm.yaml --images ~/.cache/kvrs/images \\\n      \
    --stop-after-console 'KVRS-E2E: gateway answers ping'\n\n\
    While it runs: kubectl --kubeconfig /var/lib/kvrs/run/kubeconfig get vmi,pods")]
pub struct Args {
    /// The VirtualMachine or VirtualMachineInstance to boot (YAML or JSON; `-` for stdin), with
    /// the ConfigMaps, Secrets, PersistentVolumeClaims and hostPath/local PersistentVolumes its
    /// volumes name as further documents.
    pub manifest: PathBuf,
    /// Where container-disk and kernel-boot images are: image `registry/name:tag` is the
    /// directory `DIR/registry_name_tag` (`/` and `:` as `_`), holding what the image holds
    /// (e.g. `disk/disk.qcow2`). No registry is contacted.
    #[arg(long, value_name = "DIR")]
    pub images: Option<PathBuf>,
    /// A map file of `reference=path` lines, for images whose directory is elsewhere.
    #[arg(long, value_name = "FILE")]
    pub image_map: Option<PathBuf>,
    /// The entrypoint of a container image, for a container the pod runs without a `command`
    /// (a hook sidecar's): `REFERENCE=/PATH [ARG...]`, e.g.
    /// `quay.io/kubevirt/example-hook-sidecar:v1.9.0=/sidecar-shim`. The image's directory
    /// (found as `--images`/`--image-map` find any image) holds its file tree. Repeatable.
    #[arg(long, value_name = "REF=PATH")]
    pub image_entrypoint: Vec<String>,
    /// Show the guest's serial console and forward standard input to it.
    #[arg(long)]
    pub console: bool,
    /// Stop the VM gracefully, clean up and exit 0 once this text appears on the serial
    /// console (e.g. a boot marker; for scripts and demos).
    #[arg(long, value_name = "TEXT")]
    pub stop_after_console: Option<String>,
    /// Give up (and clean up) when the VM is not Running after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_seconds: u64,
    /// Where the run keeps its kubeconfig, the kubelet's state (each pod's container bundle,
    /// runc's state) and virt-handler's directories; removed on exit. One run at a time per
    /// directory (a live run holds its `run.lock`); what a killed run left there (its pods'
    /// containers, QEMU, network namespaces, cgroups, mounts, files) the next run removes
    /// before it starts, one line each.
    #[arg(long, default_value = "/var/lib/kvrs/run")]
    pub state_dir: PathBuf,
    /// The kubelet's pods directory (emptyDirs, virt-handler's `--pods-dir`); default
    /// `/run/kvrs/pods`, or `STATE_DIR/pods` when `--state-dir` is given. Short: the launcher's
    /// socket path under it must fit a Unix socket address. Removed on exit.
    #[arg(long)]
    pub pods_dir: Option<PathBuf>,
    /// The name of this machine's node.
    #[arg(long, default_value = "kvrs-local")]
    pub node_name: String,
    /// Feature gates enabled beyond KubeVirt's defaults, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub feature_gates: Vec<String>,
    /// A KubeVirt CR (`kind: KubeVirt`, YAML or JSON): the manifest is admitted with its
    /// spec.configuration, and it is created in the embedded API server before virt-controller
    /// and virt-handler start, so they run with it as on a cluster (e.g. the network binding
    /// plugins it registers: their sidecars join the launcher pod). A VM whose interface names
    /// a plugin the CR does not register is refused, as `kvrs pod` refuses it.
    #[arg(long, value_name = "FILE")]
    pub kubevirt_cr: Option<PathBuf>,
    /// The OCI runtime that runs the launcher pod's container (a name on `PATH` or a path).
    /// Default: the runc 1.5.3 `scripts/node-components.sh` builds into
    /// `~/.cache/kvrs/node/bin/runc` when it is there, else `runc` on `PATH`. A runc without the
    /// November 2025 fixes (CVE-2025-31133, -52565, -52881; fixed in 1.2.8, 1.3.3, 1.4.0-rc.3),
    /// such as Debian 12's 1.1.5, is refused unless --allow-vulnerable-runtime.
    #[arg(long, value_name = "PATH", default_value_os_t = kvrs_kubelet::runc::default_runtime())]
    pub runtime: PathBuf,
    /// Run pods even with a runc that lacks the November 2025 fixes (a loud warning instead of
    /// refusing to start).
    #[arg(long)]
    pub allow_vulnerable_runtime: bool,
    /// The seccomp profile of a pod container that names none, as the kubelet's
    /// `--seccomp-default`: true (kvrs's default) gives the container runtime's default profile,
    /// false leaves it unconfined (the kubelet's own default). KubeVirt's passt binding needs
    /// false: libvirt's `passt` creates a user namespace, which the default profile refuses.
    #[arg(long, value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set)]
    pub seccomp_default: bool,
}

/// Runs `kvrs run`.
pub fn run(args: Args) -> Result<(), CliError> {
    let cluster = crate::cmd::cluster::ClusterArgs {
        feature_gates: Some(args.feature_gates.join(",")),
        kubevirt_cr: args.kubevirt_cr.clone(),
    }
    .load()?;
    let config = cluster.config.clone();
    // Every object is checked before anything starts: the same errors as `kvrs convert`.
    // ConfigMaps, Secrets, PVCs and PVs may come with the VM, for its volumes.
    let (supporting, workloads) = supporting::read(&args.manifest)?;
    let supporting: Vec<serde_json::Value> = supporting.into_iter().map(|(_, d)| d).collect();
    let mut manifests = Vec::new();
    for (origin, workload) in workloads {
        let document = workload.document();
        let vmi = admit_workload(workload, &origin, &config, None)?;
        cluster.check_bindings(&origin, &vmi)?;
        manifests.push(document);
    }
    stack::preflight(&args)?;
    kvrs_runtime::kube::setup::init_logging_with_default("warn");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("starting the async runtime: {e}")))?;
    runtime.block_on(drive(args, config, cluster.document, supporting, manifests))
}

/// What ended the run.
#[derive(Debug)]
enum Outcome {
    /// Ctrl-C or SIGTERM.
    Interrupted,
    /// `--stop-after-console` text seen.
    ConsoleText,
    /// The VMI reached a final phase by itself.
    Finished(String),
    /// The user stopped or deleted the run's VM (or deleted its VMI) through the API.
    StoppedByUser,
    /// Not Running in time.
    TimedOut,
}

async fn drive(
    args: Args,
    config: ClusterConfig,
    kubevirt_cr: Option<serde_json::Value>,
    supporting: Vec<serde_json::Value>,
    manifests: Vec<serde_json::Value>,
) -> Result<(), CliError> {
    let started = Instant::now();
    let stack = stack::Stack::start(&args, config, kubevirt_cr).await?;
    let mut console = None;
    let mut progress = progress::Progress::default();
    let result = watch_until_done(
        &args,
        &stack,
        &supporting,
        &manifests,
        started,
        &mut console,
        &mut progress,
    )
    .await;
    // While the VM stops, the console still shows (the guest's shutdown) with `--console`.
    let console = console.filter(|_| args.console);
    let stopped = stack.stop(&manifests, started, console, progress).await;
    let outcome = result?;
    stopped?;
    match outcome {
        Outcome::Interrupted | Outcome::ConsoleText | Outcome::StoppedByUser => Ok(()),
        Outcome::Finished(phase) if phase == "Succeeded" => Ok(()),
        Outcome::Finished(phase) => Err(CliError::Failed(format!("the VMI ended {phase}"))),
        Outcome::TimedOut => Err(CliError::Failed(format!(
            "the VM was not Running after {} s (--timeout-seconds)",
            args.timeout_seconds
        ))),
    }
}

async fn watch_until_done(
    args: &Args,
    stack: &stack::Stack,
    supporting: &[serde_json::Value],
    manifests: &[serde_json::Value],
    started: Instant,
    tail: &mut Option<console::ConsoleTail>,
    progress: &mut progress::Progress,
) -> Result<Outcome, CliError> {
    supporting::apply(stack.client(), supporting).await?;
    stack.apply(manifests).await?;
    let mut running = false;
    let mut signals = stack::Signals::new()?;
    let deadline = started + Duration::from_secs(args.timeout_seconds);
    loop {
        for change in stack.vmi_changes().await {
            let elapsed = started.elapsed();
            match change {
                stack::VmiChange::Changed(vmi) => {
                    for line in progress.observe(&vmi, elapsed) {
                        println!("{line}");
                    }
                    let phase = progress::phase(&vmi).to_string();
                    running |= phase == "Running";
                    if tail.is_none()
                        && let Some((dir, _)) = stack.console_of(&vmi)
                    {
                        *tail = Some(console::ConsoleTail::new(dir.join("virt-serial0-log")));
                        if args.console {
                            console::forward_stdin(dir.join("virt-serial0"));
                        }
                    }
                    if phase == "Succeeded" || phase == "Failed" {
                        return Ok(if stopped_by_user(stack, manifests, &vmi, false).await? {
                            Outcome::StoppedByUser
                        } else {
                            Outcome::Finished(phase)
                        });
                    }
                }
                stack::VmiChange::Removed(vmi) => {
                    println!("{}", progress.removed(&vmi, elapsed));
                    if stopped_by_user(stack, manifests, &vmi, true).await? {
                        return Ok(Outcome::StoppedByUser);
                    }
                }
            }
        }
        if let Some(t) = tail.as_mut() {
            for line in t.poll() {
                if args.console {
                    println!("{line}");
                }
                if let Some(text) = &args.stop_after_console
                    && line.contains(text.as_str())
                {
                    if !args.console {
                        println!("{line}");
                    }
                    println!(
                        "{:>7.2}s console printed {text:?}: stopping the VM",
                        started.elapsed().as_secs_f64()
                    );
                    return Ok(Outcome::ConsoleText);
                }
            }
        }
        if !running && Instant::now() > deadline {
            return Ok(Outcome::TimedOut);
        }
        tokio::select! {
            _ = signals.recv() => {
                println!("{:>7.2}s interrupted: stopping the VM", started.elapsed().as_secs_f64());
                return Ok(Outcome::Interrupted);
            }
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// Whether the run's own `vmi` ended (or was `removed`) because the user asked for it through
/// the API: its VM was deleted or stopped (`runStrategy: Halted`, `running: false`), or, for an
/// applied VMI, it was deleted (the run deletes nothing before it stops).
async fn stopped_by_user(
    stack: &stack::Stack,
    manifests: &[serde_json::Value],
    vmi: &serde_json::Value,
    removed: bool,
) -> Result<bool, CliError> {
    let doc = manifests
        .iter()
        .find(|d| owned::Owned::of_manifests(std::slice::from_ref(*d)).is_own_vmi(vmi));
    let Some(doc) = doc else {
        return Ok(false);
    };
    if doc["kind"] != "VirtualMachine" {
        return Ok(removed);
    }
    Ok(match stack.vm_of(doc).await? {
        None => true,
        Some(vm) => owned::stop_requested(&vm),
    })
}
