//! One test per rule of the store, and the resourceVersion/watch invariants as properties.

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};

use crate::*;

fn rt(plural: &str) -> Arc<ResourceType> {
    by_plural(plural).unwrap()
}

fn at(now: i64) -> CreateOptions {
    CreateOptions {
        now,
        ..Default::default()
    }
}

fn pod(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": {"containers": []}})
}

fn json(o: &Obj) -> Value {
    o.to_json()
}

#[test]
fn create_fills_in_identity_and_refuses_duplicates() {
    let mut s = Store::default();
    let p = s.create(&rt("pods"), None, pod("a"), &at(10)).unwrap();
    let p = json(&p);
    assert_eq!(p["metadata"]["uid"], "00000000-0000-4000-8000-000000000001");
    assert_eq!(p["metadata"]["resourceVersion"], "1");
    assert_eq!(p["metadata"]["creationTimestamp"], "1970-01-01T00:00:10Z");
    assert_eq!(p["status"]["phase"], "Pending");
    let e = s.create(&rt("pods"), None, pod("a"), &at(10)).unwrap_err();
    assert_eq!(e.label(), "already_exists");
    assert_eq!(e.code(), 409);
    let g = json!({"metadata": {"generateName": "x-"}});
    let opts = CreateOptions {
        now: 0,
        uid: Some("u-1".into()),
        name_suffix: Some("abcde".into()),
    };
    let o = json(
        &s.create(&rt("configmaps"), Some("ns"), g.clone(), &opts)
            .unwrap(),
    );
    assert_eq!(o["metadata"]["name"], "x-abcde");
    assert_eq!(o["metadata"]["uid"], "u-1");
    let o = json(&s.create(&rt("configmaps"), Some("ns"), g, &at(0)).unwrap());
    assert_eq!(o["metadata"]["name"], "x-00001");
    assert_eq!(o["kind"], "ConfigMap");
    let e = s
        .create(
            &rt("configmaps"),
            Some("ns"),
            json!({"metadata": {}}),
            &at(0),
        )
        .unwrap_err();
    assert_eq!(e.code(), 400);
    // Cluster-scoped objects have no namespace.
    let n = json(
        &s.create(
            &rt("nodes"),
            Some("ns"),
            json!({"metadata": {"name": "n1", "namespace": "x"}}),
            &at(0),
        )
        .unwrap(),
    );
    assert!(n["metadata"].get("namespace").is_none());
    assert!(s.get(&rt("nodes"), "n1").is_some());
}

#[test]
fn stale_resource_version_is_a_conflict_in_updates_and_patches() {
    let mut s = Store::default();
    let r = rt("configmaps");
    s.create(
        &r,
        None,
        json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
        &at(0),
    )
    .unwrap();
    let stale = json!({"metadata": {"name": "c", "resourceVersion": "0"}, "data": {}});
    assert_eq!(
        s.update(&r, "default/c", None, stale, 0)
            .unwrap_err()
            .label(),
        "conflict"
    );
    let fresh = json!({"metadata": {"name": "c", "resourceVersion": "1"}, "data": {"a": "2"}});
    let o = json(&s.update(&r, "default/c", None, fresh, 0).unwrap());
    assert_eq!(o["data"]["a"], "2");
    assert_eq!(o["metadata"]["resourceVersion"], "2");
    let p = json!({"metadata": {"resourceVersion": "1"}, "data": {"a": "3"}});
    let e = s
        .patch(&r, "default/c", None, PatchType::Merge, &p, 0)
        .unwrap_err();
    assert_eq!(e.label(), "conflict");
    // A failed JSON-patch test is Invalid and changes nothing.
    let p = json!([{"op": "test", "path": "/data/a", "value": "9"}, {"op": "replace", "path": "/data/a", "value": "4"}]);
    let e = s
        .patch(&r, "default/c", None, PatchType::Json, &p, 0)
        .unwrap_err();
    assert_eq!((e.label(), e.code()), ("invalid", 422));
    assert_eq!(s.get_json(&r, "default/c").unwrap()["data"]["a"], "2");
    let p = json!([{"op": "test", "path": "/data/a", "value": "2"}, {"op": "replace", "path": "/data/a", "value": "4"}]);
    s.patch(&r, "default/c", None, PatchType::Json, &p, 0)
        .unwrap();
    assert_eq!(s.get_json(&r, "default/c").unwrap()["data"]["a"], "4");
    assert_eq!(
        s.patch(&r, "default/nope", None, PatchType::Merge, &json!({}), 0)
            .unwrap_err()
            .code(),
        404
    );
}

#[test]
fn status_subresource_splits_writes_and_generation_follows_spec() {
    let mut s = Store::default();
    let vm = rt("virtualmachines");
    let body = json!({"metadata": {"name": "vm"}, "spec": {"running": false}, "status": {"x": 1}});
    let o = json(&s.create(&vm, None, body, &at(0)).unwrap());
    assert!(o.get("status").is_none(), "create drops a CRD's status");
    assert_eq!(o["metadata"]["generation"], 1);
    s.patch(
        &vm,
        "default/vm",
        Some("status"),
        PatchType::Merge,
        &json!({"status": {"ready": true}, "spec": {"running": true}}),
        0,
    )
    .unwrap();
    let o = s.get_json(&vm, "default/vm").unwrap().clone();
    assert_eq!(o["status"]["ready"], true);
    assert_eq!(
        o["spec"]["running"], false,
        "a status write changes only status"
    );
    assert_eq!(o["metadata"]["generation"], 1);
    s.patch(
        &vm,
        "default/vm",
        None,
        PatchType::Merge,
        &json!({"status": {"ready": false}, "spec": {"running": true}}),
        0,
    )
    .unwrap();
    let o = s.get_json(&vm, "default/vm").unwrap().clone();
    assert_eq!(
        o["status"]["ready"], true,
        "a main write keeps the stored status"
    );
    assert_eq!(o["spec"]["running"], true);
    assert_eq!(o["metadata"]["generation"], 2);
    s.patch(
        &vm,
        "default/vm",
        None,
        PatchType::Merge,
        &json!({"metadata": {"labels": {"a": "b"}}}),
        0,
    )
    .unwrap();
    assert_eq!(
        s.get_json(&vm, "default/vm").unwrap()["metadata"]["generation"],
        2
    );

    // VMIs have no status subresource: a main write changes status, `/status` is not there.
    let vmi = rt("virtualmachineinstances");
    s.create(
        &vmi,
        None,
        json!({"metadata": {"name": "i"}, "spec": {}, "status": {"phase": "Pending"}}),
        &at(0),
    )
    .unwrap();
    assert_eq!(
        s.get_json(&vmi, "default/i").unwrap()["status"]["phase"],
        "Pending"
    );
    s.patch(
        &vmi,
        "default/i",
        None,
        PatchType::Merge,
        &json!({"status": {"phase": "Running"}}),
        0,
    )
    .unwrap();
    assert_eq!(
        s.get_json(&vmi, "default/i").unwrap()["status"]["phase"],
        "Running"
    );
    let e = s
        .patch(
            &vmi,
            "default/i",
            Some("status"),
            PatchType::Merge,
            &json!({}),
            0,
        )
        .unwrap_err();
    assert_eq!(e.code(), 404);
    assert!(
        s.get_json(&vmi, "default/i").unwrap()["metadata"]
            .get("generation")
            .is_none()
    );
}

#[test]
fn strategic_merge_patch_on_a_node() {
    let mut s = Store::default();
    let n = rt("nodes");
    s.create(&n, None, json!({"metadata": {"name": "n", "labels": {"a": "1"}}, "status": {"capacity": {"cpu": "2"}}}), &at(0)).unwrap();
    s.patch(
        &n,
        "n",
        None,
        PatchType::StrategicMerge,
        &json!({"metadata": {"labels": {"b": "2"}}}),
        0,
    )
    .unwrap();
    let o = s.get_json(&n, "n").unwrap();
    assert_eq!(o["metadata"]["labels"], json!({"a": "1", "b": "2"}));
    assert_eq!(
        o["status"]["capacity"]["cpu"], "2",
        "a node keeps the status it registered with"
    );
}

#[test]
fn finalizers_hold_a_deletion_until_emptied() {
    let mut s = Store::default();
    let r = rt("virtualmachines");
    s.create(
        &r,
        None,
        json!({"metadata": {"name": "vm", "finalizers": ["f"]}, "spec": {}}),
        &at(0),
    )
    .unwrap();
    let d = s
        .delete(&r, "default/vm", &DeleteOptions::default(), 5)
        .unwrap();
    let Deleted::Pending(o) = d else {
        panic!("removed despite a finalizer")
    };
    let o = json(&o);
    assert_eq!(o["metadata"]["deletionTimestamp"], "1970-01-01T00:00:05Z");
    assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 0);
    // Deletion is one-way; a second delete writes nothing.
    let rv = s.resource_version();
    s.delete(&r, "default/vm", &DeleteOptions::default(), 6)
        .unwrap();
    assert_eq!(s.resource_version(), rv);
    s.patch(
        &r,
        "default/vm",
        None,
        PatchType::Merge,
        &json!({"metadata": {"deletionTimestamp": null}}),
        7,
    )
    .unwrap();
    assert!(s.get_json(&r, "default/vm").unwrap()["metadata"]["deletionTimestamp"].is_string());
    s.patch(
        &r,
        "default/vm",
        None,
        PatchType::Json,
        &json!([{"op": "remove", "path": "/metadata/finalizers"}]),
        8,
    )
    .unwrap();
    assert!(s.get(&r, "default/vm").is_none());
}

#[test]
fn delete_preconditions() {
    let mut s = Store::default();
    let r = rt("configmaps");
    s.create(&r, None, json!({"metadata": {"name": "c"}}), &at(0))
        .unwrap();
    let wrong_uid = DeleteOptions {
        uid: Some("x".into()),
        ..Default::default()
    };
    assert_eq!(
        s.delete(&r, "default/c", &wrong_uid, 0)
            .unwrap_err()
            .label(),
        "conflict"
    );
    let wrong_rv = DeleteOptions {
        resource_version: Some("7".into()),
        ..Default::default()
    };
    assert_eq!(
        s.delete(&r, "default/c", &wrong_rv, 0).unwrap_err().label(),
        "conflict"
    );
    let right = DeleteOptions {
        uid: Some("00000000-0000-4000-8000-000000000001".into()),
        resource_version: Some("1".into()),
        ..Default::default()
    };
    assert!(matches!(
        s.delete(&r, "default/c", &right, 0).unwrap(),
        Deleted::Removed(_)
    ));
    assert_eq!(
        s.delete(&r, "default/c", &right, 0).unwrap_err().code(),
        404
    );
}

#[test]
fn bound_pods_terminate_gracefully_unbound_go_at_once() {
    let mut s = Store::default();
    let r = rt("pods");
    s.create(&r, None, pod("unbound"), &at(0)).unwrap();
    assert!(matches!(
        s.delete(&r, "ns/unbound", &DeleteOptions::default(), 0)
            .unwrap(),
        Deleted::Removed(_)
    ));
    s.create(&r, None, pod("p"), &at(0)).unwrap();
    s.bind(&r, "ns/p", "node1", 0).unwrap();
    assert_eq!(
        s.bind(&r, "ns/p", "node2", 0).unwrap_err().label(),
        "conflict"
    );
    assert_eq!(s.get_json(&r, "ns/p").unwrap()["spec"]["nodeName"], "node1");
    let Deleted::Pending(o) = s
        .delete(&r, "ns/p", &DeleteOptions::default(), 100)
        .unwrap()
    else {
        panic!()
    };
    let o = json(&o);
    assert_eq!(o["metadata"]["deletionGracePeriodSeconds"], 30);
    assert_eq!(o["metadata"]["deletionTimestamp"], "1970-01-01T00:02:10Z");
    let now = DeleteOptions {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    assert!(matches!(
        s.delete(&r, "ns/p", &now, 101).unwrap(),
        Deleted::Removed(_)
    ));
    assert!(s.get(&r, "ns/p").is_none());
    // A bound pod with a finalizer and grace 0 stays until its finalizers go.
    s.create(&r, None, json!({"metadata": {"name": "f", "namespace": "ns", "finalizers": ["x"]}, "spec": {"nodeName": "n"}}), &at(0)).unwrap();
    assert!(matches!(
        s.delete(&r, "ns/f", &now, 0).unwrap(),
        Deleted::Pending(_)
    ));
    s.patch(
        &r,
        "ns/f",
        None,
        PatchType::Merge,
        &json!({"metadata": {"finalizers": null}}),
        0,
    )
    .unwrap();
    assert!(s.get(&r, "ns/f").is_none());
}

fn owned_by(name: &str, owners: &[&str]) -> Value {
    let refs: Vec<Value> = owners
        .iter()
        .map(|u| json!({"apiVersion": "v1", "kind": "X", "name": "o", "uid": u}))
        .collect();
    json!({"metadata": {"name": name, "namespace": "ns", "ownerReferences": refs}, "spec": {}})
}

#[test]
fn owner_references_are_garbage_collected() {
    let mut s = Store::default();
    let (cm, pods) = (rt("configmaps"), rt("pods"));
    let owner = |s: &mut Store, n: &str| {
        json(
            &s.create(&cm, Some("ns"), json!({"metadata": {"name": n}}), &at(0))
                .unwrap(),
        )["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let a = owner(&mut s, "a");
    let b = owner(&mut s, "b");
    s.create(&pods, None, owned_by("only-a", &[&a]), &at(0))
        .unwrap();
    s.create(&pods, None, owned_by("a-and-b", &[&a, &b]), &at(0))
        .unwrap();
    s.create(&cm, Some("ns"), owned_by("later", &[]), &at(0))
        .unwrap();
    // Adopted after creation: the index follows updates too.
    s.patch(
        &cm,
        "ns/later",
        None,
        PatchType::Merge,
        &owned_by("later", &[&a]),
        0,
    )
    .unwrap();
    s.delete(&cm, "ns/a", &DeleteOptions::default(), 0).unwrap();
    assert!(s.get(&pods, "ns/only-a").is_none());
    assert!(s.get(&cm, "ns/later").is_none());
    let kept = s.get_json(&pods, "ns/a-and-b").unwrap();
    assert_eq!(
        kept["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "the dangling reference is dropped"
    );
    // Orphan keeps the dependents, without the reference.
    let orphan = DeleteOptions {
        propagation: Propagation::Orphan,
        ..Default::default()
    };
    s.delete(&cm, "ns/b", &orphan, 0).unwrap();
    let kept = s.get_json(&pods, "ns/a-and-b").unwrap();
    assert!(
        kept["metadata"]["ownerReferences"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // Foreground removes dependents first.
    let c = owner(&mut s, "c");
    s.create(&pods, None, owned_by("only-c", &[&c]), &at(0))
        .unwrap();
    let fg = DeleteOptions {
        propagation: Propagation::Foreground,
        ..Default::default()
    };
    s.delete(&cm, "ns/c", &fg, 0).unwrap();
    assert!(s.get(&pods, "ns/only-c").is_none() && s.get(&cm, "ns/c").is_none());
}

#[test]
fn lists_select_by_labels_and_fields() {
    let mut s = Store::default();
    let r = rt("pods");
    for (n, app, node) in [
        ("a", "web", Some("n1")),
        ("b", "db", None),
        ("c", "web", None),
    ] {
        let mut p = pod(n);
        p["metadata"]["labels"] = json!({"app": app});
        if let Some(node) = node {
            p["spec"]["nodeName"] = json!(node);
        }
        s.create(&r, None, p, &at(0)).unwrap();
    }
    let names = |sel: Selector| -> Vec<String> {
        s.list(&r, &sel)
            .items
            .iter()
            .map(|o| json(o)["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        names(Selector::parse(None, Some("app=web"), None).unwrap()),
        ["a", "c"]
    );
    assert_eq!(
        names(Selector::parse(None, Some("app=web"), Some("spec.nodeName=")).unwrap()),
        ["c"]
    );
    assert_eq!(
        names(Selector::parse(Some("ns"), None, Some("metadata.name!=a")).unwrap()),
        ["b", "c"]
    );
    assert_eq!(
        names(Selector::parse(Some("other"), None, None).unwrap()),
        Vec::<String>::new()
    );
    assert_eq!(s.list(&r, &Selector::all()).resource_version, 3);
}

/// With `keep_evicted`, the events the log pushes out (and the versions only they hold) wait in
/// the store for its owner to drop; without it, they are dropped at once.
#[test]
fn evicted_events_are_kept_for_the_owner_only_when_asked() {
    for keep_evicted in [true, false] {
        let mut s = Store::new(StoreOptions {
            typed: false,
            history: 2,
            keep_evicted,
        });
        let r = rt("pods");
        for name in ["a", "b", "c", "d"] {
            s.create(&r, None, pod(name), &at(0)).unwrap();
        }
        let evicted: Vec<u64> = s.take_evicted().iter().map(|e| e.rv).collect();
        let expected: &[u64] = if keep_evicted { &[1, 2] } else { &[] };
        assert_eq!(evicted, expected, "keep_evicted: {keep_evicted}");
        assert!(s.take_evicted().is_empty(), "taken once");
        assert_eq!(
            s.watch_from(&r, 2, &Selector::all(), usize::MAX)
                .unwrap()
                .len(),
            2,
            "the log still serves what it keeps"
        );
    }
}

#[test]
fn watches_report_selector_transitions_and_expire() {
    let mut s = Store::new(StoreOptions {
        typed: false,
        history: 4,
        keep_evicted: false,
    });
    let r = rt("pods");
    let mut p = pod("a");
    p["metadata"]["labels"] = json!({"app": "web"});
    s.create(&r, None, p, &at(0)).unwrap();
    s.patch(
        &r,
        "ns/a",
        None,
        PatchType::Merge,
        &json!({"metadata": {"labels": {"app": "db"}}}),
        0,
    )
    .unwrap();
    s.patch(
        &r,
        "ns/a",
        None,
        PatchType::Merge,
        &json!({"metadata": {"labels": {"app": "web"}}}),
        0,
    )
    .unwrap();
    s.delete(&r, "ns/a", &DeleteOptions::default(), 0).unwrap();
    let sel = Selector::parse(None, Some("app=web"), None).unwrap();
    let kinds: Vec<_> = s
        .watch_from(&r, 0, &sel, usize::MAX)
        .unwrap()
        .iter()
        .map(|e| (e.kind, e.rv))
        .collect();
    use EventKind::*;
    assert_eq!(kinds, [(Added, 1), (Deleted, 2), (Added, 3), (Deleted, 4)]);
    let last = s.watch_from(&r, 3, &Selector::all(), usize::MAX).unwrap();
    assert_eq!(
        json(&last[0].object)["metadata"]["resourceVersion"],
        "4",
        "a deletion carries its own resourceVersion"
    );
    s.create(&r, None, pod("b"), &at(0)).unwrap();
    let e = s
        .watch_from(&r, 0, &Selector::all(), usize::MAX)
        .unwrap_err();
    assert_eq!((e.label(), e.code()), ("expired", 410));
    assert_eq!(
        s.watch_from(&r, 1, &Selector::all(), usize::MAX)
            .unwrap()
            .len(),
        4
    );
}

#[test]
fn admission_can_default_and_refuse() {
    let mut s = Store::default();
    s.set_admission(Some(Arc::new(
        |op: Operation, _: &ResourceType, res: &str, v: &mut Value| {
            if res == "configmaps" && op == Operation::Create {
                v["data"] = json!({"defaulted": "yes"});
            }
            if v.pointer("/metadata/labels/bad").is_some() {
                return Err("bad label".into());
            }
            Ok(())
        },
    )));
    let r = rt("configmaps");
    let o = json(
        &s.create(&r, None, json!({"metadata": {"name": "c"}}), &at(0))
            .unwrap(),
    );
    assert_eq!(o["data"]["defaulted"], "yes");
    let e = s
        .patch(
            &r,
            "default/c",
            None,
            PatchType::Merge,
            &json!({"metadata": {"labels": {"bad": "1"}}}),
            0,
        )
        .unwrap_err();
    assert_eq!(e.code(), 422);
    assert!(e.to_string().contains("bad label"), "{e}");
}

#[test]
fn a_write_that_changes_nothing_is_no_write() {
    let mut s = Store::default();
    let r = rt("configmaps");
    s.create(
        &r,
        None,
        json!({"metadata": {"name": "c"}, "data": {"a": "1"}}),
        &at(0),
    )
    .unwrap();
    let rv = s.resource_version();
    let same = s
        .patch(
            &r,
            "default/c",
            None,
            PatchType::Merge,
            &json!({"data": {"a": "1"}}),
            5,
        )
        .unwrap();
    assert_eq!(json(&same)["metadata"]["resourceVersion"], rv.to_string());
    assert_eq!(s.resource_version(), rv, "no new resourceVersion");
    assert_eq!(
        s.watch_from(&r, rv, &Selector::all(), usize::MAX)
            .unwrap()
            .len(),
        0,
        "no event"
    );
    let mut replace = s.get_json(&r, "default/c").unwrap().into_owned();
    replace["metadata"]["resourceVersion"] = json!(rv.to_string());
    s.update(&r, "default/c", None, replace, 6).unwrap();
    assert_eq!(
        s.resource_version(),
        rv,
        "a replace with the same content is no write either"
    );
    s.patch(
        &r,
        "default/c",
        None,
        PatchType::Merge,
        &json!({"data": {"a": "2"}}),
        7,
    )
    .unwrap();
    assert_eq!(s.resource_version(), rv + 1, "a real change is");
}

#[derive(Clone, Debug)]
enum Op {
    Create(u8),
    Patch(u8),
    Delete(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..6).prop_map(Op::Create),
        (0u8..6).prop_map(Op::Patch),
        (0u8..6).prop_map(Op::Delete),
    ]
}

proptest! {
    /// After any sequence of writes, watching from any resourceVersion still kept yields
    /// exactly the later writes, in order, and each carries the resourceVersion it produced.
    #[test]
    fn watch_from_yields_exactly_the_later_writes(ops in proptest::collection::vec(op(), 1..60), history in 1usize..80) {
        let mut s = Store::new(StoreOptions {
            typed: false,
            history,
            keep_evicted: false,
        });
        let r = rt("configmaps");
        let mut writes: Vec<(u64, String)> = Vec::new();
        for op in ops {
            let before = s.resource_version();
            let _ = match op {
                Op::Create(n) => s.create(&r, None, json!({"metadata": {"name": format!("c{n}")}}), &at(0)).map(|_| ()),
                Op::Patch(n) => s.patch(&r, &format!("default/c{n}"), None, PatchType::Merge, &json!({"data": {"n": before.to_string()}}), 0).map(|_| ()),
                Op::Delete(n) => s.delete(&r, &format!("default/c{n}"), &DeleteOptions::default(), 0).map(|_| ()),
            };
            let after = s.resource_version();
            prop_assert!(after == before || after == before + 1, "one write, one resourceVersion");
            if after > before {
                let o = s.get_json(&r, &format!("default/c{}", match op { Op::Create(n) | Op::Patch(n) | Op::Delete(n) => n }));
                writes.push((after, o.map(|o| o["metadata"]["resourceVersion"].as_str().unwrap().to_string()).unwrap_or_default()));
            }
        }
        let current = s.resource_version();
        for from in 0..=current {
            let got = s.watch_from(&r, from, &Selector::all(), usize::MAX);
            if from < s.oldest_watchable() {
                prop_assert!(matches!(got, Err(StoreError::Expired { .. })), "expired");
                continue;
            }
            let got: Vec<u64> = got.unwrap().iter().map(|e| e.rv).collect();
            let want: Vec<u64> = writes.iter().map(|w| w.0).filter(|rv| *rv > from).collect();
            prop_assert_eq!(&got, &want);
            for e in s.watch_from(&r, from, &Selector::all(), usize::MAX).unwrap() {
                let o = json(&e.object);
                prop_assert_eq!(o["metadata"]["resourceVersion"].clone(), json!(e.rv.to_string()));
            }
        }
        prop_assert!(current - s.oldest_watchable() <= history as u64);
    }
}

/// A status write that touched only the status is kept as written; one that touched anything
/// else is rebuilt from the stored object. Either way the stored JSON (field order included)
/// is what `with_status(stored, written status)` makes.
#[test]
fn status_writes_keep_the_stored_fields_and_their_order() {
    use crate::object::with_status;
    use crate::store::only_status_differs;
    let cur = json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"p": 1}});
    let bare = json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}});
    let cases = [
        // status replaced in place: kept
        (
            &cur,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"p": 2}}),
            true,
        ),
        // status added to an object without one: kept (at the end, as with_status puts it)
        (
            &bare,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}, "status": {"p": 2}}),
            true,
        ),
        // spec changed too: rebuilt
        (
            &cur,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 2}, "status": {"p": 2}}),
            false,
        ),
        // status moved to the front (removed, then added): rebuilt
        (
            &cur,
            json!({"status": {"p": 2}, "apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}}),
            false,
        ),
        // a field dropped: rebuilt
        (
            &cur,
            json!({"apiVersion": "v1", "spec": {"x": 1}, "status": {"p": 2}}),
            false,
        ),
        // status removed: rebuilt (with_status writes it as null)
        (
            &cur,
            json!({"apiVersion": "v1", "metadata": {"name": "a"}, "spec": {"x": 1}}),
            false,
        ),
    ];
    for (i, (stored, written, kept)) in cases.into_iter().enumerate() {
        assert_eq!(only_status_differs(stored, &written), kept, "case {i}");
        if kept {
            let rebuilt = with_status(stored, written.get("status").cloned());
            assert_eq!(
                serde_json::to_string(&rebuilt).unwrap(),
                serde_json::to_string(&written).unwrap(),
                "case {i}: kept JSON differs from the rebuilt one"
            );
        }
    }

    // Through the store: a VM status patch leaves spec and the field order as stored.
    let mut s = Store::default();
    let vm = rt("virtualmachines");
    let body = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "vm"}, "spec": {"running": false}});
    s.create(&vm, None, body, &at(0)).unwrap();
    s.patch(
        &vm,
        "default/vm",
        Some("status"),
        PatchType::Json,
        &json!([{"op": "add", "path": "/status", "value": {"ready": true}}]),
        0,
    )
    .unwrap();
    let o = s.get_json(&vm, "default/vm").unwrap();
    let keys: Vec<&str> = o.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"]);
    assert_eq!(o["status"]["ready"], true);
}
