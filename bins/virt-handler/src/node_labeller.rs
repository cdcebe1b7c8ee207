//! KubeVirt's node labeller: `machine-type.node.kubevirt.io/<name>: "true"` on this node for
//! every machine type the launcher image's QEMU offers, which is what launcher pods select on
//! (`spec.domain.machine.type`, defaulted to `q35`), and the CPU labels of [`cpu`], which a
//! host-model VMI's migration target selects on.
//!
//! KubeVirt v1.9.0: an init container of the virt-handler DaemonSet runs the launcher image's
//! `node-labeller.sh`, which starts libvirt and writes `virsh capabilities` (and domcapabilities)
//! into `/var/lib/kubevirt-node-labeller`; virt-handler reads it once at start and labels its
//! node with every `<machine>` of every `<guest>` (aliases such as `q35` are machines of their
//! own there), not filtered by `emulatedMachines`, removing the labeller's labels it no longer
//! finds.
//!
//! kvrs: the init container (bins/deploy/virt-handler/daemonset.yaml) writes
//! `qemu-system-x86_64 -machine help` to [`MACHINES_FILE`] in that directory for the machine
//! types (kept from before the image had `virsh`; the list needs no daemon). That
//! output, for QEMU 10.0 and libvirt 11.3, lists the same names as libvirt's capabilities but
//! `none`, which libvirt leaves out (checked against `virsh capabilities` from the same image).
//! The file is QEMU's own text, one machine a line after the `Supported machines are:` header,
//! the name first:
//!
//! ```text
//! Supported machines are:
//! q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-10.0)
//! pc-q35-10.0          Standard PC (Q35 + ICH9, 2009)
//! none                 empty machine
//! ```
//!
//! CPU labels ([`cpu`]): the init container also writes KubeVirt's `virsh_domcapabilities.xml`,
//! `supported_features.xml` and `capabilities.xml` (with the image's `virsh` and a short-lived
//! session libvirtd, as KubeVirt's `node-labeller.sh` does with virtqemud); [`load_labels`] derives KubeVirt's CPU model, feature, host-model,
//! vendor, TSC, realtime and SEV/TDX labels from them once, and the heartbeat keeps them on the
//! node, removing the labeller's labels it no longer derives (KubeVirt's prefix list).
//!
//! Not done: Hyper-V enlightenments (`hyperv.node.kubevirt.io/`, KubeVirt asks `/dev/kvm`),
//! `kubevirt.io/vm-arch-*` (cross-architecture gate), the KubeVirt CR's own `obsoleteCPUModels`
//! (KubeVirt's defaults are used) and the obsolete host-model event.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value};
use tracing::{error, info, warn};

pub mod cpu;
pub mod xml;

/// KubeVirt's `nodeLabellerLabels`: the prefixes of the labels the labeller owns, removed from
/// the node when no longer derived. (`cpu-vendor.node.kubevirt.io/` and `kubevirt.io/s390-pv`
/// are written but not in KubeVirt's list, so never removed: kept as KubeVirt has it.)
pub const LABELLER_PREFIXES: &[&str] = &[
    cpu::keys::CPU_FEATURE,
    cpu::keys::CPU_MODEL,
    cpu::keys::CPU_MODEL_MIGRATION,
    cpu::keys::CPU_TIMER,
    "hyperv.node.kubevirt.io/",
    cpu::keys::REALTIME,
    cpu::keys::SEV,
    cpu::keys::SEV_ES,
    cpu::keys::SEV_SNP,
    cpu::keys::TDX,
    cpu::keys::HOST_MODEL_CPU,
    cpu::keys::HOST_MODEL_REQUIRED_FEATURES,
    cpu::keys::HOST_MODEL_OBSOLETE,
    MACHINE_TYPE_LABEL,
    "kubevirt.io/vm-arch-",
];

/// KubeVirt's `SupportedMachineTypeLabel` prefix.
pub const MACHINE_TYPE_LABEL: &str = "machine-type.node.kubevirt.io/";

/// The file the DaemonSet's init container writes in `--node-labeller-dir`.
pub const MACHINES_FILE: &str = "qemu-machines.txt";

/// The header line QEMU prints before the machine list.
const HEADER: &str = "Supported machines are:";

/// The machine types in `qemu-system-<arch> -machine help` output: the first word of each line
/// after the header, aliases included, without `none` (libvirt does not offer it). Names that
/// cannot be a label name are left out (one would make the whole node patch fail).
pub fn parse_machine_help(text: &str) -> BTreeSet<String> {
    text.lines()
        .skip_while(|l| l.trim() != HEADER)
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "none" && is_label_name(name))
        .map(str::to_string)
        .collect()
}

/// A label's name part (after the prefix): 1–63 characters of `[A-Za-z0-9._-]`, alphanumeric
/// at both ends.
fn is_label_name(name: &str) -> bool {
    let ok_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    name.len() <= 63
        && ok_end(name.chars().next())
        && ok_end(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The node labeller's labels for `machines`: `machine-type.node.kubevirt.io/<m>: "true"`.
pub fn machine_labels(machines: &BTreeSet<String>) -> BTreeMap<String, String> {
    machines
        .iter()
        .map(|m| (format!("{MACHINE_TYPE_LABEL}{m}"), "true".to_string()))
        .collect()
}

/// The label changes that put the labeller's `wanted` labels on a node that has `current`
/// labels: each wanted label, and `null` (a merge patch's removal) for every other label under
/// one of KubeVirt's [`LABELLER_PREFIXES`] there.
pub fn label_changes(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<String, String>,
) -> Map<String, Value> {
    let stale = current
        .keys()
        .filter(|k| LABELLER_PREFIXES.iter().any(|p| k.starts_with(p)) && !wanted.contains_key(*k))
        .map(|k| (k.clone(), Value::Null));
    wanted
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .chain(stale)
        .collect()
}

/// A label key the API server accepts: an optional DNS prefix and a name part of 1–63
/// characters (KubeVirt writes `host-model-cpu.node.kubevirt.io/` with an empty name when
/// libvirt offers no host model; one such key would make the whole node patch fail).
pub fn valid_label_key(key: &str) -> bool {
    let name = key.rsplit_once('/').map_or(key, |(_, n)| n);
    is_label_name(name)
}

/// Reads the node labeller's files in `dir` once, at start (as KubeVirt does): the machine
/// types and, when `virsh_domcapabilities.xml` is there, the CPU labels ([`cpu::cpu_labels`]
/// with KubeVirt's default obsolete models). `None` when there is nothing to label from (see
/// [`load_machines`]). CPU files that cannot be read or parsed are logged and their labels left
/// out (KubeVirt's virt-handler refuses to start then); invalid label keys are dropped.
pub fn load_labels(dir: &Path, realtime_capable: bool) -> Option<BTreeMap<String, String>> {
    let mut labels = machine_labels(&load_machines(dir)?);
    let domcaps = dir.join(cpu::DOMCAPABILITIES_FILE);
    let read = |name: &str| std::fs::read_to_string(dir.join(name));
    match read(cpu::DOMCAPABILITIES_FILE) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info!(path = %domcaps.display(), "no domain capabilities: no CPU labels");
        }
        Err(e) => {
            error!(path = %domcaps.display(), "unreadable domain capabilities, no CPU labels: {e}")
        }
        Ok(domcapabilities) => {
            let capabilities = read(cpu::CAPABILITIES_FILE).ok();
            let derived = read(cpu::SUPPORTED_FEATURES_FILE)
                .map_err(|e| format!("{}: {e}", cpu::SUPPORTED_FEATURES_FILE))
                .and_then(|supported_features| {
                    cpu::cpu_labels(&cpu::CpuLabelInputs {
                        domcapabilities: &domcapabilities,
                        supported_features: &supported_features,
                        capabilities: capabilities.as_deref(),
                        obsolete_cpu_models: None,
                        realtime_capable,
                    })
                    .map_err(|e| e.to_string())
                });
            match derived {
                Ok(cpu_labels) => {
                    info!(
                        labels = cpu_labels.len(),
                        "CPU labels to label the node with"
                    );
                    labels.extend(cpu_labels);
                }
                Err(e) => error!(dir = %dir.display(), "no CPU labels: {e}"),
            }
        }
    }
    labels.retain(|k, _| {
        let ok = valid_label_key(k);
        if !ok {
            warn!(label = k.as_str(), "not a valid label key, left out");
        }
        ok
    });
    Some(labels)
}

/// `kernel.sched_rt_runtime_us` is -1: KubeVirt's test for a realtime-capable node.
pub fn realtime_capable() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").is_ok_and(|v| v.trim() == "-1")
}

/// Reads [`MACHINES_FILE`] in `dir` once, at start (as KubeVirt reads its capabilities). `None`,
/// with one log line, where there is nothing to label from: no file (the handler runs outside
/// the DaemonSet, e.g. `kvrs run`, whose kubelet labels the node itself), an unreadable one, or
/// one without machines (the labels already on the node are then left alone).
pub fn load_machines(dir: &Path) -> Option<BTreeSet<String>> {
    let path = dir.join(MACHINES_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            info!(path = %path.display(), "no machine list: the node's machine-type labels are left alone");
            return None;
        }
        Err(e) => {
            warn!(path = %path.display(), "unreadable machine list, machine-type labels left alone: {e}");
            return None;
        }
    };
    let machines = parse_machine_help(&text);
    if machines.is_empty() {
        warn!(path = %path.display(), "no machine types in the machine list, machine-type labels left alone");
        return None;
    }
    info!(path = %path.display(), machines = machines.len(), "machine types to label the node with");
    Some(machines)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An excerpt of QEMU 10.0's output in kvrs's launcher image.
    const HELP: &str = "Supported machines are:
microvm              microvm (i386)
pc-i440fx-9.2        Standard PC (i440FX + PIIX, 1996)
pc-i440fx-2.4        Standard PC (i440FX + PIIX, 1996) (deprecated)
pc                   Standard PC (i440FX + PIIX, 1996) (alias of pc-i440fx-10.0)
pc-i440fx-10.0       Standard PC (i440FX + PIIX, 1996) (default)
pc-q35-4.0.1         Standard PC (Q35 + ICH9, 2009) (deprecated)
q35                  Standard PC (Q35 + ICH9, 2009) (alias of pc-q35-10.0)
pc-q35-10.0          Standard PC (Q35 + ICH9, 2009)
isapc                ISA-only PC
none                 empty machine
x-remote             Experimental remote machine
";

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn machines_and_their_aliases_are_read_but_none() {
        assert_eq!(
            parse_machine_help(HELP),
            set(&[
                "isapc",
                "microvm",
                "pc",
                "pc-i440fx-10.0",
                "pc-i440fx-2.4",
                "pc-i440fx-9.2",
                "pc-q35-10.0",
                "pc-q35-4.0.1",
                "q35",
                "x-remote",
            ])
        );
    }

    #[test]
    fn text_without_the_header_or_with_unlabelable_names_gives_nothing_for_them() {
        assert!(parse_machine_help("").is_empty());
        assert!(parse_machine_help("qemu-system-x86_64: -machine: oops\n").is_empty());
        let odd = format!(
            "{HEADER}\n\nq35 x\n-bad- x\nweird/name x\n{} x\n",
            "a".repeat(64)
        );
        assert_eq!(parse_machine_help(&odd), set(&["q35"]));
    }

    #[test]
    fn the_patch_adds_each_label_and_removes_stale_labeller_labels_only() {
        let current: BTreeMap<String, String> = [
            ("machine-type.node.kubevirt.io/q35", "true"),
            ("machine-type.node.kubevirt.io/pc-q35-9.2", "true"),
            ("kubevirt.io/schedulable", "true"),
            ("cpu-model.node.kubevirt.io/Haswell", "true"),
            ("cpu-vendor.node.kubevirt.io/Intel", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let changes = label_changes(&current, &machine_labels(&set(&["q35", "pc-q35-10.0"])));
        assert_eq!(
            Value::Object(changes),
            serde_json::json!({
                "machine-type.node.kubevirt.io/q35": "true",
                "machine-type.node.kubevirt.io/pc-q35-10.0": "true",
                "machine-type.node.kubevirt.io/pc-q35-9.2": null,
                "cpu-model.node.kubevirt.io/Haswell": null,
            })
        );
    }

    #[test]
    fn a_missing_file_labels_nothing_and_a_written_one_is_read() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(load_machines(dir.path()), None);
        std::fs::write(dir.path().join(MACHINES_FILE), HEADER).unwrap();
        assert_eq!(
            load_machines(dir.path()),
            None,
            "no machines: nothing to do"
        );
        std::fs::write(dir.path().join(MACHINES_FILE), HELP).unwrap();
        let machines = load_machines(dir.path()).unwrap();
        assert!(machines.contains("q35") && machines.contains("pc-q35-10.0"));
    }

    #[test]
    fn cpu_files_add_their_labels_and_keys_the_api_server_refuses_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MACHINES_FILE), HELP).unwrap();
        // No domain capabilities: machine types only.
        let l = load_labels(dir.path(), false).unwrap();
        assert!(l.keys().all(|k| k.starts_with(MACHINE_TYPE_LABEL)));
        // No host-model mode: KubeVirt writes `host-model-cpu.node.kubevirt.io/` (empty name)
        // and `cpu-vendor.node.kubevirt.io/`; they are not label keys and are left out.
        let custom = "<mode name='custom'><model usable='yes'>Penryn</model></mode>";
        std::fs::write(
            dir.path().join(cpu::DOMCAPABILITIES_FILE),
            format!("<domainCapabilities><cpu>{custom}</cpu></domainCapabilities>"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join(cpu::SUPPORTED_FEATURES_FILE),
            "<cpu><feature policy='require' name='sse2'/></cpu>",
        )
        .unwrap();
        let l = load_labels(dir.path(), true).unwrap();
        assert_eq!(l["machine-type.node.kubevirt.io/q35"], "true");
        assert_eq!(l["cpu-model.node.kubevirt.io/Penryn"], "true");
        assert_eq!(l["cpu-feature.node.kubevirt.io/sse2"], "true");
        assert_eq!(l["kubevirt.io/realtime"], "true");
        assert!(!l.contains_key("host-model-cpu.node.kubevirt.io/"));
        assert!(!l.contains_key("cpu-vendor.node.kubevirt.io/"));
        // A broken baseline: the CPU labels are left out, the machine types stay.
        std::fs::write(dir.path().join(cpu::SUPPORTED_FEATURES_FILE), "<cpu>").unwrap();
        let l = load_labels(dir.path(), false).unwrap();
        assert!(l.keys().all(|k| k.starts_with(MACHINE_TYPE_LABEL)));
        assert!(valid_label_key("cpu-model.node.kubevirt.io/Penryn"));
        assert!(valid_label_key("kubevirt.io/sev"));
        assert!(!valid_label_key("cpu-vendor.node.kubevirt.io/"));
    }
}
