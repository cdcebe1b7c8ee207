//! Live migration between two real nodes on this machine, through the real virt-controller
//! (issue 44, Deliver 4): a real control plane, two real kubelets with their own containerd, CNI
//! bridge and mount namespace (`RealNode::start` and `RealNode::start_second`), kvrs deployed
//! with the shipped manifests (the virt-handler DaemonSet runs on both nodes).
//!
//! A VM (`evictionStrategy: LiveMigrate`, the test guest printing a counter, its boot id and an
//! in-RAM pattern on its serial console every second, and serving HTTP) runs on one node;
//! `kubectl create` of a VirtualMachineInstanceMigration hands it to virt-controller's migration
//! controller, which makes the target pod on the other node; the two handlers migrate the
//! domain. Then: the migration Succeeded, the VMI's `status.nodeName` and its
//! `kubevirt.io/nodeName` label name the other node, `migrationState` is completed; the guest's
//! counter continues on the target's console with the same boot id and pattern (it did not
//! boot there); it answers ping and HTTP on the target pod's address; the source pod completes;
//! one QEMU runs.
//!
//! Then, with the KubeVirt CR's `bandwidthPerMigration` lowered to 1 MiB/s (live) so that a
//! migration lasts long enough to be interrupted, two migrations back towards the first node:
//! one cancelled by deleting its VMIM once it runs, one whose target pod is force-deleted once it
//! runs. After each the guest still runs where it was (VMI node and label unchanged,
//! `migrationState` completed and failed for that migration), its counter goes on with the same
//! boot id and pattern, it answers ping and HTTP, no target pod is left, one QEMU runs.
//! Last, KubeVirt's own `virtctl migrate` (the virtctl harness) moves it back at full speed,
//! checked as the first migration.
//!
//! The KubeVirt CR leaves migration TLS on (KubeVirt's default): virt-api issues the
//! handlers' serving and migration client certificates into the Secret the DaemonSet mounts,
//! and the first migration's proxies are shown to have spoken mutual TLS (both handlers' logs
//! name each connection's verified TLS, none ran in plain TCP).

mod common;

use std::time::{Duration, Instant};

use common::kubectl_json;
use common::real_node::{Deployed, kubevirt_cr};
use common::two_nodes::{Guest, deploy_with_guest, qemu_nodes};
use kvrs_test_cluster::{NODE_NAME, SECOND_NODE_NAME, wait_for};
use kvrs_test_guest::pod::is_root;
use kvrs_test_guest::ticks::{assert_continues, ticks};
use kvrs_test_guest::virtctl::{self, Virtctl};
use serde_json::Value;

const NS: &str = "kvrs-real-migration";

/// The KubeVirt CR README's (emulation where KVM does not run guests), migrations left at
/// KubeVirt's default: over mutual TLS between the handlers.
fn cr(use_emulation: bool) -> String {
    let cr = kubevirt_cr(use_emulation);
    assert!(
        !cr.contains("disableTLS"),
        "the CR leaves migration TLS on: {cr}"
    );
    cr
}

/// The whole log of the virt-handler pod on `node`.
fn handler_log(d: &Deployed, node: &str) -> String {
    let pods = kubectl_json(
        &d.cluster,
        &[
            "get",
            "pods",
            "-n",
            "kubevirt",
            "-l",
            "kubevirt.io=virt-handler",
        ],
    )
    .and_then(|p| p["items"].as_array().cloned())
    .unwrap_or_default();
    let pod = pods
        .iter()
        .find(|p| p["spec"]["nodeName"] == node)
        .unwrap_or_else(|| panic!("no virt-handler pod on {node}: {pods:?}"));
    d.kubectl_ok(&[
        "logs",
        "-n",
        "kubevirt",
        pod["metadata"]["name"].as_str().unwrap(),
        "-c",
        "virt-handler",
    ])
}

/// The proxies of the migration of VMI `uid` spoke mutual TLS: the target's handler accepted
/// its connections only after verifying the client certificate, the source's dialled them
/// verifying the target's, and neither carried any of them in plain TCP.
fn assert_migrated_over_tls(d: &Deployed, uid: &str, source: &str, target: &str) {
    let lines = |log: &str, message: &str| {
        log.lines()
            .filter(|l| l.contains(message) && l.contains(uid))
            .count()
    };
    let target_log = handler_log(d, target);
    let source_log = handler_log(d, source);
    let accepted = lines(
        &target_log,
        "target proxy: mutual TLS connection accepted, client certificate verified",
    );
    let dialled = lines(
        &source_log,
        "source proxy: mutual TLS connection to the target, its certificate verified",
    );
    assert!(
        accepted >= 2,
        "the target handler accepted the libvirt and QEMU connections over mutual TLS \
         ({accepted}):\n{target_log}"
    );
    assert!(
        dialled >= 2,
        "the source handler dialled over mutual TLS ({dialled}):\n{source_log}"
    );
    for (node, log) in [(target, &target_log), (source, &source_log)] {
        assert_eq!(
            lines(log, "plain TCP connection"),
            0,
            "no plain TCP proxy connection on {node}:\n{log}"
        );
    }
    eprintln!(
        "migration proxies over mutual TLS: {accepted} connection(s) accepted on {target}, \
         {dialled} dialled from {source}"
    );
}

#[test]
fn a_vmim_moves_a_running_guest_to_the_other_real_node() {
    assert!(
        is_root(),
        "the real nodes run containerd, runc and the kubelet: run as root"
    );
    let use_emulation = kvrs_node::host_devices::kvm_check().is_err();
    let d = deploy_with_guest(NS, &cr(use_emulation), use_emulation);
    let g = Guest { d: &d, ns: NS };

    // Running on one node (the scheduler's choice): the source.
    let running = wait_for(
        "the VMI Running",
        Duration::from_secs(300),
        || g.vmi().filter(|v| v["status"]["phase"] == "Running"),
        || g.context(),
    );
    let source = running["status"]["nodeName"]
        .as_str()
        .expect("the VMI's node")
        .to_owned();
    let target = if source == NODE_NAME {
        SECOND_NODE_NAME
    } else {
        NODE_NAME
    };
    let source_pod = g.pod_on(&source).expect("the source launcher pod");
    let source_pod_name = source_pod["metadata"]["name"].as_str().unwrap().to_owned();
    let source_ip = source_pod["status"]["podIP"].as_str().unwrap().to_owned();
    g.wait_answering(&source_ip, "on the source");
    let (before, _) = g.wait_ticks(&source_pod_name, "on the source's console");
    eprintln!("guest running on {source} ({source_ip}); migrating to {target}");

    // The migration, as a user asks for it.
    let begun = Instant::now();
    g.create_migration("move");
    let done = wait_for(
        "the migration Succeeded",
        Duration::from_secs(300),
        || {
            let m = g.migration("move")?;
            match m["status"]["phase"].as_str() {
                Some("Succeeded") => Some(Ok(m)),
                Some("Failed") => Some(Err(m)),
                _ => None,
            }
        },
        || g.context(),
    )
    .unwrap_or_else(|m| panic!("the migration failed: {m}\n{}", g.context()));
    let took = begun.elapsed();
    eprintln!("migration Succeeded in {took:.1?}");

    let after = wait_for(
        "the VMI handed to the target node, migration completed",
        Duration::from_secs(60),
        || {
            g.vmi().filter(|v| {
                v["status"]["nodeName"] == target
                    && v["metadata"]["labels"]["kubevirt.io/nodeName"] == target
                    && v["status"]["migrationState"]["completed"] == true
            })
        },
        || g.context(),
    );
    let state = &after["status"]["migrationState"];
    assert_ne!(state["failed"], true, "{state}");
    assert_ne!(
        state["migrationConfiguration"]["disableTLS"], true,
        "the migration ran with TLS: {state}"
    );
    assert_migrated_over_tls(
        &d,
        after["metadata"]["uid"].as_str().expect("the VMI's uid"),
        &source,
        target,
    );
    assert_eq!(state["targetNode"], target, "{state}");
    assert_eq!(state["sourceNode"], source, "{state}");
    assert_eq!(
        state["migrationUid"], done["metadata"]["uid"],
        "the state is this migration's: {state}"
    );

    // The guest arrived with its memory: the count goes on, same boot id and RAM pattern.
    let target_pod = g.pod_on(target).expect("the target launcher pod");
    let target_pod_name = target_pod["metadata"]["name"].as_str().unwrap().to_owned();
    let target_ip = target_pod["status"]["podIP"].as_str().unwrap().to_owned();
    let arrived = g.wait_ticks(&target_pod_name, "on the target's console");
    let before_all = ticks(&g.console(&source_pod_name));
    assert!(before_all.len() >= before.len());
    assert_continues(&before_all, &arrived.0, &arrived.1);
    g.wait_answering(&target_ip, "on the target");

    // The source pod completes; one QEMU runs the guest.
    wait_for(
        "the source pod Succeeded",
        Duration::from_secs(120),
        || {
            let pods = g.launcher_pods();
            let src = pods
                .iter()
                .find(|p| p["metadata"]["name"] == source_pod_name.as_str());
            match src {
                None => Some(()),
                Some(p) => (p["status"]["phase"] == "Succeeded").then_some(()),
            }
        },
        || g.context(),
    );
    assert_eq!(
        qemu_nodes().len(),
        1,
        "one QEMU on the machine after the migration"
    );
    eprintln!(
        "migrated {source} -> {target} in {took:.1?}; ticks {} .. {} continued",
        before_all.last().unwrap().0,
        arrived.0.last().unwrap().0
    );

    // Slow migrations from here on (1 MiB/s), so that they can be interrupted mid-flight.
    d.kubectl_ok(&[
        "patch",
        "kubevirt",
        "-n",
        "kubevirt",
        "kubevirt",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"configuration":{"migrations":{"bandwidthPerMigration":"1Mi"}}}}"#,
    ]);
    let home = target;
    let away = source.as_str();
    let cancelled = interrupted(&d, "cancelled", home, away, |d, _pod| {
        d.kubectl_ok(&[
            "delete",
            "virtualmachineinstancemigration",
            "-n",
            NS,
            "cancelled",
            "--wait=false",
        ]);
    });
    // KubeVirt's record of a cancellation: the abort asked for and done.
    assert_eq!(cancelled["abortRequested"], true, "{cancelled}");
    assert_eq!(cancelled["abortStatus"], "Succeeded", "{cancelled}");
    interrupted(&d, "target-killed", home, away, |d, pod| {
        d.kubectl_ok(&[
            "delete",
            "pod",
            "-n",
            NS,
            pod,
            "--grace-period=0",
            "--force",
            "--wait=false",
        ]);
    });

    // KubeVirt's own `virtctl migrate`, at full speed again: the guest moves back.
    d.kubectl_ok(&[
        "patch",
        "kubevirt",
        "-n",
        "kubevirt",
        "kubevirt",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"configuration":{"migrations":{"bandwidthPerMigration":"0Mi"}}}}"#,
    ]);
    let virtctl = Virtctl {
        bin: virtctl::harness(),
        kubeconfig: d.cluster.admin_kubeconfig_path().to_path_buf(),
        namespace: NS.into(),
    };
    let home_pod = g
        .pod_on(home)
        .expect("the launcher pod before virtctl migrate");
    let home_pod_name = home_pod["metadata"]["name"].as_str().unwrap().to_owned();
    virtctl.ok_or_tell(&["migrate", "guest"], || g.context());
    wait_for(
        "virtctl's migration Succeeded, the VMI back on the first node",
        Duration::from_secs(300),
        || {
            let v = g.vmi()?;
            let state = &v["status"]["migrationState"];
            (v["status"]["nodeName"] == away
                && v["metadata"]["labels"]["kubevirt.io/nodeName"] == away
                && state["completed"] == true
                && state["failed"] != true)
                .then_some(())
        },
        || g.context(),
    );
    let back_pod = g
        .pod_on(away)
        .expect("the launcher pod after virtctl migrate");
    let back_pod_name = back_pod["metadata"]["name"].as_str().unwrap().to_owned();
    let back_ip = back_pod["status"]["podIP"].as_str().unwrap().to_owned();
    let back = g.wait_ticks(&back_pod_name, "after virtctl migrate");
    assert_continues(&ticks(&g.console(&home_pod_name)), &back.0, &back.1);
    g.wait_answering(&back_ip, "after virtctl migrate");
    assert_eq!(qemu_nodes().len(), 1, "one QEMU after virtctl migrate");

    d.kubectl_ok(&[
        "delete",
        "vm",
        "-n",
        NS,
        "guest",
        "--wait=true",
        "--timeout=120s",
    ]);
}

/// A migration `name` of the guest running on `home` towards `away`, interrupted by `strike`
/// (given the target pod's name) once it runs: the guest keeps running on `home` with its
/// counter going on, the VMI stays there, no target pod is left, one QEMU runs.
fn interrupted(
    d: &Deployed,
    name: &str,
    home: &str,
    away: &str,
    strike: impl Fn(&Deployed, &str),
) -> Value {
    let g = Guest { d, ns: NS };
    let pod = g.pod_on(home).expect("the launcher pod at home");
    let pod_name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let pod_ip = pod["status"]["podIP"].as_str().unwrap().to_owned();
    let before = ticks(&g.console(&pod_name));
    g.create_migration(name);
    let (target_pod, uid) = g.wait_migration_running(name, away);
    let target_pod_name = target_pod["metadata"]["name"].as_str().unwrap().to_owned();
    strike(d, &target_pod_name);
    let settled = wait_for(
        &format!("migration {name} ended without moving the guest"),
        Duration::from_secs(240),
        || {
            let v = g.vmi()?;
            let state = &v["status"]["migrationState"];
            let ended = state["migrationUid"] == uid
                && state["completed"] == true
                && state["failed"] == true;
            let no_target = g.pod_on(away).is_none();
            (ended && no_target && v["status"]["nodeName"] == home).then_some(v)
        },
        || g.context(),
    );
    assert_eq!(settled["status"]["phase"], "Running", "{settled}");
    assert_eq!(settled["metadata"]["labels"]["kubevirt.io/nodeName"], home);
    // The guest never stopped: the same boot and pattern, the count going on at home.
    let later = wait_for(
        &format!("ticks going on at home after {name}"),
        Duration::from_secs(60),
        || {
            let t = ticks(&g.console(&pod_name));
            (t.last()?.0 >= before.last()?.0 + 3).then_some(t)
        },
        || g.context(),
    );
    let last_before = before.last().expect("ticks before");
    assert!(
        later.iter().all(|(_, boot)| *boot == last_before.1),
        "the guest at home rebooted or lost its memory: {later:?}"
    );
    assert!(
        later.windows(2).all(|w| w[1].0 == w[0].0 + 1),
        "the count at home has a gap: {later:?}"
    );
    g.wait_answering(&pod_ip, &format!("at home after {name}"));
    assert_eq!(qemu_nodes().len(), 1, "one QEMU after {name}");
    eprintln!(
        "{name}: the guest stayed on {home}, ticks {} .. {}",
        last_before.0,
        later.last().unwrap().0
    );
    settled["status"]["migrationState"].clone()
}
