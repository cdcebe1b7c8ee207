//! kvrs-queue: the keyed work queue, retry backoff and expectations of kvrs controllers.
//!
//! KubeVirt's controllers put only `namespace/name` keys in a queue. A worker takes a key, reads
//! the newest object from its cache and recomputes the whole decision, so a key queued ten times
//! is processed once. A failed sync re-adds the key with a growing delay (`add_rate_limited`), a
//! successful one clears that history (`forget`), and [`Expectations`] stop a controller from
//! acting twice while its cache lags behind its own writes.
//!
//! # Why a queue of our own, not kube-runtime's `Controller` scheduler
//!
//! kube-runtime's scheduler deduplicates keys and delays them, but it is shaped around its own
//! reconciler loop and lacks what KubeVirt's behaviour depends on:
//! - client-go's in-flight semantics: a key is never handed to two workers at once, and a key
//!   added while being processed is processed again after `done` (kube-runtime holds such a
//!   key back too, but only inside its `Controller` stream, not as a queue we can drive);
//! - per-key exponential failure backoff that a success resets (`forget`), combined with an
//!   overall token bucket taking the larger delay — client-go's default controller rate limiter;
//!   kube-runtime leaves retry policy to an `error_policy` callback with no per-key history;
//! - expectations, which kube-runtime does not have at all;
//! - a pure core: its scheduler reads tokio's clock and is a `Stream`, while kvrs wants the
//!   queue to be a clock-injected state machine that simulators step like quinn-proto;
//! - and it pulls in kube-client (HTTP, TLS) where this crate needs nothing but the standard
//!   library and, for the async shell, a little of tokio.
//!
//! The whole crate is about 1 600 lines with its unit tests, which is cheaper to own than to adapt.
//!
//! # Layout
//! - [`WorkQueue`]: the queue as a sans-IO state machine; every call takes `now` ([`Instant`]).
//! - [`rate_limit`]: [`ItemExponentialFailure`], [`TokenBucket`], [`MaxOf`] and KubeVirt's
//!   [`controller_rate_limiter`].
//! - [`Expectations`]: per controller key creations/deletions awaited, expiring after 5 minutes.
//! - [`QueueMetrics`]: hooks for depth, adds, retries, latency, work duration and the longest
//!   running processor.
//! - [`AsyncQueue`] and [`WorkerPool`] (feature `tokio`, on by default): waiting `get`,
//!   N workers (KubeVirt: 10 for the VMI controller, 3 for most others) and graceful shutdown
//!   that drains in-flight work.
//!
//! # Example
//!
//! A key queued twice is handed out once; a failed sync puts it back after its backoff, and the
//! queue says when to look again:
//!
//! ```
//! use std::time::Duration;
//! use kvrs_queue::{Instant, WorkQueue};
//!
//! let mut q = WorkQueue::<String>::new();
//! let t0 = Instant::ZERO;
//! q.add("ns/vmi".into(), t0);
//! q.add("ns/vmi".into(), t0); // deduplicated
//! let key = q.get(t0).unwrap();
//! assert_eq!(q.get(t0), None);
//! // The sync failed: retry after the backoff (5 ms for a first failure).
//! q.add_rate_limited(key.clone(), t0);
//! q.done(&key, t0);
//! assert_eq!(q.next_wakeup(), Some(t0 + Duration::from_millis(5)));
//! assert_eq!(q.get(t0 + Duration::from_millis(5)), Some(key));
//! ```

#![warn(unreachable_pub)]

#[cfg(feature = "tokio")]
mod async_queue;
mod delayed;
pub mod expectations;
pub mod metrics;
mod queue;
pub mod rate_limit;
mod time;

#[cfg(feature = "tokio")]
pub use async_queue::{AsyncQueue, WorkerPool, WorkersPanicked};
pub use expectations::{EXPECTATIONS_TIMEOUT, Expectations, Pending};
pub use metrics::{CountingMetrics, MetricsSnapshot, NoMetrics, QueueMetrics};
pub use queue::{AddOutcome, DoneOutcome, ShutdownMode, WorkQueue};
pub use rate_limit::{
    ControllerRateLimiter, ItemExponentialFailure, MaxOf, RateLimitError, RateLimiter, TokenBucket,
    controller_rate_limiter,
};
pub use time::Instant;
