//! Random VirtualMachineInstances for the differential test, seeded and deterministic.
//!
//! The generator covers the API surface kvrs's admission, converter and pod renderer read, and
//! is weighted toward combinations (dedicated CPUs with NUMA, hugepages and IO threads; disks of
//! every bus and source; several interfaces on Multus networks; EFI with secure boot and SMM...)
//! because single features are already in the oracle corpus. Most inputs are meant to pass
//! KubeVirt's validation; a few constraints are broken on purpose now and then (a feature gate
//! left out, a bus that does not fit), so both sides must also agree on what they refuse.
//!
//! Its own small RNG (SplitMix64) keeps a seed's inputs the same across dependency upgrades:
//! a divergence found by seed N today is reproduced by seed N tomorrow.

use serde_json::{Map, Value, json};

/// SplitMix64: tiny, fast, and good enough to pick test inputs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize].clone()
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            b >> 52,
            b & 0xffff_ffff_ffff
        )
    }
}

/// One generated input: the VMI as a user would submit it, and the cluster's extra feature gates.
pub struct Generated {
    pub vmi: Value,
    pub feature_gates: Vec<String>,
}

/// Feature gates the generator may need; each is enabled when a feature uses it, except now and
/// then (then both sides must refuse the VMI).
struct Gates(Vec<String>);

impl Gates {
    fn need(&mut self, rng: &mut Rng, gate: &str) {
        if !rng.chance(4) && !self.0.iter().any(|g| g == gate) {
            self.0.push(gate.to_string());
        }
    }
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// Input number `index` of the run with seed `seed`.
pub fn generate(seed: u64, index: u64) -> Generated {
    let mut rng = Rng::new(seed.wrapping_mul(0x1000_0000_01B3) ^ index);
    let mut gates = Gates(Vec::new());
    let name = format!("gen-{index}");
    let mut metadata = obj(json!({"name": name, "uid": rng.uuid()}));
    if rng.chance(80) {
        metadata.insert(
            "namespace".into(),
            json!(rng.pick(&["default", "kv-diff", "team-a"])),
        );
    }
    if rng.chance(50) {
        metadata.insert(
            "labels".into(),
            json!({"app": name, "tier": rng.pick(&["web", "db"])}),
        );
    }
    let mut annotations = Map::new();
    if rng.chance(5) {
        annotations.insert(
            "kubevirt.io/free-page-reporting-disabled".into(),
            json!("true"),
        );
    }
    if rng.chance(4) {
        gates.need(&mut rng, "Sidecar");
        annotations.insert(
            "hooks.kubevirt.io/hookSidecars".into(),
            json!(r#"[{"args": ["--version", "v1alpha2"], "image": "registry.example.com/hook-sidecar:1.0"}]"#),
        );
    }
    if rng.chance(4) {
        annotations.insert(
            "smbios.vm.kubevirt.io/baseBoardManufacturer".into(),
            json!("Radical Edward"),
        );
    }
    if rng.chance(3) {
        annotations.insert("kubevirt.io/keep-launcher-alive-after-failure".into(), json!("true"));
    }
    if rng.chance(3) {
        annotations.insert("custom.example.com/owner".into(), json!("team-a"));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }

    let mut domain = Map::new();
    let mut spec = Map::new();
    let mut devices = Map::new();

    // Firmware: always a UUID (defaulting would pick a random one).
    let mut firmware = obj(json!({"uuid": rng.uuid()}));
    if rng.chance(10) {
        firmware.insert("serial".into(), json!(format!("SER{}", rng.below(10000))));
    }
    let mut secure_boot = false;
    match rng.below(10) {
        0..=5 => {}
        6 => {
            firmware.insert("bootloader".into(), json!({"bios": {"useSerial": rng.chance(50)}}));
        }
        _ => {
            let mut efi = Map::new();
            match rng.below(3) {
                0 => secure_boot = true,
                1 => {
                    efi.insert("secureBoot".into(), json!(true));
                    secure_boot = true;
                }
                _ => {
                    efi.insert("secureBoot".into(), json!(false));
                }
            }
            if rng.chance(15) {
                efi.insert("persistent".into(), json!(true));
            }
            firmware.insert("bootloader".into(), json!({"efi": efi}));
        }
    }
    if rng.chance(5) {
        let mut container = obj(json!({"image": "quay.io/example/kernel-boot:1.0", "kernelPath": "/boot/vmlinuz"}));
        if rng.chance(60) {
            container.insert("initrdPath".into(), json!("/boot/initramfs.img"));
        }
        firmware.insert(
            "kernelBoot".into(),
            json!({"kernelArgs": "console=ttyS0 root=/dev/vda", "container": container}),
        );
    }
    domain.insert("firmware".into(), Value::Object(firmware));
    if rng.chance(5) {
        domain.insert(
            "chassis".into(),
            json!({"manufacturer": "ACME", "version": "1", "serial": "CH-1", "asset": "A-1", "sku": "SKU-1"}),
        );
    }

    if rng.chance(20) {
        // pc-i440fx is outside amd64's allowed list: both must refuse it.
        let machine = rng.pick(&["q35", "pc-q35-rhel9.4.0", "pc-q35-rhel8.6.0", "q35", "q35", "pc-i440fx-rhel7.6.0"]);
        domain.insert("machine".into(), json!({"type": machine}));
    }

    // CPU and memory, with the combinations that interact.
    let dedicated = rng.chance(25);
    let (sockets, cores, threads) = (rng.range(1, 2), rng.range(1, 4), rng.pick(&[1, 1, 2]));
    let mut cpu = Map::new();
    if rng.chance(70) || dedicated {
        if rng.chance(80) {
            cpu.insert("cores".into(), json!(cores));
        }
        if rng.chance(40) {
            cpu.insert("sockets".into(), json!(sockets));
        }
        if rng.chance(30) {
            cpu.insert("threads".into(), json!(threads));
        }
    }
    let vcpus = cpu.get("cores").and_then(Value::as_u64).unwrap_or(1)
        * cpu.get("sockets").and_then(Value::as_u64).unwrap_or(1)
        * cpu.get("threads").and_then(Value::as_u64).unwrap_or(1);
    if rng.chance(20) {
        cpu.insert(
            "model".into(),
            json!(rng.pick(&["host-passthrough", "host-model", "Skylake-Client-IBRS"])),
        );
    }
    if rng.chance(10) {
        cpu.insert(
            "features".into(),
            json!([{"name": "pcid", "policy": rng.pick(&["require", "disable", "optional"])}]),
        );
    }
    if rng.chance(8) {
        cpu.insert("maxSockets".into(), json!(rng.range(2, 8)));
    }
    let mut hugepages = false;
    if dedicated {
        cpu.insert("dedicatedCpuPlacement".into(), json!(true));
        if rng.chance(40) {
            cpu.insert("isolateEmulatorThread".into(), json!(true));
        }
        if rng.chance(30) {
            hugepages = true;
            if rng.chance(70) {
                cpu.insert("numa".into(), json!({"guestMappingPassthrough": {}}));
            }
        }
        if rng.chance(10) {
            cpu.insert("realtime".into(), json!({}));
        }
    }
    if !cpu.is_empty() {
        domain.insert("cpu".into(), Value::Object(cpu));
    }

    let mem_mi = rng.pick(&[512u64, 1024, 1024, 2048, 1536, 4096, 1000]);
    let mut memory = Map::new();
    let mut resources = Map::new();
    let mut requests = Map::new();
    let mut limits = Map::new();
    let mem = format!("{mem_mi}Mi");
    match rng.below(4) {
        0 => {
            memory.insert("guest".into(), json!(mem));
        }
        1 if !dedicated => {
            memory.insert("guest".into(), json!(mem));
            requests.insert("memory".into(), json!(format!("{}Mi", mem_mi / 2)));
            resources.insert("overcommitGuestOverhead".into(), json!(rng.chance(50)));
        }
        2 if !dedicated && rng.chance(30) => {
            limits.insert("memory".into(), json!(mem));
        }
        _ => {
            requests.insert("memory".into(), json!(mem));
        }
    }
    if hugepages || rng.chance(5) {
        memory.insert(
            "hugepages".into(),
            json!({"pageSize": rng.pick(&["2Mi", "2Mi", "1Gi"])}),
        );
    }
    if rng.chance(8) {
        memory.insert("maxGuest".into(), json!(format!("{}Mi", mem_mi * 2)));
    }
    if !memory.is_empty() {
        domain.insert("memory".into(), Value::Object(memory));
    }
    if dedicated {
        if rng.chance(60) {
            let n = if rng.chance(90) {
                json!(vcpus.to_string())
            } else {
                json!("1500m")
            };
            requests.insert("cpu".into(), n.clone());
            limits.insert("cpu".into(), n);
        }
        if rng.chance(50) {
            if let Some(m) = requests.get("memory").cloned() {
                limits.insert("memory".into(), m);
            }
        }
    } else {
        if rng.chance(25) {
            requests.insert("cpu".into(), json!(rng.pick(&["100m", "500m", "1", "2"])));
        }
        if rng.chance(15) {
            limits.insert("cpu".into(), json!(rng.pick(&["1", "2", "4"])));
        }
        if rng.chance(10) {
            if let Some(Value::String(m)) = requests.get("memory") {
                limits.insert("memory".into(), json!(m.clone()));
            }
        }
    }
    if !requests.is_empty() {
        resources.insert("requests".into(), Value::Object(requests));
    }
    if !limits.is_empty() {
        resources.insert("limits".into(), Value::Object(limits));
    }
    if !resources.is_empty() {
        domain.insert("resources".into(), Value::Object(resources));
    }

    // IO threads.
    let io_policy = match rng.below(10) {
        0..=5 => None,
        6 | 7 => Some("shared"),
        8 => Some("auto"),
        _ => Some("supplementalPool"),
    };
    if let Some(p) = io_policy {
        domain.insert("ioThreadsPolicy".into(), json!(p));
        if p == "supplementalPool" && rng.chance(95) {
            domain.insert(
                "ioThreads".into(),
                json!({"supplementalPoolThreadCount": rng.range(1, 4)}),
            );
        }
    }

    features(&mut rng, &mut domain, secure_boot);
    clock(&mut rng, &mut domain);
    storage(&mut rng, &mut devices, &mut spec, &mut gates, io_policy.is_some());
    network(&mut rng, &mut devices, &mut spec);
    other_devices(&mut rng, &mut devices, &mut gates);

    domain.insert("devices".into(), Value::Object(devices));
    spec.insert("domain".into(), Value::Object(domain));
    scheduling(&mut rng, &mut spec);

    Generated {
        vmi: json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": metadata,
            "spec": spec,
        }),
        feature_gates: gates.0,
    }
}

fn features(rng: &mut Rng, domain: &mut Map<String, Value>, secure_boot: bool) {
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
        f.insert("smm".into(), json!({"enabled": secure_boot || rng.chance(60)}));
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

fn clock(rng: &mut Rng, domain: &mut Map<String, Value>) {
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
fn storage(
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
    volumes.push(json!({"name": "rootdisk", "containerDisk": {"image": rng.pick(&[
        "quay.io/containerdisks/fedora:41", "quay.io/kubevirt/cirros-container-disk-demo",
        "registry.example.com/os/alpine:3.20"])}}));
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
                let mut c = obj(json!({"image": "quay.io/containerdisks/centos:9", "path": "/disk/disk.img"}));
                if rng.chance(30) {
                    c.insert("imagePullPolicy".into(), json!(rng.pick(&["Always", "IfNotPresent", "Never"])));
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
            5 => json!({"ephemeral": {"persistentVolumeClaim": {"claimName": format!("golden-{i}")}}}),
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
                    0 => json!({"cloudInitNoCloud": {"userData": "#cloud-config\npassword: fedora\n"}}),
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
            12 if rng.chance(85) => json!({"sysprep": {"configMap": {"name": format!("sysprep-{i}")}}}),
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
        let is_pvc = source.get("persistentVolumeClaim").is_some() || source.get("dataVolume").is_some();
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
            _ if sysprep && rng.chance(90) => json!({"cdrom": {"bus": rng.pick(&["sata", "scsi"])}}),
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
        if rng.chance(10) {
            disk.insert(
                "cache".into(),
                json!(rng.pick(&["none", "writethrough", "writeback"])),
            );
        }
        if rng.chance(8) {
            disk.insert("io".into(), json!(rng.pick(&["native", "threads"])));
        }
        let virtio = disk.get("disk").is_some_and(|d| d.get("bus").is_none_or(|b| b == "virtio"));
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
        if rng.chance(5) && is_disk {
            if let Some(Value::Object(d)) = disk.get_mut("disk") {
                d.insert("readonly".into(), json!(true));
            }
        }
        if rng.chance(4) && is_disk {
            if let Some(Value::Object(d)) = disk.get_mut("disk") {
                d.insert("pciAddress".into(), json!(format!("0000:0{}:01.0", rng.range(2, 9))));
            }
        }
        disks.push(Value::Object(disk));
    }
    devices.insert("disks".into(), Value::Array(disks));
    if !filesystems.is_empty() {
        devices.insert("filesystems".into(), Value::Array(filesystems));
    }
    spec.insert("volumes".into(), Value::Array(volumes));
}

fn network(rng: &mut Rng, devices: &mut Map<String, Value>, spec: &mut Map<String, Value>) {
    match rng.below(10) {
        // No interface: defaulting adds the pod network (or none when autoattach is off).
        0..=3 => {
            if rng.chance(15) {
                devices.insert("autoattachPodInterface".into(), json!(false));
            }
            return;
        }
        _ => {}
    }
    let mut interfaces = Vec::new();
    let mut networks = Vec::new();
    let multus_default = rng.chance(10);
    let pod_binding = rng.pick(&["masquerade", "masquerade", "bridge"]);
    if multus_default {
        networks.push(json!({"name": "default", "multus": {"networkName": "default-net", "default": true}}));
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
        let binding = if rng.chance(20) { "sriov" } else { "bridge" };
        let mut iface = obj(json!({"name": name}));
        iface.insert(binding.into(), json!({}));
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
                json!(format!("02:00:00:00:{:02x}:{:02x}", rng.below(256), rng.below(256))),
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
            m.insert("pciAddress".into(), json!(format!("0000:0{}:00.0", rng.range(2, 9))));
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

fn other_devices(rng: &mut Rng, devices: &mut Map<String, Value>, gates: &mut Gates) {
    if rng.chance(20) {
        devices.insert("rng".into(), json!({}));
    }
    if rng.chance(10) {
        devices.insert(
            "watchdog".into(),
            json!({"name": "wd0", "i6300esb": {"action": rng.pick(&["poweroff", "reset", "shutdown"])}}),
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
        devices.insert("video".into(), json!({"type": rng.pick(&["virtio", "vga", "bochs"])}));
    }
    if rng.chance(4) {
        devices.insert("disableHotplug".into(), json!(true));
    }
}

fn scheduling(rng: &mut Rng, spec: &mut Map<String, Value>) {
    if rng.chance(25) {
        spec.insert(
            "evictionStrategy".into(),
            json!(rng.pick(&["None", "LiveMigrate", "LiveMigrateIfPossible", "External"])),
        );
    }
    if rng.chance(15) {
        spec.insert(
            "terminationGracePeriodSeconds".into(),
            json!(rng.pick(&[0, 30, 180])),
        );
    }
    if rng.chance(10) {
        spec.insert("hostname".into(), json!("guest"));
        if rng.chance(50) {
            spec.insert("subdomain".into(), json!("sub"));
        }
    }
    if rng.chance(10) {
        spec.insert("nodeSelector".into(), json!({"kubernetes.io/hostname": "node01"}));
    }
    if rng.chance(8) {
        spec.insert(
            "tolerations".into(),
            json!([{"key": "dedicated", "operator": "Equal", "value": "vm", "effect": "NoSchedule"}]),
        );
    }
    if rng.chance(5) {
        spec.insert("priorityClassName".into(), json!("high"));
    }
    if rng.chance(5) {
        spec.insert("startStrategy".into(), json!("Paused"));
    }
    if rng.chance(6) {
        spec.insert(
            "readinessProbe".into(),
            json!({"guestAgentPing": {}, "initialDelaySeconds": 30, "periodSeconds": 10}),
        );
    }
    if rng.chance(5) {
        spec.insert(
            "livenessProbe".into(),
            if rng.chance(50) {
                json!({"tcpSocket": {"port": 22}, "initialDelaySeconds": 60})
            } else {
                json!({"httpGet": {"port": 8080, "path": "/healthz"}, "timeoutSeconds": 5, "failureThreshold": 3})
            },
        );
    }
    if rng.chance(5) {
        spec.insert("architecture".into(), json!("amd64"));
    }
    if rng.chance(5) {
        spec.insert(
            "affinity".into(),
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}}),
        );
    }
    if rng.chance(4) {
        spec.insert(
            "topologySpreadConstraints".into(),
            json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "x"}}}]),
        );
    }
    if rng.chance(4) {
        spec.insert("schedulerName".into(), json!("custom-scheduler"));
    }
    if rng.chance(4) {
        spec.insert(
            "accessCredentials".into(),
            json!([{"sshPublicKey": {"source": {"secret": {"secretName": "my-keys"}},
                    "propagationMethod": {"qemuGuestAgent": {"users": ["fedora"]}}}}]),
        );
    }
    if rng.chance(5) {
        spec.insert(
            "dnsConfig".into(),
            json!({"nameservers": ["10.0.0.10"], "searches": ["example.com"]}),
        );
        spec.insert("dnsPolicy".into(), json!("None"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_always_gives_the_same_inputs() {
        for i in 0..20 {
            assert_eq!(generate(7, i).vmi, generate(7, i).vmi);
        }
        assert_ne!(generate(7, 1).vmi, generate(8, 1).vmi);
    }
}
