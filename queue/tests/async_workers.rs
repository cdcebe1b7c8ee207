//! The tokio shell on tokio's paused clock: workers, retries, delays and graceful shutdown.
#![cfg(feature = "tokio")]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kvrs_queue::{AsyncQueue, CountingMetrics, ShutdownMode, WorkQueue};
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);

/// Records which keys are in a handler right now and the worst overlap seen.
#[derive(Default)]
struct Tracker {
    in_flight: Mutex<HashSet<String>>,
    overlap_same_key: AtomicUsize,
    max_parallel: AtomicUsize,
    runs: Mutex<HashMap<String, usize>>,
}

impl Tracker {
    fn enter(&self, key: &str) {
        let mut set = self.in_flight.lock().unwrap();
        if !set.insert(key.to_string()) {
            self.overlap_same_key.fetch_add(1, Ordering::SeqCst);
        }
        self.max_parallel.fetch_max(set.len(), Ordering::SeqCst);
        *self
            .runs
            .lock()
            .unwrap()
            .entry(key.to_string())
            .or_default() += 1;
    }
    fn leave(&self, key: &str) {
        self.in_flight.lock().unwrap().remove(key);
    }
    fn runs(&self, key: &str) -> usize {
        self.runs.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

#[tokio::test(start_paused = true)]
async fn workers_never_process_one_key_concurrently_but_do_run_distinct_keys_in_parallel() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let t = Arc::new(Tracker::default());
    let tr = t.clone();
    let pool = q.run_workers(3, move |key: String| {
        let tr = tr.clone();
        async move {
            tr.enter(&key);
            sleep(MS * 10).await;
            tr.leave(&key);
            Ok::<(), String>(())
        }
    });
    assert_eq!(pool.workers(), 3);
    // Hammer "a" every millisecond for 100 ms while "b" and "c" also arrive.
    for i in 0..100 {
        q.add("a".into());
        if i % 10 == 0 {
            q.add("b".into());
            q.add("c".into());
        }
        sleep(MS).await;
    }
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
    assert_eq!(t.overlap_same_key.load(Ordering::SeqCst), 0);
    assert_eq!(t.max_parallel.load(Ordering::SeqCst), 3);
    // "a" is busy 10 ms per run and re-added constantly: about one run per 10 ms, never 100.
    let a = t.runs("a");
    assert!((9..=12).contains(&a), "a ran {a} times");
}

#[tokio::test(start_paused = true)]
async fn a_key_added_during_its_processing_is_processed_again_after_done() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let t = Arc::new(Tracker::default());
    let (tr, q2) = (t.clone(), q.clone());
    let pool = q.run_workers(2, move |key: String| {
        let (tr, q2) = (tr.clone(), q2.clone());
        async move {
            tr.enter(&key);
            if tr.runs(&key) == 1 {
                // The cache changed while we were syncing.
                q2.add(key.clone());
                q2.add(key.clone());
            }
            sleep(MS * 5).await;
            tr.leave(&key);
            Ok::<(), String>(())
        }
    });
    q.add("ns/vmi".into());
    sleep(MS * 100).await;
    assert_eq!(t.runs("ns/vmi"), 2);
    assert_eq!(t.overlap_same_key.load(Ordering::SeqCst), 0);
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn failures_are_retried_with_growing_backoff_and_success_forgets() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let start = Instant::now();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let (c, q2) = (calls.clone(), q.clone());
    let pool = q.run_workers(1, move |key: String| {
        let (c, q2) = (c.clone(), q2.clone());
        async move {
            let mut calls = c.lock().unwrap();
            calls.push((start.elapsed(), q2.num_requeues(&key)));
            if calls.len() <= 4 {
                Err("apiserver said no")
            } else {
                Ok(())
            }
        }
    });
    q.add("ns/vm".into());
    sleep(Duration::from_secs(1)).await;
    let got = calls.lock().unwrap().clone();
    // Retries at +5, +10, +20, +40 ms after each failure.
    let want: Vec<(Duration, u32)> = vec![
        (Duration::ZERO, 0),
        (MS * 5, 1),
        (MS * 15, 2),
        (MS * 35, 3),
        (MS * 75, 4),
    ];
    assert_eq!(got, want);
    assert_eq!(
        q.num_requeues(&"ns/vm".to_string()),
        0,
        "success forgets the history"
    );
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn delayed_adds_fire_in_due_order_at_their_time() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let start = Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let pool = q.run_workers(3, move |key: String| {
        let s = s.clone();
        async move {
            s.lock().unwrap().push((key, start.elapsed()));
            Ok::<(), String>(())
        }
    });
    q.add_after("c".into(), MS * 30);
    q.add_after("a".into(), MS * 10);
    q.add_after("b".into(), MS * 20);
    q.add_after("a".into(), MS * 25); // later request keeps the earlier time
    sleep(MS * 100).await;
    let got = seen.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            ("a".into(), MS * 10),
            ("b".into(), MS * 20),
            ("c".into(), MS * 30)
        ]
    );
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_drains_in_flight_and_queued_work_with_ten_workers() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let pool = q.run_workers(10, move |_key: String| {
        let d = d.clone();
        async move {
            sleep(Duration::from_secs(1)).await;
            d.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        }
    });
    for i in 0..20 {
        q.add(format!("ns/vmi-{i}"));
    }
    q.add_after("ns/delayed".into(), Duration::from_secs(60));
    sleep(MS * 100).await;
    assert_eq!(q.with(|core, _| core.processing_len()), 10);
    let start = Instant::now();
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
    // Two rounds of ten: every queued and in-flight key finished, the delayed one dropped.
    assert_eq!(done.load(Ordering::SeqCst), 20);
    assert_eq!(start.elapsed(), MS * 1900);
    assert!(q.with(|core, _| core.is_drained()));
    assert_eq!(q.add("late".into()), kvrs_queue::AddOutcome::Rejected);
}

#[tokio::test(start_paused = true)]
async fn shutdown_in_flight_only_finishes_what_workers_hold() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let pool = q.run_workers(3, move |_key: String| {
        let d = d.clone();
        async move {
            sleep(Duration::from_secs(1)).await;
            d.fetch_add(1, Ordering::SeqCst);
            Ok::<(), String>(())
        }
    });
    for i in 0..10 {
        q.add(format!("k{i}"));
    }
    sleep(MS).await;
    pool.shutdown(ShutdownMode::InFlightOnly).await.unwrap();
    assert_eq!(done.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn idle_workers_stop_on_shutdown_and_get_returns_none() {
    let q: AsyncQueue<u32> = AsyncQueue::new();
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.get().await })
    };
    sleep(MS).await;
    q.shutdown_and_drain(ShutdownMode::DrainQueued).await;
    assert_eq!(waiter.await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_releases_its_key() {
    let q: AsyncQueue<String> = AsyncQueue::new();
    let pool = q.run_workers(2, move |key: String| async move {
        if key == "boom" {
            panic!("handler bug");
        }
        Ok::<(), String>(())
    });
    q.add("boom".into());
    q.add("fine".into());
    q.wait_idle().await;
    assert_eq!(q.with(|core, _| core.processing_len()), 0);
    let err = pool.shutdown(ShutdownMode::DrainQueued).await.unwrap_err();
    assert_eq!(err.panicked, 1);
}

#[tokio::test(start_paused = true)]
async fn the_unfinished_work_reporter_shows_the_longest_running_processor() {
    let metrics = Arc::new(CountingMetrics::default());
    let q = AsyncQueue::from_queue(WorkQueue::<String>::new().with_metrics(metrics.clone()));
    let reporter = q.spawn_unfinished_work_reporter(MS * 500);
    let pool = q.run_workers(2, move |key: String| async move {
        // Neither finishes on a reporting tick (every 500 ms), so the gauges are unambiguous.
        let ms = if key == "slow" { 3000 } else { 1100 };
        sleep(MS * ms).await;
        Ok::<(), String>(())
    });
    q.add("slow".into());
    q.add("fast".into());
    sleep(MS * 1200).await;
    let s = metrics.snapshot();
    assert_eq!(s.longest_running, Duration::from_secs(1));
    assert_eq!(s.unfinished_total, Duration::from_secs(2));
    sleep(MS * 1000).await;
    let s = metrics.snapshot();
    assert_eq!(s.longest_running, Duration::from_secs(2));
    assert_eq!(
        s.unfinished_total,
        Duration::from_secs(2),
        "fast finished at 1.1 s"
    );
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
    reporter.await.unwrap();
    assert_eq!(metrics.snapshot().completions, 2);
}
