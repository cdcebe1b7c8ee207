//! The user guide's network binding plugins (passt, slirp, macvtap) through `defaults`,
//! `convert`, `overhead` and `pod`: with the plugins registered in the KubeVirt CR every
//! subcommand accepts every workload; without (no CR, or a CR registering another plugin) every
//! subcommand refuses every workload with one and the same reason, virt-controller's.

use std::path::PathBuf;
use std::process::{Command, Output};

const KVRS: &str = env!("CARGO_BIN_EXE_kvrs");
const SUBCOMMANDS: [&str; 4] = ["defaults", "convert", "overhead", "pod"];

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/binding-plugins")
        .join(name)
        .display()
        .to_string()
}

/// The workloads, each with the plugin its interface names.
const WORKLOADS: [(&str, &str); 3] = [
    ("vm-passt.yaml", "passt"),
    ("vm-slirp.yaml", "slirp"),
    ("vmi-macvtap.yaml", "macvtap"),
];

fn kvrs(sub: &str, file: &str, cr: Option<&str>) -> Output {
    let mut cmd = Command::new(KVRS);
    cmd.args([sub, file]);
    if let Some(cr) = cr {
        cmd.args(["--kubevirt-cr", cr]);
    }
    cmd.output().expect("run kvrs")
}

fn accepted(sub: &str, file: &str, cr: &str) -> String {
    let out = kvrs(sub, file, Some(cr));
    assert!(
        out.status.success(),
        "{sub} {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The one-line refusal of `sub`, with exit code 2 and nothing on stdout.
fn refusal(sub: &str, file: &str, cr: Option<&str>) -> String {
    let out = kvrs(sub, file, cr);
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    assert_eq!(out.status.code(), Some(2), "{sub} {file}: {err}");
    assert!(out.stdout.is_empty(), "{sub} {file}: no partial output");
    assert_eq!(err.lines().count(), 1, "{sub} {file}: {err}");
    err
}

#[test]
fn registered_plugins_are_accepted_by_every_subcommand() {
    let cr = fixture("kubevirt-cr-plugins.yaml");
    for (file, _) in WORKLOADS {
        for sub in SUBCOMMANDS {
            let out = accepted(sub, &fixture(file), &cr);
            assert!(!out.is_empty(), "{sub} {file}");
        }
    }
}

#[test]
fn unregistered_plugins_are_refused_by_every_subcommand_for_one_reason() {
    let other = fixture("kubevirt-cr-other-plugin.yaml");
    for cr in [None, Some(other.as_str())] {
        for (file, plugin) in WORKLOADS {
            let path = fixture(file);
            let reasons: Vec<String> = SUBCOMMANDS
                .iter()
                .map(|sub| refusal(sub, &path, cr))
                .collect();
            assert!(
                reasons.iter().all(|r| *r == reasons[0]),
                "{file} with {cr:?}: {reasons:#?}"
            );
            let index = usize::from(file == "vmi-macvtap.yaml");
            assert!(
                reasons[0].contains(&format!(
                    "spec.domain.devices.interfaces[{index}].binding: couldn't find configuration \
                     for network binding: {plugin}"
                )),
                "{}",
                reasons[0]
            );
        }
    }
}

#[test]
fn sidecar_plugins_get_their_sidecar_and_leave_the_interface_to_it() {
    let cr = fixture("kubevirt-cr-plugins.yaml");
    for (file, plugin) in [("vm-passt.yaml", "passt"), ("vm-slirp.yaml", "slirp")] {
        let pod = accepted("pod", &fixture(file), &cr);
        assert!(pod.contains("name: hook-sidecar-0"), "{pod}");
        assert!(
            pod.contains(&format!(
                "image: quay.io/kubevirt/network-{plugin}-binding:v1.9.0"
            )),
            "{pod}"
        );
        assert!(pod.contains("NETWORK_BINDING_PLUGIN_NAME"), "{pod}");
        let out = kvrs("convert", &fixture(file), Some(&cr));
        let xml = String::from_utf8_lossy(&out.stdout);
        assert!(!xml.contains("<interface"), "{xml}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("is left to network binding plugin \"{plugin}\"")),
            "{err}"
        );
    }
    let pod = accepted("pod", &fixture("vm-passt.yaml"), &cr);
    assert!(
        pod.contains(
            r#"'[{"name":"netbindingpasst","namespace":"default","cni-args":{"logicNetworkName":"passtnet"}}]'"#
        ),
        "{pod}"
    );
}

#[test]
fn a_tap_plugin_is_a_tap_interface_and_no_sidecar() {
    let cr = fixture("kubevirt-cr-plugins.yaml");
    let file = fixture("vmi-macvtap.yaml");
    let xml = accepted("convert", &file, &cr);
    assert_eq!(
        xml.matches(r#"<interface type="ethernet">"#).count(),
        2,
        "{xml}"
    );
    assert!(xml.contains(r#"<alias name="ua-hostnet"/>"#), "{xml}");
    let pod = accepted("pod", &file, &cr);
    assert!(!pod.contains("name: hook-sidecar-0"), "{pod}");
    assert!(pod.contains(r#""name":"macvtapnetwork""#), "{pod}");
}
