//! The work queue as a pure state machine.
//!
//! Every key is in at most one of these states, which is what makes the client-go guarantees
//! hold by construction:
//!
//! | state                  | in `ready` | what `add` does                       |
//! |------------------------|------------|---------------------------------------|
//! | absent                 | no         | queue it                              |
//! | queued                 | once       | nothing (dedup)                       |
//! | processing             | no         | mark it to run again after `done`     |
//! | processing, re-added   | no         | nothing (already marked)              |
//!
//! Independently, a key may also sit in the delayed set (`add_after`, `add_rate_limited`) until
//! its due time, when it is `add`ed like any other key. Nothing here reads a clock or blocks:
//! callers pass `now`, ask [`WorkQueue::next_wakeup`] when to come back, and the async shell in
//! [`crate::AsyncQueue`] does the waiting.

use foldhash::{HashMap, HashMapExt};
use std::collections::VecDeque;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::delayed::DelayedKeys;
use crate::metrics::{NoMetrics, QueueMetrics};
use crate::rate_limit::{ControllerRateLimiter, RateLimiter, controller_rate_limiter};
use crate::time::Instant;

#[derive(Debug, Clone, Copy)]
enum KeyState {
    /// In `ready`, waiting for a worker since `since`.
    Queued { since: Instant },
    /// Held by a worker since `started`; `readded` is when it was added again meanwhile.
    Processing {
        started: Instant,
        readded: Option<Instant>,
    },
}

/// What an add did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddOutcome {
    /// The key is now queued for a worker.
    Queued,
    /// The key was already waiting for a worker; nothing changed.
    AlreadyQueued,
    /// A worker holds the key: it will be queued again when that worker calls `done`.
    AfterDone,
    /// The key will be added at `due` (the earlier of this request and any pending one).
    Scheduled {
        /// When the key will be added.
        due: Instant,
    },
    /// The queue is shutting down and takes no new work.
    Rejected,
}

/// What `done` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneOutcome {
    /// The key was released.
    Finished,
    /// The key was released and queued again because it was added while being processed.
    Requeued,
    /// The key was not being processed; nothing changed (a caller bug, reported instead of
    /// corrupting the queue).
    NotProcessing,
}

/// Which work a shutdown still lets workers finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownMode {
    /// client-go's behaviour: in-flight keys finish, keys already queued are still handed out,
    /// delayed keys are dropped, new adds are rejected.
    DrainQueued,
    /// Only in-flight keys finish; queued and delayed keys are dropped.
    InFlightOnly,
}

/// A deduplicating, rate-limited queue of keys, driven by an injected clock.
///
/// `K` is the key type (KubeVirt: `namespace/name` strings); `R` decides retry delays and
/// defaults to KubeVirt's controller rate limiter.
pub struct WorkQueue<K, R = ControllerRateLimiter<K>> {
    states: HashMap<K, KeyState>,
    ready: VecDeque<K>,
    delayed: DelayedKeys<K>,
    limiter: R,
    metrics: Arc<dyn QueueMetrics>,
    processing: usize,
    readded_while_processing: usize,
    shutting_down: bool,
}

impl<K: Eq + Hash + Clone> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone> WorkQueue<K> {
    /// An empty queue with KubeVirt's default controller rate limiter.
    pub fn new() -> Self {
        Self::with_rate_limiter(controller_rate_limiter())
    }
}

impl<K: Eq + Hash + Clone, R: RateLimiter<K>> WorkQueue<K, R> {
    /// An empty queue using `limiter` for [`WorkQueue::add_rate_limited`].
    pub fn with_rate_limiter(limiter: R) -> Self {
        WorkQueue {
            states: HashMap::new(),
            ready: VecDeque::new(),
            delayed: DelayedKeys::new(),
            limiter,
            metrics: Arc::new(NoMetrics),
            processing: 0,
            readded_while_processing: 0,
            shutting_down: false,
        }
    }

    /// Sends this queue's measurements to `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<dyn QueueMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Marks `key` as needing processing. A key already waiting is not queued twice; a key being
    /// processed is queued again once its worker calls [`WorkQueue::done`].
    pub fn add(&mut self, key: K, now: Instant) -> AddOutcome {
        if self.shutting_down {
            return AddOutcome::Rejected;
        }
        let outcome = match self.states.get_mut(&key) {
            Some(KeyState::Queued { .. }) => return AddOutcome::AlreadyQueued,
            Some(KeyState::Processing {
                readded: Some(_), ..
            }) => return AddOutcome::AfterDone,
            Some(KeyState::Processing { readded, .. }) => {
                *readded = Some(now);
                self.readded_while_processing += 1;
                AddOutcome::AfterDone
            }
            None => {
                self.states
                    .insert(key.clone(), KeyState::Queued { since: now });
                self.ready.push_back(key);
                AddOutcome::Queued
            }
        };
        self.metrics.add();
        self.report_depth();
        outcome
    }

    /// Adds `key` once `delay` has passed. A zero delay adds at once. A key already scheduled
    /// keeps the earlier due time.
    pub fn add_after(&mut self, key: K, delay: Duration, now: Instant) -> AddOutcome {
        if self.shutting_down {
            return AddOutcome::Rejected;
        }
        self.metrics.retry();
        if delay.is_zero() {
            return self.add(key, now);
        }
        self.delayed.schedule(key.clone(), now + delay);
        let due = self.delayed.due_of(&key).unwrap_or(now + delay);
        AddOutcome::Scheduled { due }
    }

    /// Adds `key` after the delay the rate limiter grants it: the retry path after a failure.
    pub fn add_rate_limited(&mut self, key: K, now: Instant) -> AddOutcome {
        if self.shutting_down {
            return AddOutcome::Rejected;
        }
        let delay = self.limiter.when(&key, now);
        self.add_after(key, delay, now)
    }

    /// Clears `key`'s retry history (call after a successful sync). Does not unqueue it.
    pub fn forget(&mut self, key: &K) {
        self.limiter.forget(key);
    }

    /// How many rate-limited retries `key` had since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// Moves every delayed key due at or before `now` into the queue; returns how many moved.
    /// [`WorkQueue::get`] does this itself; call it directly to drive timers without taking work.
    pub fn handle_timeout(&mut self, now: Instant) -> usize {
        let mut moved = 0;
        while let Some(key) = self.delayed.pop_due(now) {
            self.add(key, now);
            moved += 1;
        }
        moved
    }

    /// Hands the oldest queued key to a worker, which must call [`WorkQueue::done`] with it.
    /// `None` means nothing is ready at `now`: wait for an add or for [`WorkQueue::next_wakeup`],
    /// or stop if [`WorkQueue::is_finished`].
    pub fn get(&mut self, now: Instant) -> Option<K> {
        self.handle_timeout(now);
        let key = self.ready.pop_front()?;
        if let Some(state) = self.states.get_mut(&key) {
            if let KeyState::Queued { since } = *state {
                self.metrics.queue_latency(now - since);
            }
            *state = KeyState::Processing {
                started: now,
                readded: None,
            };
        }
        self.processing += 1;
        self.report_depth();
        Some(key)
    }

    /// Releases `key` after processing. If it was added meanwhile it is queued again.
    pub fn done(&mut self, key: &K, now: Instant) -> DoneOutcome {
        let Some(&KeyState::Processing { started, readded }) = self.states.get(key) else {
            return DoneOutcome::NotProcessing;
        };
        self.processing -= 1;
        self.metrics.work_duration(now - started);
        match readded {
            Some(since) => {
                self.readded_while_processing -= 1;
                self.states.insert(key.clone(), KeyState::Queued { since });
                self.ready.push_back(key.clone());
                self.report_depth();
                DoneOutcome::Requeued
            }
            None => {
                self.states.remove(key);
                DoneOutcome::Finished
            }
        }
    }

    /// When the earliest delayed key becomes due, if any: the moment to call
    /// [`WorkQueue::get`] or [`WorkQueue::handle_timeout`] again when nothing else happens.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.delayed.next_due()
    }

    /// Stops taking work (client-go's `ShutDown`); see [`ShutdownMode`] for what still runs.
    /// Workers keep calling `get`/`done` until [`WorkQueue::is_finished`].
    pub fn shutdown(&mut self, mode: ShutdownMode) {
        self.shutting_down = true;
        self.delayed.clear();
        if mode == ShutdownMode::InFlightOnly {
            for key in self.ready.drain(..) {
                self.states.remove(&key);
            }
            for state in self.states.values_mut() {
                if let KeyState::Processing { readded, .. } = state {
                    *readded = None;
                }
            }
            self.readded_while_processing = 0;
        }
        self.report_depth();
    }

    /// Whether [`WorkQueue::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// Shut down and nothing ready: a worker asking for work may stop. (A key still in flight
    /// may be queued again by its own worker's `done`; that worker picks it up.)
    pub fn is_finished(&self) -> bool {
        self.shutting_down && self.ready.is_empty()
    }

    /// Shut down, nothing ready and nothing in flight: the graceful drain is complete.
    pub fn is_drained(&self) -> bool {
        self.is_finished() && self.processing == 0
    }

    /// Nothing ready and nothing in flight (delayed keys may still be pending).
    pub fn is_idle(&self) -> bool {
        self.ready.is_empty() && self.processing == 0
    }

    /// Keys ready to be handed out.
    pub fn len(&self) -> usize {
        self.ready.len()
    }

    /// No key ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.ready.is_empty()
    }

    /// Keys held by workers.
    pub fn processing_len(&self) -> usize {
        self.processing
    }

    /// Keys scheduled for a later add.
    pub fn delayed_len(&self) -> usize {
        self.delayed.len()
    }

    /// When `key` is scheduled to be added, if it is.
    pub fn due_of(&self, key: &K) -> Option<Instant> {
        self.delayed.due_of(key)
    }

    /// Whether `key` waits for a worker.
    pub fn is_queued(&self, key: &K) -> bool {
        matches!(self.states.get(key), Some(KeyState::Queued { .. }))
    }

    /// Whether a worker holds `key`.
    pub fn is_processing(&self, key: &K) -> bool {
        matches!(self.states.get(key), Some(KeyState::Processing { .. }))
    }

    /// How long the oldest in-flight key has been processed, if any is.
    pub fn longest_running(&self, now: Instant) -> Option<Duration> {
        self.in_flight_starts().map(|s| now - s).max()
    }

    /// Pushes unfinished-work gauges to the metrics sink; call periodically (client-go: every
    /// 500 ms) so a stuck worker shows up before it finishes.
    pub fn report_unfinished_work(&self, now: Instant) {
        let (total, longest) = self
            .in_flight_starts()
            .map(|s| now - s)
            .fold((Duration::ZERO, Duration::ZERO), |(t, l), d| {
                (t.saturating_add(d), l.max(d))
            });
        self.metrics.unfinished_work(total, longest);
    }

    /// The rate limiter, for inspection.
    pub fn rate_limiter(&self) -> &R {
        &self.limiter
    }

    fn in_flight_starts(&self) -> impl Iterator<Item = Instant> + '_ {
        self.states.values().filter_map(|s| match s {
            KeyState::Processing { started, .. } => Some(*started),
            KeyState::Queued { .. } => None,
        })
    }

    fn report_depth(&self) {
        self.metrics
            .depth(self.ready.len() + self.readded_while_processing);
    }
}

impl<K, R> std::fmt::Debug for WorkQueue<K, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("ready", &self.ready.len())
            .field("processing", &self.processing)
            .field("delayed", &self.delayed.len())
            .field("shutting_down", &self.shutting_down)
            .finish()
    }
}
