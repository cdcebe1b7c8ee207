//! Properties of admission on generated VMIs: defaulting never panics and is idempotent, and an
//! admitted VMI is admitted again unchanged (what the API server stores is a fixed point).

use proptest::prelude::*;
use serde_json::{Value, json};

use kvrs_core::admission::admit;
use kvrs_core::defaults::apply_defaults;
use kvrs_core::{ClusterConfig, VirtualMachineInstance};

fn opt<T: std::fmt::Debug + Clone + 'static>(
    s: impl Strategy<Value = T> + 'static,
) -> BoxedStrategy<Option<T>> {
    prop::option::of(s).boxed()
}

fn quantity(values: &'static [&'static str]) -> BoxedStrategy<String> {
    prop::sample::select(values)
        .prop_map(str::to_string)
        .boxed()
}

fn feature_state() -> BoxedStrategy<Value> {
    prop_oneof![
        Just(json!({})),
        Just(json!({"enabled": true})),
        Just(json!({"enabled": false}))
    ]
    .boxed()
}

fn cpu() -> BoxedStrategy<Value> {
    (
        opt(0i64..5),
        opt(0i64..5),
        opt(0i64..3),
        opt(prop::sample::select(
            &["host-model", "host-passthrough", "Haswell"][..],
        )),
        any::<bool>(),
    )
        .prop_map(|(cores, sockets, threads, model, dedicated)| {
            let mut c = json!({});
            for (k, v) in [("cores", cores), ("sockets", sockets), ("threads", threads)] {
                if let Some(v) = v {
                    c[k] = json!(v);
                }
            }
            if let Some(m) = model {
                c["model"] = json!(m);
            }
            if dedicated {
                c["dedicatedCpuPlacement"] = json!(true);
            }
            c
        })
        .boxed()
}

fn disks_and_volumes() -> BoxedStrategy<(Value, Value)> {
    let disk = (
        prop::sample::select(&["disk", "cdrom", "lun", "none"][..]),
        opt(prop::sample::select(
            &["virtio", "sata", "scsi", "usb", "ide", ""][..],
        )),
    );
    prop::collection::vec(
        (
            disk,
            any::<bool>(),
            prop::sample::select(&["img", "img:1", "img:latest", "r@sha256:0"][..]),
        ),
        0..4,
    )
    .prop_map(|items| {
        let mut disks = vec![];
        let mut volumes = vec![];
        for (i, ((target, bus), has_disk, image)) in items.into_iter().enumerate() {
            let name = format!("v{i}");
            if has_disk {
                let mut d = json!({"name": name});
                if target != "none" {
                    d[target] = match bus {
                        Some(b) => json!({"bus": b}),
                        None => json!({}),
                    };
                }
                disks.push(d);
            }
            volumes.push(json!({"name": name, "containerDisk": {"image": image}}));
        }
        (json!(disks), json!(volumes))
    })
    .boxed()
}

fn hyperv() -> BoxedStrategy<Value> {
    prop::collection::btree_map(
        prop::sample::select(
            &[
                "relaxed", "vapic", "vpindex", "synic", "ipi", "evmcs", "reset",
            ][..],
        ),
        feature_state(),
        0..5,
    )
    .prop_map(|m| json!(m))
    .boxed()
}

fn vmi() -> BoxedStrategy<Value> {
    (
        opt(cpu()),
        opt(quantity(&["1Gi", "1000M", "512Mi", "3Gi", "2G", "0"])),
        opt(quantity(&["100m", "1", "1500m", "4"])),
        opt(quantity(&["1", "2", "2500m"])),
        opt(quantity(&["1Gi", "2Gi", "1500M"])),
        disks_and_volumes(),
        opt(hyperv()),
        opt(prop::sample::select(&["amd64", "arm64", "s390x", ""][..])),
        opt(prop::sample::select(
            &["q35", "pc-q35-rhel9.6.0", "pc-i440fx-2.5", ""][..],
        )),
        any::<bool>(),
    )
        .prop_map(
            |(
                cpu,
                guest,
                req_cpu,
                lim_cpu,
                lim_mem,
                (disks, volumes),
                hv,
                arch,
                machine,
                no_pod,
            )| {
                let mut domain = json!({"devices": {"disks": disks}, "resources": {}});
                if let Some(c) = cpu {
                    domain["cpu"] = c;
                }
                if let Some(g) = guest {
                    domain["memory"] = json!({"guest": g});
                }
                if let Some(r) = req_cpu {
                    domain["resources"]["requests"] = json!({"cpu": r, "memory": "1Gi"});
                }
                if let (Some(c), Some(m)) = (lim_cpu, lim_mem) {
                    domain["resources"]["limits"] = json!({"cpu": c, "memory": m});
                }
                if let Some(h) = hv {
                    domain["features"] = json!({"hyperv": h});
                }
                if let Some(m) = machine {
                    domain["machine"] = json!({"type": m});
                }
                if no_pod {
                    domain["devices"]["autoattachPodInterface"] = json!(false);
                }
                let mut spec = json!({"domain": domain, "volumes": volumes});
                if let Some(a) = arch {
                    spec["architecture"] = json!(a);
                }
                json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                   "metadata": {"name": "p"}, "spec": spec})
            },
        )
        .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn defaulting_is_idempotent(doc in vmi()) {
        let mut v: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
        let config = ClusterConfig::default();
        apply_defaults(&mut v, &config);
        let once = v.clone();
        apply_defaults(&mut v, &config);
        prop_assert_eq!(once, v);
    }

    #[test]
    fn an_admitted_vmi_is_a_fixed_point(doc in vmi()) {
        let v: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
        let config = ClusterConfig::default();
        if let Ok(admitted) = admit(v, &config) {
            let again = admit(admitted.clone(), &config);
            prop_assert!(again.is_ok(), "re-admission rejected: {:?}", again.err());
            prop_assert_eq!(again.unwrap(), admitted);
        }
    }

    #[test]
    fn every_rejection_names_a_field_or_says_why(doc in vmi()) {
        let v: VirtualMachineInstance = serde_json::from_value(doc).unwrap();
        if let Err(e) = admit(v, &ClusterConfig::default()) {
            prop_assert!(!e.causes().is_empty());
            for cause in e.causes() {
                prop_assert!(!cause.message.is_empty());
                prop_assert!(cause.field.is_empty() || cause.field.starts_with("spec") || cause.field.starts_with("metadata"), "{}", cause.field);
            }
        }
    }
}
