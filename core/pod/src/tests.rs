//! Behaviour of the launcher pod beyond the oracle corpus: root VMIs, grace periods, hugepages,
//! dedicated CPUs, block and shared PVCs, emulation, jitter, and typed errors.

use serde_json::{Value, json};

use super::*;
use crate::resources::{AutoLimits, ResourceError, ResourceReport};

/// A defaulted, non-root VMI with 1 vCPU and 1Gi, one container disk, a masquerade interface
/// (also the base of `path_tests`' VMI).
pub(crate) fn vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "domain": {
                "cpu": {"cores": 1, "sockets": 1, "threads": 1, "model": "host-model"},
                "memory": {"guest": "1Gi"},
                "resources": {"requests": {"memory": "1Gi"}},
                "machine": {"type": "q35"},
                "devices": {
                    "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}]
                }
            },
            "architecture": "amd64",
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "containerDisk": {"image": "img:1"}}]
        },
        "status": {"runtimeUser": 107}
    })
}

pub(crate) fn typed(v: Value) -> VirtualMachineInstance {
    serde_json::from_value(v).unwrap()
}

fn render(v: Value) -> Value {
    render_with(v, &ClusterConfig::default(), &PodInputs::default())
}

fn render_with(v: Value, config: &ClusterConfig, inputs: &PodInputs) -> Value {
    let pod = render_launcher_pod(&typed(v), config, inputs).unwrap();
    serde_json::to_value(pod).unwrap()
}

fn compute(pod: &Value) -> &Value {
    &pod["spec"]["containers"][0]
}

fn command(pod: &Value) -> Vec<String> {
    serde_json::from_value(compute(pod)["command"].clone()).unwrap()
}

fn flag<'a>(cmd: &'a [String], name: &str) -> Option<&'a str> {
    let i = cmd.iter().position(|c| c == name)?;
    cmd.get(i + 1).map(String::as_str)
}

#[test]
fn grace_periods_pad_the_vmi_grace_twice() {
    let pod = render(vmi());
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 60);
    assert_eq!(flag(&command(&pod), "--grace-period-seconds"), Some("45"));

    let mut v = vmi();
    v["spec"]["terminationGracePeriodSeconds"] = json!(0);
    let pod = render(v);
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(flag(&command(&pod), "--grace-period-seconds"), Some("15"));
}

#[test]
fn qemu_timeout_is_base_plus_jitter_below_120() {
    for (jitter, want) in [(0, "240s"), (119, "359s"), (120, "240s"), (125, "245s")] {
        let inputs = PodInputs {
            qemu_timeout_jitter_seconds: jitter,
            ..PodInputs::default()
        };
        let pod = render_with(vmi(), &ClusterConfig::default(), &inputs);
        assert_eq!(flag(&command(&pod), "--qemu-timeout"), Some(want));
    }
}

#[test]
fn non_root_vmis_run_as_qemu_without_capabilities() {
    let pod = render(vmi());
    let sc = &compute(&pod)["securityContext"];
    assert_eq!(sc["runAsUser"], 107);
    assert_eq!(sc["runAsGroup"], 107);
    assert_eq!(sc["runAsNonRoot"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(
        sc["capabilities"],
        json!({"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]})
    );
    assert!(command(&pod).contains(&"--run-as-nonroot".to_string()));
    assert_eq!(compute(&pod)["env"][0]["name"], "XDG_CACHE_HOME");
    assert_eq!(
        pod["spec"]["securityContext"],
        json!({"runAsUser": 107, "runAsGroup": 107, "runAsNonRoot": true, "fsGroup": 107})
    );
}

#[test]
fn root_vmis_keep_sys_nice_and_no_xdg_environment() {
    let mut v = vmi();
    v["status"] = json!({});
    let pod = render(v);
    let sc = &compute(&pod)["securityContext"];
    assert_eq!(sc["runAsUser"], 0);
    assert_eq!(sc["runAsNonRoot"], false);
    assert!(sc.get("runAsGroup").is_none());
    assert_eq!(
        sc["capabilities"],
        json!({"add": ["NET_BIND_SERVICE", "SYS_NICE"]})
    );
    assert!(!command(&pod).contains(&"--run-as-nonroot".to_string()));
    assert_eq!(compute(&pod)["env"][0]["name"], "POD_NAME");
    assert_eq!(
        pod["spec"]["securityContext"],
        json!({"runAsUser": 0, "fsGroup": 107})
    );
}

#[test]
fn device_plugins_follow_interfaces_and_emulation() {
    let pod = render(vmi());
    let limits = &compute(&pod)["resources"]["limits"];
    assert_eq!(limits["devices.kubevirt.io/kvm"], "1");
    assert_eq!(limits["devices.kubevirt.io/tun"], "1");
    assert_eq!(limits["devices.kubevirt.io/vhost-net"], "1");

    let config = ClusterConfig {
        use_emulation: true,
        ..ClusterConfig::default()
    };
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["interfaces"] = json!([]);
    v["spec"]["domain"]["devices"]["autoattachPodInterface"] = json!(false);
    v["spec"]["domain"]["devices"]["autoattachVSOCK"] = json!(true);
    let pod = render_with(v, &config, &PodInputs::default());
    let limits = &compute(&pod)["resources"]["limits"];
    assert_eq!(limits, &json!({"devices.kubevirt.io/vhost-vsock": "1"}));
    assert!(command(&pod).contains(&"--allow-emulation".to_string()));
}

#[test]
fn without_vhost_net_on_the_nodes_the_pod_does_not_request_it() {
    let inputs = PodInputs {
        vhost_net_available: false,
        ..PodInputs::default()
    };
    let pod = render_with(vmi(), &ClusterConfig::default(), &inputs);
    let limits = &compute(&pod)["resources"]["limits"];
    assert_eq!(limits["devices.kubevirt.io/kvm"], "1");
    assert_eq!(limits["devices.kubevirt.io/tun"], "1");
    assert!(
        limits.get("devices.kubevirt.io/vhost-net").is_none(),
        "{limits}"
    );
}

#[test]
fn vhost_net_is_available_unless_device_plugins_run_without_it() {
    use std::collections::BTreeMap;
    let node = |pairs: &[(&str, i32)]| -> BTreeMap<String, i32> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    };
    let positive = |q: &i32| *q > 0;
    let with = node(&[
        ("devices.kubevirt.io/kvm", 1000),
        ("devices.kubevirt.io/vhost-net", 1000),
    ]);
    let without = node(&[
        ("devices.kubevirt.io/kvm", 1000),
        ("devices.kubevirt.io/tun", 1000),
    ]);
    let zero = node(&[
        ("devices.kubevirt.io/tun", 1000),
        ("devices.kubevirt.io/vhost-net", 0),
    ]);
    let plain = node(&[("cpu", 2)]);
    // Unknown: KubeVirt's default.
    assert!(crate::vhost_net_available([], positive));
    assert!(crate::vhost_net_available([None, Some(&plain)], positive));
    // Some node has it: pods request it (and run there).
    assert!(crate::vhost_net_available(
        [Some(&without), Some(&with)],
        positive
    ));
    // Device plugins run, none offers it.
    assert!(!crate::vhost_net_available([Some(&without)], positive));
    assert!(!crate::vhost_net_available(
        [Some(&zero), Some(&plain)],
        positive
    ));
}

#[test]
fn dedicated_cpus_make_the_pod_guaranteed() {
    let mut v = vmi();
    v["spec"]["domain"]["cpu"] = json!({"cores": 2, "dedicatedCpuPlacement": true});
    let pod = render(v);
    let res = &compute(&pod)["resources"];
    assert_eq!(res["limits"]["cpu"], "2");
    assert_eq!(res["requests"]["cpu"], "2");
    assert_eq!(res["limits"]["memory"], res["requests"]["memory"]);
    assert_eq!(
        pod["spec"]["nodeSelector"]["kubevirt.io/cpumanager"],
        "true"
    );
    // Helper containers raise their requests to their limits.
    let console = &pod["spec"]["initContainers"][0];
    assert_eq!(console["name"], "guest-console-log");
    assert_eq!(
        console["resources"]["requests"],
        console["resources"]["limits"]
    );
}

#[test]
fn hugepages_back_the_guest_and_the_container_keeps_only_overhead() {
    let mut v = vmi();
    v["spec"]["domain"]["memory"] = json!({"guest": "1Gi", "hugepages": {"pageSize": "2Mi"}});
    let overhead = ResourceReport::new(&typed(v.clone()), &ClusterConfig::default())
        .unwrap()
        .overhead;
    let pod = render(v);
    let res = &compute(&pod)["resources"];
    assert_eq!(res["requests"]["hugepages-2Mi"], "1Gi");
    assert_eq!(res["limits"]["hugepages-2Mi"], "1Gi");
    assert_eq!(res["requests"]["memory"], overhead.quantity.as_str());
    let names: Vec<&str> = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"hugepages") && names.contains(&"hugetblfs-dir"));
}

#[test]
fn block_pvcs_are_devices_and_shared_pvcs_are_listed() {
    let mut v = vmi();
    v["spec"]["volumes"] = json!([
        {"name": "blk", "persistentVolumeClaim": {"claimName": "blk-claim"}},
        {"name": "rwx", "dataVolume": {"name": "rwx-dv"}}
    ]);
    v["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "blk", "disk": {}}, {"name": "rwx", "disk": {}}]);
    let mut inputs = PodInputs::default();
    inputs.pvcs.insert(
        "blk-claim".into(),
        PvcInfo {
            block: true,
            ..PvcInfo::default()
        },
    );
    inputs.pvcs.insert(
        "rwx-dv".into(),
        PvcInfo {
            shared: true,
            ..PvcInfo::default()
        },
    );
    let pod = render_with(v, &ClusterConfig::default(), &inputs);
    assert_eq!(
        compute(&pod)["volumeDevices"],
        json!([{"name": "blk", "devicePath": "/dev/blk"}])
    );
    let env = compute(&pod)["env"].as_array().unwrap();
    assert!(env.contains(&json!({
        "name": "SHARED_FILESYSTEM_PATHS",
        "value": "/var/run/kubevirt-private/vmi-disks/rwx"
    })));
}

#[test]
fn labels_carry_a_hashed_id_for_long_names() {
    let long = format!("vm-{}", "x".repeat(70));
    let mut v = vmi();
    v["metadata"]["name"] = json!(long);
    let pod = render(v);
    let id = pod["metadata"]["labels"]["vmi.kubevirt.io/id"]
        .as_str()
        .unwrap();
    assert_eq!(id.len(), 63);
    assert_eq!(pod["spec"]["hostname"].as_str().unwrap().len(), 63);
}

#[test]
fn readiness_gate_and_owner_reference_point_at_the_vmi() {
    let pod = render(vmi());
    assert_eq!(
        pod["spec"]["readinessGates"],
        json!([{"conditionType": "kubevirt.io/virtual-machine-unpaused"}])
    );
    let owner = &pod["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "VirtualMachineInstance");
    assert_eq!(owner["uid"], "uid-1");
    assert_eq!(owner["controller"], true);
}

#[test]
fn bad_inputs_are_typed_errors_naming_the_field() {
    let config = ClusterConfig::default();
    let inputs = PodInputs::default();

    let mut v = vmi();
    v["metadata"]["name"] = json!("");
    assert_eq!(
        render_launcher_pod(&typed(v), &config, &inputs),
        Err(PodError::MissingName)
    );

    let mut v = vmi();
    v["metadata"]["annotations"] = json!({"hooks.kubevirt.io/hookSidecars": "not json"});
    let err = render_launcher_pod(&typed(v), &config, &inputs).unwrap_err();
    assert!(err.to_string().contains("hooks.kubevirt.io/hookSidecars"));

    let mut v = vmi();
    v["metadata"]["labels"] = json!({"logVerbosity": "loud"});
    assert_eq!(
        render_launcher_pod(&typed(v), &config, &inputs),
        Err(PodError::LogVerbosity("loud".into()))
    );

    let mut v = vmi();
    v["spec"]["domain"]["memory"] = json!({});
    v["spec"]["domain"]["resources"] = json!({});
    let err = render_launcher_pod(&typed(v), &config, &inputs).unwrap_err();
    assert_eq!(err, PodError::Resources(ResourceError::MemoryMissing));
    assert!(err.to_string().contains("spec.domain.memory.guest"));

    let zero = ClusterConfig {
        cpu_allocation_ratio: 0,
        ..ClusterConfig::default()
    };
    let err = render_launcher_pod(&typed(vmi()), &zero, &inputs).unwrap_err();
    assert_eq!(
        err,
        PodError::Resources(ResourceError::ZeroCpuAllocationRatio)
    );
    assert!(err.to_string().contains("cpuAllocationRatio"));
}

#[test]
fn unparsable_quantities_name_their_field() {
    // Quantities are checked when a VMI is deserialized, so build one that skipped that.
    let mut vmi = typed(vmi());
    let resources = vmi
        .spec
        .domain
        .resources
        .get_or_insert_with(Default::default);
    resources
        .limits
        .get_or_insert_with(Default::default)
        .insert("cpu".into(), kvrs_api::Quantity::new("lots"));
    let err = ResourceReport::new(&vmi, &ClusterConfig::default()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("spec.domain.resources.limits.cpu: "),
        "{err}"
    );
}

#[test]
fn hook_sidecars_get_sockets_and_config_map_volumes() {
    let mut v = vmi();
    v["metadata"]["annotations"] = json!({"hooks.kubevirt.io/hookSidecars":
        r#"[{"image": "hook:1", "args": ["--version", "v1alpha3"],
             "configMap": {"name": "cm", "key": "k.sh", "hookPath": "/usr/bin/onDefineDomain"},
             "pvc": {"name": "shared", "volumePath": "/data", "sharedComputePath": "/var/shared"}}]"#});
    let pod = render(v);
    assert_eq!(flag(&command(&pod), "--hook-sidecars"), Some("1"));
    let hook = &pod["spec"]["containers"][1];
    assert_eq!(hook["name"], "hook-sidecar-0");
    assert_eq!(hook["image"], "hook:1");
    assert_eq!(hook["volumeMounts"][1]["subPath"], "k.sh");
    assert_eq!(
        hook["volumeMounts"][2],
        json!({"name": "shared", "mountPath": "/data"})
    );
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    let n = volumes.len();
    assert_eq!(volumes[n - 2]["configMap"]["defaultMode"], 0o755);
    assert_eq!(
        volumes[n - 1]["persistentVolumeClaim"]["claimName"],
        "shared"
    );
    let mounts = compute(&pod)["volumeMounts"].as_array().unwrap();
    assert_eq!(
        mounts.last().unwrap(),
        &json!({"name": "shared", "mountPath": "/var/shared"})
    );
}

#[test]
fn tsc_frequency_is_selected_only_when_the_guest_needs_it() {
    let mut v = vmi();
    v["status"]["topologyHints"] = json!({"tscFrequency": 2_400_000_000_i64});
    let label = "scheduling.node.kubevirt.io/tsc-frequency-2400000000";
    assert!(
        render(v.clone())["spec"]["nodeSelector"]
            .get(label)
            .is_none()
    );
    v["spec"]["domain"]["cpu"]["features"] = json!([{"name": "invtsc", "policy": "require"}]);
    assert_eq!(render(v)["spec"]["nodeSelector"][label], "true");
}

#[test]
fn namespace_quotas_add_cpu_and_memory_limits() {
    let inputs = PodInputs {
        auto_limits: AutoLimits {
            cpu: true,
            memory_ratio: Some(2.0),
        },
        ..PodInputs::default()
    };
    let pod = render_with(vmi(), &ClusterConfig::default(), &inputs);
    let res = &compute(&pod)["resources"];
    assert_eq!(res["limits"]["cpu"], "1");
    let request = kvrs_api::Quantity::new(res["requests"]["memory"].as_str().unwrap());
    let limit = kvrs_api::Quantity::new(res["limits"]["memory"].as_str().unwrap());
    assert_eq!(limit.value().unwrap(), 2 * request.value().unwrap());

    // A VMI with its own limits keeps them.
    let mut v = vmi();
    v["spec"]["domain"]["resources"]["limits"] = json!({"cpu": "3", "memory": "2Gi"});
    let pod = render_with(v, &ClusterConfig::default(), &inputs);
    assert_eq!(compute(&pod)["resources"]["limits"]["cpu"], "3");
}

#[test]
fn console_log_follows_the_cluster_switch_unless_the_vmi_decides() {
    let off = PodInputs {
        serial_console_log_disabled: true,
        ..PodInputs::default()
    };
    let names = |pod: &Value| -> Vec<String> {
        pod["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let pod = render_with(vmi(), &ClusterConfig::default(), &off);
    assert_eq!(names(&pod), ["volumeroot"]);
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["logSerialConsole"] = json!(true);
    let pod = render_with(v, &ClusterConfig::default(), &off);
    assert_eq!(names(&pod), ["guest-console-log", "volumeroot"]);
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["autoattachSerialConsole"] = json!(false);
    assert_eq!(names(&render(v)), ["volumeroot"]);
}

#[test]
fn launcher_pull_policy_comes_from_the_inputs() {
    let inputs = PodInputs {
        image_pull_policy: "Always".into(),
        ..PodInputs::default()
    };
    let pod = render_with(vmi(), &ClusterConfig::default(), &inputs);
    assert_eq!(compute(&pod)["imagePullPolicy"], "Always");
    assert_eq!(
        pod["spec"]["initContainers"][0]["imagePullPolicy"],
        "Always"
    );
    let launcher_volume = pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "launcher-volume")
        .unwrap();
    assert_eq!(launcher_volume["image"]["pullPolicy"], "Always");
}

#[test]
fn ovmf_path_follows_the_guest_architecture() {
    let mut v = vmi();
    assert_eq!(
        flag(&command(&render(v.clone())), "--ovmf-path"),
        Some("/usr/share/edk2/ovmf")
    );
    v["spec"]["architecture"] = json!("arm64");
    assert_eq!(
        flag(&command(&render(v.clone())), "--ovmf-path"),
        Some("/usr/share/AAVMF")
    );
    let inputs = PodInputs {
        ovmf_path: Some("/opt/fw".into()),
        ..PodInputs::default()
    };
    let pod = render_with(v, &ClusterConfig::default(), &inputs);
    assert_eq!(flag(&command(&pod), "--ovmf-path"), Some("/opt/fw"));
}

#[test]
fn strict_hyperv_and_launch_security_select_capable_nodes() {
    let mut v = vmi();
    v["spec"]["domain"]["features"] = json!({"hyperv": {
        "vpindex": {}, "synic": {"enabled": true}, "reenlightenment": {"enabled": true},
        "evmcs": {}
    }});
    let selector = |pod: &Value| pod["spec"]["nodeSelector"].clone();
    let plain = selector(&render(v.clone()));
    assert!(plain.get("hyperv.node.kubevirt.io/synic").is_none());
    let strict = ClusterConfig::with_feature_gates("HypervStrictCheck");
    let s = selector(&render_with(v, &strict, &PodInputs::default()));
    assert_eq!(s["hyperv.node.kubevirt.io/synic"], "true");
    assert_eq!(s["hyperv.node.kubevirt.io/reenlightenment"], "true");
    assert!(
        s.get("hyperv.node.kubevirt.io/vpindex").is_none(),
        "vpindex not enabled"
    );
    assert_eq!(s["cpu-vendor.node.kubevirt.io/Intel"], "true");

    let mut v = vmi();
    v["spec"]["domain"]["launchSecurity"] = json!({"sev": {"policy": {"encryptedState": true}}});
    let pod = render(v);
    let s = selector(&pod);
    assert_eq!(s["kubevirt.io/sev"], "true");
    assert_eq!(s["kubevirt.io/sev-es"], "true");
    assert_eq!(
        compute(&pod)["resources"]["limits"]["devices.kubevirt.io/sev"],
        "1"
    );
}

#[test]
fn scheduling_fields_are_copied_and_user_affinity_terms_get_the_host_model_rule() {
    let mut v = vmi();
    v["spec"]["dnsPolicy"] = json!("None");
    v["spec"]["dnsConfig"] = json!({"nameservers": ["10.0.0.10"], "searches": ["svc.local"]});
    v["spec"]["schedulerName"] = json!("my-scheduler");
    v["spec"]["priorityClassName"] = json!("high");
    v["spec"]["hostname"] = json!("myhost");
    v["spec"]["subdomain"] = json!("mysub");
    v["spec"]["nodeSelector"] = json!({"disk": "ssd"});
    v["spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "vm", "effect": "NoSchedule"}]);
    v["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    ]}}});
    v["spec"]["domain"]["cpu"]["features"] = json!([{"name": "svm", "policy": "forbid"}]);
    let spec = render(v)["spec"].clone();
    assert_eq!(spec["dnsPolicy"], "None");
    assert_eq!(spec["dnsConfig"]["nameservers"], json!(["10.0.0.10"]));
    assert_eq!(spec["schedulerName"], "my-scheduler");
    assert_eq!(spec["priorityClassName"], "high");
    assert_eq!(spec["hostname"], "myhost");
    assert_eq!(spec["subdomain"], "mysub");
    assert_eq!(spec["nodeSelector"]["disk"], "ssd");
    assert_eq!(spec["tolerations"][0]["key"], "dedicated");
    let terms = &spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    for term in terms.as_array().unwrap() {
        let keys: Vec<&str> = term["matchExpressions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["key"].as_str().unwrap())
            .collect();
        assert_eq!(
            keys,
            [
                "zone",
                "node-labeller.kubevirt.io/obsolete-host-model",
                "cpu-feature.node.kubevirt.io/svm"
            ]
        );
    }
}

#[test]
fn reserved_luns_label_the_pod_and_keep_sharers_apart() {
    let mut v = vmi();
    v["spec"]["volumes"] = json!([{"name": "lun", "persistentVolumeClaim": {"claimName": "pr"}}]);
    v["spec"]["domain"]["devices"]["disks"] =
        json!([{"name": "lun", "lun": {"reservation": true}}]);
    let mut inputs = PodInputs::default();
    inputs.pvcs.insert(
        "pr".into(),
        PvcInfo {
            uid: Some("pvc-uid-9".into()),
            ..PvcInfo::default()
        },
    );
    let pod = render_with(v, &ClusterConfig::default(), &inputs);
    assert_eq!(pod["metadata"]["labels"]["pr.kubevirt.io/pvc-uid-9"], "");
    assert_eq!(
        pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!([{
            "labelSelector": {"matchExpressions": [{"key": "pr.kubevirt.io/pvc-uid-9", "operator": "Exists"}]},
            "topologyKey": "kubernetes.io/hostname"
        }])
    );
    assert_eq!(
        compute(&pod)["resources"]["limits"]["devices.kubevirt.io/pr-helper"],
        "1"
    );
}

#[test]
fn multus_networks_follow_the_interface_order_and_skip_absent_ones() {
    let mut v = vmi();
    v["spec"]["networks"] = json!([
        {"name": "default", "pod": {}},
        {"name": "red", "multus": {"networkName": "red-net"}},
        {"name": "blue", "multus": {"networkName": "other/blue-net"}},
        {"name": "gone", "multus": {"networkName": "gone-net"}}
    ]);
    v["spec"]["domain"]["devices"]["interfaces"] = json!([
        {"name": "default", "masquerade": {}},
        {"name": "gone", "bridge": {}, "state": "absent"},
        {"name": "blue", "bridge": {}, "macAddress": "02:00:00:00:00:02"},
        {"name": "red", "bridge": {}}
    ]);
    let pod = render(v);
    let raw = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .expect("a networks annotation");
    let elements: Vec<Value> = serde_json::from_str(raw).unwrap();
    let names: Vec<&str> = elements
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["blue-net", "red-net"], "{raw}");
    assert_eq!(elements[0]["namespace"], "other");
    assert_eq!(elements[0]["mac"], "02:00:00:00:00:02");
    assert_eq!(elements[1]["namespace"], "ns");
    assert_eq!(
        elements[1]["interface"],
        crate::hashed_interface_name("red").as_str()
    );
    // Go's field order of NetworkSelectionElement: name, namespace, mac, interface.
    let keys: Vec<&String> = elements[0].as_object().unwrap().keys().collect();
    assert_eq!(keys, ["name", "namespace", "mac", "interface"]);
}
