//! kvrs-queue throughput: keys per second through add -> get -> done.
//!
//! - `core`: the pure state machine on one thread, no locks, 10 000 distinct keys per iteration.
//! - `workers/N`: the tokio shell with N workers (1, 3, 10 — KubeVirt's counts) on a two-thread
//!   runtime; each iteration adds 10 000 distinct keys (the whole hot set) and waits until the
//!   workers have processed all of them. The handler does no work, so this measures the queue.
//! - `dedup/N`: the same 10 000 keys, each added 10 times while workers run: ten adds of a key
//!   still waiting are one unit of work; throughput counts adds.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvrs_queue::{AsyncQueue, Instant, ShutdownMode, WorkQueue};

const HOT_KEYS: usize = 10_000;

fn keys() -> Vec<String> {
    (0..HOT_KEYS)
        .map(|i| format!("kubevirt-test/vmi-{i:05}"))
        .collect()
}

fn core(c: &mut Criterion) {
    let keys = keys();
    let mut group = c.benchmark_group("queue_core");
    group.throughput(Throughput::Elements(HOT_KEYS as u64));
    let mut q = WorkQueue::<String>::new();
    let mut now = Instant::ZERO;
    group.bench_function("add_get_done", |b| {
        b.iter(|| {
            now += Duration::from_micros(1);
            for k in &keys {
                q.add(k.clone(), now);
            }
            while let Some(k) = q.get(now) {
                q.done(black_box(&k), now);
            }
        })
    });
    group.finish();
}

fn workers(c: &mut Criterion) {
    let keys = keys();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("tokio runtime");
    let mut group = c.benchmark_group("queue_workers");
    for n in [1usize, 3, 10] {
        let q: AsyncQueue<String> = rt.block_on(async { AsyncQueue::new() });
        let pool = rt.block_on(async {
            q.run_workers(n, |k: String| async move {
                black_box(k);
                Ok::<(), std::convert::Infallible>(())
            })
        });
        group.throughput(Throughput::Elements(HOT_KEYS as u64));
        group.bench_with_input(BenchmarkId::new("add_get_done", n), &n, |b, _| {
            b.iter(|| {
                rt.block_on(async {
                    for k in &keys {
                        q.add(k.clone());
                    }
                    q.wait_idle().await;
                })
            })
        });
        group.throughput(Throughput::Elements(10 * HOT_KEYS as u64));
        group.bench_with_input(BenchmarkId::new("dedup_10x_adds", n), &n, |b, _| {
            b.iter(|| {
                rt.block_on(async {
                    for _ in 0..10 {
                        for k in &keys {
                            q.add(k.clone());
                        }
                    }
                    q.wait_idle().await;
                })
            })
        });
        rt.block_on(pool.shutdown(ShutdownMode::DrainQueued))
            .expect("no worker panicked");
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = core, workers
}
criterion_main!(benches);
