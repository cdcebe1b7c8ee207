//! The cluster daemons' queue plumbing (feature `kube`): a plan's queue operations on the async
//! queue, and the worker tasks that take keys from it. The pure counterpart, on the
//! clock-injected queue the simulator drives, is [`kvrs_executor::requeue`].
//!
//! The workers' `sync{queue object}` span has this module's target, `kvrs_runtime::queue`
//! (the burst benchmark turns it on by that name).

use std::time::Duration;

use kvrs_decide::{QueueOp, Requeue};

/// As [`requeue`](kvrs_executor::requeue), on the async queue the cluster daemons use (its clock is the runtime's).
pub fn requeue_async(queue: &kvrs_queue::AsyncQueue<String>, key: &str, requeue: &Requeue) {
    for op in requeue.ops() {
        match op {
            QueueOp::AddAfter { delay_seconds } => {
                queue.add_after(key.to_string(), Duration::from_secs(*delay_seconds));
            }
            QueueOp::AddRateLimited => {
                queue.add_rate_limited(key.to_string());
            }
            QueueOp::Forget => {
                queue.forget(&key.to_string());
            }
        }
    }
}

/// Starts `workers` tasks taking keys from `queue` and running `sync` on each, one key at a
/// time per worker (the queue never hands the same key to two workers), in a span naming the
/// queue and the key. They end when the queue is shut down and drained.
pub fn spawn_workers<F, Fut>(
    name: &'static str,
    queue: kvrs_queue::AsyncQueue<String>,
    workers: usize,
    sync: F,
) -> Vec<tokio::task::JoinHandle<()>>
where
    F: Fn(String) -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    use tracing::Instrument;
    (0..workers.max(1))
        .map(|_| {
            let queue = queue.clone();
            let sync = sync.clone();
            tokio::spawn(async move {
                while let Some(key) = queue.get().await {
                    let span = tracing::info_span!("sync", queue = name, object = %key);
                    sync(key.clone()).instrument(span).await;
                    queue.done(&key);
                }
            })
        })
        .collect()
}
