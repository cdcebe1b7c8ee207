//! One VM at a time on an idle controller: how long from the VM controller's first decision
//! about a new VM to its VMI created (the performance anchor "VM controller: first decision ->
//! VMI created", KubeVirt 0.19 s, goal 20 ms against a real API server), and on to the launcher
//! pod.
//!
//! Measured twice: inside the controller, from its own log (the first `deciding` line of the VM
//! key to the `wrote` line of the VMI create, which is logged when the API server answered),
//! and from outside (the benchmark's create answered to the VMI and the pod seen by its
//! watches — this adds both watch deliveries). Each VM is created only after the previous one
//! has its pod, in a namespace of its own so the burst's counts never include them.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, PartialObjectMeta, PostParams};
use kube::runtime::watcher;

use super::reconciles::{field, strip_ansi};

/// The namespace of the one-at-a-time VMs.
pub const NS: &str = "burst-single";

/// First-seen instants by name, from a metadata watch.
type FirstSeen = Arc<Mutex<HashMap<String, Instant>>>;

fn watch_first_seen<K>(api: Api<PartialObjectMeta<K>>, cfg: watcher::Config) -> FirstSeen
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let seen = FirstSeen::default();
    let s = seen.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).boxed();
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    if let Some(n) = o.metadata.name {
                        let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
                        s.entry(n).or_insert_with(Instant::now);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    seen
}

/// What the benchmark saw of one VM.
#[derive(Debug, Clone)]
pub struct External {
    /// The VM's name.
    pub name: String,
    /// Create answered -> VMI seen.
    pub vmi: Duration,
    /// Create answered -> launcher pod seen.
    pub pod: Duration,
}

/// Creates `runs` VMs (made by `vm(name, namespace)`) one after another, each once the previous
/// one's launcher pod is seen.
pub async fn run(
    client: &kube::Client,
    vm_resource: &kube::api::ApiResource,
    vmi_resource: &kube::api::ApiResource,
    vm: impl Fn(&str, &str) -> serde_json::Value,
    runs: usize,
    timeout: Duration,
) -> Result<Vec<External>> {
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, vm_resource);
    let vmis = watch_first_seen(
        Api::<PartialObjectMeta<DynamicObject>>::namespaced_with(client.clone(), NS, vmi_resource),
        watcher::Config::default(),
    );
    let pods = watch_first_seen(
        Api::<PartialObjectMeta<Pod>>::namespaced(client.clone(), NS),
        watcher::Config::default().labels("kubevirt.io=virt-launcher"),
    );
    // Let both watches list before the first create.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut out = Vec::new();
    for i in 0..runs {
        let name = format!("single-{i}");
        let obj: DynamicObject = serde_json::from_value(vm(&name, NS))?;
        vms.create(&PostParams::default(), &obj).await?;
        let created = Instant::now();
        let pod_prefix = format!("virt-launcher-{name}-");
        loop {
            let vmi_at = vmis
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&name)
                .copied();
            let pod_at = pods
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .find(|(n, _)| n.starts_with(&pod_prefix))
                .map(|(_, t)| *t);
            if let (Some(v), Some(p)) = (vmi_at, pod_at) {
                out.push(External {
                    name: name.clone(),
                    vmi: v.saturating_duration_since(created),
                    pod: p.saturating_duration_since(created),
                });
                break;
            }
            if created.elapsed() > timeout {
                bail!("{NS}/{name}: no VMI and launcher pod within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Let the trailing status writes of this VM pass before the next one starts.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(out)
}

/// What the controller's log says about one VM.
#[derive(Debug, Clone, Default)]
pub struct Internal {
    /// First VM decision -> the VMI create answered.
    pub vmi: Option<Duration>,
    /// First VM decision -> the launcher pod create answered.
    pub pod: Option<Duration>,
    /// VM reconciles that ended before the VMI was created, the creating one included.
    pub vm_reconciles: usize,
    /// Writes those reconciles sent.
    pub vm_writes: usize,
}

fn timestamp(line: &str) -> Option<Timestamp> {
    Timestamp::from_str(line.split_whitespace().next()?).ok()
}

fn between(a: Timestamp, b: Timestamp) -> Option<Duration> {
    Duration::try_from(b.duration_since(a)).ok()
}

/// Reads the controller log for the VM `name` of [`NS`].
pub fn internal(log: &str, name: &str) -> Internal {
    let key = format!("{NS}/{name}");
    let mut first: Option<Timestamp> = None;
    let mut out = Internal::default();
    // Reconciles are counted up to and including the one that created the VMI (its
    // `reconciled` line comes after its `wrote` lines).
    let mut vmi_done = false;
    let mut counted = false;
    for raw in log.lines() {
        let line = strip_ansi(raw);
        if !line.contains(&format!(" object={key}}}")) && field(&line, "object") != Some(&key) {
            continue;
        }
        let in_vm_queue = line.contains("sync{queue=\"vm\"");
        let Some(at) = timestamp(&line) else { continue };
        if in_vm_queue && line.contains(" deciding ") && first.is_none() {
            first = Some(at);
        }
        let Some(t0) = first else { continue };
        if in_vm_queue && !counted && line.contains(" reconciled ") {
            out.vm_reconciles += 1;
            out.vm_writes += field(&line, "writes")
                .and_then(|w| w.parse::<usize>().ok())
                .unwrap_or(0);
            counted = vmi_done;
        }
        if line.contains(" wrote ") && field(&line, "verb") == Some("create") {
            match field(&line, "resource") {
                Some("virtualmachineinstances") if out.vmi.is_none() => {
                    out.vmi = between(t0, at);
                    vmi_done = true;
                }
                Some("pods") if out.pod.is_none() => out.pod = between(t0, at),
                _ => {}
            }
        }
    }
    out
}

fn median(mut v: Vec<Duration>) -> Option<Duration> {
    v.sort();
    v.get(v.len().checked_sub(1)? / 2).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(
        || "-".into(),
        |d| format!("{:.1}", d.as_secs_f64() * 1000.0),
    )
}

/// Prints each run and the medians.
pub fn print(runs: &[External], log: &str) {
    println!();
    println!(
        "one VM at a time on an idle controller ({} runs, namespace {NS}); controller: from its\n\
         log, first VM decision -> create answered; outside: the benchmark's create answered ->\n\
         object seen by its watch (both watch deliveries included). Anchor: KubeVirt 0.19 s from\n\
         the first decision to the VMI created, goal 20 ms.",
        runs.len()
    );
    println!(
        "{:<10} {:>16} {:>16} {:>14} {:>14} {:>16}",
        "VM", "ctl: VMI ms", "ctl: pod ms", "out: VMI ms", "out: pod ms", "VM syncs/writes"
    );
    let mut inside = (Vec::new(), Vec::new());
    for r in runs {
        let i = internal(log, &r.name);
        inside.0.extend(i.vmi);
        inside.1.extend(i.pod);
        println!(
            "{:<10} {:>16} {:>16} {:>14} {:>14} {:>16}",
            r.name,
            ms(i.vmi),
            ms(i.pod),
            ms(Some(r.vmi)),
            ms(Some(r.pod)),
            format!("{}/{}", i.vm_reconciles, i.vm_writes)
        );
    }
    println!(
        "{:<10} {:>16} {:>16} {:>14} {:>14}",
        "median",
        ms(median(inside.0)),
        ms(median(inside.1)),
        ms(median(runs.iter().map(|r| r.vmi).collect())),
        ms(median(runs.iter().map(|r| r.pod).collect())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_first_decision_to_creates() {
        let log = "2026-01-01T00:00:00.000000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: deciding vmi_phase=None\n\
                   2026-01-01T00:00:00.004000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: wrote verb=\"patch\" resource=virtualmachines sub=\"\" took_us=3000\n\
                   2026-01-01T00:00:00.005000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: reconciled queue=\"vm\" object=\"burst-single/single-0\" writes=1 took_us=5000 api_us=3000\n\
                   2026-01-01T00:00:00.009000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: deciding vmi_phase=None\n\
                   2026-01-01T00:00:00.020000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: wrote verb=\"create\" resource=virtualmachineinstances sub=\"\" took_us=3000\n\
                   2026-01-01T00:00:00.021000Z DEBUG sync{queue=\"vm\" object=burst-single/single-0}: reconciled queue=\"vm\" object=\"burst-single/single-0\" writes=3 took_us=12000 api_us=9000\n\
                   2026-01-01T00:00:00.030000Z DEBUG sync{queue=\"vmi\" object=burst-single/single-0}: wrote verb=\"create\" resource=pods sub=\"\" took_us=3000\n\
                   2026-01-01T00:00:00.031000Z DEBUG sync{queue=\"vm\" object=burst-single/single-1}: deciding vmi_phase=None\n";
        let i = internal(log, "single-0");
        assert_eq!(i.vmi, Some(Duration::from_millis(20)));
        assert_eq!(i.pod, Some(Duration::from_millis(30)));
        assert_eq!((i.vm_reconciles, i.vm_writes), (2, 4));
    }
}
