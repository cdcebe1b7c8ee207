//! Live differential test of instancetypes and preferences: every VM of `fixtures/instancetype`
//! and a seeded set of random VM / instancetype / preference combinations go through kvrs
//! (`kvrs-instancetype`) and through KubeVirt v1.9.0's own code (`tests/instancetype`, built by
//! `scripts/instancetype-harness.sh`), and every result is compared:
//!
//! - `spread`: the spread-topology check of the VM webhook (field and message);
//! - `apply`: the application at `spec.template.spec` (the applied spec and annotations, or the
//!   conflicting paths and KubeVirt's message);
//! - `requirements`: the preference requirement check on the applied spec;
//! - `controller`: the VM controller's steps on the VMI (auto-attach preferences, annotations
//!   naming the instancetype and preference, the application at `spec`);
//! - `expand`: virt-api's `expand-spec` (kvrs-virt-api's `subresources::expand::expand`, given
//!   the referenced objects as the cluster holds them, against KubeVirt's
//!   `pkg/instancetype/expand`): the whole expanded VM, or the error.
//!
//! Specs are compared as KubeVirt's Go types see them: kvrs's spec goes through the harness's
//! Go decoding and encoding (omitempty, canonical quantities), as KubeVirt's own does.
//!
//! A case where KubeVirt's code panics (a preference with CPU features on a VM that has neither
//! an instancetype nor `domain.cpu`: KubeVirt dereferences the missing CPU) has no KubeVirt
//! result to compare; such cases are counted and printed, never passed off as agreement.
//!
//! `KVRS_INSTANCETYPE_SEED` and `KVRS_INSTANCETYPE_CASES` (default 2000 random cases) make a
//! longer run one command: `KVRS_INSTANCETYPE_CASES=100000 cargo test -p kvrs-tests --test
//! instancetype_differential -- --nocapture`.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kvrs_core::VirtualMachine;
use kvrs_instancetype::vm::controller_apply;
use kvrs_instancetype::{
    Catalog, InstancetypeSpec, PreferenceSpec, apply, apply_autoattach_preferences,
    check_requirements, check_spread,
};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The Go harness; panics with the script's output when it cannot be built: never skipped.
fn harness() -> PathBuf {
    kvrs_tests::go_harness(
        "scripts/instancetype-harness.sh",
        "Go >= 1.26 and the Go module proxy",
    )
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_norway::Value = serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            serde_json::to_value(v).expect("YAML as JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// One input: a VM and the specs its references resolve to.
struct Case {
    name: String,
    vm: Value,
    instancetype: Option<Value>,
    preference: Option<Value>,
}

fn fixture_cases() -> Vec<Case> {
    let root = repo_root().join("fixtures/instancetype");
    let mut catalog = Catalog::default();
    for dir in ["instancetypes", "preferences"] {
        for file in yaml_files(&root.join(dir)) {
            for doc in yaml_docs(&file) {
                catalog
                    .add(doc)
                    .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            }
        }
    }
    let files = yaml_files(&root.join("vms"));
    assert!(
        files.len() >= 10,
        "fixtures/instancetype/vms holds the fixture VMs"
    );
    files
        .iter()
        .map(|file| {
            let doc = yaml_docs(file).remove(0);
            let vm: VirtualMachine = serde_json::from_value(doc.clone()).expect("a VM");
            let it = catalog
                .find_instancetype(&vm)
                .expect("fixture references resolve");
            let pref = catalog
                .find_preference(&vm)
                .expect("fixture references resolve");
            Case {
                name: format!("fixture/{}", file.file_stem().unwrap().to_string_lossy()),
                vm: doc,
                instancetype: it.map(|s| json!({"spec": s})),
                preference: pref.map(|s| json!({"spec": s})),
            }
        })
        .collect()
}

/// SplitMix64: a seeded generator with no dependency, the same sequence on every platform.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        let n = u64::try_from(items.len()).expect("small list");
        items[usize::try_from(self.next() % n).expect("index")].clone()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Sets `key` in `obj` with probability `percent`.
fn maybe(
    rng: &mut Rng,
    obj: &mut serde_json::Map<String, Value>,
    percent: u64,
    key: &str,
    value: impl FnOnce(&mut Rng) -> Value,
) {
    if rng.chance(percent) {
        let v = value(rng);
        obj.insert(key.to_string(), v);
    }
}

const ANNOTATION_KEYS: &[&str] = &["a.example.com/x", "b.example.com/y", "kubevirt.io/os"];

fn annotations(rng: &mut Rng) -> Value {
    let mut m = serde_json::Map::new();
    for k in ANNOTATION_KEYS {
        if rng.chance(50) {
            m.insert((*k).to_string(), json!(rng.pick(&["1", "2"])));
        }
    }
    Value::Object(m)
}

fn random_template(rng: &mut Rng) -> Value {
    let mut domain = serde_json::Map::new();
    maybe(rng, &mut domain, 50, "cpu", |r| {
        let mut cpu = serde_json::Map::new();
        for f in ["sockets", "cores", "threads"] {
            maybe(r, &mut cpu, 25, f, |r| json!(r.below(4)));
        }
        maybe(r, &mut cpu, 20, "model", |r| {
            json!(r.pick(&["host-model", ""]))
        });
        maybe(r, &mut cpu, 15, "dedicatedCpuPlacement", |r| {
            json!(r.chance(50))
        });
        maybe(r, &mut cpu, 10, "isolateEmulatorThread", |r| {
            json!(r.chance(50))
        });
        maybe(
            r,
            &mut cpu,
            10,
            "numa",
            |_| json!({"guestMappingPassthrough": {}}),
        );
        maybe(r, &mut cpu, 5, "realtime", |_| json!({}));
        maybe(r, &mut cpu, 10, "maxSockets", |r| json!(r.pick(&[0, 4, 8])));
        maybe(r, &mut cpu, 20, "features", |r| {
            r.pick(&[
                json!([{"name": "vmx"}]),
                json!([{"name": "svm", "policy": "require"}, {"name": "pdpe1gb"}]),
            ])
        });
        Value::Object(cpu)
    });
    maybe(rng, &mut domain, 40, "memory", |r| {
        let mut m = serde_json::Map::new();
        maybe(r, &mut m, 60, "guest", |r| {
            json!(r.pick(&["1Gi", "2048Mi", "1.5Gi", "3G"]))
        });
        maybe(r, &mut m, 15, "hugepages", |_| json!({"pageSize": "2Mi"}));
        maybe(r, &mut m, 10, "maxGuest", |_| json!("8Gi"));
        Value::Object(m)
    });
    maybe(rng, &mut domain, 25, "resources", |r| {
        let mut res = serde_json::Map::new();
        for side in ["requests", "limits"] {
            maybe(r, &mut res, 60, side, |r| {
                let mut m = serde_json::Map::new();
                maybe(r, &mut m, 40, "cpu", |_| json!("500m"));
                maybe(r, &mut m, 40, "memory", |_| json!("1Gi"));
                Value::Object(m)
            });
        }
        Value::Object(res)
    });
    maybe(rng, &mut domain, 10, "ioThreads", |r| {
        r.pick(&[json!({}), json!({"supplementalPoolThreadCount": 3})])
    });
    maybe(rng, &mut domain, 10, "ioThreadsPolicy", |r| {
        json!(r.pick(&["auto", "shared"]))
    });
    maybe(
        rng,
        &mut domain,
        5,
        "launchSecurity",
        |_| json!({"sev": {}}),
    );
    maybe(rng, &mut domain, 30, "features", |r| {
        let mut f = serde_json::Map::new();
        maybe(r, &mut f, 30, "acpi", |r| {
            r.pick(&[json!({}), json!({"enabled": false})])
        });
        maybe(r, &mut f, 30, "apic", |_| json!({}));
        maybe(r, &mut f, 30, "hyperv", |r| {
            r.pick(&[
                json!({}),
                json!({"relaxed": {}, "vapic": {"enabled": false}}),
            ])
        });
        maybe(r, &mut f, 20, "kvm", |_| json!({"hidden": true}));
        maybe(r, &mut f, 20, "smm", |_| json!({"enabled": false}));
        maybe(r, &mut f, 10, "pvspinlock", |_| json!({}));
        Value::Object(f)
    });
    maybe(rng, &mut domain, 30, "firmware", |r| {
        r.pick(&[
            json!({}),
            json!({"bootloader": {}}),
            json!({"bootloader": {"bios": {}}}),
            json!({"bootloader": {"bios": {"useSerial": false}}}),
            json!({"bootloader": {"efi": {}}}),
            json!({"bootloader": {"efi": {"secureBoot": false}}}),
            json!({"serial": "abc"}),
        ])
    });
    maybe(rng, &mut domain, 20, "machine", |r| {
        r.pick(&[json!({"type": "q35"}), json!({"type": ""})])
    });
    maybe(rng, &mut domain, 20, "clock", |r| {
        r.pick(&[
            json!({}),
            json!({"utc": {}}),
            json!({"timezone": "Europe/Paris"}),
            json!({"timer": {"hpet": {"present": false}}}),
        ])
    });
    domain.insert("devices".to_string(), random_devices(rng));
    let mut spec = serde_json::Map::new();
    spec.insert("domain".to_string(), Value::Object(domain));
    let iface_count = random_networks(rng, &mut spec);
    let _ = iface_count;
    maybe(rng, &mut spec, 10, "nodeSelector", |r| {
        r.pick(&[json!({}), json!({"disk": "ssd"})])
    });
    maybe(rng, &mut spec, 10, "schedulerName", |r| {
        json!(r.pick(&["", "custom"]))
    });
    maybe(rng, &mut spec, 10, "subdomain", |r| {
        json!(r.pick(&["", "mine"]))
    });
    maybe(rng, &mut spec, 10, "terminationGracePeriodSeconds", |_| {
        json!(30)
    });
    maybe(rng, &mut spec, 15, "architecture", |r| {
        json!(r.pick(&["", "amd64", "arm64"]))
    });
    let mut template = serde_json::Map::new();
    if rng.chance(20) {
        template.insert(
            "metadata".to_string(),
            json!({"annotations": annotations(rng)}),
        );
    }
    template.insert("spec".to_string(), Value::Object(spec));
    Value::Object(template)
}

fn random_devices(rng: &mut Rng) -> Value {
    let mut d = serde_json::Map::new();
    let disks: Vec<Value> = (0..rng.below(4))
        .map(|i| {
            let mut disk = serde_json::Map::new();
            disk.insert("name".to_string(), json!(format!("d{i}")));
            let bus = |r: &mut Rng| {
                if r.chance(40) {
                    json!({"bus": r.pick(&["virtio", "sata", "scsi", ""])})
                } else {
                    json!({})
                }
            };
            match rng.below(4) {
                0 => {}
                1 => {
                    let b = bus(rng);
                    disk.insert("disk".to_string(), b);
                }
                2 => {
                    let b = bus(rng);
                    disk.insert("cdrom".to_string(), b);
                }
                _ => {
                    let b = bus(rng);
                    disk.insert("lun".to_string(), b);
                }
            }
            maybe(rng, &mut disk, 20, "cache", |r| {
                json!(r.pick(&["none", ""]))
            });
            maybe(rng, &mut disk, 15, "io", |_| json!("native"));
            maybe(
                rng,
                &mut disk,
                10,
                "blockSize",
                |_| json!({"custom": {"logical": 512, "physical": 512}}),
            );
            maybe(rng, &mut disk, 10, "dedicatedIOThread", |r| {
                json!(r.chance(50))
            });
            Value::Object(disk)
        })
        .collect();
    if !disks.is_empty() || rng.chance(20) {
        d.insert("disks".to_string(), Value::Array(disks));
    }
    maybe(rng, &mut d, 10, "gpus", |r| {
        r.pick(&[
            json!([]),
            json!([{"name": "g", "deviceName": "vendor.com/gpu"}]),
        ])
    });
    maybe(rng, &mut d, 10, "hostDevices", |r| {
        r.pick(&[
            json!([]),
            json!([{"name": "h", "deviceName": "vendor.com/nic"}]),
        ])
    });
    maybe(rng, &mut d, 30, "inputs", |r| {
        let mut input = serde_json::Map::new();
        input.insert("name".to_string(), json!("in0"));
        input.insert("type".to_string(), json!(r.pick(&["tablet", ""])));
        maybe(r, &mut input, 30, "bus", |r| {
            json!(r.pick(&["usb", "virtio", ""]))
        });
        json!([input])
    });
    maybe(rng, &mut d, 15, "panicDevices", |r| {
        r.pick(&[json!([{}]), json!([{"model": "isa"}, {}])])
    });
    maybe(rng, &mut d, 15, "sound", |r| {
        r.pick(&[json!({"name": "s"}), json!({"name": "s", "model": "ac97"})])
    });
    maybe(rng, &mut d, 10, "video", |r| {
        r.pick(&[json!({}), json!({"type": "vga"})])
    });
    maybe(rng, &mut d, 10, "rng", |_| json!({}));
    maybe(rng, &mut d, 10, "tpm", |_| json!({}));
    for flag in [
        "autoattachGraphicsDevice",
        "autoattachMemBalloon",
        "autoattachPodInterface",
        "autoattachSerialConsole",
        "autoattachInputDevice",
        "useVirtioTransitional",
        "blockMultiQueue",
        "networkInterfaceMultiqueue",
        "disableHotplug",
    ] {
        maybe(rng, &mut d, 8, flag, |r| json!(r.chance(50)));
    }
    Value::Object(d)
}

/// Interfaces (with and without a binding) and their networks (pod, Multus, or missing).
fn random_networks(rng: &mut Rng, spec: &mut serde_json::Map<String, Value>) -> u64 {
    let n = rng.below(3);
    let mut ifaces = Vec::new();
    let mut nets = Vec::new();
    for i in 0..n {
        let mut iface = serde_json::Map::new();
        iface.insert("name".to_string(), json!(format!("n{i}")));
        match rng.below(5) {
            0 | 1 => {}
            2 => {
                iface.insert("masquerade".to_string(), json!({}));
            }
            3 => {
                iface.insert("bridge".to_string(), json!({}));
            }
            _ => {
                iface.insert("binding".to_string(), json!({"name": "plugin"}));
            }
        }
        maybe(rng, &mut iface, 30, "model", |r| {
            json!(r.pick(&["virtio", "e1000", ""]))
        });
        ifaces.push(Value::Object(iface));
        match rng.below(4) {
            0 => {}
            1 => nets.push(json!({"name": format!("n{i}"), "multus": {"networkName": "net"}})),
            _ => nets.push(json!({"name": format!("n{i}"), "pod": {}})),
        }
    }
    if n > 0 {
        spec.get_mut("domain")
            .and_then(|d| d.get_mut("devices"))
            .and_then(Value::as_object_mut)
            .expect("devices")
            .insert("interfaces".to_string(), Value::Array(ifaces));
        spec.insert("networks".to_string(), Value::Array(nets));
    }
    n
}

fn random_instancetype(rng: &mut Rng) -> Value {
    let mut cpu = serde_json::Map::new();
    cpu.insert("guest".to_string(), json!(rng.pick(&[1, 2, 3, 4, 6, 8])));
    maybe(rng, &mut cpu, 20, "model", |r| {
        json!(r.pick(&["", "host-passthrough"]))
    });
    maybe(rng, &mut cpu, 20, "dedicatedCPUPlacement", |r| {
        json!(r.chance(60))
    });
    maybe(rng, &mut cpu, 15, "isolateEmulatorThread", |r| {
        json!(r.chance(60))
    });
    maybe(
        rng,
        &mut cpu,
        10,
        "numa",
        |_| json!({"guestMappingPassthrough": {}}),
    );
    maybe(rng, &mut cpu, 10, "realtime", |_| json!({"mask": "0"}));
    maybe(rng, &mut cpu, 10, "maxSockets", |r| json!(r.pick(&[0, 4])));
    let mut memory = serde_json::Map::new();
    memory.insert(
        "guest".to_string(),
        json!(rng.pick(&["1Gi", "2Gi", "4Gi", "1536Mi", "3G", "1.5Gi", "1000M"])),
    );
    maybe(rng, &mut memory, 20, "overcommitPercent", |r| {
        json!(r.pick(&[10, 25, 33, 50, 99]))
    });
    maybe(
        rng,
        &mut memory,
        15,
        "hugepages",
        |_| json!({"pageSize": "1Gi"}),
    );
    maybe(rng, &mut memory, 10, "maxGuest", |_| json!("16Gi"));
    let mut spec = serde_json::Map::new();
    spec.insert("cpu".to_string(), Value::Object(cpu));
    spec.insert("memory".to_string(), Value::Object(memory));
    maybe(rng, &mut spec, 10, "nodeSelector", |r| {
        r.pick(&[json!({}), json!({"zone": "a"})])
    });
    maybe(rng, &mut spec, 10, "schedulerName", |r| {
        json!(r.pick(&["", "it-scheduler"]))
    });
    maybe(rng, &mut spec, 10, "gpus", |r| {
        r.pick(&[
            json!([]),
            json!([{"name": "ig", "deviceName": "vendor.com/gpu2"}]),
        ])
    });
    maybe(
        rng,
        &mut spec,
        10,
        "hostDevices",
        |_| json!([{"name": "ih", "deviceName": "vendor.com/dev"}]),
    );
    maybe(rng, &mut spec, 10, "ioThreads", |r| {
        r.pick(&[json!({}), json!({"supplementalPoolThreadCount": 2})])
    });
    maybe(rng, &mut spec, 10, "ioThreadsPolicy", |r| {
        json!(r.pick(&["supplementalPool", "auto"]))
    });
    maybe(rng, &mut spec, 5, "launchSecurity", |_| json!({"sev": {}}));
    maybe(rng, &mut spec, 15, "annotations", annotations);
    json!({"spec": spec})
}

fn random_preference(rng: &mut Rng) -> Value {
    let mut spec = serde_json::Map::new();
    maybe(rng, &mut spec, 40, "cpu", |r| {
        let mut cpu = serde_json::Map::new();
        maybe(r, &mut cpu, 70, "preferredCPUTopology", |r| {
            json!(r.pick(&[
                "sockets",
                "cores",
                "threads",
                "spread",
                "any",
                "preferSockets",
                "preferCores",
                "preferThreads",
                "preferSpread",
                "preferAny",
                "bogus",
            ]))
        });
        maybe(r, &mut cpu, 30, "spreadOptions", |r| {
            let mut o = serde_json::Map::new();
            maybe(r, &mut o, 60, "across", |r| {
                json!(r.pick(&[
                    "SocketsCores",
                    "CoresThreads",
                    "SocketsCoresThreads",
                    "Bogus"
                ]))
            });
            maybe(r, &mut o, 60, "ratio", |r| json!(r.pick(&[1, 2, 3, 4])));
            Value::Object(o)
        });
        maybe(
            r,
            &mut cpu,
            20,
            "preferredCPUFeatures",
            |_| json!([{"name": "vmx"}, {"name": "x2apic", "policy": "require"}]),
        );
        Value::Object(cpu)
    });
    maybe(rng, &mut spec, 10, "preferSpreadSocketToCoreRatio", |r| {
        json!(r.pick(&[1, 2, 3]))
    });
    maybe(rng, &mut spec, 50, "devices", |r| {
        let mut d = serde_json::Map::new();
        let strings: &[(&str, &[&str])] = &[
            ("preferredDiskBus", &["virtio", "sata", "scsi"]),
            ("preferredCdromBus", &["sata", "scsi"]),
            ("preferredLunBus", &["scsi"]),
            ("preferredDiskCache", &["writethrough", "none"]),
            ("preferredDiskIO", &["threads", "native"]),
            ("preferredInterfaceModel", &["virtio", "e1000e"]),
            ("preferredInputBus", &["usb", "virtio"]),
            ("preferredInputType", &["tablet"]),
            ("preferredSoundModel", &["ich9", "ac97"]),
            ("preferredPanicDeviceModel", &["hyperv", "isa"]),
            ("preferredVideoType", &["virtio", "bochs", ""]),
        ];
        for (key, values) in strings {
            maybe(r, &mut d, 20, key, |r| json!(r.pick(values)));
        }
        for key in [
            "preferredAutoattachGraphicsDevice",
            "preferredAutoattachMemBalloon",
            "preferredAutoattachPodInterface",
            "preferredAutoattachSerialConsole",
            "preferredAutoattachInputDevice",
            "preferredDisableHotplug",
            "preferredUseVirtioTransitional",
            "preferredBlockMultiQueue",
            "preferredNetworkInterfaceMultiQueue",
            "preferredDiskDedicatedIoThread",
        ] {
            maybe(r, &mut d, 15, key, |r| json!(r.chance(50)));
        }
        maybe(
            r,
            &mut d,
            15,
            "preferredDiskBlockSize",
            |_| json!({"matchVolume": {"enabled": true}}),
        );
        maybe(r, &mut d, 15, "preferredRng", |_| json!({}));
        maybe(
            r,
            &mut d,
            15,
            "preferredTPM",
            |_| json!({"persistent": true}),
        );
        maybe(r, &mut d, 20, "preferredInterfaceMasquerade", |_| json!({}));
        Value::Object(d)
    });
    maybe(rng, &mut spec, 25, "features", |r| {
        let mut f = serde_json::Map::new();
        maybe(r, &mut f, 30, "preferredAcpi", |r| {
            r.pick(&[json!({}), json!({"enabled": true})])
        });
        maybe(
            r,
            &mut f,
            30,
            "preferredApic",
            |_| json!({"endOfInterrupt": true}),
        );
        maybe(
            r,
            &mut f,
            30,
            "preferredHyperv",
            |_| json!({"relaxed": {}, "vapic": {}, "spinlocks": {"spinlocks": 8191}, "synictimer": {"direct": {}}, "vendorid": {"vendorid": "kvrs"}}),
        );
        maybe(r, &mut f, 30, "preferredKvm", |_| json!({"hidden": false}));
        maybe(r, &mut f, 30, "preferredPvspinlock", |_| json!({}));
        maybe(r, &mut f, 30, "preferredSmm", |_| json!({}));
        Value::Object(f)
    });
    maybe(rng, &mut spec, 25, "firmware", |r| {
        let mut f = serde_json::Map::new();
        maybe(r, &mut f, 30, "preferredUseBios", |r| json!(r.chance(70)));
        maybe(r, &mut f, 30, "preferredUseBiosSerial", |r| {
            json!(r.chance(50))
        });
        maybe(r, &mut f, 30, "preferredUseEfi", |r| json!(r.chance(70)));
        maybe(r, &mut f, 30, "preferredUseSecureBoot", |r| {
            json!(r.chance(50))
        });
        maybe(r, &mut f, 30, "preferredEfi", |r| {
            r.pick(&[json!({}), json!({"secureBoot": true, "persistent": true})])
        });
        Value::Object(f)
    });
    maybe(
        rng,
        &mut spec,
        15,
        "machine",
        |r| json!({"preferredMachineType": r.pick(&["q35", "pc-q35-rhel9.4.0", ""])}),
    );
    maybe(rng, &mut spec, 15, "clock", |r| {
        let mut c = serde_json::Map::new();
        maybe(r, &mut c, 60, "preferredClockOffset", |r| {
            r.pick(&[json!({"utc": {}}), json!({"timezone": "UTC"})])
        });
        maybe(
            r,
            &mut c,
            60,
            "preferredTimer",
            |_| json!({"rtc": {"tickPolicy": "catchup"}}),
        );
        Value::Object(c)
    });
    maybe(rng, &mut spec, 10, "preferredSubdomain", |r| {
        json!(r.pick(&["sub", ""]))
    });
    maybe(
        rng,
        &mut spec,
        10,
        "preferredTerminationGracePeriodSeconds",
        |_| json!(180),
    );
    maybe(rng, &mut spec, 10, "preferredArchitecture", |r| {
        json!(r.pick(&["amd64", "arm64", ""]))
    });
    maybe(rng, &mut spec, 15, "annotations", annotations);
    maybe(
        rng,
        &mut spec,
        5,
        "preferredLaunchSecurity",
        |_| json!({"sev": {"policy": {"secureBoot": true}}}),
    );
    maybe(rng, &mut spec, 25, "requirements", |r| {
        let mut q = serde_json::Map::new();
        maybe(
            r,
            &mut q,
            50,
            "cpu",
            |r| json!({"guest": r.pick(&[1, 2, 4])}),
        );
        maybe(
            r,
            &mut q,
            50,
            "memory",
            |r| json!({"guest": r.pick(&["1Gi", "4Gi", "1536Mi"])}),
        );
        maybe(r, &mut q, 30, "architecture", |r| {
            json!(r.pick(&["amd64", "arm64"]))
        });
        Value::Object(q)
    });
    json!({"spec": spec})
}

fn random_cases(seed: u64, count: usize) -> Vec<Case> {
    let mut rng = Rng(seed);
    (0..count)
        .map(|i| {
            let instancetype = rng.chance(70).then(|| random_instancetype(&mut rng));
            let preference = rng.chance(70).then(|| random_preference(&mut rng));
            let mut spec = serde_json::Map::new();
            spec.insert("runStrategy".to_string(), json!("Always"));
            if instancetype.is_some() {
                let kind = rng.pick(&[
                    "",
                    "VirtualMachineInstancetype",
                    "virtualmachineclusterinstancetypes",
                ]);
                spec.insert(
                    "instancetype".to_string(),
                    json!({"name": "it", "kind": kind}),
                );
            }
            if preference.is_some() {
                let kind = rng.pick(&[
                    "",
                    "VirtualMachinePreference",
                    "VirtualMachineClusterPreference",
                ]);
                spec.insert(
                    "preference".to_string(),
                    json!({"name": "pref", "kind": kind}),
                );
            }
            spec.insert("template".to_string(), random_template(&mut rng));
            Case {
                name: format!("random/{seed}/{i}"),
                vm: json!({
                    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "metadata": {"name": format!("vm{i}"), "namespace": "default"},
                    "spec": spec,
                }),
                instancetype,
                preference,
            }
        })
        .collect()
}

/// The objects a case's references name, as the cluster holds them: kvrs's expansion reads
/// objects (kind, name, namespace), KubeVirt's finders are answered with the specs.
fn referenced_objects(case: &Case) -> Vec<Value> {
    let namespace = case.vm["metadata"]["namespace"].clone();
    let object = |field: &str, spec: &Value, kinds: (&str, &str), namespaced: Option<bool>| {
        let matcher = &case.vm["spec"][field];
        let (kind, metadata) = if namespaced == Some(true) {
            (
                kinds.0,
                json!({"name": matcher["name"], "namespace": namespace}),
            )
        } else {
            (kinds.1, json!({"name": matcher["name"]}))
        };
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": kind,
            "metadata": metadata, "spec": spec["spec"]})
    };
    let mut out = Vec::new();
    if let Some(it) = &case.instancetype {
        let kind = case.vm["spec"]["instancetype"]["kind"].as_str();
        out.push(object(
            "instancetype",
            it,
            (
                "VirtualMachineInstancetype",
                "VirtualMachineClusterInstancetype",
            ),
            kvrs_instancetype::instancetype_is_namespaced(kind),
        ));
    }
    if let Some(p) = &case.preference {
        let kind = case.vm["spec"]["preference"]["kind"].as_str();
        out.push(object(
            "preference",
            p,
            (
                "VirtualMachinePreference",
                "VirtualMachineClusterPreference",
            ),
            kvrs_instancetype::preference_is_namespaced(kind),
        ));
    }
    out
}

/// kvrs's `expand-spec` of the case: the expanded VM or the error.
fn run_kvrs_expand(case: &Case) -> Result<Value, String> {
    kvrs_virt_api::subresources::expand::expand(
        case.vm.clone(),
        referenced_objects(case),
        &kvrs_admission::ClusterConfig::default(),
    )
}

/// kvrs's results for one case, in the harness's output shape (specs before Go's encoding).
struct Kvrs {
    spread: Value,
    apply: Value,
    apply_spec: Value,
    requirements: Value,
    controller: Value,
    controller_spec: Value,
}

fn annotations_value(a: &Option<BTreeMap<String, String>>) -> Value {
    match a {
        Some(m) if !m.is_empty() => json!(m),
        _ => Value::Null,
    }
}

fn run_kvrs(case: &Case) -> Kvrs {
    let vm: VirtualMachine = serde_json::from_value(case.vm.clone()).expect("kvrs reads the VM");
    let it: Option<InstancetypeSpec> = case
        .instancetype
        .as_ref()
        .map(|o| serde_json::from_value(o["spec"].clone()).expect("kvrs reads the instancetype"));
    let pref: Option<PreferenceSpec> = case
        .preference
        .as_ref()
        .map(|o| serde_json::from_value(o["spec"].clone()).expect("kvrs reads the preference"));
    let spread = match check_spread(it.as_ref(), pref.as_ref()) {
        Some(c) => json!({"field": c.path, "message": c.to_string()}),
        None => Value::Null,
    };
    let template = vm.spec.template.spec.clone().unwrap_or_default();
    let meta = vm.spec.template.metadata.clone();
    let (apply_out, apply_spec, requirements) = match apply(
        "spec.template.spec",
        &template,
        &meta,
        it.as_ref(),
        pref.as_ref(),
    ) {
        Err(conflicts) => {
            let paths: Vec<String> = conflicts.0.iter().map(|c| c.path.clone()).collect();
            (
                json!({"conflicts": paths, "message": conflicts.to_string()}),
                Value::Null,
                Value::Null,
            )
        }
        Ok(applied) => {
            let req = match check_requirements(it.as_ref(), pref.as_ref(), &applied.spec) {
                Err(e) => json!({"fields": e.fields.paths(), "error": e.message}),
                Ok(()) => Value::Null,
            };
            (
                json!({"annotations": annotations_value(&applied.metadata.annotations)}),
                serde_json::to_value(&applied.spec).expect("spec as JSON"),
                req,
            )
        }
    };
    let mut spec = template.clone();
    let mut meta = meta.clone();
    if vm.spec.preference.is_some() {
        apply_autoattach_preferences(pref.as_ref(), &mut spec);
    }
    let (controller, controller_spec) =
        match controller_apply(&vm, it.as_ref(), pref.as_ref(), &mut spec, &mut meta) {
            Err(e) => (json!({"error": e.to_string()}), Value::Null),
            Ok(()) => (
                json!({"annotations": annotations_value(&meta.annotations)}),
                serde_json::to_value(&spec).expect("spec as JSON"),
            ),
        };
    Kvrs {
        spread,
        apply: apply_out,
        apply_spec,
        requirements,
        controller,
        controller_spec,
    }
}

/// Agreement counts per area, and the first disagreements in full.
#[derive(Default)]
struct Tally {
    areas: BTreeMap<&'static str, (usize, usize)>,
    failures: Vec<String>,
}

impl Tally {
    fn record(&mut self, area: &'static str, case: &str, kubevirt: &Value, kvrs: &Value) {
        let entry = self.areas.entry(area).or_default();
        entry.1 += 1;
        if kubevirt == kvrs {
            entry.0 += 1;
        } else if self.failures.len() < 10 {
            self.failures.push(format!(
                "{case} [{area}]\n  kubevirt: {kubevirt}\n  kvrs:     {kvrs}"
            ));
        }
    }
}

/// Conflicts as a comparable value: KubeVirt walks the instancetype's annotations as a Go map
/// (random order), so with several annotation conflicts only the set of paths is comparable.
fn conflicts_key(v: &Value) -> Value {
    let Some(paths) = v.get("conflicts").and_then(Value::as_array) else {
        return v.clone();
    };
    let annotation_conflicts = paths
        .iter()
        .filter(|p| p.as_str().is_some_and(|p| p.starts_with("annotations.")))
        .count();
    if annotation_conflicts < 2 {
        return v.clone();
    }
    let mut sorted: Vec<String> = paths
        .iter()
        .filter_map(|p| p.as_str().map(str::to_string))
        .collect();
    sorted.sort();
    json!({"conflicts (as a set)": sorted})
}

/// The controller's error, with its field list as a set when several annotation conflicts make
/// KubeVirt's order random (see [`conflicts_key`]).
fn controller_key(v: &Value) -> Value {
    let Some(error) = v.get("error").and_then(Value::as_str) else {
        return v.clone();
    };
    let Some(list) = error
        .strip_prefix("VMI conflicts with instancetype spec in fields: [")
        .and_then(|rest| rest.strip_suffix(']'))
    else {
        return v.clone();
    };
    let mut fields: Vec<&str> = list.split(", ").collect();
    if fields
        .iter()
        .filter(|f| f.starts_with("annotations."))
        .count()
        < 2
    {
        return v.clone();
    }
    fields.sort_unstable();
    json!({"error fields (as a set)": fields})
}

/// An expansion as a comparable value: a conflict error naming several annotations lists its
/// paths in Go's random map order (see [`conflicts_key`]), so then only the set is compared.
fn expand_key(v: &Value) -> Value {
    let Some(paths) = v["error"]
        .as_str()
        .and_then(|e| e.strip_prefix("VM field(s) "))
        .and_then(|e| e.strip_suffix(" conflicts with selected instance type"))
    else {
        return v.clone();
    };
    let mut paths: Vec<&str> = paths.split(", ").collect();
    if paths
        .iter()
        .filter(|p| p.starts_with("annotations."))
        .count()
        < 2
    {
        return v.clone();
    }
    paths.sort_unstable();
    json!({"conflicting fields (as a set)": paths})
}

fn without_spec(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("spec");
        if o.get("annotations").is_some_and(Value::is_null) {
            o.remove("annotations");
        }
    }
    v
}

#[test]
fn kvrs_applies_instancetypes_and_preferences_as_kubevirt_does() {
    let seed: u64 = std::env::var("KVRS_INSTANCETYPE_SEED")
        .ok()
        .map(|s| s.parse().expect("KVRS_INSTANCETYPE_SEED is a number"))
        .unwrap_or(20260418);
    let count: usize = std::env::var("KVRS_INSTANCETYPE_CASES")
        .ok()
        .map(|s| s.parse().expect("KVRS_INSTANCETYPE_CASES is a number"))
        .unwrap_or(2000);
    let mut cases = fixture_cases();
    let fixtures = cases.len();
    cases.extend(random_cases(seed, count));

    let kvrs: Vec<Kvrs> = cases.iter().map(run_kvrs).collect();
    let expanded: Vec<Result<Value, String>> = cases.iter().map(run_kvrs_expand).collect();
    let input: Vec<Value> = cases
        .iter()
        .zip(&kvrs)
        .zip(&expanded)
        .map(|((c, k), e)| {
            json!({
                "name": c.name, "vm": c.vm, "instancetype": c.instancetype,
                "preference": c.preference,
                "kvrs": {"apply": k.apply_spec, "controller": k.controller_spec},
                "kvrsExpand": e.as_ref().ok(),
            })
        })
        .collect();

    let mut child = Command::new(harness())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the harness");
    let body = serde_json::to_vec(&input).expect("cases as JSON");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(&body));
    let out = child.wait_with_output().expect("harness output");
    writer.join().expect("writer").expect("cases written");
    assert!(
        out.status.success(),
        "harness failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Value> = serde_json::from_slice(&out.stdout).expect("harness JSON");
    assert_eq!(results.len(), cases.len(), "one result per case");

    let mut tally = Tally::default();
    let mut panics = Vec::new();
    for (((case, k), go), e) in cases.iter().zip(&kvrs).zip(&results).zip(&expanded) {
        assert_eq!(go["name"], json!(case.name));
        if let Some(p) = go.get("panic").and_then(Value::as_str) {
            // The one input known to panic KubeVirt's code; any other panic is a finding.
            let features = case.preference.as_ref().and_then(|p| {
                p["spec"]["cpu"]["preferredCPUFeatures"]
                    .as_array()
                    .filter(|f| !f.is_empty())
            });
            assert!(
                case.instancetype.is_none()
                    && case.vm["spec"]["template"]["spec"]["domain"]["cpu"].is_null()
                    && features.is_some(),
                "{}: KubeVirt panicked on an input not known to panic it: {p}",
                case.name
            );
            panics.push(format!("{}: {p}", case.name));
        }
        tally.record("spread", &case.name, &go["spread"], &k.spread);
        if go["apply"].is_object() {
            let g = &go["apply"];
            tally.record(
                "apply",
                &case.name,
                &conflicts_key(&without_spec(g)),
                &conflicts_key(&without_spec(&k.apply)),
            );
            if g.get("spec").is_some() {
                tally.record("apply spec", &case.name, &g["spec"], &go["kvrs"]["apply"]);
                tally.record(
                    "requirements",
                    &case.name,
                    &go["requirements"],
                    &k.requirements,
                );
            }
        }
        if go["expand"].is_object() {
            let kvrs_side = match e {
                Ok(_) => json!({"vm": go["kvrsExpand"]}),
                Err(message) => json!({"error": message}),
            };
            tally.record(
                "expand",
                &case.name,
                &expand_key(&go["expand"]),
                &expand_key(&kvrs_side),
            );
        }
        if go["controller"].is_object() {
            let g = &go["controller"];
            tally.record(
                "controller",
                &case.name,
                &controller_key(&without_spec(g)),
                &controller_key(&without_spec(&k.controller)),
            );
            if g.get("spec").is_some() {
                tally.record(
                    "controller spec",
                    &case.name,
                    &g["spec"],
                    &go["kvrs"]["controller"],
                );
            }
        }
    }

    println!(
        "instancetype differential ({fixtures} fixtures + {count} random cases, seed {seed}):"
    );
    for (area, (agree, total)) in &tally.areas {
        println!("  {area:16} {agree}/{total} agree");
    }
    println!(
        "  KubeVirt panicked on {} case(s) (not compared; kvrs starts from an empty domain.cpu){}",
        panics.len(),
        panics
            .first()
            .map(|p| format!(", e.g. {p}"))
            .unwrap_or_default()
    );
    assert!(
        tally.failures.is_empty(),
        "kvrs and KubeVirt disagree:\n{}",
        tally.failures.join("\n")
    );
    for area in [
        "spread",
        "apply",
        "apply spec",
        "requirements",
        "controller",
        "controller spec",
        "expand",
    ] {
        let (_, total) = tally.areas.get(area).copied().unwrap_or_default();
        assert!(
            total > 0,
            "no case reached {area}: the generator lost its coverage"
        );
    }
    let fixture_results = &results[..fixtures];
    let refused = fixture_results
        .iter()
        .filter(|r| {
            r["spread"].is_object()
                || r["apply"].get("conflicts").is_some()
                || r["requirements"].is_object()
        })
        .count();
    assert!(
        refused >= 4,
        "the fixtures include refusals KubeVirt makes ({refused} found)"
    );
}
