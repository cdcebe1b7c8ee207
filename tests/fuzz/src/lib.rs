//! What the fuzz targets share: reading fuzz bytes as the CLI reads a manifest (YAML or JSON, one
//! or more documents, `kind: List` items; VMI or VM), the admission the CLI applies
//! (`bins/kvrs/src/pipeline.rs`: VM validation, VMI from template, defaults + validation), and
//! the properties the targets assert on what comes out (well-formed XML, no `..` in paths).
//!
//! Every check panics with a message naming the property, so libFuzzer records the input as a
//! crash and `cargo fuzz tmin` keeps the message while it shrinks the input.

pub mod seeds;
pub mod xml;

use kvrs_admission::feature_gates::KNOWN_GATES;
use kvrs_admission::template::vmi_from_vm;
use kvrs_admission::validate::validate_vm;
use kvrs_admission::{ClusterConfig, admit};
use kvrs_api::{VirtualMachine, VirtualMachineInstance};
use serde::Deserialize;

/// The cluster the inputs are admitted into: KubeVirt's defaults with every feature gate
/// KubeVirt v1.9.0 knows named (alpha, beta, deprecated alike), so that gated devices (virtiofs,
/// host disks, hotplug, host devices...) reach the converter and the pod renderer instead of
/// stopping at validation.
pub fn fuzz_config() -> ClusterConfig {
    let gates = KNOWN_GATES
        .iter()
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(",");
    ClusterConfig::with_feature_gates(&gates)
}

/// A VMI or VM read from the input.
pub enum Workload {
    /// A VirtualMachineInstance.
    Vmi(Box<VirtualMachineInstance>),
    /// A VirtualMachine.
    Vm(Box<VirtualMachine>),
}

/// The documents of `text` as `kvrs`'s `parse_documents` reads them: JSON when it starts with
/// `{` or `[`, else YAML documents separated by `---` (empty ones skipped). Stops at the first
/// document that does not parse, as the CLI does.
fn documents(text: &str) -> Vec<serde_json::Value> {
    let start = text.trim_start();
    if start.starts_with('{') || start.starts_with('[') {
        return serde_json::from_str(text).into_iter().collect();
    }
    let mut docs = Vec::new();
    for de in serde_norway::Deserializer::from_str(text) {
        let Ok(value) = serde_norway::Value::deserialize(de) else {
            break;
        };
        if value.is_null() {
            continue;
        }
        match serde_json::to_value(value) {
            Ok(doc) => docs.push(doc),
            Err(_) => break,
        }
    }
    docs
}

/// Every VMI or VM in `data` (documents, then `kind: List` items), as `kvrs`'s
/// `read_workloads` finds them; objects of another kind or that do not deserialize are skipped.
pub fn workloads(data: &[u8]) -> Vec<Workload> {
    let Ok(text) = std::str::from_utf8(data) else {
        return Vec::new();
    };
    let mut objects = Vec::new();
    for doc in documents(text) {
        if doc.get("kind").and_then(|k| k.as_str()) == Some("List") {
            if let Some(serde_json::Value::Array(items)) = doc.get("items") {
                objects.extend(items.iter().cloned());
            }
        } else {
            objects.push(doc);
        }
    }
    objects
        .into_iter()
        .filter_map(|doc| match doc.get("kind").and_then(|k| k.as_str()) {
            Some("VirtualMachineInstance") => serde_json::from_value(doc)
                .ok()
                .map(|v| Workload::Vmi(Box::new(v))),
            Some("VirtualMachine") => serde_json::from_value(doc)
                .ok()
                .map(|v| Workload::Vm(Box::new(v))),
            _ => None,
        })
        .collect()
}

/// The VMI the cluster would store for `workload` (`kvrs`'s `admit_workload`), or `None` when
/// KubeVirt would refuse it. VMs that reference an instancetype or a preference are refused
/// before validation, as the CLI refuses them.
pub fn admitted(workload: Workload, config: &ClusterConfig) -> Option<VirtualMachineInstance> {
    let vmi = match workload {
        Workload::Vmi(vmi) => *vmi,
        Workload::Vm(vm) => {
            if vm.spec.instancetype.is_some() || vm.spec.preference.is_some() {
                return None;
            }
            validate_vm(&vm, config).ok()?;
            vmi_from_vm(&vm).ok()?
        }
    };
    admit(vmi, config).ok()
}

/// Every admitted VMI of `data`.
pub fn admitted_vmis(data: &[u8], config: &ClusterConfig) -> Vec<VirtualMachineInstance> {
    workloads(data)
        .into_iter()
        .filter_map(|w| admitted(w, config))
        .collect()
}

/// Panics when `path` has a `..` component: a path built from input must stay in the directory
/// it was built under. `what` names where the path was found.
pub fn assert_no_parent_component(what: &str, path: &str) {
    if path.split('/').any(|c| c == "..") {
        panic!("path escape: {what} = {path:?} has a `..` component");
    }
}
