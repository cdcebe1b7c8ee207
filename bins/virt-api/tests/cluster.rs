//! virt-api in front of a real kube-apiserver: `kubectl create` goes through KubeVirt's
//! webhooks as kvrs serves them, and what is stored (or refused) is what KubeVirt v1.9.0's
//! webhooks produce for KubeVirt's own oracle corpus (`../shared/oracle`; the test fails when
//! it is missing).
//!
//! The cluster is etcd + kube-apiserver only (`Options::apiserver_only()`): no kube-proxy, no
//! Service routing, so the webhook configurations from `bins/deploy/virt-api` are registered
//! with `clientConfig.url = https://127.0.0.1:PORT/<path>` instead of their Service, and virt-api
//! runs in this process on that port, with `127.0.0.1` in its serving certificate. Everything
//! else is as deployed: virt-api creates its CA and certificate in the Secret
//! `kubevirt/kvrs-virt-api-certs`, writes the caBundle into both configurations, and reads the
//! KubeVirt CR `kubevirt/kubevirt` live (the feature gates of gated oracle cases are set there).
//!
//! VMs referencing instancetypes and preferences go through the VM webhooks, which read them
//! from the cluster (`vms_with_references`); every refusal of the oracle is checked both on the
//! raw API answer (message and causes) and through `kubectl apply` (its output carries
//! KubeVirt's message).
//!
//! Stored VMIs are compared with `NAME.defaulted.json` except for what the oracle leaves out
//! (`status.phaseTransitionTimestamps`: the webhook's clock) and what the API server itself
//! writes after admission (`metadata.uid`, `resourceVersion`, `generation`,
//! `creationTimestamp`, `managedFields`).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use base64::Engine;
use kvrs_test_cluster::{Options, TestCluster};
use kvrs_virt_api::webhooks::Webhook;
use serde_json::{Value, json};
use support::{
    VirtApi, get_json, kubectl, kubevirt_cr, loopback_addr, must, root, runtime, wait_for, yaml,
};

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

/// The Secret's CA bundle, as virt-api publishes it (base64).
fn secret_bundle(cluster: &TestCluster) -> Option<(String, String)> {
    let secret = get_json(
        cluster,
        &["secret", "-n", "kubevirt", "kvrs-virt-api-certs"],
    )?;
    let decode = |k: &str| {
        secret["data"][k].as_str().map(|b| {
            String::from_utf8(base64::engine::general_purpose::STANDARD.decode(b).unwrap()).unwrap()
        })
    };
    let ca = decode("ca.crt")?;
    let mut bundle = ca.clone();
    if let Some(prev) = decode("ca-previous.crt") {
        if !bundle.ends_with('\n') {
            bundle.push('\n');
        }
        bundle.push_str(&prev);
    }
    Some((ca, base64::engine::general_purpose::STANDARD.encode(bundle)))
}

/// Every entry of both configurations carries `bundle`.
fn configurations_carry(cluster: &TestCluster, bundle: &str) -> bool {
    [
        "mutatingwebhookconfiguration/kvrs-virt-api-mutator",
        "validatingwebhookconfiguration/kvrs-virt-api-validator",
    ]
    .iter()
    .all(|c| {
        get_json(cluster, &[c]).is_some_and(|conf| {
            conf["webhooks"]
                .as_array()
                .unwrap()
                .iter()
                .all(|h| h["clientConfig"]["caBundle"] == bundle)
        })
    })
}

fn wait_until_published(cluster: &TestCluster) -> String {
    wait_for(
        "the caBundle in both configurations",
        Duration::from_secs(60),
        || {
            let (ca, bundle) = secret_bundle(cluster)?;
            configurations_carry(cluster, &bundle).then_some(ca)
        },
    )
}

/// What the API server writes after admission, and the webhook's clock.
fn comparable(mut vmi: Value) -> Value {
    if let Some(meta) = vmi["metadata"].as_object_mut() {
        for k in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(k);
        }
    }
    if let Some(status) = vmi["status"].as_object_mut() {
        status.remove("phaseTransitionTimestamps");
    }
    vmi
}

/// POSTs `body` to the API server's `path` as the admin (kubectl would reformat a refusal's
/// causes): the HTTP code and the JSON answer.
fn post(cluster: &TestCluster, path: &str, body: &str) -> (u16, Value) {
    call(cluster, "POST", "application/json", path, body)
}

/// `method` on the API server's `path` with `body` of `content_type`, as the admin.
fn call(
    cluster: &TestCluster,
    method: &str,
    content_type: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    cluster.admin_request(method, content_type, path, body)
}

/// error.txt's causes: `  cause: field=F type=T message=M`.
fn expected_causes(error_txt: &str) -> Vec<(String, String, String)> {
    error_txt
        .lines()
        .filter_map(|l| l.trim().strip_prefix("cause: field="))
        .map(|l| {
            let (field, rest) = l.split_once(" type=").unwrap();
            let (kind, message) = rest.split_once(" message=").unwrap();
            (field.to_string(), kind.to_string(), message.to_string())
        })
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// error.txt's message: the line `rejected by validating webhook: MESSAGE`.
fn expected_message(error_txt: &str) -> String {
    error_txt
        .lines()
        .find_map(|l| l.strip_prefix("rejected by validating webhook: "))
        .expect("a rejection line")
        .to_string()
}

fn set_gates(cluster: &TestCluster, gates: &[String]) {
    let patch =
        json!({"spec": {"configuration": {"developerConfiguration": {"featureGates": gates}}}});
    must(
        cluster,
        &[
            "patch",
            "kubevirt",
            "kubevirt",
            "-n",
            "kubevirt",
            "--type",
            "merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
}

/// `kubectl apply` of `object`: the stored object, or kubectl's error output.
fn apply(cluster: &TestCluster, object: &Value) -> Result<Value, String> {
    let (ok, out, err) = kubectl(
        cluster,
        &["apply", "-o", "json", "-f", "-"],
        Some(&object.to_string()),
    );
    if ok {
        Ok(serde_json::from_str(&out).expect("json"))
    } else {
        Err(err)
    }
}

/// A VM of `spec` fields in `default`, named `name`, with a bare template.
fn vm_with(name: &str, extra: Value) -> Value {
    let mut vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}});
    for (k, v) in extra.as_object().unwrap() {
        vm["spec"][k] = v.clone();
    }
    vm
}

/// VMs that reference instancetypes and preferences, read from the cluster by the VM webhooks:
/// admitted with the preference's machine type when they resolve (and, as KubeVirt does, when
/// they do not exist yet), refused with KubeVirt's message when the template conflicts with the
/// instancetype or the preference's requirements are not met.
fn vms_with_references(cluster: &TestCluster) {
    let objects = [
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachineClusterInstancetype", "metadata": {"name": "kvrs-small"},
            "spec": {"cpu": {"guest": 1}, "memory": {"guest": "256Mi"}}}),
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePreference",
            "metadata": {"name": "kvrs-pref", "namespace": "default"},
            "spec": {"machine": {"preferredMachineType": "pc-q35-rhel9.6.0"},
                "devices": {"preferredDiskBus": "virtio"}}}),
        json!({"apiVersion": "instancetype.kubevirt.io/v1beta1",
            "kind": "VirtualMachinePreference",
            "metadata": {"name": "kvrs-needs-two", "namespace": "default"},
            "spec": {"requirements": {"cpu": {"guest": 2}}}}),
    ];
    for o in &objects {
        apply(cluster, o).unwrap_or_else(|e| panic!("creating {}: {e}", o["metadata"]["name"]));
    }
    // kubectl prints an invalid request's causes, `FIELD: MESSAGE` each.
    let refused = |err: &str, field: &str, message: &str| {
        assert!(
            err.starts_with("The request is invalid:")
                && err.contains(&format!("{field}: {message}")),
            "expected KubeVirt's {field}: {message}, got: {err}"
        );
    };

    let refs = json!({"instancetype": {"name": "kvrs-small"},
        "preference": {"name": "kvrs-pref", "kind": "VirtualMachinePreference"}});
    let stored = apply(cluster, &vm_with("with-refs", refs.clone()))
        .unwrap_or_else(|e| panic!("a VM whose references resolve is admitted: {e}"));
    assert_eq!(
        stored["spec"]["template"]["spec"]["domain"]["machine"]["type"], "pc-q35-rhel9.6.0",
        "the preference's machine type, written by the VM mutator"
    );

    // inferFromVolume: the claim's labels name the preference, which the mutator then reads.
    let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "kvrs-disk", "namespace": "default", "labels": {
            "instancetype.kubevirt.io/default-preference": "kvrs-pref",
            "instancetype.kubevirt.io/default-preference-kind": "VirtualMachinePreference"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}});
    apply(cluster, &claim).unwrap_or_else(|e| panic!("creating the claim: {e}"));
    let mut inferring = vm_with(
        "inferring",
        json!({"preference": {"inferFromVolume": "disk"}}),
    );
    inferring["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "disk", "persistentVolumeClaim": {"claimName": "kvrs-disk"}}]);
    let stored = apply(cluster, &inferring)
        .unwrap_or_else(|e| panic!("a VM inferring its preference is admitted: {e}"));
    assert_eq!(
        stored["spec"]["preference"],
        json!({"name": "kvrs-pref", "kind": "VirtualMachinePreference"})
    );
    assert_eq!(
        stored["spec"]["template"]["spec"]["domain"]["machine"]["type"], "pc-q35-rhel9.6.0",
        "the inferred preference's machine type"
    );
    let mut nowhere = inferring.clone();
    nowhere["metadata"]["name"] = json!("inferring-nowhere");
    nowhere["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] =
        json!("kvrs-no-disk");
    let err = apply(cluster, &nowhere).expect_err("inferring from a missing claim is refused");
    assert!(
        err.contains("persistentvolumeclaims \"kvrs-no-disk\" not found"),
        "{err}"
    );

    let missing = json!({"instancetype": {"name": "kvrs-nowhere"},
        "preference": {"name": "kvrs-nowhere", "kind": "VirtualMachinePreference"}});
    apply(cluster, &vm_with("missing-refs", missing))
        .unwrap_or_else(|e| panic!("KubeVirt admits a VM whose references do not exist yet: {e}"));

    let mut sized = vm_with("sized", refs);
    sized["spec"]["template"]["spec"]["domain"]["cpu"] = json!({"sockets": 2});
    let err = apply(cluster, &sized).expect_err("a template sizing itself is refused");
    refused(
        &err,
        "spec.template.spec.domain.cpu.sockets",
        "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected instance type",
    );

    let needy = json!({"instancetype": {"name": "kvrs-small"},
        "preference": {"name": "kvrs-needs-two", "kind": "VirtualMachinePreference"}});
    let err =
        apply(cluster, &vm_with("needy", needy)).expect_err("an unmet requirement is refused");
    refused(
        &err,
        "spec.instancetype",
        "failure checking preference requirements: insufficient CPU resources of 1 vCPU \
         provided by instance type, preference requires 2 vCPU",
    );

    let unnamed = json!({"preference": {"kind": "VirtualMachinePreference"}});
    let err = apply(cluster, &vm_with("unnamed", unnamed)).expect_err("a matcher needs a name");
    assert!(
        err.contains(
            "Either Name or InferFromVolume should be provided within the PreferenceMatcher"
        ),
        "{err}"
    );
}

#[test]
fn kubevirts_webhooks_on_a_real_api_server() {
    let oracle = kvrs_corpus::shared_dir("oracle");
    let cluster = TestCluster::start(Options::apiserver_only()).expect("kube-apiserver and etcd");
    cluster
        .install_kubevirt_crds(&root().join("bins/deploy"))
        .expect("CRDs");
    kubevirt_cr(&cluster);
    must(&cluster, &["create", "namespace", "kv-oracle"], None);
    let addr = loopback_addr();
    register_webhooks(&cluster, &format!("https://{addr}"));

    let rt = runtime();
    let kubeconfig = cluster.admin_kubeconfig_path().to_path_buf();
    let api = VirtApi::start(&rt, &kubeconfig, addr, &["--tls-san", "127.0.0.1"]);
    wait_until_published(&cluster);

    // --- the oracle: refused with KubeVirt's message, or stored as KubeVirt defaults it ---
    let cases = kvrs_corpus::cases_with(&oracle, "vmi.json");
    let mut by_gates: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    for name in &cases {
        let gates = std::fs::read_to_string(oracle.join(format!("{name}.featuregates.txt")))
            .unwrap_or_default();
        let gates: Vec<String> = gates
            .split(',')
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(String::from)
            .collect();
        by_gates.entry(gates).or_default().push(name.clone());
    }
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    let (mut admitted, mut refused, mut failures) = (0, 0, Vec::new());
    let started = Instant::now();
    for (gates, names) in &by_gates {
        set_gates(&cluster, gates);
        if !gates.is_empty() {
            // virt-api has the gates once a server-side dry run of the first case passes.
            let first = oracle.join(format!("{}.vmi.json", names[0]));
            wait_for(
                &format!("virt-api to enable {gates:?}"),
                Duration::from_secs(30),
                || {
                    let file = first.to_str().unwrap();
                    kubectl(&cluster, &["create", "--dry-run=server", "-f", file], None)
                        .0
                        .then_some(())
                },
            );
        }
        for name in names {
            let input = oracle.join(format!("{name}.vmi.json"));
            let vmi: Value = kvrs_corpus::read_json(&input);
            let key = (
                vmi["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("default")
                    .to_string(),
                vmi["metadata"]["name"].as_str().unwrap().to_string(),
            );
            if !used.insert(key.clone()) {
                // A name used before: let the earlier VMI go (no controller removes its finalizer).
                let (ns, n) = (&key.0, &key.1);
                must(
                    &cluster,
                    &[
                        "patch",
                        "vmi",
                        n,
                        "-n",
                        ns,
                        "--type",
                        "json",
                        "-p",
                        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
                    ],
                    None,
                );
                must(&cluster, &["delete", "vmi", n, "-n", ns], None);
            }
            let error_txt = oracle.join(format!("{name}.error.txt"));
            if error_txt.is_file() {
                // kubectl shows a refusal's causes, not its message: read the API's answer.
                let text = std::fs::read_to_string(&error_txt).unwrap();
                let path = format!(
                    "/apis/kubevirt.io/v1/namespaces/{}/virtualmachineinstances",
                    key.0
                );
                let (code, status) = post(&cluster, &path, &vmi.to_string());
                if code < 400 {
                    failures.push(format!("{name}: KubeVirt refuses it, it was stored"));
                    continue;
                }
                let expected = format!(
                    "admission webhook \"virtualmachineinstances-create-validator.kubevirt.io\" denied the request: {}",
                    expected_message(&text)
                );
                let causes: BTreeSet<(String, String, String)> = status["details"]["causes"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                        (s("field"), s("reason"), s("message"))
                    })
                    .collect();
                let wanted: BTreeSet<_> = expected_causes(&text).into_iter().collect();
                if (code, status["message"].as_str()) != (422, Some(expected.as_str()))
                    || causes != wanted
                {
                    failures.push(format!(
                        "{name}: refused with {code} {status}, KubeVirt: {expected:?} {wanted:?}"
                    ));
                }
                // ... and `kubectl apply` of the same manifest fails, printing the refusal's
                // causes as kubectl prints an invalid request's: `FIELD: MESSAGE` each.
                let (ok, _, err) =
                    kubectl(&cluster, &["apply", "-f", input.to_str().unwrap()], None);
                let printed = err.starts_with("The request is invalid:")
                    && wanted
                        .iter()
                        .all(|(f, _, m)| err.contains(&format!("{f}: {m}")));
                if ok || !printed {
                    failures.push(format!(
                        "{name}: kubectl apply {}: {err}, KubeVirt's causes: {wanted:?}",
                        if ok { "succeeded" } else { "failed otherwise" }
                    ));
                }
                refused += 1;
                continue;
            }
            let (ok, out, err) = kubectl(
                &cluster,
                &["create", "-o", "json", "-f", input.to_str().unwrap()],
                None,
            );
            if !ok {
                failures.push(format!("{name}: refused: {err}"));
                continue;
            }
            let stored = comparable(serde_json::from_str(&out).unwrap());
            let expected = comparable(kvrs_corpus::read_json(
                &oracle.join(format!("{name}.defaulted.json")),
            ));
            if stored != expected {
                failures.push(format!(
                    "{name}: stored VMI differs from KubeVirt's:\n  stored:   {stored}\n  expected: {expected}"
                ));
            }
            admitted += 1;
        }
    }
    let elapsed = started.elapsed();
    println!(
        "oracle: {admitted} stored as KubeVirt defaults them, {refused} refused with KubeVirt's message ({} cases, {:.1} s)",
        cases.len(),
        elapsed.as_secs_f64()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(admitted + refused, cases.len());
    set_gates(&cluster, &[]);

    // --- a VM KubeVirt refuses is refused ---
    let vm = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "both", "namespace": "default"},
        "spec": {"running": true, "runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}}}}});
    let (code, status) = post(
        &cluster,
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachines",
        &vm.to_string(),
    );
    assert_eq!(code, 422, "a VM with running and runStrategy: {status}");
    assert_eq!(
        status["message"],
        "admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"
    );
    assert_eq!(status["details"]["causes"][0]["field"], "spec.running");
    // ... and a good one is stored with the VM mutator's defaults.
    let mut good = vm.clone();
    good["metadata"]["name"] = json!("good");
    good["spec"].as_object_mut().unwrap().remove("running");
    let stored: Value = serde_json::from_str(&must(
        &cluster,
        &["create", "-o", "json", "-f", "-"],
        Some(&good.to_string()),
    ))
    .unwrap();
    let tpl = &stored["spec"]["template"];
    assert_eq!(tpl["spec"]["domain"]["machine"]["type"], "q35");
    assert!(tpl["spec"]["domain"]["firmware"]["uuid"].is_string());

    vms_with_references(&cluster);

    // --- a VMI's spec is frozen for users ---
    let (code, status) = call(
        &cluster,
        "PATCH",
        "application/merge-patch+json",
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/vmi-fedora",
        r#"{"spec":{"domain":{"cpu":{"cores":3}}}}"#,
    );
    assert_eq!(code, 422, "a VMI spec update: {status}");
    assert_eq!(
        status["message"],
        "admission webhook \"virtualmachineinstances-update-validator.kubevirt.io\" denied the request: update of VMI object is restricted"
    );
    // A label is not the spec.
    let (code, status) = call(
        &cluster,
        "PATCH",
        "application/merge-patch+json",
        "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances/vmi-fedora",
        r#"{"metadata":{"labels":{"team":"a"}}}"#,
    );
    assert_eq!(code, 200, "a label update: {status}");

    // --- bad input straight to virt-api: a clear 400 / 413, and it keeps serving ---
    let curl = |args: &[&str]| -> String {
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "-H",
                "Content-Type: application/json",
            ])
            .args(args)
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let url = format!("https://{addr}/virtualmachineinstances-mutate");
    assert_eq!(curl(&["--data", "{not json", &url]), "400");
    let big = cluster.dir().join("big.json");
    std::fs::write(&big, vec![b' '; kvrs_virt_api::MAX_BODY_BYTES + 1]).unwrap();
    assert_eq!(
        curl(&["--data-binary", &format!("@{}", big.display()), &url]),
        "413"
    );
    assert_eq!(curl(&[&format!("https://{addr}/healthz")]), "200");
    api.stop(&rt);

    // --- rotation: a short-lived CA and certificate are renewed, the caBundle follows, and the
    // webhooks keep answering ---
    must(
        &cluster,
        &["delete", "secret", "-n", "kubevirt", "kvrs-virt-api-certs"],
        None,
    );
    let api = VirtApi::start(
        &rt,
        &kubeconfig,
        addr,
        &[
            "--tls-san",
            "127.0.0.1",
            "--ca-validity-seconds",
            "30",
            "--cert-validity-seconds",
            "15",
        ],
    );
    let first_ca = wait_until_published(&cluster);
    let second_ca = wait_for("the CA to rotate", Duration::from_secs(90), || {
        let (ca, bundle) = secret_bundle(&cluster)?;
        (ca != first_ca && configurations_carry(&cluster, &bundle)).then_some(ca)
    });
    assert_ne!(first_ca, second_ca);
    std::thread::sleep(Duration::from_secs(2));
    let plain = by_gates[&Vec::new()]
        .iter()
        .find(|n| !oracle.join(format!("{n}.error.txt")).is_file())
        .expect("an ungated case KubeVirt admits");
    let mut after = kvrs_corpus::read_json(&oracle.join(format!("{plain}.vmi.json")));
    after["metadata"]["name"] = json!("after-rotation");
    after["metadata"]["namespace"] = json!("default");
    let (ok, _, err) = kubectl(&cluster, &["create", "-f", "-"], Some(&after.to_string()));
    assert!(
        ok,
        "the webhooks stopped answering after the rotation: {err}"
    );
    api.stop(&rt);
}
