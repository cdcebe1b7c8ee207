//! kvrs's status validator against KubeVirt v1.9.0's own: the same VM status writes go through
//! `VMsAdmitter.AdmitStatus`, imported from the kubevirt.io/kubevirt module by the Go harness
//! `tests/volumerequests` (built by `scripts/volumerequests-harness.sh`; the test fails when it
//! cannot be built), and through kvrs's `/status-validate` webhook decision, with the VMI the
//! webhook asks to read handed to it as the Go side reads it from its fake clientset. Whether
//! each is admitted, the HTTP code, the message and every cause (type, field, message) must be
//! the same.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kvrs_admission::ClusterConfig;
use kvrs_api::time::Now;
use kvrs_virt_api::webhooks::{Context, Facts, Lookup, Webhook, admit, lookup};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The harness binary, built (or found in the cache) by its script.
fn harness() -> PathBuf {
    let out = Command::new("bash")
        .arg(root().join("scripts/volumerequests-harness.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("running scripts/volumerequests-harness.sh");
    assert!(
        out.status.success(),
        "scripts/volumerequests-harness.sh failed: it needs Go and the module proxy"
    );
    let text = String::from_utf8(out.stdout).expect("utf-8");
    PathBuf::from(text.lines().last().expect("the binary's path").trim())
}

fn vm(status: Value) -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {
                "devices": {"disks": [
                    {"name": "root", "disk": {"bus": "virtio"}},
                    {"name": "data", "disk": {"bus": "virtio"}},
                ]},
                "resources": {"requests": {"memory": "128Mi"}},
            },
            "volumes": [
                {"name": "root", "containerDisk": {"image": "img"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
            ],
        }}},
        "status": status})
}

fn vmi(extra_volume: Option<Value>, status: Value, deleting: bool) -> Value {
    let template = vm(json!({}))["spec"]["template"]["spec"].clone();
    let mut v = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "default"},
        "spec": template, "status": status});
    if let Some(volume) = extra_volume {
        let name = volume["name"].clone();
        v["spec"]["volumes"].as_array_mut().unwrap().push(volume);
        v["spec"]["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "disk": {"bus": "scsi"}}));
    }
    if deleting {
        v["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
        v["metadata"]["finalizers"] = json!(["kvrs.test/keep"]);
    }
    v
}

fn add(name: &str, claim: &str, disk: Value) -> Value {
    let mut disk = disk;
    disk["name"] = json!(name);
    json!({"addVolumeOptions": {"name": name, "disk": disk,
        "volumeSource": {"persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}}}})
}

fn scsi() -> Value {
    json!({"disk": {"bus": "scsi"}})
}

fn remove(name: &str) -> Value {
    json!({"removeVolumeOptions": {"name": name}})
}

/// (name, VM, the VMI in the cluster).
fn scenarios() -> Vec<(String, Value, Option<Value>)> {
    let not_ready = |requests: Value| vm(json!({"volumeRequests": requests}));
    let ready = |requests: Value| vm(json!({"ready": true, "volumeRequests": requests}));
    let mut both = add("hot", "c", scsi());
    both["removeVolumeOptions"] = json!({"name": "hot"});
    let booted = |name: &str, order: i64| {
        add(
            name,
            name,
            json!({"disk": {"bus": "virtio"}, "bootOrder": order}),
        )
    };
    let dv = json!({"name": "hot", "dataVolume": {"name": "dv"}});
    let past = "2020-01-01T00:00:00Z";
    let plain = |name: &str, v: Value| (name.to_string(), v, None);
    vec![
        plain("no-requests", vm(json!({}))),
        plain(
            "valid-add-and-remove",
            not_ready(json!([add("hot", "c", scsi()), remove("data")])),
        ),
        plain(
            "add-and-remove-of-one-name",
            not_ready(json!([add("hot", "c", scsi()), remove("hot")])),
        ),
        plain("both-options", not_ready(json!([both]))),
        plain("neither-option", not_ready(json!([{}]))),
        plain(
            "duplicate-add",
            not_ready(json!([add("hot", "c1", scsi()), add("hot", "c2", scsi())])),
        ),
        plain(
            "duplicate-remove",
            not_ready(json!([remove("data"), remove("data")])),
        ),
        plain(
            "sata-disk",
            not_ready(json!([add("hot", "c", json!({"disk": {"bus": "sata"}}))])),
        ),
        plain(
            "virtio-lun",
            not_ready(json!([add("hot", "c", json!({"lun": {"bus": "virtio"}}))])),
        ),
        plain(
            "cdrom",
            not_ready(json!([add("hot", "c", json!({"cdrom": {"bus": "scsi"}}))])),
        ),
        plain(
            "io-thread-on-scsi",
            not_ready(json!([add(
                "hot",
                "c",
                json!({"disk": {"bus": "scsi"}, "dedicatedIOThread": true})
            )])),
        ),
        plain("boot-order-zero", not_ready(json!([booted("hot", 0)]))),
        plain(
            "template-conflict",
            not_ready(json!([add("data", "other", scsi())])),
        ),
        plain(
            "template-same-volume",
            not_ready(json!([{"addVolumeOptions": {"name": "data",
            "disk": {"name": "data", "disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "data-claim"}}}}])),
        ),
        plain(
            "duplicate-boot-order",
            not_ready(json!([booted("a", 1), booted("b", 1)])),
        ),
        (
            "ready-without-vmi".into(),
            ready(json!([add("hot", "c", scsi())])),
            None,
        ),
        (
            "ready-vmi-conflict".into(),
            ready(json!([add("hot", "c", scsi())])),
            Some(vmi(Some(dv.clone()), json!({}), false)),
        ),
        (
            "ready-vmi-being-deleted".into(),
            ready(json!([add("hot", "c", scsi())])),
            Some(vmi(Some(dv.clone()), json!({}), true)),
        ),
        (
            "not-ready-vmi-conflict".into(),
            not_ready(json!([add("hot", "c", scsi())])),
            Some(vmi(Some(dv), json!({}), false)),
        ),
        (
            "ready-vmi-migrating".into(),
            ready(json!([remove("data")])),
            Some(vmi(
                None,
                json!({"migrationState": {"startTimestamp": past}}),
                false,
            )),
        ),
        (
            "ready-vmi-migrated".into(),
            ready(json!([remove("data")])),
            Some(vmi(
                None,
                json!({"migrationState": {"startTimestamp": past,
                "endTimestamp": "2020-01-01T00:05:00Z"}}),
                false,
            )),
        ),
        (
            "ready-vmi-boot-order-clash".into(),
            ready(json!([booted("a", 1)])),
            {
                let mut v = vmi(None, json!({}), false);
                v["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] = json!(1);
                Some(v)
            },
        ),
    ]
}

/// kvrs's answer as the harness writes KubeVirt's.
fn kvrs_answer(name: &str, vm: &Value, vmi: Option<&Value>, now: Now) -> Value {
    let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "1", "operation": "UPDATE", "namespace": "default", "name": "vm",
            "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachines"},
            "subResource": "status", "userInfo": {"username": "alice"},
            "object": vm, "oldObject": vm}});
    let request = kvrs_virt_api::read_request(body.to_string().as_bytes())
        .unwrap_or_else(|(_, e)| panic!("{name}: {e}"));
    let facts = match lookup(Webhook::StatusValidate, &request) {
        None => Facts::default(),
        Some(Lookup::Vmi { namespace, name: n }) => {
            assert_eq!((namespace.as_str(), n.as_str()), ("default", "vm"));
            Facts {
                vmi: vmi.cloned(),
                ..Facts::default()
            }
        }
        Some(other) => panic!("{name}: unexpected lookup {other:?}"),
    };
    let config = ClusterConfig::default();
    let accounts = BTreeSet::new();
    let ctx = Context {
        config: &config,
        service_accounts: &accounts,
        controller_account: "",
        handler_account: "",
        now,
        fresh_uuids: Default::default(),
    };
    let verdict = admit(Webhook::StatusValidate, &request, &ctx, &facts);
    let status = verdict.status.as_deref();
    let causes: Vec<Value> = status
        .and_then(|s| s.details.as_ref())
        .map(|d| {
            d.causes
                .iter()
                .map(|c| json!({"type": c.kind, "field": c.field, "message": c.message}))
                .collect()
        })
        .unwrap_or_default();
    json!({"name": name, "allowed": verdict.allowed,
        "code": status.map_or(0, |s| s.code), "message": verdict.message(), "causes": causes})
}

#[test]
fn kvrs_answers_volume_requests_as_kubevirt_does() {
    let bin = harness();
    let cases = scenarios();
    let input: Vec<Value> = cases
        .iter()
        .map(|(name, vm, vmi)| json!({"name": name, "vm": vm, "vmi": vmi}))
        .collect();
    let mut child = Command::new(&bin)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the harness");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(input).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("the harness ran");
    assert!(out.status.success(), "the harness failed");
    let kubevirt: Vec<Value> = serde_json::from_slice(&out.stdout).expect("the harness's JSON");
    assert_eq!(kubevirt.len(), cases.len());
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let now = Now::from_unix(i64::try_from(seconds).expect("seconds fit i64"));
    let (mut refused, mut mismatches) = (0, Vec::new());
    for ((name, vm, vmi), theirs) in cases.iter().zip(&kubevirt) {
        let ours = kvrs_answer(name, vm, vmi.as_ref(), now);
        if theirs["allowed"] == false {
            refused += 1;
        }
        if &ours != theirs {
            mismatches.push(format!("{name}:\n  kubevirt: {theirs}\n  kvrs:     {ours}"));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    // The corpus exercises both answers.
    assert!(refused >= 10 && refused < cases.len(), "{refused} refused");
    eprintln!(
        "{} cases, {refused} refused, all as KubeVirt answers them",
        cases.len()
    );
}
