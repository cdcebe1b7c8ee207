//! A controller's effects on a real API server: what [`execute`](crate::execute) sends a VM or
//! VMI controller plan through in the cluster daemons.
//!
//! [`ControllerApi`] is [`Api`] and [`Expecting`] in one: writes go to [`KubeApi`], each timed
//! (the reconcile reports how long it waited on the API server) and logged; the controller's
//! expectations are the store its workers share; events go to the controller's recorder, which
//! sends them in the background as client-go's does. The executor thus reaches the API server
//! through its own traits and this crate, not through the daemon's code.

use std::sync::Mutex;
use std::time::Duration;

use kvrs_decide::patch::unchanged_by;
use kvrs_decide::{ApiWrite, Event, Expectation, WriteOp};
use kvrs_executor::{Api, ApiError, ControllerExpectations, Expecting};
use kvrs_queue::Instant;
use tracing::debug;

use crate::kube::api::KubeApi;

/// Where a controller's events go: recorded without the reconcile waiting for them (client-go's
/// recorder queues an event and returns).
pub trait RecordEvent {
    /// Records `event`; never fails a reconcile.
    fn record(&self, event: &Event);
}

/// One controller's effects for one reconcile: the shared API client, that controller's
/// expectations and event recorder, and how long the reconcile's writes waited on the API
/// server ([`ControllerApi::waited`]).
pub struct ControllerApi<'a, E: ?Sized> {
    api: &'a KubeApi,
    events: &'a E,
    expectations: &'a Mutex<ControllerExpectations>,
    waited: Duration,
}

impl<'a, E: RecordEvent + ?Sized> ControllerApi<'a, E> {
    /// Writes through `api`, raises and lowers `expectations`, records events with `events`.
    pub fn new(
        api: &'a KubeApi,
        events: &'a E,
        expectations: &'a Mutex<ControllerExpectations>,
    ) -> Self {
        Self {
            api,
            events,
            expectations,
            waited: Duration::ZERO,
        }
    }

    /// How long the writes sent so far waited on the API server (writes sent together count
    /// once, for as long as the slowest took).
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

/// A poisoned lock still guards consistent expectations (they are updated in single calls).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `d` in whole microseconds, for the log (saturating; no duration here comes near the limit).
pub fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Sends one write, logs it when accepted (the burst benchmark reads each write's latency from
/// that line) and returns how long it took.
///
/// A conditional patch the server accepted without changing anything (it answers with the
/// version the patch tested) brings no watch event: an own update waiting to be observed is
/// lowered here, or the key would wait out the expectations' timeout (five minutes).
async fn timed_write(
    api: &KubeApi,
    expectations: &Mutex<ControllerExpectations>,
    write: &ApiWrite,
) -> (Result<(), ApiError>, Duration) {
    let start = std::time::Instant::now();
    let out = api.send(write).await;
    let took = start.elapsed();
    tracing::trace!(op = ?write.op, "the write");
    if let Ok(answered) = &out {
        debug!(
            verb = write.op.verb(),
            resource = %write.resource,
            sub = write.subresource.as_deref().unwrap_or(""),
            took_us = micros(took),
            "wrote"
        );
        if let (
            Some(e @ (Expectation::ObservedUpdate { .. } | Expectation::ObservedPodUpdate { .. })),
            WriteOp::Patch { patch, .. },
        ) = (&write.expectation, &write.op)
            && unchanged_by(patch, answered.as_deref())
        {
            debug!(
                object = %format!("{}/{}", write.namespace, write.name),
                "the patch changed nothing: no update to wait for"
            );
            lock(expectations).lower(e);
        }
    }
    (out.map(drop), took)
}

impl<E: RecordEvent + ?Sized> Api for ControllerApi<'_, E> {
    async fn write(&mut self, write: &ApiWrite) -> Result<(), ApiError> {
        let (out, took) = timed_write(self.api, self.expectations, write).await;
        self.waited += took;
        out
    }

    /// All at once: each write has a connection of the client's pool to itself.
    async fn write_together(&mut self, writes: &[&ApiWrite]) -> Vec<Result<(), ApiError>> {
        let start = std::time::Instant::now();
        let (api, expectations) = (self.api, self.expectations);
        let out =
            futures::future::join_all(writes.iter().map(|w| timed_write(api, expectations, w)))
                .await;
        self.waited += start.elapsed();
        out.into_iter().map(|(result, _)| result).collect()
    }

    async fn event(&mut self, event: &Event) {
        self.events.record(event);
    }
}

impl<E: ?Sized> Expecting for ControllerApi<'_, E> {
    fn raise(&mut self, e: &Expectation, now: Instant) {
        lock(self.expectations).raise(e, now);
    }
    fn lower(&mut self, e: &Expectation) {
        lock(self.expectations).lower(e);
    }
}
