//! kvrs's node-labeller CPU labels (`kvrs_virt_handler::node_labeller::cpu::cpu_labels`) against
//! KubeVirt v1.9.0's own node labeller (pkg/virt-handler/node-labeller), imported as a Go module
//! (`scripts/nodelabeller-harness.sh` builds `tests/nodelabeller`; the test fails when the
//! harness cannot be built or this machine's libvirt cannot be asked).
//!
//! The capabilities come from this machine's real libvirt and QEMU: a private libvirtd
//! (`scripts/libvirtd-session.sh`) and `virsh domcapabilities`, `hypervisor-cpu-baseline
//! --features` and `capabilities`, as KubeVirt's `node-labeller.sh` runs them (virt type `qemu`:
//! the session daemon cannot open `/dev/kvm`). Variants of those documents, made here, change
//! what each label depends on: usable flags, model names with spaces, the host model and its
//! vendor and features, obsolete models (defaults, a configured list with the host model, an
//! empty list), the TSC counter, SEV/SEV-ES/SNP/TDX/s390-pv, and documents KubeVirt refuses.
//! Both sides must give the same label set (or both refuse). KubeVirt's labeller also asks
//! `/dev/kvm` for Hyper-V labels, which kvrs does not derive: those are left out of its side.
//!
//! The second test runs the virt-handler DaemonSet's init container script
//! (bins/deploy/virt-handler/daemonset.yaml) with this machine's libvirt and QEMU (the launcher
//! image's packages), in a private mount namespace where /var/lib/kubevirt-node-labeller is a
//! temporary directory and the image's qemu user 107 exists, then labels from what it wrote
//! with kvrs's handler (`load_labels`) and with KubeVirt's labeller, and checks that a
//! host-model VMI's migration target selector is satisfied by those labels.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kvrs_virt_handler::node_labeller::cpu::{
    CAPABILITIES_FILE, CpuLabelInputs, DOMCAPABILITIES_FILE, SUPPORTED_FEATURES_FILE, cpu_labels,
};
use serde_json::{Value, json};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn harness_binary() -> PathBuf {
    kvrs_tests::go_harness(
        "scripts/nodelabeller-harness.sh",
        "Go with cgo, libvirt-dev and the module proxy",
    )
}

/// A private libvirtd for the test's lifetime (stopped on drop, by its PIDs).
struct Session {
    dir: tempfile::TempDir,
    uri: String,
}

impl Session {
    fn start() -> Session {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("start")
            .arg(dir.path())
            .stderr(Stdio::inherit())
            .output()
            .expect("running scripts/libvirtd-session.sh");
        assert!(
            out.status.success(),
            "scripts/libvirtd-session.sh start failed ({}): the real libvirt is needed",
            out.status
        );
        let uri = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Session { dir, uri }
    }

    /// `virsh -c URI ARGS` with `stdin`, its stdout (the test fails on an error).
    fn virsh(&self, args: &[&str], stdin: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("virsh")
            .arg("-c")
            .arg(&self.uri)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("running virsh (libvirt-clients)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "virsh {args:?}: {}", out.status);
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(repo_root().join("scripts/libvirtd-session.sh"))
            .arg("stop")
            .arg(self.dir.path())
            .status();
    }
}

/// The three files, as KubeVirt's node-labeller.sh writes them.
#[derive(Clone)]
struct Files {
    domcaps: String,
    features: String,
    caps: Option<String>,
}

fn real_files() -> Files {
    let s = Session::start();
    let dc = ["--machine", "q35", "--arch", "x86_64", "--virttype", "qemu"];
    let domcaps = s.virsh(&[&["domcapabilities"][..], &dc[..]].concat(), "");
    let baseline = [
        &["hypervisor-cpu-baseline", "--features", "/dev/stdin"][..],
        &dc[..],
    ]
    .concat();
    let features = s.virsh(&baseline, &domcaps);
    let caps = s.virsh(&["capabilities"], "");
    Files {
        domcaps,
        features,
        caps: Some(caps),
    }
}

struct Case {
    name: String,
    files: Files,
    obsolete: Option<BTreeSet<String>>,
}

impl Case {
    fn new(name: &str, files: Files) -> Case {
        Case {
            name: name.into(),
            files,
            obsolete: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut files = json!({
            DOMCAPABILITIES_FILE: self.files.domcaps,
            SUPPORTED_FEATURES_FILE: self.files.features,
        });
        if let Some(c) = &self.files.caps {
            files[CAPABILITIES_FILE] = json!(c);
        }
        let obsolete = self.obsolete.as_ref().map(|s| {
            s.iter()
                .map(|m| (m.clone(), true))
                .collect::<BTreeMap<_, _>>()
        });
        json!({"name": self.name, "files": files, "obsoleteCPUModels": obsolete})
    }

    fn kvrs(&self) -> Result<BTreeMap<String, String>, String> {
        cpu_labels(&CpuLabelInputs {
            domcapabilities: &self.files.domcaps,
            supported_features: &self.files.features,
            capabilities: self.files.caps.as_deref(),
            obsolete_cpu_models: self.obsolete.as_ref(),
            realtime_capable: realtime_capable(),
        })
        .map_err(|e| e.to_string())
    }
}

/// What KubeVirt's labeller asks `sysctl` on this machine.
fn realtime_capable() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us").is_ok_and(|v| v.trim() == "-1")
}

/// `text` with the first `from` replaced by `to`; the test fails when `from` is not there, so a
/// variant never silently equals the original.
fn edit(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from:?} not in the document");
    text.replacen(from, to, 1)
}

/// The `<mode name='host-model' ...>...</mode>` element of the domain capabilities.
fn host_model_mode(domcaps: &str) -> &str {
    let start = domcaps
        .find("<mode name='host-model'")
        .expect("a host-model mode");
    let end = start + domcaps[start..].find("</mode>").expect("its end") + "</mode>".len();
    &domcaps[start..end]
}

fn variants(real: &Files) -> Vec<Case> {
    let d = &real.domcaps;
    let with_domcaps = |name: &str, domcaps: String| {
        Case::new(
            name,
            Files {
                domcaps,
                ..real.clone()
            },
        )
    };
    let with_caps = |name: &str, caps: Option<String>| {
        Case::new(
            name,
            Files {
                caps,
                ..real.clone()
            },
        )
    };
    let mut cases = vec![Case::new("real", real.clone())];
    // Usable flags both ways, a model without the flag, names with spaces, an empty name.
    let usable: Vec<&str> = d
        .match_indices("usable='yes'")
        .map(|(i, _)| &d[i..i + 12])
        .collect();
    assert!(
        usable.len() > 5,
        "the real domain capabilities list usable models"
    );
    cases.push(with_domcaps(
        "usable flags flipped",
        d.replace("usable='yes'", "usable='tmp'")
            .replace("usable='no'", "usable='yes'")
            .replace("usable='tmp'", "usable='no'"),
    ));
    cases.push(with_domcaps(
        "odd usable values, spaces, empty names",
        // (A real model loses its flag first, then the odd ones go in.)
        edit(
            &edit(
                &edit(d, "usable='no'", "usable='maybe'"),
                "usable='yes'",
                "",
            ),
            "<mode name='custom' supported='yes'>",
            "<mode name='custom' supported='yes'>\n      <model usable='yes'>  Spacey-Model\t</model>\n      <model usable='no'> Blocked </model>\n      <model usable='yes'>   </model>\n      <model>Flagless</model>",
        ),
    ));
    // The host model: another name with spaces, no vendor, two vendors, features of each policy.
    let hm = host_model_mode(d);
    cases.push(with_domcaps(
        "host model renamed, no vendor",
        d.replace(
            hm,
            &hm.replace("<vendor>AMD</vendor>", "")
                .replace(
                    "<model fallback='forbid'>EPYC</model>",
                    "<model fallback='allow'> Skylake-Client-IBRS </model><model>Second</model>",
                )
                .replace("policy='require' name='ss'", "policy='disable' name='ss'")
                .replace(
                    "policy='require' name='x2apic'",
                    "policy='optional' name='x2apic'",
                ),
        ),
    ));
    cases.push(with_domcaps(
        "two vendors",
        d.replace(
            hm,
            &hm.replace(
                "<vendor>AMD</vendor>",
                "<vendor>Intel</vendor><vendor>Hygon</vendor>",
            ),
        ),
    ));
    cases.push(with_domcaps("no host-model mode", d.replace(hm, "")));
    cases.push(with_domcaps(
        "host model without a model (refused)",
        d.replace(hm, &hm.replace("<model fallback='forbid'>EPYC</model>", "")),
    ));
    // Obsolete models: a configured list naming the host model and a usable model, an empty one.
    let mut configured = Case::new("obsolete list with the host model", real.clone());
    configured.obsolete = Some(["EPYC", "Nehalem", "486"].map(String::from).into());
    cases.push(configured);
    let mut empty = Case::new("empty obsolete list", real.clone());
    empty.obsolete = Some(BTreeSet::new());
    cases.push(empty);
    // The TSC counter: scalable, not, another counter, none, a bad frequency (refused).
    let caps = real.caps.as_deref().unwrap();
    let counter = |c: &str| {
        Some(edit(
            caps,
            "<arch>x86_64</arch>",
            &format!("<arch>x86_64</arch>\n      {c}"),
        ))
    };
    cases.push(with_caps(
        "tsc scalable",
        counter("<counter name='tsc' frequency='2899999000' scaling='yes'/>"),
    ));
    cases.push(with_caps(
        "tsc not scalable",
        counter("<counter name='tsc' frequency=' 1000 ' scaling='no'/>"),
    ));
    cases.push(with_caps(
        "another counter",
        counter("<counter name='hpet' frequency='7' scaling='yes'/>"),
    ));
    cases.push(with_caps("no capabilities file", None));
    // Launch security: SEV, SEV-ES (max ES guests), SNP (launchSecurity), TDX, s390-pv.
    cases.push(with_domcaps(
        "sev only",
        edit(d, "<sev supported='no'/>", "<sev supported='yes'><cbitpos>51</cbitpos><reducedPhysBits>1</reducedPhysBits><maxGuests>15</maxGuests><maxESGuests>0</maxESGuests></sev>"),
    ));
    cases.push(with_domcaps(
        "sev-es and snp",
        edit(
            &edit(d, "<sev supported='no'/>", "<sev supported='yes'><maxESGuests> 16 </maxESGuests></sev>"),
            "<launchSecurity supported='no'/>",
            "<launchSecurity supported='yes'><enum name='sectype'><value>sev</value><value>sev-snp</value></enum></launchSecurity><tdx supported='yes'/><s390-pv supported='yes'/>",
        ),
    ));
    cases.push(with_domcaps(
        "snp offered without sev",
        edit(d, "<launchSecurity supported='no'/>", "<launchSecurity supported='yes'><enum name='sectype'><value>sev-snp</value></enum></launchSecurity><tdx supported='no'/>"),
    ));
    cases.push(with_domcaps(
        "bad maxESGuests (refused)",
        edit(
            d,
            "<sev supported='no'/>",
            "<sev supported='yes'><maxESGuests>many</maxESGuests></sev>",
        ),
    ));
    cases.push(with_domcaps(
        "malformed domcapabilities (refused)",
        d.replace("</domainCapabilities>", ""),
    ));
    cases.push(Case::new(
        "baseline with disabled features",
        Files {
            features: real
                .features
                .replacen("policy='require'", "policy='disable'", 3),
            ..real.clone()
        },
    ));
    cases.push(Case::new(
        "empty baseline (refused)",
        Files {
            features: String::new(),
            ..real.clone()
        },
    ));
    cases
}

/// Runs KubeVirt's labeller on `cases` in a private mount namespace with a tmpfs on /var/lib
/// (its fixed /var/lib/kubevirt-node-labeller is written there, nowhere else).
fn kubevirt(harness: &Path, cases: &[Case]) -> Vec<Value> {
    kubevirt_raw(
        harness,
        &Value::Array(cases.iter().map(Case::to_json).collect()),
    )
}

fn kubevirt_raw(harness: &Path, input: &Value) -> Vec<Value> {
    use std::io::Write;
    let input = input.to_string();
    let mut child = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs tmpfs /var/lib && mkdir /var/lib/kubevirt-node-labeller && exec \"$0\"",
        )
        .arg(harness)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("running the harness under unshare (util-linux, root)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the harness failed: {}", out.status);
    serde_json::from_slice::<Vec<Value>>(&out.stdout).expect("the harness's JSON")
}

#[test]
fn cpu_labels_match_kubevirts_node_labeller_on_real_and_varied_capabilities() {
    let harness = harness_binary();
    let real = real_files();
    let cases = variants(&real);
    let outcomes = kubevirt(&harness, &cases);
    assert_eq!(outcomes.len(), cases.len());
    let mut failures = Vec::new();
    let mut hyperv_left_out = 0;
    for (case, out) in cases.iter().zip(&outcomes) {
        assert_eq!(out["name"], case.name.as_str());
        let theirs: Result<BTreeMap<String, String>, String> = match out["error"].as_str() {
            Some(e) => Err(e.to_string()),
            None => {
                let mut labels: BTreeMap<String, String> =
                    serde_json::from_value(out["labels"].clone()).unwrap();
                labels.remove("kubernetes.io/hostname");
                let before = labels.len();
                labels.retain(|k, _| !k.starts_with("hyperv.node.kubevirt.io/"));
                hyperv_left_out += before - labels.len();
                Ok(labels)
            }
        };
        let ours = case.kvrs();
        match (&ours, &theirs) {
            (Ok(a), Ok(b)) if a == b => {
                eprintln!("{}: {} labels agree", case.name, a.len());
            }
            (Err(a), Err(b)) => eprintln!("{}: both refuse (kvrs: {a}; KubeVirt: {b})", case.name),
            (Ok(a), Ok(b)) => {
                let only = |x: &BTreeMap<String, String>, y: &BTreeMap<String, String>| {
                    x.iter()
                        .filter(|(k, v)| y.get(*k) != Some(v))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                };
                failures.push(format!(
                    "{}: only kvrs {:?}; only KubeVirt {:?}",
                    case.name,
                    only(a, b),
                    only(b, a)
                ));
            }
            (a, b) => failures.push(format!("{}: kvrs {a:?}, KubeVirt {b:?}", case.name)),
        }
    }
    eprintln!(
        "{} cases; {hyperv_left_out} Hyper-V labels of KubeVirt's (from /dev/kvm) left out",
        cases.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The real capabilities give what a host-model migration needs.
    let real_labels = cases[0].kvrs().unwrap();
    assert!(
        real_labels
            .keys()
            .any(|k| k.starts_with("host-model-cpu.node.kubevirt.io/"))
    );
    assert!(
        real_labels
            .keys()
            .any(|k| k.starts_with("cpu-model-migration.node.kubevirt.io/"))
    );
}

/// The init container's script, as the DaemonSet carries it.
fn init_script() -> String {
    let text = std::fs::read_to_string(repo_root().join("bins/deploy/virt-handler/daemonset.yaml"))
        .expect("the DaemonSet manifest");
    let ds: Value = serde_norway::from_str(&text).expect("the DaemonSet's YAML");
    let init = &ds["spec"]["template"]["spec"]["initContainers"][0];
    assert_eq!(init["command"], json!(["/bin/sh", "-c"]));
    init["args"][0]
        .as_str()
        .expect("the init script")
        .to_string()
}

/// `file` (/etc/passwd or /etc/group) with `line` added unless an entry of `name` is there.
fn with_entry(file: &str, name: &str, line: &str) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    if text.lines().any(|l| l.starts_with(&format!("{name}:"))) {
        text
    } else {
        format!("{text}{line}\n")
    }
}

#[test]
fn the_daemonsets_init_container_writes_what_both_labellers_label_a_migratable_node_from() {
    let harness = harness_binary();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir(&out).unwrap();
    // The emptyDir: writable by the image's user.
    Command::new("chmod").arg("777").arg(&out).status().unwrap();
    let passwd = tmp.path().join("passwd");
    let group = tmp.path().join("group");
    std::fs::write(
        &passwd,
        with_entry(
            "/etc/passwd",
            "qemu",
            "qemu:x:107:107:qemu user:/var/lib/qemu:/usr/sbin/nologin",
        ),
    )
    .unwrap();
    std::fs::write(&group, with_entry("/etc/group", "qemu", "qemu:x:107:")).unwrap();
    let script = tmp.path().join("init.sh");
    std::fs::write(&script, init_script()).unwrap();
    let status = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(concat!(
            "mount --bind \"$1\" /etc/passwd && mount --bind \"$2\" /etc/group && ",
            "mount -t tmpfs tmpfs /var/lib && mkdir /var/lib/kubevirt-node-labeller && ",
            "mount --bind \"$3\" /var/lib/kubevirt-node-labeller && exec sh \"$4\""
        ))
        .arg("sh")
        .args([&passwd, &group, &out, &script])
        // The script's `mktemp -d` (libvirt's runtime directory) inside the test's directory.
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("running the init script under unshare (util-linux, root)");
    assert!(
        status.success(),
        "the init container's script failed: {status}"
    );

    let ours = kvrs_virt_handler::node_labeller::load_labels(&out, realtime_capable())
        .expect("labels from the init container's files");
    let read = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let files = json!({
        DOMCAPABILITIES_FILE: read(DOMCAPABILITIES_FILE),
        SUPPORTED_FEATURES_FILE: read(SUPPORTED_FEATURES_FILE),
        CAPABILITIES_FILE: read(CAPABILITIES_FILE),
    });
    let theirs = kubevirt_raw(
        &harness,
        &json!([{"name": "init container", "files": files, "obsoleteCPUModels": null}]),
    );
    assert_eq!(
        theirs[0]["error"],
        Value::Null,
        "KubeVirt refused the files"
    );
    let mut theirs: BTreeMap<String, String> =
        serde_json::from_value(theirs[0]["labels"].clone()).unwrap();
    theirs.remove("kubernetes.io/hostname");
    theirs.retain(|k, _| !k.starts_with("hyperv.node.kubevirt.io/"));
    // KubeVirt's machine labels come from capabilities.xml in virt-handler's main, not the
    // labeller the harness builds; kvrs's from QEMU's list (checked in node_labeller.rs).
    let cpu_only: BTreeMap<String, String> = ours
        .iter()
        .filter(|(k, _)| !k.starts_with("machine-type.node.kubevirt.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        cpu_only, theirs,
        "kvrs's handler and KubeVirt's labeller disagree"
    );
    assert!(ours.contains_key("machine-type.node.kubevirt.io/q35"));

    // What kvrs's migration controller (like KubeVirt's) puts in a host-model VMI's target pod
    // selector from the source node's labels is there on this node.
    let host_model = ours
        .keys()
        .find_map(|k| k.strip_prefix("host-model-cpu.node.kubevirt.io/"))
        .expect("a host-model-cpu label");
    assert!(
        ours.contains_key(&format!(
            "cpu-model-migration.node.kubevirt.io/{host_model}"
        )),
        "the host model {host_model} is offered as a migration CPU"
    );
    for f in ours
        .keys()
        .filter_map(|k| k.strip_prefix("host-model-required-features.node.kubevirt.io/"))
    {
        assert!(
            ours.contains_key(&format!("cpu-feature.node.kubevirt.io/{f}")),
            "host-model feature {f} is a node CPU feature"
        );
    }
    eprintln!(
        "init container: {} labels, host model {host_model}, agreeing with KubeVirt's labeller",
        ours.len()
    );
}
