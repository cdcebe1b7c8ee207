//! Reading a VMI or VM from a file or standard input, with errors that name the field.

use std::io::Read;
use std::path::Path;

use kvrs_core::{VirtualMachine, VirtualMachineInstance};
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

/// How errors name the input `path` (`standard input` for `-`).
pub fn origin_of(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

/// Reads a VMI or VM document from `path`.
pub fn read_workload(path: &Path) -> Result<Workload, CliError> {
    let origin = origin_of(path);
    let doc = parse_document(&read_text(path)?, &origin)?;
    let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    match kind {
        "VirtualMachineInstance" => Ok(Workload::Vmi(Box::new(typed(doc, &origin)?))),
        "VirtualMachine" => Ok(Workload::Vm(Box::new(typed(doc, &origin)?))),
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
