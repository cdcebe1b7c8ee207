//! The components of `kvrs run` and their lifetimes: the embedded API server, virt-controller,
//! virt-handler and the kubelet, started in that order and stopped in the reverse one, and the
//! directories they share under `--state-dir`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use kvrs_core::ClusterConfig;

use super::Args;
use super::owned::Owned;
use super::progress::Progress;
use crate::input::CliError;

/// Ctrl-C and SIGTERM.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Listens for both from now on.
    pub fn new() -> Result<Self, CliError> {
        use tokio::signal::unix::{SignalKind, signal};
        let install = |k| {
            signal(k).map_err(|e| CliError::Failed(format!("installing a signal handler: {e}")))
        };
        Ok(Self {
            term: install(SignalKind::terminate())?,
            int: install(SignalKind::interrupt())?,
        })
    }

    /// The next of either.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// What must hold before anything starts: root (network namespaces, containers, UID 107), the
/// launcher binaries next to `kvrs`, runc, libvirt and QEMU installed.
pub fn preflight(args: &Args) -> Result<(), CliError> {
    // A malformed entrypoint is the user's input error, found before anything starts.
    let mut entrypoints = kvrs_kubelet::ImageMap::default();
    for e in &args.image_entrypoint {
        entrypoints
            .parse_entrypoint(e)
            .map_err(|e| CliError::Input(format!("--image-entrypoint: {e}")))?;
    }
    // virt-handler dials `<pods>/<pod uid>/volumes/kubernetes.io~empty-dir/sockets/launcher-sock`:
    // it must fit a Unix socket address (107 bytes).
    let socket_len = Dirs::new(args).pods.as_os_str().len()
        + "/00000000-0000-0000-0000-000000000000/volumes/kubernetes.io~empty-dir/sockets/launcher-sock".len();
    if socket_len > 107 {
        return Err(CliError::Input(format!(
            "--pods-dir {}: too long, the launcher's socket path under it would be {socket_len} bytes (a Unix socket address holds 107)",
            Dirs::new(args).pods.display()
        )));
    }
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_string))
        });
    if uid.as_deref() != Some("0") {
        return Err(CliError::Failed(
            "kvrs run must run as root: it makes the launcher pod's network namespace and mounts and runs it as UID 107".into(),
        ));
    }
    let (monitor, launcher) = launcher_binaries()?;
    for b in [&monitor, &launcher] {
        if !b.is_file() {
            return Err(CliError::Failed(format!(
                "{} is missing: kvrs run starts kvrs's launcher from next to kvrs (cargo build --release -p kvrs -p virt-launcher -p virt-launcher-monitor)",
                b.display()
            )));
        }
    }
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .any(|d| d.join(name).is_file())
    };
    let runtime_found = if args.runtime.components().count() > 1 {
        args.runtime.is_file()
    } else {
        on_path(&args.runtime.to_string_lossy())
    };
    if !runtime_found {
        return Err(CliError::Failed(format!(
            "--runtime {}: not found (the launcher pod runs as a container): run scripts/install-test-deps.sh for runc",
            args.runtime.display()
        )));
    }
    // A runc without the November 2025 fixes is refused before anything starts.
    kvrs_kubelet::runc::check_blocking(&args.runtime, args.allow_vulnerable_runtime)
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let libvirt = ["/usr/sbin/virtqemud", "/usr/sbin/libvirtd"];
    if !libvirt.iter().any(|p| Path::new(p).exists()) {
        return Err(CliError::Failed(
            "libvirt is not installed (no /usr/sbin/virtqemud or libvirtd): run scripts/install-test-deps.sh".into(),
        ));
    }
    if !["/usr/bin/qemu-system-x86_64", "/usr/libexec/qemu-kvm"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        return Err(CliError::Failed(
            "QEMU is not installed (no qemu-system-x86_64): run scripts/install-test-deps.sh"
                .into(),
        ));
    }
    Ok(())
}

/// `virt-launcher-monitor` and `virt-launcher`, next to this executable.
fn launcher_binaries() -> Result<(PathBuf, PathBuf), CliError> {
    let exe =
        std::env::current_exe().map_err(|e| CliError::Failed(format!("locating kvrs: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    Ok((dir.join("virt-launcher-monitor"), dir.join("virt-launcher")))
}

/// What this machine offers the guest: hardware virtualisation (or why not), and the in-kernel
/// virtio-net backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accelerators {
    /// `Ok` when `/dev/kvm` opens and creates a VM; else the reason, and the guest runs under
    /// TCG (KubeVirt's `useEmulation`).
    pub kvm: Result<(), String>,
    /// `/dev/vhost-net` exists (the `vhost_net` module).
    pub vhost_net: bool,
}

impl Accelerators {
    /// This machine's. KVM is judged by using it, not by the host node's mode bits: the launcher
    /// pod gets its own device node, which virt-handler hands to QEMU's user.
    pub fn of_this_machine() -> Self {
        use kvrs_node::host_devices::{VHOST_NET_DEVICE, device_present, kvm_check};
        Self {
            kvm: kvm_check().map_err(|e| e.to_string()),
            vhost_net: device_present(VHOST_NET_DEVICE),
        }
    }

    /// The lines `kvrs run` prints first: which accelerator the guest gets, and its network
    /// backend.
    pub fn describe(&self) -> String {
        let cpu = match &self.kvm {
            Ok(()) => "the guest runs under KVM".to_string(),
            Err(why) => format!(
                "the guest runs under QEMU's TCG emulation (KubeVirt's useEmulation): {why}"
            ),
        };
        let net = if self.vhost_net {
            "the guest's virtio-net runs on vhost-net"
        } else {
            "the guest's virtio-net runs in QEMU's userland: no /dev/vhost-net"
        };
        format!("{cpu}\n{net}")
    }
}

/// The directories under `--state-dir`.
#[derive(Clone, Debug)]
pub struct Dirs {
    /// `--state-dir` itself (the pods directory is elsewhere by default).
    pub root: PathBuf,
    /// The kubelet's pods directory (and virt-handler's `--pods-dir`).
    pub pods: PathBuf,
    /// virt-handler's `--kubevirt-share-dir`.
    pub share: PathBuf,
    /// virt-handler's `--private-dir`.
    pub private: PathBuf,
    /// The kubelet's own state.
    pub kubelet: PathBuf,
}

impl Dirs {
    fn new(args: &Args) -> Self {
        let root = args.state_dir.as_path();
        let pods = match &args.pods_dir {
            Some(p) => p.clone(),
            None if root == Path::new("/var/lib/kvrs/run") => PathBuf::from("/run/kvrs/pods"),
            None => root.join("pods"),
        };
        Self {
            root: root.to_path_buf(),
            pods,
            share: root.join("share"),
            private: root.join("private"),
            kubelet: root.join("kubelet"),
        }
    }
}

/// A change to a VMI, as the watch saw it.
#[derive(Debug)]
pub enum VmiChange {
    /// Created or changed: the VMI now.
    Changed(Value),
    /// Deleted: its last state.
    Removed(Value),
}

/// The running components.
pub struct Stack {
    client: kube::Client,
    dirs: Dirs,
    stop: watch::Sender<bool>,
    tasks: Vec<(&'static str, JoinHandle<Result<(), String>>)>,
    changes: Mutex<mpsc::UnboundedReceiver<VmiChange>>,
    apiserver: adapters::ApiServerHandle,
    /// What [`apply`](Self::apply) created: the only VMIs reported, stopped and waited for.
    owned: Mutex<Owned>,
    /// The state directory's lock, held until the directory is removed (or the process dies).
    _lock: super::lock::RunLock,
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

fn namespace_of(doc: &Value) -> String {
    doc.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
}

fn name_of(doc: &Value) -> String {
    doc.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// Creates `--kubevirt-cr`'s KubeVirt (without what the server sets: a CR copied from
/// `kubectl get -o yaml` carries them) in its namespace (KubeVirt's install namespace,
/// `kubevirt`, when it names none); the namespace, which the daemons watch.
async fn create_kubevirt_cr(client: &kube::Client, mut cr: Value) -> Result<String, CliError> {
    let namespace = cr
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("kubevirt")
        .to_string();
    if let Some(meta) = cr.get_mut("metadata").and_then(Value::as_object_mut) {
        for server_set in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(server_set);
        }
        meta.insert("namespace".into(), json!(namespace));
    }
    if let Some(obj) = cr.as_object_mut() {
        obj.remove("status");
    }
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "kubevirts");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &ar);
    let obj: DynamicObject =
        serde_json::from_value(cr).map_err(|e| CliError::Input(format!("--kubevirt-cr: {e}")))?;
    api.create(&PostParams::default(), &obj)
        .await
        .map_err(|e| CliError::Failed(format!("creating the KubeVirt CR: {e}")))?;
    Ok(namespace)
}

impl Stack {
    /// Starts every component and waits until the API server answers.
    pub async fn start(
        args: &Args,
        config: ClusterConfig,
        kubevirt_cr: Option<Value>,
    ) -> Result<Self, CliError> {
        let dirs = Dirs::new(args);
        // A live run holds the lock of its state directory; a dead one's leftovers are
        // removed before anything of this run starts.
        let owner = super::lock::Owner {
            pid: std::process::id(),
            node: args.node_name.clone(),
            pods_dir: dirs.pods.clone(),
            runtime: args.runtime.clone(),
        };
        let (lock, previous) = super::lock::RunLock::acquire(&dirs.root, &owner)?;
        if let Some(previous) = previous {
            super::leftovers::remove(&previous, &dirs.root).await?;
        }
        for d in [
            &dirs.root,
            &dirs.pods,
            &dirs.share,
            &dirs.private,
            &dirs.kubelet,
        ] {
            std::fs::create_dir_all(d)
                .map_err(|e| CliError::Failed(format!("creating {}: {e}", d.display())))?;
        }
        let accelerators = Accelerators::of_this_machine();
        println!("{}", accelerators.describe());
        let emulation = accelerators.kvm.is_err();
        let config = ClusterConfig {
            use_emulation: emulation,
            ..config
        };
        let apiserver = adapters::start_apiserver(&dirs, &args.node_name, config).await?;
        let client = apiserver.client.clone();
        // Created before the daemons start, so their first syncs already use it.
        let namespace = match kubevirt_cr {
            Some(cr) => create_kubevirt_cr(&client, cr).await?,
            None => "kubevirt".to_string(),
        };
        let (stop, stopped) = watch::channel(false);
        let until_stopped = move || {
            let mut rx = stopped.clone();
            async move {
                let _ = rx.wait_for(|s| *s).await;
            }
        };
        let mut tasks = Vec::new();

        // The embedded API server runs KubeVirt's webhooks itself (admission.rs).
        let mut controller_argv = vec![
            "virt-controller",
            "--virt-api-webhooks",
            "--no-leader-elect",
            "--metrics-addr",
            "127.0.0.1:0",
            "--namespace",
            &namespace,
        ];
        if emulation {
            controller_argv.push("--allow-emulation");
        }
        let gates = args.feature_gates.join(",");
        if !gates.is_empty() {
            controller_argv.extend(["--feature-gates", &gates]);
        }
        let flags = <kvrs_virt_controller::Flags as clap::Parser>::try_parse_from(&controller_argv)
            .map_err(|e| CliError::Failed(format!("virt-controller flags: {e}")))?;
        let (c, s) = (client.clone(), until_stopped());
        tasks.push((
            "virt-controller",
            tokio::spawn(async move {
                kvrs_virt_controller::run(flags, c, s)
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e:#}"))
            }),
        ));

        let (pods, share, private) = (
            dirs.pods.display().to_string(),
            dirs.share.display().to_string(),
            dirs.private.display().to_string(),
        );
        let mut handler_argv = vec![
            "virt-handler",
            "--hostname-override",
            &args.node_name,
            "--pods-dir",
            &pods,
            "--kubevirt-share-dir",
            &share,
            "--private-dir",
            &private,
            "--metrics-addr",
            "127.0.0.1:0",
            // `kvrs kubelet` grants the devices itself: no device-plugin socket on this host.
            "--device-plugins=false",
            "--namespace",
            &namespace,
        ];
        if emulation {
            handler_argv.push("--allow-emulation");
        }
        if !gates.is_empty() {
            handler_argv.extend(["--feature-gates", &gates]);
        }
        let flags = <kvrs_virt_handler::Flags as clap::Parser>::try_parse_from(&handler_argv)
            .map_err(|e| CliError::Failed(format!("virt-handler flags: {e}")))?;
        let (c, s) = (client.clone(), until_stopped());
        tasks.push((
            "virt-handler",
            tokio::spawn(async move {
                kvrs_virt_handler::run(flags, c, s)
                    .await
                    .map(drop)
                    .map_err(|e| format!("{e:#}"))
            }),
        ));

        let kubelet = adapters::kubelet(args, &dirs, client.clone())?;
        let s = until_stopped();
        tasks.push((
            "kubelet",
            tokio::spawn(async move { adapters::run_kubelet(kubelet, s).await }),
        ));

        let (tx, rx) = mpsc::unbounded_channel();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &vmi_resource());
        tasks.push((
            "vmi watch",
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(kube::runtime::WatchStreamExt::default_backoff(
                    watcher::watcher(api, watcher::Config::default())
                ));
                while let Some(ev) = stream.next().await {
                    let change = match ev {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                            VmiChange::Changed(serde_json::to_value(o).unwrap_or_default())
                        }
                        Ok(watcher::Event::Delete(o)) => {
                            VmiChange::Removed(serde_json::to_value(o).unwrap_or_default())
                        }
                        Ok(_) | Err(_) => continue,
                    };
                    if tx.send(change).is_err() {
                        break;
                    }
                }
                Ok(())
            }),
        ));
        Ok(Self {
            client,
            dirs,
            stop,
            tasks,
            changes: Mutex::new(rx),
            apiserver,
            owned: Mutex::new(Owned::default()),
            _lock: lock,
        })
    }

    /// Creates the manifest's objects.
    pub async fn apply(&self, manifests: &[Value]) -> Result<(), CliError> {
        *self.owned.lock().unwrap_or_else(|p| p.into_inner()) = Owned::of_manifests(manifests);
        for doc in manifests {
            let ar = if doc["kind"] == "VirtualMachine" {
                vm_resource()
            } else {
                vmi_resource()
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &namespace_of(doc), &ar);
            let obj: DynamicObject = serde_json::from_value(doc.clone())
                .map_err(|e| CliError::Failed(format!("{}: {e}", name_of(doc))))?;
            api.create(&PostParams::default(), &obj)
                .await
                .map_err(|e| {
                    CliError::Failed(format!(
                        "creating {} {}/{}: {e}",
                        doc["kind"].as_str().unwrap_or(""),
                        namespace_of(doc),
                        name_of(doc)
                    ))
                })?;
        }
        Ok(())
    }

    /// The client of the run's API server.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The changes of the run's own VMIs seen since the last call (other VMIs run and end
    /// on their own).
    pub async fn vmi_changes(&self) -> Vec<VmiChange> {
        let owned = self.owned();
        let mut rx = self.changes.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        while let Ok(c) = rx.try_recv() {
            let (VmiChange::Changed(vmi) | VmiChange::Removed(vmi)) = &c;
            if owned.is_own_vmi(vmi) {
                out.push(c);
            }
        }
        out
    }

    fn owned(&self) -> Owned {
        self.owned.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The VirtualMachine of an applied manifest as stored now (`None` once deleted).
    pub async fn vm_of(&self, doc: &Value) -> Result<Option<Value>, CliError> {
        let (ns, name) = (namespace_of(doc), name_of(doc));
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &ns, &vm_resource());
        match api.get_opt(&name).await {
            Ok(vm) => Ok(vm.map(|vm| serde_json::to_value(vm).unwrap_or_default())),
            Err(e) => Err(CliError::Failed(format!(
                "reading VirtualMachine {ns}/{name}: {e}"
            ))),
        }
    }

    /// The console directory of a VMI that has a launcher pod, and the pod's UID.
    pub fn console_of(&self, vmi: &Value) -> Option<(PathBuf, String)> {
        let vmi_uid = vmi.pointer("/metadata/uid")?.as_str()?;
        let pod_uid = vmi
            .pointer("/status/activePods")?
            .as_object()?
            .keys()
            .next()?
            .clone();
        Some((
            super::console::console_dir(&self.dirs.pods, &pod_uid, vmi_uid),
            pod_uid,
        ))
    }

    /// Stops the VMs the way a user would (runStrategy Halted; a bare VMI is deleted), waits
    /// until no VMI and no pod is left, then stops every component and removes the state
    /// directory.
    pub async fn stop(
        self,
        manifests: &[Value],
        started: Instant,
        mut console: Option<super::console::ConsoleTail>,
        mut progress: Progress,
    ) -> Result<(), CliError> {
        let mut first_error = None;
        for doc in manifests {
            if let Err(e) = self.stop_one(doc).await {
                eprintln!("kvrs: {e}");
                first_error.get_or_insert(e);
            }
        }
        // The guest's graceful shutdown (KubeVirt's default grace period is 30 s), the launcher's
        // exit and the pod's deletion.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            for change in self.vmi_changes().await {
                match change {
                    VmiChange::Changed(vmi) => progress
                        .observe(&vmi, started.elapsed())
                        .into_iter()
                        .for_each(|l| println!("{l}")),
                    VmiChange::Removed(vmi) => {
                        println!("{}", progress.removed(&vmi, started.elapsed()))
                    }
                }
            }
            if let Some(tail) = console.as_mut() {
                tail.poll().into_iter().for_each(|l| println!("{l}"));
            }
            let left = self.left_over().await;
            if left.is_empty() {
                // The API server's list can be ahead of the watch: report the removals the
                // watch still has to deliver (briefly, not waiting on a watch that lags).
                let until = Instant::now() + Duration::from_secs(3);
                while progress.watching() && Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    for change in self.vmi_changes().await {
                        if let VmiChange::Removed(vmi) = change {
                            println!("{}", progress.removed(&vmi, started.elapsed()));
                        }
                    }
                }
                break;
            }
            if Instant::now() > deadline {
                eprintln!(
                    "kvrs: still there after 120 s, stopping them by force: {}",
                    left.join(", ")
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let _ = self.stop.send(true);
        for (name, task) in self.tasks {
            if name == "vmi watch" {
                task.abort();
                continue;
            }
            let outcome = tokio::time::timeout(Duration::from_secs(60), task).await;
            match outcome {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("kvrs: {name}: {e}"),
                Ok(Err(e)) => eprintln!("kvrs: {name} panicked: {e}"),
                Err(_) => eprintln!("kvrs: {name} did not stop within 60 s"),
            }
        }
        adapters::stop_apiserver(self.apiserver).await;
        if let Err(e) = std::fs::remove_dir_all(&self.dirs.pods)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("kvrs: removing {}: {e}", self.dirs.pods.display());
        }
        // The lock file goes last: a run started meanwhile finds the directory in use.
        if let Err(e) = super::lock::remove_state_dir(&self.dirs.root)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("kvrs: removing {}: {e}", self.dirs.root.display());
        }
        println!(
            "{:>7.2}s stopped; nothing left behind",
            started.elapsed().as_secs_f64()
        );
        first_error.map_or(Ok(()), Err)
    }

    async fn stop_one(&self, doc: &Value) -> Result<(), CliError> {
        let (ns, name) = (namespace_of(doc), name_of(doc));
        if doc["kind"] == "VirtualMachine" {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &ns, &vm_resource());
            // Deleted by the user already: nothing to stop.
            let Some(vm) = api.get_opt(&name).await.map_err(|e| {
                CliError::Failed(format!("reading VirtualMachine {ns}/{name}: {e}"))
            })?
            else {
                return Ok(());
            };
            let vm = serde_json::to_value(vm).unwrap_or_default();
            // As `virtctl stop` does: the run strategy becomes Halted (or `running` false),
            // tested against what was read so a concurrent edit is not overwritten.
            let patch = match vm.pointer("/spec/running") {
                Some(running) => {
                    json!([{"op": "test", "path": "/spec/running", "value": running}, {"op": "replace", "path": "/spec/running", "value": false}])
                }
                None => {
                    let strategy = vm
                        .pointer("/spec/runStrategy")
                        .cloned()
                        .unwrap_or(Value::Null);
                    json!([{"op": "test", "path": "/spec/runStrategy", "value": strategy}, {"op": "replace", "path": "/spec/runStrategy", "value": "Halted"}])
                }
            };
            let patch: json_patch::Patch =
                serde_json::from_value(patch).map_err(|e| CliError::Failed(e.to_string()))?;
            api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
                .map_err(|e| {
                    CliError::Failed(format!("stopping VirtualMachine {ns}/{name}: {e}"))
                })?;
        } else {
            let api: Api<DynamicObject> =
                Api::namespaced_with(self.client.clone(), &ns, &vmi_resource());
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => {
                    return Err(CliError::Failed(format!(
                        "deleting VirtualMachineInstance {ns}/{name}: {e}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// The run's own VMIs and their pods still in the API server, as `kind ns/name`.
    async fn left_over(&self) -> Vec<String> {
        let owned = self.owned();
        let mut left = Vec::new();
        let vmis: Api<DynamicObject> = Api::all_with(self.client.clone(), &vmi_resource());
        let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(self.client.clone());
        match vmis.list(&Default::default()).await {
            Ok(l) => left.extend(
                l.items
                    .iter()
                    .filter(|o| owned.is_own_vmi(&serde_json::to_value(o).unwrap_or_default()))
                    .map(|o| {
                        format!(
                            "VirtualMachineInstance {}/{}",
                            o.metadata.namespace.as_deref().unwrap_or(""),
                            o.metadata.name.as_deref().unwrap_or("")
                        )
                    }),
            ),
            Err(e) => left.push(format!("(listing VMIs failed: {e})")),
        }
        match pods.list(&Default::default()).await {
            Ok(l) => left.extend(
                l.items
                    .iter()
                    .filter(|o| owned.is_own_pod(&serde_json::to_value(o).unwrap_or_default()))
                    .map(|o| {
                        format!(
                            "Pod {}/{}",
                            o.metadata.namespace.as_deref().unwrap_or(""),
                            o.metadata.name.as_deref().unwrap_or("")
                        )
                    }),
            ),
            Err(e) => left.push(format!("(listing pods failed: {e})")),
        }
        left
    }
}

/// The calls into kvrs-apiserver and kvrs-kubelet.
mod adapters {
    use super::*;

    pub struct ApiServerHandle {
        pub client: kube::Client,
        running: kvrs_apiserver::Running,
    }

    pub async fn start_apiserver(
        dirs: &Dirs,
        node: &str,
        config: ClusterConfig,
    ) -> Result<ApiServerHandle, CliError> {
        let gates = kvrs_virt_api::subresources::volumes::Gates::of(&config);
        let options = kvrs_apiserver::Options {
            kubeconfig_path: Some(dirs.root.join("kubeconfig")),
            admission: Some(std::sync::Arc::new(
                super::super::admission::KubevirtWebhooks { config },
            )),
            // What virt-api's aggregated API serves on a cluster: VM start / stop / restart, and
            // the VMI subresources carried out by this machine's handler.
            extensions: vec![std::sync::Arc::new(
                super::super::subresources::KubevirtSubresources {
                    handler: Some(std::sync::Arc::new(
                        super::super::vmi_subresources::LocalHandler::new(node, dirs.pods.clone()),
                    )),
                    gates,
                },
            )],
            ..kvrs_apiserver::Options::default()
        };
        let running = kvrs_apiserver::ApiServer::start(options)
            .await
            .map_err(|e| CliError::Failed(format!("starting the embedded API server: {e}")))?;
        let client = kvrs_runtime::kube::setup::connect(Some(&running.kubeconfig_path))
            .await
            .map_err(|e| CliError::Failed(format!("connecting to the embedded API server: {e}")))?;
        println!(
            "API server on {} (kubectl --kubeconfig {})",
            running.url,
            running.kubeconfig_path.display()
        );
        Ok(ApiServerHandle { client, running })
    }

    pub async fn stop_apiserver(h: ApiServerHandle) {
        h.running.shutdown.stop().await;
    }

    /// The kubelet of this machine's node: binds every pod here (there is no scheduler),
    /// registers the Node with KubeVirt's device resources, runs launcher pods with kvrs's
    /// launcher binaries (next to `kvrs`) as containers run by runc.
    pub fn kubelet(
        args: &Args,
        dirs: &Dirs,
        client: kube::Client,
    ) -> Result<kvrs_kubelet::Kubelet, CliError> {
        let images = crate::cmd::kubelet::image_map(
            args.images.as_deref(),
            args.image_map.as_deref(),
            &args.image_entrypoint,
        )?;
        let mut config = crate::cmd::kubelet::config(
            &args.node_name,
            dirs.pods.clone(),
            dirs.kubelet.clone(),
            images,
        )?;
        // With emulation, virt-controller renders `--allow-emulation` into the pod itself
        // (KubeVirt's useEmulation): nothing is appended to the container's command here.
        config.bind_unscheduled = true;
        config.runtime = args.runtime.clone();
        config.allow_vulnerable_runtime = args.allow_vulnerable_runtime;
        config.seccomp_default = args.seccomp_default;
        Ok(kvrs_kubelet::Kubelet::new(client, config))
    }

    pub async fn run_kubelet(
        k: kvrs_kubelet::Kubelet,
        s: impl std::future::Future<Output = ()>,
    ) -> Result<(), String> {
        k.run(s).await.map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::Accelerators;

    #[test]
    fn the_first_lines_say_which_accelerator_and_network_backend_the_guest_gets() {
        let kvm = Accelerators {
            kvm: Ok(()),
            vhost_net: true,
        };
        assert_eq!(
            kvm.describe(),
            "the guest runs under KVM\nthe guest's virtio-net runs on vhost-net"
        );
        let tcg = Accelerators {
            kvm: Err("opening /dev/kvm: No such file or directory (os error 2)".into()),
            vhost_net: false,
        };
        assert_eq!(
            tcg.describe(),
            "the guest runs under QEMU's TCG emulation (KubeVirt's useEmulation): opening /dev/kvm: \
             No such file or directory (os error 2)\n\
             the guest's virtio-net runs in QEMU's userland: no /dev/vhost-net"
        );
    }
}
