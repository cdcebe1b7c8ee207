//! The in-place patch of a typed VM or VMI gives exactly what the general path gives: the same
//! answer, the same stored JSON (text-exact, key order included), the same struct, the same
//! resourceVersion, generation and counters, for any sequence of patches.

use std::sync::Arc;

use kvrs_api::json_pointer::JsonPointer;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::*;

fn rt(plural: &str) -> Arc<ResourceType> {
    by_plural(plural).unwrap()
}

/// A VM with a status subresource and a VMI without one, both typed (or both JSON, in a store
/// that is not typed), with owner references,
/// finalizers and a status with conditions. A patch value may own the VMI by the VM's UID
/// (`…0001`), and a delete marks either (its finalizer holds it), so patches that change
/// owners or release a marked object are compared too.
fn seeded(in_place: bool) -> Store {
    seeded_as(in_place, true)
}

fn seeded_as(in_place: bool, typed: bool) -> Store {
    let mut s = Store::new(StoreOptions {
        typed,
        history: 100,
        keep_evicted: false,
    });
    s.in_place = in_place;
    let opts = CreateOptions::default();
    let vm = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm", "labels": {"a": "1"}, "annotations": {"x": "y"},
                     "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"kubevirt.io/vm": "vm"}},
                 "spec": {"domain": {"devices": {}, "cpu": {"cores": 1}, "memory": {"guest": "128Mi"}}}}}
    });
    let vmi = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "labels": {"kubevirt.io/vm": "vm"},
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm", "uid": "u-vm", "controller": true}],
                     "finalizers": ["foregroundDeleteVirtualMachine"]},
        "spec": {"domain": {"devices": {"disks": [{"name": "d"}]}, "cpu": {"cores": 1}}, "volumes": [{"name": "d", "containerDisk": {"image": "i"}}]},
        "status": {"phase": "Scheduling", "conditions": [{"type": "Ready", "status": "False"}]}
    });
    s.create(&rt("virtualmachines"), None, vm, &opts).unwrap();
    s.create(&rt("virtualmachineinstances"), None, vmi, &opts)
        .unwrap();
    s
}

const PATHS: &[&str] = &[
    "/status",
    "/status/phase",
    "/status/conditions",
    "/status/conditions/0",
    "/status/conditions/-",
    "/status/conditions/0/status",
    "/status/a~1b",
    "/status/printableStatus",
    "/status/notAField",
    "/metadata",
    "/metadata/labels",
    "/metadata/labels/a",
    "/metadata/annotations/x",
    "/metadata/finalizers",
    "/metadata/finalizers/0",
    "/metadata/resourceVersion",
    "/metadata/name",
    "/metadata/generation",
    "/metadata/ownerReferences",
    "/spec",
    "/spec/runStrategy",
    "/spec/domain/cpu/cores",
    "/spec/template/spec/domain/cpu",
    "/apiVersion",
    "/kind",
    "/notAField",
    "",
];

/// Values; `"$rv"` stands for the current resourceVersion (a precondition that holds).
fn values() -> Vec<Value> {
    vec![
        Value::Null,
        json!("Running"),
        json!("$rv"),
        json!("1"),
        json!(3),
        json!(true),
        json!({}),
        json!([]),
        json!({"a": "b"}),
        json!([{"type": "Ready", "status": "True"}]),
        json!({"domain": {"devices": {}}}),
        json!({"phase": "Running", "conditions": []}),
        json!({"name": "vm", "labels": {"b": "2"}}),
        json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "vm", "uid": "00000000-0000-4000-8000-000000000001"}]),
    ]
}

#[derive(Clone, Debug)]
enum Patch {
    Json(Vec<(&'static str, &'static str, usize)>),
    /// A conditional write: a `test` of the object's own resourceVersion (or of a stale one)
    /// before the operations, as controllers send it.
    Conditional(bool, Vec<(&'static str, &'static str, usize)>),
    Merge(Vec<(&'static str, usize)>, bool),
}

#[derive(Clone, Debug)]
struct Step {
    vmi: bool,
    status_sub: bool,
    patch: Patch,
    /// Delete the object before patching (its finalizer keeps it, marked).
    delete_first: bool,
}

fn step() -> impl Strategy<Value = Step> {
    let n = values().len();
    let op = (
        prop::sample::select(vec!["test", "add", "replace", "remove"]),
        prop::sample::select(PATHS.to_vec()),
        0..n,
    );
    let key = prop::sample::select(vec![
        "status",
        "metadata",
        "spec",
        "apiVersion",
        "notAField",
    ]);
    let patch = prop_oneof![
        prop::collection::vec(op.clone(), 0..4).prop_map(Patch::Json),
        (any::<bool>(), prop::collection::vec(op, 0..3))
            .prop_map(|(fresh, ops)| Patch::Conditional(fresh, ops)),
        (prop::collection::vec((key, 0..n), 0..3), any::<bool>())
            .prop_map(|(k, strategic)| Patch::Merge(k, strategic)),
    ];
    (
        any::<bool>(),
        any::<bool>(),
        patch,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(vmi, status_sub, patch, delete_first)| Step {
            vmi,
            status_sub,
            patch,
            delete_first,
        })
}

fn value(i: usize, rv: u64) -> Value {
    match values().swap_remove(i) {
        Value::String(s) if s == "$rv" => json!(rv.to_string()),
        v => v,
    }
}

fn apply(s: &mut Store, st: &Step) -> Result<String, String> {
    let rv = s.resource_version();
    let (resource, key) = if st.vmi {
        (rt("virtualmachineinstances"), "default/vm")
    } else {
        (rt("virtualmachines"), "default/vm")
    };
    let json_ops = |ops: &[(&str, &str, usize)]| -> Vec<Value> {
        ops.iter()
            .map(|(op, path, v)| json!({"op": op, "path": path, "value": value(*v, rv)}))
            .collect()
    };
    let (patch_type, body) = match &st.patch {
        Patch::Json(ops) => (PatchType::Json, Value::Array(json_ops(ops))),
        Patch::Conditional(fresh, ops) => {
            let own = s
                .get_json(&resource, key)
                .and_then(|o| o.at("/metadata/resourceVersion").cloned())
                .unwrap_or(Value::Null);
            let tested = if *fresh { own } else { json!("0") };
            let test = json!({"op": "test", "path": "/metadata/resourceVersion", "value": tested});
            let body: Vec<Value> = std::iter::once(test).chain(json_ops(ops)).collect();
            (PatchType::Json, Value::Array(body))
        }
        Patch::Merge(keys, strategic) => (
            if *strategic {
                PatchType::StrategicMerge
            } else {
                PatchType::Merge
            },
            Value::Object(
                keys.iter()
                    .map(|(k, v)| (k.to_string(), value(*v, rv)))
                    .collect(),
            ),
        ),
    };
    let sub = st.status_sub.then_some("status");
    if st.delete_first {
        let _ = s.delete(&resource, key, &DeleteOptions::default(), 7);
    }
    s.patch(&resource, key, sub, patch_type, &body, 7)
        .map(|o| {
            let variant = match &*o {
                Obj::Vm(_) => "vm",
                Obj::Vmi(_) => "vmi",
                Obj::Other(_) => "other",
            };
            format!("{variant} {}", serde_json::to_string(&o.to_json()).unwrap())
        })
        .map_err(|e| e.to_string())
}

/// Both objects as stored, and who the store thinks they own and are owned by.
fn stored(s: &Store) -> Vec<String> {
    let mut out: Vec<String> = ["virtualmachines", "virtualmachineinstances"]
        .iter()
        .map(|r| serde_json::to_string(&s.get_json(&rt(r), "default/vm")).unwrap())
        .collect();
    for uid in ["u-vm", "00000000-0000-4000-8000-000000000001"] {
        out.push(format!("{uid}: {:?}", s.dependents_index(uid)));
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn in_place_patches_equal_the_general_path(
        steps in prop::collection::vec(step(), 1..12),
        typed in any::<bool>(),
    ) {
        let mut fast = seeded_as(true, typed);
        let mut general = seeded_as(false, typed);
        for st in &steps {
            let a = apply(&mut fast, st);
            let b = apply(&mut general, st);
            prop_assert_eq!(&a, &b, "answer of {:?}", st);
            prop_assert_eq!(stored(&fast), stored(&general), "stored after {:?}", st);
            prop_assert_eq!(fast.resource_version(), general.resource_version());
            prop_assert_eq!(fast.stats.writes, general.stats.writes);
            prop_assert_eq!(fast.stats.refused, general.stats.refused);
            prop_assert_eq!(&fast.stats.refused_by, &general.stats.refused_by);
        }
        prop_assert_eq!(general.stats.in_place_patches, 0);
    }
}

/// A patch that loses the object's name and sets a stale resourceVersion is refused for the
/// name, as the apiserver refuses it (the name is checked while the patch is applied, the
/// resourceVersion precondition after), on both paths.
#[test]
fn a_lost_name_is_reported_before_a_stale_resource_version() {
    for in_place in [true, false] {
        let mut s = seeded(in_place);
        let err = s
            .patch(
                &rt("virtualmachines"),
                "default/vm",
                None,
                PatchType::Json,
                &json!([{"op": "add", "path": "/metadata/name", "value": null},
                        {"op": "add", "path": "/metadata/resourceVersion", "value": "1"}]),
                0,
            )
            .expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the name of the object (vm based on URL) was undeterminable: name must be provided",
            "in place: {in_place}"
        );
    }
}

/// The patches the controllers send most — a VMI status change, a VM status subresource
/// write, a VM metadata edit — take the in-place path, and what they store is typed.
#[test]
fn common_patches_go_in_place() {
    let mut s = seeded(true);
    let vmi = rt("virtualmachineinstances");
    let vm = rt("virtualmachines");
    let o = s
        .patch(
            &vmi,
            "default/vm",
            None,
            PatchType::Json,
            &json!([{"op": "test", "path": "/status/phase", "value": "Scheduling"},
                    {"op": "replace", "path": "/status/phase", "value": "Scheduled"}]),
            0,
        )
        .unwrap();
    assert_eq!(
        o.vmi().unwrap().status.as_ref().unwrap().phase.as_deref(),
        Some("Scheduled")
    );
    s.patch(
        &vm,
        "default/vm",
        Some("status"),
        PatchType::Json,
        &json!([{"op": "add", "path": "/status", "value": {"printableStatus": "Starting"}}]),
        0,
    )
    .unwrap();
    let o = s
        .patch(
            &vm,
            "default/vm",
            None,
            PatchType::Merge,
            &json!({"metadata": {"annotations": {"kubevirt.io/x": "1"}}}),
            0,
        )
        .unwrap();
    assert_eq!(
        o.vm().unwrap().metadata.annotations.as_ref().unwrap()["kubevirt.io/x"],
        "1"
    );
    assert_eq!(s.stats.in_place_patches, 3);
    assert_eq!(
        s.get_json(&vm, "default/vm").unwrap()["metadata"]["resourceVersion"],
        json!(s.resource_version().to_string())
    );
}

/// A conditional status write (the VMI controller's): the resourceVersion test is checked
/// against the struct; a fresh version is written, a stale one refused with the test's error.
#[test]
fn a_conditional_write_is_checked_against_the_stored_version() {
    let vmi = rt("virtualmachineinstances");
    let write = |s: &mut Store, rv: &Value, phase: &str| {
        let patch = json!([{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                           {"op": "replace", "path": "/status/phase", "value": phase}]);
        s.patch(&vmi, "default/vm", None, PatchType::Json, &patch, 0)
    };
    let mut s = seeded(true);
    let rv = s.get_json(&vmi, "default/vm").unwrap()["metadata"]["resourceVersion"].clone();
    let o = write(&mut s, &rv, "Scheduled").unwrap();
    assert_eq!(
        o.vmi().unwrap().status.as_ref().unwrap().phase.as_deref(),
        Some("Scheduled")
    );
    let stale = write(&mut s, &rv, "Running").unwrap_err();
    assert!(
        stale.to_string().contains("/metadata/resourceVersion"),
        "{stale}"
    );
    assert_eq!(s.stats.in_place_patches, 2);
    // The general path, given the same two writes, refuses the second with the same error.
    let mut general = seeded(false);
    write(&mut general, &rv, "Scheduled").unwrap();
    let refused = write(&mut general, &rv, "Running").unwrap_err();
    assert_eq!(refused.to_string(), stale.to_string());
}

/// An edit of named fields stores what the same edit of the whole object stores — the JSON
/// (key order included), the owners the store indexes, the resourceVersion and the write
/// count — for typed and JSON stores, whether it adds, changes or removes (the edits name
/// every field they touch, as [`Store::edit_fields_unchecked`] requires).
#[test]
fn an_edit_of_named_fields_equals_the_whole_edit() {
    type Edit = fn(&mut Value);
    let edits: [(&[&str], Edit); 5] = [
        (&["metadata", "status"], |v| {
            v["metadata"]["labels"]["sim.kvrs.io/marker"] = json!("kept");
            v["status"]["simMarker"] = json!("kept");
        }),
        (&["metadata"], |v| {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "X",
                "name": "o", "uid": "00000000-0000-4000-8000-000000000001"}]);
        }),
        (&["status"], |v| {
            if let Some(s) = v["status"].as_object_mut() {
                s.remove("conditions");
            }
        }),
        (&["spec", "metadata"], |v| {
            v["spec"]["runStrategy"] = json!("Halted");
            v["metadata"]["generation"] = json!(7);
        }),
        (&["status"], |v| v["status"] = json!({"phase": "Running"})),
    ];
    for typed in [true, false] {
        for (fields, edit) in edits {
            let (mut named, mut whole) = (seeded_as(true, typed), seeded_as(true, typed));
            for r in ["virtualmachines", "virtualmachineinstances"] {
                let a = named.edit_fields_unchecked(&rt(r), "default/vm", fields, edit, 5);
                let b = whole.edit_unchecked(&rt(r), "default/vm", edit, 5);
                assert_eq!(a.is_some(), b.is_some());
                if typed {
                    // Typed stays typed: the edit was rebuilt into the struct.
                    assert!(!matches!(*a.unwrap(), Obj::Other(_)), "{r} {fields:?}");
                }
            }
            assert_eq!(stored(&named), stored(&whole), "{fields:?} typed {typed}");
            assert_eq!(named.resource_version(), whole.resource_version());
            assert_eq!(named.stats.writes, whole.stats.writes);
        }
    }
    let mut s = seeded(true);
    assert!(
        s.edit_fields_unchecked(
            &rt("virtualmachines"),
            "default/none",
            &["status"],
            |_| {},
            5
        )
        .is_none()
    );
}
