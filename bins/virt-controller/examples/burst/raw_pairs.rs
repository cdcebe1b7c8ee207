//! The raw create ceiling of the objects the controller makes: the same VMIs and launcher pods,
//! created directly by the admin, as fast as the API server takes them.
//!
//! The ConfigMap ceiling says how fast this API server creates small objects; a VM started
//! means a VMI and a launcher pod, which cost the server several times a ConfigMap each (a VMI
//! is a custom resource, validated against its schema and stored as JSON; a launcher pod is
//! large). The goal reads "VMs/s to VMI + pod created against the raw create ceiling",
//! so this phase measures that ceiling for exactly those objects: the VMIs and pods the burst's
//! controller wrote, copied without their server-set fields into another namespace with the
//! controller stopped, one VMI and then its pod per pair, with the burst's concurrency. Nothing
//! reconciles them (the controller is gone; no scheduler, no kubelet), so each pair costs two
//! creates and their watch events, and nothing else.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Map, Value};

/// The label a launcher pod carries with its VMI's UID.
const CREATED_BY: &str = "kubevirt.io/created-by";

/// One raw run: how many pairs, and the wall time from the first request to the last answer.
pub struct RawPairs {
    pub pairs: usize,
    pub wall: Duration,
}

impl RawPairs {
    /// VMI + pod pairs created per second.
    pub fn rate(&self) -> f64 {
        self.pairs as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// A created object as a client would send it again, in namespace `ns`: its labels,
/// annotations, finalizers and spec; no UID, resourceVersion, timestamps, managed fields,
/// owner references (the owner lives in the other namespace; the garbage collector would
/// delete an object whose owner it cannot find) or status (set by the server on create).
fn as_sent(obj: &Value, ns: &str) -> Result<Value> {
    let md = obj
        .get("metadata")
        .and_then(Value::as_object)
        .context("an object without metadata")?;
    let mut meta = Map::new();
    for key in ["name", "labels", "annotations", "finalizers"] {
        if let Some(v) = md.get(key) {
            meta.insert(key.into(), v.clone());
        }
    }
    meta.insert("namespace".into(), Value::String(ns.into()));
    let mut out = Map::new();
    for key in ["apiVersion", "kind", "spec"] {
        if let Some(v) = obj.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Ok(Value::Object(out))
}

/// Copies `n` VMIs of `from` and their launcher pods into `to` as (VMI, pod) pairs.
pub async fn copy_pairs(
    client: &kube::Client,
    vmi_res: &ApiResource,
    from: &str,
    to: &str,
    n: usize,
) -> Result<Vec<(DynamicObject, Pod)>> {
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), from, vmi_res);
    let pods: Api<Pod> = Api::namespaced(client.clone(), from);
    let mut pod_of: HashMap<String, Pod> = HashMap::new();
    for p in pods
        .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
        .await?
    {
        let uid = p
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(CREATED_BY))
            .cloned();
        if let Some(uid) = uid {
            pod_of.insert(uid, p);
        }
    }
    let mut pairs = Vec::with_capacity(n);
    for vmi in vmis.list(&ListParams::default()).await? {
        let Some(pod) = vmi.metadata.uid.as_ref().and_then(|u| pod_of.remove(u)) else {
            continue;
        };
        let vmi = serde_json::from_value(as_sent(&serde_json::to_value(&vmi)?, to)?)?;
        let pod = serde_json::from_value(as_sent(&serde_json::to_value(&pod)?, to)?)?;
        pairs.push((vmi, pod));
        if pairs.len() == n {
            break;
        }
    }
    if pairs.len() < n {
        bail!(
            "only {} of {n} VMIs in {from} have a launcher pod to copy",
            pairs.len()
        );
    }
    Ok(pairs)
}

/// Creates the pairs in their namespace, `concurrency` pairs in flight, each VMI before its pod.
pub async fn create(
    client: &kube::Client,
    vmi_res: &ApiResource,
    ns: &str,
    pairs: Vec<(DynamicObject, Pod)>,
    concurrency: usize,
) -> Result<RawPairs> {
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, vmi_res);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let count = pairs.len();
    let start = Instant::now();
    let results: Vec<Result<()>> = futures::stream::iter(pairs)
        .map(|(vmi, pod)| {
            let (vmis, pods) = (vmis.clone(), pods.clone());
            async move {
                vmis.create(&PostParams::default(), &vmi)
                    .await
                    .context("creating a VMI")?;
                pods.create(&PostParams::default(), &pod)
                    .await
                    .context("creating a launcher pod")?;
                Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let wall = start.elapsed();
    if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
        return Err(e);
    }
    Ok(RawPairs { pairs: count, wall })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_copy_keeps_what_a_client_sends_and_nothing_the_server_set() {
        let stored = json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm-1", "namespace": "a", "uid": "u", "resourceVersion": "9",
                "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1,
                "labels": {"x": "y"}, "finalizers": ["f"], "managedFields": [{}],
                "ownerReferences": [{"uid": "o"}]},
            "spec": {"domain": {}},
            "status": {"phase": "Scheduling"},
        });
        assert_eq!(
            as_sent(&stored, "b").unwrap(),
            json!({
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "vm-1", "labels": {"x": "y"}, "finalizers": ["f"],
                    "namespace": "b"},
                "spec": {"domain": {}},
            })
        );
    }
}
