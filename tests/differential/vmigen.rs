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

#[path = "vmigen_devices.rs"]
mod devices;
use devices::{clock, features, network, other_devices, storage};

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
        let i = usize::try_from(self.below(items.len() as u64)).unwrap_or(0);
        items[i].clone()
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
    } else if rng.chance(2) {
        metadata.insert(
            "labels".into(),
            json!({"kubevirt.io/created-by": "someone"}),
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
        annotations.insert(
            "kubevirt.io/keep-launcher-alive-after-failure".into(),
            json!("true"),
        );
    }
    if rng.chance(3) {
        annotations.insert("custom.example.com/owner".into(), json!("team-a"));
    }
    if rng.chance(2) {
        gates.need(&mut rng, "ExperimentalIgnitionSupport");
        annotations.insert(
            "kubevirt.io/ignitiondata".into(),
            json!(r#"{"ignition": {"version": "3.2.0"}}"#),
        );
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), Value::Object(annotations));
    }
    // Every fourth VMI comes as the VM controller sends one, with its finalizer already there:
    // the webhook appends its own after it. Chosen by index, not by the generator's stream, so
    // the other fields stay what they were.
    if index % 4 == 1 {
        metadata.insert(
            "finalizers".into(),
            json!(["kubevirt.io/virtualMachineControllerFinalize"]),
        );
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
            firmware.insert(
                "bootloader".into(),
                json!({"bios": {"useSerial": rng.chance(50)}}),
            );
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
        let mut container =
            obj(json!({"image": "quay.io/example/kernel-boot:1.0", "kernelPath": "/boot/vmlinuz"}));
        if rng.chance(60) {
            container.insert("initrdPath".into(), json!("/boot/initramfs.img"));
        }
        firmware.insert(
            "kernelBoot".into(),
            json!({"kernelArgs": "console=ttyS0 root=/dev/vda", "container": container}),
        );
    }
    domain.insert("firmware".into(), Value::Object(firmware));
    // AMD SEV: needs EFI without secure boot (and no SMM); other firmware is refused.
    if rng.chance(3) {
        let sev = if rng.chance(50) {
            json!({"sev": {}})
        } else {
            json!({"sev": {"policy": {"encryptedState": true}}})
        };
        domain.insert("launchSecurity".into(), sev);
    }
    if rng.chance(5) {
        domain.insert(
            "chassis".into(),
            json!({"manufacturer": "ACME", "version": "1", "serial": "CH-1", "asset": "A-1", "sku": "SKU-1"}),
        );
    }

    if rng.chance(20) {
        // pc-i440fx is outside amd64's allowed list: both must refuse it.
        let machine = rng.pick(&[
            "q35",
            "pc-q35-rhel9.4.0",
            "pc-q35-rhel8.6.0",
            "q35",
            "q35",
            "pc-i440fx-rhel7.6.0",
        ]);
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
            cpu.insert(
                "realtime".into(),
                if rng.chance(50) {
                    json!({})
                } else {
                    json!({"mask": "0"})
                },
            );
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
        if rng.chance(50)
            && let Some(m) = requests.get("memory").cloned()
        {
            limits.insert("memory".into(), m);
        }
    } else {
        if rng.chance(25) {
            requests.insert("cpu".into(), json!(rng.pick(&["100m", "500m", "1", "2"])));
        }
        if rng.chance(15) {
            limits.insert("cpu".into(), json!(rng.pick(&["1", "2", "4"])));
        }
        if rng.chance(10)
            && let Some(Value::String(m)) = requests.get("memory")
        {
            limits.insert("memory".into(), json!(m.clone()));
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
    storage(
        &mut rng,
        &mut devices,
        &mut spec,
        &mut gates,
        io_policy.is_some(),
    );
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
        spec.insert(
            "nodeSelector".into(),
            json!({"kubernetes.io/hostname": "node01"}),
        );
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
