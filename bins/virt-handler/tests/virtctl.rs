//! KubeVirt v1.9.0's own virtctl against kvrs: `virtctl-harness` (tests/virtctl, built by
//! `scripts/virtctl-harness.sh`) runs virtctl's cobra commands and its client-go unchanged,
//! with the test cluster's admin kubeconfig, through kube-apiserver's aggregator to kvrs's
//! virt-api and the virt-handler binary's REST server ([`support::aggregated`]), to a real
//! launcher and QEMU guest:
//! - `pause vmi` / `unpause vmi`: the VMI's Paused condition appears and goes, a second pause
//!   refused with KubeVirt's message;
//! - `guestosinfo`: the guest agent's report, as the launcher has it;
//! - `console`: the guest's shell answers what is typed on virtctl's stdin, Ctrl+] ends it;
//! - `vnc --proxy-only`: the port it prints serves the display's RFB handshake to its end
//!   (ServerInit);
//! - `soft-reboot`: the guest, its agent connected, is rebooted by qemu-ga and boots again;
//! - `pause vm` / `unpause vm`: the same through a VM whose VMI is the guest;
//! - `start` (plain, `--paused`, `--dry-run`) / `stop` / `restart` of VMs: the VM writes
//!   virt-api makes for each run strategy and its refusals. There is no VM controller here, so
//!   nothing acts on those writes: the test checks the VMs' `spec.runStrategy` and
//!   `status.stateChangeRequests` (a VM's VMI created, stopped or restarted is the VM
//!   controller's part, not virtctl's).
//!
//! virt-api listens on [`ADDRESS`] of link [`LINK`] (not rest_aggregated's nor virt-api's
//! `subresources` test's: they may run at once).

mod support;

use std::time::Duration;

use kvrs_test_guest::virtctl::{Session, Virtctl, rfb_handshake};
use serde_json::{Value, json};
use support::*;

const LINK: &str = "kvrs-api2";
const ADDRESS: &str = "10.253.0.3";

#[test]
fn virtctl_drives_vmis_and_vms_through_the_aggregator() {
    let _one = serial();
    let virtctl_bin = kvrs_test_guest::virtctl::harness();
    let mut setup = aggregated::Aggregated::start(LINK, ADDRESS, "virtctl");
    let (cluster, dirs, handler) = (&setup.cluster, &setup.dirs, &setup.handler);
    let virtctl = Virtctl {
        bin: virtctl_bin,
        kubeconfig: cluster.cluster.admin_kubeconfig_path().to_path_buf(),
        namespace: NS.into(),
    };

    let (vmi_uid, mut pod) =
        boot_vmi_with_agent(cluster, dirs, handler, 1, guest_with_shell("guest"));
    let ctx = || guest_context(cluster, handler, &pod, "guest");

    // pause / unpause.
    let out = virtctl.ok_or_tell(&["pause", "vmi", "guest"], ctx);
    assert_eq!(out, "VMI guest was scheduled to pause\n");
    let vmi = wait_for(
        "the Paused condition",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_some().then_some(v)
        },
        ctx,
    );
    assert_eq!(condition(&vmi, "Paused").unwrap()["reason"], "PausedByUser");
    let err = virtctl.refused(&["pause", "vmi", "guest"]);
    assert!(err.contains("VMI is already paused"), "{err}");
    let out = virtctl.ok_or_tell(&["unpause", "vmi", "guest"], ctx);
    assert_eq!(out, "VMI guest was scheduled to unpause\n");
    wait_for(
        "the Paused condition removed",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_none().then_some(())
        },
        ctx,
    );
    let err = virtctl.refused(&["unpause", "vmi", "guest"]);
    assert!(err.contains("VMI is not paused"), "{err}");

    // guestosinfo: the agent's report as the launcher has it, through virtctl's Go types.
    let out = virtctl.ok_or_tell(&["guestosinfo", "guest"], ctx);
    let info: Value = serde_json::from_str(&out).expect("guestosinfo JSON");
    assert_eq!(info["os"]["id"], kvrs_test_guest::OS_ID, "{info}");
    assert_eq!(
        info["os"]["prettyName"],
        kvrs_test_guest::OS_PRETTY_NAME,
        "{info}"
    );
    let agent = pod.guest_info();
    for (key, value) in agent["os"].as_object().expect("the agent's os") {
        if value != "" {
            assert_eq!(&info["os"][key], value, "os.{key}: {info} vs {agent}");
        }
    }
    for key in ["hostname", "guestAgentVersion"] {
        assert_eq!(info[key], agent[key], "{key}: {info} vs {agent}");
    }
    assert!(
        info["hostname"].as_str().is_some_and(|h| !h.is_empty()),
        "{info}"
    );

    // The serial console on virtctl's stdin and stdout; Ctrl+] ends it.
    let mut console = Session::start(
        &virtctl,
        &["console", "guest", "--timeout=1"],
        &dirs.root.join("console.err"),
    );
    console
        .ask("echo KVRS-VIRTCTL-$((6*7))", "KVRS-VIRTCTL-42")
        .unwrap_or_else(|e| panic!("{e}\n{}", ctx()));
    assert!(
        console
            .stderr()
            .contains("Successfully connected to guest console"),
        "{}",
        console.stderr()
    );
    console.type_in(&[29]);
    let status = console.wait(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "virtctl console after Ctrl+]: {status:?}\n{}",
        console.stderr()
    );
    drop(console);

    // vnc --proxy-only: the port it prints, an RFB handshake through it.
    let mut vnc = Session::start(
        &virtctl,
        &["vnc", "guest", "--proxy-only"],
        &dirs.root.join("vnc.err"),
    );
    let port = wait_for(
        "virtctl vnc's port",
        Duration::from_secs(30),
        || {
            let out = vnc.stdout();
            let line = out.lines().next()?;
            let v: Value = serde_json::from_str(line).ok()?;
            v["port"].as_u64()
        },
        || format!("stdout {:?}, stderr:\n{}", vnc.stdout(), vnc.stderr()),
    );
    let server = rfb_handshake(u16::try_from(port).unwrap());
    assert_eq!(server.version, "RFB 003.008");
    assert!(
        server.width > 0 && server.height > 0,
        "a {}x{} display",
        server.width,
        server.height
    );
    assert!(!server.name.is_empty(), "the desktop's name");
    // The viewer gone, the proxy ends.
    let status = vnc.wait(Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "virtctl vnc after the viewer left: {status:?}\n{}",
        vnc.stderr()
    );
    drop(vnc);

    // soft-reboot: the VMI has its agent connected, so the launcher asks qemu-ga (KubeVirt's
    // choice); the guest reboots in the same domain and boots again.
    let boots = |log: &str| log.matches(kvrs_test_guest::BOOT_MARKER).count();
    let before = boots(&pod.serial_log(&vmi_uid));
    assert!(before >= 1, "the guest booted once");
    let out = virtctl.ok_or_tell(&["soft-reboot", "guest"], ctx);
    assert_eq!(out, "VMI guest was scheduled to soft-reboot\n");
    wait_for(
        "the guest rebooted by its agent and booted again",
        Duration::from_secs(180),
        || {
            let log = pod.serial_log(&vmi_uid);
            (log.contains(kvrs_test_guest::AGENT_REBOOT_MARKER) && boots(&log) > before)
                .then_some(())
        },
        ctx,
    );
    let v = cluster.vmi("guest").expect("the VMI after its soft reboot");
    assert_eq!(phase(&v), "Running", "{v}");

    // A missing VMI: KubeVirt's not-found, through virtctl's error path.
    let err = virtctl.refused(&["pause", "vmi", "absent"]);
    assert!(
        err.contains(r#"virtualmachineinstances.kubevirt.io "absent" not found"#)
            || err.contains(r#"virtualmachineinstance.kubevirt.io "absent" not found"#),
        "{err}"
    );

    // VM start / stop / restart. No VM controller runs here: the checks are the writes
    // virt-api makes for virtctl.
    let vm = |name: &str, strategy: &str| {
        let template = guest_vmi(name);
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"runStrategy": strategy,
                "template": {"metadata": {"labels": {"kvrs.dev/vm": name}},
                    "spec": template["spec"]}}})
    };
    let strategy = |name: &str| {
        let v = cluster
            .get("virtualmachines", Some(NS), name)
            .unwrap_or_else(|| panic!("VM {name}"));
        v["spec"]["runStrategy"].as_str().unwrap_or("").to_string()
    };
    cluster.apply(&vm("idle", "Halted"));
    let out = virtctl.ok_or_tell(&["start", "idle", "--dry-run"], ctx);
    assert_eq!(out, "Dry Run execution\nVM idle was scheduled to start\n");
    assert_eq!(strategy("idle"), "Halted");
    let err = virtctl.refused(&["pause", "vm", "idle"]);
    assert!(
        err.contains(
            "Error pausing VirtualMachineInstance idle. VirtualMachine idle is not set to run"
        ),
        "{err}"
    );
    let out = virtctl.ok_or_tell(&["start", "idle"], ctx);
    assert_eq!(out, "VM idle was scheduled to start\n");
    assert_eq!(strategy("idle"), "Always");
    let err = virtctl.refused(&["start", "idle"]);
    assert!(
        err.contains("Always does not support manual start requests"),
        "{err}"
    );
    let out = virtctl.ok_or_tell(&["stop", "idle"], ctx);
    assert_eq!(out, "VM idle was scheduled to stop\n");
    assert_eq!(strategy("idle"), "Halted");
    let err = virtctl.refused(&["restart", "idle"]);
    assert!(
        err.contains("RunStategy Halted does not support manual restart requests"),
        "{err}"
    );
    let err = virtctl.refused(&["stop", "idle"]);
    assert!(err.contains("VM is not running"), "{err}");
    let err = virtctl.refused(&["start", "absent"]);
    assert!(
        err.contains(r#"virtualmachines.kubevirt.io "absent" not found"#)
            || err.contains(r#"virtualmachine.kubevirt.io "absent" not found"#),
        "{err}"
    );

    // A paused start of a Halted VM is a start request carrying `paused`.
    cluster.apply(&vm("later", "Halted"));
    let out = virtctl.ok_or_tell(&["start", "later", "--paused"], ctx);
    assert_eq!(out, "VM later was scheduled to start\n");
    let v = cluster
        .get("virtualmachines", Some(NS), "later")
        .expect("VM later");
    assert_eq!(v["spec"]["runStrategy"], "Halted", "{v}");
    assert_eq!(
        v["status"]["stateChangeRequests"],
        json!([{"action": "Start", "data": {"paused": "true"}}]),
        "{v}"
    );

    // A Manual VM whose VMI is the running guest: `pause vm` / `unpause vm` reach the VMI
    // through the VM; restart asks for a stop of that VMI, then a start.
    cluster.apply(&vm("guest", "Manual"));
    let out = virtctl.ok_or_tell(&["pause", "vm", "guest"], ctx);
    assert_eq!(out, "VMI guest was scheduled to pause\n");
    wait_for(
        "the Paused condition (pause vm)",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_some().then_some(())
        },
        ctx,
    );
    let out = virtctl.ok_or_tell(&["unpause", "vm", "guest"], ctx);
    assert_eq!(out, "VMI guest was scheduled to unpause\n");
    wait_for(
        "the Paused condition removed (unpause vm)",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi("guest")?;
            condition(&v, "Paused").is_none().then_some(())
        },
        ctx,
    );
    let out = virtctl.ok_or_tell(&["restart", "guest"], ctx);
    assert_eq!(out, "VM guest was scheduled to restart\n");
    let v = cluster
        .get("virtualmachines", Some(NS), "guest")
        .expect("VM guest");
    let requests = v["status"]["stateChangeRequests"]
        .as_array()
        .unwrap_or_else(|| panic!("no stateChangeRequests: {v}"));
    assert_eq!(requests.len(), 2, "{v}");
    assert_eq!(requests[0]["action"], "Stop", "{v}");
    assert_eq!(requests[0]["uid"], vmi_uid.as_str(), "{v}");
    assert_eq!(requests[1]["action"], "Start", "{v}");
    // With that request pending, another is refused.
    let err = virtctl.refused(&["restart", "guest"]);
    assert!(err.contains("stop/start already underway"), "{err}");

    pod.delete();
    setup.stop_api();
}
