//! KubeVirt's node labeller, its CPU part: the labels a node gets from libvirt's view of its
//! CPU, as a pure function of the files KubeVirt's init container writes
//! (`virsh_domcapabilities.xml`, `supported_features.xml`, `capabilities.xml`) and the cluster's
//! `obsoleteCPUModels`. Live migration of a VMI with the default `host-model` CPU depends on
//! them: the source node's `host-model-cpu.node.kubevirt.io/<model>` and
//! `host-model-required-features.node.kubevirt.io/<feature>` become the target pod's node
//! selector, which `cpu-model-migration.node.kubevirt.io/<model>` and
//! `cpu-feature.node.kubevirt.io/<feature>` on other nodes satisfy.
//!
//! KubeVirt v1.9.0 (pkg/virt-handler/node-labeller, amd64), label by label:
//! - `cpu-model.node.kubevirt.io/<m>`: every `<model>` of every domcapabilities CPU `<mode>`
//!   with a `usable` attribute other than `no` and a name (trimmed), minus the obsolete models;
//! - `cpu-model-migration.node.kubevirt.io/<m>`: the same with unusable models too;
//! - `cpu-feature.node.kubevirt.io/<f>`: the `require` features of the CPU baseline
//!   (`virsh hypervisor-cpu-baseline --features` of the domain capabilities);
//! - `host-model-cpu.node.kubevirt.io/<m>`, `host-model-required-features.node.kubevirt.io/<f>`,
//!   `cpu-vendor.node.kubevirt.io/<v>`: the `host-model` mode's first model (untrimmed), its
//!   `require` features and vendor; written even when there is no `host-model` mode (with an
//!   empty name, as KubeVirt does; [`crate::node_labeller::valid_label_key`] drops those);
//! - `node-labeller.kubevirt.io/obsolete-host-model`: the host model is in the *configured*
//!   obsolete list (KubeVirt compares with the configuration's map, which is nil unless the CR
//!   sets one: the default list filters models but never marks the host model obsolete);
//! - `cpu-timer.node.kubevirt.io/tsc-frequency|tsc-scalable`: the host CPU's `tsc` counter in
//!   `capabilities.xml`;
//! - `kubevirt.io/realtime`: `kernel.sched_rt_runtime_us` is -1 (a host fact, passed in);
//! - `kubevirt.io/sev`, `sev-es`, `sev-snp`, `s390-pv`, `tdx`: the domcapabilities features.
//!
//! Not derived here: `hyperv.node.kubevirt.io/*` (KubeVirt asks `/dev/kvm` with ioctls, not
//! libvirt) and `kubevirt.io/vm-arch-*` (only with the cross-architecture feature gate).

use std::collections::{BTreeMap, BTreeSet};

use super::xml::{self, XmlError};

/// The label prefixes and keys this module writes (KubeVirt's names).
pub mod keys {
    /// A CPU feature the node's QEMU can give a guest (the CPU baseline's `require` features).
    pub const CPU_FEATURE: &str = "cpu-feature.node.kubevirt.io/";
    /// A CPU model usable on this node.
    pub const CPU_MODEL: &str = "cpu-model.node.kubevirt.io/";
    /// A CPU model libvirt knows here, usable or not: a host-model VMI's migration target selects on it.
    pub const CPU_MODEL_MIGRATION: &str = "cpu-model-migration.node.kubevirt.io/";
    /// The TSC frequency and scalability.
    pub const CPU_TIMER: &str = "cpu-timer.node.kubevirt.io/";
    /// The host model's vendor.
    pub const CPU_VENDOR: &str = "cpu-vendor.node.kubevirt.io/";
    /// The model `host-model` expands to on this node.
    pub const HOST_MODEL_CPU: &str = "host-model-cpu.node.kubevirt.io/";
    /// A feature `host-model` requires on top of that model.
    pub const HOST_MODEL_REQUIRED_FEATURES: &str = "host-model-required-features.node.kubevirt.io/";
    /// The host model is in the configured obsolete list.
    pub const HOST_MODEL_OBSOLETE: &str = "node-labeller.kubevirt.io/obsolete-host-model";
    /// The kernel lets realtime tasks run unthrottled.
    pub const REALTIME: &str = "kubevirt.io/realtime";
    /// AMD SEV.
    pub const SEV: &str = "kubevirt.io/sev";
    /// AMD SEV-ES.
    pub const SEV_ES: &str = "kubevirt.io/sev-es";
    /// AMD SEV-SNP.
    pub const SEV_SNP: &str = "kubevirt.io/sev-snp";
    /// IBM Secure Execution (s390x).
    pub const SECURE_EXECUTION: &str = "kubevirt.io/s390-pv";
    /// Intel TDX.
    pub const TDX: &str = "kubevirt.io/tdx";
}

/// `virsh domcapabilities` in the node labeller's directory (KubeVirt's file names).
pub const DOMCAPABILITIES_FILE: &str = "virsh_domcapabilities.xml";
/// `virsh hypervisor-cpu-baseline --features` of the domain capabilities.
pub const SUPPORTED_FEATURES_FILE: &str = "supported_features.xml";
/// `virsh capabilities`.
pub const CAPABILITIES_FILE: &str = "capabilities.xml";

/// KubeVirt's `DefaultObsoleteCPUModels`: models too old to offer, unless the cluster
/// configuration names its own list.
pub const DEFAULT_OBSOLETE_CPU_MODELS: &[&str] = &[
    "486",
    "486-v1",
    "pentium",
    "pentium-v1",
    "pentium2",
    "pentium2-v1",
    "pentium3",
    "pentium3-v1",
    "pentiumpro",
    "pentiumpro-v1",
    "coreduo",
    "coreduo-v1",
    "n270",
    "n270-v1",
    "core2duo",
    "core2duo-v1",
    "Conroe",
    "Conroe-v1",
    "athlon",
    "athlon-v1",
    "phenom",
    "phenom-v1",
    "qemu64",
    "qemu64-v1",
    "qemu32",
    "qemu32-v1",
    "kvm64",
    "kvm64-v1",
    "kvm32",
    "kvm32-v1",
    "Opteron_G1",
    "Opteron_G1-v1",
    "Opteron_G2",
    "Opteron_G2-v1",
];

/// Why the CPU labels could not be derived (KubeVirt's virt-handler does not start then).
#[derive(Debug, thiserror::Error)]
pub enum CpuLabelsError {
    /// A file is not the XML expected.
    #[error(transparent)]
    Xml(#[from] XmlError),
    /// libvirt offers `host-model` but names no model for it.
    #[error("{DOMCAPABILITIES_FILE}: cpu/mode[@name='host-model'] has no <model>")]
    HostModelWithoutModel,
}

/// What the labels are derived from: the files' text and the cluster configuration.
#[derive(Debug, Clone, Copy)]
pub struct CpuLabelInputs<'a> {
    /// `virsh domcapabilities` of the node's QEMU.
    pub domcapabilities: &'a str,
    /// `virsh hypervisor-cpu-baseline --features` of those domain capabilities.
    pub supported_features: &'a str,
    /// `virsh capabilities`, when there (only its host CPU's counter is read).
    pub capabilities: Option<&'a str>,
    /// The KubeVirt CR's `spec.configuration.obsoleteCPUModels`; `None` (or empty, which
    /// KubeVirt's configuration drops) when not set.
    pub obsolete_cpu_models: Option<&'a BTreeSet<String>>,
    /// `kernel.sched_rt_runtime_us` is -1 on this node.
    pub realtime_capable: bool,
}

/// The CPU labels KubeVirt's node labeller puts on a node (all with value `"true"` but the TSC
/// frequency and scalability).
pub fn cpu_labels(input: &CpuLabelInputs<'_>) -> Result<BTreeMap<String, String>, CpuLabelsError> {
    let features = supported_features(input.supported_features)?;
    let caps = DomainCpu::parse(input.domcapabilities)?;
    let counter = match input.capabilities {
        Some(text) => tsc_counter(text)?,
        None => None,
    };
    let configured = input.obsolete_cpu_models.filter(|m| !m.is_empty());
    let is_obsolete = |m: &str| match configured {
        Some(set) => set.contains(m),
        None => DEFAULT_OBSOLETE_CPU_MODELS.contains(&m),
    };

    let mut labels = BTreeMap::new();
    let mut yes = |key: String| {
        labels.insert(key, "true".to_string());
    };
    for f in &features {
        yes(format!("{}{f}", keys::CPU_FEATURE));
    }
    for m in caps.usable.iter().filter(|m| !is_obsolete(m)) {
        yes(format!("{}{m}", keys::CPU_MODEL));
    }
    for m in caps.known.iter().filter(|m| !is_obsolete(m)) {
        yes(format!("{}{m}", keys::CPU_MODEL_MIGRATION));
    }
    if configured.is_some_and(|set| set.contains(&caps.host_model)) {
        yes(keys::HOST_MODEL_OBSOLETE.to_string());
    }
    for f in &caps.host_model_required {
        yes(format!("{}{f}", keys::HOST_MODEL_REQUIRED_FEATURES));
    }
    yes(format!("{}{}", keys::CPU_VENDOR, caps.vendor));
    yes(format!("{}{}", keys::HOST_MODEL_CPU, caps.host_model));
    if input.realtime_capable {
        yes(keys::REALTIME.to_string());
    }
    for (on, key) in [
        (caps.sev, keys::SEV),
        (caps.sev_es, keys::SEV_ES),
        (caps.sev_snp, keys::SEV_SNP),
        (caps.secure_execution, keys::SECURE_EXECUTION),
        (caps.tdx, keys::TDX),
    ] {
        if on {
            yes(key.to_string());
        }
    }
    if let Some(c) = counter {
        labels.insert(
            format!("{}tsc-frequency", keys::CPU_TIMER),
            c.frequency.to_string(),
        );
        labels.insert(
            format!("{}tsc-scalable", keys::CPU_TIMER),
            (c.scaling == "yes").to_string(),
        );
    }
    Ok(labels)
}

/// What KubeVirt reads of the domain capabilities.
#[derive(Debug, Default, PartialEq, Eq)]
struct DomainCpu {
    usable: Vec<String>,
    known: Vec<String>,
    host_model: String,
    host_model_required: BTreeSet<String>,
    vendor: String,
    sev: bool,
    sev_es: bool,
    sev_snp: bool,
    secure_execution: bool,
    tdx: bool,
}

impl DomainCpu {
    fn parse(text: &str) -> Result<DomainCpu, CpuLabelsError> {
        const DOC: &str = DOMCAPABILITIES_FILE;
        let root = xml::parse(DOC, text)?;
        let mut out = DomainCpu::default();
        for mode in root.at(&["cpu", "mode"]) {
            if mode.attr("name") == "host-model" {
                // Go decodes a repeated single element into the same field: the last one wins.
                if let Some(v) = mode.all("vendor").last() {
                    out.vendor = v.text.clone();
                }
                let first = mode
                    .all("model")
                    .next()
                    .ok_or(CpuLabelsError::HostModelWithoutModel)?;
                out.host_model = first.text.clone();
                out.host_model_required.extend(
                    mode.all("feature")
                        .filter(|f| f.attr("policy") == "require")
                        .map(|f| f.attr("name").to_string()),
                );
            }
            for model in mode.all("model") {
                let name = model.text.trim();
                let usable = model.attr("usable");
                if usable.is_empty() || name.is_empty() {
                    continue;
                }
                out.known.push(name.to_string());
                if usable != "no" {
                    out.usable.push(name.to_string());
                }
            }
        }
        let supported = |path: &[&str]| {
            root.at(path)
                .last()
                .is_some_and(|e| e.attr("supported") == "yes")
        };
        let sev = root.at(&["features", "sev"]);
        let mut max_es_guests = 0;
        for e in &sev {
            for field in ["cbitpos", "reducedPhysBits", "maxGuests", "maxESGuests"] {
                for f in e.all(field) {
                    let v = xml::unsigned(DOC, &format!("features/sev/{field}"), &f.text)?;
                    if field == "maxESGuests" {
                        max_es_guests = v;
                    }
                }
            }
        }
        out.sev = supported(&["features", "sev"]);
        out.sev_es = out.sev && max_es_guests > 0;
        let snp_type = root
            .at(&["features", "launchSecurity", "enum", "value"])
            .iter()
            .any(|v| v.text == "sev-snp");
        out.sev_snp = out.sev_es && supported(&["features", "launchSecurity"]) && snp_type;
        out.secure_execution = supported(&["features", "s390-pv"]);
        out.tdx = supported(&["features", "tdx"]);
        Ok(out)
    }
}

/// The `require` features of `virsh hypervisor-cpu-baseline --features` (the root's `feature`
/// children).
fn supported_features(text: &str) -> Result<BTreeSet<String>, XmlError> {
    let root = xml::parse(SUPPORTED_FEATURES_FILE, text)?;
    Ok(root
        .all("feature")
        .filter(|f| f.attr("policy") == "require")
        .map(|f| f.attr("name").to_string())
        .collect())
}

/// The host CPU's counter in `virsh capabilities` (`host/cpu/counter`), when it is the TSC.
#[derive(Debug, PartialEq, Eq)]
struct TscCounter {
    frequency: u64,
    scaling: String,
}

fn tsc_counter(text: &str) -> Result<Option<TscCounter>, XmlError> {
    const DOC: &str = CAPABILITIES_FILE;
    let root = xml::parse(DOC, text)?;
    let Some(counter) = root.at(&["host", "cpu", "counter"]).into_iter().last() else {
        return Ok(None);
    };
    let frequency = xml::unsigned(
        DOC,
        "host/cpu/counter/@frequency",
        counter.attr("frequency"),
    )?;
    Ok((counter.attr("name") == "tsc").then(|| TscCounter {
        frequency,
        scaling: counter.attr("scaling").to_string(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A domain-capabilities document with `cpu` inside `<cpu>` and `features` inside
    /// `<features>`.
    fn domcaps(cpu: &str, features: &str) -> String {
        format!(
            "<domainCapabilities><arch>x86_64</arch><cpu>{cpu}</cpu><features>{features}</features></domainCapabilities>"
        )
    }

    const HOST_MODEL: &str = "<mode name='host-model' supported='yes'><model fallback='forbid'>Skylake-Client-IBRS</model><vendor>Intel</vendor><feature policy='require' name='ss'/><feature policy='disable' name='mpx'/></mode>";
    const BASELINE: &str = "<cpu mode='custom' match='exact'><model>Skylake-Client-IBRS</model><feature policy='require' name='ss'/><feature policy='require' name='sse4.2'/><feature policy='disable' name='mpx'/></cpu>";

    fn labels(
        domcaps: &str,
        capabilities: Option<&str>,
        obsolete: Option<&BTreeSet<String>>,
    ) -> Result<BTreeMap<String, String>, CpuLabelsError> {
        cpu_labels(&CpuLabelInputs {
            domcapabilities: domcaps,
            supported_features: BASELINE,
            capabilities,
            obsolete_cpu_models: obsolete,
            realtime_capable: false,
        })
    }

    fn keys_with(labels: &BTreeMap<String, String>, prefix: &str) -> Vec<String> {
        labels
            .keys()
            .filter_map(|k| k.strip_prefix(prefix))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn models_features_and_the_host_model_become_labels() {
        let custom = "<mode name='custom' supported='yes'><model usable='yes'>Penryn</model><model usable='no'> Haswell </model><model usable='yes'>qemu64</model><model>NoFlag</model></mode>";
        let l = labels(&domcaps(&format!("{HOST_MODEL}{custom}"), ""), None, None).unwrap();
        assert_eq!(
            keys_with(&l, keys::CPU_MODEL),
            ["Penryn"],
            "usable, not obsolete"
        );
        assert_eq!(
            keys_with(&l, keys::CPU_MODEL_MIGRATION),
            ["Haswell", "Penryn"],
            "usable or not, names trimmed"
        );
        assert_eq!(keys_with(&l, keys::CPU_FEATURE), ["ss", "sse4.2"]);
        assert_eq!(keys_with(&l, keys::HOST_MODEL_REQUIRED_FEATURES), ["ss"]);
        assert_eq!(keys_with(&l, keys::HOST_MODEL_CPU), ["Skylake-Client-IBRS"]);
        assert_eq!(keys_with(&l, keys::CPU_VENDOR), ["Intel"]);
        assert!(l.values().all(|v| v == "true"));
        assert!(!l.contains_key(keys::HOST_MODEL_OBSOLETE));
    }

    #[test]
    fn only_a_configured_obsolete_list_marks_the_host_model_obsolete() {
        let doc = domcaps(HOST_MODEL, "");
        let configured: BTreeSet<String> = ["Skylake-Client-IBRS".to_string()].into();
        let l = labels(&doc, None, Some(&configured)).unwrap();
        assert_eq!(l[keys::HOST_MODEL_OBSOLETE], "true");
        let empty = BTreeSet::new();
        for obsolete in [None, Some(&empty)] {
            let l = labels(&doc, None, obsolete).unwrap();
            assert!(!l.contains_key(keys::HOST_MODEL_OBSOLETE));
        }
    }

    #[test]
    fn launch_security_follows_libvirts_features() {
        let sev = |inner: &str| {
            let l = labels(&domcaps(HOST_MODEL, inner), None, None).unwrap();
            [keys::SEV, keys::SEV_ES, keys::SEV_SNP, keys::TDX].map(|k| l.contains_key(k))
        };
        assert_eq!(sev("<sev supported='no'/>"), [false; 4]);
        assert_eq!(
            sev("<sev supported='yes'><maxESGuests>0</maxESGuests></sev>"),
            [true, false, false, false]
        );
        let snp = "<launchSecurity supported='yes'><enum name='sectype'><value>sev-snp</value></enum></launchSecurity>";
        assert_eq!(
            sev(&format!(
                "<sev supported='yes'><maxESGuests>9</maxESGuests></sev>{snp}<tdx supported='yes'/>"
            )),
            [true, true, true, true]
        );
        assert_eq!(sev(snp), [false; 4], "SNP needs SEV-ES");
    }

    #[test]
    fn a_tsc_counter_gives_the_timer_labels() {
        let caps = |c: &str| format!("<capabilities><host><cpu>{c}</cpu></host></capabilities>");
        let doc = domcaps(HOST_MODEL, "");
        let tsc = caps("<counter name='tsc' frequency='2500000000' scaling='no'/>");
        let l = labels(&doc, Some(&tsc), None).unwrap();
        assert_eq!(l["cpu-timer.node.kubevirt.io/tsc-frequency"], "2500000000");
        assert_eq!(l["cpu-timer.node.kubevirt.io/tsc-scalable"], "false");
        let other = caps("<counter name='hpet' frequency='1' scaling='yes'/>");
        let l = labels(&doc, Some(&other), None).unwrap();
        assert!(keys_with(&l, keys::CPU_TIMER).is_empty());
        let bad = caps("<counter name='tsc' frequency='fast'/>");
        let e = labels(&doc, Some(&bad), None).unwrap_err();
        assert!(e.to_string().contains("host/cpu/counter/@frequency"), "{e}");
    }

    #[test]
    fn documents_kubevirt_refuses_are_typed_errors() {
        let e = labels(&domcaps("<mode name='host-model'/>", ""), None, None).unwrap_err();
        assert!(matches!(e, CpuLabelsError::HostModelWithoutModel), "{e}");
        let e = labels("<domainCapabilities><cpu>", None, None).unwrap_err();
        assert!(e.to_string().starts_with(DOMCAPABILITIES_FILE), "{e}");
        let e = cpu_labels(&CpuLabelInputs {
            domcapabilities: &domcaps(HOST_MODEL, ""),
            supported_features: "",
            capabilities: None,
            obsolete_cpu_models: None,
            realtime_capable: true,
        })
        .unwrap_err();
        assert!(e.to_string().starts_with(SUPPORTED_FEATURES_FILE), "{e}");
    }
}
