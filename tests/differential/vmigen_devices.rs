//! The devices half of the VMI generator: features, clock, storage, networks and the other
//! devices, each weighted toward the combinations KubeVirt's converter and pod renderer treat
//! specially.

use serde_json::{Map, Value, json};

use super::{Gates, Rng, obj};

pub(super) fn features(rng: &mut Rng, domain: &mut Map<String, Value>, secure_boot: bool) {
    let mut f = Map::new();
    if rng.chance(30) {
        f.insert(
            "acpi".into(),
            if rng.chance(70) {
                json!({})
            } else {
                json!({"enabled": rng.chance(80)})
            },
        );
    }
    if rng.chance(25) {
        let mut apic = Map::new();
        if rng.chance(40) {
            apic.insert("enabled".into(), json!(rng.chance(80)));
        }
        if rng.chance(40) {
            apic.insert("endOfInterrupt".into(), json!(rng.chance(50)));
        }
        f.insert("apic".into(), Value::Object(apic));
    }
    // Secure boot needs SMM; now and then the generator forgets it.
    if (secure_boot && rng.chance(90)) || rng.chance(15) {
        f.insert(
            "smm".into(),
            json!({"enabled": secure_boot || rng.chance(60)}),
        );
    }
    if rng.chance(15) {
        f.insert("kvm".into(), json!({"hidden": rng.chance(50)}));
    }
    if rng.chance(10) {
        f.insert("pvspinlock".into(), json!({"enabled": rng.chance(50)}));
    }
    if rng.chance(20) {
        let mut h = Map::new();
        let all = [
            "relaxed",
            "vapic",
            "vpindex",
            "runtime",
            "synic",
            "reset",
            "frequencies",
            "reenlightenment",
            "tlbflush",
            "ipi",
        ];
        for name in all {
            if rng.chance(50) {
                h.insert(
                    name.into(),
                    if rng.chance(85) {
                        json!({})
                    } else {
                        json!({"enabled": rng.chance(50)})
                    },
                );
            }
        }
        if rng.chance(30) {
            h.insert("spinlocks".into(), json!({"spinlocks": 8191}));
        }
        if rng.chance(20) {
            h.insert("synictimer".into(), json!({"direct": {}}));
        }
        if rng.chance(15) {
            h.insert("vendorid".into(), json!({"vendorid": "KubeVirt"}));
        }
        f.insert("hyperv".into(), Value::Object(h));
    } else if rng.chance(3) {
        f.insert("hypervPassthrough".into(), json!({"enabled": true}));
    }
    if !f.is_empty() {
        domain.insert("features".into(), Value::Object(f));
    }
}

pub(super) fn clock(rng: &mut Rng, domain: &mut Map<String, Value>) {
    if !rng.chance(20) {
        return;
    }
    let mut c = if rng.chance(70) {
        if rng.chance(50) {
            obj(json!({"utc": {"offsetSeconds": rng.pick(&[0, 3600, -7200])}}))
        } else {
            obj(json!({"utc": {}}))
        }
    } else {
        obj(json!({"timezone": rng.pick(&["Europe/Berlin", "America/New_York"])}))
    };
    let mut t = Map::new();
    if rng.chance(50) {
        t.insert("hpet".into(), json!({"present": rng.chance(30)}));
    }
    if rng.chance(40) {
        t.insert(
            "pit".into(),
            json!({"tickPolicy": rng.pick(&["delay", "catchup", "discard"])}),
        );
    }
    if rng.chance(40) {
        t.insert(
            "rtc".into(),
            json!({"tickPolicy": rng.pick(&["delay", "catchup"]), "track": rng.pick(&["guest", "wall"])}),
        );
    }
    if rng.chance(30) {
        t.insert("hyperv".into(), json!({}));
    }
    if rng.chance(30) {
        t.insert("kvm".into(), json!({"present": rng.chance(70)}));
    }
    if !t.is_empty() {
        c.insert("timer".into(), Value::Object(t));
    }
    domain.insert("clock".into(), Value::Object(c));
}

/// Volumes and the disks that use them; every volume gets a disk (or, for a PVC now and then, a
/// virtiofs filesystem).
pub(super) fn storage(
    rng: &mut Rng,
    devices: &mut Map<String, Value>,
    spec: &mut Map<String, Value>,
    gates: &mut Gates,
    io_threads: bool,
) {
    let mut volumes = Vec::new();
    let mut disks = Vec::new();
    let mut filesystems = Vec::new();
    let mut boot_orders = 1;
    // The root disk.
    volumes.push(
        json!({"name": "rootdisk", "containerDisk": {"image": rng.pick(&[
        "quay.io/containerdisks/fedora:41", "quay.io/kubevirt/cirros-container-disk-demo",
        "registry.example.com/os/alpine:3.20"])}}),
    );
    let mut root = obj(json!({"name": "rootdisk", "disk": {"bus": "virtio"}}));
    if rng.chance(20) {
        root.insert("bootOrder".into(), json!(boot_orders));
        boot_orders += 1;
    }
    disks.push(Value::Object(root));
    let mut cloud_init = false;
    let mut service_account = false;
    for i in 0..rng.below(5) {
        let name = format!("vol{i}");
        let kind = rng.below(14);
        let source = match kind {
            0 => {
                let mut c = obj(
                    json!({"image": "quay.io/containerdisks/centos:9", "path": "/disk/disk.img"}),
                );
                if rng.chance(30) {
                    c.insert(
                        "imagePullPolicy".into(),
                        json!(rng.pick(&["Always", "IfNotPresent", "Never"])),
                    );
                }
                if rng.chance(20) {
                    c.insert("imagePullSecret".into(), json!("registry-creds"));
                }
                json!({"containerDisk": c})
            }
            1 | 2 => {
                json!({"persistentVolumeClaim": {"claimName": format!("pvc-{i}"), "readOnly": rng.chance(20)}})
            }
            3 => json!({"dataVolume": {"name": format!("dv-{i}")}}),
            4 => json!({"emptyDisk": {"capacity": rng.pick(&["1Gi", "512Mi"])}}),
            5 => {
                json!({"ephemeral": {"persistentVolumeClaim": {"claimName": format!("golden-{i}")}}})
            }
            6 => {
                gates.need(rng, "HostDisk");
                if rng.chance(50) {
                    json!({"hostDisk": {"path": format!("/data/disk-{i}.img"), "type": "DiskOrCreate", "capacity": "1Gi"}})
                } else {
                    json!({"hostDisk": {"path": format!("/data/disk-{i}.img"), "type": "Disk"}})
                }
            }
            7 if !cloud_init => {
                cloud_init = true;
                match rng.below(5) {
                    0 => {
                        json!({"cloudInitNoCloud": {"userData": "#cloud-config\npassword: fedora\n"}})
                    }
                    1 => json!({"cloudInitNoCloud": {"userDataBase64": "I2Nsb3VkLWNvbmZpZwo=",
                        "networkData": "version: 2\nethernets:\n  eth0:\n    dhcp4: true\n"}}),
                    2 => json!({"cloudInitNoCloud": {"secretRef": {"name": "my-userdata"},
                        "networkDataSecretRef": {"name": "my-netdata"}}}),
                    3 => json!({"cloudInitConfigDrive": {"userData": "#cloud-config\n"}}),
                    _ => json!({"cloudInitConfigDrive": {"secretRef": {"name": "my-userdata"}}}),
                }
            }
            8 => json!({"configMap": {"name": format!("cm-{i}")}}),
            9 => json!({"secret": {"secretName": format!("secret-{i}")}}),
            10 if !service_account => {
                service_account = true;
                json!({"serviceAccount": {"serviceAccountName": "default"}})
            }
            11 => {
                json!({"downwardAPI": {"fields": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}})
            }
            12 if rng.chance(85) => {
                json!({"sysprep": {"configMap": {"name": format!("sysprep-{i}")}}})
            }
            12 => {
                gates.need(rng, "DownwardMetrics");
                json!({"downwardMetrics": {}})
            }
            _ => {
                json!({"persistentVolumeClaim": {"claimName": format!("pvc-{i}")}})
            }
        };
        let mut volume = obj(json!({"name": name}));
        volume.extend(obj(source.clone()));
        volumes.push(Value::Object(volume));
        let is_pvc =
            source.get("persistentVolumeClaim").is_some() || source.get("dataVolume").is_some();
        let config = ["configMap", "secret", "serviceAccount", "downwardAPI"]
            .iter()
            .any(|k| source.get(*k).is_some());
        if (is_pvc && rng.chance(8)) || (config && rng.chance(15)) {
            if is_pvc {
                gates.need(rng, "EnableVirtioFsStorageVolumes");
            }
            filesystems.push(json!({"name": name, "virtiofs": {}}));
            continue;
        }
        let mut disk = obj(json!({"name": name}));
        let sysprep = source.get("sysprep").is_some();
        let target = match rng.below(10) {
            _ if sysprep && rng.chance(90) => {
                json!({"cdrom": {"bus": rng.pick(&["sata", "scsi"])}})
            }
            0..=5 => {
                json!({"disk": {"bus": rng.pick(&["virtio", "virtio", "sata", "scsi", "usb"])}})
            }
            6 => json!({"disk": {}}),
            7 | 8 => {
                let mut c = obj(json!({"bus": rng.pick(&["sata", "scsi"])}));
                if rng.chance(30) {
                    c.insert("readonly".into(), json!(true));
                }
                if rng.chance(20) {
                    c.insert("tray".into(), json!("closed"));
                }
                json!({"cdrom": c})
            }
            _ if rng.chance(20) => {
                gates.need(rng, "PersistentReservation");
                json!({"lun": {"bus": "scsi", "reservation": true}})
            }
            _ => json!({"lun": {"bus": "scsi"}}),
        };
        let is_disk = target.get("disk").is_some();
        disk.extend(obj(target));
        if rng.chance(15) {
            disk.insert("bootOrder".into(), json!(boot_orders));
            boot_orders += 1;
        }
        if rng.chance(10) {
            disk.insert("serial".into(), json!(format!("SN{i}{}", rng.below(1000))));
        }
        if rng.chance(3) {
            disk.insert("tag".into(), json!("data"));
        }
        if rng.chance(10) {
            disk.insert(
                "cache".into(),
                json!(rng.pick(&["none", "writethrough", "writeback"])),
            );
        }
        if rng.chance(8) {
            disk.insert("io".into(), json!(rng.pick(&["native", "threads"])));
        }
        let virtio = disk
            .get("disk")
            .is_some_and(|d| d.get("bus").is_none_or(|b| b == "virtio"));
        if io_threads && is_disk && (virtio || rng.chance(5)) && rng.chance(30) {
            disk.insert("dedicatedIOThread".into(), json!(true));
        }
        if rng.chance(6) {
            disk.insert(
                "blockSize".into(),
                json!({"custom": {"logical": 4096, "physical": 4096}}),
            );
        }
        if rng.chance(6) {
            disk.insert(
                "errorPolicy".into(),
                json!(rng.pick(&["stop", "report", "ignore", "enospace"])),
            );
        }
        if rng.chance(4) && is_disk {
            disk.insert("shareable".into(), json!(true));
        }
        if rng.chance(5)
            && is_disk
            && let Some(Value::Object(d)) = disk.get_mut("disk")
        {
            d.insert("readonly".into(), json!(true));
        }
        if rng.chance(4)
            && is_disk
            && let Some(Value::Object(d)) = disk.get_mut("disk")
        {
            d.insert(
                "pciAddress".into(),
                json!(format!("0000:0{}:01.0", rng.range(2, 9))),
            );
        }
        disks.push(Value::Object(disk));
    }
    devices.insert("disks".into(), Value::Array(disks));
    if !filesystems.is_empty() {
        devices.insert("filesystems".into(), Value::Array(filesystems));
    }
    spec.insert("volumes".into(), Value::Array(volumes));
}

pub(super) fn network(
    rng: &mut Rng,
    devices: &mut Map<String, Value>,
    spec: &mut Map<String, Value>,
) {
    // No interface: defaulting adds the pod network (or none when autoattach is off).
    if rng.below(10) <= 3 {
        if rng.chance(15) {
            devices.insert("autoattachPodInterface".into(), json!(false));
        }
        return;
    }
    let mut interfaces = Vec::new();
    let mut networks = Vec::new();
    let multus_default = rng.chance(10);
    let pod_binding = rng.pick(&["masquerade", "masquerade", "bridge"]);
    if multus_default {
        networks.push(
            json!({"name": "default", "multus": {"networkName": "default-net", "default": true}}),
        );
        interfaces.push(json!({"name": "default", "bridge": {}}));
    } else {
        if rng.chance(10) && pod_binding == "masquerade" {
            networks.push(json!({"name": "default", "pod": {"vmNetworkCIDR": "10.11.12.0/24"}}));
        } else {
            networks.push(json!({"name": "default", "pod": {}}));
        }
        let mut iface = obj(json!({"name": "default"}));
        iface.insert(pod_binding.into(), json!({}));
        if pod_binding == "masquerade" && rng.chance(20) {
            iface.insert(
                "ports".into(),
                json!([{"port": 80}, {"name": "https", "port": 443, "protocol": "TCP"}]),
            );
        }
        interfaces.push(Value::Object(iface));
    }
    for i in 0..rng.below(4) {
        let name = format!("net{i}");
        let net_name = rng.pick(&[
            format!("nad-{i}"),
            format!("other-ns/nad-{i}"),
            "shared-net".to_string(),
        ]);
        // The same attachment definition twice is rejected; use distinct ones.
        let net_name = if net_name == "shared-net" && i > 0 {
            format!("nad-{i}")
        } else {
            net_name
        };
        networks.push(json!({"name": name, "multus": {"networkName": net_name}}));
        let mut iface = obj(json!({"name": name}));
        match rng.below(40) {
            // Bindings KubeVirt v1.9.0 refuses on a secondary network, or without a registered
            // binding plugin: both must say no.
            0 => {
                iface.insert("masquerade".into(), json!({}));
            }
            1 => {
                iface.insert("binding".into(), json!({"name": "passt"}));
            }
            2 => {
                iface.insert("macvtap".into(), json!({}));
            }
            3..=10 => {
                iface.insert("sriov".into(), json!({}));
            }
            _ => {
                iface.insert("bridge".into(), json!({}));
                if rng.chance(3) {
                    iface.insert("ports".into(), json!([{"port": 80}]));
                }
            }
        }
        interfaces.push(Value::Object(iface));
    }
    for iface in interfaces.iter_mut() {
        let Value::Object(m) = iface else { continue };
        let sriov = m.contains_key("sriov");
        if rng.chance(20) && !sriov {
            m.insert(
                "model".into(),
                json!(rng.pick(&["virtio", "e1000", "e1000e", "rtl8139"])),
            );
        }
        if rng.chance(20) {
            m.insert(
                "macAddress".into(),
                json!(format!(
                    "02:00:00:00:{:02x}:{:02x}",
                    rng.below(256),
                    rng.below(256)
                )),
            );
        }
        if rng.chance(5) && !sriov {
            m.insert("state".into(), json!("down"));
        }
        if rng.chance(5) {
            m.insert("bootOrder".into(), json!(rng.range(10, 20)));
        }
        if rng.chance(4) && !sriov {
            m.insert(
                "dhcpOptions".into(),
                json!({"bootFileName": "pxelinux.0", "tftpServerName": "tftp.example.com", "ntpServers": ["10.0.0.1"]}),
            );
        }
        if rng.chance(4) {
            m.insert(
                "pciAddress".into(),
                json!(format!("0000:0{}:00.0", rng.range(2, 9))),
            );
        }
        if rng.chance(4) {
            m.insert("acpiIndex".into(), json!(rng.range(1, 8)));
        }
        if rng.chance(3) {
            m.insert("tag".into(), json!("data-nic"));
        }
    }
    // KubeVirt orders some outputs by interface, some by network: list them differently now
    // and then.
    if rng.chance(30) {
        interfaces.reverse();
    }
    devices.insert("interfaces".into(), Value::Array(interfaces));
    spec.insert("networks".into(), Value::Array(networks));
    if rng.chance(10) {
        devices.insert("networkInterfaceMultiqueue".into(), json!(true));
    }
}

pub(super) fn other_devices(rng: &mut Rng, devices: &mut Map<String, Value>, gates: &mut Gates) {
    if rng.chance(20) {
        devices.insert("rng".into(), json!({}));
    }
    if rng.chance(10) {
        devices.insert(
            "watchdog".into(),
            json!({"name": "wd0", "i6300esb": {"action": rng.pick(&["poweroff", "reset", "shutdown"])}}),
        );
    } else if rng.chance(2) {
        // s390x's watchdog: refused on amd64.
        devices.insert(
            "watchdog".into(),
            json!({"name": "wd0", "diag288": {"action": "reset"}}),
        );
    }
    if rng.chance(12) {
        devices.insert(
            "tpm".into(),
            if rng.chance(30) {
                json!({"persistent": true})
            } else {
                json!({})
            },
        );
    }
    if rng.chance(8) {
        devices.insert(
            "sound".into(),
            json!({"name": "audio", "model": rng.pick(&["ich9", "ac97"])}),
        );
    }
    if rng.chance(10) {
        devices.insert(
            "inputs".into(),
            json!([{"name": "tablet0", "type": "tablet", "bus": rng.pick(&["usb", "virtio"])}]),
        );
    }
    if rng.chance(8) {
        devices.insert(
            "panicDevices".into(),
            json!([{"model": rng.pick(&["isa", "hyperv", "pvpanic"])}]),
        );
    }
    for flag in [
        "autoattachGraphicsDevice",
        "autoattachSerialConsole",
        "autoattachMemBalloon",
        "autoattachInputDevice",
    ] {
        if rng.chance(8) {
            devices.insert(flag.into(), json!(rng.chance(40)));
        }
    }
    if rng.chance(6) {
        gates.need(rng, "VSOCK");
        devices.insert("autoattachVSOCK".into(), json!(true));
    }
    if rng.chance(8) {
        devices.insert("blockMultiQueue".into(), json!(true));
    }
    if rng.chance(5) {
        devices.insert("useVirtioTransitional".into(), json!(true));
    }
    if rng.chance(6) {
        devices.insert("logSerialConsole".into(), json!(rng.chance(30)));
    }
    if rng.chance(5) {
        devices.insert("clientPassthrough".into(), json!({}));
    }
    if rng.chance(4) {
        gates.need(rng, "DownwardMetrics");
        devices.insert("downwardMetrics".into(), json!({}));
    }
    if rng.chance(4) {
        devices.insert(
            "video".into(),
            json!({"type": rng.pick(&["virtio", "vga", "bochs"])}),
        );
    }
    if rng.chance(4) {
        devices.insert("disableHotplug".into(), json!(true));
    }
}
