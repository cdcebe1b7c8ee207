//! Property test: arbitrary VMIs (valid JSON shapes with arbitrary values) never panic the
//! converter — it returns a domain or a `ConvertError` naming a field path.

use kvrs_converter::{ConverterContext, convert};
use proptest::prelude::*;
use serde_json::{Value, json};

fn small_str() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("virtio".to_string()),
        Just("sata".to_string()),
        Just("scsi".to_string()),
        Just("usb".to_string()),
        Just("bogus".to_string()),
        "[a-z0-9:.-]{0,12}",
    ]
}

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("1Gi".to_string()),
        Just("0".to_string()),
        Just("1.5".to_string()),
        Just("-1Mi".to_string()),
        "[0-9]{1,4}(Mi|Gi|k|m)?"
    ]
}

prop_compose! {
    fn disk()(name in "[a-z]{1,4}", kind in 0..4u8, bus in small_str(), boot in proptest::option::of(-2i32..5),
              cache in small_str(), err in proptest::option::of(small_str()), ded in any::<Option<bool>>(),
              shareable in any::<Option<bool>>()) -> Value {
        let mut d = json!({"name": name, "cache": cache, "dedicatedIOThread": ded, "shareable": shareable});
        match kind {
            0 => d["disk"] = json!({"bus": bus}),
            1 => d["lun"] = json!({"bus": bus, "reservation": true}),
            2 => d["cdrom"] = json!({"bus": bus}),
            _ => {}
        }
        if let Some(b) = boot { d["bootOrder"] = json!(b); }
        if let Some(e) = err { d["errorPolicy"] = json!(e); }
        d
    }
}

prop_compose! {
    fn volume()(name in "[a-z]{1,4}", kind in 0..9u8) -> Value {
        let src = match kind {
            0 => json!({"containerDisk": {"image": "x"}}),
            1 => json!({"persistentVolumeClaim": {"claimName": "c"}}),
            2 => json!({"cloudInitNoCloud": {}}),
            3 => json!({"emptyDisk": {"capacity": "1Gi"}}),
            4 => json!({"hostDisk": {"path": "/x/y.img", "type": "Disk"}}),
            5 => json!({"ephemeral": {"persistentVolumeClaim": {"claimName": "c"}}}),
            6 => json!({"secret": {"secretName": "s"}}),
            7 => json!({"dataVolume": {"name": "dv"}}),
            _ => json!({}),
        };
        let mut v = src;
        v["name"] = json!(name);
        v
    }
}

prop_compose! {
    fn vmi()(disks in proptest::collection::vec(disk(), 0..5), volumes in proptest::collection::vec(volume(), 0..5),
             sockets in proptest::option::of(-1i64..5), cores in proptest::option::of(-1i64..5),
             max_sockets in proptest::option::of(0i64..9), mem in quantity(), max_guest in proptest::option::of(quantity()),
             dedicated in any::<Option<bool>>(), model in small_str(), iface_model in small_str(),
             arch in prop_oneof![Just("amd64"), Just("arm64"), Just("s390x"), Just("")],
             policy in proptest::option::of(prop_oneof![Just("shared"), Just("auto"), Just("supplementalPool"), Just("x")]),
             watchdog in any::<bool>(), sound in small_str(), pci in small_str()) -> Value {
        let mut memory = json!({"guest": mem});
        if let Some(m) = max_guest { memory["maxGuest"] = json!(m); }
        let mut v = json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {
                "architecture": arch,
                "domain": {
                    "cpu": {"sockets": sockets, "cores": cores, "maxSockets": max_sockets,
                            "dedicatedCpuPlacement": dedicated, "model": model},
                    "memory": memory,
                    "devices": {
                        "disks": disks,
                        "interfaces": [{"name": "default", "masquerade": {}, "model": iface_model, "pciAddress": pci}],
                        "sound": {"name": "s", "model": sound},
                        "inputs": [{"name": "t", "type": "tablet", "bus": iface_model}]
                    },
                    "firmware": {"bootloader": {"efi": {}}}
                },
                "networks": [{"name": "default", "pod": {}}],
                "volumes": volumes
            }
        });
        if let Some(p) = policy { v["spec"]["domain"]["ioThreadsPolicy"] = json!(p); }
        if watchdog { v["spec"]["domain"]["devices"]["watchdog"] = json!({"name": "w"}); }
        v
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn converting_never_panics(v in vmi()) {
        let parsed = serde_json::from_value::<kvrs_api::VirtualMachineInstance>(v);
        // Shapes the API types reject never reach the converter; too many of them fails the test.
        prop_assume!(parsed.is_ok());
        let vmi = parsed.unwrap();
        match convert(&vmi, &ConverterContext::default()) {
            Ok(d) => { d.to_xml().unwrap(); }
            Err(e) => prop_assert!(!e.reason.is_empty()),
        }
    }
}
