//! `--instancetype FILE|DIR` and `--preference FILE|DIR`: the instancetype and preference
//! objects a VM's `spec.instancetype` / `spec.preference` are looked up in, by kind and name as
//! KubeVirt looks them up (see [`kvrs_instancetype::Catalog`]).
//!
//! A FILE holds one or more objects (YAML documents, `kind: List` items); a DIR is every
//! `*.yaml`, `*.yml` and `*.json` file directly in it, where objects of other kinds are skipped
//! (so one directory can serve both flags). ControllerRevisions are kept too: a VM whose
//! `revisionName` names one is expanded from the object stored in it, as KubeVirt does.

use std::path::{Path, PathBuf};

use kvrs_instancetype::{Added, Catalog};

use crate::input::{CliError, origin_of, parse_documents, read_text};

/// The instancetype flags of `defaults`, `convert`, `overhead` and `pod`.
#[derive(clap::Args, Debug, Default)]
pub struct InstancetypeArgs {
    /// The (Cluster)VirtualMachineInstancetype objects VMs reference: a YAML/JSON file, or a
    /// directory of them (looked up by the VM's spec.instancetype kind and name).
    #[arg(long, value_name = "FILE|DIR")]
    pub instancetype: Option<PathBuf>,
    /// The (Cluster)VirtualMachinePreference objects VMs reference: a YAML/JSON file, or a
    /// directory of them (looked up by the VM's spec.preference kind and name).
    #[arg(long, value_name = "FILE|DIR")]
    pub preference: Option<PathBuf>,
}

/// The objects the flags name.
#[derive(Debug, Default)]
pub struct Instancetypes {
    /// Instancetypes (and ControllerRevisions) of `--instancetype`, when given.
    pub instancetypes: Option<Catalog>,
    /// Preferences (and ControllerRevisions) of `--preference`, when given.
    pub preferences: Option<Catalog>,
}

impl InstancetypeArgs {
    /// Reads the files or directories the flags name.
    pub fn load(&self) -> Result<Instancetypes, CliError> {
        Ok(Instancetypes {
            instancetypes: self
                .instancetype
                .as_deref()
                .map(|p| load(p, "--instancetype", Added::Instancetype))
                .transpose()?,
            preferences: self
                .preference
                .as_deref()
                .map(|p| load(p, "--preference", Added::Preference))
                .transpose()?,
        })
    }
}

/// The files of `path`: itself, or the YAML/JSON files directly in a directory, in name order.
fn files(path: &Path, flag: &str) -> Result<Vec<PathBuf>, CliError> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| CliError::Input(format!("{flag} {}: {e}", path.display())))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| CliError::Input(format!("{flag} {}: {e}", path.display())))?;
        let p = entry.path();
        let yaml_or_json = p
            .extension()
            .and_then(|x| x.to_str())
            .is_some_and(|x| matches!(x, "yaml" | "yml" | "json"));
        if yaml_or_json && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads the objects of `path` into a catalog; `wanted` is the kind the flag is for. A file given
/// directly must hold at least one object of that kind; a file of a directory may hold none.
fn load(path: &Path, flag: &str, wanted: Added) -> Result<Catalog, CliError> {
    let mut catalog = Catalog::default();
    let direct = !path.is_dir();
    let mut found = 0usize;
    for file in files(path, flag)? {
        let origin = origin_of(&file);
        let mut docs = Vec::new();
        for doc in parse_documents(&read_text(&file)?, &origin)? {
            if doc.get("kind").and_then(|k| k.as_str()) == Some("List") {
                let items = doc.get("items").and_then(|i| i.as_array()).cloned();
                docs.extend(items.unwrap_or_default());
            } else {
                docs.push(doc);
            }
        }
        for doc in docs {
            let kind = doc
                .get("kind")
                .and_then(|k| k.as_str())
                .unwrap_or("")
                .to_string();
            let kind_fits = match wanted {
                Added::Instancetype => kind.ends_with("Instancetype"),
                _ => kind.ends_with("Preference"),
            };
            if !kind_fits && kind != "ControllerRevision" {
                continue;
            }
            let added = catalog
                .add(doc)
                .map_err(|e| CliError::Input(format!("{flag} {origin}: {kind}: {e}")))?;
            if added == wanted {
                found += 1;
            }
        }
    }
    if direct && found == 0 && !catalog_has_revisions(&catalog) {
        let what = match wanted {
            Added::Instancetype => {
                "VirtualMachineInstancetype or VirtualMachineClusterInstancetype"
            }
            _ => "VirtualMachinePreference or VirtualMachineClusterPreference",
        };
        return Err(CliError::Input(format!(
            "{flag} {}: no {what} in the file",
            origin_of(path)
        )));
    }
    Ok(catalog)
}

fn catalog_has_revisions(catalog: &Catalog) -> bool {
    catalog.revision_count() > 0
}
