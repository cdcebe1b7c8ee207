//! `kvrs run` SIGKILLed at a seeded random point — while it starts, while its VM runs, while it
//! stops — and the next `kvrs run` on the same state directory. The killed run's API server,
//! controllers, virt-handler and kubelet die with it; its launcher pod (runc containers with the
//! launcher, libvirt and QEMU in the pod's cgroup, the pod's network namespace and veth) and its
//! files do not. The next run must say what it removes ("removed what a previous run left:
//! ..."), boot the VM to Running, stop with "nothing left behind", and leave the host as it was
//! before the round: no VM process of the runs' node, no network namespace or veth of their
//! pods, no mount, pod cgroup or runc container more, no nftables rule naming their pods
//! ([`HostState`]), no process of either run, no directory. (Host-wide objects are looked for
//! by the names of the runs' pods: other tests may add and remove theirs meanwhile.)
//!
//! While a run is alive, another `kvrs run` on its state directory is refused (naming its pid)
//! and touches nothing of it.
//!
//! Every component is real (as in `run.rs`); the runs use their own node name, so the pods'
//! cgroups and processes counted are theirs and no other test's. Needs root.
//!
//! `KVRS_RUN_KILL_SEED` (default 1) and `KVRS_RUN_KILL_ROUNDS` (default 9: each point three
//! times, in a seeded order within each cycle of three; about 15 s a round under TCG) choose
//! the rounds.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::host_leaks::HostState;
use common::run_driver::{self, Running, fixture, serial};
use kvrs_test_guest::PING_MARKER;
use kvrs_test_guest::pod::is_root;

/// The runs' node: their pods' cgroups are `kvrs-kubelet-kvrs-killed/<pod>`.
const NODE: &str = "kvrs-killed";
const TAG: &str = "k";

/// When the run is killed.
#[derive(Clone, Copy, Debug)]
enum Point {
    /// This long after `kvrs run` was started (its checks, the API server, the pod's set-up,
    /// the guest's boot).
    Starting(Duration),
    /// This long after it printed the VMI Running.
    Running(Duration),
    /// This long after it was asked to stop (SIGTERM: the guest's shutdown, the pod's
    /// removal, the components' stop).
    Stopping(Duration),
}

/// `kvrs run` of the fixture on [`NODE`], with the test's directories and `extra` flags.
fn kvrs_run(extra: &[&str]) -> std::process::Command {
    let mut cmd = run_driver::command(&fixture(), TAG);
    cmd.args(["--node-name", NODE, "--timeout-seconds", "240"])
        .args(extra);
    cmd
}

fn host_state() -> HostState {
    HostState::read(
        &run_driver::pods_dir(TAG),
        &run_driver::state_dir(TAG).join("kubelet"),
        NODE,
    )
}

/// Processes whose command line names the runs' state or pods directory (a run's runc, its
/// containers' `runc init`, the `kvrs run` itself), as `pid comm`.
fn processes_of_the_runs() -> BTreeSet<String> {
    let dirs = [run_driver::state_dir(TAG), run_driver::pods_dir(TAG)];
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            dirs.iter().any(|d| cmdline.contains(d.as_str())).then(|| {
                let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                format!("{pid} {}", comm.trim())
            })
        })
        .collect()
}

/// The runs' pods as the test saw them: the UIDs in the pods directory and the addresses the
/// runs printed. The host-wide checks (network namespaces, veths, nftables rules) look for what
/// is named after them, so that another test's on this machine is not taken for a leak.
#[derive(Debug, Default)]
struct Seen {
    uids: BTreeSet<String>,
    addresses: BTreeSet<String>,
}

impl Seen {
    fn note(&mut self) {
        self.uids.extend(entries(&run_driver::pods_dir(TAG)));
    }

    fn note_output(&mut self, stdout: &str) {
        self.addresses.extend(stdout.lines().filter_map(|l| {
            l.split_once("guest address ")
                .map(|(_, a)| a.trim().to_string())
        }));
    }

    fn short_ids(&self) -> Vec<String> {
        self.uids
            .iter()
            .map(|uid| {
                kvrs_kubelet::PodKey {
                    namespace: String::new(),
                    name: String::new(),
                    uid: uid.clone(),
                }
                .short_id()
            })
            .collect()
    }

    /// The names of the pods' network namespaces (`kvrs-<short id>`).
    fn netns_names(&self) -> Vec<String> {
        self.short_ids()
            .iter()
            .map(|s| format!("kvrs-{s}"))
            .collect()
    }

    /// What the pods' host-wide objects are named after: veths `kvh<short id>`, namespaces
    /// `kvrs-<short id>`, the pods' addresses.
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.short_ids().iter().map(|s| format!("kvh{s}")).collect();
        names.extend(self.netns_names());
        names.extend(self.addresses.iter().cloned());
        names
    }

    /// The pods' network namespaces that exist now.
    fn netns_present(&self) -> BTreeSet<String> {
        let now = common::netns();
        self.netns_names()
            .into_iter()
            .filter(|n| now.contains(n))
            .collect()
    }
}

/// What the killed run left that the next run must name: its pods' network namespaces,
/// whether its pod's processes ran (when they cannot end by themselves: not while the guest
/// was shutting down) and whether the guest's QEMU ran (only once the VMI was Running: while
/// it starts, libvirt runs QEMU briefly to probe its capabilities).
#[derive(Debug)]
struct Left {
    netns: BTreeSet<String>,
    processes: bool,
    qemu: bool,
}

/// Starts a run and kills it (SIGKILL) at `point`; what it left. While it runs a second run on
/// its state directory must be refused.
fn kill_a_run(point: Point, seen: &mut Seen, round: u64) -> Left {
    let mut run = Running::spawn(kvrs_run(&[]));
    let pause = |seen: &mut Seen, d: Duration| {
        let until = Instant::now() + d;
        while Instant::now() < until {
            seen.note();
            std::thread::sleep(Duration::from_millis(50).min(d));
        }
    };
    match point {
        Point::Starting(after) => pause(seen, after),
        Point::Running(after) | Point::Stopping(after) => {
            run.expect_line("default/guest Running", Duration::from_secs(240), || {
                seen.note()
            });
            if let Point::Running(_) = point {
                a_second_run_is_refused(&mut run, seen);
            } else {
                run.signal("TERM");
            }
            pause(seen, after);
        }
    }
    let ended_before = run.has_ended();
    run.signal("KILL");
    let out = run.finish(|| seen.note());
    seen.note();
    seen.note_output(&out.stdout);
    let stopping = matches!(point, Point::Stopping(_));
    let left = Left {
        netns: seen.netns_present(),
        processes: !stopping && !common::processes_on(NODE, common::VM_PROCESSES).is_empty(),
        qemu: matches!(point, Point::Running(_))
            && !common::processes_on(NODE, &["qemu-system-x86"]).is_empty(),
    };
    println!(
        "round {round}: kvrs run killed at {point:?}{} ({}); it left {left:?}",
        if ended_before {
            " (it had ended already)"
        } else {
            ""
        },
        out.stdout.lines().last().unwrap_or("no output"),
    );
    left
}

/// A second `kvrs run` on the state directory of the live `run` fails at once, naming the
/// live run's pid, and the live run's pod is still there afterwards.
fn a_second_run_is_refused(run: &mut Running, seen: &mut Seen) {
    seen.note();
    let pods_before = entries(&run_driver::pods_dir(TAG));
    let netns_before = seen.netns_present();
    let out = run_driver::output(kvrs_run(&[]));
    assert!(
        !out.success(),
        "a second run on a live run's state directory:\n{}",
        out.text()
    );
    let expected = format!("in use by a live kvrs run (pid {})", run.pid());
    assert!(
        out.stderr.contains(&expected),
        "{expected:?} in:\n{}",
        out.text()
    );
    assert!(
        !out.stdout.contains("removed what a previous run left"),
        "{}",
        out.text()
    );
    assert_eq!(entries(&run_driver::pods_dir(TAG)), pods_before);
    assert_eq!(
        seen.netns_present(),
        netns_before,
        "the live run's network namespaces stay"
    );
    assert!(!run.has_ended(), "the live run goes on");
}

fn entries(dir: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits (up to 10 s: a killed run's `runc run` ends once its container is gone) until `f`
/// returns nothing; what it returned last.
fn settled<T: Default + PartialEq>(mut f: impl FnMut() -> T) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = f();
        if v == T::default() || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_killed_run_is_cleaned_up_by_the_next_which_boots_the_vm_and_leaves_nothing() {
    assert!(
        is_root(),
        "kvrs run needs root (network namespaces, mounts, UID 107): run the tests as root"
    );
    let _one = serial();
    let rounds = common::env_u64("KVRS_RUN_KILL_ROUNDS", 9);
    let seed = common::env_u64("KVRS_RUN_KILL_SEED", 1);
    let mut rng = common::Rng::new(seed);
    let mut order = [0u64, 1, 2];
    let mut counts = [0usize; 3];
    let started = Instant::now();
    for round in 0..rounds {
        // Every point once per cycle of three rounds, in a seeded order within the cycle.
        if round % 3 == 0 {
            for i in (1..order.len()).rev() {
                let j = usize::try_from(rng.below(i as u64 + 1)).unwrap_or(0);
                order.swap(i, j);
            }
        }
        let which = order[usize::try_from(round % 3).unwrap_or(0)];
        let point = match which {
            // The API server answers at once, the pod is made within about half a second and
            // the guest boots within two: start-time kills strike early.
            0 => Point::Starting(rng.millis(1_500)),
            1 => Point::Running(rng.millis(3_000)),
            // The test guest powers off at once on the ACPI button and the pod goes within a
            // few seconds: a stop-time kill strikes early.
            _ => Point::Stopping(rng.millis(3_000)),
        };
        counts[usize::try_from(which).unwrap_or(0)] += 1;
        let host_before = host_state();
        let mut seen = Seen::default();
        let left = kill_a_run(point, &mut seen, round);

        let mut next = Running::spawn(kvrs_run(&["--stop-after-console", PING_MARKER]));
        let out = next.finish(|| seen.note());
        seen.note_output(&out.stdout);
        let text = out.text();
        assert!(out.success(), "round {round}: the next run failed:\n{text}");
        for needle in [
            "default/guest Running",
            PING_MARKER,
            "stopped; nothing left behind",
        ] {
            assert!(
                out.stdout.contains(needle),
                "round {round}: no {needle:?} in:\n{text}"
            );
        }
        let removed: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with("removed what a previous run left:"))
            .collect();
        for ns in &left.netns {
            assert!(
                removed
                    .iter()
                    .any(|l| l.contains(&format!("network namespace {ns}"))),
                "round {round}: the killed run's network namespace {ns} is named as removed:\n{text}"
            );
        }
        if left.processes {
            assert!(
                removed.iter().any(|l| l.contains(" processes of pod ")),
                "round {round}: the killed run's pod processes are named as removed:\n{text}"
            );
        }
        if left.qemu {
            assert!(
                removed.iter().any(|l| l.contains("qemu-system-x86")),
                "round {round}: the killed run's QEMU is named as removed:\n{text}"
            );
        }
        println!(
            "round {round}: the next run removed {} things and ran the VM",
            removed.len()
        );

        let vm_processes = settled(|| common::processes_on(NODE, common::VM_PROCESSES));
        assert_eq!(
            vm_processes,
            Vec::<u32>::new(),
            "round {round}: VM processes left:\n{text}"
        );
        assert_eq!(
            seen.netns_present(),
            BTreeSet::new(),
            "round {round}: network namespaces of the runs' pods:\n{text}"
        );
        let names = seen.names();
        let added = settled(|| host_state().added_since_naming(&host_before, &names));
        assert_eq!(
            added,
            Vec::<String>::new(),
            "round {round}: left on the host:\n{text}"
        );
        let procs = settled(processes_of_the_runs);
        assert_eq!(
            procs,
            BTreeSet::new(),
            "round {round}: processes of the runs left:\n{text}"
        );
        for d in [run_driver::state_dir(TAG), run_driver::pods_dir(TAG)] {
            assert!(!d.exists(), "round {round}: {} is left", d.display());
        }
    }
    println!(
        "run_killed: {rounds} rounds (seed {seed}): killed {} times starting, {} running, {} \
         stopping; each next run cleaned up and ran the VM, in {:.0} s",
        counts[0],
        counts[1],
        counts[2],
        started.elapsed().as_secs_f64()
    );
}
