//! The handler's side of volume hotplug: volume status phases, events, retries, what is mounted.

use serde_json::{Value, json};

use super::{MountRequest, volumes_to_mount, wanted_volumes};
use crate::api::{VirtualMachineInstance, VolumeStatus};
use crate::handler::{
    Decision, Domain, HandlerConfig, HandlerPlan, HandlerWorld, NodeFacts, NodeStep, QueueOp,
    decide,
};

/// A running VMI with a root disk and, when `in_spec`, the hotplugged claim `hp`; its status
/// lists `hp` in `phase`.
fn vmi(in_spec: bool, phase: &str) -> VirtualMachineInstance {
    let mut volumes = vec![json!({"name": "root", "containerDisk": {"image": "x"}})];
    let mut disks = vec![json!({"name": "root", "disk": {"bus": "virtio"}})];
    if in_spec {
        volumes.push(json!({"name": "hp", "persistentVolumeClaim": {"claimName": "c1", "hotpluggable": true}}));
        disks.push(json!({"name": "hp", "serial": "hp", "disk": {"bus": "scsi"}}));
    }
    serde_json::from_value(json!({
        "metadata": {"name": "v", "namespace": "ns", "uid": "uid-1", "resourceVersion": "7",
                     "labels": {"kubevirt.io/nodeName": "n1"}},
        "spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes},
        "status": {"phase": "Running", "nodeName": "n1",
                   "activePods": {"pod-1": "n1"},
                   "volumeStatus": [
                       {"name": "root", "target": ""},
                       {"name": "hp", "target": "", "phase": phase,
                        "reason": "SuccessfulMount", "message": "Volume hp has been attached to node",
                        "hotplugVolume": {"attachPodName": "hp-volume-abcde", "attachPodUID": "att-1"},
                        "persistentVolumeClaimInfo": {"claimName": "c1", "volumeMode": "Filesystem"}}
                   ]}
    }))
    .expect("vmi")
}

/// The running domain, with the hotplugged disk attached as `sda` when `with_hp`.
fn domain(with_hp: bool) -> Domain {
    let mut disks = vec![
        json!({"Alias": {"Name": "root"}, "Source": {"File": "/var/run/kubevirt-ephemeral-disks/disk-data/root/disk.qcow2"}, "Target": {"Device": "vda"}}),
    ];
    if with_hp {
        disks.push(json!({"Alias": {"Name": "hp"}, "Source": {"File": "/var/run/kubevirt/hotplug-disks/hp.img"}, "Target": {"Device": "sda"}}));
    }
    serde_json::from_value(json!({
        "ObjectMeta": {"name": "v", "namespace": "ns"},
        "Spec": {"Metadata": {"KubeVirt": {"UID": "uid-1"}}, "Devices": {"Disks": disks}},
        "Status": {"Status": "Running", "Reason": "Unknown"}
    }))
    .expect("domain")
}

fn mounted(names: &[&str]) -> NodeFacts {
    NodeFacts {
        hotplug_mounted: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

fn run(v: &VirtualMachineInstance, d: &Domain, facts: &NodeFacts) -> HandlerPlan {
    let config = HandlerConfig::default();
    decide(&HandlerWorld {
        node: "n1",
        key: "ns/v",
        now: crate::Now::parse("2026-01-01T00:00:00Z").expect("time"),
        vmi: Some(v),
        domain: Some(d),
        facts,
        config: &config,
    })
}

fn hp_status(plan: &HandlerPlan) -> VolumeStatus {
    plan.status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "hp"))
        .cloned()
        .expect("hp volume status written")
}

fn events(plan: &HandlerPlan) -> Vec<(String, String)> {
    plan.plan
        .events
        .iter()
        .map(|e| (e.reason.clone(), e.message.clone()))
        .collect()
}

fn waits_a_second(plan: &HandlerPlan) -> bool {
    plan.plan
        .queue
        .ops()
        .contains(&QueueOp::AddAfter { delay_seconds: 1 })
}

#[test]
fn a_mounted_volume_moves_to_mounted_to_pod_with_kubevirts_event() {
    let plan = run(
        &vmi(true, "AttachedToNode"),
        &domain(false),
        &mounted(&["hp"]),
    );
    assert_eq!(plan.decision, Decision::Update);
    let steps = plan.node_steps();
    assert!(steps.contains(&&NodeStep::MountHotplugVolumes), "{steps:?}");
    assert!(
        steps.contains(&&NodeStep::UnmountHotplugVolumes),
        "{steps:?}"
    );
    let hp = hp_status(&plan);
    assert_eq!(hp.phase.as_deref(), Some("MountedToPod"));
    assert_eq!(hp.reason.as_deref(), Some("VolumeMountedToPod"));
    assert_eq!(
        hp.message.as_deref(),
        Some("Volume hp has been mounted in virt-launcher pod")
    );
    assert_eq!(hp.target, "");
    assert_eq!(
        events(&plan),
        [(
            "VolumeMountedToPod".to_string(),
            "Volume hp has been mounted in virt-launcher pod".to_string()
        )]
    );
    // The domain does not have it yet: look again in a second.
    assert!(waits_a_second(&plan));
}

#[test]
fn a_volume_not_mounted_yet_keeps_its_phase_and_is_looked_at_again() {
    let plan = run(&vmi(true, "AttachedToNode"), &domain(false), &mounted(&[]));
    let unchanged = plan
        .status
        .as_ref()
        .and_then(|s| s.volume_status.as_ref())
        .and_then(|v| v.iter().find(|v| v.name == "hp"))
        .map(|v| v.phase.clone());
    // Either nothing was written or the phase is the controller's.
    assert!(
        unchanged.is_none() || unchanged == Some(Some("AttachedToNode".into())),
        "{unchanged:?}"
    );
    assert!(events(&plan).is_empty(), "{:?}", events(&plan));
    assert!(waits_a_second(&plan));
}

#[test]
fn the_domains_disk_makes_the_volume_ready_with_its_target() {
    let plan = run(&vmi(true, "MountedToPod"), &domain(true), &mounted(&["hp"]));
    let hp = hp_status(&plan);
    assert_eq!(hp.phase.as_deref(), Some("Ready"));
    assert_eq!(hp.target, "sda");
    assert_eq!(hp.reason.as_deref(), Some("VolumeReady"));
    assert_eq!(
        events(&plan),
        [(
            "VolumeReady".to_string(),
            "Successfully attach hotplugged volume hp to VM".to_string()
        )]
    );
    assert!(!waits_a_second(&plan));
    // Ready again: no write, no event.
    let mut v = vmi(true, "MountedToPod");
    v.status.as_mut().expect("status").volume_status =
        plan.status.as_ref().and_then(|s| s.volume_status.clone());
    let again = run(&v, &domain(true), &mounted(&["hp"]));
    assert!(events(&again).is_empty(), "{:?}", events(&again));
}

#[test]
fn a_removed_volume_is_unmounted_from_pod_once_the_node_unmounted_it() {
    // Still mounted (the launcher has not detached it yet): the phase stays.
    let plan = run(&vmi(false, "Ready"), &domain(false), &mounted(&["hp"]));
    assert!(
        plan.status
            .as_ref()
            .and_then(|s| s.volume_status.as_ref())
            .and_then(|v| v.iter().find(|v| v.name == "hp"))
            .is_none_or(|v| v.phase.as_deref() == Some("Ready"))
    );
    assert!(events(&plan).is_empty());

    let plan = run(&vmi(false, "Ready"), &domain(false), &mounted(&[]));
    let hp = hp_status(&plan);
    assert_eq!(hp.phase.as_deref(), Some("UnMountedFromPod"));
    assert_eq!(hp.reason.as_deref(), Some("VolumeUnMountedFromPod"));
    assert_eq!(
        events(&plan),
        [(
            "VolumeUnMountedFromPod".to_string(),
            "Volume hp has been unmounted from virt-launcher pod".to_string()
        )]
    );
}

#[test]
fn mount_errors_wait_for_the_attachment_pod_or_fail_the_sync() {
    let v = vmi(true, "AttachedToNode");
    let waiting = NodeFacts {
        hotplug_mount_error: Some(
            "failed to mount filesystem hotplug volume hp: failed to get source path for volume hp from the attachment pod (pid 9): the attachment pod mounts no volume hp (at /hp): waiting for hotplug mount".into(),
        ),
        ..Default::default()
    };
    let plan = run(&v, &domain(false), &waiting);
    assert!(
        plan.plan.error_message().is_none(),
        "{:?}",
        plan.plan.error_message()
    );
    assert!(waits_a_second(&plan));

    let broken = NodeFacts {
        hotplug_mount_error: Some(
            "failed to mount filesystem hotplug volume hp: hp.img in the launcher pod is a symlink (refused)".into(),
        ),
        ..Default::default()
    };
    let plan = run(&v, &domain(false), &broken);
    let err = plan.plan.error_message().expect("sync error");
    assert!(err.contains("hotplug volume hp"), "{err}");
    // Nothing is sent to the launcher after a failed mount.
    assert!(
        plan.launcher_calls().is_empty(),
        "{:?}",
        plan.launcher_calls()
    );
}

#[test]
fn what_the_node_mounts_follows_the_phase_and_the_claim() {
    let mut v = vmi(true, "Bound");
    assert!(
        volumes_to_mount(&v).is_empty(),
        "no attachment pod running yet"
    );
    let set = |v: &mut VirtualMachineInstance, entry: Value| {
        v.status.as_mut().expect("status").volume_status =
            Some(vec![serde_json::from_value(entry).expect("status")]);
    };
    set(
        &mut v,
        json!({"name": "hp", "target": "", "phase": "AttachedToNode",
               "hotplugVolume": {"attachPodUID": "att-1"},
               "persistentVolumeClaimInfo": {"volumeMode": "Filesystem",
                   "requests": {"storage": "1536Mi"}, "capacity": {"storage": "2Gi"}}}),
    );
    assert_eq!(
        volumes_to_mount(&v),
        [MountRequest {
            volume: "hp".into(),
            attach_pod_uid: "att-1".into(),
            block: false,
            disk_size: 1536 << 20,
        }]
    );
    set(
        &mut v,
        json!({"name": "hp", "target": "sda", "phase": "Ready",
               "hotplugVolume": {"attachPodUID": "att-2"},
               "persistentVolumeClaimInfo": {"volumeMode": "Block",
                   "capacity": {"storage": "1000000000"}}}),
    );
    let r = volumes_to_mount(&v);
    assert!(r[0].block);
    // 1e9 bytes, aligned down to whole MiB.
    assert_eq!(r[0].disk_size, 953 << 20);
    // A memory dump is mounted as a directory, not as a disk: not for this mounter.
    let mut dump = v.clone();
    dump.spec.volumes = Some(vec![
        serde_json::from_value(
            json!({"name": "hp", "memoryDump": {"claimName": "c1", "hotpluggable": true}}),
        )
        .expect("volume"),
    ]);
    assert!(volumes_to_mount(&dump).is_empty());
    assert_eq!(
        wanted_volumes(&vmi(true, "Ready")),
        ["hp".to_string()].into()
    );
    assert!(wanted_volumes(&vmi(false, "Ready")).is_empty());
}
