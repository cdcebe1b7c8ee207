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

/// Beats every `period` until the task is dropped.
pub async fn run(client: kube::Client, node: String, period: Duration) {
    loop {
        match beat(&client, &node, true).await {
            Ok(()) => debug!(node, "heartbeat sent"),
            Err(e) => warn!(node, "heartbeat failed: {e}"),
        }
        tokio::time::sleep(period).await;
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
}
