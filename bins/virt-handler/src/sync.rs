//! One handler sync of a VMI key: gather the node facts, decide, execute, requeue.
//!
//! Everything KubeVirt-specific is in `kvrs_decide::handler::decide`; which VMI, domain and
//! launcher a sync is about and the facts gathered for them is
//! `kvrs_runtime::world::handler_inputs` (the simulator gathers with the same function); running
//! the plan is `kvrs_runtime::execute_handler`. What is left here is answering that function
//! from this node's caches, launchers and disk ([`NodeSources`]), and mapping the plan's node
//! steps and launcher calls onto kvrs-node and kvrs-ipc.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kube::runtime::reflector::{ObjectRef, Store};
use kvrs_api::VirtualMachineInstance;
use kvrs_decide::handler::facts::{GuestInfo, LauncherFacts, PodInterface};
use kvrs_decide::handler::retry::RetryState;
use kvrs_decide::handler::{Domain, NodeFacts, decide, decide_source, decide_target};
use kvrs_decide::{Action, ApiWrite, Event, LauncherCall, NodeStep, Now};
use kvrs_queue::AsyncQueue;
use kvrs_runtime::ipc::IpcLauncher;
use kvrs_runtime::kube::api::KubeApi;
use kvrs_runtime::kube::kubevirt_config::LiveConfig;
use kvrs_runtime::world::{HandlerSources, handler_inputs};
use kvrs_runtime::{Api, ApiError, HandlerExecuted, Launcher, Node, execute_handler};
use tracing::{debug, info, warn};

use crate::config::NodeConfig;
use crate::domains::DomainCache;
use crate::launchers::{Launchers, Reached};
use crate::migration::{Controllers, MigrationError, Proxies, cut_after_target_proxy, involved};
use crate::{lock, options, podcache};

/// How long the handler waits for its own status write to come back through the watch before
/// deciding again anyway (a write the server found to change nothing sends no event).
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);

/// What every sync shares.
pub struct Handler {
    /// This node.
    pub node: String,
    /// VMIs of this node (label selector `kubevirt.io/nodeName=<node>`).
    pub vmis: Store<VirtualMachineInstance>,
    /// VMIs migrating to this node (`kubevirt.io/migrationTargetNodeName=<node>`).
    pub targets: Store<VirtualMachineInstance>,
    /// The node's migration proxies.
    pub proxies: Proxies,
    /// The address migration targets on this node publish (empty: none found at start).
    pub migration_address: String,
    /// Domains the launchers reported.
    pub domains: Arc<DomainCache>,
    /// Launcher clients.
    pub launchers: Launchers,
    /// The VMI queue.
    pub queue: AsyncQueue<String>,
    /// The API.
    pub api: KubeApi,
    /// Cluster settings, from the KubeVirt CR and the flags (one snapshot per sync; its
    /// `useEmulation` allows software emulation: no `/dev/kvm` needed, vhost-net optional).
    pub config: LiveConfig<NodeConfig>,
    /// Own private state (pod interface caches).
    pub private_dir: PathBuf,
    /// Own status writes not yet seen back: key -> (resourceVersion decided from, since when).
    pub own_writes: Mutex<HashMap<String, (String, Instant)>>,
    /// IO-error retry backoff per VMI UID (the decision's [`kvrs_decide::handler::retry`]).
    pub io_error_retries: Mutex<HashMap<String, kvrs_decide::handler::retry::RetryState>>,
    /// Metrics.
    pub metrics: Arc<crate::metrics::HandlerMetrics>,
    /// Where hotplugged volumes are mounted into the launcher pods.
    pub hotplug: crate::hotplug::HotplugNode,
}

/// The clock, in the whole seconds decisions take.
pub(crate) fn now() -> Now {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    Now::from_unix(i64::try_from(secs).unwrap_or(i64::MAX))
}

fn split(key: &str) -> (&str, &str) {
    key.split_once('/').unwrap_or(("", key))
}

/// The VMI KubeVirt sends to a launcher whose VMI is gone: only its identity, from the domain.
fn vmi_from_domain(key: &str, uid: &str) -> VirtualMachineInstance {
    let (ns, name) = split(key);
    let mut vmi = VirtualMachineInstance::default();
    vmi.metadata.namespace = Some(ns.to_string());
    vmi.metadata.name = Some(name.to_string());
    vmi.metadata.uid = Some(uid.to_string());
    vmi
}

impl Handler {
    /// Whether the handler's last status write for `key` has come back (or waited long enough).
    fn expectations_satisfied(&self, key: &str, vmi: Option<&VirtualMachineInstance>) -> bool {
        let mut own = lock(&self.own_writes);
        let Some((rv, since)) = own.get(key) else {
            return true;
        };
        let current = vmi.and_then(|v| v.metadata.resource_version.as_deref());
        if current != Some(rv.as_str()) || since.elapsed() >= OWN_WRITE_WAIT {
            own.remove(key);
            return true;
        }
        false
    }

    /// One sync of `key`: KubeVirt's VM controller, then (unless it wrote the status) the
    /// migration source and target controllers (see [`crate::migration`]).
    pub async fn sync(&self, key: &str) {
        let started = Instant::now();
        let now = now();
        let mut sources = NodeSources {
            handler: self,
            reached: None,
        };
        let (subject, mut facts) = handler_inputs(&mut sources, key, now).await;
        let reached = sources.reached.take();
        let vmi = subject.vmi();
        let uid = subject.uid.as_str();
        facts.migration.target_listener_ports = self.proxies.target_ports(uid);
        facts.migration.migration_ip_address = self.migration_address.clone();
        facts.selinux_context = crate::migration::selinux_context_fact();
        if let Some(v) = vmi {
            facts.hotplug_mounted = self.hotplug.mounted(v, &self.node).await;
        }
        // Each controller decides from the facts as gathered, not from another's failures.
        let gathered = facts.clone();

        let settings = self.config.current();
        let config = &settings.decide;
        let node = self.node.as_str();
        let decide_now = |facts: &NodeFacts| decide(&subject.world(node, now, facts, config));
        let sent_vmi = vmi
            .cloned()
            .unwrap_or_else(|| vmi_from_domain(key, &subject.domain_uid));
        let (client, pid) = reached.map_or((None, None), |r| (r.client, r.pid));
        let mut fx = Fx {
            handler: self,
            key,
            uid,
            launcher: client
                .map(|c| IpcLauncher::new(c, options::sync_options(&sent_vmi, &settings))),
            pod: pid.map(kvrs_node::PodRef::of_pid),
            launcher_pid: pid,
            guest_info_fetched: facts.guest_info.is_some(),
            allow_emulation: settings.cluster.use_emulation,
            bindings: settings.bindings.clone(),
        };
        let out = execute_handler(decide_now, &mut facts, Some(&sent_vmi), &mut fx).await;
        match out.plan.io_error_retry {
            Some(state) => {
                lock(&self.io_error_retries).insert(uid.to_string(), state);
            }
            None => {
                lock(&self.io_error_retries).remove(uid);
            }
        }
        self.report(key, vmi, "vm", &out);
        // Waiting for an own write: look again once it is overdue.
        if !facts.expectations_satisfied.unwrap_or(true) {
            self.queue.add_after(key.to_string(), OWN_WRITE_WAIT);
        }

        if Controllers::after_vm(out.status_written) == Controllers::Migration {
            let source = |f: &NodeFacts| decide_source(&subject.world(node, now, f, config));
            if involved(&source(&gathered)) {
                let mut f = gathered.clone();
                let out = execute_handler(source, &mut f, Some(&sent_vmi), &mut fx).await;
                self.report(key, vmi, "migration-source", &out);
                if out.status_written {
                    self.metrics.observe_sync(started.elapsed());
                    return;
                }
            }
            // Until the target proxy listens, its plan stops at the proxy step; the ports it
            // then listens on are published by the decision that follows.
            let target_cut = |f: &NodeFacts| {
                let mut plan = decide_target(&subject.world(node, now, f, config));
                if f.migration.target_listener_ports.is_empty()
                    && f.migration.target_proxy_error.is_none()
                {
                    cut_after_target_proxy(&mut plan);
                }
                plan
            };
            if involved(&target_cut(&gathered)) {
                let mut f = gathered.clone();
                let out = execute_handler(target_cut, &mut f, Some(&sent_vmi), &mut fx).await;
                let listening = match out.plan.plan.actions.last() {
                    Some(Action::Node(NodeStep::StartTargetProxy { key: proxy, .. }))
                        if out.error.is_none() && f.migration.target_proxy_error.is_none() =>
                    {
                        Some(proxy.clone())
                    }
                    _ => None,
                };
                match listening {
                    Some(proxy) => {
                        let actions: Vec<String> =
                            out.plan.plan.actions.iter().map(|a| a.label()).collect();
                        info!(
                            key,
                            controller = "migration-target",
                            ?actions,
                            "target prepared"
                        );
                        let mut f = gathered.clone();
                        f.migration.target_listener_ports = self.proxies.target_ports(&proxy);
                        let target =
                            |f: &NodeFacts| decide_target(&subject.world(node, now, f, config));
                        let out = execute_handler(target, &mut f, Some(&sent_vmi), &mut fx).await;
                        self.report(key, vmi, "migration-target", &out);
                    }
                    None => self.report(key, vmi, "migration-target", &out),
                }
            }
        }
        self.metrics.observe_sync(started.elapsed());
    }

    /// Logs, counts and requeues what one controller's run of a sync did.
    fn report(
        &self,
        key: &str,
        vmi: Option<&VirtualMachineInstance>,
        controller: &str,
        out: &HandlerExecuted,
    ) {
        if out.status_written
            && let Some(rv) = vmi.and_then(|v| v.metadata.resource_version.clone())
        {
            lock(&self.own_writes).insert(key.to_string(), (rv, Instant::now()));
        }
        let actions: Vec<String> = out.plan.plan.actions.iter().map(|a| a.label()).collect();
        if let Some(err) = &out.error {
            self.metrics.reconcile_error(err.kind.label());
            warn!(key, controller, decision = ?out.plan.decision, ?actions, "sync failed: {}", err.message);
        } else if !actions.is_empty() {
            info!(key, controller, decision = ?out.plan.decision, ?actions, phase = ?out.plan.status.as_ref().and_then(|s| s.phase.clone()), "synced");
        } else {
            debug!(key, controller, decision = ?out.plan.decision, "nothing to do");
        }
        kvrs_runtime::requeue_async(&self.queue, key, &out.queue);
    }
}

/// This node as one sync's world reads it (`kvrs_runtime::world::handler_inputs`): the VMI
/// cache, the domain cache, the launchers, the pod interface cache on disk, the handler's own
/// bookkeeping. The launcher it reached for the sync's VMI is kept for the sync's commands.
struct NodeSources<'a> {
    handler: &'a Handler,
    reached: Option<Reached>,
}

impl HandlerSources for NodeSources<'_> {
    type Vmi = Arc<VirtualMachineInstance>;

    fn vmi(&self, key: &str) -> Option<Arc<VirtualMachineInstance>> {
        let (ns, name) = split(key);
        let at = ObjectRef::new(name).within(ns);
        // A VMI migrating here is in the target cache only, until its node name moves.
        self.handler
            .vmis
            .get(&at)
            .or_else(|| self.handler.targets.get(&at))
    }

    fn domain(&self, key: &str) -> Option<Domain> {
        self.handler.domains.get(key)
    }

    async fn vmi_outside_node(&mut self, key: &str) -> Option<Arc<VirtualMachineInstance>> {
        let (ns, name) = split(key);
        let api: kube::Api<VirtualMachineInstance> =
            kube::Api::namespaced(self.handler.api.client().clone(), ns);
        // By list: KubeVirt's handler ClusterRole (the drop-in's) has no `get` of VMIs.
        match kvrs_runtime::kube::update::get_by_list(&api, name).await {
            Ok(vmi) => vmi.map(Arc::new),
            Err(e) => {
                warn!(key, "cannot read the VMI outside the node cache: {e}");
                None
            }
        }
    }

    async fn launcher(
        &mut self,
        uid: &str,
        vmi: Option<&VirtualMachineInstance>,
        now: &str,
    ) -> LauncherFacts {
        let reached = self.handler.launchers.reach(uid, vmi, now).await;
        let facts = reached.facts.clone();
        self.reached = Some(reached);
        facts
    }

    async fn old_launcher(&mut self, uid: &str, now: &str) -> LauncherFacts {
        self.handler.launchers.reach(uid, None, now).await.facts
    }

    /// The domain cache keeps the mark: launchers notify about the domains they run, and a
    /// dead one cannot.
    fn domain_lost(&mut self, domain: &Domain) {
        self.handler.domains.put(domain.clone());
    }

    fn pod_interface_cache(&self, uid: &str) -> BTreeMap<String, PodInterface> {
        podcache::read(&self.handler.private_dir, uid)
    }

    async fn guest_info(&mut self, key: &str) -> Option<GuestInfo> {
        let client = self.reached.as_ref()?.client.as_ref()?;
        match client.get_guest_info().await {
            Ok(json) => match serde_json::from_str::<GuestInfo>(&json) {
                Ok(info) => Some(info),
                Err(e) => {
                    warn!(key, "unreadable guest info from the launcher: {e}");
                    None
                }
            },
            // The decision's own GetGuestInfo call reports it.
            Err(e) => {
                debug!(key, "GetGuestInfo: {e}");
                None
            }
        }
    }

    fn expectations_satisfied(&self, key: &str, vmi: Option<&VirtualMachineInstance>) -> bool {
        self.handler.expectations_satisfied(key, vmi)
    }

    fn io_error_retry(&self, uid: &str) -> Option<RetryState> {
        lock(&self.handler.io_error_retries).get(uid).copied()
    }
}

/// One sync's effects: the API, the VMI's launcher, the node.
struct Fx<'a> {
    handler: &'a Handler,
    key: &'a str,
    uid: &'a str,
    launcher: Option<IpcLauncher>,
    pod: Option<kvrs_node::PodRef>,
    /// The launcher's PID (its device cgroup is where hotplugged block devices are allowed).
    launcher_pid: Option<u32>,
    /// `GetGuestInfo` already answered for this sync (its answer is in the facts).
    guest_info_fetched: bool,
    /// The sync's snapshot of `useEmulation`.
    allow_emulation: bool,
    /// The sync's snapshot of the network binding plugins (a `managedTap` plugin's pod side is
    /// the handler's to make).
    bindings: kvrs_node::network::BindingPlugins,
}

impl Api for Fx<'_> {
    async fn write(&mut self, write: &ApiWrite) -> Result<(), ApiError> {
        let mut api = &self.handler.api;
        api.write(write).await
    }
    async fn event(&mut self, event: &Event) {
        let mut api = &self.handler.api;
        api.event(event).await;
    }
}

impl Launcher for Fx<'_> {
    async fn call(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        call: LauncherCall,
    ) -> Result<(), String> {
        if call == LauncherCall::GetGuestInfo && self.guest_info_fetched {
            return Ok(());
        }
        match self.launcher.as_mut() {
            Some(l) => l.call(vmi, call).await,
            None => Err(format!(
                "{}: the launcher of {} does not answer",
                call.name(),
                self.key
            )),
        }
    }
}

impl Node for Fx<'_> {
    async fn step(
        &mut self,
        vmi: Option<&VirtualMachineInstance>,
        step: &NodeStep,
    ) -> Result<(), String> {
        let h = self.handler;
        match step {
            NodeStep::Cleanup { uid } => {
                // KubeVirt's VM cleanup unmounts every hotplugged volume (`UnmountAll`),
                // logging what fails, and stops the VMI's migration proxies too.
                h.hotplug.cleanup(uid, vmi, &h.node).await;
                h.proxies.stop_source(uid);
                h.proxies.stop_target(uid);
                h.launchers.close(uid);
                podcache::remove(&h.private_dir, uid);
                if self
                    .handler
                    .domains
                    .get(self.key)
                    .is_some_and(|d| d.uid() == uid)
                {
                    h.domains.remove(self.key);
                }
                Ok(())
            }
            NodeStep::CloseLauncherClient => {
                h.launchers.close(self.uid);
                self.launcher = None;
                Ok(())
            }
            NodeStep::MountHotplugVolumes => {
                let vmi = vmi.ok_or_else(|| format!("{}: no VMI", step.name()))?;
                h.hotplug.mount(vmi, &h.node, self.launcher_pid).await
            }
            NodeStep::UnmountHotplugVolumes => {
                let vmi = vmi.ok_or_else(|| format!("{}: no VMI", step.name()))?;
                h.hotplug.unmount(vmi, &h.node, self.launcher_pid).await
            }
            NodeStep::MountContainerDisks => {
                let (pod, vmi) = self.pod_and_vmi(vmi, step)?;
                kvrs_node::check_container_disks(&pod, vmi).map_err(|e| e.to_string())
            }
            NodeStep::ClaimDevices { paths } => {
                let (pod, vmi) = self.pod_and_vmi(vmi, step)?;
                let paths = devices_to_claim(paths, vmi, &pod, self.allow_emulation);
                kvrs_node::claim_devices(&pod, &paths).map_err(|e| e.to_string())
            }
            NodeStep::StartSourceProxy {
                key,
                target_address,
                ports,
            } => {
                let root = self.pod_root(step)?;
                let base = crate::migration::pod_kubevirt_dir(&root, step.name())
                    .map_err(|e| e.to_string())?;
                let disabled = crate::migration::tls_disabled(vmi);
                h.proxies
                    .start_source(key, target_address, ports, &base, disabled)
                    .await
                    .map_err(|e| self.migration_error(e))
            }
            NodeStep::StartTargetProxy { key, sockets } => {
                let root = self.pod_root(step)?;
                let run =
                    crate::migration::pod_run_dir(&root, step.name()).map_err(|e| e.to_string())?;
                let disabled = crate::migration::tls_disabled(vmi);
                h.proxies
                    .start_target(key, &run, sockets, disabled)
                    .await
                    .map_err(|e| self.migration_error(e))
            }
            NodeStep::StopSourceProxy { key } => {
                h.proxies.stop_source(key);
                Ok(())
            }
            NodeStep::StopTargetProxy { key } => {
                h.proxies.stop_target(key);
                Ok(())
            }
            NodeStep::SetupNetworks { .. } => {
                let (pod, vmi) = self.pod_and_vmi(vmi, step)?;
                let vmi = vmi.clone();
                let bindings = self.bindings.clone();
                // The pod IPs are read before the setup: bridge binding moves them to the guest.
                let (before, setup) = tokio::task::spawn_blocking(move || {
                    let before = kvrs_node::network::discover(&pod)?;
                    let setup = kvrs_node::setup_pod_network(&pod, &vmi, &bindings)?;
                    Ok::<_, kvrs_node::NodeError>((before, setup))
                })
                .await
                .map_err(|e| format!("network setup task: {e}"))?
                .map_err(|e| e.to_string())?;
                for iface in &setup.interfaces {
                    let pod_ips: Vec<String> = before
                        .link(&iface.pod_iface)
                        .map(|l| {
                            l.addresses
                                .iter()
                                .filter(|a| a.is_global_unicast())
                                .map(|a| a.ip.to_string())
                                .collect()
                        })
                        .unwrap_or_default();
                    let cached = PodInterface {
                        pod_ip: pod_ips.first().cloned().unwrap_or_default(),
                        pod_ips,
                    };
                    podcache::write(&h.private_dir, self.uid, &iface.network, &cached)?;
                }
                Ok(())
            }
        }
    }
}

impl Fx<'_> {
    /// The launcher pod's root (`/proc/<pid>/root`), for the migration proxy steps.
    fn pod_root(&self, step: &NodeStep) -> Result<PathBuf, String> {
        self.pod
            .as_ref()
            .map(|p| p.root.clone())
            .ok_or_else(|| MigrationError::NoPod(step.name()).to_string())
    }

    fn migration_error(&self, e: MigrationError) -> String {
        warn!(key = %self.key, "migration proxy: {e}");
        e.to_string()
    }

    fn pod_and_vmi<'v>(
        &self,
        vmi: Option<&'v VirtualMachineInstance>,
        step: &NodeStep,
    ) -> Result<(kvrs_node::PodRef, &'v VirtualMachineInstance), String> {
        let pod = self
            .pod
            .clone()
            .ok_or_else(|| format!("{}: the launcher's PID is not known", step.name()))?;
        let vmi = vmi.ok_or_else(|| format!("{}: no VMI", step.name()))?;
        Ok((pod, vmi))
    }
}

/// The device nodes KubeVirt's handler actually claims among those the decision lists: with
/// software emulation allowed a missing `/dev/kvm` is fine and vhost-net is not required; the
/// tun device only for interfaces attached through a tap (masquerade, bridge).
///
/// vhost-net is claimed only when the pod got it: virt-controller leaves the request out on a
/// cluster whose nodes have no `/dev/vhost-net` (`kvrs_pod::vhost_net_available`), and libvirt
/// then runs the interface on QEMU's userland virtio-net — requiring it here would fail a pod
/// that was rendered without it. A pod that requested it has it (the device plugin's Allocate).
fn devices_to_claim(
    paths: &[String],
    vmi: &VirtualMachineInstance,
    pod: &kvrs_node::PodRef,
    allow_emulation: bool,
) -> Vec<String> {
    let taps = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .any(|i| i.masquerade.is_some() || i.bridge.is_some());
    paths
        .iter()
        .filter(|p| match p.as_str() {
            "/dev/kvm" => !allow_emulation || pod.root.join("dev/kvm").exists(),
            "/dev/vhost-net" => {
                !allow_emulation && pod.root.join("dev/vhost-net").symlink_metadata().is_ok()
            }
            "/dev/net/tun" => taps,
            _ => true,
        })
        .cloned()
        .collect()
}
