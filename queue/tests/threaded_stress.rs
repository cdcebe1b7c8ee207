//! The tokio shell under real parallelism (two OS threads, ten workers, four producers): no key
//! is processed concurrently, and every add is seen by a later run of its key (none lost).
#![cfg(feature = "tokio")]

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use kvrs_queue::{AsyncQueue, ShutdownMode};

const KEYS: usize = 40;

struct Shared {
    /// Bumped before every add of the key.
    version: Vec<AtomicU64>,
    /// Highest version a run of the key observed when it started.
    seen: Vec<AtomicU64>,
    in_flight: Mutex<HashSet<usize>>,
    overlaps: AtomicUsize,
    runs: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_threads_never_overlap_a_key_and_lose_no_add() {
    let s = Arc::new(Shared {
        version: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        seen: (0..KEYS).map(|_| AtomicU64::new(0)).collect(),
        in_flight: Mutex::new(HashSet::new()),
        overlaps: AtomicUsize::new(0),
        runs: AtomicUsize::new(0),
    });
    let q: AsyncQueue<usize> = AsyncQueue::new();
    let sh = s.clone();
    let pool = q.run_workers(10, move |k: usize| {
        let sh = sh.clone();
        async move {
            if !sh.in_flight.lock().unwrap().insert(k) {
                sh.overlaps.fetch_add(1, Ordering::SeqCst);
            }
            let v = sh.version[k].load(Ordering::SeqCst);
            sh.seen[k].fetch_max(v, Ordering::SeqCst);
            sh.runs.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            sh.in_flight.lock().unwrap().remove(&k);
            Ok::<(), String>(())
        }
    });
    let producers: Vec<_> = (0..4u64)
        .map(|p| {
            let (q, s) = (q.clone(), s.clone());
            tokio::spawn(async move {
                // A small deterministic LCG per producer picks keys.
                let mut x = p.wrapping_mul(6364136223846793005).wrapping_add(1);
                for i in 0..5_000 {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = usize::try_from(x >> 33).unwrap() % KEYS;
                    s.version[k].fetch_add(1, Ordering::SeqCst);
                    q.add(k);
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    for p in producers {
        p.await.unwrap();
    }
    q.wait_idle().await;
    for k in 0..KEYS {
        assert_eq!(
            s.seen[k].load(Ordering::SeqCst),
            s.version[k].load(Ordering::SeqCst),
            "the last add of key {k} was never processed"
        );
    }
    assert_eq!(s.overlaps.load(Ordering::SeqCst), 0);
    // Dedup folded most of the 20 000 adds.
    let runs = s.runs.load(Ordering::SeqCst);
    assert!(runs < 20_000, "{runs} runs");
    pool.shutdown(ShutdownMode::DrainQueued).await.unwrap();
}
