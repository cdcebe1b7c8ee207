//! Events recorded as client-go's recorder records them for KubeVirt: handed to a background
//! sender, never waited for by the reconcile that emits them.
//!
//! KubeVirt's controllers call `recorder.Eventf`, which puts the event on the broadcaster's
//! queue (1000 deep; beyond that events are dropped) and returns; the broadcaster's goroutine
//! sends it. A reconcile that awaited each event's POST would hold its worker for one more API
//! round trip per event — with KubeVirt's three VM workers that round trip is a third of a VM
//! start's worker time on a busy API server. Here each event is sent from a task of its own,
//! at most [`IN_FLIGHT`] at a time, and at most [`QUEUED`] waiting; beyond that an event is
//! dropped with a warning, as client-go drops it.

use std::sync::Arc;

use kvrs_decide::Event;
use kvrs_runtime::kube::api::KubeApi;
use tokio::sync::Semaphore;
use tracing::warn;

/// Events sent at the same time (each holds a connection of the client's pool while it runs).
pub const IN_FLIGHT: usize = 8;
/// Events waiting to be sent, as client-go's broadcaster queue (`maxQueuedEvents`).
pub const QUEUED: usize = 1000;

/// The background event sender; cheap to share.
pub struct BackgroundEvents {
    api: Arc<KubeApi>,
    queued: Arc<Semaphore>,
    in_flight: Arc<Semaphore>,
}

impl BackgroundEvents {
    /// Sends through `api`.
    pub fn new(api: Arc<KubeApi>) -> Self {
        Self {
            api,
            queued: Arc::new(Semaphore::new(QUEUED)),
            in_flight: Arc::new(Semaphore::new(IN_FLIGHT)),
        }
    }

    /// Queues `event` and returns at once; must be called within the tokio runtime.
    pub fn record(&self, event: &Event) {
        let Ok(queued) = self.queued.clone().try_acquire_owned() else {
            warn!(
                object = %format!("{}/{}", event.object.namespace, event.object.name),
                reason = %event.reason,
                "event dropped: {QUEUED} events already wait to be sent"
            );
            return;
        };
        let api = self.api.clone();
        let in_flight = self.in_flight.clone();
        let event = event.clone();
        tokio::spawn(async move {
            let _queued = queued;
            // Closed never: the semaphore lives as long as this sender's clones.
            let Ok(_sending) = in_flight.acquire_owned().await else {
                return;
            };
            api.record_event(&event).await;
        });
    }
}
