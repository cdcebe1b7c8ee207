//! This node's Node object: what kube-scheduler needs to place launcher pods here — capacity
//! and allocatable with KubeVirt's device-plugin resources, a Ready condition kept fresh, the
//! addresses and the `kubernetes.io/hostname` label.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::error::KubeletError;

/// How many of each KubeVirt device the node offers (KubeVirt's device plugins publish 1000).
pub const DEVICE_COUNT: u32 = 1000;

/// What is published about the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFacts {
    /// The node's name.
    pub name: String,
    /// `InternalIP`.
    pub host_ip: Ipv4Addr,
    /// CPUs.
    pub cpus: u32,
    /// Memory in KiB.
    pub memory_kib: u64,
    /// Pods that fit (the pod CIDR's slots, at most 110 as a kubelet's default).
    pub max_pods: u32,
    /// Labels merged into the Node's (existing ones are kept).
    pub labels: BTreeMap<String, String>,
    /// Whether this machine has `/dev/vhost-net` (the `vhost_net` module): only then is
    /// `devices.kubevirt.io/vhost-net` offered, as virt-handler's device plugins advertise only
    /// devices that exist (virt-controller then renders launcher pods without it).
    pub vhost_net: bool,
}

/// This machine's memory in bytes (`MemTotal` of `/proc/meminfo`), `None` when unreadable.
pub fn memory_capacity() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// The lowest OOM score this process can give its containers: `None` when it may lower scores
/// (`CAP_SYS_RESOURCE`, as on a Kubernetes node), else its own current `oom_score_adj` — a
/// process without that capability can raise a child's score but not lower it below its own,
/// and runc fails the container outright when asked to.
pub fn oom_score_floor() -> Option<i32> {
    const CAP_SYS_RESOURCE: u32 = 24;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())?;
    if effective & (1 << CAP_SYS_RESOURCE) != 0 {
        return None;
    }
    std::fs::read_to_string("/proc/self/oom_score_adj")
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl NodeFacts {
    /// This machine's CPUs and memory, for `name`.
    pub fn of_this_machine(
        name: &str,
        host_ip: Ipv4Addr,
        max_pods: u32,
        labels: BTreeMap<String, String>,
    ) -> Self {
        let cpus = std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX));
        let memory_kib = memory_capacity().map_or(0, |bytes| bytes / 1024);
        Self {
            name: name.to_string(),
            host_ip,
            cpus,
            memory_kib,
            max_pods,
            labels,
            vhost_net: std::fs::metadata("/dev/vhost-net").is_ok_and(|m| {
                use std::os::unix::fs::FileTypeExt;
                m.file_type().is_char_device()
            }),
        }
    }
}

/// The labels every node carries, plus `extra`.
pub fn default_labels(name: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    l.insert("kubernetes.io/hostname".to_string(), name.to_string());
    l.insert("kubernetes.io/os".to_string(), "linux".to_string());
    l.insert(
        "kubernetes.io/arch".to_string(),
        std::env::consts::ARCH
            .replace("x86_64", "amd64")
            .replace("aarch64", "arm64"),
    );
    l
}

/// The Node's `status` (a merge patch body's `status`) at `now`.
pub fn node_status(f: &NodeFacts, now: &str) -> Value {
    let dev = DEVICE_COUNT.to_string();
    let mut resources = json!({
        "cpu": f.cpus.to_string(),
        "memory": format!("{}Ki", f.memory_kib),
        "pods": f.max_pods.to_string(),
        "ephemeral-storage": "100Gi",
        "devices.kubevirt.io/kvm": dev,
        "devices.kubevirt.io/tun": dev,
    });
    if f.vhost_net {
        resources["devices.kubevirt.io/vhost-net"] = json!(dev);
    }
    let cond = |t: &str, status: &str, reason: &str, message: &str| {
        json!({"type": t, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "kvrs pod runner is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": f.host_ip.to_string()},
            {"type": "Hostname", "address": f.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
        "nodeInfo": {
            "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
            "osImage": "", "containerRuntimeVersion": "kvrs://0.1.0", "kubeletVersion": "v1.34.0-kvrs",
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": std::env::consts::ARCH,
        },
    })
}

/// Creates the Node if missing (with its labels and status), else merges the labels in; then
/// writes the status. Called at start and as the heartbeat (the status keeps the Ready
/// condition's heartbeat time fresh, so a node lifecycle controller sees the node alive).
pub async fn register(api: &Api<Node>, f: &NodeFacts, now: &str) -> Result<(), KubeletError> {
    let err = |what: &str| {
        let what = format!("{what} Node {}", f.name);
        move |source| KubeletError::Api { what, source }
    };
    let labels = serde_json::to_value(&f.labels).unwrap_or_default();
    match api.get_opt(&f.name).await.map_err(err("get"))? {
        None => {
            let node: Node = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": f.name, "labels": labels},
                "status": node_status(f, now),
            }))
            .map_err(|e| KubeletError::Api {
                what: format!("build Node {}", f.name),
                source: kube::Error::SerdeError(e),
            })?;
            match api.create(&PostParams::default(), &node).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(err("create")(e)),
            }
        }
        Some(_) => {
            api.patch(
                &f.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": labels}})),
            )
            .await
            .map_err(err("label"))?;
        }
    }
    api.patch_status(
        &f.name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": node_status(f, now)})),
    )
    .await
    .map_err(err("update status of"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_offers_kubevirts_devices() {
        let f = NodeFacts {
            name: "n1".into(),
            host_ip: Ipv4Addr::LOCALHOST,
            cpus: 2,
            memory_kib: 1024,
            max_pods: 110,
            labels: default_labels("n1"),
            vhost_net: true,
        };
        let s = node_status(&f, "t");
        for r in [
            "devices.kubevirt.io/kvm",
            "devices.kubevirt.io/tun",
            "devices.kubevirt.io/vhost-net",
        ] {
            assert_eq!(s["allocatable"][r], "1000");
            assert_eq!(s["capacity"][r], "1000");
        }
        // A machine without the vhost_net module does not offer it.
        let s = node_status(
            &NodeFacts {
                vhost_net: false,
                ..f.clone()
            },
            "t",
        );
        assert!(
            s["allocatable"]
                .get("devices.kubevirt.io/vhost-net")
                .is_none()
        );
        assert!(s["capacity"].get("devices.kubevirt.io/vhost-net").is_none());
        assert_eq!(s["allocatable"]["devices.kubevirt.io/kvm"], "1000");
        assert_eq!(s["allocatable"]["memory"], "1024Ki");
        assert_eq!(s["conditions"][3]["type"], "Ready");
        assert_eq!(f.labels["kubernetes.io/hostname"], "n1");
    }
}
