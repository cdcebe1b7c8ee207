//! Backoff for retrying a failure virt-handler tries to fix by syncing again — today the
//! domain paused on an IO error (a full or failing disk), which a sync resumes.
//!
//! Why: resuming a guest whose disk is still full pauses it again at once; syncing on every
//! domain event would resume and re-pause it in a tight loop. KubeVirt's `FailRetryManager`
//! ("io-error-retry": 10 s doubling to 3 min; a failure more than 30 s after the last retry is a
//! new one) spaces the retries out; this is the same state machine as plain data: the shell
//! keeps one [`RetryState`] per VMI and passes the clock in.

use serde::{Deserialize, Serialize};

/// The backoff's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First wait after a retry that failed again.
    pub initial_wait: u64,
    /// Longest wait.
    pub max_wait: u64,
    /// A failure later than this after a retry is unrelated to it (the retry worked).
    pub max_fail_response: u64,
}

/// KubeVirt's IO-error retry policy (seconds).
pub const IO_ERROR_RETRY: RetryPolicy = RetryPolicy {
    initial_wait: 10,
    max_wait: 180,
    max_fail_response: 30,
};

/// What the handler remembers about one VMI's failures (unix seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryState {
    /// When the current run of failures started.
    pub first_fail: i64,
    /// When the last retry was let through.
    pub last_run: i64,
    /// The earliest time of the next retry.
    pub next_run: i64,
    /// The current wait between retries.
    pub wait: u64,
    /// Whether a failure came back after the last retry.
    pub last_run_failed: bool,
}

impl RetryPolicy {
    fn fresh(&self, now: i64) -> RetryState {
        RetryState {
            first_fail: now,
            last_run: now,
            next_run: now.saturating_add_unsigned(self.initial_wait),
            wait: self.initial_wait,
            last_run_failed: false,
        }
    }

    /// A failure seen at `now`: the state to keep and how long to hold the retry back
    /// (`None`: retry now).
    pub fn on_failure(&self, state: Option<RetryState>, now: i64) -> (RetryState, Option<u64>) {
        let Some(mut state) = state else {
            return (self.fresh(now), None);
        };
        if !state.last_run_failed {
            if state
                .last_run
                .saturating_add_unsigned(self.max_fail_response)
                > now
            {
                // The retry did not fix it.
                state.last_run_failed = true;
                let delay = (state.next_run > now).then(|| (state.next_run - now).unsigned_abs());
                return (state, delay);
            }
            return (self.fresh(now), None);
        }
        if now <= state.next_run {
            // KubeVirt's clock has nanoseconds; this one has seconds: hold back at least one,
            // or a failure at exactly `next_run` would requeue at once, over and over, for the
            // rest of that second.
            return (state, Some((state.next_run - now).unsigned_abs().max(1)));
        }
        state.wait = state.wait.saturating_mul(2).min(self.max_wait);
        state.next_run = now.saturating_add_unsigned(state.wait);
        state.last_run = now;
        state.last_run_failed = false;
        (state, None)
    }

    /// Whether a state can be forgotten at `now` (KubeVirt's periodic sweep): the last retry
    /// was long enough ago and nothing failed since.
    pub fn expired(&self, state: &RetryState, now: i64) -> bool {
        !state.last_run_failed
            && now
                > state
                    .last_run
                    .saturating_add_unsigned(self.max_fail_response)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn retries_back_off_from_10_seconds_to_3_minutes() {
        let p = IO_ERROR_RETRY;
        // First failure: retry at once.
        let (s, d) = p.on_failure(None, 1000);
        assert_eq!(d, None);
        // It fails again 1 s later: hold back until next_run (10 s after the first).
        let (s, d) = p.on_failure(Some(s), 1001);
        assert_eq!(d, Some(9));
        // Still too early.
        let (s, d) = p.on_failure(Some(s), 1005);
        assert_eq!(d, Some(5));
        // Backoff over: retry now, next wait doubles to 20 s.
        let (s, d) = p.on_failure(Some(s), 1011);
        assert_eq!((d, s.wait), (None, 20));
        let (mut s, _) = p.on_failure(Some(s), 1012);
        for _ in 0..10 {
            let now = s.next_run + 1;
            s = p.on_failure(Some(s), now).0;
            s = p.on_failure(Some(s), now + 1).0;
        }
        assert_eq!(s.wait, 180);
    }

    #[test]
    fn a_failure_long_after_the_last_retry_starts_over() {
        let p = IO_ERROR_RETRY;
        let (s, _) = p.on_failure(None, 0);
        assert!(p.expired(&s, 31));
        let (s, d) = p.on_failure(Some(s), 100);
        assert_eq!((d, s.first_fail, s.wait), (None, 100, 10));
    }

    #[test]
    fn a_failure_at_exactly_the_next_run_is_held_back_a_second() {
        let p = IO_ERROR_RETRY;
        let (s, _) = p.on_failure(None, 0);
        let (s, _) = p.on_failure(Some(s), 1);
        assert!(s.last_run_failed);
        assert_eq!(p.on_failure(Some(s), s.next_run).1, Some(1));
    }

    proptest! {
        #[test]
        fn the_delay_never_is_zero_and_never_exceeds_the_longest_wait(times in proptest::collection::vec(0i64..400, 1..60)) {
            let p = IO_ERROR_RETRY;
            let mut now = 0i64;
            let mut state = None;
            for step in times {
                now += step;
                let (s, d) = p.on_failure(state, now);
                prop_assert!(d.unwrap_or(1) >= 1 && d.unwrap_or(0) <= p.max_wait);
                prop_assert!(s.wait >= p.initial_wait && s.wait <= p.max_wait);
                state = Some(s);
            }
        }
    }
}
