//! Faults around live migration on the two real nodes of this machine (issue 44, Deliver 4):
//! kvrs deployed with the shipped manifests on a real control plane and two real kubelets
//! (`Deployed::start_two`), one VM with `evictionStrategy: LiveMigrate` whose guest prints a
//! counter, its boot id and an in-RAM pattern on its serial console every second and serves
//! HTTP.
//!
//! 1. A drain of the guest's node (`kubectl drain --ignore-daemonsets --delete-emptydir-data`):
//!    virt-api's eviction webhook refuses the launcher pod's eviction with 429 (kubectl drain
//!    retries) and marks the VMI, the evacuation controller creates a migration annotated with
//!    the node, the guest moves to the other node with its memory (same boot id, the count goes
//!    on, it answers on its new address), the drain finishes and leaves no launcher pod on the
//!    drained node, one QEMU runs.
//! 2. With migrations throttled to 1 MiB/s so that they last, the source node's virt-handler
//!    killed (SIGKILL; the kubelet restarts its container) once the migration runs.
//! 3. The same with the target node's virt-handler killed.
//!
//! After a killed handler the migration must end (Succeeded or Failed, whichever the restarted
//! handler's flows reach), the VMI's node and `kubevirt.io/nodeName` label must name the node
//! whose QEMU runs the guest, exactly one QEMU must run, no launcher pod may be left on the
//! other node, and the guest must never have rebooted. Two running copies are looked for three
//! ways: the QEMU processes sampled throughout (at most two, the source and the migration's
//! target; one only once the target pod is gone), the consoles (a failed migration's target
//! never prints a tick; a succeeded one's first tick comes after the source's last), and the
//! VMI's node against the node whose QEMU remains.
//!
//! Migrations run as KubeVirt's default has them: over mutual TLS between the handlers (the
//! certificates virt-api issues; `real_migration.rs` checks the handshake).

mod common;

use std::time::{Duration, Instant};

use common::real_node::kubevirt_cr;
use common::two_nodes::{
    Guest, deploy_with_guest, other_node, processes_on_node, qemu_command_lines, qemu_nodes,
};
use kvrs_test_cluster::wait_for;
use kvrs_test_guest::pod::is_root;
use kvrs_test_guest::ticks::{assert_continues, ticks};
use serde_json::Value;

const NS: &str = "kvrs-real-migration-faults";
/// KubeVirt's annotation on the migrations its evacuation controller creates (the node).
const EVACUATION_ANNOTATION: &str = "kubevirt.io/evacuationMigration";

fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .expect("an object's name")
        .to_owned()
}

fn ip_of(pod: &Value) -> String {
    pod["status"]["podIP"]
        .as_str()
        .expect("the launcher pod's IP")
        .to_owned()
}

/// Panics if the machine runs more QEMU processes for the guest than a migration may (source
/// and target), or two once no migration runs (`migrating == false`): two running copies.
fn check_qemu(g: &Guest, migrating: bool, when: &str) {
    let nodes = qemu_nodes();
    let most = if migrating { 2 } else { 1 };
    assert!(
        nodes.len() <= most,
        "{} QEMU processes ({nodes:?}) {when}\n{:#?}\n{}",
        nodes.len(),
        qemu_command_lines(),
        g.context()
    );
}

#[test]
fn a_drain_and_killed_handlers_never_leave_two_copies_of_the_guest() {
    assert!(
        is_root(),
        "the real nodes run containerd, runc and the kubelet: run as root"
    );
    let use_emulation = kvrs_node::host_devices::kvm_check().is_err();
    let d = deploy_with_guest(NS, &kubevirt_cr(use_emulation), use_emulation);
    let g = Guest { d: &d, ns: NS };

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
    let pod = g.pod_on(&source).expect("the launcher pod");
    g.wait_answering(&ip_of(&pod), "before the drain");
    g.wait_ticks(&name_of(&pod), "on the console");
    check_qemu(&g, false, "with the guest booted");

    let home = drain(&g, &source);

    // Slow migrations from here on (1 MiB/s), so that a handler can be killed mid-flight.
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
    let home = handler_killed(&g, "source-handler-killed", home, Side::Source);
    let home = handler_killed(&g, "target-handler-killed", home, Side::Target);
    eprintln!("the guest ends on {home}");

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

/// Scenario 1: drains `source` (the guest's node) and checks that the guest moved to the other
/// node by an evacuation migration; returns that node. Uncordons `source` afterwards.
fn drain(g: &Guest, source: &str) -> &'static str {
    let target = other_node(source);
    let pod = g.pod_on(source).expect("the launcher pod before the drain");
    let pod_name = name_of(&pod);
    let before = ticks(&g.console(&pod_name));
    let begun = Instant::now();
    let (drained, evacuation, before_all) = std::thread::scope(|s| {
        let drain = s.spawn(|| {
            // kubectl drain retries a 429 every 5 s on its own; a drain that evicts virt-api or
            // virt-controller alongside the launcher pod may see the webhook unreachable for a
            // moment (another error, which ends the drain): the operator runs it again.
            let mut stderr = String::new();
            for _ in 0..5 {
                let out = g.d.cluster.kubectl([
                    "drain",
                    source,
                    "--ignore-daemonsets",
                    "--delete-emptydir-data",
                    "--timeout=300s",
                ]);
                stderr.push_str(&String::from_utf8_lossy(&out.stderr));
                if out.status.success() {
                    return Ok(stderr);
                }
                std::thread::sleep(Duration::from_secs(2));
            }
            Err(stderr)
        });
        // The webhook's mark, then the evacuation controller's migration (the mark is cleared
        // once the guest left, so it is caught while the drain runs). The source's console
        // is read until its pod goes (the drain deletes it).
        let mut marked = false;
        let mut before_all = before.clone();
        let evacuation = wait_for(
            "the evacuation migration Succeeded",
            Duration::from_secs(420),
            || {
                check_qemu(g, true, "during the drain");
                let t = ticks(&g.console(&pod_name));
                if t.len() > before_all.len() {
                    before_all = t;
                }
                let v = g.vmi()?;
                marked |= v["status"]["evacuationNodeName"] == source;
                let m = g.migrations().into_iter().find(|m| {
                    m["metadata"]["annotations"][EVACUATION_ANNOTATION] == source
                        && m["status"]["phase"] == "Succeeded"
                })?;
                Some(m)
            },
            || g.context(),
        );
        eprintln!(
            "evacuation migration {} Succeeded after {:.1?} (mark seen while polling: {marked})",
            name_of(&evacuation),
            begun.elapsed()
        );
        let drained = drain.join().expect("the drain thread");
        (drained, evacuation, before_all)
    });
    let stderr = drained.unwrap_or_else(|e| panic!("kubectl drain failed:\n{e}\n{}", g.context()));
    eprintln!(
        "drain of {source} finished after {:.1?}:\n{stderr}",
        begun.elapsed()
    );
    // The webhook's 429 as kubectl drain reports it (a TooManyRequests it retries).
    assert!(
        stderr.contains(&format!("error when evicting pods/\"{pod_name}\""))
            && stderr.contains("will retry after 5s"),
        "kubectl drain retried the launcher pod's eviction after a 429:\n{stderr}"
    );
    assert!(
        name_of(&evacuation).starts_with("kubevirt-evacuation-"),
        "the evacuation controller's migration: {evacuation}"
    );

    let v = wait_for(
        "the VMI handed to the other node",
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
    assert_eq!(v["status"]["phase"], "Running", "{v}");
    let state = &v["status"]["migrationState"];
    assert_ne!(state["failed"], true, "{state}");
    assert_eq!(state["sourceNode"], source, "{state}");
    assert_eq!(
        state["migrationUid"], evacuation["metadata"]["uid"],
        "{state}"
    );

    let new_pod = g
        .pod_on(target)
        .expect("the launcher pod on the other node");
    let new_name = name_of(&new_pod);
    let arrived = g.wait_ticks(&new_name, "on the other node's console");
    assert_continues(&before_all, &arrived.0, &arrived.1);
    g.wait_answering(&ip_of(&new_pod), "after the drain");

    let left: Vec<String> = g
        .launcher_pods()
        .iter()
        .filter(|p| p["spec"]["nodeName"] == source)
        .map(name_of)
        .collect();
    assert!(
        left.is_empty(),
        "launcher pods left on the drained node: {left:?}"
    );
    assert_eq!(
        qemu_nodes(),
        vec![target],
        "one QEMU, on the other node, after the drain"
    );
    g.d.kubectl_ok(&["uncordon", source]);
    eprintln!(
        "drained {source}: the guest moved to {target} in {:.1?}, ticks {} .. {} continued",
        begun.elapsed(),
        before_all.last().unwrap().0,
        arrived.0.last().unwrap().0
    );
    target
}

/// Which handler a scenario kills.
#[derive(Clone, Copy, Debug)]
enum Side {
    Source,
    Target,
}

/// Scenarios 2 and 3: a migration `name` of the guest running on `home`, whose `side`'s
/// virt-handler is killed once the migration runs. Returns the node the guest runs on after.
fn handler_killed(g: &Guest, name: &str, home: &'static str, side: Side) -> &'static str {
    let away = other_node(home);
    let pod = g.pod_on(home).expect("the launcher pod at home");
    let pod_name = name_of(&pod);
    let before = ticks(&g.console(&pod_name));
    assert!(!before.is_empty(), "ticks at home before {name}");
    check_qemu(g, false, &format!("before {name}"));
    g.create_migration(name);
    let (target_pod, uid) = g.wait_migration_running(name, away);
    let target_pod_name = name_of(&target_pod);

    let victim = match side {
        Side::Source => home,
        Side::Target => away,
    };
    let handler = g
        .handler_pod(victim)
        .unwrap_or_else(|| panic!("the virt-handler pod of {victim}"));
    let restarts = restart_count(&handler);
    let pids = processes_on_node(victim, "virt-handler");
    assert_eq!(
        pids.len(),
        1,
        "one virt-handler process on {victim}: {pids:?}"
    );
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pids[0].to_string()])
        .status()
        .expect("running kill");
    assert!(killed.success(), "kill -KILL {}", pids[0]);
    let struck = Instant::now();
    eprintln!(
        "{name}: killed virt-handler {} on {victim} ({side:?})",
        pids[0]
    );

    // The kubelet brings the handler back; the migration ends one way or the other.
    let back = std::cell::Cell::new(None);
    let check = |migrating: bool| {
        check_qemu(g, migrating, &format!("in {name}"));
        if back.get().is_none()
            && g.handler_pod(victim)
                .is_some_and(|h| restart_count(&h) > restarts && pod_ready(&h))
        {
            back.set(Some(struck.elapsed()));
        }
    };
    // The target's console while its pod lasts: a guest that ran there printed ticks.
    let target_ticks = std::cell::RefCell::new(Vec::new());
    let read_target = || {
        let t = ticks(&g.console(&target_pod_name));
        if t.len() > target_ticks.borrow().len() {
            *target_ticks.borrow_mut() = t;
        }
    };
    let ended = wait_for(
        &format!("migration {name} ended"),
        Duration::from_secs(480),
        || {
            check(true);
            read_target();
            let m = g.migration(name)?;
            matches!(m["status"]["phase"].as_str(), Some("Succeeded" | "Failed")).then_some(m)
        },
        || g.context(),
    );
    let succeeded = ended["status"]["phase"] == "Succeeded";
    let (now, gone) = if succeeded {
        (away, home)
    } else {
        (home, away)
    };
    eprintln!(
        "{name}: the migration {} {:.1?} after the kill",
        ended["status"]["phase"],
        struck.elapsed()
    );
    let settled = wait_for(
        &format!("the VMI on {now}, migration {name} completed, nothing left on {gone}"),
        Duration::from_secs(240),
        || {
            // A failed migration's target QEMU (paused, never run) may outlive the migration
            // for a moment: two processes are allowed until the target pod is gone.
            check(true);
            read_target();
            let v = g.vmi()?;
            let state = &v["status"]["migrationState"];
            let done = state["migrationUid"] == uid
                && state["completed"] == true
                && (state["failed"] == true) != succeeded;
            (done
                && v["status"]["phase"] == "Running"
                && v["status"]["nodeName"] == now
                && v["metadata"]["labels"]["kubevirt.io/nodeName"] == now
                && g.pod_on(gone).is_none()
                && qemu_nodes() == vec![now])
            .then_some(v)
        },
        || g.context(),
    );
    wait_for(
        &format!("virt-handler of {victim} back and Ready"),
        Duration::from_secs(180),
        || {
            check(false);
            back.get()
        },
        || g.context(),
    );
    assert_eq!(settled["status"]["phase"], "Running", "{settled}");

    // The guest never stopped: the same boot and pattern, the count going on where it runs.
    let now_pod = g
        .pod_on(now)
        .expect("the launcher pod where the guest runs");
    let now_name = name_of(&now_pod);
    if succeeded {
        assert_eq!(
            now_name, target_pod_name,
            "the migration's target pod runs it"
        );
        let before_all = ticks(&g.console(&pod_name));
        let arrived = g.wait_ticks(&now_name, &format!("on {now} after {name}"));
        assert_continues(&before_all, &arrived.0, &arrived.1);
    } else {
        assert_eq!(now_name, pod_name, "the source pod still runs it");
        assert!(
            target_ticks.borrow().is_empty(),
            "the guest ran on the failed migration's target too: {:?}",
            target_ticks.borrow()
        );
        let last_before = before.last().expect("ticks before").clone();
        let later = wait_for(
            &format!("ticks going on at home after {name}"),
            Duration::from_secs(60),
            || {
                let t = ticks(&g.console(&pod_name));
                (t.last()?.0 >= last_before.0 + 3).then_some(t)
            },
            || g.context(),
        );
        assert!(
            later.iter().all(|(_, boot)| *boot == last_before.1),
            "the guest at home rebooted or lost its memory: {later:?}"
        );
        assert!(
            later.windows(2).all(|w| w[1].0 == w[0].0 + 1),
            "the count at home has a gap: {later:?}"
        );
    }
    g.wait_answering(&ip_of(&now_pod), &format!("after {name}"));
    check_qemu(g, false, &format!("after {name}"));
    eprintln!(
        "{name}: {} with the {side:?} handler killed; the guest runs on {now}, handler back after {:.1?}",
        ended["status"]["phase"],
        back.get().expect("handler back")
    );
    now
}

fn restart_count(handler_pod: &Value) -> u64 {
    handler_pod["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["restartCount"].as_u64())
        .sum()
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}
