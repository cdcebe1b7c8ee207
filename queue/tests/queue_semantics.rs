//! The work queue's client-go semantics, pinned on an injected clock.

use std::sync::Arc;
use std::time::Duration;

use kvrs_queue::{
    AddOutcome, CountingMetrics, DoneOutcome, Instant, ItemExponentialFailure, ShutdownMode,
    TokenBucket, WorkQueue,
};

const MS: Duration = Duration::from_millis(1);
const T0: Instant = Instant::ZERO;

fn key(s: &str) -> String {
    s.to_string()
}

fn drain(q: &mut WorkQueue<String>, now: Instant) -> Vec<String> {
    let mut got = Vec::new();
    while let Some(k) = q.get(now) {
        assert_eq!(q.done(&k, now), DoneOutcome::Finished);
        got.push(k);
    }
    got
}

#[test]
fn a_key_queued_ten_times_is_processed_once() {
    let mut q = WorkQueue::new();
    assert_eq!(q.add(key("ns/a"), T0), AddOutcome::Queued);
    for _ in 0..9 {
        assert_eq!(q.add(key("ns/a"), T0), AddOutcome::AlreadyQueued);
    }
    assert_eq!(q.add(key("ns/b"), T0), AddOutcome::Queued);
    assert_eq!(q.len(), 2);
    // FIFO among distinct keys.
    assert_eq!(drain(&mut q, T0), vec![key("ns/a"), key("ns/b")]);
    assert!(q.is_idle());
}

#[test]
fn a_key_held_by_a_worker_is_not_handed_to_another() {
    let mut q = WorkQueue::new();
    q.add(key("ns/a"), T0);
    let held = q.get(T0).unwrap();
    assert!(q.is_processing(&held));
    // Added again while processing: not handed out, however often it is added.
    assert_eq!(q.add(key("ns/a"), T0), AddOutcome::AfterDone);
    assert_eq!(q.add(key("ns/a"), T0), AddOutcome::AfterDone);
    assert_eq!(q.len(), 0);
    assert_eq!(q.get(T0), None);
    q.add(key("ns/b"), T0);
    assert_eq!(q.get(T0), Some(key("ns/b")));
    assert_eq!(q.get(T0), None);
}

#[test]
fn a_key_added_while_processing_runs_again_after_done_exactly_once() {
    let mut q = WorkQueue::new();
    q.add(key("ns/a"), T0);
    let k = q.get(T0).unwrap();
    q.add(key("ns/a"), T0 + MS);
    q.add(key("ns/a"), T0 + MS * 2);
    assert_eq!(q.done(&k, T0 + MS * 3), DoneOutcome::Requeued);
    assert!(q.is_queued(&k));
    assert_eq!(q.get(T0 + MS * 3), Some(key("ns/a")));
    assert_eq!(q.done(&k, T0 + MS * 4), DoneOutcome::Finished);
    assert_eq!(q.get(T0 + MS * 4), None);
    // Without a re-add, done releases the key for good.
    q.add(key("ns/c"), T0);
    let c = q.get(T0).unwrap();
    assert_eq!(q.done(&c, T0), DoneOutcome::Finished);
    assert!(!q.is_processing(&c) && !q.is_queued(&c));
}

#[test]
fn done_on_a_key_not_in_flight_changes_nothing() {
    let mut q = WorkQueue::new();
    assert_eq!(q.done(&key("ns/x"), T0), DoneOutcome::NotProcessing);
    q.add(key("ns/x"), T0);
    // Queued but not taken: done must not duplicate it (client-go would).
    assert_eq!(q.done(&key("ns/x"), T0), DoneOutcome::NotProcessing);
    assert_eq!(drain(&mut q, T0), vec![key("ns/x")]);
}

#[test]
fn add_after_fires_in_due_order_and_keeps_the_earlier_time() {
    let mut q = WorkQueue::new();
    assert_eq!(
        q.add_after(key("c"), MS * 30, T0),
        AddOutcome::Scheduled { due: T0 + MS * 30 }
    );
    q.add_after(key("a"), MS * 10, T0);
    q.add_after(key("b"), MS * 20, T0);
    // Same due time as "b": first come first served.
    q.add_after(key("b2"), MS * 20, T0);
    // A later request does not postpone "a"; an earlier one moves "c" forward.
    assert_eq!(
        q.add_after(key("a"), MS * 50, T0),
        AddOutcome::Scheduled { due: T0 + MS * 10 }
    );
    assert_eq!(
        q.add_after(key("c"), MS * 5, T0 + MS * 10),
        AddOutcome::Scheduled { due: T0 + MS * 15 }
    );
    assert_eq!(q.delayed_len(), 4);
    assert_eq!(q.next_wakeup(), Some(T0 + MS * 10));
    assert_eq!(q.get(T0 + MS * 9), None);
    assert_eq!(drain(&mut q, T0 + MS * 10), vec![key("a")]);
    assert_eq!(q.next_wakeup(), Some(T0 + MS * 15));
    assert_eq!(
        drain(&mut q, T0 + MS * 25),
        vec![key("c"), key("b"), key("b2")]
    );
    assert_eq!(q.next_wakeup(), None);
    assert_eq!(q.delayed_len(), 0);
}

#[test]
fn add_after_zero_adds_at_once_and_a_due_key_already_queued_is_not_duplicated() {
    let mut q = WorkQueue::new();
    assert_eq!(
        q.add_after(key("a"), Duration::ZERO, T0),
        AddOutcome::Queued
    );
    q.add_after(key("a"), MS, T0);
    assert_eq!(q.handle_timeout(T0 + MS), 1);
    assert_eq!(q.len(), 1);
    assert_eq!(drain(&mut q, T0 + MS), vec![key("a")]);
}

#[test]
fn failures_back_off_5ms_doubling_and_forget_resets() {
    let mut q = WorkQueue::new();
    let k = key("ns/flaky");
    let mut now = T0;
    q.add(k.clone(), now);
    let mut waits = Vec::new();
    for _ in 0..6 {
        let got = q.get(now).unwrap();
        q.add_rate_limited(got.clone(), now);
        q.done(&got, now);
        let due = q.next_wakeup().unwrap();
        waits.push(due - now);
        assert_eq!(
            q.get(due - Duration::from_nanos(1)),
            None,
            "not before its backoff"
        );
        now = due;
    }
    assert_eq!(waits, [5, 10, 20, 40, 80, 160].map(|m| MS * m));
    assert_eq!(q.num_requeues(&k), 6);
    // Success: history cleared, the next failure starts at 5 ms again.
    let got = q.get(now).unwrap();
    q.forget(&got);
    q.done(&got, now);
    assert_eq!(q.num_requeues(&k), 0);
    q.add_rate_limited(k.clone(), now);
    assert_eq!(q.due_of(&k), Some(now + MS * 5));
}

#[test]
fn the_overall_bucket_spaces_retries_once_the_burst_is_spent() {
    let mut q = WorkQueue::new();
    // 100 distinct keys fail at once: each waits only its own 5 ms.
    for i in 0..100 {
        q.add_rate_limited(format!("ns/k{i}"), T0);
    }
    assert!((0..100).all(|i| q.due_of(&format!("ns/k{i}")) == Some(T0 + MS * 5)));
    // The burst is spent: the next ones are spaced 100 ms apart by the bucket.
    for i in 100..103 {
        q.add_rate_limited(format!("ns/k{i}"), T0);
    }
    let dues: Vec<_> = (100..103)
        .map(|i| q.due_of(&format!("ns/k{i}")).unwrap())
        .collect();
    assert_eq!(dues, vec![T0 + MS * 100, T0 + MS * 200, T0 + MS * 300]);
    assert_eq!(drain(&mut q, T0 + MS * 5).len(), 100);
    assert_eq!(drain(&mut q, T0 + MS * 150), vec![key("ns/k100")]);
}

#[test]
fn custom_limiters_plug_in() {
    let mut q: WorkQueue<String, TokenBucket> =
        WorkQueue::with_rate_limiter(TokenBucket::new(1, 1).unwrap());
    assert_eq!(q.add_rate_limited(key("a"), T0), AddOutcome::Queued);
    assert_eq!(
        q.add_rate_limited(key("b"), T0),
        AddOutcome::Scheduled {
            due: T0 + Duration::from_secs(1)
        }
    );
    let mut q = WorkQueue::with_rate_limiter(ItemExponentialFailure::new(MS, MS * 3));
    for want in [1, 2, 3, 3] {
        q.add_rate_limited(7u32, T0);
        assert_eq!(q.due_of(&7), Some(T0 + MS * want));
        q.handle_timeout(T0 + MS * 3);
        let k = q.get(T0 + MS * 3).unwrap();
        q.done(&k, T0 + MS * 3);
    }
}

#[test]
fn shutdown_drains_queued_and_in_flight_work_and_rejects_new_work() {
    let mut q = WorkQueue::new();
    for k in ["a", "b", "c"] {
        q.add(key(k), T0);
    }
    q.add_after(key("later"), MS, T0);
    let a = q.get(T0).unwrap();
    q.add(key("a"), T0); // re-added while in flight
    q.shutdown(ShutdownMode::DrainQueued);
    assert!(q.is_shutting_down() && !q.is_finished());
    assert_eq!(q.add(key("new"), T0), AddOutcome::Rejected);
    assert_eq!(q.add_after(key("new"), MS, T0), AddOutcome::Rejected);
    assert_eq!(q.add_rate_limited(key("new"), T0), AddOutcome::Rejected);
    assert_eq!(q.delayed_len(), 0, "delayed keys are dropped");
    assert_eq!(drain(&mut q, T0 + MS * 2), vec![key("b"), key("c")]);
    assert!(q.is_finished() && !q.is_drained(), "a is still in flight");
    // The re-add of the in-flight key is honoured, then the queue is drained.
    assert_eq!(q.done(&a, T0), DoneOutcome::Requeued);
    assert_eq!(drain(&mut q, T0), vec![key("a")]);
    assert!(q.is_drained());
}

#[test]
fn shutdown_in_flight_only_drops_queued_keys() {
    let mut q = WorkQueue::new();
    q.add(key("a"), T0);
    q.add(key("b"), T0);
    let a = q.get(T0).unwrap();
    q.add(key("a"), T0);
    q.shutdown(ShutdownMode::InFlightOnly);
    assert!(q.is_finished());
    assert_eq!(q.get(T0), None);
    assert_eq!(q.done(&a, T0), DoneOutcome::Finished);
    assert!(q.is_drained());
}

#[test]
fn metrics_hooks_see_depth_adds_retries_durations_and_the_longest_runner() {
    let m = Arc::new(CountingMetrics::default());
    let mut q = WorkQueue::new().with_metrics(m.clone());
    q.add(key("a"), T0);
    q.add(key("a"), T0); // deduplicated: not an add
    q.add(key("b"), T0 + MS);
    assert_eq!(m.snapshot().depth, 2);
    assert_eq!(m.snapshot().adds, 2);
    let a = q.get(T0 + MS * 10).unwrap();
    let b = q.get(T0 + MS * 12).unwrap();
    q.add(key("a"), T0 + MS * 12); // waits for done: counts in depth
    assert_eq!(m.snapshot().depth, 1);
    assert_eq!(q.longest_running(T0 + MS * 20), Some(MS * 10));
    q.report_unfinished_work(T0 + MS * 20);
    let s = m.snapshot();
    assert_eq!((s.unfinished_total, s.longest_running), (MS * 18, MS * 10));
    q.add_rate_limited(b.clone(), T0 + MS * 20);
    q.done(&b, T0 + MS * 20);
    q.done(&a, T0 + MS * 30);
    let s = m.snapshot();
    assert_eq!(s.retries, 1);
    assert_eq!(s.gets, 2);
    assert_eq!(s.queue_latency, MS * 10 + MS * 11);
    assert_eq!(s.completions, 2);
    assert_eq!(s.work, MS * 8 + MS * 20);
    assert_eq!(s.depth, 1, "a queued again after done");
    assert_eq!(q.longest_running(T0 + MS * 30), None);
    q.report_unfinished_work(T0 + MS * 30);
    assert_eq!(m.snapshot().longest_running, Duration::ZERO);
}
