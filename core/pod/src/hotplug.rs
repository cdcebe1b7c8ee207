//! KubeVirt's hotplug attachment pod (`RenderHotplugAttachmentPodTemplate`): the pod that brings a
//! running VMI's hotplugged claims onto its node, so virt-handler can hand them to the launcher.
//!
//! The pod does nothing itself: its container sleeps in `container-disk`, and the kubelet attaches
//! and mounts its claims. It is owned by the launcher pod (deleted with it), pinned to the
//! launcher's node, and tolerates the node conditions the launcher outlives, so a volume already
//! attached is not lost when a node taint appears.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use crate::NON_ROOT_UID;
use crate::api::{VirtualMachineInstance, Volume};
use kvrs_admission::ClusterConfig;

/// The value of the `kubevirt.io` label (and the container's name) of an attachment pod.
pub const HOTPLUG_DISK: &str = "hotplug-disk";
/// The emptyDir the attachment pod shares with nobody: virt-handler finds the claims through the
/// kubelet's directories, not through it.
pub const HOTPLUG_DISKS_VOLUME: &str = "hotplug-disks";
/// `generateName` of attachment pods.
pub const ATTACHMENT_POD_PREFIX: &str = "hp-volume-";
/// The annotation of pods that exist only to provision a claim (KubeVirt's
/// `EphemeralProvisioningObject`).
pub const EPHEMERAL_PROVISIONING: &str = "kubevirt.io/ephemeral-provisioning";

/// What the attachment pod needs to know of a hotplugged volume's claim.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AttachmentClaim {
    /// `volumeMode: Block`: the claim is a device, not a mount.
    pub block: bool,
    /// The claim's `metadata.uid`: a block device's path in the pod ends with it.
    pub uid: String,
}

/// Why no attachment pod can be rendered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AttachmentPodError {
    /// The launcher pod has no name or UID, so nothing can own the attachment pod.
    #[error("launcher pod: metadata.{field} is empty, the attachment pod needs it as its owner")]
    LauncherPodIncomplete {
        /// `name` or `uid`.
        field: &'static str,
    },
    /// virt-handler has not recorded the VMI's SELinux context yet (KubeVirt's text).
    #[error("VMI is missing SELinux context")]
    MissingSelinuxContext,
    /// `status.selinuxContext` is not `user:role:type:level`.
    #[error("VMI has invalid SELinux context: {0}")]
    InvalidSelinuxContext(String),
}

/// The claim a volume stands on (KubeVirt's `PVCNameFromVirtVolume`): a PVC's claim, a
/// DataVolume's (its PVC has its name), a memory dump's claim.
pub fn claim_of(volume: &Volume) -> Option<&str> {
    volume
        .persistent_volume_claim
        .as_ref()
        .map(|p| p.claim_name.as_str())
        .or(volume.data_volume.as_ref().map(|d| d.name.as_str()))
        .or(volume.memory_dump.as_ref().map(|m| m.claim_name.as_str()))
        .filter(|c| !c.is_empty())
}

/// The node conditions an attachment pod tolerates (KubeVirt's `hotplugPodTolerations`).
fn hotplug_tolerations() -> Vec<core::Toleration> {
    [
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/network-unavailable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
    ]
    .into_iter()
    .map(|key| core::Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some("NoSchedule".into()),
        ..core::Toleration::default()
    })
    .collect()
}

fn quantities(cpu: &str, memory: &str) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), Quantity(cpu.into())),
        ("memory".to_string(), Quantity(memory.into())),
    ])
}

/// The SELinux level the launcher's disks carry, which the attachment pod must share to hand
/// them over (KubeVirt's `matchSELinuxLevelOfVMI`): `None` when the node has no SELinux.
fn selinux_level(vmi: &VirtualMachineInstance) -> Result<Option<String>, AttachmentPodError> {
    let status = vmi.status.as_ref();
    let own = status
        .and_then(|s| s.selinux_context.as_deref())
        .unwrap_or_default();
    let context = if own.is_empty() {
        let source = status
            .and_then(|s| s.migration_state.as_ref())
            .and_then(|m| m.source_state.as_ref())
            .and_then(|s| s.selinux_context.as_deref())
            .unwrap_or_default();
        if source.is_empty() {
            return Err(AttachmentPodError::MissingSelinuxContext);
        }
        source
    } else {
        own
    };
    if context == "none" {
        return Ok(None);
    }
    let parts: Vec<&str> = context.split(':').collect();
    if parts.len() < 4 {
        return Err(AttachmentPodError::InvalidSelinuxContext(context.into()));
    }
    Ok(Some(parts[3..].join(":")))
}

/// The one container of an attachment or trigger pod: the launcher image running `command`
/// under `/bin/sh -c`, KubeVirt's hotplug resources and restricted security context at the
/// VMI's SELinux `level`, the pod's `hotplug-disks` emptyDir at `/path`.
fn hotplug_container(command: &str, level: String, config: &ClusterConfig) -> core::Container {
    core::Container {
        name: HOTPLUG_DISK.into(),
        image: Some(config.launcher_image.clone()),
        command: Some(vec!["/bin/sh".into(), "-c".into(), command.into()]),
        resources: Some(core::ResourceRequirements {
            limits: Some(quantities("100m", "80M")),
            requests: Some(quantities("10m", "2M")),
            ..core::ResourceRequirements::default()
        }),
        security_context: Some(core::SecurityContext {
            allow_privilege_escalation: Some(false),
            run_as_non_root: Some(true),
            run_as_user: Some(NON_ROOT_UID),
            seccomp_profile: Some(core::SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..core::SeccompProfile::default()
            }),
            capabilities: Some(core::Capabilities {
                drop: Some(vec!["ALL".into()]),
                ..core::Capabilities::default()
            }),
            // KubeVirt's `selinuxLauncherType` defaults to empty, which kvrs does not configure.
            se_linux_options: Some(core::SELinuxOptions {
                level: Some(level),
                ..core::SELinuxOptions::default()
            }),
            ..core::SecurityContext::default()
        }),
        volume_mounts: Some(vec![core::VolumeMount {
            name: HOTPLUG_DISKS_VOLUME.into(),
            mount_path: "/path".into(),
            mount_propagation: Some("HostToContainer".into()),
            ..core::VolumeMount::default()
        }]),
        ..core::Container::default()
    }
}

/// The owner reference every hotplug pod carries: its launcher pod, as controller.
fn launcher_owner(launcher: &core::Pod) -> Result<OwnerReference, AttachmentPodError> {
    let name = launcher.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(AttachmentPodError::LauncherPodIncomplete { field: "name" });
    }
    let uid = launcher.metadata.uid.clone().unwrap_or_default();
    if uid.is_empty() {
        return Err(AttachmentPodError::LauncherPodIncomplete { field: "uid" });
    }
    Ok(OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name,
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// KubeVirt's hotplug population trigger pod (`RenderHotplugAttachmentTriggerPodTemplate` with
/// `tempPod`): a hotplugged DataVolume whose claim waits for its first consumer gets one —
/// a pod that consumes the claim on the launcher's node (pod affinity to the launcher pod's
/// labels), so the claim binds there and CDI can populate it; its command exits at once
/// (`kubevirt.io/ephemeral-provisioning` marks it as provisioning only). A filesystem claim is
/// mounted at `/pvc`, a block one is the device `/dev/hotplugblockdevice` (the pod then runs as
/// root, as KubeVirt's does).
pub fn render_trigger_pod(
    vmi: &VirtualMachineInstance,
    launcher: &core::Pod,
    volume: &Volume,
    claim: &str,
    block: bool,
    config: &ClusterConfig,
) -> Result<core::Pod, AttachmentPodError> {
    let owner = launcher_owner(launcher)?;
    let level = selinux_level(vmi)?.unwrap_or_else(|| "s0".into());
    let mut container = hotplug_container("exit", level, config);
    // KubeVirt's command is `/bin/bash -c exit 0`: bash runs `exit` with `$0` set to `0`.
    container.command = Some(vec![
        "/bin/bash".into(),
        "-c".into(),
        "exit".into(),
        "0".into(),
    ]);
    let mut security = None;
    if block {
        container.volume_devices = Some(vec![core::VolumeDevice {
            name: volume.name.clone(),
            device_path: "/dev/hotplugblockdevice".into(),
        }]);
        security = Some(core::PodSecurityContext {
            run_as_user: Some(0),
            ..core::PodSecurityContext::default()
        });
    } else if let Some(mounts) = container.volume_mounts.as_mut() {
        mounts.push(core::VolumeMount {
            name: volume.name.clone(),
            mount_path: "/pvc".into(),
            ..core::VolumeMount::default()
        });
    }
    let launcher_labels = launcher.metadata.labels.clone().unwrap_or_default();
    Ok(core::Pod {
        metadata: ObjectMeta {
            generate_name: Some(ATTACHMENT_POD_PREFIX.into()),
            namespace: launcher.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                kvrs_api::names::labels::APP.to_string(),
                HOTPLUG_DISK.to_string(),
            )])),
            annotations: Some(BTreeMap::from([(
                EPHEMERAL_PROVISIONING.to_string(),
                "true".to_string(),
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(core::PodSpec {
            containers: vec![container],
            affinity: Some(core::Affinity {
                pod_affinity: Some(core::PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![
                        core::PodAffinityTerm {
                            label_selector: Some(LabelSelector {
                                match_labels: Some(launcher_labels),
                                ..LabelSelector::default()
                            }),
                            topology_key: "kubernetes.io/hostname".into(),
                            ..core::PodAffinityTerm::default()
                        },
                    ]),
                    ..core::PodAffinity::default()
                }),
                ..core::Affinity::default()
            }),
            tolerations: launcher.spec.as_ref().and_then(|s| s.tolerations.clone()),
            volumes: Some(vec![
                core::Volume {
                    name: volume.name.clone(),
                    persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                        claim_name: claim.into(),
                        read_only: Some(false),
                    }),
                    ..core::Volume::default()
                },
                core::Volume {
                    name: HOTPLUG_DISKS_VOLUME.into(),
                    empty_dir: Some(core::EmptyDirVolumeSource::default()),
                    ..core::Volume::default()
                },
            ]),
            termination_grace_period_seconds: Some(0),
            security_context: security,
            ..core::PodSpec::default()
        }),
        status: None,
    })
}

/// KubeVirt's attachment pod for `volumes` of `vmi`, owned by `launcher`. `claims` holds, by
/// volume name, the facts of each volume's claim; a volume without an entry still gets its pod
/// volume but neither a mount nor a device, as in KubeVirt. A filesystem claim whose volume
/// virt-handler already mounted (`MountedToPod` or `Ready`) is not mounted again.
pub fn render_attachment_pod(
    vmi: &VirtualMachineInstance,
    launcher: &core::Pod,
    volumes: &[&Volume],
    claims: &BTreeMap<String, AttachmentClaim>,
    config: &ClusterConfig,
) -> Result<core::Pod, AttachmentPodError> {
    let owner = launcher_owner(launcher)?;
    let launcher_spec = launcher.spec.as_ref();
    let node = launcher_spec
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();

    let mut tolerations = hotplug_tolerations();
    tolerations.extend(
        launcher_spec
            .and_then(|s| s.tolerations.clone())
            .unwrap_or_default(),
    );
    // KubeVirt sorts by key and drops adjacent duplicates (`slices.Compact`).
    tolerations.sort_by(|a, b| a.key.cmp(&b.key));
    tolerations.dedup();

    let level = selinux_level(vmi)?.unwrap_or_else(|| "s0".into());
    let mut container = hotplug_container(
        "/usr/bin/container-disk --copy-path /path/hp",
        level,
        config,
    );

    let mounted: Vec<&str> = vmi
        .status
        .iter()
        .flat_map(|s| s.volume_status.iter().flatten())
        .filter(|s| s.hotplug_volume.is_some())
        .filter(|s| matches!(s.phase.as_deref(), Some("Ready" | "MountedToPod")))
        .map(|s| s.name.as_str())
        .collect();
    let mut pod_volumes = vec![core::Volume {
        name: HOTPLUG_DISKS_VOLUME.into(),
        empty_dir: Some(core::EmptyDirVolumeSource::default()),
        ..core::Volume::default()
    }];
    let mut devices = Vec::new();
    for volume in volumes {
        let Some(claim) = claim_of(volume) else {
            continue;
        };
        pod_volumes.push(core::Volume {
            name: volume.name.clone(),
            persistent_volume_claim: Some(core::PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                ..core::PersistentVolumeClaimVolumeSource::default()
            }),
            ..core::Volume::default()
        });
        let Some(facts) = claims.get(&volume.name) else {
            continue;
        };
        if facts.block {
            devices.push(core::VolumeDevice {
                name: volume.name.clone(),
                device_path: format!("/path/{}/{}", volume.name, facts.uid),
            });
        } else if !mounted.contains(&volume.name.as_str())
            && let Some(mounts) = container.volume_mounts.as_mut()
        {
            mounts.push(core::VolumeMount {
                name: volume.name.clone(),
                mount_path: format!("/{}", volume.name),
                ..core::VolumeMount::default()
            });
        }
    }
    if !devices.is_empty() {
        container.volume_devices = Some(devices);
    }

    Ok(core::Pod {
        metadata: ObjectMeta {
            generate_name: Some(ATTACHMENT_POD_PREFIX.into()),
            namespace: launcher.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                kvrs_api::names::labels::APP.to_string(),
                HOTPLUG_DISK.to_string(),
            )])),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(core::PodSpec {
            containers: vec![container],
            affinity: Some(core::Affinity {
                node_affinity: Some(core::NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(core::NodeSelector {
                        node_selector_terms: vec![core::NodeSelectorTerm {
                            match_expressions: Some(vec![core::NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec![node]),
                            }]),
                            ..core::NodeSelectorTerm::default()
                        }],
                    }),
                    ..core::NodeAffinity::default()
                }),
                ..core::Affinity::default()
            }),
            tolerations: Some(tolerations),
            volumes: Some(pod_volumes),
            termination_grace_period_seconds: Some(0),
            ..core::PodSpec::default()
        }),
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(status: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "testvmi", "namespace": "default", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}},
                     "volumes": [
                        {"name": "hp-fs", "persistentVolumeClaim": {"claimName": "fs-claim", "hotpluggable": true}},
                        {"name": "hp-block", "dataVolume": {"name": "block-dv", "hotpluggable": true}}]},
            "status": status
        }))
        .unwrap()
    }

    fn launcher() -> core::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-testvmi-abcde", "namespace": "default", "uid": "launcher-uid"},
            "spec": {"nodeName": "node01", "containers": [{"name": "compute"}],
                     "tolerations": [
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "example.com/gpu", "operator": "Exists"}]}
        }))
        .unwrap()
    }

    fn claims(block_fs: bool) -> BTreeMap<String, AttachmentClaim> {
        BTreeMap::from([
            (
                "hp-fs".to_string(),
                AttachmentClaim {
                    block: block_fs,
                    uid: "fs-uid".into(),
                },
            ),
            (
                "hp-block".to_string(),
                AttachmentClaim {
                    block: true,
                    uid: "block-uid".into(),
                },
            ),
        ])
    }

    fn render(status: serde_json::Value) -> Result<core::Pod, AttachmentPodError> {
        let v = vmi(status);
        let volumes: Vec<&Volume> = v.spec.volumes.iter().flatten().collect();
        let config = ClusterConfig {
            launcher_image: "registry:5000/kubevirt/virt-launcher:devel".into(),
            ..ClusterConfig::default()
        };
        render_attachment_pod(&v, &launcher(), &volumes, &claims(false), &config)
    }

    fn trigger(block: bool) -> core::Pod {
        let v = vmi(json!({"selinuxContext": "system_u:object_r:container_file_t:s0:c1,c2"}));
        let volume = &v.spec.volumes.as_ref().unwrap()[1];
        let mut owner = launcher();
        owner.metadata.labels = Some(BTreeMap::from([(
            "kubevirt.io/created-by".to_string(),
            "vmi-uid".to_string(),
        )]));
        render_trigger_pod(
            &v,
            &owner,
            volume,
            "block-dv",
            block,
            &ClusterConfig::default(),
        )
        .unwrap()
    }

    #[test]
    fn a_trigger_pod_consumes_the_claim_beside_the_launcher_and_exits() {
        let pod = serde_json::to_value(trigger(false)).unwrap();
        assert_eq!(
            pod["metadata"]["annotations"][EPHEMERAL_PROVISIONING], "true",
            "{pod}"
        );
        assert_eq!(pod["metadata"]["generateName"], ATTACHMENT_POD_PREFIX);
        let c = &pod["spec"]["containers"][0];
        assert_eq!(c["command"], json!(["/bin/bash", "-c", "exit", "0"]));
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "hotplug-disks", "mountPath": "/path", "mountPropagation": "HostToContainer"},
                   {"name": "hp-block", "mountPath": "/pvc"}])
        );
        assert_eq!(
            c["securityContext"]["seLinuxOptions"]["level"], "s0:c1,c2",
            "the VMI's SELinux level"
        );
        let term = &pod["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            [0];
        assert_eq!(
            term["labelSelector"]["matchLabels"],
            json!({"kubevirt.io/created-by": "vmi-uid"})
        );
        assert_eq!(term["topologyKey"], "kubernetes.io/hostname");
        assert!(pod["spec"]["affinity"]["nodeAffinity"].is_null());
        assert_eq!(
            pod["spec"]["tolerations"],
            serde_json::to_value(launcher().spec.unwrap().tolerations).unwrap(),
            "the launcher's tolerations only"
        );
        assert_eq!(
            pod["spec"]["volumes"][0]["persistentVolumeClaim"],
            json!({"claimName": "block-dv", "readOnly": false})
        );
        assert!(pod["spec"]["securityContext"].is_null());
    }

    #[test]
    fn a_block_trigger_pod_has_the_device_and_runs_as_root() {
        let pod = serde_json::to_value(trigger(true)).unwrap();
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            c["volumeDevices"],
            json!([{"name": "hp-block", "devicePath": "/dev/hotplugblockdevice"}])
        );
        assert_eq!(c["volumeMounts"].as_array().unwrap().len(), 1, "{c}");
        assert_eq!(pod["spec"]["securityContext"], json!({"runAsUser": 0}));
    }

    #[test]
    fn attachment_pod_snapshot() {
        let pod =
            render(json!({"selinuxContext": "system_u:system_r:container_t:s0:c1,c2"})).unwrap();
        insta::assert_snapshot!(serde_norway::to_string(&pod).unwrap());
    }

    #[test]
    fn a_filesystem_claim_is_mounted_at_its_volume_name() {
        let pod = render(json!({"selinuxContext": "none"})).unwrap();
        let spec = pod.spec.unwrap();
        let c = &spec.containers[0];
        let mounts: Vec<(&str, &str)> = c
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.as_str(), m.mount_path.as_str()))
            .collect();
        assert_eq!(mounts, [("hotplug-disks", "/path"), ("hp-fs", "/hp-fs")]);
        let claims: Vec<(&str, &str)> = spec
            .volumes
            .iter()
            .flatten()
            .filter_map(|v| {
                Some((
                    v.name.as_str(),
                    v.persistent_volume_claim.as_ref()?.claim_name.as_str(),
                ))
            })
            .collect();
        assert_eq!(claims, [("hp-fs", "fs-claim"), ("hp-block", "block-dv")]);
        // No SELinux on the node: the level stays KubeVirt's default.
        let se = c
            .security_context
            .as_ref()
            .unwrap()
            .se_linux_options
            .as_ref()
            .unwrap();
        assert_eq!(se.level.as_deref(), Some("s0"));
    }

    #[test]
    fn a_block_claim_is_a_device_named_after_the_claims_uid() {
        let pod = render(json!({"selinuxContext": "none"})).unwrap();
        let c = &pod.spec.unwrap().containers[0];
        let devices: Vec<(&str, &str)> = c
            .volume_devices
            .iter()
            .flatten()
            .map(|d| (d.name.as_str(), d.device_path.as_str()))
            .collect();
        assert_eq!(devices, [("hp-block", "/path/hp-block/block-uid")]);
        assert!(
            !c.volume_mounts
                .iter()
                .flatten()
                .any(|m| m.name == "hp-block")
        );
    }

    #[test]
    fn a_volume_virt_handler_mounted_is_not_mounted_again() {
        let pod = render(json!({"selinuxContext": "none", "volumeStatus": [
            {"name": "hp-fs", "target": "sda", "phase": "Ready", "hotplugVolume": {}}]}))
        .unwrap();
        let spec = pod.spec.unwrap();
        let mounts = spec.containers[0].volume_mounts.as_ref().unwrap();
        assert_eq!(mounts.len(), 1, "{mounts:?}");
        // The claim stays attached to the node through the pod.
        assert!(spec.volumes.iter().flatten().any(|v| v.name == "hp-fs"));
    }

    #[test]
    fn tolerations_merge_the_launchers_sorted_without_duplicates() {
        let pod = render(json!({"selinuxContext": "none"})).unwrap();
        let keys: Vec<String> = pod
            .spec
            .unwrap()
            .tolerations
            .unwrap()
            .into_iter()
            .map(|t| t.key.unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "example.com/gpu",
                "node.kubernetes.io/disk-pressure",
                "node.kubernetes.io/memory-pressure",
                "node.kubernetes.io/network-unavailable",
                "node.kubernetes.io/pid-pressure",
                "node.kubernetes.io/unschedulable",
            ]
        );
    }

    #[test]
    fn the_selinux_context_must_be_known() {
        assert_eq!(
            render(json!({})).unwrap_err(),
            AttachmentPodError::MissingSelinuxContext
        );
        assert_eq!(
            render(json!({"selinuxContext": "bogus"})).unwrap_err(),
            AttachmentPodError::InvalidSelinuxContext("bogus".into())
        );
        // A migrated-in VMI takes its source's context.
        let pod = render(json!({"migrationState": {"sourceState": {
            "selinuxContext": "u:r:t:s0:c5,c6"}}}))
        .unwrap();
        let c = &pod.spec.unwrap().containers[0];
        let se = c
            .security_context
            .as_ref()
            .unwrap()
            .se_linux_options
            .as_ref()
            .unwrap();
        assert_eq!(se.level.as_deref(), Some("s0:c5,c6"));
    }

    #[test]
    fn a_launcher_pod_without_uid_cannot_own_it() {
        let v = vmi(json!({"selinuxContext": "none"}));
        let mut l = launcher();
        l.metadata.uid = None;
        let err = render_attachment_pod(&v, &l, &[], &claims(false), &ClusterConfig::default())
            .unwrap_err();
        assert_eq!(
            err,
            AttachmentPodError::LauncherPodIncomplete { field: "uid" }
        );
        assert!(err.to_string().contains("metadata.uid"));
    }
}
