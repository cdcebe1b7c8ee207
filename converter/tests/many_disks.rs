//! Many disks and interfaces through the library, without admission (which refuses more than
//! 256): names, sources and lookups stay right at sizes where the per-disk list scans made
//! conversion take seconds (issue 17, linear disk handling). No timing is asserted here; the
//! work bound is pinned by `disks::naming::tests::naming_is_linear_in_the_disks` and the figures
//! are in `benches/benches/convert_many_disks.rs`.

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::{ConverterContext, convert};
use serde_json::json;

/// The `index`-th target name after `prefix`, counted the way spreadsheet columns are (`a`..`z`,
/// `aa`..`az`, `ba`..): written here on its own so the converter's namer is checked against an
/// independent count.
fn device_name(prefix: &str, index: usize) -> String {
    let mut letters = Vec::new();
    let mut n = index + 1;
    while n > 0 {
        n -= 1;
        letters.push(char::from(b'a' + u8::try_from(n % 26).expect("below 26")));
        n /= 26;
    }
    letters.reverse();
    format!("{prefix}{}", letters.into_iter().collect::<String>())
}

/// `n` disks on virtio / sata / scsi in turn; volumes listed in reverse order, emptyDisk and
/// containerDisk alternating, plus a duplicate of every volume name after them (the first wins).
fn vmi(n: usize) -> VirtualMachineInstance {
    let buses = ["virtio", "sata", "scsi"];
    let disks: Vec<_> = (0..n)
        .map(|i| json!({"name": format!("d{i}"), "disk": {"bus": buses[i % 3]}}))
        .collect();
    let mut volumes: Vec<_> = (0..n)
        .rev()
        .map(|i| {
            if i % 2 == 0 {
                json!({"name": format!("d{i}"), "emptyDisk": {"capacity": "1Gi"}})
            } else {
                json!({"name": format!("d{i}"), "containerDisk": {"image": "img"}})
            }
        })
        .collect();
    volumes.extend((0..n).map(|i| json!({"name": format!("d{i}"), "secret": {"secretName": "s"}})));
    serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {
            "domain": {
                "devices": {"disks": disks},
                "resources": {"requests": {"memory": "64Mi"}}
            },
            "volumes": volumes
        }
    }))
    .expect("vmi")
}

#[test]
fn two_thousand_disks_get_their_own_names_and_volumes() {
    let n = 2000;
    let domain = convert(&vmi(n), &ConverterContext::default()).expect("converts");
    assert_eq!(domain.devices.disks.len(), n);
    let (mut vd, mut sd) = (0, 0);
    for (i, d) in domain.devices.disks.iter().enumerate() {
        let want = if i % 3 == 0 {
            vd += 1;
            device_name("vd", vd - 1)
        } else {
            sd += 1;
            device_name("sd", sd - 1)
        };
        assert_eq!(d.target.dev.as_deref(), Some(want.as_str()), "disk {i}");
        let file = d.source.file.as_deref().unwrap_or("");
        if i % 2 == 0 {
            assert_eq!(file, format!("/var/run/libvirt/empty-disks/d{i}.qcow2"));
        } else {
            assert!(file.ends_with(&format!("/d{i}/disk.qcow2")), "{file}");
            // A container disk's backing file is numbered by the volume's position.
            let backing = d.backing_store.as_ref().and_then(|b| b.source.as_ref());
            let pos = n - 1 - i;
            assert_eq!(
                backing.and_then(|s| s.file.as_deref()),
                Some(format!("/var/run/kubevirt/container-disks/disk_{pos}.img").as_str())
            );
        }
    }
}

#[test]
fn preallocated_volumes_keep_their_discard_setting_among_many() {
    let n = 600;
    let mut v = vmi(n);
    v.spec.volumes = Some(
        serde_json::from_value(json!((0..n)
            .map(|i| json!({"name": format!("d{i}"), "persistentVolumeClaim": {"claimName": "c"}}))
            .collect::<Vec<_>>()))
        .expect("volumes"),
    );
    let ctx = ConverterContext {
        volumes_discard_ignore: (0..n).step_by(2).map(|i| format!("d{i}")).collect(),
        ..ConverterContext::default()
    };
    let domain = convert(&v, &ctx).expect("converts");
    for (i, d) in domain.devices.disks.iter().enumerate() {
        let discard = d.driver.as_ref().and_then(|drv| drv.discard.as_deref());
        let want = (i % 2 == 1).then_some("unmap");
        assert_eq!(discard, want, "disk {i}");
    }
}

#[test]
fn many_interfaces_find_their_networks() {
    let n = 1000;
    let ifaces: Vec<_> = (0..n)
        .map(|i| json!({"name": format!("n{i}"), "bridge": {}}))
        .collect();
    let networks: Vec<_> = (0..n)
        .rev()
        .map(|i| json!({"name": format!("n{i}"), "pod": {}}))
        .collect();
    let mut v: VirtualMachineInstance = serde_json::from_value(json!({
        "metadata": {"name": "vm", "namespace": "default", "uid": "1234"},
        "spec": {
            "domain": {
                "devices": {"interfaces": ifaces},
                "resources": {"requests": {"memory": "64Mi"}}
            },
            "networks": networks
        }
    }))
    .expect("vmi");
    let domain = convert(&v, &ConverterContext::default()).expect("converts");
    assert_eq!(domain.devices.interfaces.len(), n);
    if let Some(nets) = v.spec.networks.as_mut() {
        nets.retain(|net| net.name != "n999");
    }
    let err = convert(&v, &ConverterContext::default()).expect_err("n999 has no network");
    assert!(
        err.to_string().contains("failed to find network n999"),
        "{err}"
    );
}
