//! Which device plugins this node runs and what each one advertises and grants, as plain data:
//! KubeVirt v1.9.0's device manager (`pkg/virt-handler/device-manager`) reduced to its decisions.
//!
//! - The permanent plugins are the hypervisor device (`kvm`), `tun` and `vhost-net`; with the
//!   `VSOCK` feature gate, `vhost-vsock` too. Each always registers, whatever the host has: a
//!   device node that is missing makes its devices `Unhealthy`, so the node shows the resource
//!   with its capacity but nothing allocatable, and a pod requesting it stays Pending with the
//!   scheduler's "Insufficient devices.kubevirt.io/..." reason, as under KubeVirt.
//! - Each advertises `max_devices` interchangeable devices (`<name>0` .. `<name>999` by
//!   default): the device-plugin API has no shared devices, so the count is the most launcher
//!   pods one node can hold.
//! - Allocate grants the one host node at the same path in the container, with `rw` (`rwm` on a
//!   unified cgroup v2 hierarchy).
//! - kvrs's one departure: `kvm` is healthy only where KVM really works (`/dev/kvm` opens and
//!   the kernel creates a VM), not merely where the node exists.

/// The resource namespace of KubeVirt's device plugins.
pub const DEVICE_NAMESPACE: &str = "devices.kubevirt.io";
/// The API version plugins register with.
pub const API_VERSION: &str = "v1beta1";
/// The kubelet's registration socket, in the device-plugin directory.
pub const KUBELET_SOCKET: &str = "kubelet.sock";
/// The kubelet's device-plugin directory.
pub const DEFAULT_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// Devices advertised per resource (KubeVirt's `--max-devices`): the most VMIs per node.
pub const DEFAULT_MAX_DEVICES: usize = 1000;
/// The feature gate that adds the `vhost-vsock` plugin.
pub const VSOCK_GATE: &str = "VSOCK";

/// How a plugin learns whether its device is usable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// The device node exists (KubeVirt's health check for every generic device).
    Present,
    /// The node exists and KVM works through it (`KVM_CREATE_VM` succeeds).
    KvmWorks,
}

/// One device plugin: a host device node offered to pods as an extended resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSpec {
    /// The short name: `kvm`, `tun`, `vhost-net`, `vhost-vsock`.
    pub name: &'static str,
    /// The device node on the host, which is also its path in the container.
    pub device_path: &'static str,
    /// How its health is decided.
    pub probe: Probe,
    /// Open the node once before serving: the first open of `/dev/net/tun` or
    /// `/dev/vhost-net` loads the kernel module behind it (KubeVirt does this for every device
    /// but the hypervisor's).
    pub pre_open: bool,
}

impl PluginSpec {
    /// The extended resource pods request, e.g. `devices.kubevirt.io/kvm`.
    pub fn resource_name(&self) -> String {
        format!("{DEVICE_NAMESPACE}/{}", self.name)
    }

    /// The socket file the plugin serves on, in the device-plugin directory (KubeVirt's name).
    pub fn socket_name(&self) -> String {
        format!("kubevirt-{}.sock", self.name)
    }
}

/// The facts and settings a plan is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInputs {
    /// Devices per resource.
    pub max_devices: usize,
    /// The host's cgroups are the unified v2 hierarchy.
    pub cgroup2_unified: bool,
    /// The `VSOCK` feature gate is enabled.
    pub vsock: bool,
}

/// The device plugins to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// One per resource, in a fixed order.
    pub plugins: Vec<PluginSpec>,
    /// Devices each plugin advertises.
    pub devices_per_plugin: usize,
    /// The cgroup permissions Allocate grants.
    pub permissions: &'static str,
}

/// The plugins KubeVirt v1.9.0's handler runs with these inputs.
pub fn plan(inputs: &PlanInputs) -> Plan {
    let generic = |name, device_path| PluginSpec {
        name,
        device_path,
        probe: Probe::Present,
        pre_open: true,
    };
    let mut plugins = vec![
        PluginSpec {
            name: "kvm",
            device_path: "/dev/kvm",
            probe: Probe::KvmWorks,
            pre_open: false,
        },
        generic("tun", "/dev/net/tun"),
        generic("vhost-net", "/dev/vhost-net"),
    ];
    if inputs.vsock {
        plugins.push(generic("vhost-vsock", "/dev/vhost-vsock"));
    }
    Plan {
        plugins,
        devices_per_plugin: inputs.max_devices,
        permissions: if inputs.cgroup2_unified { "rwm" } else { "rw" },
    }
}

/// What was last observed of a device on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    /// The device node exists (a character device).
    pub present: bool,
    /// For [`Probe::KvmWorks`]: the result of creating a VM through it, with the reason when
    /// it failed; `None` when it was not tried (the node is missing).
    pub kvm: Option<Result<(), String>>,
}

/// A device's health as the kubelet reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Allocatable.
    Healthy,
    /// Counted in the capacity, never allocated.
    Unhealthy,
}

impl Health {
    /// The API's string.
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Unhealthy => "Unhealthy",
        }
    }
}

/// The health of every device of a plugin with `probe`, given what the host shows.
pub fn health(probe: Probe, facts: &DeviceFacts) -> Health {
    let usable = match probe {
        Probe::Present => facts.present,
        Probe::KvmWorks => facts.present && matches!(facts.kvm, Some(Ok(()))),
    };
    if usable {
        Health::Healthy
    } else {
        Health::Unhealthy
    }
}

/// The device IDs a plugin advertises: `<name>0`, `<name>1`, ... (KubeVirt's IDs).
pub fn device_ids(spec: &PluginSpec, count: usize) -> impl Iterator<Item = String> + '_ {
    (0..count).map(move |i| format!("{}{i}", spec.name))
}

/// A host device node granted to a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceGrant {
    /// Its path in the container.
    pub container_path: String,
    /// Its path on the host.
    pub host_path: String,
    /// Its cgroup permissions.
    pub permissions: String,
}

/// What Allocate hands each container that requests the resource: the device node at its own
/// path (any number of the interchangeable devices maps to the one node).
pub fn grant(spec: &PluginSpec, permissions: &str) -> DeviceGrant {
    DeviceGrant {
        container_path: spec.device_path.to_string(),
        host_path: spec.device_path.to_string(),
        permissions: permissions.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> PlanInputs {
        PlanInputs {
            max_devices: DEFAULT_MAX_DEVICES,
            cgroup2_unified: false,
            vsock: false,
        }
    }

    fn names(plan: &Plan) -> Vec<&str> {
        plan.plugins.iter().map(|p| p.name).collect()
    }

    #[test]
    fn the_permanent_plugins_are_kvm_tun_and_vhost_net() {
        let plan = plan(&inputs());
        assert_eq!(names(&plan), ["kvm", "tun", "vhost-net"]);
        assert_eq!(plan.devices_per_plugin, 1000);
        assert_eq!(plan.permissions, "rw");
        let paths: Vec<_> = plan.plugins.iter().map(|p| p.device_path).collect();
        assert_eq!(paths, ["/dev/kvm", "/dev/net/tun", "/dev/vhost-net"]);
        // Only the hypervisor device is not pre-opened (KubeVirt: `name != hypervisorDevice`).
        let pre_open: Vec<_> = plan.plugins.iter().map(|p| p.pre_open).collect();
        assert_eq!(pre_open, [false, true, true]);
    }

    #[test]
    fn the_vsock_gate_adds_vhost_vsock() {
        let plan = plan(&PlanInputs {
            vsock: true,
            ..inputs()
        });
        assert_eq!(names(&plan), ["kvm", "tun", "vhost-net", "vhost-vsock"]);
        let vsock = &plan.plugins[3];
        assert_eq!(vsock.device_path, "/dev/vhost-vsock");
        assert_eq!(vsock.probe, Probe::Present);
    }

    #[test]
    fn cgroup_v2_grants_mknod_too() {
        let plan = plan(&PlanInputs {
            cgroup2_unified: true,
            ..inputs()
        });
        assert_eq!(plan.permissions, "rwm");
        let kvm = &plan.plugins[0];
        assert_eq!(
            grant(kvm, plan.permissions),
            DeviceGrant {
                container_path: "/dev/kvm".into(),
                host_path: "/dev/kvm".into(),
                permissions: "rwm".into(),
            }
        );
    }

    #[test]
    fn names_sockets_and_ids_are_kubevirts() {
        let plan = plan(&PlanInputs {
            max_devices: 3,
            ..inputs()
        });
        let tun = &plan.plugins[1];
        assert_eq!(tun.resource_name(), "devices.kubevirt.io/tun");
        assert_eq!(tun.socket_name(), "kubevirt-tun.sock");
        assert_eq!(
            device_ids(tun, plan.devices_per_plugin).collect::<Vec<_>>(),
            ["tun0", "tun1", "tun2"]
        );
        assert_eq!(plan.plugins[2].socket_name(), "kubevirt-vhost-net.sock");
    }

    #[test]
    fn a_missing_node_is_unhealthy() {
        let absent = DeviceFacts::default();
        assert_eq!(health(Probe::Present, &absent), Health::Unhealthy);
        assert_eq!(health(Probe::KvmWorks, &absent), Health::Unhealthy);
        let present = DeviceFacts {
            present: true,
            kvm: None,
        };
        assert_eq!(health(Probe::Present, &present), Health::Healthy);
    }

    #[test]
    fn kvm_is_healthy_only_where_a_vm_can_be_created() {
        let works = DeviceFacts {
            present: true,
            kvm: Some(Ok(())),
        };
        assert_eq!(health(Probe::KvmWorks, &works), Health::Healthy);
        let refused = DeviceFacts {
            present: true,
            kvm: Some(Err("creating a VM on /dev/kvm: EOPNOTSUPP".into())),
        };
        assert_eq!(health(Probe::KvmWorks, &refused), Health::Unhealthy);
        let untried = DeviceFacts {
            present: true,
            kvm: None,
        };
        assert_eq!(health(Probe::KvmWorks, &untried), Health::Unhealthy);
    }

    #[test]
    fn health_strings_are_the_apis() {
        assert_eq!(Health::Healthy.as_str(), "Healthy");
        assert_eq!(Health::Unhealthy.as_str(), "Unhealthy");
    }
}
