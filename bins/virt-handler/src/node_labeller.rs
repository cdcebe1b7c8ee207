//! KubeVirt's node labeller, its machine-type part only: `machine-type.node.kubevirt.io/<name>:
//! "true"` on this node for every machine type the launcher image's QEMU offers, which is what
//! launcher pods select on (`spec.domain.machine.type`, defaulted to `q35`).
//!
//! KubeVirt v1.9.0: an init container of the virt-handler DaemonSet runs the launcher image's
//! `node-labeller.sh`, which starts libvirt and writes `virsh capabilities` (and domcapabilities)
//! into `/var/lib/kubevirt-node-labeller`; virt-handler reads it once at start and labels its
//! node with every `<machine>` of every `<guest>` (aliases such as `q35` are machines of their
//! own there), not filtered by `emulatedMachines`, removing the labeller's labels it no longer
//! finds.
//!
//! kvrs: the init container (bins/deploy/virt-handler/daemonset.yaml) writes
//! `qemu-system-x86_64 -machine help` to [`MACHINES_FILE`] in that directory instead: kvrs's
//! launcher image has libvirtd but no `virsh`, and the machine list needs no daemon. That
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
//! Not done (KubeVirt labels these from the same files): CPU models (`cpu-model.node.kubevirt.io/`,
//! `cpu-model-migration.node.kubevirt.io/`, `host-model-cpu.node.kubevirt.io/`,
//! `host-model-required-features.node.kubevirt.io/`, `cpu-vendor.node.kubevirt.io/`), CPU
//! features (`cpu-feature.node.kubevirt.io/`), Hyper-V enlightenments
//! (`hyperv.node.kubevirt.io/`), TSC (`cpu-timer.node.kubevirt.io/`), realtime, SEV/SEV-ES/SNP,
//! TDX, Secure Execution, `node.kubevirt.io/vm-arch-*` and the obsolete host-model event.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{Map, Value};
use tracing::{info, warn};

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

/// The label changes that put `machines` on a node that has `current` labels: `"true"` for
/// each machine, `null` (a merge patch's removal) for every other machine-type label there.
pub fn machine_label_changes(
    current: &BTreeMap<String, String>,
    machines: &BTreeSet<String>,
) -> Map<String, Value> {
    let wanted: BTreeSet<String> = machines
        .iter()
        .map(|m| format!("{MACHINE_TYPE_LABEL}{m}"))
        .collect();
    let stale = current
        .keys()
        .filter(|k| k.starts_with(MACHINE_TYPE_LABEL) && !wanted.contains(*k))
        .map(|k| (k.clone(), Value::Null));
    wanted
        .iter()
        .map(|k| (k.clone(), Value::String("true".into())))
        .chain(stale)
        .collect()
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
    fn the_patch_adds_each_machine_and_removes_stale_machine_labels_only() {
        let current: BTreeMap<String, String> = [
            ("machine-type.node.kubevirt.io/q35", "true"),
            ("machine-type.node.kubevirt.io/pc-q35-9.2", "true"),
            ("kubevirt.io/schedulable", "true"),
            ("cpu-model.node.kubevirt.io/Haswell", "true"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let changes = machine_label_changes(&current, &set(&["q35", "pc-q35-10.0"]));
        assert_eq!(
            Value::Object(changes),
            serde_json::json!({
                "machine-type.node.kubevirt.io/q35": "true",
                "machine-type.node.kubevirt.io/pc-q35-10.0": "true",
                "machine-type.node.kubevirt.io/pc-q35-9.2": null,
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
}
