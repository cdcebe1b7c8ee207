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
/// (`kvrs_runtime::queue=info` turns on the `sync{queue object}` span each reconcile runs in,
/// so every line names its key; `kvrs_runtime::kube::controller` logs each write sent with its
/// latency; the executor's trace level adds each refused write's body.)
pub const CONTROLLER_LOG: &str = "warn,kvrs_runtime::queue=info,kvrs_virt_controller::workers=debug,kvrs_runtime::kube::controller=debug,kvrs_executor::executor=trace";

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
    /// Each reconcile's time from the key's dequeue to its last write, in µs.
    pub took_us: Vec<u64>,
    /// Each reconcile's time spent waiting on the API server's answers, in µs.
    pub api_us: Vec<u64>,
    /// The same two, for the reconciles that sent at least one write.
    pub writing_took_us: Vec<u64>,
}

/// What the log says.
#[derive(Debug, Default)]
pub struct Figures {
    /// By queue (`vm`, `vmi`).
    pub queues: BTreeMap<String, QueueFigures>,
    /// Writes the API server refused, by (verb, resource, reason).
    pub refused: BTreeMap<(String, String, String), usize>,
    /// Accepted writes by (verb, resource[/subresource]): each one's latency in µs.
    pub wrote: BTreeMap<(String, String), Vec<u64>>,
}

/// The line without its ANSI colour codes.
pub fn strip_ansi(line: &str) -> String {
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

/// `name=value` fields of a tracing fmt line (values may be quoted). The line's own fields
/// come after its message; a span's fields (`sync{queue="vm" object=ns/a}:`) before it, so the
/// last occurrence is the event's own (a span's value loses its closing `}` and `:`).
pub fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let pat = format!(" {name}=");
    let start = line.rfind(&pat)? + pat.len();
    let rest = &line[start..];
    if let Some(q) = rest.strip_prefix('"') {
        q.split('"').next()
    } else {
        rest.split_whitespace()
            .next()
            .map(|v| v.trim_end_matches(':').trim_end_matches('}'))
    }
}

fn number(line: &str, name: &str) -> Option<u64> {
    field(line, name).and_then(|v| v.parse().ok())
}

/// Reads the controller log, the lines about objects of namespace `ns` only.
pub fn read(text: &str, ns: &str) -> Figures {
    let mut f = Figures::default();
    let mut per_key: BTreeMap<(String, String), usize> = BTreeMap::new();
    let prefix = format!("{ns}/");
    for raw in text.lines() {
        let line = strip_ansi(raw);
        if !field(&line, "object").is_some_and(|k| k.starts_with(&prefix)) {
            continue;
        }
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
            if let (Some(took), Some(api)) = (number(&line, "took_us"), number(&line, "api_us")) {
                q.took_us.push(took);
                q.api_us.push(api);
                if writes > 0 {
                    q.writing_took_us.push(took);
                }
            }
            if failed {
                let reason = field(&line, "reason").unwrap_or("?").to_string();
                *q.failed.entry(reason).or_default() += 1;
            }
            *per_key
                .entry((queue.to_string(), key.to_string()))
                .or_default() += 1;
        } else if line.contains(" wrote ") {
            let (Some(verb), Some(resource), Some(took)) = (
                field(&line, "verb"),
                field(&line, "resource"),
                number(&line, "took_us"),
            ) else {
                continue;
            };
            let what = match field(&line, "sub").filter(|s| !s.is_empty()) {
                Some(sub) => format!("{resource}/{sub}"),
                None => resource.to_string(),
            };
            f.wrote
                .entry((verb.to_string(), what))
                .or_default()
                .push(took);
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
    println!();
    println!(
        "reconcile latency (key dequeued -> last write answered; api = waiting on the API server)"
    );
    println!(
        "{:<6} {:>10} {:>10} {:>10} {:>10} {:>13} {:>10}",
        "queue", "p50 ms", "p90 ms", "max ms", "mean ms", "api share", "writing p50"
    );
    for (queue, q) in &f.queues {
        let mean = q.took_us.iter().sum::<u64>() as f64 / q.took_us.len().max(1) as f64;
        let api_share =
            q.api_us.iter().sum::<u64>() as f64 / q.took_us.iter().sum::<u64>().max(1) as f64;
        println!(
            "{:<6} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12.0}% {:>10.1}",
            queue,
            ms(percentile(&q.took_us, 50)),
            ms(percentile(&q.took_us, 90)),
            ms(percentile(&q.took_us, 100)),
            mean / 1000.0,
            api_share * 100.0,
            ms(percentile(&q.writing_took_us, 50)),
        );
    }
    println!();
    println!("the controller's accepted writes by verb and resource, with their latency (its log)");
    println!(
        "{:<7} {:<40} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "verb", "resource", "writes", "per VM", "p50 ms", "p90 ms", "mean ms"
    );
    for ((verb, what), lat) in &f.wrote {
        let mean = lat.iter().sum::<u64>() as f64 / lat.len().max(1) as f64;
        println!(
            "{:<7} {:<40} {:>8} {:>8.2} {:>9.1} {:>9.1} {:>9.1}",
            verb,
            what,
            lat.len(),
            lat.len() as f64 / n as f64,
            ms(percentile(lat, 50)),
            ms(percentile(lat, 90)),
            mean / 1000.0
        );
    }
    if f.refused.is_empty() {
        println!("writes refused by the API server: none");
    }
    for ((verb, resource, reason), c) in &f.refused {
        println!("write refused: {verb} {resource} ({reason}): {c}");
    }
}

/// The `percent`-th percentile (0..=100) of `values`, nearest rank; 0 for none.
pub fn percentile(values: &[u64], percent: usize) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = (percent * v.len()).div_ceil(100).clamp(1, v.len());
    v[rank - 1]
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reconcile_and_refusal_lines() {
        let log = "2026-01-01T00:00:00Z DEBUG sync{queue=\"vm\" object=ns/a}: reconciled queue=\"vm\" object=\"ns/a\" writes=3 took_us=900 api_us=800\n\
                   2026-01-01T00:00:00Z DEBUG sync{queue=\"vm\" object=ns/a}: wrote verb=\"patch\" resource=virtualmachines sub=\"status\" took_us=700\n\
                   2026-01-01T00:00:00Z DEBUG reconciled queue=\"vm\" object=\"ns/a\" writes=0 took_us=100 api_us=0\n\
                   2026-01-01T00:00:00Z  WARN reconcile failed: conflict queue=\"vmi\" object=\"ns/a\" writes=1 reason=\"api_write\"\n\
                   2026-01-01T00:00:00Z DEBUG write failed: x verb=\"patch\" resource=virtualmachines object=ns/a reason=\"conflict\"\n";
        let f = read(log, "ns");
        let vm = &f.queues["vm"];
        assert_eq!((vm.reconciles, vm.idle, vm.writes), (2, 1, 3));
        assert_eq!(vm.per_key.get(&2), Some(&1));
        assert_eq!(f.queues["vmi"].failed.get("api_write"), Some(&1));
        assert_eq!(vm.took_us, [900, 100]);
        assert_eq!(vm.writing_took_us, [900]);
        let status = ("patch".to_string(), "virtualmachines/status".to_string());
        assert_eq!(f.wrote.get(&status), Some(&vec![700]));
        assert_eq!(percentile(&[5, 1, 3], 50), 3);
        assert_eq!(percentile(&[5, 1, 3], 100), 5);
        let refused = (
            "patch".to_string(),
            "virtualmachines".to_string(),
            "conflict".to_string(),
        );
        assert_eq!(f.refused.get(&refused), Some(&1));
    }
}
