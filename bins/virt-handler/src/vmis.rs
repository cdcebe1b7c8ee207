//! The node's VMI caches: a watch with the label selector `kubevirt.io/nodeName=<node>`, so this
//! handler only ever holds its own node's VMIs, and one with
//! `kubevirt.io/migrationTargetNodeName=<node>` (KubeVirt's migration target controller's
//! informer: a VMI migrating here is seen before its node name moves). Every event queues the VMI's key *after* the
//! cache applied it (a worker woken by the key must read the new version); a relist queues every
//! key it holds, and the domains' keys, so a VMI deleted while the watch was down is noticed.

use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kvrs_api::VirtualMachineInstance;
use kvrs_queue::AsyncQueue;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::domains::DomainCache;

fn key_of(vmi: &VirtualMachineInstance) -> String {
    format!(
        "{}/{}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The label selector of this node's VMIs.
pub fn node_selector(node: &str) -> String {
    format!("{}={node}", kvrs_api::names::labels::NODE_NAME)
}

/// The label selector of the VMIs migrating to this node.
pub fn target_selector(node: &str) -> String {
    format!(
        "{}={node}",
        kvrs_decide::handler::migration::MIGRATION_TARGET_NODE_LABEL
    )
}

/// Starts the watch of the VMIs `selector` selects; returns the cache and the task (which runs
/// until the process stops: watch errors back off and relist).
pub fn start(
    client: &kube::Client,
    selector: &str,
    queue: AsyncQueue<String>,
    domains: Arc<DomainCache>,
) -> (Store<VirtualMachineInstance>, JoinHandle<()>) {
    let api = kube::Api::<VirtualMachineInstance>::all(client.clone());
    let config = watcher::Config::default().labels(selector);
    let (reader, mut writer) = reflector::store();
    let view = reader.clone();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher::watcher(api, config).default_backoff());
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    writer.apply_watcher_event(&event);
                    match &event {
                        Event::Apply(vmi) | Event::Delete(vmi) => {
                            queue.add(key_of(vmi));
                        }
                        Event::InitDone => {
                            for vmi in view.state() {
                                queue.add(key_of(&vmi));
                            }
                            for key in domains.keys() {
                                queue.add(key);
                            }
                        }
                        Event::Init | Event::InitApply(_) => {}
                    }
                }
                Err(e) => warn!("VMI watch error, relisting after backoff: {e}"),
            }
        }
    });
    (reader, task)
}
