//! Names from the VMI that become host paths must be plain names (issue 17, path escapes):
//! through the library, without admission, a name, namespace, UID, virtiofs filesystem, volume,
//! kernel or host-disk file name with `/`, or that is `.` / `..`, is refused with an error
//! naming the field, instead of climbing out of the launcher's directories.

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::{ConvertError, ConverterContext, convert_to_xml};
use serde_json::{Value, json};

/// A VMI whose name, namespace and UID all reach paths: VNC and serial sockets (UID), a
/// cloud-init ISO (namespace/name), EFI NVRAM (name) and a virtiofs share.
fn vmi() -> Value {
    json!({
        "metadata": {"name": "vm", "namespace": "ns", "uid": "uid-1"},
        "spec": {
            "domain": {
                "firmware": {"bootloader": {"efi": {"secureBoot": false}}},
                "features": {"smm": {"enabled": false}},
                "devices": {
                    "disks": [
                        {"name": "root", "disk": {"bus": "virtio"}},
                        {"name": "cloudinit", "disk": {"bus": "virtio"}}
                    ],
                    "filesystems": [{"name": "share", "virtiofs": {}}]
                },
                "resources": {"requests": {"memory": "64Mi"}}
            },
            "volumes": [
                {"name": "root", "containerDisk": {"image": "img"}},
                {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#cloud-config"}},
                {"name": "share", "persistentVolumeClaim": {"claimName": "c"}}
            ]
        }
    })
}

fn convert_json(v: Value) -> Result<String, ConvertError> {
    let vmi: VirtualMachineInstance = serde_json::from_value(v).expect("vmi");
    convert_to_xml(&vmi, &ConverterContext::default())
}

/// The field the conversion of `v` is refused for.
fn refused_field(v: Value) -> String {
    match convert_json(v) {
        Ok(xml) => panic!("converted:\n{xml}"),
        Err(e) => {
            assert!(e.reason.contains("is not a plain name"), "{e}");
            e.path
        }
    }
}

const BAD: [&str; 6] = ["../x", "..", ".", "a/b", "/abs", "a\0b"];

#[test]
fn plain_names_reach_their_paths() {
    let xml = convert_json(vmi()).expect("converts");
    for path in [
        "/var/run/kubevirt-private/uid-1/virt-vnc",
        "/var/run/kubevirt-private/uid-1/virt-serial0",
        "/var/run/libvirt/cloud-init-dir/ns/vm/noCloud.iso",
        "/vm_VARS.fd",
        "/var/run/kubevirt/virtiofs-containers/share.sock",
    ] {
        assert!(xml.contains(path), "{path} missing from\n{xml}");
    }
}

#[test]
fn an_unset_uid_stays_empty_as_in_kubevirt() {
    let mut v = vmi();
    v["metadata"].as_object_mut().map(|m| m.remove("uid"));
    let xml = convert_json(v).expect("converts");
    assert!(xml.contains("/var/run/kubevirt-private//virt-vnc"), "{xml}");
}

#[test]
fn metadata_name_namespace_and_uid_must_be_plain_names() {
    for bad in BAD {
        for field in ["name", "namespace", "uid"] {
            let mut v = vmi();
            v["metadata"][field] = json!(bad);
            assert_eq!(
                refused_field(v),
                format!("metadata.{field}"),
                "{field} = {bad:?}"
            );
        }
    }
}

#[test]
fn each_path_refuses_a_climbing_name_on_its_own() {
    // The UID alone through the serial socket (no VNC), the name alone through NVRAM (no
    // cloud-init), the namespace alone through the cloud-init ISO.
    let mut v = vmi();
    v["metadata"]["uid"] = json!("../x");
    v["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = json!(false);
    assert_eq!(refused_field(v), "metadata.uid");

    let mut v = vmi();
    v["metadata"]["name"] = json!("../x");
    v["spec"]["domain"]["devices"]["disks"] = json!([{"name": "root", "disk": {}}]);
    assert_eq!(refused_field(v), "metadata.name");

    let mut v = vmi();
    v["metadata"]["namespace"] = json!("../x");
    v["spec"]["domain"]["firmware"] = json!({});
    assert_eq!(refused_field(v), "metadata.namespace");

    let mut v = vmi();
    v["metadata"]["uid"] = json!("../x");
    v["spec"]["domain"]["devices"]["autoattachGraphicsDevice"] = json!(false);
    v["spec"]["domain"]["devices"]["autoattachSerialConsole"] = json!(false);
    v["spec"]["domain"]["devices"]["clientPassthrough"] = json!({});
    assert_eq!(refused_field(v), "metadata.uid", "USB redirection sockets");
}

#[test]
fn virtiofs_filesystem_names_must_be_plain_names() {
    for bad in BAD {
        let mut v = vmi();
        v["spec"]["domain"]["devices"]["filesystems"][0]["name"] = json!(bad);
        v["spec"]["volumes"][2]["name"] = json!(bad);
        assert_eq!(
            refused_field(v),
            "spec.domain.devices.filesystems[0].name",
            "{bad:?}"
        );
    }
}

#[test]
fn volume_and_file_names_must_be_plain_names() {
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["disks"][0]["name"] = json!("../x");
    v["spec"]["volumes"][0]["name"] = json!("../x");
    assert_eq!(refused_field(v), "spec.volumes[0].name");

    let mut v = vmi();
    v["spec"]["volumes"][0] =
        json!({"name": "root", "hostDisk": {"path": "/data/..", "type": "Disk"}});
    assert_eq!(refused_field(v), "spec.volumes[0].hostDisk.path");

    let mut v = vmi();
    v["spec"]["domain"]["firmware"] = json!({"kernelBoot": {"container": {
        "image": "k", "kernelPath": "/boot/.."
    }}});
    assert_eq!(
        refused_field(v),
        "spec.domain.firmware.kernelBoot.container.kernelPath"
    );
}
