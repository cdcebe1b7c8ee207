//! The node heartbeat: KubeVirt's `kubevirt.io/schedulable` label and `kubevirt.io/heartbeat`
//! annotation on this node, refreshed periodically; on a graceful stop the node is marked
//! unschedulable, so the scheduler stops sending VMIs to a node without a handler.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kvrs_api::names::{annotations, labels};
use serde_json::json;
use tracing::{debug, warn};

/// The patch KubeVirt's heartbeat sends (strategic merge): schedulable, the CPU-manager labels
/// (kvrs does not detect the CPU manager: `false`, as KubeVirt reports without it) and the time.
pub fn heartbeat_patch(schedulable: bool, now: &str) -> serde_json::Value {
    json!({
        "metadata": {
            "labels": {
                labels::SCHEDULABLE: schedulable.to_string(),
                "cpumanager": "false",
                "kubevirt.io/cpumanager": "false",
            },
            "annotations": { annotations::HEARTBEAT: now },
        }
    })
}

/// Sends one heartbeat.
pub async fn beat(client: &kube::Client, node: &str, schedulable: bool) -> Result<(), kube::Error> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let pp = PatchParams {
        field_manager: Some("virt-handler".into()),
        ..PatchParams::default()
    };
    nodes
        .patch(
            node,
            &pp,
            &Patch::Strategic(heartbeat_patch(schedulable, &crate::sync::now().rfc3339())),
        )
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
/// ([`next_beat_after`]).
pub async fn run(client: kube::Client, node: String, period: Duration) {
    let mut failures = 0u32;
    loop {
        match beat(&client, &node, true).await {
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
        let p = heartbeat_patch(false, "2026-12-01T00:00:00Z");
        assert_eq!(p["metadata"]["labels"]["kubevirt.io/schedulable"], "false");
        assert_eq!(
            p["metadata"]["annotations"]["kubevirt.io/heartbeat"],
            "2026-12-01T00:00:00Z"
        );
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
