//! Applying a plan's queue operations to a work queue.

use std::time::Duration;

use kvrs_decide::{QueueOp, Requeue};
use kvrs_queue::{Instant, RateLimiter, WorkQueue};

/// Applies `requeue` to `key` in `queue`, in order, at `now`: `AddAfter` schedules the key,
/// `AddRateLimited` schedules it after the key's backoff, `Forget` resets the backoff.
pub fn requeue<R: RateLimiter<String>>(
    queue: &mut WorkQueue<String, R>,
    key: &str,
    requeue: &Requeue,
    now: Instant,
) {
    for op in requeue.ops() {
        match op {
            QueueOp::AddAfter { delay_seconds } => {
                queue.add_after(key.to_string(), Duration::from_secs(*delay_seconds), now);
            }
            QueueOp::AddRateLimited => {
                queue.add_rate_limited(key.to_string(), now);
            }
            QueueOp::Forget => queue.forget(&key.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_schedules_and_resets_the_backoff() {
        let mut q: WorkQueue<String> = WorkQueue::new();
        let now = Instant::ZERO;
        requeue(&mut q, "ns/a", &Requeue::rate_limited(), now);
        assert_eq!(q.num_requeues(&"ns/a".to_string()), 1);
        requeue(&mut q, "ns/a", &Requeue::after(Duration::from_secs(3)), now);
        assert_eq!(q.num_requeues(&"ns/a".to_string()), 0);
        assert!(q.due_of(&"ns/a".to_string()).is_some());
    }
}
