//! End to end: a live migration driven by two virt-handlers (two nodes on this machine, each
//! with its own pods directory, launcher pods and handler process) against a real
//! kube-apiserver. The test plays virt-controller's migration controller: once the target pod
//! runs it writes what KubeVirt's `handleTargetPodHandoff` writes (the migration state naming
//! both nodes and the target pod, the migration configuration, the target node label) and the
//! target pod into `activePods`. From there the handlers do the rest: the target prepares its
//! pod, starts its proxy and publishes its address and ports; the source proxies into its pod
//! and migrates; the target takes the VMI over.
//!
//! Proof the guest moved with its memory, as `tests/e2e_migration.rs` checks it between two
//! launchers: a counter printed every second with the boot id and a random pattern kept in RAM
//! continues on the target's serial console, without a boot.

mod support;

use std::time::Duration;

use kvrs_test_guest::ticks::{TICK_LOOP, assert_continues, ticks};
use serde_json::{Value, json};
use support::{Cluster, LauncherPod, NODE, NodeDirs, boot_vmi_with_agent, guest_vmi, tail};

/// The second node, the migration target.
const NODE2: &str = "kvrs-node-e2e-2";
#[test]
fn two_handlers_migrate_a_running_guest_to_the_target_node() {
    migrate(false);
}

/// Without `disableTLS` a handler without certificates refuses to proxy, so this migration's
/// streams went through the TLS proxies.
#[test]
fn two_handlers_migrate_over_mutual_tls() {
    migrate(true);
}

/// One CA's serving and client certificates in `dir`, as `--migration-cert-dir` reads them.
fn write_certs(dir: &std::path::Path) {
    let pki = kvrs_virt_api::certs::throwaway_pki("kvrs-virt-handler").expect("certificates");
    let (ca, serving, client) = (pki.ca, pki.serving, pki.client);
    std::fs::create_dir_all(dir).unwrap();
    for (name, pem) in [
        ("ca.crt", &ca),
        ("tls.crt", &serving.0),
        ("tls.key", &serving.1),
        ("client.crt", &client.0),
        ("client.key", &client.1),
    ] {
        std::fs::write(dir.join(name), pem).unwrap();
    }
}

/// Boots the guest on node 1 and lets the handlers migrate it to node 2: over mutual TLS with
/// `tls` (both handlers given certificates of one CA), else with the configuration's
/// `disableTLS`.
fn migrate(tls: bool) {
    let _one = support::serial();
    let cluster = Cluster::start();
    cluster.apply(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE2}}));
    let (dirs1, dirs2) = (NodeDirs::new("a"), NodeDirs::new("b"));
    let certs = dirs1.root.join("migration-certs");
    // Both handlers on loopback: the target publishes 127.0.0.1 and its listeners' ports.
    let mut flags = vec![
        "--migration-address",
        "127.0.0.1",
        "--resync-period-seconds",
        "3",
    ];
    if tls {
        write_certs(&certs);
        flags.extend(["--migration-cert-dir", certs.to_str().unwrap()]);
    }
    let h1 = dirs1.start_handler(&cluster, 0, &flags);
    let h2 = dirs2.start_handler_as(&cluster, NODE2, 0, &flags);

    let name = "mig";
    let mut vmi = guest_vmi(name);
    vmi["spec"]["volumes"][1]["cloudInitNoCloud"]["userData"] =
        json!(format!("#cloud-config\n{TICK_LOOP}\n"));
    let (uid, src) = boot_vmi_with_agent(&cluster, &dirs1, &h1, 1, vmi);
    let context = |tgt: Option<&LauncherPod>| {
        format!(
            "--- VMI ---\n{}\n--- source handler ---\n{}\n--- target handler ---\n{}\n--- source launcher ---\n{}\n--- target launcher ---\n{}",
            cluster
                .vmi(name)
                .map(|v| json!({"metadata": v["metadata"], "status": v["status"]}).to_string())
                .unwrap_or_default(),
            tail(&h1.log(), 40),
            tail(&h2.log(), 40),
            tail(&src.launcher_log(), 30),
            tgt.map(|t| tail(&t.launcher_log(), 30)).unwrap_or_default(),
        )
    };
    support::wait_for(
        "the guest's counter on the source",
        Duration::from_secs(120),
        || (ticks(&src.serial_log(&uid)).len() >= 2).then_some(()),
        || context(None),
    );

    // The target pod, as the kubelet starts it on node 2; its launcher waits for the domain
    // the migration brings.
    let mut tgt = LauncherPod::new(&dirs2, 2, name);
    tgt.start_waiting(&uid, "600s");
    // virt-controller's part once the target pod runs.
    cluster.merge_patch(
        "virtualmachineinstances",
        name,
        &json!({
            "metadata": {"labels": {"kubevirt.io/migrationTargetNodeName": NODE2}},
            "status": {
                "activePods": {src.uid.clone(): NODE, tgt.uid.clone(): NODE2},
                "migrationState": {
                    "migrationUid": "mig-uid-1",
                    "sourceNode": NODE,
                    "targetNode": NODE2,
                    "targetPod": "virt-launcher-mig-target",
                    "migrationConfiguration": {
                        "allowAutoConverge": false,
                        "allowPostCopy": false,
                        "bandwidthPerMigration": "0Mi",
                        "completionTimeoutPerGiB": 800,
                        "progressTimeout": 150,
                        "parallelMigrationsPerCluster": 5,
                        "parallelOutboundMigrationsPerNode": 2,
                        "unsafeMigrationOverride": false,
                        "disableTLS": !tls
                    }
                }
            }
        }),
    );
    let before = ticks(&src.serial_log(&uid));

    let vmi: Value = support::wait_for(
        "the VMI on the target node with its migration completed",
        Duration::from_secs(400),
        || {
            let v = cluster.vmi(name)?;
            let m = &v["status"]["migrationState"];
            (v["status"]["nodeName"] == NODE2 && m["completed"] == true).then_some(v)
        },
        || context(Some(&tgt)),
    );
    let m = &vmi["status"]["migrationState"];
    assert_ne!(m["failed"], true, "{}", context(Some(&tgt)));
    assert_eq!(m["targetNodeAddress"], "127.0.0.1");
    assert!(m["startTimestamp"].is_string() && m["endTimestamp"].is_string());
    assert_eq!(vmi["metadata"]["labels"]["kubevirt.io/nodeName"], NODE2);
    // The target's final clean-up drops its label after the migration is marked completed (a
    // later write): wait for it.
    support::wait_for(
        "the target label dropped",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi(name)?;
            v["metadata"]["labels"]
                .get("kubevirt.io/migrationTargetNodeName")
                .is_none()
                .then_some(())
        },
        || context(Some(&tgt)),
    );

    // The guest kept its memory: the count goes on on the target's console, same boot.
    let after = support::wait_for(
        "the counter on the target's console",
        Duration::from_secs(60),
        || {
            let t = ticks(&tgt.serial_log(&uid));
            (t.len() >= 3).then_some(t)
        },
        || context(Some(&tgt)),
    );
    assert_continues(&before, &after, &tgt.serial_log(&uid));
    // The target node's handler now runs the VMI.
    support::wait_for(
        "the VMI Running on the target",
        Duration::from_secs(60),
        || {
            let v = cluster.vmi(name)?;
            (support::phase(&v) == "Running").then_some(())
        },
        || context(Some(&tgt)),
    );
}
