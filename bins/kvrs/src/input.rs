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

/// The largest manifest kvrs reads: the kube-apiserver's default request-body limit
/// (`--max-request-body-bytes`, 3 MiB), so that a file a cluster would refuse is refused here too
/// and nothing later (admission, conversion, rendering) works on more than that.
pub const MAX_MANIFEST_BYTES: u64 = 3 << 20;

/// How deep `[`/`{` flow collections may nest: the recursion limit of both parsers kvrs uses
/// (serde_json and serde_norway stop at 128). Checked before parsing because the YAML scanner's
/// work grows with the square of the nesting (40 000 levels took 18 s to reach its own limit).
pub const MAX_FLOW_DEPTH: usize = 128;

/// Reads `path` (or standard input for `-`) as text, refusing more than [`MAX_MANIFEST_BYTES`].
pub fn read_text(path: &Path) -> Result<String, CliError> {
    let origin = origin_of(path);
    let mut text = String::new();
    let read = if path.as_os_str() == "-" {
        std::io::stdin()
            .take(MAX_MANIFEST_BYTES + 1)
            .read_to_string(&mut text)
    } else {
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_MANIFEST_BYTES + 1).read_to_string(&mut text))
    };
    read.map_err(|e| CliError::Input(format!("{origin}: {e}")))?;
    if text.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(CliError::Input(format!(
            "{origin}: larger than {MAX_MANIFEST_BYTES} bytes, the most an API server accepts \
             in one request"
        )));
    }
    Ok(text)
}

/// Refuses YAML whose flow collections nest deeper than [`MAX_FLOW_DEPTH`], before the YAML
/// parser sees it.
fn check_flow_depth(text: &str, origin: &str) -> Result<(), CliError> {
    match flow_too_deep(text, MAX_FLOW_DEPTH) {
        None => Ok(()),
        Some((line, column)) => Err(CliError::Input(format!(
            "{origin}: line {line} column {column}: [ ] and {{ }} nest deeper than \
             {MAX_FLOW_DEPTH} levels, the most kvrs reads"
        ))),
    }
}

/// Where (1-based line and column) `[`/`{` nesting first exceeds `limit`, in one linear pass.
///
/// Quoted scalars are skipped when the quote opens a token (after a line start, `[`, `{`, `,`,
/// `:`, `-` or `?`) and closes on the same line; `#` after a blank starts a comment. Anything
/// else is counted, so text the scan cannot place (a block scalar, a quoted scalar spanning
/// lines) can only make it count more, never hide real nesting: inside those the YAML parser
/// sees no structure at all.
fn flow_too_deep(text: &str, limit: usize) -> Option<(usize, usize)> {
    let b = text.as_bytes();
    let (mut depth, mut line, mut line_start) = (0usize, 1usize, 0usize);
    // Last byte that is not a blank: whether a quote here opens a token.
    let mut prev = b'\n';
    // Per quote kind, the end of a line known to hold no closing quote (no second look-ahead).
    let mut no_close = [0usize; 2];
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                line_start = i + 1;
                prev = c;
                i += 1;
                continue;
            }
            b' ' | b'\t' | b'\r' => {
                i += 1;
                continue;
            }
            b'#' if i == 0 || matches!(b[i - 1], b' ' | b'\t' | b'\n' | b'\r') => {
                i = line_end(b, i);
                continue;
            }
            b'"' | b'\'' if matches!(prev, b'\n' | b'[' | b'{' | b',' | b':' | b'-' | b'?') => {
                let kind = usize::from(c == b'\'');
                if i >= no_close[kind] {
                    match closing_quote(b, i) {
                        Some(end) => {
                            prev = c;
                            i = end + 1;
                            continue;
                        }
                        None => no_close[kind] = line_end(b, i),
                    }
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some((line, text[line_start..=i].chars().count()));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        prev = c;
        i += 1;
    }
    None
}

/// The index of the `\n` ending the line that holds `i` (or the text's length).
fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |n| i + n)
}

/// The quote closing the one at `open` on the same line: `\` escapes in double quotes, `''` in
/// single quotes.
fn closing_quote(b: &[u8], open: usize) -> Option<usize> {
    let q = b[open];
    let mut i = open + 1;
    while i < b.len() && b[i] != b'\n' {
        match b[i] {
            b'\\' if q == b'"' => i += 1,
            c if c == q => {
                if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                    i += 1;
                } else {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Parses YAML or JSON into a generic document.
pub fn parse_document(text: &str, origin: &str) -> Result<serde_json::Value, CliError> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        return serde_json::from_str(text)
            .map_err(|e| CliError::Input(format!("{origin}: not valid JSON: {e}")));
    }
    check_flow_depth(text, origin)?;
    let value: serde_norway::Value = serde_norway::from_str(text)
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
    check_flow_depth(text, origin)?;
    let mut docs = Vec::new();
    for (index, de) in serde_norway::Deserializer::from_str(text).enumerate() {
        let value = serde_norway::Value::deserialize(de).map_err(|e| {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_nesting_is_measured_outside_quotes_and_comments() {
        assert_eq!(flow_too_deep("a: [[[]]]", 3), None);
        assert_eq!(flow_too_deep("a: [[[[]]]]", 3), Some((1, 7)));
        // Brackets in quoted scalars and comments are text.
        assert_eq!(flow_too_deep("a: \"[[[[\"\nb: '[[[[ it''s'", 3), None);
        assert_eq!(flow_too_deep("a: [\"]]]]\", [[[]]]]", 3), Some((1, 15)));
        assert_eq!(flow_too_deep("a: 1 # [[[[\n", 3), None);
        // A quote inside a plain scalar opens nothing; brackets after it still count.
        assert_eq!(flow_too_deep("a: it's\nb: [[[[]]]]", 3), Some((2, 7)));
        // An unclosed quote (a block scalar line, a multi-line scalar) hides nothing.
        assert_eq!(flow_too_deep("a: |\n  \"\nb: [[[[]]]]", 3), Some((3, 7)));
        assert_eq!(flow_too_deep("a: foo\n  - \"x\nb: [[[[", 3), Some((3, 7)));
    }

    #[test]
    fn deep_flow_yaml_is_refused_before_the_parser_sees_it() {
        // issue 17: 40 000 levels took 18 s in serde_yaml (serde_norway has its scanner) before its
        // recursion-limit error.
        let text = format!("a: {}{}", "[".repeat(40_000), "]".repeat(40_000));
        let err = parse_document(&text, "x.yaml").unwrap_err().to_string();
        assert_eq!(
            err,
            "x.yaml: line 1 column 132: [ ] and { } nest deeper than 128 levels, the most kvrs \
             reads"
        );
        let err = parse_documents(&text, "x.yaml").unwrap_err().to_string();
        assert!(err.starts_with("x.yaml: line 1 column 132: "), "{err}");
        let ok = format!("a: {}{}", "[".repeat(100), "]".repeat(100));
        assert!(parse_document(&ok, "x.yaml").is_ok());
    }
}
