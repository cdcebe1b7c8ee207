//! Fake scheduler, kubelet, virt-launcher and libvirt: launcher pods are bound to the least
//! loaded node and become Ready after a delay; a launcher runs one domain that boots at once on
//! `SyncVirtualMachine`, shuts down some time after an ACPI signal, can crash, and exits (ending
//! its pod) once the domain is gone. Deleting a pod sends the launcher SIGTERM (it asks its
//! handler for a graceful shutdown) and kills it after the pod's grace period.

use foldhash::{HashMap, HashMapExt};
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::store::{WatchEvent, res};
use super::writes::Writer;
use super::{Ev, Sim};
use crate::api::VirtualMachineInstance;
use kvrs_decide::format_rfc3339;
use kvrs_decide::handler::LauncherCall;
use kvrs_decide::handler::domain::{Domain, GracePeriod};
use kvrs_decide::handler::facts::LauncherFacts;
use kvrs_decide::small_json::ScanPointer;

/// A launcher process in a pod on a node.
#[derive(Debug, Clone)]
pub(super) struct Launcher {
    pub pod_key: String,
    pub started: bool,
    pub exited: bool,
}

/// A simulated node.
#[derive(Debug)]
pub(super) struct Node {
    pub name: String,
    /// Domains by VMI key, as the handler's domain informer holds them.
    pub domains: BTreeMap<String, Domain>,
    /// Launchers by VMI UID.
    pub launchers: HashMap<String, Launcher>,
    /// Launcher pods bound here and not yet gone.
    pub pods: usize,
}

impl Node {
    pub(crate) fn new(name: String) -> Self {
        Self {
            name,
            domains: BTreeMap::new(),
            launchers: HashMap::new(),
            pods: 0,
        }
    }

    /// What the handler's launcher client manager knows about the launcher of `uid`.
    pub(crate) fn launcher_facts(&self, uid: &str) -> LauncherFacts {
        match self.launchers.get(uid) {
            Some(l) if l.started && !l.exited => LauncherFacts::default(),
            Some(l) if !l.started && !l.exited => LauncherFacts {
                not_initialized: true,
                ..Default::default()
            },
            _ => LauncherFacts {
                gone: true,
                unresponsive: true,
                ..Default::default()
            },
        }
    }
}

/// Kubelet-side timers.
#[derive(Debug)]
pub(super) enum KubeletEv {
    Bind(String),
    Start(String),
    ForceKill(String),
    LauncherExit {
        node: usize,
        uid: String,
    },
    GuestShutoff {
        node: usize,
        key: String,
        uid: String,
    },
    Crash {
        node: usize,
        key: String,
        uid: String,
    },
}

fn pod_vmi_uid(p: &Value) -> String {
    // Read key by key: a pointer with an escaped token (`~1`) unescapes it into a new string.
    p.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(|l| l.get(crate::cache::CREATED_BY_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

/// What the kubelet reads of a pod.
struct PodFacts {
    /// Whether it names a node.
    bound: bool,
    /// The node it is bound to, when one of the simulator's.
    node: Option<usize>,
    /// Whether it is marked for deletion.
    deleting: bool,
    vmi_uid: String,
    vmi_key: String,
}

fn pod_vmi_key(p: &Value) -> String {
    super::virt_controller::pod_vmi_key(p).unwrap_or_default()
}

impl Sim {
    fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    fn ms(&mut self, range: (u64, u64)) -> Duration {
        Duration::from_millis(self.rng.range(range.0, range.1))
    }

    /// The kubelet and scheduler watch pods without lag.
    pub(super) fn kubelet_observe(&mut self, ev: &WatchEvent) {
        if ev.resource != res::PODS {
            return;
        }
        let (Some(new), old) = (
            ev.obj.as_ref().and_then(|o| o.json()),
            ev.old.as_ref().and_then(|o| o.json()),
        ) else {
            return;
        };
        if old.is_none() {
            let d = self.ms(self.cfg.schedule_delay_ms);
            self.at(self.now + d, Ev::Kubelet(KubeletEv::Bind(ev.key.clone())));
        }
        let was_deleting = old.is_some_and(|o| o.at("/metadata/deletionTimestamp").is_some());
        if new.at("/metadata/deletionTimestamp").is_some() && !was_deleting {
            self.terminate_pod(&ev.key, new.clone());
        }
    }

    pub(super) fn kubelet_event(&mut self, ev: KubeletEv) {
        match ev {
            KubeletEv::Bind(key) => self.bind(&key),
            KubeletEv::Start(key) => self.start_pod(&key),
            KubeletEv::ForceKill(key) => self.force_kill(&key),
            KubeletEv::LauncherExit { node, uid } => self.launcher_exit(node, &uid),
            KubeletEv::GuestShutoff { node, key, uid } => {
                if self.domain_transition(node, &key, &uid, "ShuttingDown", "Shutoff", "Shutdown") {
                    self.schedule_exit(node, &uid);
                }
            }
            KubeletEv::Crash { node, key, uid } => {
                let alive = self.nodes[node]
                    .domains
                    .get(&key)
                    .is_some_and(|d| d.uid() == uid && d.is_alive());
                if alive && self.faults_on() {
                    self.stats.crashes += 1;
                    self.set_domain_state(node, &key, "Crashed", "Crashed");
                    self.schedule_exit(node, &uid);
                }
            }
        }
    }

    /// What the kubelet reads of a stored pod, read where it is stored (a copy of the pod
    /// for it was two of every kubelet write's three copies).
    fn pod_facts(&self, key: &str) -> Option<PodFacts> {
        let pod = self.api.get(res::PODS, key)?;
        Some(PodFacts {
            bound: pod.at("/spec/nodeName").is_some(),
            node: self.pod_node(&pod),
            deleting: pod.at("/metadata/deletionTimestamp").is_some(),
            vmi_uid: pod_vmi_uid(&pod),
            vmi_key: pod_vmi_key(&pod),
        })
    }

    fn bind(&mut self, key: &str) {
        let Some(pod) = self.pod_facts(key) else {
            return;
        };
        if pod.bound || pod.deleting {
            return;
        }
        let Some(node) = (0..self.nodes.len()).min_by_key(|&i| (self.nodes[i].pods, i)) else {
            return;
        };
        self.nodes[node].pods += 1;
        let name = self.nodes[node].name.clone();
        self.api.edit_as(Writer::Kubelet, res::PODS, key, |p| {
            p["spec"]["nodeName"] = json!(name);
        });
        self.nodes[node].launchers.insert(
            pod.vmi_uid,
            Launcher {
                pod_key: key.to_string(),
                started: false,
                exited: false,
            },
        );
        self.flush_events();
        let d = self.ms(self.cfg.pod_start_delay_ms);
        self.at(self.now + d, Ev::Kubelet(KubeletEv::Start(key.to_string())));
    }

    fn pod_node(&self, pod: &Value) -> Option<usize> {
        self.node_index(pod.at("/spec/nodeName")?.as_str()?)
    }

    fn start_pod(&mut self, key: &str) {
        let Some(pod) = self.pod_facts(key) else {
            return;
        };
        if pod.deleting {
            return;
        }
        let Some(node) = pod.node else {
            return;
        };
        if let Some(l) = self.nodes[node].launchers.get_mut(&pod.vmi_uid)
            && l.pod_key == key
            && !l.exited
        {
            l.started = true;
        }
        let now = format_rfc3339(self.now_unix());
        self.api.edit_as(Writer::Kubelet, res::PODS, key, |p| {
            let conditions = with_others_conditions(
                p,
                json!({"type": "Ready", "status": "True", "lastTransitionTime": now}),
            );
            p["status"] = json!({
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": [{"name": "compute", "ready": true, "state": {"running": {"startedAt": now}}}],
            });
        });
        self.flush_events();
    }

    /// A pod got a deletion timestamp: SIGTERM to the launcher, kill after the grace period.
    fn terminate_pod(&mut self, key: &str, pod: Value) {
        let Some(node) = self.pod_node(&pod) else {
            // Never bound: nothing runs, the pod goes at once.
            let now = self.now_unix();
            self.api.remove_pod(key, now);
            return;
        };
        let uid = pod_vmi_uid(&pod);
        let vmi_key = pod_vmi_key(&pod);
        let running = self.nodes[node]
            .launchers
            .get(&uid)
            .is_some_and(|l| l.started && !l.exited);
        if !running {
            self.release_pod(node, key);
            return;
        }
        if let Some(d) = self.nodes[node]
            .domains
            .get_mut(&vmi_key)
            .filter(|d| d.uid() == uid && d.is_alive())
        {
            d.spec
                .metadata
                .kubevirt
                .grace_period
                .get_or_insert_with(GracePeriod::default)
                .marked_for_graceful_shutdown = Some(true);
            self.notify(node, &vmi_key);
        }
        let grace = pod
            .at("/spec/terminationGracePeriodSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(30);
        self.at(
            self.now + Duration::from_secs(grace),
            Ev::Kubelet(KubeletEv::ForceKill(key.to_string())),
        );
    }

    fn force_kill(&mut self, key: &str) {
        let Some(PodFacts {
            node: Some(node),
            vmi_uid: uid,
            vmi_key,
            ..
        }) = self.pod_facts(key)
        else {
            return;
        };
        let alive = self.nodes[node]
            .domains
            .get(&vmi_key)
            .is_some_and(|d| d.uid() == uid && d.is_alive());
        if alive {
            self.set_domain_state(node, &vmi_key, "Shutoff", "Destroyed");
        }
        self.launcher_exit(node, &uid);
    }

    fn release_pod(&mut self, node: usize, key: &str) {
        if self.api.get(res::PODS, key).is_some() {
            self.nodes[node].pods = self.nodes[node].pods.saturating_sub(1);
            let now = self.now_unix();
            self.api.remove_pod(key, now);
            self.flush_events();
        }
    }

    fn schedule_exit(&mut self, node: usize, uid: &str) {
        self.at(
            self.now + Duration::from_millis(200),
            Ev::Kubelet(KubeletEv::LauncherExit {
                node,
                uid: uid.to_string(),
            }),
        );
    }

    /// The launcher process ends: its pod completes (or goes, when it was being deleted).
    fn launcher_exit(&mut self, node: usize, uid: &str) {
        let Some(l) = self.nodes[node].launchers.get_mut(uid) else {
            return;
        };
        if l.exited {
            return;
        }
        l.exited = true;
        let key = l.pod_key.clone();
        let Some(pod) = self.pod_facts(&key) else {
            return;
        };
        if pod.deleting {
            self.release_pod(node, &key);
            return;
        }
        let vmi_key = pod.vmi_key;
        let clean = self.nodes[node]
            .domains
            .get(&vmi_key)
            .is_none_or(|d| d.status.reason == "Shutdown");
        let phase = if clean { "Succeeded" } else { "Failed" };
        self.nodes[node].pods = self.nodes[node].pods.saturating_sub(1);
        self.api.edit_as(Writer::Kubelet, res::PODS, &key, |p| {
            let code = if phase == "Succeeded" { 0 } else { 1 };
            let conditions = with_others_conditions(p, json!({"type": "Ready", "status": "False"}));
            p["status"] = json!({
                "phase": phase,
                "conditions": conditions,
                "containerStatuses": [{"name": "compute", "ready": false, "state": {"terminated": {"exitCode": code}}}],
            });
        });
        self.flush_events();
    }

    pub(super) fn notify(&mut self, node: usize, key: &str) {
        self.at(
            self.now + Duration::from_millis(5),
            Ev::Notify(node, key.to_string()),
        );
    }

    fn set_domain_state(&mut self, node: usize, key: &str, status: &str, reason: &str) {
        if let Some(d) = self.nodes[node].domains.get_mut(key) {
            d.status.status = status.into();
            d.status.reason = reason.into();
            self.notify(node, key);
        }
    }

    fn domain_transition(
        &mut self,
        node: usize,
        key: &str,
        uid: &str,
        from: &str,
        to: &str,
        reason: &str,
    ) -> bool {
        let ok = self.nodes[node]
            .domains
            .get(key)
            .is_some_and(|d| d.uid() == uid && d.status.status == from);
        if ok {
            self.set_domain_state(node, key, to, reason);
        }
        ok
    }

    /// Runs one launcher command for the handler of `node`.
    pub(super) fn launcher_call(
        &mut self,
        node: usize,
        key: &str,
        uid: &str,
        vmi: Option<&VirtualMachineInstance>,
        call: LauncherCall,
    ) -> Result<(), String> {
        let running = self.nodes[node]
            .launchers
            .get(uid)
            .is_some_and(|l| l.started && !l.exited);
        if !running {
            return Err("disconnected".into());
        }
        let now = format_rfc3339(self.now_unix());
        match call {
            LauncherCall::SyncVirtualMachine => {
                let exists = self.nodes[node]
                    .domains
                    .get(key)
                    .is_some_and(|d| d.uid() == uid && !d.is_deleted());
                if exists {
                    return Ok(());
                }
                let Some(vmi) = vmi else {
                    return Err("no VMI to define".into());
                };
                let mut d = Domain::default();
                let (ns, name) = key.split_once('/').unwrap_or(("default", key));
                d.meta.name = name.into();
                d.meta.namespace = ns.into();
                d.spec.r#type = "kvm".into();
                d.spec.metadata.kubevirt.uid = uid.into();
                d.spec.metadata.kubevirt.grace_period = Some(GracePeriod {
                    deletion_grace_period_seconds: vmi
                        .spec
                        .termination_grace_period_seconds
                        .unwrap_or(180),
                    ..Default::default()
                });
                d.spec.os.r#type.machine = "pc-q35-rhel9.6.0".into();
                d.status.status = "Running".into();
                d.status.reason = "Booted".into();
                self.nodes[node].domains.insert(key.to_string(), d);
                self.notify(node, key);
                if self.faults_on() && self.rng.chance(self.cfg.crash_probability) {
                    let after = self.ms((1000, 60_000));
                    let ev = KubeletEv::Crash {
                        node,
                        key: key.to_string(),
                        uid: uid.to_string(),
                    };
                    self.at(self.now + after, Ev::Kubelet(ev));
                }
            }
            LauncherCall::ShutdownVirtualMachine => {
                let Some(d) = self.nodes[node]
                    .domains
                    .get_mut(key)
                    .filter(|d| d.uid() == uid)
                else {
                    return Ok(());
                };
                if d.status.status == "Running" || d.status.status == "Paused" {
                    let gp = d
                        .spec
                        .metadata
                        .kubevirt
                        .grace_period
                        .get_or_insert_with(GracePeriod::default);
                    gp.deletion_timestamp.get_or_insert(now);
                    d.status.status = "ShuttingDown".into();
                    d.status.reason = "Unknown".into();
                    self.notify(node, key);
                    let after = self.ms(self.cfg.guest_shutdown_ms);
                    let ev = KubeletEv::GuestShutoff {
                        node,
                        key: key.to_string(),
                        uid: uid.to_string(),
                    };
                    self.at(self.now + after, Ev::Kubelet(ev));
                }
            }
            LauncherCall::KillVirtualMachine => {
                let alive = self.nodes[node]
                    .domains
                    .get(key)
                    .is_some_and(|d| d.uid() == uid && d.is_alive());
                if alive {
                    self.set_domain_state(node, key, "Shutoff", "Destroyed");
                    self.schedule_exit(node, uid);
                }
            }
            LauncherCall::DeleteDomain => {
                if let Some(d) = self.nodes[node]
                    .domains
                    .get_mut(key)
                    .filter(|d| d.uid() == uid)
                {
                    d.meta.deletion_timestamp = Some(now);
                    self.notify(node, key);
                }
                self.schedule_exit(node, uid);
            }
            LauncherCall::GetGuestInfo => {}
            // The simulator runs no migration controllers: these calls never come from its plans.
            LauncherCall::MigrateVirtualMachine(_)
            | LauncherCall::CancelVirtualMachineMigration
            | LauncherCall::SyncMigrationTarget
            | LauncherCall::FinalizeVirtualMachineMigration
            | LauncherCall::SignalTargetPodCleanup => {
                return Err(format!("{}: migrations are not simulated", call.name()));
            }
        }
        Ok(())
    }
}

/// The pod conditions the kubelet owns; the others (readiness gates such as KubeVirt's
/// `kubevirt.io/virtual-machine-unpaused`) are kept across its status writes, as the kubelet's
/// status manager keeps them.
const KUBELET_CONDITIONS: &[&str] = &[
    "PodScheduled",
    "PodReadyToStartContainers",
    "Initialized",
    "ContainersReady",
    "Ready",
];

/// `ready` after the conditions of `pod` that another client wrote.
fn with_others_conditions(pod: &Value, ready: Value) -> Value {
    let mut out: Vec<Value> = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| !KUBELET_CONDITIONS.contains(&t))
        })
        .cloned()
        .collect();
    out.push(ready);
    Value::Array(out)
}
