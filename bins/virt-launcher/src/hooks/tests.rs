//! The hook manager against test sidecars on Unix sockets (no libvirt): discovery, versions,
//! order, and every failure mode ending in an error that names the hook, within the deadlines.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kvrs_api::VirtualMachineInstance;
use kvrs_converter::Domain;
use kvrs_ipc::hooks::{CallbacksVersion, ON_DEFINE_DOMAIN};

use super::test_sidecar::{TestSidecar, serve};
use super::*;

/// Short deadlines so the failure tests take well under a second each.
fn fast() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(500),
        info: Duration::from_millis(300),
        call: Duration::from_millis(500),
        scan_interval: Duration::from_millis(20),
    }
}

fn vmi() -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm", "namespace": "ns", "annotations": {"example.org/marker": "m1"}},
        "spec": {"domain": {"devices": {}}}
    }))
    .unwrap()
}

fn domain_xml() -> String {
    let d = Domain {
        kind: "qemu".into(),
        name: "ns_vm".into(),
        ..Default::default()
    };
    d.to_xml().unwrap()
}

/// An `OnDefineDomain` that appends `tag` to the domain's `<title>`-free marker: it adds a
/// sysinfo `<entry name="tagN">` so the order of edits shows in the result.
fn tagging(tag: &'static str) -> super::test_sidecar::OnDefine {
    Arc::new(move |xml, vmi| {
        assert_eq!(vmi["metadata"]["annotations"]["example.org/marker"], "m1");
        let mut d =
            Domain::from_xml(xml).map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        let sys = d.sysinfo.get_or_insert_with(Default::default);
        sys.kind = "smbios".into();
        sys.base_board.entries.push(kvrs_converter::domain::Entry {
            name: tag.into(),
            value: tag.into(),
        });
        Ok(d.to_xml().unwrap().into_bytes())
    })
}

fn calls() -> Arc<Mutex<Vec<String>>> {
    Arc::new(Mutex::new(Vec::new()))
}

async fn collect_in(dir: &Path, expected: u32) -> Result<HookSidecars, HookError> {
    collect(dir, expected, Duration::from_secs(5), fast(), "ns/vm").await
}

#[tokio::test]
async fn no_sidecars_leave_the_xml_untouched_without_reading_the_directory() {
    let hooks = collect(
        Path::new("/nonexistent"),
        0,
        Duration::ZERO,
        fast(),
        "ns/vm",
    )
    .await
    .unwrap();
    let xml = domain_xml();
    assert_eq!(
        hooks
            .on_define_domain(&vmi(), "ns_vm", xml.clone())
            .await
            .unwrap(),
        xml
    );
}

#[tokio::test]
async fn sidecars_edit_the_domain_in_kubevirts_order_not_by_priority() {
    let dir = tempfile::tempdir().unwrap();
    let log = calls();
    // hook-sidecar-1 has the higher priority; KubeVirt still calls hook-sidecar-0 first.
    let mut first = TestSidecar::new("first", &log);
    first.on_define = tagging("first");
    first.hook_points = vec![(ON_DEFINE_DOMAIN.into(), 0)];
    let mut second = TestSidecar::new("second", &log);
    second.on_define = tagging("second");
    second.hook_points = vec![(ON_DEFINE_DOMAIN.into(), 100)];
    second.versions = vec!["v1alpha1".into(), "v2".into()];
    let _a = serve(&dir.path().join("hook-sidecar-0/shim-aa.sock"), first);
    let _b = serve(&dir.path().join("hook-sidecar-1/shim-bb.sock"), second);

    let hooks = collect_in(dir.path(), 2).await.unwrap();
    let order: Vec<(String, CallbacksVersion)> = hooks
        .registry()
        .callbacks(ON_DEFINE_DOMAIN)
        .iter()
        .map(|s| (s.hook.name.clone(), s.version))
        .collect();
    assert_eq!(
        order,
        [
            ("first".to_string(), CallbacksVersion::V1alpha3),
            ("second".to_string(), CallbacksVersion::V1alpha1)
        ]
    );

    let xml = hooks
        .on_define_domain(&vmi(), "ns_vm", domain_xml())
        .await
        .unwrap();
    let d = Domain::from_xml(&xml).unwrap();
    let tags: Vec<&str> = d
        .sysinfo
        .as_ref()
        .unwrap()
        .base_board
        .entries
        .iter()
        .map(|e| e.name.as_ref())
        .collect();
    assert_eq!(tags, ["first", "second"]);
    assert_eq!(
        *log.lock().unwrap(),
        [
            "first:Info",
            "second:Info",
            "first:OnDefineDomain/v1alpha3",
            "second:OnDefineDomain/v1alpha1"
        ]
    );
}

#[tokio::test]
async fn collect_waits_for_a_sidecar_that_starts_late() {
    let dir = tempfile::tempdir().unwrap();
    let log = calls();
    let socket = dir.path().join("hook-sidecar-0/late.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let sidecar = TestSidecar::new("late", &log);
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        serve(&socket, sidecar)
    });
    let hooks = collect_in(dir.path(), 1).await.unwrap();
    assert_eq!(hooks.registry().len(), 1);
    drop(late.await.unwrap());
}

#[tokio::test]
async fn too_few_sidecars_time_out_naming_those_that_answered() {
    let dir = tempfile::tempdir().unwrap();
    let log = calls();
    let _a = serve(
        &dir.path().join("hook-sidecar-0/a.sock"),
        TestSidecar::new("a", &log),
    );
    // A socket file nobody listens on: never ready.
    std::fs::create_dir_all(dir.path().join("hook-sidecar-1")).unwrap();
    drop(
        std::os::unix::net::UnixListener::bind(dir.path().join("hook-sidecar-1/dead.sock"))
            .unwrap(),
    );
    let t = Instant::now();
    let err = collect(dir.path(), 2, Duration::from_millis(300), fast(), "ns/vm")
        .await
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(err.label(), "collect_timeout");
    let text = err.to_string();
    assert!(
        text.contains("only 1 of 2") && text.contains("hook-sidecar-0/a.sock (\\\"a\\\")"),
        "{text}"
    );
}

#[tokio::test]
async fn a_sidecar_that_never_answers_info_fails_collection_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut mute = TestSidecar::new("mute", &calls());
    mute.info_hangs = true;
    let _s = serve(&dir.path().join("hook-sidecar-0/mute.sock"), mute);
    let t = Instant::now();
    let err = collect_in(dir.path(), 1).await.unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(err.label(), "handshake_failed");
    assert!(
        err.to_string().contains("hook-sidecar-0/mute.sock"),
        "{err}"
    );
}

#[tokio::test]
async fn a_sidecar_without_a_known_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut future = TestSidecar::new("future", &calls());
    future.versions = vec!["v1beta1".into()];
    let _s = serve(&dir.path().join("hook-sidecar-0/f.sock"), future);
    let err = collect_in(dir.path(), 1).await.unwrap_err();
    assert_eq!(err.label(), "unsupported_version");
    assert!(
        err.to_string().contains("\"future\"") && err.to_string().contains("v1beta1"),
        "{err}"
    );
}

#[tokio::test]
async fn define_failures_name_the_hook_and_never_hang() {
    struct Case {
        label: &'static str,
        setup: fn(&mut TestSidecar),
    }
    let cases = [
        Case {
            label: "malformed_domain",
            setup: |s| s.on_define = Arc::new(|_, _| Ok(b"<domain><name>ns_vm</name>".to_vec())),
        },
        Case {
            label: "hook_failed",
            setup: |s| {
                s.on_define =
                    Arc::new(|_, _| Err(tonic::Status::internal("onDefineDomain exited 2")))
            },
        },
        Case {
            label: "hook_timeout",
            setup: |s| s.define_hangs = true,
        },
        Case {
            label: "renamed_domain",
            setup: |s| {
                s.on_define = Arc::new(|xml, _| Ok(xml.replace("ns_vm", "ns_other").into_bytes()))
            },
        },
    ];
    for case in cases {
        let dir = tempfile::tempdir().unwrap();
        let mut sidecar = TestSidecar::new("bad", &calls());
        (case.setup)(&mut sidecar);
        let _s = serve(&dir.path().join("hook-sidecar-0/bad.sock"), sidecar);
        let hooks = collect_in(dir.path(), 1).await.unwrap();
        let t = Instant::now();
        let err = hooks
            .on_define_domain(&vmi(), "ns_vm", domain_xml())
            .await
            .unwrap_err();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{}: {:?}",
            case.label,
            t.elapsed()
        );
        assert_eq!(err.label(), case.label, "{err}");
        assert!(
            err.to_string()
                .contains("hook-sidecar-0/bad.sock (\"bad\")"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_sidecar_that_exited_fails_the_define_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = serve(
        &dir.path().join("hook-sidecar-0/gone.sock"),
        TestSidecar::new("gone", &calls()),
    );
    let hooks = collect_in(dir.path(), 1).await.unwrap();
    sidecar.crash();
    tokio::task::yield_now().await;
    let err = hooks
        .on_define_domain(&vmi(), "ns_vm", domain_xml())
        .await
        .unwrap_err();
    assert!(
        matches!(err.label(), "hook_unreachable" | "hook_failed"),
        "{}: {err}",
        err.label()
    );
    assert!(err.to_string().contains("gone.sock"), "{err}");
    drop(sidecar);
    // And with the socket removed too.
    let err = hooks
        .on_define_domain(&vmi(), "ns_vm", domain_xml())
        .await
        .unwrap_err();
    assert_eq!(err.label(), "hook_unreachable", "{err}");
}

#[tokio::test]
async fn pre_cloud_init_iso_and_shutdown_reach_v1alpha3_sidecars() {
    let dir = tempfile::tempdir().unwrap();
    let log = calls();
    let mut s = TestSidecar::new("ci", &log);
    s.hook_points.push(("PreCloudInitIso".into(), 0));
    let _s = serve(&dir.path().join("hook-sidecar-0/ci.sock"), s);
    let hooks = collect_in(dir.path(), 1).await.unwrap();
    assert!(hooks.wants_cloud_init());
    let data = serde_json::json!({
        "DataSource": "noCloud",
        "NoCloudMetaData": {"instance-id": "vm.ns"},
        "UserData": "#cloud-config\n",
        "NetworkData": "",
    });
    let answer = hooks
        .pre_cloud_init_iso(&vmi(), "noCloud", &data, "#cloud-config\n", "")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answer.user_data, "#cloud-config\n# edited by ci\n");
    hooks.shutdown().await;
    assert!(
        log.lock()
            .unwrap()
            .contains(&"ci:Shutdown/v1alpha3".to_string())
    );
}

#[tokio::test]
async fn the_cloud_init_iso_holds_what_the_pre_cloud_init_iso_hook_returned() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = TestSidecar::new("ci", &calls());
    s.hook_points.push(("PreCloudInitIso".into(), 0));
    let _s = serve(&dir.path().join("hooks/hook-sidecar-0/ci.sock"), s);
    let hooks = collect_in(&dir.path().join("hooks"), 1).await.unwrap();
    let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vm", "namespace": "ns"},
        "spec": {"domain": {"devices": {}}, "volumes": [
            {"name": "cloudinitdisk", "cloudInitNoCloud": {"userData": "#cloud-config\n"}}
        ]}
    }))
    .unwrap();
    let volume = &vmi.spec.volumes.as_ref().unwrap()[0];
    let iso = dir.path().join("cloud-init-dir/ns/vm/noCloud.iso");
    crate::prestart::build_cloud_init(&vmi, volume, &iso, &hooks)
        .await
        .expect("xorrisofs builds the ISO");
    let out = dir.path().join("extracted");
    let status = std::process::Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&iso)
        .args(["-extract", "/"])
        .arg(&out)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run xorriso");
    assert!(status.success());
    assert_eq!(
        std::fs::read_to_string(out.join("user-data")).unwrap(),
        "#cloud-config\n# edited by ci\n"
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta-data")).unwrap()).unwrap();
    assert_eq!(meta["instance-id"], "vm.ns");
}
