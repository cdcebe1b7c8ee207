//! The controller's work queues during the burst, from its own `/metrics`: how long keys waited
//! in each queue before a worker took them, how long the syncs took, and how busy the workers
//! were (summed sync time over workers × wall time). Workers that are busy all the time while
//! the API server's cores are idle mean the controller, not the server, sets the pace.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

/// `(sum, count)` of a histogram, by series name and queue.
pub type Histograms = BTreeMap<(String, String), (f64, f64)>;

const FAMILIES: [&str; 2] = [
    "kubevirt_workqueue_queue_duration_seconds",
    "kubevirt_workqueue_work_duration_seconds",
];

/// The body of `GET path` on the loopback `port` (empty on any failure).
pub fn http_get(port: u16, path: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).ok();
    if write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .is_err()
    {
        return String::new();
    }
    let mut text = String::new();
    s.read_to_string(&mut text).ok();
    text.split_once("\r\n\r\n")
        .map(|(_, body)| body.to_string())
        .unwrap_or_default()
}

/// The queue histograms' sums and counts from the controller's `/metrics` on `port`.
pub fn scrape(port: u16) -> Histograms {
    parse(&http_get(port, "/metrics"))
}

fn parse(text: &str) -> Histograms {
    let mut out = Histograms::new();
    for line in text.lines() {
        for family in FAMILIES {
            for (suffix, is_sum) in [("_sum{", true), ("_count{", false)] {
                let Some(rest) = line.strip_prefix(&format!("{family}{suffix}")) else {
                    continue;
                };
                let Some((labels, value)) = rest.rsplit_once("} ") else {
                    continue;
                };
                let Some(queue) = labels
                    .strip_prefix("name=\"")
                    .and_then(|l| l.split('"').next())
                else {
                    continue;
                };
                let Ok(value) = value.trim().parse::<f64>() else {
                    continue;
                };
                let e = out
                    .entry((family.to_string(), queue.to_string()))
                    .or_default();
                if is_sum {
                    e.0 = value;
                } else {
                    e.1 = value;
                }
            }
        }
    }
    out
}

/// Prints what changed between `a` and `b` (taken `wall` apart) for each queue, with the number
/// of workers each runs.
pub fn print(a: &Histograms, b: &Histograms, wall: Duration, workers: &[(&str, usize)]) {
    let delta = |family: &str, queue: &str| {
        let k = (family.to_string(), queue.to_string());
        let (s1, c1) = b.get(&k).copied().unwrap_or_default();
        let (s0, c0) = a.get(&k).copied().unwrap_or_default();
        (s1 - s0, c1 - c0)
    };
    println!();
    println!(
        "work queues, first VM create -> N-th launcher pod (the controller's /metrics: \
         kubevirt_workqueue_{{queue,work}}_duration_seconds)"
    );
    println!(
        "{:<22} {:>8} {:>8} {:>14} {:>13} {:>13}",
        "queue", "workers", "syncs", "mean wait ms", "mean sync ms", "workers busy"
    );
    for (queue, n) in workers {
        let (wait_sum, gets) = delta(FAMILIES[0], queue);
        let (work_sum, syncs) = delta(FAMILIES[1], queue);
        let busy = work_sum / (*n as f64 * wall.as_secs_f64()).max(1e-9);
        println!(
            "{:<22} {:>8} {:>8} {:>14.1} {:>13.1} {:>12.0}%",
            queue,
            n,
            syncs,
            1000.0 * wait_sum / gets.max(1.0),
            1000.0 * work_sum / syncs.max(1.0),
            100.0 * busy
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sums_and_counts_by_queue() {
        let text = "kubevirt_workqueue_work_duration_seconds_bucket{name=\"q\",le=\"0.1\"} 3\n\
                    kubevirt_workqueue_work_duration_seconds_sum{name=\"q\"} 0.5\n\
                    kubevirt_workqueue_work_duration_seconds_count{name=\"q\"} 4\n\
                    kubevirt_workqueue_queue_duration_seconds_sum{name=\"q\"} 2\n";
        let h = parse(text);
        let work = (
            "kubevirt_workqueue_work_duration_seconds".to_string(),
            "q".to_string(),
        );
        assert_eq!(h.get(&work), Some(&(0.5, 4.0)));
        let wait = (
            "kubevirt_workqueue_queue_duration_seconds".to_string(),
            "q".to_string(),
        );
        assert_eq!(h.get(&wait), Some(&(2.0, 0.0)));
    }
}
