//! The node heartbeat: KubeVirt's `kubevirt.io/schedulable` label and `kubevirt.io/heartbeat`
//! annotation on this node, refreshed periodically; on a graceful stop the node is marked
//! unschedulable, so the scheduler stops sending VMIs to a node without a handler. The node
//! labeller's labels ([`crate::node_labeller`]) ride on the same patch.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kvrs_api::names::{annotations, labels};
use serde_json::{Map, Value, json};
use tracing::{debug, warn};

use crate::node_labeller;

/// The patch KubeVirt's heartbeat sends (strategic merge): schedulable, the CPU-manager labels
/// (kvrs does not detect the CPU manager: `false`, as KubeVirt reports without it) and the time;
/// plus `extra_labels` (the node labeller's: a `null` value removes that label).
pub fn heartbeat_patch(schedulable: bool, now: &str, extra_labels: Map<String, Value>) -> Value {
    let mut labels = extra_labels;
    labels.insert(labels::SCHEDULABLE.into(), schedulable.to_string().into());
    labels.insert("cpumanager".into(), "false".into());
    labels.insert("kubevirt.io/cpumanager".into(), "false".into());
    json!({
        "metadata": {
            "labels": labels,
            "annotations": { annotations::HEARTBEAT: now },
        }
    })
}

/// Sends one heartbeat; with `labeller_labels`, the node labeller's labels are set to them in the
/// same patch (the node is read first to remove stale ones; if that read fails, they are only
/// added this time).
pub async fn beat(
    client: &kube::Client,
    node: &str,
    schedulable: bool,
    labeller_labels: Option<&BTreeMap<String, String>>,
) -> Result<(), kube::Error> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let machine_labels = match labeller_labels {
        None => Map::new(),
        Some(wanted) => {
            let current = match nodes.get(node).await {
                Ok(n) => n.metadata.labels.unwrap_or_default(),
                Err(e) => {
                    warn!(
                        node,
                        "reading the node's labels, stale labeller labels kept: {e}"
                    );
                    BTreeMap::new()
                }
            };
            node_labeller::label_changes(&current, wanted)
        }
    };
    let pp = PatchParams {
        field_manager: Some("virt-handler".into()),
        ..PatchParams::default()
    };
    let patch = heartbeat_patch(schedulable, &crate::sync::now().rfc3339(), machine_labels);
    nodes
        .patch(node, &pp, &Patch::Strategic(patch))
        .await
        .map(drop)
}

/// How long to wait before the next beat: the full `period` after a beat the API server took;
/// after `failures` beats in a row it refused, 1 s doubling up to `period`. A handler can start
/// before its Node object exists (the kubelet registers it); waiting a whole period (KubeVirt's
/// 60 s) after that first refusal left the node unschedulable for a minute for no reason.
pub fn next_beat_after(period: Duration, failures: u32) -> Duration {
    if failures == 0 {
        return period;
    }
    let backoff = Duration::from_secs(1u64 << (failures - 1).min(16));
    backoff.min(period)
}

/// Beats every `period` until the task is dropped; a refused beat is retried sooner
/// ([`next_beat_after`]). `labeller_labels`: the node labeller's labels, if it has any.
pub async fn run(
    client: kube::Client,
    node: String,
    period: Duration,
    labeller_labels: Option<BTreeMap<String, String>>,
) {
    let mut failures = 0u32;
    loop {
        match beat(&client, &node, true, labeller_labels.as_ref()).await {
            Ok(()) => {
                debug!(node, "heartbeat sent");
                failures = 0;
            }
            Err(e) => {
                failures = failures.saturating_add(1);
                warn!(node, failures, "heartbeat failed: {e}");
            }
        }
        tokio::time::sleep(next_beat_after(period, failures)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_carries_kubevirts_label_and_annotation() {
        let p = heartbeat_patch(false, "2026-12-01T00:00:00Z", Map::new());
        assert_eq!(p["metadata"]["labels"]["kubevirt.io/schedulable"], "false");
        assert_eq!(
            p["metadata"]["annotations"]["kubevirt.io/heartbeat"],
            "2026-12-01T00:00:00Z"
        );
        assert_eq!(p["metadata"]["labels"].as_object().unwrap().len(), 3);
    }

    #[test]
    fn the_node_labellers_labels_ride_on_the_same_patch() {
        let mut extra = Map::new();
        extra.insert("machine-type.node.kubevirt.io/q35".into(), "true".into());
        extra.insert(
            "machine-type.node.kubevirt.io/pc-q35-9.2".into(),
            Value::Null,
        );
        let p = heartbeat_patch(true, "2026-12-01T00:00:00Z", extra);
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels["kubevirt.io/schedulable"], "true");
        assert_eq!(labels["machine-type.node.kubevirt.io/q35"], "true");
        assert!(labels["machine-type.node.kubevirt.io/pc-q35-9.2"].is_null());
        assert_eq!(labels.as_object().unwrap().len(), 5);
    }

    #[test]
    fn a_refused_beat_is_retried_within_seconds_not_a_period() {
        let period = Duration::from_secs(60);
        assert_eq!(next_beat_after(period, 0), period);
        assert_eq!(next_beat_after(period, 1), Duration::from_secs(1));
        assert_eq!(next_beat_after(period, 2), Duration::from_secs(2));
        assert_eq!(next_beat_after(period, 6), Duration::from_secs(32));
        assert_eq!(next_beat_after(period, 7), period);
        assert_eq!(next_beat_after(period, u32::MAX), period);
        assert_eq!(
            next_beat_after(Duration::from_secs(1), 3),
            Duration::from_secs(1)
        );
    }
}
