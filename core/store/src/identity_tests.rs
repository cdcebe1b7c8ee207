//! Issue 43: names are validated on create as kube-apiserver validates them, and no update or
//! patch — JSON, merge or strategic, in place or not — changes an object's name, namespace or
//! UID: it is refused (400 or 422) or leaves them as they were, and never panics.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::*;

fn rt(plural: &str) -> Arc<ResourceType> {
    by_plural(plural).unwrap()
}

fn vm(name: &str) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
           "metadata": {"name": name, "namespace": "ns", "labels": {"a": "b"}},
           "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}})
}

fn identity(o: &Obj) -> (Value, Value, Value) {
    let j = o.to_json();
    (
        j["metadata"]["name"].clone(),
        j["metadata"]["namespace"].clone(),
        j["metadata"]["uid"].clone(),
    )
}

#[test]
fn invalid_names_and_namespaces_are_refused_with_kube_apiservers_message() {
    let mut s = Store::default();
    for name in ["../x", "a/b", "..", ".", "a b", "a\0b", &"a".repeat(254)] {
        let e = s
            .create(
                &rt("virtualmachines"),
                Some("ns"),
                vm(name),
                &Default::default(),
            )
            .unwrap_err();
        assert_eq!((e.code(), e.reason()), (422, "Invalid"), "{name:?}: {e}");
        assert!(
            e.to_string().starts_with(&format!(
                "VirtualMachine.kubevirt.io {}",
                names::go_quote(name)
            )),
            "{e}"
        );
    }
    let e = s
        .create(
            &rt("pods"),
            Some("../../x"),
            json!({"metadata": {"name": "p"}}),
            &Default::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("metadata.namespace"), "{e}");
    let e = s
        .create(
            &rt("namespaces"),
            None,
            json!({"metadata": {"name": "a.b"}}),
            &Default::default(),
        )
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );
    let ns = s
        .create(
            &rt("namespaces"),
            None,
            json!({"metadata": {"name": "ok"}}),
            &Default::default(),
        )
        .unwrap();
    assert_eq!(
        ns.to_json()["metadata"]["labels"]["kubernetes.io/metadata.name"],
        "ok"
    );
}

fn any_patch() -> impl Strategy<Value = (PatchType, Value)> {
    let field = prop::sample::select(vec!["name", "namespace", "uid", "labels", "generation"]);
    let value = prop_oneof![
        Just(Value::Null),
        Just(json!("vm")),
        Just(json!("other")),
        Just(json!("../x")),
        Just(json!(7)),
        Just(json!({"k": "v"})),
    ];
    let op = prop::sample::select(vec!["add", "replace", "remove", "test"]);
    prop_oneof![
        (field.clone(), value.clone())
            .prop_map(|(f, v)| (PatchType::Merge, json!({"metadata": {f: v}}))),
        (field.clone(), value.clone()).prop_map(|(f, v)| (
            PatchType::StrategicMerge,
            json!({"metadata": {f: v}, "spec": {"runStrategy": "Always"}})
        )),
        (op.clone(), field, value.clone()).prop_map(|(o, f, v)| (
            PatchType::Json,
            json!([{"op": o, "path": format!("/metadata/{f}"), "value": v}])
        )),
        (op, value).prop_map(|(o, v)| (
            PatchType::Json,
            json!([{"op": o, "path": "/metadata", "value": v}])
        )),
        Just((PatchType::Merge, json!({"metadata": null}))),
        Just((PatchType::Json, json!({"not": "a list"}))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the patch, with the in-place path on or off: refused, or the identity kept.
    #[test]
    fn no_patch_changes_an_objects_identity(
        (kind, patch) in any_patch(),
        in_place in any::<bool>(),
        typed in any::<bool>(),
        status in any::<bool>(),
    ) {
        let mut s = Store::new(StoreOptions { typed, history: 100, keep_evicted: false });
        s.in_place = in_place;
        let r = rt("virtualmachines");
        let created = s.create(&r, Some("ns"), vm("vm"), &Default::default()).unwrap();
        let before = identity(&created);
        let sub = status.then_some("status");
        match s.patch(&r, "ns/vm", sub, kind, &patch, 1) {
            Ok(o) => prop_assert_eq!(identity(&o), before),
            Err(e) => prop_assert!(matches!(e.code(), 400 | 409 | 422), "{e}"),
        }
        let now = s.get(&r, "ns/vm").unwrap();
        prop_assert_eq!(identity(&now), identity(&created));
    }
}
