//! The requests virt-api's aggregated API reads (`subresources.kubevirt.io`): the path (with its
//! query) the aggregator forwards, the method and the body, through the same pure steps the
//! server runs before it fetches anything — `route`, the VM and VMI request readers, the
//! console/VNC stream reader — and then the decisions on a VM and VMI, both the well-formed
//! fixtures below and the body itself read as an object (a hostile stored object).
//!
//! Input: one byte choosing the method, then the path, a newline, the body. Asserts: no
//! panic; every refusal is a 4xx or 5xx `Status` with a message; a VM decision's patches are
//! JSON arrays of operations, each with a `test` precondition first (no write of an object it
//! only partly read); the handler path of a stream stays under the VMI it names.
#![no_main]

use kvrs_virt_api::subresources::{self, ApiError, Route, console, vm, vmi};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

const METHODS: [&str; 6] = ["GET", "PUT", "POST", "HEAD", "DELETE", "PATCH"];

fn refusal(e: &ApiError) {
    assert!((400..600).contains(&e.code), "a refusal is 4xx/5xx: {e:?}");
    assert!(!e.message.is_empty(), "a refusal says why: {e:?}");
    let body = e.body();
    assert_eq!(body["kind"], "Status");
    assert_eq!(body["code"], e.code);
}

fn fixture_vm() -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm1", "namespace": "default", "uid": "u1", "resourceVersion": "7"},
        "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {}}}}},
        "status": {"printableStatus": "Running"}})
}

fn fixture_vmi() -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "default", "uid": "u2", "resourceVersion": "9"},
        "spec": {"domain": {"devices": {}}},
        "status": {"phase": "Running", "nodeName": "node01",
            "conditions": [{"type": "AgentConnected", "status": "True"}]}})
}

fn vm_decisions(request: &vm::Request, vm: &Value, vmi: Option<&Value>, body: &[u8]) {
    match request.decide(vm, vmi, body) {
        Ok((plan, _dry_run)) => {
            for op in plan.patches.iter().chain(plan.rollback.iter()) {
                let ops = op.patch.as_array().expect("a patch is a JSON array");
                assert!(!ops.is_empty(), "no empty patch is sent");
            }
        }
        Err(e) => refusal(&e),
    }
}

fuzz_target!(
    init: {
        kvrs_fuzz::seeds::write_if_asked(seeds);
    },
    |data: &[u8]| {
        let Some((&m, rest)) = data.split_first() else {
            return;
        };
        let method = METHODS[usize::from(m) % METHODS.len()];
        let (target, body) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, &[][..]),
        };
        let Ok(target) = std::str::from_utf8(target) else {
            return;
        };
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let stored: Option<Value> = serde_json::from_slice::<Value>(body)
            .ok()
            .filter(Value::is_object);
        match subresources::route(path) {
            Some(Route::Vm { subresource, .. }) => match vm::Request::read(&subresource, method, body) {
                Ok(request) => {
                    vm_decisions(&request, &fixture_vm(), Some(&fixture_vmi()), body);
                    vm_decisions(&request, &fixture_vm(), None, body);
                    if let Some(o) = &stored {
                        vm_decisions(&request, o, Some(o), body);
                    }
                }
                Err(e) => refusal(&e),
            },
            Some(Route::Vmi { namespace, name, subresource }) => {
                if let Some(stream) = console::Stream::read(&subresource, query) {
                    let path = stream.handler_path(&namespace, &name);
                    assert!(path.starts_with(&format!(
                        "/v1/namespaces/{namespace}/virtualmachineinstances/{name}/"
                    )));
                    for o in [Some(fixture_vmi()), stored.clone()].into_iter().flatten() {
                        if let Err(e) = stream.validate(&o) {
                            refusal(&e);
                        }
                    }
                    return;
                }
                match vmi::Request::read(&subresource, method, body) {
                    Some(Ok(request)) => {
                        for o in [Some(fixture_vmi()), stored.clone()].into_iter().flatten() {
                            if let Err(e) = vmi::validate(request.action, &o) {
                                refusal(&e);
                            }
                            if let Err(e) = vmi::check_vm(request.action, &name, Some(&o)) {
                                refusal(&e);
                            }
                        }
                    }
                    Some(Err(e)) => refusal(&e),
                    None => {}
                }
            }
            Some(_) | None => {}
        }
    }
);

/// Each VM and VMI subresource kvrs reads, with the bodies KubeVirt's virtctl sends, plus a
/// stored object as a body.
fn seeds() -> Vec<Vec<u8>> {
    let base = "/apis/subresources.kubevirt.io/v1/namespaces/default";
    let mut out = Vec::new();
    let mut push = |method: u8, target: String, body: &str| {
        let mut seed = vec![method];
        seed.extend(target.into_bytes());
        seed.push(b'\n');
        seed.extend(body.as_bytes());
        out.push(seed);
    };
    for (sub, body) in [
        ("start", r#"{"paused":false}"#),
        ("stop", r#"{"gracePeriod":0}"#),
        ("restart", r#"{"gracePeriodSeconds":0,"dryRun":["All"]}"#),
    ] {
        push(1, format!("{base}/virtualmachines/vm1/{sub}"), body);
    }
    for sub in ["pause", "unpause", "softreboot", "reset", "freeze", "unfreeze"] {
        push(1, format!("{base}/virtualmachineinstances/vm1/{sub}"), r#"{"dryRun":["All"]}"#);
    }
    for sub in ["guestosinfo", "userlist", "filesystemlist", "console", "vnc?preserveSession=true"] {
        push(0, format!("{base}/virtualmachineinstances/vm1/{sub}"), "");
    }
    push(1, format!("{base}/virtualmachines/vm1/stop"), &fixture_vm().to_string());
    push(1, format!("{base}/virtualmachineinstances/vm1/pause"), &fixture_vmi().to_string());
    out
}
