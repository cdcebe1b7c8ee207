//! Containers beside `compute`: the guest console log (a native sidecar), container-disk init
//! containers, hook sidecars and virtiofs daemons.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;
use serde::Deserialize;

use super::compute::{env, security_context, xdg_env};
use super::volumes::{kernel_boot_container, mount};
use super::{NON_ROOT_UID, PodError, PodInputs, VIRT_PRIVATE_DIR};
use crate::api::VirtualMachineInstance;
use crate::config::ClusterConfig;
use crate::resources::{is_cpu_dedicated, wants_qos_guaranteed};

/// A hook sidecar requested through the `hooks.kubevirt.io/hookSidecars` annotation.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookSidecar {
    /// Sidecar image (empty: the cluster's sidecar shim image).
    #[serde(default)]
    pub image: String,
    /// Pull policy.
    #[serde(default)]
    pub image_pull_policy: String,
    /// Command.
    #[serde(default)]
    pub command: Option<Vec<String>>,
    /// Arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// A ConfigMap key mounted as the hook script.
    #[serde(default)]
    pub config_map: Option<HookConfigMap>,
    /// A PVC shared with the sidecar (and optionally the compute container).
    #[serde(default)]
    pub pvc: Option<HookPvc>,
    /// The network binding plugin this sidecar serves (empty for the annotation's sidecars):
    /// the container learns it from `NETWORK_BINDING_PLUGIN_NAME`.
    #[serde(skip)]
    pub network_binding_plugin: String,
}

/// ConfigMap part of a hook sidecar.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookConfigMap {
    /// ConfigMap name.
    #[serde(default)]
    pub name: String,
    /// Key holding the script.
    #[serde(default)]
    pub key: String,
    /// Where the script appears in the sidecar.
    #[serde(default)]
    pub hook_path: String,
}

/// PVC part of a hook sidecar.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HookPvc {
    /// Claim name.
    #[serde(default)]
    pub name: String,
    /// Mount path in the sidecar.
    #[serde(default)]
    pub volume_path: String,
    /// Mount path in the compute container (empty: not mounted there).
    #[serde(default)]
    pub shared_compute_path: String,
}

/// The sidecars of the network binding plugins the VMI's interfaces name, one per plugin with a
/// `sidecarImage` (in plugin-name order; KubeVirt's order among several plugins is its map's,
/// i.e. random). An interface naming a plugin the cluster does not register is virt-controller's
/// refusal to render the pod.
pub(super) fn binding_plugin_sidecars(
    vmi: &VirtualMachineInstance,
    registered: &BTreeMap<String, super::NetworkBindingPlugin>,
    image_pull_policy: &str,
) -> Result<Vec<HookSidecar>, PodError> {
    let mut used = BTreeMap::new();
    let ifaces = vmi.spec.domain.devices.interfaces.iter().flatten();
    for (i, iface) in ifaces.enumerate() {
        let Some(binding) = &iface.binding else {
            continue;
        };
        let plugin = registered
            .get(&binding.name)
            .ok_or_else(|| PodError::UnknownNetworkBinding(i, binding.name.clone()))?;
        used.insert(binding.name.as_str(), plugin);
    }
    Ok(used
        .into_iter()
        .filter_map(|(name, plugin)| {
            let image = plugin.sidecar_image.as_deref().filter(|i| !i.is_empty())?;
            Some(HookSidecar {
                image: image.to_string(),
                image_pull_policy: image_pull_policy.to_string(),
                network_binding_plugin: name.to_string(),
                ..HookSidecar::default()
            })
        })
        .collect())
}

/// The hook sidecars a VMI asks for.
pub(super) fn hook_sidecars(vmi: &VirtualMachineInstance) -> Result<Vec<HookSidecar>, PodError> {
    match super::metadata::annotation(vmi, "hooks.kubevirt.io/hookSidecars") {
        None => Ok(Vec::new()),
        Some(raw) => serde_json::from_str(raw).map_err(|e| PodError::HookSidecars(e.to_string())),
    }
}

fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, K8sQuantity> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), K8sQuantity(v.to_string())))
        .collect()
}

fn drop_all() -> core::Capabilities {
    core::Capabilities {
        drop: Some(vec!["ALL".into()]),
        ..Default::default()
    }
}

/// The security context of KubeVirt's helper containers: qemu user, no privileges.
fn helper_security(with_group: bool) -> core::SecurityContext {
    core::SecurityContext {
        run_as_user: Some(NON_ROOT_UID),
        run_as_group: with_group.then_some(NON_ROOT_UID),
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        capabilities: Some(drop_all()),
        ..Default::default()
    }
}

fn guaranteed(vmi: &VirtualMachineInstance) -> Result<bool, PodError> {
    Ok(is_cpu_dedicated(vmi) || wants_qos_guaranteed(vmi)?)
}

/// Requests and limits of a helper container; with dedicated CPUs or QoS Guaranteed the
/// requests are raised to the limits so the pod stays Guaranteed.
fn helper_resources(
    requests: &[(&str, &str)],
    limits: &[(&str, &str)],
    raise_requests: bool,
) -> core::ResourceRequirements {
    let mut req = list(requests);
    let lim = list(limits);
    if raise_requests {
        for (k, v) in &lim {
            req.insert(k.clone(), v.clone());
        }
    }
    core::ResourceRequirements {
        requests: Some(req),
        limits: Some(lim),
        ..Default::default()
    }
}

/// `guest-console-log`: tails the serial console log; an init container with
/// `restartPolicy: Always`, i.e. a native sidecar that starts before `compute`.
pub(super) fn console_log_container(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
    inputs: &PodInputs,
    verbosity: u32,
) -> Result<Option<core::Container>, PodError> {
    let devices = &vmi.spec.domain.devices;
    if devices.autoattach_serial_console == Some(false) {
        return Ok(None);
    }
    if !devices
        .log_serial_console
        .unwrap_or(!inputs.serial_console_log_disabled)
    {
        return Ok(None);
    }
    let uid = vmi.metadata.uid.as_deref().unwrap_or_default();
    let resources = helper_resources(
        &[("cpu", "5m"), ("memory", "35M")],
        &[("cpu", "15m"), ("memory", "60M")],
        guaranteed(vmi)?,
    );
    Ok(Some(core::Container {
        name: "guest-console-log".into(),
        image: Some(config.launcher_image.clone()),
        image_pull_policy: Some(inputs.image_pull_policy.clone()).filter(|p| !p.is_empty()),
        command: Some(vec!["/usr/bin/virt-tail".into()]),
        args: Some(vec![
            "--logfile".into(),
            format!("{VIRT_PRIVATE_DIR}/{uid}/virt-serial0-log"),
        ]),
        volume_mounts: Some(vec![core::VolumeMount {
            read_only: Some(true),
            ..mount("private", VIRT_PRIVATE_DIR)
        }]),
        resources: Some(resources),
        security_context: Some(helper_security(false)),
        restart_policy: Some("Always".into()),
        env: Some(vec![env(
            "VIRT_LAUNCHER_LOG_VERBOSITY",
            &verbosity.to_string(),
        )]),
        ..Default::default()
    }))
}

fn image_init_container(
    name: &str,
    image: &str,
    policy: Option<&str>,
    raise: bool,
) -> core::Container {
    let mut resources = helper_resources(
        &[("cpu", "1m"), ("memory", "1M")],
        &[("cpu", "10m"), ("memory", "40M")],
        raise,
    );
    if let Some(r) = resources.requests.as_mut() {
        r.insert("ephemeral-storage".into(), K8sQuantity("50M".into()));
    }
    core::Container {
        name: format!("volume{name}"),
        image: Some(image.into()),
        image_pull_policy: policy.filter(|p| !p.is_empty()).map(str::to_string),
        command: Some(vec!["/container-disk-binary/usr/bin/container-disk".into()]),
        args: Some(vec!["--no-op".into()]),
        resources: Some(resources),
        security_context: Some(helper_security(false)),
        volume_mounts: Some(vec![core::VolumeMount {
            read_only: Some(true),
            ..mount("launcher-volume", "/container-disk-binary")
        }]),
        ..Default::default()
    }
}

/// One no-op init container per container disk (and kernel-boot image): pulling the image as a
/// container makes its digest visible in the pod status.
pub(super) fn image_volume_init_containers(
    vmi: &VirtualMachineInstance,
) -> Result<Vec<core::Container>, PodError> {
    let raise = guaranteed(vmi)?;
    let mut out = Vec::new();
    for v in vmi.spec.volumes.iter().flatten() {
        if let Some(cd) = &v.container_disk {
            out.push(image_init_container(
                &v.name,
                &cd.image,
                cd.image_pull_policy.as_deref(),
                raise,
            ));
        }
    }
    if let Some(kb) = kernel_boot_container(vmi) {
        out.push(image_init_container(
            "kernel-boot-volume",
            &kb.image,
            kb.image_pull_policy.as_deref(),
            raise,
        ));
    }
    Ok(out)
}

/// The `hook-sidecar-<i>` container.
pub(super) fn hook_container(
    i: usize,
    hook: &HookSidecar,
    vmi: &VirtualMachineInstance,
    non_root: bool,
    user_id: i64,
) -> Result<core::Container, PodError> {
    let name = format!("hook-sidecar-{i}");
    let resources = if guaranteed(vmi)? {
        let l = list(&[("cpu", "200m"), ("memory", "64M")]);
        core::ResourceRequirements {
            requests: Some(l.clone()),
            limits: Some(l),
            ..Default::default()
        }
    } else {
        core::ResourceRequirements::default()
    };
    let mut envs = Vec::new();
    if non_root {
        envs.extend(xdg_env());
    }
    envs.push(env("CONTAINER_NAME", &name));
    if !hook.network_binding_plugin.is_empty() {
        envs.push(env(
            "NETWORK_BINDING_PLUGIN_NAME",
            &hook.network_binding_plugin,
        ));
    }
    let mut mounts = vec![core::VolumeMount {
        sub_path: Some(name.clone()),
        ..mount("hook-sidecar-sockets", "/var/run/kubevirt-hooks")
    }];
    if let Some(cm) = &hook.config_map {
        mounts.push(core::VolumeMount {
            sub_path: Some(cm.key.clone()).filter(|k| !k.is_empty()),
            ..mount(&cm.name, &cm.hook_path)
        });
    }
    if let Some(pvc) = &hook.pvc {
        mounts.push(mount(&pvc.name, &pvc.volume_path));
    }
    let user = if non_root { user_id } else { 0 };
    Ok(core::Container {
        name,
        image: Some(hook.image.clone()).filter(|i| !i.is_empty()),
        image_pull_policy: Some(hook.image_pull_policy.clone()).filter(|p| !p.is_empty()),
        command: hook.command.clone(),
        args: hook.args.clone(),
        env: Some(envs),
        resources: Some(resources),
        volume_mounts: Some(mounts),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        security_context: Some(security_context(user, non_root.then(drop_all))),
        ..Default::default()
    })
}

/// One `virtiofsd` container per volume shared with the guest through virtiofs.
pub(super) fn virtiofs_containers(
    vmi: &VirtualMachineInstance,
    config: &ClusterConfig,
) -> Result<Vec<core::Container>, PodError> {
    let filesystems: HashSet<&str> = vmi
        .spec
        .domain
        .devices
        .filesystems
        .iter()
        .flatten()
        .map(|f| f.name.as_str())
        .collect();
    if filesystems.is_empty() {
        return Ok(Vec::new());
    }
    let dedicated = is_cpu_dedicated(vmi);
    let guaranteed = dedicated || wants_qos_guaranteed(vmi)?;
    let mut out = Vec::new();
    for v in vmi.spec.volumes.iter().flatten() {
        if !filesystems.contains(&v.name.as_str()) || v.container_path.is_some() {
            continue;
        }
        let mut requests = list(&[("cpu", "10m"), ("memory", "1M")]);
        let limits = list(&[("cpu", "100m"), ("memory", "80M")]);
        if dedicated || guaranteed {
            requests.insert("cpu".into(), limits["cpu"].clone());
        }
        if guaranteed {
            requests.insert("memory".into(), limits["memory"].clone());
        }
        let mount_point = if v.config_map.is_some() {
            format!("{VIRT_PRIVATE_DIR}/config-map/{}", v.name)
        } else if v.secret.is_some() {
            format!("{VIRT_PRIVATE_DIR}/secret/{}", v.name)
        } else if v.service_account.is_some() {
            "/var/run/secrets/kubernetes.io/serviceaccount/".into()
        } else if v.downward_api.is_some() {
            format!("{VIRT_PRIVATE_DIR}/downwardapi/{}", v.name)
        } else {
            format!("/{}", v.name)
        };
        let mut args = vec![
            format!(
                "--socket-path=/var/run/kubevirt/virtiofs-containers/{}.sock",
                v.name
            ),
            format!("--shared-dir={mount_point}"),
            "--sandbox=none".into(),
            "--cache=auto".into(),
            "--migration-on-error=guest-error".into(),
            "--migration-mode=find-paths".into(),
        ];
        if v.service_account.is_some() {
            args.push(format!("--translate-uid=host:{NON_ROOT_UID}:0:1"));
        }
        let mut mounts = vec![mount(
            "virtiofs-containers",
            "/var/run/kubevirt/virtiofs-containers",
        )];
        if v.service_account.is_none() {
            mounts.push(mount(&v.name, &mount_point));
        }
        out.push(core::Container {
            name: format!("virtiofs-{}", v.name),
            image: Some(config.launcher_image.clone()),
            image_pull_policy: Some("IfNotPresent".into()),
            command: Some(vec!["/usr/libexec/virtiofsd".into()]),
            args: Some(args),
            volume_mounts: Some(mounts),
            resources: Some(core::ResourceRequirements {
                requests: Some(requests),
                limits: Some(limits),
                ..Default::default()
            }),
            security_context: Some(helper_security(true)),
            ..Default::default()
        });
    }
    Ok(out)
}
