//! The `compute` container: virt-launcher-monitor with its flags, resources, mounts, probes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use super::volumes::RenderedVolumes;
use super::{PodError, PodInputs, VIRT_PRIVATE_DIR};
use crate::api::{Probe, VirtualMachineInstance};
use crate::config::ClusterConfig;
use crate::quantity::Quantity;
use crate::resources::ComputeResources;

/// Cluster default for the launcher's log verbosity; other values are passed on explicitly.
const DEFAULT_LAUNCHER_VERBOSITY: u32 = 2;
/// Above this verbosity libvirt and virtiofsd debug logs are switched on too.
const EXT_LOG_VERBOSITY_THRESHOLD: u32 = 5;
/// Libvirt needs about this long to start; added to user probes' initial delay.
const LIBVIRT_STARTUP_DELAY: i32 = 10;

pub(super) struct ComputeArgs<'a> {
    pub(super) vmi: &'a VirtualMachineInstance,
    pub(super) config: &'a ClusterConfig,
    pub(super) inputs: &'a PodInputs,
    pub(super) name: &'a str,
    pub(super) namespace: &'a str,
    pub(super) grace: i64,
    pub(super) hook_count: usize,
    pub(super) non_root: bool,
    pub(super) user_id: i64,
    pub(super) volumes: &'a RenderedVolumes,
    pub(super) resources: &'a ComputeResources,
    pub(super) verbosity: u32,
}

fn label<'a>(vmi: &'a VirtualMachineInstance, key: &str) -> Option<&'a str> {
    vmi.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

/// The launcher's log verbosity: the VMI's `logVerbosity` label, else the cluster's.
pub(super) fn launcher_verbosity(
    vmi: &VirtualMachineInstance,
    inputs: &PodInputs,
) -> Result<u32, PodError> {
    match label(vmi, "logVerbosity") {
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| PodError::LogVerbosity(v.to_string())),
        None => Ok(inputs.launcher_log_verbosity),
    }
}

pub(super) fn env(name: &str, value: &str) -> core::EnvVar {
    core::EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

/// `XDG_*` directories for a non-root process.
pub(super) fn xdg_env() -> Vec<core::EnvVar> {
    vec![
        env("XDG_CACHE_HOME", VIRT_PRIVATE_DIR),
        env("XDG_CONFIG_HOME", VIRT_PRIVATE_DIR),
        env("XDG_RUNTIME_DIR", "/var/run"),
    ]
}

/// A container security context as KubeVirt renders it for its own containers.
pub(super) fn security_context(
    user_id: i64,
    capabilities: Option<core::Capabilities>,
) -> core::SecurityContext {
    let non_root = user_id != 0;
    core::SecurityContext {
        run_as_user: Some(user_id),
        run_as_non_root: Some(non_root),
        run_as_group: non_root.then_some(user_id),
        allow_privilege_escalation: non_root.then_some(false),
        capabilities,
        ..Default::default()
    }
}

pub(super) fn quantities(list: &BTreeMap<String, Quantity>) -> BTreeMap<String, K8sQuantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), K8sQuantity(v.as_str().to_string())))
        .collect()
}

fn command(a: &ComputeArgs<'_>) -> Vec<String> {
    let c = a.config;
    let mut cmd: Vec<String> = [
        "/usr/bin/virt-launcher-monitor",
        "--qemu-timeout",
        &a.inputs.qemu_timeout(),
        "--name",
        a.name,
        "--uid",
        a.vmi.metadata.uid.as_deref().unwrap_or_default(),
        "--namespace",
        a.namespace,
        "--kubevirt-share-dir",
        &a.inputs.share_dir,
        "--ephemeral-disk-dir",
        &a.inputs.ephemeral_disk_dir,
        "--container-disk-dir",
        &a.inputs.container_disk_dir,
        "--grace-period-seconds",
        &a.grace.to_string(),
        "--hook-sidecars",
        &a.hook_count.to_string(),
        "--ovmf-path",
        a.inputs.ovmf_path.as_deref().unwrap_or_else(|| {
            super::default_ovmf_path(a.vmi.spec.architecture.as_deref().unwrap_or_default())
        }),
        "--disk-memory-limit",
        &a.inputs.disk_memory_limit.to_string(),
        "--hypervisor",
        &a.inputs.hypervisor,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut flag = |on: bool, f: &str| {
        if on {
            cmd.push(f.to_string());
        }
    };
    flag(a.non_root, "--run-as-nonroot");
    // ImageVolume, LibvirtHooksServerAndClient and PodSecondaryInterfaceNamingUpgrade are Beta
    // gates, on by default.
    flag(true, "--image-volume");
    flag(true, "--libvirt-hook-server-and-client");
    flag(true, "--upgrade-ordinal-ifaces");
    flag(c.gate("VGPULiveMigration"), "--vgpu-dedicated-hook");
    flag(c.gate("VMStatsCollector"), "--vm-stats-collector");
    flag(c.gate("FirmwareAutoSelection"), "--firmware-auto-selection");
    let annotations = a.vmi.metadata.annotations.clone().unwrap_or_default();
    if let Some(filters) = annotations.get("kubevirt.io/libvirt-log-filters") {
        cmd.push("--libvirt-log-filters".into());
        cmd.push(filters.clone());
    }
    let mut flag = |on: bool, f: &str| {
        if on {
            cmd.push(f.to_string());
        }
    };
    flag(c.use_emulation, "--allow-emulation");
    flag(
        c.gate("CrossArchitectureVirtualization"),
        "--allow-cross-arch-emulation",
    );
    let keep = annotations.iter().any(|(k, v)| {
        k.starts_with("kubevirt.io/keep-launcher-alive-after-failure")
            && (v.is_empty() || v.starts_with("true"))
    });
    flag(keep, "--keep-after-failure");
    flag(
        annotations.contains_key("kubevirt.io/func-test-virt-launcher-fail-fast"),
        "--simulate-crash",
    );
    cmd
}

fn probe(vmi: &VirtualMachineInstance, p: &Probe) -> core::Probe {
    let timeout = p.timeout_seconds.filter(|t| *t >= 1).unwrap_or(1);
    let mut out = core::Probe {
        initial_delay_seconds: Some(p.initial_delay_seconds.unwrap_or(0) + LIBVIRT_STARTUP_DELAY),
        timeout_seconds: Some(timeout),
        period_seconds: Some(p.period_seconds.filter(|v| *v >= 1).unwrap_or(10)),
        success_threshold: Some(p.success_threshold.filter(|v| *v >= 1).unwrap_or(1)),
        failure_threshold: Some(p.failure_threshold.filter(|v| *v >= 1).unwrap_or(3)),
        exec: p.exec.clone(),
        http_get: p.http_get.clone(),
        tcp_socket: p.tcp_socket.clone(),
        ..Default::default()
    };
    let domain = format!(
        "{}_{}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default()
    );
    let wrap = |rest: Vec<String>| {
        let mut cmd = vec![
            "virt-probe".to_string(),
            "--domainName".into(),
            domain.clone(),
            "--timeoutSeconds".into(),
            timeout.to_string(),
        ];
        cmd.extend(rest);
        cmd
    };
    if p.guest_agent_ping.is_some() {
        out.exec = Some(core::ExecAction {
            command: Some(wrap(vec!["--guestAgentPing".into()])),
        });
        out.timeout_seconds = Some(timeout + 1);
    } else if let Some(original) = out.exec.as_ref().and_then(|e| e.command.clone())
        && let Some(first) = original.first()
        && first != "virt-probe"
    {
        let mut rest = vec!["--command".to_string(), first.clone(), "--".into()];
        rest.extend(original[1..].iter().cloned());
        out.exec = Some(core::ExecAction {
            command: Some(wrap(rest)),
        });
        out.timeout_seconds = Some(timeout + 1);
    }
    out
}

fn ports(vmi: &VirtualMachineInstance) -> Option<Vec<core::ContainerPort>> {
    let ports: Vec<core::ContainerPort> = vmi
        .spec
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .flat_map(|i| i.ports.iter().flatten())
        .map(|p| core::ContainerPort {
            name: p.name.clone().filter(|n| !n.is_empty()),
            container_port: p.port.unwrap_or(0),
            protocol: Some(
                p.protocol
                    .clone()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "TCP".into()),
            ),
            ..Default::default()
        })
        .collect();
    Some(ports).filter(|p| !p.is_empty())
}

/// Renders the compute container.
pub(super) fn render(a: ComputeArgs<'_>) -> core::Container {
    let vmi = a.vmi;
    let mut add = vec!["NET_BIND_SERVICE".to_string()];
    if !a.non_root {
        // Root launchers may set CPU affinity.
        add.push("SYS_NICE".into());
    }
    let capabilities = core::Capabilities {
        add: Some(add),
        drop: a.non_root.then(|| vec!["ALL".to_string()]),
    };

    let mut envs = Vec::new();
    if a.user_id != 0 {
        envs.extend(xdg_env());
    }
    if !a.volumes.shared_paths.is_empty() {
        envs.push(env(
            "SHARED_FILESYSTEM_PATHS",
            &a.volumes.shared_paths.join(":"),
        ));
    }
    let verbosity_label = label(vmi, "logVerbosity");
    if verbosity_label.is_some() || a.inputs.launcher_log_verbosity != DEFAULT_LAUNCHER_VERBOSITY {
        let text = verbosity_label
            .map(str::to_string)
            .unwrap_or_else(|| a.inputs.launcher_log_verbosity.to_string());
        envs.push(env("VIRT_LAUNCHER_LOG_VERBOSITY", &text));
    }
    let label_true = |key: &str| label(vmi, key).is_some_and(|v| v.eq_ignore_ascii_case("true"));
    if label_true("debugLogs") || a.verbosity > EXT_LOG_VERBOSITY_THRESHOLD {
        envs.push(env("LIBVIRT_DEBUG_LOGS", "1"));
    }
    if label_true("virtiofsdDebugLogs") || a.verbosity > EXT_LOG_VERBOSITY_THRESHOLD {
        envs.push(env("VIRTIOFSD_DEBUG_LOGS", "1"));
    }
    envs.push(core::EnvVar {
        name: "POD_NAME".into(),
        value_from: Some(core::EnvVarSource {
            field_ref: Some(core::ObjectFieldSelector {
                field_path: "metadata.name".into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });

    let claims: Vec<core::ResourceClaim> = a
        .resources
        .claims
        .iter()
        .map(|(name, request)| core::ResourceClaim {
            name: name.clone(),
            request: request.clone().filter(|r| !r.is_empty()),
        })
        .collect();

    core::Container {
        name: "compute".into(),
        image: Some(a.config.launcher_image.clone()),
        image_pull_policy: Some(a.inputs.image_pull_policy.clone()).filter(|p| !p.is_empty()),
        security_context: Some(security_context(a.user_id, Some(capabilities))),
        command: Some(command(&a)),
        volume_devices: Some(a.volumes.devices.clone()).filter(|d| !d.is_empty()),
        volume_mounts: Some(a.volumes.mounts.clone()).filter(|m| !m.is_empty()),
        resources: Some(core::ResourceRequirements {
            limits: Some(quantities(&a.resources.limits)).filter(|l| !l.is_empty()),
            requests: Some(quantities(&a.resources.requests)).filter(|l| !l.is_empty()),
            claims: Some(claims).filter(|c| !c.is_empty()),
        }),
        ports: ports(vmi),
        env: Some(envs),
        liveness_probe: vmi.spec.liveness_probe.as_ref().map(|p| probe(vmi, p)),
        readiness_probe: vmi.spec.readiness_probe.as_ref().map(|p| probe(vmi, p)),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    }
}
