//! The KubeVirt CR watch both daemons run: the CRs of the install namespace in a reflector, each
//! change handed to [`ConfigTracker`] (which CR counts, flags laid over it, the last good
//! configuration kept), and the result published in a [`LiveConfig`] the workers read.
//!
//! A sync takes one snapshot ([`LiveConfig::current`], an `Arc` clone under a read lock that is
//! never held across an await) and decides with it, so a configuration that changes mid-sync
//! never mixes into it. Nothing is re-queued on a change, as in KubeVirt: running VMIs keep
//! what they were started with, the next pod or `SyncVirtualMachine` gets the new configuration.
//!
//! A refused configuration is logged (error level, once per distinct error), counted through
//! [`Reporting::refused`], and, where [`Reporting::events`] is given (virt-controller: one
//! leader per cluster), recorded as a Warning event `InvalidConfiguration` on the CR. A CR
//! understood in part is applied in that part; the settings left out are reported the same way
//! once per CR and list: a warning line and, with [`Reporting::events`], a Warning event
//! `ConfigurationNotApplied`, each naming every path and why (not counted as a refusal: the
//! configuration was taken). The daemons
//! never write the CR: virt-operator owns its spec and status.

use std::sync::{Arc, RwLock};

use futures::StreamExt;
use kube::api::{Api as KubeResourceApi, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event as WatchEvent};
use kvrs_admission::kubevirt_cr::KubevirtCr;
use kvrs_admission::live_config::{ConfigChange, ConfigTracker, CrRef, Overrides};
use kvrs_decide::{Event, ObjectRef};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

use crate::kube::api::KubeApi;

/// The reason of the Warning event on a refused KubeVirt CR.
pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";

/// The reason of the Warning event on a KubeVirt CR applied in part (what was left out).
pub const CONFIGURATION_NOT_APPLIED: &str = "ConfigurationNotApplied";

/// The configuration in use, swapped whole when the KubeVirt CR changes.
#[derive(Debug)]
pub struct LiveConfig<T> {
    cell: Arc<RwLock<Arc<T>>>,
}

impl<T> Clone for LiveConfig<T> {
    fn clone(&self) -> Self {
        Self {
            cell: self.cell.clone(),
        }
    }
}

impl<T> LiveConfig<T> {
    /// A configuration that is `value` until [`set`](Self::set).
    pub fn new(value: T) -> Self {
        Self {
            cell: Arc::new(RwLock::new(Arc::new(value))),
        }
    }

    /// The configuration now: take it once per sync and decide with it.
    pub fn current(&self) -> Arc<T> {
        // A poisoned lock still holds a whole configuration (it is replaced in one store).
        self.cell.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replaces the configuration; syncs already running keep the one they took.
    pub fn set(&self, value: T) {
        *self.cell.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(value);
    }
}

/// How a refused configuration is reported besides its log line.
pub struct Reporting {
    /// Records the Warning event on the CR. virt-controller gives its API; virt-handler gives
    /// none (one mistake would otherwise be reported once per node).
    pub events: Option<Arc<KubeApi>>,
    /// Counts one refusal by its stable label (`wrong_type`, `invalid_value`, ...).
    pub refused: Box<dyn Fn(&'static str) + Send + Sync>,
}

/// Starts watching the KubeVirt CRs of `namespace` and returns the configuration, `derive`d
/// from the CR's with `overrides` laid over it, once the first list has been read (so the first
/// syncs already use the cluster's configuration), and the watch task. A cluster that does not
/// serve `kubevirts.kubevirt.io` runs on KubeVirt's default and the flags: no task.
pub async fn watch<T, F>(
    client: &kube::Client,
    namespace: &str,
    overrides: Overrides,
    derive: F,
    reporting: Reporting,
) -> (LiveConfig<T>, Option<JoinHandle<()>>)
where
    T: Send + Sync + 'static,
    F: Fn(&KubevirtCr) -> T + Send + Sync + 'static,
{
    let mut tracker = ConfigTracker::new(overrides);
    let live = LiveConfig::new(derive(&tracker.initial()));
    if !serves_kubevirts(client).await {
        info!(
            "no KubeVirt CRD (kubevirts.kubevirt.io) on this cluster: KubeVirt's default configuration and the flags"
        );
        return (live, None);
    }
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "kubevirts");
    let api = KubeResourceApi::<DynamicObject>::namespaced_with(client.clone(), namespace, &ar);
    let mut writer = reflector::store::Writer::new(ar);
    let reader = writer.as_reader();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let published = live.clone();
    let namespace = namespace.to_string();
    let task = tokio::spawn(async move {
        let mut ready = Some(ready_tx);
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    warn!(
                        namespace,
                        "KubeVirt CR watch error, relisting after backoff: {e}"
                    );
                    continue;
                }
            };
            writer.apply_watcher_event(&event);
            if matches!(event, WatchEvent::Init | WatchEvent::InitApply(_)) {
                continue; // the relist reaches the cache whole, at InitDone
            }
            let crs: Vec<Value> = reader
                .state()
                .iter()
                .filter_map(|cr| serde_json::to_value(cr.as_ref()).ok())
                .collect();
            match tracker.observe(&crs) {
                ConfigChange::Unchanged => {}
                ConfigChange::Updated {
                    cr,
                    config,
                    report_not_applied,
                } => {
                    let object = format!("{}/{}", cr.namespace, cr.name);
                    info!(
                        kubevirt = %object,
                        use_emulation = config.config.use_emulation,
                        feature_gates = ?config.config.feature_gates,
                        "Updating cluster config from KubeVirt to resource version '{}'",
                        cr.resource_version
                    );
                    if report_not_applied {
                        let message = not_applied_message(&config);
                        warn!(kubevirt = %object, reason = "not_applied", "{message}");
                        if let Some(api) = &reporting.events {
                            record(api.clone(), &cr, CONFIGURATION_NOT_APPLIED, message);
                        }
                    }
                    published.set(derive(&config));
                }
                ConfigChange::Refused {
                    cr,
                    error,
                    last_good,
                    report,
                } => {
                    let kept = last_good.map_or_else(
                        || "KubeVirt's default".to_string(),
                        |rv| format!("resource version '{rv}'"),
                    );
                    let message = format!(
                        "invalid configuration at resource version '{}', keeping the last good one ({kept}): {error}",
                        cr.resource_version
                    );
                    let object = format!("{}/{}", cr.namespace, cr.name);
                    if report {
                        error!(kubevirt = %object, reason = error.label(), "{message}");
                        (reporting.refused)(error.label());
                        if let Some(api) = &reporting.events {
                            record(api.clone(), &cr, INVALID_CONFIGURATION, message);
                        }
                    } else {
                        debug!(kubevirt = %object, reason = error.label(), "{message}");
                    }
                }
                ConfigChange::Ambiguous { names, report } if report => warn!(
                    namespace,
                    ?names,
                    "several KubeVirt CRs and none deployed by virt-operator: none counts, keeping the configuration in use"
                ),
                ConfigChange::Ambiguous { .. } => {}
            }
            if let Some(tx) = ready.take() {
                let _ = tx.send(());
            }
        }
    });
    // A watch that never lists (no permission) leaves the daemon waiting, as its other caches do.
    let _ = ready_rx.await;
    (live, Some(task))
}

/// The report of the settings a CR understood in part left out: each with its path and why.
fn not_applied_message(config: &KubevirtCr) -> String {
    let list: Vec<String> = config.not_applied.iter().map(ToString::to_string).collect();
    format!(
        "applied the configuration except {} setting(s) kvrs does not apply: {}",
        list.len(),
        list.join("; ")
    )
}

/// Records a Warning event in the background: the watch never waits on the API for it.
fn record(api: Arc<KubeApi>, cr: &CrRef, reason: &str, message: String) {
    let event = Event::warning(
        ObjectRef {
            kind: "KubeVirt".into(),
            namespace: cr.namespace.clone(),
            name: cr.name.clone(),
            uid: Some(cr.uid.clone()).filter(|u| !u.is_empty()),
        },
        reason,
        message,
    );
    tokio::spawn(async move { api.record_event(&event).await });
}

async fn serves_kubevirts(client: &kube::Client) -> bool {
    match kube::discovery::group(client, "kubevirt.io").await {
        Ok(g) => g
            .recommended_resources()
            .iter()
            .any(|(r, _)| r.plural == "kubevirts"),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_taken_before_a_swap_keeps_its_value() {
        let live = LiveConfig::new(1);
        let before = live.current();
        live.set(2);
        assert_eq!((*before, *live.current()), (1, 2));
        let shared = live.clone();
        shared.set(3);
        assert_eq!(*live.current(), 3);
    }
}
