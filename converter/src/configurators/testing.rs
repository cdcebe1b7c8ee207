//! What the configurators' unit tests share: a VMI from a few lines of JSON, a configurator run
//! alone on an empty domain, and one element of the XML it writes.

use super::Configurator;
use crate::context::{Arch, ConverterContext};
use crate::domain::Domain;
use crate::error::ConvertError;
use kvrs_api::VirtualMachineInstance;
use serde_json::{Value, json};

/// A VMI `demo/vm` (UID `u1`) with the given spec, as the tests' JSON spells it (camelCase, no
/// defaults filled in).
pub(crate) fn vmi(spec: Value) -> VirtualMachineInstance {
    vmi_from(json!({
        "metadata": {"name": "vm", "namespace": "demo", "uid": "u1"},
        "spec": spec,
    }))
}

/// [`vmi`] with annotations.
pub(crate) fn annotated(annotations: Value, spec: Value) -> VirtualMachineInstance {
    vmi_from(json!({
        "metadata": {"name": "vm", "namespace": "demo", "uid": "u1", "annotations": annotations},
        "spec": spec,
    }))
}

/// A VMI from its whole JSON object (metadata, spec and status).
pub(crate) fn vmi_from(object: Value) -> VirtualMachineInstance {
    serde_json::from_value(object).expect("the test's VMI parses")
}

/// The VMI the all-devices snapshots convert: one that touches every configurator.
pub(crate) fn all_devices() -> VirtualMachineInstance {
    let text = include_str!("../../../fixtures/vmi/conv-all-devices.yaml");
    serde_norway::from_str(text).expect("the all-devices fixture parses")
}

/// Runs one configurator alone on an empty domain.
pub(crate) fn run(
    configurator: &dyn Configurator,
    vmi: &VirtualMachineInstance,
) -> Result<Domain, ConvertError> {
    let mut domain = Domain::default();
    configurator.configure(vmi, &mut domain)?;
    Ok(domain)
}

/// The first `<tag ...>` element of the domain's XML, from its start tag to its end tag, with the
/// indentation it had inside the domain taken off: what a configurator wrote, without the empty
/// domain around it. Empty when there is no such element.
pub(crate) fn element(domain: &Domain, tag: &str) -> String {
    let xml = domain.to_xml().expect("the domain writes as XML");
    let lines: Vec<&str> = xml.lines().collect();
    let open = format!("<{tag}");
    let starts = |line: &str| {
        line.trim_start()
            .strip_prefix(&open)
            .is_some_and(|rest| rest.starts_with([' ', '>', '/']))
    };
    let Some(first) = lines.iter().position(|l| starts(l)) else {
        return String::new();
    };
    let indent = lines[first].len() - lines[first].trim_start().len();
    let close = format!("</{tag}>");
    let single = {
        let l = lines[first].trim_end();
        l.ends_with("/>") || l.ends_with(&close)
    };
    let last = if single {
        first
    } else {
        let depth = &lines[first][..indent];
        (first..lines.len())
            .find(|&i| lines[i].strip_prefix(depth) == Some(close.as_str()))
            .expect("the element is closed")
    };
    lines[first..=last]
        .iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The default context on a node of `arch` (the guest runs on the node's architecture).
pub(crate) fn node(arch: Arch) -> ConverterContext {
    ConverterContext {
        architecture: arch,
        ..ConverterContext::default()
    }
}
