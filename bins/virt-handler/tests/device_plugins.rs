//! virt-handler's device plugins against a fake kubelet: a `v1beta1.Registration` server on a
//! temporary `kubelet.sock`, and the kubelet's calls on each plugin's socket. The device nodes
//! live under a temporary host root (symlinks to `/dev/kvm` and `/dev/null`), so the test can
//! make them appear and disappear.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kvrs_ipc::proto::deviceplugin::v1beta1::{
    AllocateRequest, ContainerAllocateRequest, DevicePluginOptions, DeviceSpec, Empty,
    ListAndWatchResponse, RegisterRequest,
    device_plugin_client::DevicePluginClient,
    registration_server::{Registration, RegistrationServer},
};
use kvrs_ipc::tonic::{self, Request, Response, Status, Streaming};
use kvrs_virt_handler::device_plugins::plan::{PlanInputs, plan};
use kvrs_virt_handler::device_plugins::{DevicePluginConfig, DevicePlugins};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::UnixListenerStream;

const WAIT: Duration = Duration::from_secs(10);
const RESOURCES: [&str; 4] = [
    "devices.kubevirt.io/kvm",
    "devices.kubevirt.io/tun",
    "devices.kubevirt.io/vhost-net",
    "devices.kubevirt.io/vhost-vsock",
];

/// The kubelet's registration service: records each request.
struct FakeKubelet {
    registrations: mpsc::UnboundedSender<RegisterRequest>,
}

#[kvrs_ipc::async_trait]
impl Registration for FakeKubelet {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.registrations.send(request.into_inner());
        Ok(Response::new(Empty {}))
    }
}

/// A running fake kubelet; [`Kubelet::stop`] ends it (its socket file stays, as a crashed
/// kubelet's does).
struct Kubelet {
    shutdown: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
    registrations: mpsc::UnboundedReceiver<RegisterRequest>,
}

impl Kubelet {
    fn start(dir: &Path) -> Kubelet {
        let socket = dir.join("kubelet.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket).expect("bind kubelet.sock");
        let (tx, registrations) = mpsc::unbounded_channel();
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(FakeKubelet { registrations: tx }))
                .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                    let _ = stopped.await;
                }),
        );
        Kubelet {
            shutdown,
            task,
            registrations,
        }
    }

    async fn stop(self) {
        let _ = self.shutdown.send(());
        let _ = tokio::time::timeout(WAIT, self.task).await;
    }

    /// The next `n` registrations, by resource name.
    async fn registrations(&mut self, n: usize) -> Vec<RegisterRequest> {
        let mut got = Vec::new();
        while got.len() < n {
            let r = tokio::time::timeout(WAIT, self.registrations.recv())
                .await
                .unwrap_or_else(|_| panic!("only {} of {n} registrations: {got:?}", got.len()))
                .expect("fake kubelet gone");
            got.push(r);
        }
        got.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
        got
    }
}

/// A device-plugin directory and a host root whose `dev/` the test controls.
struct Node {
    _tmp: tempfile::TempDir,
    plugin_dir: PathBuf,
    root: PathBuf,
}

impl Node {
    fn new() -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let plugin_dir = tmp.path().join("device-plugins");
        let root = tmp.path().join("host");
        std::fs::create_dir_all(&plugin_dir).unwrap();
        std::fs::create_dir_all(root.join("dev/net")).unwrap();
        Node {
            plugin_dir,
            root,
            _tmp: tmp,
        }
    }

    /// Makes `dev/<rel>` under the host root a stand-in for `target`.
    fn device(&self, rel: &str, target: &str) {
        std::os::unix::fs::symlink(target, self.root.join("dev").join(rel)).unwrap();
    }

    fn remove_device(&self, rel: &str) {
        std::fs::remove_file(self.root.join("dev").join(rel)).unwrap();
    }

    fn config(&self) -> DevicePluginConfig {
        DevicePluginConfig {
            plugin_dir: self.plugin_dir.clone(),
            device_root: self.root.clone(),
            plan: plan(&PlanInputs {
                max_devices: 3,
                cgroup2_unified: false,
                vsock: true,
            }),
            poll_interval: Duration::from_millis(50),
            backoff: vec![Duration::from_millis(50), Duration::from_millis(200)],
        }
    }

    fn socket(&self, name: &str) -> PathBuf {
        self.plugin_dir.join(format!("kubevirt-{name}.sock"))
    }

    /// Dials a plugin as the kubelet does.
    async fn plugin(&self, name: &str) -> DevicePluginClient<tonic::transport::Channel> {
        let channel = kvrs_ipc::transport::dial(&self.socket(name), WAIT)
            .await
            .expect("dial the plugin");
        DevicePluginClient::new(channel)
    }

    /// Removes every socket in the device-plugin directory, as a starting kubelet does.
    fn wipe_sockets(&self) {
        for entry in std::fs::read_dir(&self.plugin_dir).unwrap() {
            let _ = std::fs::remove_file(entry.unwrap().path());
        }
    }
}

async fn next(stream: &mut Streaming<ListAndWatchResponse>) -> ListAndWatchResponse {
    tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a ListAndWatch update in time")
        .expect("ListAndWatch status")
        .expect("ListAndWatch still open")
}

/// The devices' health strings and IDs of one list.
fn health_of(list: &ListAndWatchResponse) -> (Vec<String>, BTreeSet<String>) {
    let ids = list.devices.iter().map(|d| d.id.clone()).collect();
    let health: BTreeSet<String> = list.devices.iter().map(|d| d.health.clone()).collect();
    (ids, health)
}

fn all(health: &str) -> BTreeSet<String> {
    BTreeSet::from([health.to_string()])
}

async fn wait_initialized(plugins: &DevicePlugins) {
    tokio::time::timeout(WAIT, async {
        while !plugins.initialized() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("every plugin registered");
}

fn assert_registered_as_kubevirt(registrations: &[RegisterRequest]) {
    let resources: Vec<&str> = registrations
        .iter()
        .map(|r| r.resource_name.as_str())
        .collect();
    assert_eq!(resources, RESOURCES);
    for r in registrations {
        let name = r.resource_name.trim_start_matches("devices.kubevirt.io/");
        assert_eq!(r.version, "v1beta1");
        assert_eq!(r.endpoint, format!("kubevirt-{name}.sock"));
        assert_eq!(r.options, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_register_serve_follow_health_and_survive_kubelet_restarts() {
    let node = Node::new();
    node.device("kvm", "/dev/kvm");
    node.device("net/tun", "/dev/null");
    // No vhost-net and no vhost-vsock on this "host".
    let mut kubelet = Kubelet::start(&node.plugin_dir);
    let plugins = DevicePlugins::start(node.config());

    assert_registered_as_kubevirt(&kubelet.registrations(4).await);
    wait_initialized(&plugins).await;

    // kvm: healthy exactly where KVM works on this machine; Allocate grants /dev/kvm.
    let kvm_works = kvrs_node::host_devices::kvm_check().is_ok();
    let mut kvm = node.plugin("kvm").await;
    assert_eq!(
        kvm.get_device_plugin_options(Empty {})
            .await
            .unwrap()
            .into_inner(),
        DevicePluginOptions::default()
    );
    let mut kvm_watch = kvm.list_and_watch(Empty {}).await.unwrap().into_inner();
    let (ids, health) = health_of(&next(&mut kvm_watch).await);
    assert_eq!(ids, ["kvm0", "kvm1", "kvm2"]);
    assert_eq!(health, all(if kvm_works { "Healthy" } else { "Unhealthy" }));
    let allocated = kvm
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["kvm1".into()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(allocated.container_responses.len(), 1);
    let granted = &allocated.container_responses[0];
    assert_eq!(
        granted.devices,
        [DeviceSpec {
            container_path: "/dev/kvm".into(),
            host_path: "/dev/kvm".into(),
            permissions: "rw".into(),
        }]
    );
    assert!(granted.envs.is_empty() && granted.mounts.is_empty());

    // tun: present, then gone.
    let mut tun = node.plugin("tun").await;
    let mut tun_watch = tun.list_and_watch(Empty {}).await.unwrap().into_inner();
    assert_eq!(health_of(&next(&mut tun_watch).await).1, all("Healthy"));
    let allocated = tun
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["tun0".into()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        allocated.container_responses[0].devices[0].host_path,
        "/dev/net/tun"
    );
    node.remove_device("net/tun");
    assert_eq!(health_of(&next(&mut tun_watch).await).1, all("Unhealthy"));

    // vhost-net: advertised but unhealthy while missing (KubeVirt's behaviour), healthy once
    // its node appears.
    let mut vhost = node.plugin("vhost-net").await;
    let mut vhost_watch = vhost.list_and_watch(Empty {}).await.unwrap().into_inner();
    let (ids, health) = health_of(&next(&mut vhost_watch).await);
    assert_eq!(ids, ["vhost-net0", "vhost-net1", "vhost-net2"]);
    assert_eq!(health, all("Unhealthy"));
    node.device("vhost-net", "/dev/null");
    assert_eq!(health_of(&next(&mut vhost_watch).await).1, all("Healthy"));

    // vhost-vsock (VSOCK gate): registered, unhealthy without /dev/vhost-vsock.
    let mut vsock = node.plugin("vhost-vsock").await;
    let mut vsock_watch = vsock.list_and_watch(Empty {}).await.unwrap().into_inner();
    assert_eq!(health_of(&next(&mut vsock_watch).await).1, all("Unhealthy"));

    // The kubelet restarts and replaces kubelet.sock: every plugin registers again, and the
    // old server withdraws its devices (an empty list) before it goes.
    kubelet.stop().await;
    std::fs::remove_file(node.plugin_dir.join("kubelet.sock")).unwrap();
    let mut kubelet = Kubelet::start(&node.plugin_dir);
    assert_registered_as_kubevirt(&kubelet.registrations(4).await);
    assert!(next(&mut kvm_watch).await.devices.is_empty());
    assert!(
        tokio::time::timeout(WAIT, kvm_watch.message())
            .await
            .unwrap()
            .map(|m| m.is_none())
            .unwrap_or(true),
        "the old stream ends"
    );
    wait_initialized(&plugins).await;

    // A starting kubelet also wipes the plugins' sockets: they come back and register again.
    kubelet.stop().await;
    node.wipe_sockets();
    let mut kubelet = Kubelet::start(&node.plugin_dir);
    assert_registered_as_kubevirt(&kubelet.registrations(4).await);
    wait_initialized(&plugins).await;
    let mut vhost = node.plugin("vhost-net").await;
    let mut vhost_watch = vhost.list_and_watch(Empty {}).await.unwrap().into_inner();
    assert_eq!(health_of(&next(&mut vhost_watch).await).1, all("Healthy"));

    // Stopping withdraws the devices and removes the sockets.
    plugins.stop().await;
    assert!(next(&mut vhost_watch).await.devices.is_empty());
    for name in ["kvm", "tun", "vhost-net", "vhost-vsock"] {
        assert!(!node.socket(name).exists(), "{name} socket left behind");
    }
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_started_before_the_kubelet_register_once_it_is_up() {
    let node = Node::new();
    node.device("kvm", "/dev/kvm");
    let plugins = DevicePlugins::start(node.config());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!plugins.initialized());
    assert!(plugins.registered_resources().is_empty());

    let mut kubelet = Kubelet::start(&node.plugin_dir);
    assert_registered_as_kubevirt(&kubelet.registrations(4).await);
    wait_initialized(&plugins).await;
    assert_eq!(plugins.registered_resources(), RESOURCES);
    plugins.stop().await;
    kubelet.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_device_plugin_directory_nothing_is_created() {
    let node = Node::new();
    std::fs::remove_dir(&node.plugin_dir).unwrap();
    let plugins = DevicePlugins::start(node.config());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!plugins.initialized());
    assert!(
        !node.plugin_dir.exists(),
        "the directory is the kubelet's to create"
    );
    plugins.stop().await;
    assert!(!node.plugin_dir.exists());
}

#[test]
fn device_plugins_are_on_by_default_and_can_be_turned_off() {
    use clap::Parser;
    use kvrs_virt_handler::Flags;
    let defaults = Flags::try_parse_from(["virt-handler"]).unwrap();
    assert!(defaults.device_plugins);
    assert_eq!(
        defaults.device_plugin_dir,
        Path::new("/var/lib/kubelet/device-plugins")
    );
    assert_eq!(defaults.max_devices, 1000);
    for off in [
        &["virt-handler", "--device-plugins=false"][..],
        &["virt-handler", "--device-plugins", "false"][..],
    ] {
        assert!(
            !Flags::try_parse_from(off).unwrap().device_plugins,
            "{off:?}"
        );
    }
    let on =
        Flags::try_parse_from(["virt-handler", "--device-plugins", "--max-devices", "10"]).unwrap();
    assert!(on.device_plugins);
    assert_eq!(on.max_devices, 10);
}
