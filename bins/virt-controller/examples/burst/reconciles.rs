//! Where the controller's work went during the burst, read from its own log: the debug line
//! each reconcile ends with (`reconciled` / `reconcile failed`, with its queue, key and the
//! writes it sent) and the executor's line for each write the API server refused.
//!
//! It answers what the apiserver's counters cannot: how many reconciles each VM took, how many
//! of them wrote nothing (a watch event of the controller's own write queued the key again),
//! and how many writes failed and why (409 conflicts are retried with backoff).

use std::collections::BTreeMap;

/// The `RUST_LOG` the benchmark gives the controller: warnings, plus the reconcile and failed
/// write lines this module reads.
pub const CONTROLLER_LOG: &str =
    "warn,kvrs_virt_controller::workers=debug,kvrs_runtime::executor=debug";

/// Per queue: reconciles, those that wrote nothing, writes sent, failed reconciles.
#[derive(Debug, Default)]
pub struct QueueFigures {
    /// Reconciles ended.
    pub reconciles: usize,
    /// Reconciles that sent no write.
    pub idle: usize,
    /// Writes sent and accepted.
    pub writes: usize,
    /// Reconciles that ended with an error, by reason.
    pub failed: BTreeMap<String, usize>,
    /// Reconciles per key, as a histogram: reconciles -> keys.
    pub per_key: BTreeMap<usize, usize>,
}

/// What the log says.
#[derive(Debug, Default)]
pub struct Figures {
    /// By queue (`vm`, `vmi`).
    pub queues: BTreeMap<String, QueueFigures>,
    /// Writes the API server refused, by (verb, resource, reason).
    pub refused: BTreeMap<(String, String, String), usize>,
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ ... final byte in @..~
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) && d != '[' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `name=value` fields of a tracing fmt line (values may be quoted).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let pat = format!(" {name}=");
    let start = line.find(&pat)? + pat.len();
    let rest = &line[start..];
    if let Some(q) = rest.strip_prefix('"') {
        q.split('"').next()
    } else {
        rest.split_whitespace().next()
    }
}

/// Reads the controller log.
pub fn read(text: &str) -> Figures {
    let mut f = Figures::default();
    let mut per_key: BTreeMap<(String, String), usize> = BTreeMap::new();
    for raw in text.lines() {
        let line = strip_ansi(raw);
        let done = line.contains(" reconciled ");
        let failed = line.contains(" reconcile failed");
        if done || failed {
            let (Some(queue), Some(key)) = (field(&line, "queue"), field(&line, "object")) else {
                continue;
            };
            let writes: usize = field(&line, "writes")
                .and_then(|w| w.parse().ok())
                .unwrap_or(0);
            let q = f.queues.entry(queue.to_string()).or_default();
            q.reconciles += 1;
            q.writes += writes;
            if writes == 0 {
                q.idle += 1;
            }
            if failed {
                let reason = field(&line, "reason").unwrap_or("?").to_string();
                *q.failed.entry(reason).or_default() += 1;
            }
            *per_key
                .entry((queue.to_string(), key.to_string()))
                .or_default() += 1;
        } else if line.contains(" write failed") {
            let g = |n: &str| field(&line, n).unwrap_or("?").to_string();
            *f.refused
                .entry((g("verb"), g("resource"), g("reason")))
                .or_default() += 1;
        }
    }
    for ((queue, _), n) in per_key {
        let q = f.queues.entry(queue).or_default();
        *q.per_key.entry(n).or_default() += 1;
    }
    f
}

/// Prints the figures; `n` is the number of VMs.
pub fn print(f: &Figures, n: usize) {
    println!();
    println!("reconciles (from the controller's log, RUST_LOG={CONTROLLER_LOG})");
    println!(
        "{:<6} {:>10} {:>8} {:>12} {:>8} {:>12} {:>8}",
        "queue", "reconciles", "per VM", "wrote none", "writes", "writes/VM", "failed"
    );
    for (queue, q) in &f.queues {
        println!(
            "{:<6} {:>10} {:>8.2} {:>12} {:>8} {:>12.2} {:>8}",
            queue,
            q.reconciles,
            q.reconciles as f64 / n as f64,
            q.idle,
            q.writes,
            q.writes as f64 / n as f64,
            q.failed.values().sum::<usize>()
        );
    }
    for (queue, q) in &f.queues {
        let hist: Vec<String> = q
            .per_key
            .iter()
            .map(|(r, keys)| format!("{r}x: {keys}"))
            .collect();
        println!(
            "{queue} reconciles per key (reconciles: keys): {}",
            hist.join(", ")
        );
        for (reason, c) in &q.failed {
            println!("{queue} reconciles failed ({reason}): {c}");
        }
    }
    if f.refused.is_empty() {
        println!("writes refused by the API server: none");
    }
    for ((verb, resource, reason), c) in &f.refused {
        println!("write refused: {verb} {resource} ({reason}): {c}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reconcile_and_refusal_lines() {
        let log = "2026-01-01T00:00:00Z DEBUG reconciled queue=\"vm\" object=\"ns/a\" writes=3\n\
                   2026-01-01T00:00:00Z DEBUG reconciled queue=\"vm\" object=\"ns/a\" writes=0\n\
                   2026-01-01T00:00:00Z  WARN reconcile failed: conflict queue=\"vmi\" object=\"ns/a\" writes=1 reason=\"api_write\"\n\
                   2026-01-01T00:00:00Z DEBUG write failed: x verb=\"patch\" resource=virtualmachines object=ns/a reason=\"conflict\"\n";
        let f = read(log);
        let vm = &f.queues["vm"];
        assert_eq!((vm.reconciles, vm.idle, vm.writes), (2, 1, 3));
        assert_eq!(vm.per_key.get(&2), Some(&1));
        assert_eq!(f.queues["vmi"].failed.get("api_write"), Some(&1));
        let refused = (
            "patch".to_string(),
            "virtualmachines".to_string(),
            "conflict".to_string(),
        );
        assert_eq!(f.refused.get(&refused), Some(&1));
    }
}
