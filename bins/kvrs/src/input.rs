//! Reading a VMI or VM from a file or standard input, with errors that name the field.

use std::io::Read;
use std::path::Path;

use kvrs_core::{VirtualMachine, VirtualMachineInstance};
use serde::Deserialize;
use serde::de::DeserializeOwned;

/// What went wrong, and the exit code it deserves.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The input could not be read or understood (exit code 2).
    #[error("{0}")]
    Input(String),
    /// KubeVirt would reject the object (exit code 2).
    #[error("{0}")]
    Rejected(String),
    /// Anything else that failed while doing the work (exit code 1).
    #[error("{0}")]
    Failed(String),
}

impl CliError {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Input(_) | CliError::Rejected(_) => 2,
            CliError::Failed(_) => 1,
        }
    }
}

/// Reads `path` (or standard input for `-`) as text.
pub fn read_text(path: &Path) -> Result<String, CliError> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::Input(format!("standard input: {e}")))?;
        return Ok(text);
    }
    std::fs::read_to_string(path).map_err(|e| CliError::Input(format!("{}: {e}", path.display())))
}

/// Parses YAML or JSON into a generic document.
pub fn parse_document(text: &str, origin: &str) -> Result<serde_json::Value, CliError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(text)
            .map_err(|e| CliError::Input(format!("{origin}: not valid JSON: {e}")));
    }
    let value: serde_yaml::Value = serde_yaml::from_str(text)
        .map_err(|e| CliError::Input(format!("{origin}: not valid YAML or JSON: {e}")))?;
    serde_json::to_value(value)
        .map_err(|e| CliError::Input(format!("{origin}: unsupported YAML content: {e}")))
}

/// Deserializes a typed object, naming the field path on failure
/// (e.g. `spec.domain.devices.disks[0].name: missing field`).
pub fn typed<T: DeserializeOwned>(doc: serde_json::Value, origin: &str) -> Result<T, CliError> {
    serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." {
            "(top level)".to_string()
        } else {
            path
        };
        CliError::Input(format!("{origin}: {path}: {}", e.inner()))
    })
}

/// A VMI or VM as read from the command line.
pub enum Workload {
    /// A VirtualMachineInstance.
    Vmi(Box<VirtualMachineInstance>),
    /// A VirtualMachine.
    Vm(Box<VirtualMachine>),
}

impl Workload {
    /// The object as JSON, as it is sent to an API server.
    pub fn document(&self) -> serde_json::Value {
        let value = match self {
            Workload::Vmi(vmi) => serde_json::to_value(vmi),
            Workload::Vm(vm) => serde_json::to_value(vm),
        };
        let mut value = value.unwrap_or_default();
        let (kind, api_version) = match self {
            Workload::Vmi(_) => ("VirtualMachineInstance", "kubevirt.io/v1"),
            Workload::Vm(_) => ("VirtualMachine", "kubevirt.io/v1"),
        };
        if let Some(map) = value.as_object_mut() {
            map.entry("kind").or_insert(kind.into());
            map.entry("apiVersion").or_insert(api_version.into());
        }
        value
    }
}

/// How errors name the input `path` (`standard input` for `-`).
pub fn origin_of(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// Parses YAML (any number of `---`-separated documents) or JSON into generic documents; empty
/// YAML documents are skipped.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<serde_json::Value>, CliError> {
    if text.trim_start().starts_with('{') || text.trim_start().starts_with('[') {
        return Ok(vec![parse_document(text, origin)?]);
    }
    let mut docs = Vec::new();
    for (index, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = serde_yaml::Value::deserialize(de).map_err(|e| {
            CliError::Input(format!(
                "{origin} (document {index}): not valid YAML or JSON: {e}"
            ))
        })?;
        if value.is_null() {
            continue;
        }
        docs.push(serde_json::to_value(value).map_err(|e| {
            CliError::Input(format!(
                "{origin} (document {index}): unsupported YAML content: {e}"
            ))
        })?);
    }
    Ok(docs)
}

/// Reads every VMI or VM in `path`: each YAML document, and each item of a `kind: List`. Each
/// comes with the name errors give it: the file, plus the document index and the list item
/// when the file holds several objects.
pub fn read_workloads(path: &Path) -> Result<Vec<(String, Workload)>, CliError> {
    let file = origin_of(path);
    let docs = parse_documents(&read_text(path)?, &file)?;
    if docs.is_empty() {
        return Err(CliError::Input(format!(
            "{file}: no document; expected a VirtualMachineInstance or VirtualMachine"
        )));
    }
    let several_docs = docs.len() > 1;
    let mut objects = Vec::new();
    for (index, doc) in docs.into_iter().enumerate() {
        let doc_origin = if several_docs {
            format!("{file} (document {index})")
        } else {
            file.clone()
        };
        if doc.get("kind").and_then(|k| k.as_str()) == Some("List") {
            let items = match doc.get("items") {
                Some(serde_json::Value::Array(items)) => items.clone(),
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(_) => {
                    return Err(CliError::Input(format!(
                        "{doc_origin}: items: expected a list of objects"
                    )));
                }
            };
            for (i, item) in items.into_iter().enumerate() {
                let origin = if several_docs {
                    format!("{file} (document {index}, items[{i}])")
                } else {
                    format!("{file} (items[{i}])")
                };
                objects.push((origin, item));
            }
        } else {
            objects.push((doc_origin, doc));
        }
    }
    if objects.is_empty() {
        return Err(CliError::Input(format!(
            "{file}: an empty List; expected a VirtualMachineInstance or VirtualMachine"
        )));
    }
    objects
        .into_iter()
        .map(|(origin, doc)| Ok((origin.clone(), workload_of(doc, &origin)?)))
        .collect()
}

/// Reads a VMI or VM document from `path`.
pub fn read_workload(path: &Path) -> Result<Workload, CliError> {
    let origin = origin_of(path);
    let doc = parse_document(&read_text(path)?, &origin)?;
    workload_of(doc, &origin)
}

/// The typed VMI or VM of a generic document.
fn workload_of(doc: serde_json::Value, origin: &str) -> Result<Workload, CliError> {
    let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    match kind {
        "VirtualMachineInstance" => Ok(Workload::Vmi(Box::new(typed(doc, origin)?))),
        "VirtualMachine" => Ok(Workload::Vm(Box::new(typed(doc, origin)?))),
        "" if doc.is_object() => Err(CliError::Input(format!(
            "{origin}: kind: missing; expected VirtualMachineInstance or VirtualMachine"
        ))),
        "" => Err(CliError::Input(format!(
            "{origin}: expected an object of kind VirtualMachineInstance or VirtualMachine"
        ))),
        other => Err(CliError::Input(format!(
            "{origin}: kind: {other:?} is not VirtualMachineInstance or VirtualMachine"
        ))),
    }
}
