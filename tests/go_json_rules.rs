//! kvrs writes kubevirt.io/v1 objects as KubeVirt's Go types do.
//!
//! - The committed table `core/api/go-json-rules.json` is exactly what `tests/gotags` reads from
//!   kubevirt.io/api v1.9.0 by reflection (so the serde rules generated from it are KubeVirt's,
//!   not hand-patched).
//! - For every (type, key) of the table, in every state (absent, null, Go-zero, set), kvrs's
//!   generated type writes what the table says Go writes ([`GoRules::marshal`]), and KubeVirt's
//!   Go struct writes the same (`kvrs-gotags remarshal-as`); random combinations of states are
//!   checked against the table.
//! - The two examples of issue 18: after admission `features.kvm.hidden: false` and
//!   `features.apic.endOfInterrupt: false` are gone and a hostDisk without capacity says
//!   `capacity: "0"`, as the table and KubeVirt's own Go marshalling say.

use std::collections::{BTreeMap, BTreeSet};

use kvrs_core::admission::admit;
use kvrs_core::api::{REQUIRED_KEYS, reserialize_by_openapi_name};
use kvrs_core::{ClusterConfig, VirtualMachineInstance};
use kvrs_tests::go_json::{
    GoField, GoRules, go_remarshal, go_remarshal_as, rules_path, run_gotags, scalar_zero,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

#[test]
fn committed_table_is_what_kubevirts_go_types_say() {
    let generated = run_gotags("rules", b"");
    let committed = std::fs::read(rules_path()).expect("core/api/go-json-rules.json");
    assert!(
        generated == committed,
        "core/api/go-json-rules.json differs from `kvrs-gotags rules`: regenerate it with \
         \"$(bash scripts/gotags.sh | tail -n1)\" rules > core/api/go-json-rules.json, then \
         scripts/gen-api-types.py"
    );
    let rules = GoRules::load();
    println!(
        "{} Go struct types, {} JSON keys in the committed table",
        rules.types.len(),
        rules.types.values().map(|t| t.fields.len()).sum::<usize>()
    );
}

/// How a test sets one key of a struct.
#[derive(Clone, Copy, Debug, PartialEq)]
enum State {
    Absent,
    Null,
    Zero,
    Set,
}

const STATES: [State; 4] = [State::Absent, State::Null, State::Zero, State::Set];

struct Inputs<'a> {
    rules: &'a GoRules,
    required: BTreeSet<(&'static str, &'static str)>,
    text: String,
    number: u32,
}

impl Inputs<'_> {
    fn required(&self, ty: &str, key: &str) -> bool {
        self.required.contains(&(ty, key))
    }

    /// A value of a non-pointer kind; `set` picks a non-zero one.
    fn of_kind(&self, kind: &str, go_type: &str, set: bool) -> Value {
        match kind {
            "string" if set => json!(self.text),
            "bool" if set => json!(true),
            "int" | "uint" if set => json!(self.number),
            "float" if set => json!(f64::from(self.number) + 0.5),
            "string" | "bool" | "int" | "uint" | "float" => scalar_zero(kind),
            "quantity" if set => json!(format!("{}Mi", self.number)),
            "quantity" => json!("0"),
            "time" => json!("2024-01-02T03:04:05Z"),
            "struct" => self.minimal(self.struct_name(go_type)),
            "slice" => json!([]),
            "map" => json!({}),
            other => panic!("{go_type}: no test value for Go kind {other}"),
        }
    }

    fn struct_name(&self, go_type: &str) -> &str {
        self.rules
            .by_go_name(go_type)
            .unwrap_or_else(|| panic!("{go_type}: not in the Go rules"))
    }

    /// True when the key holds (directly, or through a pointer, slice or map) a k8s.io struct.
    fn holds_k8s_struct(&self, f: &GoField) -> bool {
        self.rules
            .by_go_name(&f.ty)
            .is_some_and(|n| n.starts_with("k8s.io."))
    }

    /// An element of a slice or map, or what a pointer points to.
    fn element(&self, f: &GoField, set: bool) -> Value {
        let kind = f
            .elem
            .as_deref()
            .expect("pointers, slices and maps name their elements");
        let kind = if kind == "pointer" {
            match self.rules.by_go_name(&f.ty) {
                Some(_) => "struct",
                None => "string",
            }
        } else {
            kind
        };
        self.of_kind(kind, &f.ty, set)
    }

    /// The value a test gives key `key` of `ty` in `state`; `None`: leave the key out.
    fn value(&self, ty: &str, key: &str, f: &GoField, state: State) -> Option<Value> {
        let nullable = matches!(f.kind.as_str(), "pointer" | "slice" | "map" | "time");
        // What a k8s.io value holds is written by k8s-openapi's types, not generated here.
        let state = match state {
            State::Zero | State::Set if self.holds_k8s_struct(f) => State::Null,
            s => s,
        };
        let state = match state {
            // Required Rust fields must be there (and hold a value) to be read at all.
            State::Absent | State::Null if self.required(ty, key) => State::Zero,
            State::Null if !nullable => State::Absent,
            s => s,
        };
        let set = state == State::Set;
        match state {
            State::Absent => None,
            State::Null => Some(Value::Null),
            _ => Some(match f.kind.as_str() {
                "pointer" => self.element(f, set),
                "slice" if set => json!([self.element(f, true)]),
                "map" if set => json!({"k": self.element(f, true)}),
                kind => self.of_kind(kind, &f.ty, set),
            }),
        }
    }

    /// An object of `ty` with only its required keys, each at its zero state.
    fn minimal(&self, ty: &str) -> Value {
        let t = &self.rules.types[ty];
        let obj: Map<String, Value> = t
            .fields
            .iter()
            .filter(|(k, _)| self.required(ty, k))
            .filter_map(|(k, f)| Some((k.clone(), self.value(ty, k, f, State::Zero)?)))
            .collect();
        Value::Object(obj)
    }

    fn object(&self, ty: &str, states: &BTreeMap<&str, State>) -> Value {
        let t = &self.rules.types[ty];
        let obj: Map<String, Value> = t
            .fields
            .iter()
            .filter_map(|(k, f)| {
                let state = states.get(k.as_str()).copied().unwrap_or(State::Absent);
                Some((k.clone(), self.value(ty, k, f, state)?))
            })
            .collect();
        Value::Object(obj)
    }
}

/// The kubevirt.io types kvrs generates (the k8s.io ones are k8s-openapi's).
fn kubevirt_types(rules: &GoRules) -> Vec<&str> {
    rules
        .types
        .keys()
        .map(String::as_str)
        .filter(|n| !n.starts_with("k8s.io."))
        .collect()
}

fn check(rules: &GoRules, ty: &str, input: &Value) -> Result<(), String> {
    let expected = rules.marshal(ty, input);
    let got = reserialize_by_openapi_name(ty, input.clone())
        .ok_or_else(|| format!("{ty}: no generated type of that name"))?
        .map_err(|e| format!("{ty}: kvrs cannot read {input}: {e}"))?;
    if got == expected {
        Ok(())
    } else {
        Err(format!(
            "{ty} read from {input}\n  kvrs writes {got}\n  Go writes   {expected}"
        ))
    }
}

fn inputs(rules: &GoRules, text: String, number: u32) -> Inputs<'_> {
    Inputs {
        rules,
        required: REQUIRED_KEYS.iter().copied().collect(),
        text,
        number,
    }
}

#[test]
fn every_key_of_every_type_is_written_as_go_writes_it() {
    let rules = GoRules::load();
    let inputs = inputs(&rules, "x".into(), 7);
    let mut failures = Vec::new();
    let mut cases = Vec::new();
    let mut k8s_valued = 0;
    for ty in kubevirt_types(&rules) {
        for (key, field) in &rules.types[ty].fields {
            if inputs.holds_k8s_struct(field) {
                k8s_valued += 1;
            }
            for state in STATES {
                let input = inputs.object(ty, &BTreeMap::from([(key.as_str(), state)]));
                if let Err(e) = check(&rules, ty, &input) {
                    failures.push(format!("{key} {state:?}: {e}"));
                }
                cases.push((ty, input));
            }
        }
    }
    // The model the other tests rely on, against KubeVirt's own Go structs on the same inputs.
    let go = go_remarshal_as(&cases);
    let mut go_agrees = 0;
    for ((ty, input), go) in cases.iter().zip(&go) {
        let model = rules.marshal(ty, input);
        if model == *go {
            go_agrees += 1;
        } else {
            failures.push(format!(
                "{ty} read from {input}\n  the table says Go writes {model}\n  Go writes {go}"
            ));
        }
    }
    println!(
        "{} (type, key, state) cases written as Go writes them ({go_agrees} checked against Go \
         itself); {k8s_valued} keys hold k8s.io structs (k8s-openapi's types), checked unset and \
         null only",
        cases.len()
    );
    assert!(cases.len() > 1000, "too few cases: {}", cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Random combinations: every key of a random type in a random state at once.
    #[test]
    fn random_objects_are_written_as_go_writes_them(
        pick in any::<prop::sample::Index>(),
        states in prop::collection::vec(0usize..4, 64),
        text in "[a-z]{1,8}",
        number in 1u32..100_000,
    ) {
        let rules = GoRules::load();
        let types = kubevirt_types(&rules);
        let ty = types[pick.index(types.len())];
        let keyed: BTreeMap<&str, State> = rules.types[ty]
            .fields
            .keys()
            .zip(states.iter().cycle())
            .map(|(k, s)| (k.as_str(), STATES[*s]))
            .collect();
        let inputs = inputs(&rules, text, number);
        let input = inputs.object(ty, &keyed);
        if let Err(e) = check(&rules, ty, &input) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// `metadata` is k8s-openapi's `ObjectMeta`, written through kvrs-api's `go_object_meta`: every
/// key of Go's `metav1.ObjectMeta`, unset, empty and set, inside a VMI.
#[test]
fn object_meta_is_written_as_go_writes_it() {
    let rules = GoRules::load();
    let meta = &rules.types["k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta"];
    let time = json!("2024-01-02T03:04:05Z");
    let mut cases = Vec::new();
    for (key, f) in &meta.fields {
        let (zero, set) = match (f.kind.as_str(), f.elem.as_deref()) {
            ("string", _) => (json!(""), json!("x")),
            ("int", _) | ("pointer", Some("int")) => (json!(0), json!(7)),
            ("map", _) => (json!({}), json!({"k": "v"})),
            ("slice", Some("string")) => (json!([]), json!(["x"])),
            ("slice", _) if key == "ownerReferences" => (
                json!([]),
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]),
            ),
            ("slice", _) if key == "managedFields" => (json!([]), json!([{"manager": "m"}])),
            ("time", _) | ("pointer", Some("time")) => (Value::Null, time.clone()),
            other => panic!("ObjectMeta.{key}: no test values for {other:?}"),
        };
        for value in [None, Some(zero), Some(set)] {
            let mut metadata = Map::new();
            if let Some(v) = value {
                metadata.insert(key.clone(), v);
            }
            cases.push(json!({
                "apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance",
                "metadata": metadata,
                "spec": {"domain": {"devices": {}}}
            }));
        }
    }
    let go = go_remarshal(&cases);
    let mut failures = Vec::new();
    for (input, go) in cases.iter().zip(&go) {
        let model = rules.marshal("v1.VirtualMachineInstance", input);
        let vmi: VirtualMachineInstance = serde_json::from_value(input.clone()).unwrap();
        let got = serde_json::to_value(&vmi).unwrap();
        if got != *go || model != *go {
            failures.push(format!(
                "{}\n  kvrs writes {}\n  the table says {}\n  Go writes {}",
                input["metadata"], got["metadata"], model["metadata"], go["metadata"]
            ));
        }
    }
    println!("{} ObjectMeta cases written as Go writes them", cases.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The two examples, through kvrs's admission (defaulting + validation).
#[test]
fn admitted_vmi_drops_false_features_and_writes_zero_capacity() {
    let input: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "gotags", "namespace": "default"},
        "spec": {
            "domain": {
                "features": {"kvm": {"hidden": false}, "apic": {"endOfInterrupt": false}},
                "resources": {"requests": {"memory": "128Mi"}},
                "devices": {"disks": [{"name": "host", "disk": {"bus": "virtio"}}]}
            },
            "volumes": [{"name": "host", "hostDisk": {"path": "/var/data/disk.img", "type": "Disk"}}]
        }
    }))
    .unwrap();
    let vmi = admit(input, &ClusterConfig::with_feature_gates("HostDisk")).expect("admitted");
    // The values are still there; only their JSON leaves them out.
    let features = vmi.spec.domain.features.as_ref().expect("features");
    assert_eq!(features.kvm.as_ref().and_then(|k| k.hidden), Some(false));
    let apic = features.apic.as_ref().expect("apic");
    assert_eq!(apic.end_of_interrupt, Some(false));

    let rules = GoRules::load();
    let got = serde_json::to_value(&vmi).unwrap();
    let features = &got["spec"]["domain"]["features"];
    let expected_kvm = rules.marshal("v1.FeatureKVM", &json!({"hidden": false}));
    assert_eq!(features["kvm"], expected_kvm);
    assert!(features["kvm"].get("hidden").is_none(), "{features}");
    let mut apic_in = serde_json::to_value(apic).unwrap();
    apic_in["endOfInterrupt"] = json!(false);
    assert_eq!(features["apic"], rules.marshal("v1.FeatureAPIC", &apic_in));
    assert!(
        features["apic"].get("endOfInterrupt").is_none(),
        "{features}"
    );

    let host_disk = &got["spec"]["volumes"][0]["hostDisk"];
    let expected_disk = rules.marshal(
        "v1.HostDisk",
        &json!({"path": "/var/data/disk.img", "type": "Disk"}),
    );
    assert_eq!(host_disk, &expected_disk);
    assert_eq!(host_disk["capacity"], json!("0"));

    // The whole object is a fixed point of the table's rules and of KubeVirt's own Go types.
    assert_eq!(got, rules.marshal("v1.VirtualMachineInstance", &got));
    assert_eq!(go_remarshal(std::slice::from_ref(&got)), vec![got]);
}
