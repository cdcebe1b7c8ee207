//! The legacy hotplug path's bad input on a real kube-apiserver: `status.volumeRequests` of a
//! VM (what `virtctl addvolume` writes without declarative hotplug) goes through kvrs's
//! `kubevirt-crd-status-validator` on `virtualmachines/status` and through the VM validator on
//! the VM itself, each answering with KubeVirt v1.9.0's message and field.
//!
//! The cluster is etcd + kube-apiserver (`Options::apiserver_only()`); the webhook
//! configurations of `bins/deploy/virt-api` are registered with their `clientConfig` pointed at
//! virt-api running in this process (as `tests/cluster.rs` does), so the status validator is
//! registered exactly as deployed.

mod support;

use std::time::Duration;

use kvrs_test_cluster::{Options, TestCluster};
use kvrs_virt_api::webhooks::Webhook;
use serde_json::{Value, json};
use support::{VirtApi, get_json, kubevirt_cr, loopback_addr, must, root, runtime, wait_for, yaml};

fn register_webhooks(cluster: &TestCluster, base: &str) {
    let dir = root().join("bins/deploy/virt-api");
    for file in [
        "mutatingwebhookconfiguration.yaml",
        "validatingwebhookconfiguration.yaml",
    ] {
        let mut conf = yaml(&dir.join(file));
        for hook in conf["webhooks"].as_array_mut().unwrap() {
            let path = hook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap()
                .to_string();
            assert!(Webhook::from_path(&path).is_some(), "{path} is served");
            hook["clientConfig"] = json!({"url": format!("{base}{path}")});
        }
        must(cluster, &["create", "-f", "-"], Some(&conf.to_string()));
    }
}

/// `method` on the API server's `path` with `body` of `content_type`, as the admin: the HTTP
/// code and the JSON answer (kubectl would reformat a refusal's causes).
fn call(
    cluster: &TestCluster,
    method: &str,
    content_type: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    cluster.admin_request(method, content_type, path, body)
}

const VM_PATH: &str = "/apis/kubevirt.io/v1/namespaces/default/virtualmachines/hp";
const MERGE: &str = "application/merge-patch+json";

/// A merge patch of the VM's status (`/status`).
fn patch_status(cluster: &TestCluster, status: Value) -> (u16, Value) {
    let body = json!({"status": status}).to_string();
    call(cluster, "PATCH", MERGE, &format!("{VM_PATH}/status"), &body)
}

fn add(name: &str, claim: &str) -> Value {
    json!({"addVolumeOptions": {
        "name": name,
        "disk": {"name": name, "disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": claim, "hotpluggable": true}},
    }})
}

/// A refusal by `webhook` with KubeVirt's `message` at `field`.
fn assert_refused(answer: &(u16, Value), webhook: &str, field: &str, message: &str) {
    let (code, status) = answer;
    assert_eq!(*code, 422, "{status}");
    assert_eq!(
        status["message"],
        format!("admission webhook \"{webhook}\" denied the request: {message}"),
        "{status}"
    );
    let causes = status["details"]["causes"].as_array().expect("causes");
    assert_eq!(
        causes,
        &vec![json!({"reason": "FieldValueInvalid", "message": message, "field": field})],
        "{status}"
    );
}

const STATUS_VALIDATOR: &str = "kubevirt-crd-status-validator.kubevirt.io";
const VM_VALIDATOR: &str = "virtualmachine-validator.kubevirt.io";
const FIELD: &str = "Status.volumeRequests";

#[test]
fn volume_requests_are_validated_as_kubevirt_validates_them() {
    let cluster = TestCluster::start(Options::apiserver_only()).expect("kube-apiserver and etcd");
    cluster
        .install_kubevirt_crds(&root().join("bins/deploy"))
        .expect("CRDs");
    kubevirt_cr(&cluster);
    let addr = loopback_addr();
    register_webhooks(&cluster, &format!("https://{addr}"));
    let rt = runtime();
    let kubeconfig = cluster.admin_kubeconfig_path().to_path_buf();
    let api = VirtApi::start(&rt, &kubeconfig, addr, &["--tls-san", "127.0.0.1"]);

    let vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
    "metadata": {"name": "hp", "namespace": "default"},
    "spec": {"runStrategy": "Halted", "template": {"spec": {
        "domain": {
            "devices": {"disks": [
                {"name": "root", "disk": {"bus": "virtio"}},
                {"name": "data", "disk": {"bus": "virtio"}},
            ]},
            "resources": {"requests": {"memory": "128Mi"}},
        },
        "volumes": [
            {"name": "root", "containerDisk": {"image": "kvrs/guest"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
        ],
    }}}});
    // The first write through virt-api waits until it has published its caBundle.
    wait_for("the VM admitted", Duration::from_secs(60), || {
        let (code, _) = call(
            &cluster,
            "POST",
            "application/json",
            "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
            &vm.to_string(),
        );
        (code == 201).then_some(())
    });

    // Two adds of the same name: refused by the status validator, nothing stored.
    let twice = patch_status(
        &cluster,
        json!({"volumeRequests": [add("hot", "c1"), add("hot", "c2")]}),
    );
    assert_refused(
        &twice,
        STATUS_VALIDATOR,
        FIELD,
        "AddVolume request for [hot] aleady exists",
    );
    let stored = get_json(&cluster, &["vm", "hp", "-n", "default"]).expect("the VM");
    assert!(stored["status"]["volumeRequests"].is_null(), "{stored}");

    // An add that conflicts with the template's volume of the same name.
    let conflicting = patch_status(&cluster, json!({"volumeRequests": [add("data", "other")]}));
    assert_refused(
        &conflicting,
        STATUS_VALIDATOR,
        FIELD,
        "AddVolume request for [data] conflicts with an existing volume of the same name on the vmi template.",
    );

    // A disk on a bus a hotplugged disk cannot have.
    let mut sata = add("hot", "c1");
    sata["addVolumeOptions"]["disk"]["disk"]["bus"] = json!("sata");
    let answer = patch_status(&cluster, json!({"volumeRequests": [sata]}));
    assert_refused(
        &answer,
        STATUS_VALIDATOR,
        FIELD,
        "AddVolume request for disk [hot] requires bus to be 'scsi' or 'virtio'. [sata] is not permitted.",
    );

    // A valid request is admitted and stored.
    let (code, answer) = patch_status(&cluster, json!({"volumeRequests": [add("hot", "c1")]}));
    assert_eq!(code, 200, "{answer}");
    assert_eq!(
        answer["status"]["volumeRequests"],
        json!([add("hot", "c1")])
    );

    // The VM webhook checks the stored requests on a spec change: a template volume `hot` of
    // another claim now conflicts with the pending add.
    let spec_patch = json!({"spec": {"template": {"spec": {
        "domain": {"devices": {"disks": [
            {"name": "root", "disk": {"bus": "virtio"}},
            {"name": "data", "disk": {"bus": "virtio"}},
            {"name": "hot", "disk": {"bus": "scsi"}},
        ]}},
        "volumes": [
            {"name": "root", "containerDisk": {"image": "kvrs/guest"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}},
            {"name": "hot", "persistentVolumeClaim": {"claimName": "elsewhere"}},
        ],
    }}}});
    let answer = call(&cluster, "PATCH", MERGE, VM_PATH, &spec_patch.to_string());
    assert_refused(
        &answer,
        VM_VALIDATOR,
        FIELD,
        "AddVolume request for [hot] conflicts with an existing volume of the same name on the vmi template.",
    );

    // A Ready VM's requests are checked against its running VMI, which the validator reads.
    let mut vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "hp", "namespace": "default"},
        "spec": vm["spec"]["template"]["spec"].clone()});
    vmi["spec"]["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "running-only", "disk": {"bus": "scsi"}}));
    vmi["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "running-only", "dataVolume": {"name": "dv"}}));
    let (code, answer) = call(
        &cluster,
        "POST",
        "application/json",
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances",
        &vmi.to_string(),
    );
    assert_eq!(code, 201, "{answer}");
    let answer = patch_status(
        &cluster,
        json!({"ready": true, "volumeRequests": [add("hot", "c1"), add("running-only", "c3")]}),
    );
    assert_refused(
        &answer,
        STATUS_VALIDATOR,
        FIELD,
        "AddVolume request for [running-only] conflicts with an existing volume of the same name on currently running vmi",
    );
    // Not Ready: the VMI is not consulted and the same requests pass.
    let (code, answer) = patch_status(
        &cluster,
        json!({"ready": false, "volumeRequests": [add("hot", "c1"), add("running-only", "c3")]}),
    );
    assert_eq!(code, 200, "{answer}");

    api.stop(&rt);
}
