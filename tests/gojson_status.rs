//! `api.Domain` beyond the spec: the status and object meta as Go marshals them (expectations
//! written from the Go struct definitions), round trips, Go-decoder leniency, field-path errors,
//! and that KubeVirt-shaped readers (kvrs-core's handler view) understand what we write.

use kvrs_converter::Domain;
use kvrs_converter::domain::{Channel, ChannelTarget, Cpu};
use kvrs_converter::gojson::{
    DomainEnvelope, DomainStatus, FsFreeze, GoJson, GoJsonError, GuestOsInfo, GuestPanicInfo,
    InterfaceStatus, LifeCycle, ObjectMeta, Path, StateChangeReason, from_go_json,
    from_go_json_slice, to_go_json, to_go_json_vec,
};
use proptest::prelude::*;
use serde_json::{Value, json};

#[test]
fn empty_status_is_go_zero_value() {
    // api.DomainStatus{}: LifeCycle "", StateChangeReason "", nil slice, value structs, nil
    // pointer, int 0 — the same object every oracle domain.json carries.
    let expected = json!({
        "Status": "",
        "Reason": "",
        "Interfaces": null,
        "OSInfo": {"Name": "", "KernelRelease": "", "Version": "", "PrettyName": "", "VersionId": "",
            "KernelVersion": "", "Machine": "", "Id": ""},
        "FSFreezeStatus": {"Status": ""},
        "GuestPanicInfo": null,
        "PanicCount": 0
    });
    let got = DomainStatus::default().to_go();
    assert_eq!(
        serde_json::to_string(&got).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
}

fn running_status() -> DomainStatus {
    DomainStatus {
        status: LifeCycle::Paused,
        reason: StateChangeReason::IoError,
        interfaces: vec![
            InterfaceStatus {
                mac: "02:00:00:00:00:01".into(),
                ip: "10.0.2.2".into(),
                ips: vec!["10.0.2.2".into(), "fd10::2".into()],
                interface_name: "eth0".into(),
            },
            InterfaceStatus {
                mac: "02:00:00:00:00:02".into(),
                ..InterfaceStatus::default()
            },
        ],
        os_info: GuestOsInfo {
            name: "Fedora Linux".into(),
            kernel_release: "6.8.5".into(),
            version: "40".into(),
            pretty_name: "Fedora Linux 40".into(),
            version_id: "40".into(),
            kernel_version: "#1 SMP".into(),
            machine: "x86_64".into(),
            id: "fedora".into(),
        },
        fs_freeze_status: FsFreeze {
            status: "frozen".into(),
        },
        guest_panic_info: Some(GuestPanicInfo {
            kind: "hyper-v".into(),
            arg1: 0x1e,
            arg2: 1,
            arg3: 2,
            arg4: 3,
            arg5: 4,
        }),
        panic_count: 2,
    }
}

#[test]
fn populated_status_has_go_names_and_order() {
    let expected = json!({
        "Status": "Paused",
        "Reason": "IOError",
        "Interfaces": [
            {"Mac": "02:00:00:00:00:01", "Ip": "10.0.2.2", "IPs": ["10.0.2.2", "fd10::2"], "InterfaceName": "eth0"},
            {"Mac": "02:00:00:00:00:02", "Ip": "", "IPs": null, "InterfaceName": ""}
        ],
        "OSInfo": {"Name": "Fedora Linux", "KernelRelease": "6.8.5", "Version": "40", "PrettyName": "Fedora Linux 40",
            "VersionId": "40", "KernelVersion": "#1 SMP", "Machine": "x86_64", "Id": "fedora"},
        "FSFreezeStatus": {"Status": "frozen"},
        "GuestPanicInfo": {"Type": "hyper-v", "Arg1": 30, "Arg2": 1, "Arg3": 2, "Arg4": 3, "Arg5": 4},
        "PanicCount": 2
    });
    let got = running_status().to_go();
    assert_eq!(
        serde_json::to_string(&got).unwrap(),
        serde_json::to_string(&expected).unwrap()
    );
    assert_eq!(
        DomainStatus::from_go(&expected, &Path::ROOT).unwrap(),
        running_status()
    );
}

#[test]
fn life_cycle_and_reason_texts_are_go_constants() {
    let states: Vec<&str> = LifeCycle::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(
        states,
        [
            "",
            "NoState",
            "Running",
            "Blocked",
            "Paused",
            "ShuttingDown",
            "Shutoff",
            "Crashed",
            "PMSuspended",
            "Unknown"
        ]
    );
    for s in LifeCycle::ALL {
        assert_eq!(LifeCycle::parse(s.as_str()), Some(*s));
    }
    for r in StateChangeReason::ALL {
        assert_eq!(StateChangeReason::parse(r.as_str()), Some(*r));
    }
    assert_eq!(StateChangeReason::PostcopyFailed.as_str(), "PostcopyFailed");
    assert_eq!(StateChangeReason::IoError.as_str(), "IOError");
    assert_eq!(StateChangeReason::NonExistent.as_str(), "NonExistent");
    assert_eq!(LifeCycle::parse("running"), None);
}

#[test]
fn object_meta_uses_kubernetes_names_and_omits_empty() {
    let mut meta = ObjectMeta {
        name: "vm".into(),
        namespace: "ns".into(),
        uid: "u-1".into(),
        ..ObjectMeta::default()
    };
    meta.deletion_timestamp = Some("2024-05-01T10:00:00.5+02:00".into());
    meta.labels
        .insert("kubevirt.io/created-by".into(), "x".into());
    meta.extra.insert("finalizers".into(), json!(["a"]));
    let got = meta.to_go();
    assert_eq!(
        serde_json::to_string(&got).unwrap(),
        r#"{"name":"vm","namespace":"ns","uid":"u-1","deletionTimestamp":"2024-05-01T08:00:00Z","labels":{"kubevirt.io/created-by":"x"},"finalizers":["a"]}"#
    );
    let back = ObjectMeta::from_go(&got, &Path::ROOT).unwrap();
    assert_eq!(
        back.deletion_timestamp.as_deref(),
        Some("2024-05-01T08:00:00Z")
    );
    assert_eq!(back.extra["finalizers"], json!(["a"]));
    assert_eq!(back.labels, meta.labels);
}

#[test]
fn type_meta_is_inlined_first_when_set() {
    let mut env = DomainEnvelope::new("ns", "vm", Domain::default());
    env.kind = "Domain".into();
    env.api_version = "1.2.2".into();
    let got = to_go_json(&env);
    let keys: Vec<&str> = got
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["kind", "apiVersion", "ObjectMeta", "Spec", "Status"]);
    assert_eq!(from_go_json(&got).unwrap(), env);
    let plain = to_go_json(&DomainEnvelope::new("ns", "vm", Domain::default()));
    let keys: Vec<&str> = plain
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["ObjectMeta", "Spec", "Status"]);
}

#[test]
fn reads_like_gos_decoder_missing_and_null_are_zero_values() {
    let env = from_go_json(&json!({
        "ObjectMeta": {"name": "vm"},
        "Spec": {"Type": "kvm", "Memory": null, "Devices": {"Disks": null, "Channels": []}, "Unknown": 1},
        "Status": {"Status": "Running", "OSInfo": null}
    }))
    .unwrap();
    assert_eq!(env.spec.kind, "kvm");
    assert_eq!(env.spec.memory.value, 0);
    assert!(env.spec.devices.disks.is_empty() && env.spec.devices.channels.is_empty());
    assert_eq!(env.status.status, LifeCycle::Running);
    assert_eq!(env.status.os_info, GuestOsInfo::default());
    assert_eq!(from_go_json(&json!({})).unwrap(), DomainEnvelope::default());
}

#[test]
fn errors_name_the_field_path() {
    let cases = [
        (
            json!({"Spec": {"Devices": {"Disks": [{}, {"Driver": {"Queues": "4"}}]}}}),
            "Spec.Devices.Disks[1].Driver.Queues",
        ),
        (json!({"Spec": {"VCPU": {"CPUs": -1}}}), "Spec.VCPU.CPUs"),
        (
            json!({"Spec": {"Memory": {"Value": 1.5}}}),
            "Spec.Memory.Value",
        ),
        (
            json!({"Spec": {"Devices": {"Interfaces": {}}}}),
            "Spec.Devices.Interfaces",
        ),
        (json!({"Spec": {"OS": "hvm"}}), "Spec.OS"),
        (json!({"Status": {"Status": "Exploded"}}), "Status.Status"),
        (
            json!({"Status": {"Interfaces": [{"IPs": [1]}]}}),
            "Status.Interfaces[0].IPs[0]",
        ),
        (
            json!({"ObjectMeta": {"labels": {"a": 1}}}),
            "ObjectMeta.labels.a",
        ),
        (json!([]), "(root)"),
    ];
    for (doc, path) in cases {
        let err = from_go_json(&doc).unwrap_err();
        assert_eq!(err.path(), path, "{doc}: {err}");
        assert!(err.to_string().starts_with(path), "{err}");
    }
    let err = from_go_json(&json!({"Status": {"Reason": "Sleepy"}})).unwrap_err();
    assert!(matches!(err, GoJsonError::Invalid { .. }), "{err}");
    assert!(
        from_go_json_slice(b"{not json")
            .unwrap_err()
            .to_string()
            .contains("not JSON")
    );
}

#[test]
fn handler_view_reads_what_we_write() {
    let mut spec = Domain {
        kind: "kvm".into(),
        cpu: Cpu::default(),
        ..Domain::default()
    };
    spec.metadata.kubevirt.uid = "vmi-uid".into();
    spec.devices.channels.push(Channel {
        kind: "unix".into(),
        source: None,
        target: Some(ChannelTarget {
            name: Some("org.qemu.guest_agent.0".into()),
            kind: "virtio".into(),
            state: Some("connected".into()),
            ..ChannelTarget::default()
        }),
    });
    let mut env = DomainEnvelope::new("ns", "vm", spec);
    env.status = running_status();
    env.status.status = LifeCycle::Running;
    env.status.reason = StateChangeReason::Unknown;
    let bytes = to_go_json_vec(&env);
    let view: kvrs_core::decide::handler::Domain = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(view.uid(), "vmi-uid");
    assert!(view.guest_agent_connected());
    assert!(view.is_alive());
    assert!(!view.is_deleted());
    assert_eq!(view.meta.name, "vm");
    assert_eq!(view.status.interfaces[0].ips, ["10.0.2.2", "fd10::2"]);
    assert_eq!(view.status.os_info.pretty_name, "Fedora Linux 40");
    assert_eq!(from_go_json_slice(&bytes).unwrap(), env);
}

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9:./ <>&\"\u{e9}-]{0,12}"
}

fn status_strategy() -> impl Strategy<Value = DomainStatus> {
    let iface = (text(), text(), prop::collection::vec(text(), 0..3), text()).prop_map(
        |(mac, ip, ips, interface_name)| InterfaceStatus {
            mac,
            ip,
            ips,
            interface_name,
        },
    );
    let os = prop::collection::vec(text(), 8).prop_map(|v| GuestOsInfo {
        name: v[0].clone(),
        kernel_release: v[1].clone(),
        version: v[2].clone(),
        pretty_name: v[3].clone(),
        version_id: v[4].clone(),
        kernel_version: v[5].clone(),
        machine: v[6].clone(),
        id: v[7].clone(),
    });
    let panic =
        prop::option::of(
            (text(), any::<[u64; 5]>()).prop_map(|(kind, a)| GuestPanicInfo {
                kind,
                arg1: a[0],
                arg2: a[1],
                arg3: a[2],
                arg4: a[3],
                arg5: a[4],
            }),
        );
    (
        prop::sample::select(LifeCycle::ALL),
        prop::sample::select(StateChangeReason::ALL),
        prop::collection::vec(iface, 0..3),
        os,
        text(),
        panic,
        any::<i64>(),
    )
        .prop_map(
            |(status, reason, interfaces, os_info, fs, guest_panic_info, panic_count)| {
                DomainStatus {
                    status,
                    reason,
                    interfaces,
                    os_info,
                    fs_freeze_status: FsFreeze { status: fs },
                    guest_panic_info,
                    panic_count,
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn status_round_trips_through_go_json_bytes(status in status_strategy(), name in text(), uid in text()) {
        let mut env = DomainEnvelope::new("ns", &name, Domain::default());
        env.meta.uid = uid;
        env.status = status;
        let bytes = to_go_json_vec(&env);
        prop_assert_eq!(from_go_json_slice(&bytes).unwrap(), env.clone());
        // Every Go field is present whatever the values.
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(v["Status"].as_object().unwrap().len(), 7);
        prop_assert_eq!(v["Status"]["OSInfo"].as_object().unwrap().len(), 8);
    }
}

#[test]
fn bytes_escape_like_go_encoding_json() {
    use kvrs_converter::domain::{Commandline, QemuArg};
    let odd = "a<b>&c\u{2028}d\u{2029}\u{8}\u{c}\\b\"\n\u{1}é";
    let spec = Domain {
        qemu_commandline: Some(Commandline {
            env: vec![],
            arg: vec![QemuArg { value: odd.into() }],
        }),
        ..Domain::default()
    };
    let env = DomainEnvelope::new("ns", "vm", spec);
    let bytes = to_go_json_vec(&env);
    let text = String::from_utf8(bytes.clone()).unwrap();
    // What Go's encoding/json writes for that string.
    let go = r#""a\u003cb\u003e\u0026c\u2028d\u2029\u0008\u000c\\b\"\n\u0001é""#;
    assert!(text.contains(go), "{text}");
    assert_eq!(from_go_json_slice(&bytes).unwrap(), env);
    let pretty = kvrs_converter::gojson::to_go_json_pretty(&env);
    assert!(String::from_utf8(pretty.clone()).unwrap().contains(go));
    assert_eq!(from_go_json_slice(&pretty).unwrap(), env);
}
