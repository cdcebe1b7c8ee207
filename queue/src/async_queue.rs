//! The tokio shell: a shareable queue whose `get` waits, and a pool of workers.
//!
//! All decisions stay in [`WorkQueue`]; this module only owns the lock, the wake-ups and the
//! timers. Time comes from `tokio::time`, so tests run the whole pool on tokio's paused clock and
//! are deterministic.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::queue::{AddOutcome, DoneOutcome, ShutdownMode, WorkQueue};
use crate::rate_limit::{ControllerRateLimiter, RateLimiter};
use crate::time::Instant;

struct Shared<K, R> {
    queue: Mutex<WorkQueue<K, R>>,
    /// Something may be ready for a worker (or the queue shut down, or a timer moved earlier).
    work: Notify,
    /// The queue may have become idle (nothing ready, nothing in flight).
    idle: Notify,
    origin: tokio::time::Instant,
}

/// A [`WorkQueue`] shared between event handlers and workers. Cloning shares the same queue.
pub struct AsyncQueue<K, R = ControllerRateLimiter<K>> {
    shared: Arc<Shared<K, R>>,
}

impl<K, R> Clone for AsyncQueue<K, R> {
    fn clone(&self) -> Self {
        AsyncQueue {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: Eq + Hash + Clone + Send + 'static> Default for AsyncQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Eq + Hash + Clone + Send + 'static> AsyncQueue<K> {
    /// A queue with KubeVirt's default controller rate limiter. Its timeline starts now.
    pub fn new() -> Self {
        Self::from_queue(WorkQueue::new())
    }
}

/// A worker's handler panicked; the key it held was released, the worker is gone.
#[derive(Debug, thiserror::Error)]
#[error("{panicked} of the queue's worker tasks panicked")]
pub struct WorkersPanicked {
    /// How many workers ended by panicking.
    pub panicked: usize,
}

impl<K, R> AsyncQueue<K, R>
where
    K: Eq + Hash + Clone + Send + 'static,
    R: RateLimiter<K> + Send + 'static,
{
    /// Wraps a configured core queue (custom rate limiter, metrics). The queue's timeline starts
    /// now: instants it reports are offsets from this moment.
    pub fn from_queue(queue: WorkQueue<K, R>) -> Self {
        AsyncQueue {
            shared: Arc::new(Shared {
                queue: Mutex::new(queue),
                work: Notify::new(),
                idle: Notify::new(),
                origin: tokio::time::Instant::now(),
            }),
        }
    }

    /// The current instant on this queue's timeline.
    pub fn now(&self) -> Instant {
        Instant::from_offset(
            tokio::time::Instant::now().saturating_duration_since(self.shared.origin),
        )
    }

    fn lock(&self) -> MutexGuard<'_, WorkQueue<K, R>> {
        // The core never panics mid-update, so a poisoned lock still guards a consistent queue.
        self.shared.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on the core queue at the current instant (for inspection or rare operations).
    pub fn with<T>(&self, f: impl FnOnce(&mut WorkQueue<K, R>, Instant) -> T) -> T {
        let now = self.now();
        f(&mut self.lock(), now)
    }

    fn deadline(&self, at: Instant) -> tokio::time::Instant {
        let far = Duration::from_secs(60 * 60 * 24 * 365 * 30);
        self.shared
            .origin
            .checked_add(at.offset())
            .unwrap_or_else(|| tokio::time::Instant::now() + far)
    }

    fn wake_for(&self, outcome: AddOutcome) -> AddOutcome {
        match outcome {
            // A worker may be asleep until a later timer: let one re-read the next wake-up.
            AddOutcome::Queued | AddOutcome::Scheduled { .. } => self.shared.work.notify_one(),
            AddOutcome::AlreadyQueued | AddOutcome::AfterDone | AddOutcome::Rejected => {}
        }
        outcome
    }

    /// See [`WorkQueue::add`].
    pub fn add(&self, key: K) -> AddOutcome {
        let out = self.with(|q, now| q.add(key, now));
        self.wake_for(out)
    }

    /// See [`WorkQueue::add_after`].
    pub fn add_after(&self, key: K, delay: Duration) -> AddOutcome {
        let out = self.with(|q, now| q.add_after(key, delay, now));
        self.wake_for(out)
    }

    /// See [`WorkQueue::add_rate_limited`].
    pub fn add_rate_limited(&self, key: K) -> AddOutcome {
        let out = self.with(|q, now| q.add_rate_limited(key, now));
        self.wake_for(out)
    }

    /// See [`WorkQueue::forget`].
    pub fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    /// See [`WorkQueue::num_requeues`].
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().num_requeues(key)
    }

    /// Keys ready to be handed out.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// No key ready to be handed out.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Waits for a key; `None` once the queue is shut down and nothing is left to hand out.
    /// The caller must call [`AsyncQueue::done`] with the key.
    pub async fn get(&self) -> Option<K> {
        loop {
            let mut notified = pin!(self.shared.work.notified());
            // Register before looking, so an add between the look and the wait is not missed.
            notified.as_mut().enable();
            let (key, more, finished, wake) = self.with(|q, now| {
                let key = q.get(now);
                (key, !q.is_empty(), q.is_finished(), q.next_wakeup())
            });
            if let Some(key) = key {
                if more {
                    // Pass the baton: a timer may have released several keys at once.
                    self.shared.work.notify_one();
                }
                return Some(key);
            }
            if finished {
                return None;
            }
            match wake {
                Some(at) => {
                    let _ = tokio::time::timeout_at(self.deadline(at), notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// See [`WorkQueue::done`]. Wakes a worker if the key was queued again.
    pub fn done(&self, key: &K) -> DoneOutcome {
        let (out, idle) = self.with(|q, now| (q.done(key, now), q.is_idle()));
        if out == DoneOutcome::Requeued {
            self.shared.work.notify_one();
        }
        if idle {
            self.shared.idle.notify_waiters();
        }
        out
    }

    /// Stops taking work and wakes every waiting worker; see [`ShutdownMode`].
    pub fn shutdown(&self, mode: ShutdownMode) {
        let idle = self.with(|q, _| {
            q.shutdown(mode);
            q.is_idle()
        });
        self.shared.work.notify_waiters();
        if idle {
            self.shared.idle.notify_waiters();
        }
    }

    /// Whether the queue was shut down.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().is_shutting_down()
    }

    /// Waits until nothing is ready and nothing is in flight (delayed keys may remain).
    pub async fn wait_idle(&self) {
        loop {
            let mut notified = pin!(self.shared.idle.notified());
            notified.as_mut().enable();
            if self.lock().is_idle() {
                return;
            }
            notified.await;
        }
    }

    /// Shuts down and waits until the work `mode` keeps has been finished by the workers.
    pub async fn shutdown_and_drain(&self, mode: ShutdownMode) {
        self.shutdown(mode);
        self.wait_idle().await;
    }

    /// Reports unfinished work to the metrics sink every `period` until the queue is drained.
    pub fn spawn_unfinished_work_reporter(&self, period: Duration) -> JoinHandle<()>
    where
        R: Sync,
        K: Sync,
    {
        let queue = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(period);
            loop {
                tick.tick().await;
                let drained = queue.with(|q, now| {
                    q.report_unfinished_work(now);
                    q.is_drained()
                });
                if drained {
                    return;
                }
            }
        })
    }

    /// Starts `workers` tasks that take keys and run `handler` on them, KubeVirt's
    /// `Execute` loop: `Ok` forgets the key's retry history, `Err` re-adds it rate-limited; the
    /// key is released (`done`) either way, even if the handler panics.
    pub fn run_workers<F, Fut, E>(&self, workers: usize, handler: F) -> WorkerPool<K, R>
    where
        K: Debug + Sync,
        R: Sync,
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display,
    {
        let handler = Arc::new(handler);
        let tasks = (0..workers)
            .map(|_| {
                let queue = self.clone();
                let handler = Arc::clone(&handler);
                tokio::spawn(async move {
                    while let Some(key) = queue.get().await {
                        let release = Release {
                            queue: &queue,
                            key: &key,
                        };
                        // Logs of one sync carry its key, like KubeVirt's log.Object(vmi).
                        let span = tracing::debug_span!("sync", ?key);
                        match handler(key.clone()).instrument(span).await {
                            Ok(()) => queue.forget(&key),
                            Err(error) => {
                                tracing::warn!(?key, %error, "sync failed, retrying with backoff");
                                queue.add_rate_limited(key.clone());
                            }
                        }
                        drop(release);
                    }
                })
            })
            .collect();
        WorkerPool {
            queue: self.clone(),
            tasks,
        }
    }
}

/// Calls `done` when dropped, so a panicking handler cannot leave its key in flight forever
/// (which would block the key and the graceful drain).
struct Release<'a, K, R>
where
    K: Eq + Hash + Clone + Send + 'static,
    R: RateLimiter<K> + Send + 'static,
{
    queue: &'a AsyncQueue<K, R>,
    key: &'a K,
}

impl<K, R> Drop for Release<'_, K, R>
where
    K: Eq + Hash + Clone + Send + 'static,
    R: RateLimiter<K> + Send + 'static,
{
    fn drop(&mut self) {
        self.queue.done(self.key);
    }
}

/// Running workers of an [`AsyncQueue`].
pub struct WorkerPool<K, R = ControllerRateLimiter<K>> {
    queue: AsyncQueue<K, R>,
    tasks: Vec<JoinHandle<()>>,
}

impl<K, R> WorkerPool<K, R>
where
    K: Eq + Hash + Clone + Send + 'static,
    R: RateLimiter<K> + Send + 'static,
{
    /// Number of worker tasks started.
    pub fn workers(&self) -> usize {
        self.tasks.len()
    }

    /// The queue the workers serve.
    pub fn queue(&self) -> &AsyncQueue<K, R> {
        &self.queue
    }

    /// Graceful shutdown: stops taking work, lets the workers finish what `mode` keeps, and
    /// returns when every worker has exited.
    pub async fn shutdown(self, mode: ShutdownMode) -> Result<(), WorkersPanicked> {
        self.queue.shutdown(mode);
        let mut panicked = 0;
        for task in self.tasks {
            if task.await.is_err() {
                panicked += 1;
            }
        }
        if panicked > 0 {
            return Err(WorkersPanicked { panicked });
        }
        Ok(())
    }
}
