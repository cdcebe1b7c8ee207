//! Where the CPU went during the burst: each process's user + system time from
//! `/proc/PID/stat`, and the whole machine's busy time from `/proc/stat`, sampled at the start
//! and the end of a window.
//!
//! The API server, etcd and the controller share the machine's cores (two here), and so does
//! whatever else runs on it; the figures say whether the API server was the bottleneck (its
//! cores busy) or the controller left it idle (waiting on answers one after another).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`; 100 on Linux when unknown).
fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of `pid`, in ticks.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; the fields after its `)` are plain.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line: 12th and 13th after the state (field 3).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn process_name(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| format!("pid {pid}"))
}

/// (busy, total) ticks of the whole machine, all cores.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// One sample of the watched processes and the machine.
#[derive(Debug, Clone)]
pub struct Sample {
    at: Instant,
    processes: BTreeMap<String, u64>,
    machine: Option<(u64, u64)>,
}

/// The processes to watch, by a label (`kube-apiserver`, `virt-controller`, ...).
pub struct Watch {
    pids: Vec<(String, u32)>,
    tick: f64,
    cores: usize,
}

impl Watch {
    /// Watches `pids` (named by their `comm`) and `extra` (named as given).
    pub fn new(pids: &[u32], extra: &[(&str, u32)]) -> Self {
        let mut named: Vec<(String, u32)> = pids.iter().map(|&p| (process_name(p), p)).collect();
        named.extend(extra.iter().map(|(n, p)| (n.to_string(), *p)));
        Self {
            pids: named,
            tick: ticks_per_second(),
            cores: std::thread::available_parallelism().map_or(1, usize::from),
        }
    }

    /// Samples now.
    pub fn sample(&self) -> Sample {
        Sample {
            at: Instant::now(),
            processes: self
                .pids
                .iter()
                .filter_map(|(n, p)| Some((n.clone(), process_ticks(*p)?)))
                .collect(),
            machine: machine_ticks(),
        }
    }

    /// CPU seconds of the process labelled `name` between `a` and `b`.
    #[allow(dead_code)] // the side-by-side example's; burst prints the whole table
    pub fn seconds(&self, name: &str, a: &Sample, b: &Sample) -> Option<f64> {
        let start = a.processes.get(name)?;
        let end = b.processes.get(name)?;
        Some(end.saturating_sub(*start) as f64 / self.tick)
    }

    /// Prints each process's CPU seconds and cores used between `a` and `b`, and the machine's.
    pub fn print(&self, title: &str, a: &Sample, b: &Sample) {
        let wall = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
        println!();
        println!(
            "CPU during {title} ({wall:.2} s wall, {} cores)",
            self.cores
        );
        println!(
            "{:<28} {:>12} {:>12}",
            "process", "CPU seconds", "cores used"
        );
        let mut ours = 0.0;
        for (name, end) in &b.processes {
            let Some(start) = a.processes.get(name) else {
                continue;
            };
            let secs = end.saturating_sub(*start) as f64 / self.tick;
            ours += secs;
            println!("{name:<28} {secs:>12.2} {:>12.2}", secs / wall);
        }
        if let (Some((busy_a, total_a)), Some((busy_b, total_b))) = (a.machine, b.machine) {
            let busy = busy_b.saturating_sub(busy_a) as f64;
            let total = total_b.saturating_sub(total_a).max(1) as f64;
            let machine_secs = busy / self.tick;
            println!(
                "{:<28} {machine_secs:>12.2} {:>12.2}   ({:.0}% of the machine busy)",
                "machine, all processes",
                machine_secs / wall,
                100.0 * busy / total
            );
            println!(
                "{:<28} {:>12.2} {:>12.2}",
                "  of which not listed above",
                (machine_secs - ours).max(0.0),
                (machine_secs - ours).max(0.0) / wall
            );
        }
    }
}
