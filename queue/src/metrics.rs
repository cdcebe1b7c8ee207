//! Metrics hooks.
//!
//! client-go's work queues export depth, adds, retries, queue latency, work duration, unfinished
//! work and the longest running processor; KubeVirt's dashboards and alerts read them. This crate
//! does not depend on a Prometheus client: a binary implements [`QueueMetrics`] with whatever
//! exporter it uses (one implementation per queue name, as client-go labels them by name) and
//! hands it to the queue. Every hook has an empty default body, so an implementation overrides only
//! what it exports.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Receives the queue's measurements. Called with the queue's state already updated, from
/// whichever thread drives the queue, so implementations must be cheap and thread-safe.
pub trait QueueMetrics: Send + Sync {
    /// The number of keys waiting to be processed changed (a gauge). Counts keys ready to be
    /// handed out plus keys re-added while being processed, like client-go's `depth`.
    fn depth(&self, _depth: usize) {}
    /// A key was accepted for processing (a counter; adds folded into an already waiting key do
    /// not count, like client-go's `adds_total`).
    fn add(&self) {}
    /// A delayed or rate-limited re-add was requested (a counter, client-go's `retries_total`).
    fn retry(&self) {}
    /// A key was handed to a worker after waiting this long in the queue (a histogram).
    fn queue_latency(&self, _waited: Duration) {}
    /// A worker finished a key after this much processing (a histogram).
    fn work_duration(&self, _took: Duration) {}
    /// Periodic report of work still in progress: the summed age of every in-flight key and the
    /// age of the oldest one (gauges; client-go's `unfinished_work_seconds` and
    /// `longest_running_processor_seconds`). Both are zero when nothing is in flight.
    fn unfinished_work(&self, _total: Duration, _longest: Duration) {}
}

/// Discards every measurement; the default.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoMetrics;

impl QueueMetrics for NoMetrics {}

/// Keeps the measurements in memory: the latest gauges, counter totals and histogram sums.
///
/// Meant for tests and for binaries that scrape the numbers themselves; a Prometheus exporter
/// would implement [`QueueMetrics`] directly.
#[derive(Debug, Default)]
pub struct CountingMetrics {
    depth: AtomicU64,
    adds: AtomicU64,
    retries: AtomicU64,
    gets: AtomicU64,
    queue_latency_nanos: AtomicU64,
    completions: AtomicU64,
    work_nanos: AtomicU64,
    unfinished: Mutex<(Duration, Duration)>,
}

/// A consistent-enough copy of [`CountingMetrics`] (each field read atomically on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MetricsSnapshot {
    /// Latest depth reported.
    pub depth: u64,
    /// Total adds.
    pub adds: u64,
    /// Total retries.
    pub retries: u64,
    /// Keys handed to workers.
    pub gets: u64,
    /// Sum of queue latencies.
    pub queue_latency: Duration,
    /// Keys finished by workers.
    pub completions: u64,
    /// Sum of work durations.
    pub work: Duration,
    /// Latest summed age of in-flight work.
    pub unfinished_total: Duration,
    /// Latest age of the longest running processor.
    pub longest_running: Duration,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl CountingMetrics {
    /// Reads every counter and gauge.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let (unfinished_total, longest_running) =
            *self.unfinished.lock().unwrap_or_else(|p| p.into_inner());
        MetricsSnapshot {
            depth: self.depth.load(Ordering::Relaxed),
            adds: self.adds.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
            gets: self.gets.load(Ordering::Relaxed),
            queue_latency: Duration::from_nanos(self.queue_latency_nanos.load(Ordering::Relaxed)),
            completions: self.completions.load(Ordering::Relaxed),
            work: Duration::from_nanos(self.work_nanos.load(Ordering::Relaxed)),
            unfinished_total,
            longest_running,
        }
    }
}

impl QueueMetrics for CountingMetrics {
    fn depth(&self, depth: usize) {
        self.depth
            .store(u64::try_from(depth).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
    fn add(&self) {
        self.adds.fetch_add(1, Ordering::Relaxed);
    }
    fn retry(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }
    fn queue_latency(&self, waited: Duration) {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.queue_latency_nanos
            .fetch_add(nanos(waited), Ordering::Relaxed);
    }
    fn work_duration(&self, took: Duration) {
        self.completions.fetch_add(1, Ordering::Relaxed);
        self.work_nanos.fetch_add(nanos(took), Ordering::Relaxed);
    }
    fn unfinished_work(&self, total: Duration, longest: Duration) {
        *self.unfinished.lock().unwrap_or_else(|p| p.into_inner()) = (total, longest);
    }
}
