//! What Go's `encoding/json` writes for KubeVirt's API types, computed from the table
//! `tests/gotags` generates from `kubevirt.io/api` v1.9.0 (`core/api/go-json-rules.json`).
//!
//! [`GoRules::marshal`] models `json.Unmarshal` of a JSON document into a Go struct followed by
//! `json.Marshal`: every key the Go type knows is written by its kind and tag (`omitempty` drops
//! `false`, `0`, `""`, nil and empty slices and maps; struct values are always written; a zero
//! `resource.Quantity` writes `"0"`, a zero `metav1.Time` `null`; a key promoted through a nil
//! embedded pointer is not written). Values are passed through as written (Go would canonicalise
//! a quantity such as `1.5Gi`), and keys the Go type does not know are dropped. Tests use it to
//! derive the JSON kvrs must write from KubeVirt's types instead of typing it by hand.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{Map, Value, json};

/// One JSON key of a Go struct (an entry of `go-json-rules.json`).
#[derive(Clone, Debug, serde::Deserialize)]
pub struct GoField {
    /// Go field name.
    pub go: String,
    /// How `encoding/json` treats the value: pointer, struct, quantity, time, marshaler, string,
    /// bool, int, uint, float, slice, map or interface.
    pub kind: String,
    /// The Go type of the value (for pointers, slices and maps: of what they hold).
    #[serde(rename = "type")]
    pub ty: String,
    /// For pointers, slices and maps: the kind of what they point to or hold.
    #[serde(default)]
    pub elem: Option<String>,
    /// The `omitempty` tag option.
    pub omitempty: bool,
    /// The `omitzero` tag option.
    pub omitzero: bool,
    /// For quantity, time and marshaler kinds: the JSON of the Go zero value.
    #[serde(default)]
    pub zero: Option<Value>,
    /// Embedded structs the key is promoted through (`*` marks an embedded pointer).
    #[serde(default)]
    pub via: Option<Vec<String>>,
}

impl GoField {
    /// The embedded pointer the key is promoted through, as the path prefix naming it.
    fn nil_group(&self) -> Option<&[String]> {
        let via = self.via.as_deref()?;
        let i = via.iter().position(|v| v.starts_with('*'))?;
        Some(&via[..=i])
    }
}

/// One Go struct type of the table.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct GoType {
    /// Package path and name.
    pub go: String,
    /// The JSON keys and their rules.
    pub fields: BTreeMap<String, GoField>,
}

#[derive(serde::Deserialize)]
struct Table {
    types: BTreeMap<String, GoType>,
}

/// The table, by OpenAPI definition name (`v1.Features`), with a lookup by Go type name.
pub struct GoRules {
    /// Every struct type reachable from `v1.VirtualMachine` and `v1.VirtualMachineInstance`.
    pub types: BTreeMap<String, GoType>,
    by_go: BTreeMap<String, String>,
}

/// Where the committed table lives.
pub fn rules_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../core/api/go-json-rules.json")
}

fn is_scalar(kind: &str) -> bool {
    matches!(kind, "string" | "bool" | "int" | "uint" | "float")
}

/// Go's zero value of a scalar kind, as JSON.
pub fn scalar_zero(kind: &str) -> Value {
    match kind {
        "string" => json!(""),
        "bool" => json!(false),
        "float" => json!(0.0),
        _ => json!(0),
    }
}

/// True when `omitempty` drops this JSON value of a scalar, slice or map.
fn go_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

impl GoRules {
    /// Reads the committed table.
    pub fn load() -> Self {
        let path = rules_path();
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let table: Table =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let by_go = table
            .types
            .iter()
            .map(|(name, t)| (t.go.clone(), name.clone()))
            .collect();
        GoRules {
            types: table.types,
            by_go,
        }
    }

    /// The OpenAPI name of a Go struct type of the table.
    pub fn by_go_name(&self, go: &str) -> Option<&str> {
        self.by_go.get(go).map(String::as_str)
    }

    /// What Go writes for `input` read into the struct named `name` (see the module doc).
    pub fn marshal(&self, name: &str, input: &Value) -> Value {
        let ty = self
            .types
            .get(name)
            .unwrap_or_else(|| panic!("{name}: not in the Go rules"));
        let obj = input.as_object();
        let present = |k: &str| obj.is_some_and(|o| o.contains_key(k));
        let mut out = Map::new();
        for (key, field) in &ty.fields {
            if let Some(group) = field.nil_group() {
                // Go allocates an embedded pointer when the input names any of its keys.
                let allocated = ty
                    .fields
                    .iter()
                    .any(|(k, f)| f.nil_group() == Some(group) && present(k));
                if !allocated {
                    continue;
                }
            }
            let v = obj.and_then(|o| o.get(key)).filter(|v| !v.is_null());
            if let Some(written) = self.field(field, v) {
                out.insert(key.clone(), written);
            }
        }
        Value::Object(out)
    }

    /// The written value of one field holding `v` (`None`: nil, absent or JSON null); `None` when
    /// Go leaves the key out.
    fn field(&self, f: &GoField, v: Option<&Value>) -> Option<Value> {
        let omit = f.omitempty || f.omitzero;
        match f.kind.as_str() {
            k if is_scalar(k) => {
                let v = v.cloned().unwrap_or_else(|| scalar_zero(k));
                (!(omit && go_empty(&v))).then_some(v)
            }
            "struct" => Some(self.value(&f.ty, "struct", v.unwrap_or(&json!({})))),
            // A value type with its own MarshalJSON: Go writes the zero value's JSON (the table
            // has it), dropped only by omitzero.
            "quantity" | "time" | "marshaler" => match v {
                None if f.omitzero => None,
                // (`"zero": null` reads as None.)
                None => Some(f.zero.clone().unwrap_or(Value::Null)),
                Some(v) => Some(v.clone()),
            },
            "pointer" | "interface" => match v {
                None if omit => None,
                None => Some(Value::Null),
                Some(v) => Some(self.value(&f.ty, f.elem.as_deref().unwrap_or(""), v)),
            },
            "slice" | "map" => match v {
                None if omit => None,
                None => Some(Value::Null),
                Some(v) if f.omitempty && go_empty(v) => None,
                Some(v) => Some(self.container(f, v)),
            },
            other => panic!("{}: unknown Go kind {other}", f.go),
        }
    }

    fn container(&self, f: &GoField, v: &Value) -> Value {
        let elem = f.elem.as_deref().unwrap_or("");
        match v {
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.element(&f.ty, elem, i)).collect())
            }
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, i)| (k.clone(), self.element(&f.ty, elem, i)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// An element of a slice or map: a nil pointer element is written as `null`.
    fn element(&self, go_type: &str, elem_kind: &str, v: &Value) -> Value {
        if v.is_null() && elem_kind == "pointer" {
            return Value::Null;
        }
        self.value(go_type, elem_kind, v)
    }

    /// A non-nil value of Go type `go_type`: structs of the table recurse, the rest is written as
    /// it came.
    fn value(&self, go_type: &str, kind: &str, v: &Value) -> Value {
        match self.by_go_name(go_type) {
            Some(name) if kind != "quantity" && kind != "time" && kind != "marshaler" => {
                self.marshal(name, v)
            }
            _ => v.clone(),
        }
    }
}

/// kvrs-gotags, built (or found in ~/.cache/kvrs) by scripts/gotags.sh. Panics with the script's
/// output when Go or the build fails: the tests that need KubeVirt's Go types never skip.
pub fn gotags_tool() -> PathBuf {
    crate::go_harness("scripts/gotags.sh", "Go >= 1.26 and the Go module proxy")
}

/// Runs the tool with `arg`, `input` on stdin; its stdout.
pub fn run_gotags(arg: &str, input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let tool = gotags_tool();
    let mut child = Command::new(&tool)
        .arg(arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    let mut stdin = child.stdin.take().expect("piped stdin");
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("kvrs-gotags output");
    writer
        .join()
        .expect("stdin writer")
        .expect("write to kvrs-gotags");
    assert!(
        out.status.success(),
        "kvrs-gotags {arg} exited {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Each VirtualMachine / VirtualMachineInstance as KubeVirt's Go types write it back after
/// reading it (`json.Unmarshal` into `kubevirt.io/api`'s struct, then `json.Marshal`).
pub fn go_remarshal(docs: &[Value]) -> Vec<Value> {
    let input = serde_json::to_vec(docs).expect("JSON documents");
    let out = run_gotags("remarshal", &input);
    let back: Vec<Value> = serde_json::from_slice(&out).expect("kvrs-gotags remarshal output");
    assert_eq!(
        back.len(),
        docs.len(),
        "kvrs-gotags remarshal lost documents"
    );
    back
}

/// Each `(OpenAPI type name, value)` as KubeVirt's Go struct of that name writes the value back
/// after reading it (`kvrs-gotags remarshal-as`).
pub fn go_remarshal_as(docs: &[(&str, Value)]) -> Vec<Value> {
    let input: Vec<Value> = docs
        .iter()
        .map(|(ty, value)| json!({"type": ty, "value": value}))
        .collect();
    let out = run_gotags("remarshal-as", &serde_json::to_vec(&input).expect("JSON"));
    let back: Vec<Value> = serde_json::from_slice(&out).expect("kvrs-gotags remarshal-as output");
    assert_eq!(
        back.len(),
        docs.len(),
        "kvrs-gotags remarshal-as lost documents"
    );
    back
}
