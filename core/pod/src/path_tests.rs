//! Names from the VMI that become paths in the pod or on the node must be plain names (issue
//! 17, path escapes): rendered without admission, a name, namespace, UID, virtiofs filesystem,
//! volume or access-credential secret with `/`, or that is `.` / `..`, is refused with an error
//! naming the field.

use serde_json::{Value, json};

use super::*;

/// The VMI of the pod tests (a container disk, a masquerade interface) with a virtiofs share of
/// a PVC and an SSH key secret.
fn vmi() -> Value {
    let mut v = crate::tests::vmi();
    v["spec"]["domain"]["devices"]["filesystems"] = json!([{"name": "share", "virtiofs": {}}]);
    v["spec"]["volumes"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "share", "persistentVolumeClaim": {"claimName": "c"}}));
    v["spec"]["accessCredentials"] = json!([{"sshPublicKey": {
        "source": {"secret": {"secretName": "keys"}},
        "propagationMethod": {"noCloud": {}}
    }}]);
    v
}

fn render(v: Value) -> Result<core::Pod, PodError> {
    render_launcher_pod(
        &crate::tests::typed(v),
        &ClusterConfig::default(),
        &PodInputs::default(),
    )
}

/// The field rendering `v` is refused for.
fn refused_field(v: Value) -> String {
    match render(v) {
        Err(PodError::PathComponent(e)) => {
            assert!(e.reason.contains("is not a plain name"), "{e}");
            e.field
        }
        other => panic!("not refused for a path component: {other:?}"),
    }
}

const BAD: [&str; 6] = ["../x", "..", ".", "a/b", "/abs", "a\0b"];

#[test]
fn plain_names_render() {
    let pod = serde_json::to_value(render(vmi()).unwrap()).unwrap();
    let text = pod.to_string();
    for path in [
        "/var/run/kubevirt-private/uid-1/virt-serial0-log",
        "--socket-path=/var/run/kubevirt/virtiofs-containers/share.sock",
        "/var/run/kubevirt-private/secret/keys-access-cred",
    ] {
        assert!(text.contains(path), "{path} missing from {text}");
    }
}

#[test]
fn an_unset_uid_stays_empty_as_in_kubevirt() {
    let mut v = vmi();
    v["metadata"].as_object_mut().map(|m| m.remove("uid"));
    let pod = serde_json::to_value(render(v).unwrap()).unwrap();
    assert!(
        pod.to_string()
            .contains("/var/run/kubevirt-private//virt-serial0-log")
    );
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
fn virtiofs_filesystem_names_must_be_plain_names() {
    for bad in BAD {
        let mut v = vmi();
        v["spec"]["domain"]["devices"]["filesystems"][0]["name"] = json!(bad);
        v["spec"]["volumes"][1]["name"] = json!(bad);
        assert_eq!(
            refused_field(v),
            "spec.domain.devices.filesystems[0].name",
            "{bad:?}"
        );
    }
}

#[test]
fn volume_and_secret_names_must_be_plain_names() {
    let mut v = vmi();
    v["spec"]["domain"]["devices"]["disks"][0]["name"] = json!("../x");
    v["spec"]["volumes"][0]["name"] = json!("../x");
    assert_eq!(refused_field(v), "spec.volumes[0].name");

    let mut v = vmi();
    v["spec"]["accessCredentials"][0]["sshPublicKey"]["source"]["secret"]["secretName"] =
        json!("../../x");
    assert_eq!(
        refused_field(v),
        "spec.accessCredentials[0].sshPublicKey.source.secret.secretName"
    );
}
