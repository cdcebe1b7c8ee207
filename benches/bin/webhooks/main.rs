//! kvrs's virt-api next to KubeVirt v1.9.0's own virt-api, the same AdmissionReview requests
//! over the same client (`benches/webhook-latency.sh`; not run by CI, never a test).
//!
//! One real kube-apiserver + etcd holds KubeVirt's CRDs and a KubeVirt CR with an empty
//! configuration; KubeVirt's `cmd/virt-api` (built from the v1.9.0 snapshot with its vendor/)
//! and kvrs's `virt-api` both run against it. Bodies: AdmissionReview v1 CREATE requests built
//! at run time from KubeVirt's oracle inputs — every ungated oracle VMI for
//! `/virtualmachineinstances-mutate`, the same VMIs as KubeVirt's mutating webhook left them
//! for `/virtualmachineinstances-validate-create`, the distinct VMs of the controller
//! oracle's scenarios for `/virtualmachines-mutate` and `/virtualmachines-validate`.
//!
//! First every body goes once to each server and their `allowed` answers are compared
//! (printed: how many agree). Then ROUNDS rounds; in each, each server in turn (the order
//! alternating between rounds) answers PER_ROUND requests per path, the four paths interleaved,
//! over CONCURRENCY kept-alive HTTPS connections (its own set per server, opened once). Printed
//! per path and server: p50 and p99 over all rounds' samples, and the median (with IQR) of the
//! per-round ratios of KubeVirt's p50 to kvrs's — the machine's speed swings within seconds, so
//! only ratios of the same round compare — plus each server's CPU per request (/proc).

mod bodies;
mod client;
mod servers;
mod stats;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use clap::Parser;
use serde_json::Value;

use client::{Conn, Job, run_batch};

/// Command line.
#[derive(Debug, Parser)]
#[command(name = "kvrs-bench-webhooks")]
struct Args {
    /// kvrs's virt-api binary.
    #[arg(long)]
    kvrs: PathBuf,
    /// The directory `benches/kubevirt/build.sh` printed (virt-api, kvrs-bench-manifests).
    #[arg(long)]
    kubevirt_bin: PathBuf,
    /// KubeVirt's defaulting oracle (`../shared/oracle`).
    #[arg(long)]
    oracle: PathBuf,
    /// KubeVirt's controller oracle, for its VMs (`../shared/oracle-vm`).
    #[arg(long)]
    oracle_vm: PathBuf,
    /// Paired rounds.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Requests per path per server per round.
    #[arg(long, default_value_t = 100)]
    per_round: usize,
    /// Connections (and requests in flight) per server.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
}

/// One server under test.
struct Server {
    name: &'static str,
    proc: servers::Proc,
    conns: Vec<Conn>,
    /// Latencies (µs) per path index, all rounds.
    samples: Vec<Vec<f64>>,
    /// Per round, p50 per path index.
    round_p50: Vec<Vec<f64>>,
    cpu_seconds: f64,
    requests: usize,
}

/// Waits until `addr` answers `body` on `path` with 200 (the server has synced its caches).
async fn wait_serving(
    proc: &mut servers::Proc,
    who: &str,
    addr: std::net::SocketAddr,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
    body: &Bytes,
) -> Result<()> {
    let start = Instant::now();
    let mut last;
    loop {
        proc.check_alive(who)?;
        match Conn::open(addr, tls.clone()).await {
            Ok(mut c) => match c.post(path, body.clone()).await {
                Ok((200, _)) => return Ok(()),
                Ok((s, a)) => last = format!("HTTP {s}: {}", String::from_utf8_lossy(&a)),
                Err(e) => last = format!("{e:#}"),
            },
            Err(e) => last = format!("{e:#}"),
        }
        if start.elapsed() > Duration::from_secs(120) {
            bail!(
                "{who} not answering {path} within 120 s: {last}\n{}",
                proc.tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// (allowed, result message) of an AdmissionReview answer; fails when its uid is not `uid`.
fn verdict(answer: &[u8], uid: &str) -> Result<(bool, String)> {
    let v: Value = serde_json::from_slice(answer).context("an AdmissionReview answer")?;
    let resp = &v["response"];
    if resp["uid"].as_str() != Some(uid) {
        bail!("response.uid {} is not the request's {uid}", resp["uid"]);
    }
    let allowed = resp["allowed"]
        .as_bool()
        .context("response.allowed is missing")?;
    Ok((
        allowed,
        resp["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.rounds == 0 || args.per_round == 0 || args.concurrency == 0 {
        bail!("--rounds, --per-round and --concurrency must be at least 1");
    }
    let (vmi_mutate, vmi_validate) = bodies::vmi_bodies(&args.oracle)?;
    let (vm_mutate, vm_validate) = bodies::vm_bodies(&args.oracle_vm)?;
    let sets = [vmi_mutate, vmi_validate, vm_mutate, vm_validate];
    let paths: Arc<Vec<&'static str>> = Arc::new(sets.iter().map(|s| s.path).collect());
    let bodies: Vec<Vec<Bytes>> = sets
        .iter()
        .map(|s| s.bodies.iter().map(|b| Bytes::from(b.clone())).collect())
        .collect();

    let manifests = servers::manifests(&args.kubevirt_bin)?;
    eprintln!("webhooks: starting kube-apiserver + etcd");
    let cluster = servers::start_cluster(&manifests)?;
    let work = tempfile::tempdir()?;
    let kv_ca = servers::kubevirt_certs(&cluster, work.path())?;
    let logs = cluster.dir().to_path_buf();
    let (kv_proc, kv_addr) = servers::start_kubevirt(
        &cluster,
        &args.kubevirt_bin.join("virt-api"),
        work.path(),
        logs.join("kubevirt-virt-api.log"),
    )?;
    let (mut rs_proc, rs_addr) =
        servers::start_kvrs(&cluster, &args.kvrs, logs.join("kvrs-virt-api.log"))?;
    let rs_ca = servers::kvrs_ca(&cluster, &mut rs_proc)?;
    let tls = client::tls_config(&[kv_ca, rs_ca])?;

    let mut kv_proc = kv_proc;
    wait_serving(
        &mut kv_proc,
        "KubeVirt's virt-api",
        kv_addr,
        &tls,
        paths[0],
        &bodies[0][0],
    )
    .await?;
    wait_serving(
        &mut rs_proc,
        "kvrs's virt-api",
        rs_addr,
        &tls,
        paths[0],
        &bodies[0][0],
    )
    .await?;
    eprintln!(
        "webhooks: both virt-apis answer ({} + {} + {} + {} bodies)",
        bodies[0].len(),
        bodies[1].len(),
        bodies[2].len(),
        bodies[3].len()
    );

    // Every body once to each: the answers' uid checked, `allowed` compared.
    let mut kv_conn = Conn::open(kv_addr, tls.clone()).await?;
    let mut rs_conn = Conn::open(rs_addr, tls.clone()).await?;
    let (mut agree, mut total) = (0, 0);
    let mut differ = Vec::new();
    for (p, set) in sets.iter().enumerate() {
        for (b, body) in bodies[p].iter().enumerate() {
            let uid = serde_json::from_slice::<Value>(body)?["request"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let mut answers = Vec::new();
            for conn in [&mut kv_conn, &mut rs_conn] {
                let (status, answer) = conn.post(paths[p], body.clone()).await?;
                if status != 200 {
                    bail!("{} body {b} ({uid}): HTTP {status}", set.path);
                }
                answers.push(verdict(&answer, &uid)?);
            }
            total += 1;
            if answers[0].0 == answers[1].0 {
                agree += 1;
            } else {
                differ.push(format!(
                    "{} {uid}: KubeVirt allowed={} ({}), kvrs allowed={} ({})",
                    set.path, answers[0].0, answers[0].1, answers[1].0, answers[1].1
                ));
            }
        }
    }
    drop((kv_conn, rs_conn));

    let open = |addr| {
        let tls = tls.clone();
        async move {
            let mut v = Vec::new();
            for _ in 0..args.concurrency {
                v.push(Conn::open(addr, tls.clone()).await?);
            }
            Ok::<_, anyhow::Error>(v)
        }
    };
    let mut kv = Server {
        name: "KubeVirt",
        proc: kv_proc,
        conns: open(kv_addr).await?,
        samples: vec![Vec::new(); 4],
        round_p50: Vec::new(),
        cpu_seconds: 0.0,
        requests: 0,
    };
    let mut rs = Server {
        name: "kvrs",
        proc: rs_proc,
        conns: open(rs_addr).await?,
        samples: vec![Vec::new(); 4],
        round_p50: Vec::new(),
        cpu_seconds: 0.0,
        requests: 0,
    };

    // The rounds' jobs: the four paths interleaved, each path's bodies in turn.
    let jobs: Arc<Vec<Job>> = Arc::new(
        (0..args.per_round * 4)
            .map(|k| {
                let p = k % 4;
                Job {
                    path: p,
                    body: bodies[p][(k / 4) % bodies[p].len()].clone(),
                }
            })
            .collect(),
    );
    // One untimed batch each: connections, caches and allocators warm.
    for s in [&mut kv, &mut rs] {
        let conns = std::mem::take(&mut s.conns);
        s.conns = run_batch(conns, paths.clone(), jobs.clone())
            .await
            .with_context(|| s.name)?
            .0;
    }
    eprintln!(
        "webhooks: {} rounds of {} requests per path per server, {} in flight",
        args.rounds, args.per_round, args.concurrency
    );
    for round in 0..args.rounds {
        let order: [&mut Server; 2] = if round % 2 == 0 {
            [&mut kv, &mut rs]
        } else {
            [&mut rs, &mut kv]
        };
        for s in order {
            s.proc.check_alive(s.name)?;
            let cpu0 = servers::cpu_seconds(s.proc.pid())?;
            let conns = std::mem::take(&mut s.conns);
            let (conns, samples) = run_batch(conns, paths.clone(), jobs.clone())
                .await
                .with_context(|| s.name)?;
            s.cpu_seconds += servers::cpu_seconds(s.proc.pid())? - cpu0;
            s.requests += samples.len();
            s.conns = conns;
            let mut per_path = vec![Vec::new(); 4];
            for (p, us) in samples {
                per_path[p].push(us);
            }
            s.round_p50.push(
                per_path
                    .iter()
                    .map(|v| stats::quantile(v, 500).unwrap_or(f64::NAN))
                    .collect(),
            );
            for (p, v) in per_path.into_iter().enumerate() {
                s.samples[p].extend(v);
            }
        }
    }

    print_table(&args, &paths, &kv, &rs, agree, total, &differ);
    drop(cluster);
    Ok(())
}

fn print_table(
    args: &Args,
    paths: &[&str],
    kv: &Server,
    rs: &Server,
    agree: usize,
    total: usize,
    differ: &[String],
) {
    println!(
        "KubeVirt v1.9.0's own virt-api (cmd/virt-api, built from the source snapshot) and kvrs's virt-api, same kube-apiserver, same requests and client"
    );
    println!(
        "{:<42} {:>12} {:>12} {:>10} {:>10} {:>22} {:>10}",
        "path",
        "KubeVirt p50",
        "KubeVirt p99",
        "kvrs p50",
        "kvrs p99",
        "p50 ratio (IQR)",
        "p99 ratio"
    );
    let mut all_ratios = Vec::new();
    let mut summary = BTreeMap::new();
    for (p, path) in paths.iter().enumerate() {
        let ratios: Vec<f64> = kv
            .round_p50
            .iter()
            .zip(&rs.round_p50)
            .map(|(k, r)| k[p] / r[p])
            .collect();
        all_ratios.extend(&ratios);
        let (med, q1, q3) = stats::median_iqr(&ratios).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
        let q = |s: &Server, x| stats::quantile(&s.samples[p], x).unwrap_or(f64::NAN);
        let p99 = q(kv, 990) / q(rs, 990);
        println!(
            "{:<42} {:>10.0}µs {:>10.0}µs {:>8.0}µs {:>8.0}µs {:>7.2}x ({:.2}-{:.2}x) {:>9.2}x",
            path,
            q(kv, 500),
            q(kv, 990),
            q(rs, 500),
            q(rs, 990),
            med,
            q1,
            q3,
            p99
        );
        summary.insert(*path, med);
    }
    let cpu = |s: &Server| 1e6 * s.cpu_seconds / s.requests.max(1) as f64;
    println!(
        "server CPU per request: KubeVirt {:.0} µs, kvrs {:.0} µs ({:.2}x)",
        cpu(kv),
        cpu(rs),
        cpu(kv) / cpu(rs)
    );
    println!("answers: {agree} of {total} bodies got the same `allowed` from both");
    for d in differ {
        println!("  differs: {d}");
    }
    let (med, _, _) = stats::median_iqr(&all_ratios).unwrap_or((f64::NAN, f64::NAN, f64::NAN));
    println!(
        "({} paired rounds x {} requests per path per server, {} connections each, order alternating; ratio = KubeVirt / kvrs, median of per-round p50 ratios; p99 over all rounds' samples)",
        args.rounds, args.per_round, args.concurrency
    );
    println!(
        "SUMMARY webhook latency: kvrs's virt-api p50 {med:.2}x faster than KubeVirt v1.9.0's (median over all paths' rounds; per path {})",
        summary
            .iter()
            .map(|(p, r)| format!("{p} {r:.2}x"))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
