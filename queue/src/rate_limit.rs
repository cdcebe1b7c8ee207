//! Retry delays: per-key exponential failure backoff, an overall token bucket, and the larger of
//! the two.
//!
//! This is the behaviour of client-go's default controller rate limiter, which every KubeVirt
//! controller queue uses: a key that keeps failing backs off 5 ms, 10 ms, 20 ms, … up to 1000 s,
//! and the whole queue cannot retry faster than 10 keys per second once a burst of 100 is spent.
//! A success calls [`RateLimiter::forget`] and the key starts again at 5 ms. All limiters are pure
//! state machines that take `now` and return a delay.

use foldhash::{HashMap, HashMapExt};
use std::hash::Hash;
use std::time::Duration;

use crate::time::Instant;

/// Decides how long a key must wait before it is retried.
pub trait RateLimiter<K> {
    /// Records one more retry of `key` requested at `now` and returns how long it must wait.
    fn when(&mut self, key: &K, now: Instant) -> Duration;
    /// Clears the failure history of `key` (it succeeded, or is gone).
    fn forget(&mut self, key: &K);
    /// How many times `key` was retried since it was last forgotten.
    fn num_requeues(&self, key: &K) -> u32;
}

/// Rejected limiter settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateLimitError {
    /// A token bucket needs a positive refill rate.
    #[error("token bucket: qps must be at least 1, got {0}")]
    ZeroRate(u32),
    /// A token bucket needs room for at least one token.
    #[error("token bucket: burst must be at least 1, got {0}")]
    ZeroBurst(u32),
}

/// Per-key exponential backoff: the n-th retry since the last `forget` waits `base * 2^(n-1)`,
/// capped at `max`.
#[derive(Debug, Clone)]
pub struct ItemExponentialFailure<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
}

impl<K: Eq + Hash + Clone> ItemExponentialFailure<K> {
    /// Backoff starting at `base`, doubling per failure, never above `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialFailure {
            base,
            max,
            failures: HashMap::new(),
        }
    }

    /// KubeVirt's (client-go's) per-key setting: 5 ms doubling up to 1000 s.
    pub fn controller_default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(1000))
    }

    /// Number of keys with a failure history (memory held by the limiter).
    pub fn tracked_keys(&self) -> usize {
        self.failures.len()
    }

    fn backoff(&self, exponent: u32) -> Duration {
        // 2^exponent overflows u32 from 32 on; anything that large is past any sane max anyway.
        let factor = 1u32.checked_shl(exponent).filter(|_| exponent < 32);
        match factor.and_then(|f| self.base.checked_mul(f)) {
            Some(d) => d.min(self.max),
            None => self.max,
        }
    }
}

impl<K: Eq + Hash + Clone> RateLimiter<K> for ItemExponentialFailure<K> {
    fn when(&mut self, key: &K, _now: Instant) -> Duration {
        let failures = self.failures.entry(key.clone()).or_insert(0);
        let exponent = *failures;
        *failures = failures.saturating_add(1);
        self.backoff(exponent)
    }

    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// One token per nanosecond-second: tokens are counted in billionths so that refill at an integer
/// rate per second is exact integer arithmetic (no float drift, reproducible delays).
const UNITS_PER_TOKEN: i128 = 1_000_000_000;

/// An overall token bucket shared by all keys: `qps` tokens per second, at most `burst` saved up.
///
/// Each retry takes a token; when none is left the retry is still granted but scheduled for the
/// moment its token will have been refilled, so the bucket goes into debt (the reservation
/// semantics of Go's `rate.Limiter` that client-go relies on). It starts full.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    qps: u32,
    burst: u32,
    /// Tokens available at `last`, in [`UNITS_PER_TOKEN`] units; negative while in debt.
    units: i128,
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket refilling `qps` tokens per second and holding at most `burst`.
    pub fn new(qps: u32, burst: u32) -> Result<Self, RateLimitError> {
        if qps == 0 {
            return Err(RateLimitError::ZeroRate(qps));
        }
        if burst == 0 {
            return Err(RateLimitError::ZeroBurst(burst));
        }
        Ok(TokenBucket {
            qps,
            burst,
            units: i128::from(burst) * UNITS_PER_TOKEN,
            last: None,
        })
    }

    /// KubeVirt's (client-go's) overall setting: 10 per second, burst 100.
    pub fn controller_default() -> Self {
        TokenBucket {
            qps: 10,
            burst: 100,
            units: 100 * UNITS_PER_TOKEN,
            last: None,
        }
    }

    /// Whole tokens available at `now` without taking one (negative while in debt).
    pub fn tokens_at(&self, now: Instant) -> i64 {
        let units = self.refilled(now) / UNITS_PER_TOKEN;
        i64::try_from(units).unwrap_or(i64::MIN)
    }

    fn refilled(&self, now: Instant) -> i128 {
        let cap = i128::from(self.burst) * UNITS_PER_TOKEN;
        let Some(last) = self.last else {
            return self.units;
        };
        let elapsed =
            i128::try_from(now.saturating_duration_since(last).as_nanos()).unwrap_or(i128::MAX / 2);
        // elapsed_ns * qps tokens/s == elapsed_ns * qps * 1e9 units / 1e9 ns.
        let gained = elapsed.saturating_mul(i128::from(self.qps));
        self.units.saturating_add(gained).min(cap)
    }

    /// Takes one token at `now` and returns how long until that token exists.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let units = self.refilled(now) - UNITS_PER_TOKEN;
        self.units = units;
        // The clock only moves forward for the bucket: a stale `now` earns no refill twice.
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        if units >= 0 {
            return Duration::ZERO;
        }
        // Round up so the retry never fires before its token is really there.
        let qps = i128::from(self.qps);
        let wait_ns = (-units + qps - 1) / qps;
        Duration::from_nanos(u64::try_from(wait_ns).unwrap_or(u64::MAX))
    }
}

impl<K> RateLimiter<K> for TokenBucket {
    fn when(&mut self, _key: &K, now: Instant) -> Duration {
        self.reserve(now)
    }
    /// The bucket is shared by all keys: nothing to forget.
    fn forget(&mut self, _key: &K) {}
    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// Asks both limiters (each records the retry) and waits for the longer of their delays.
#[derive(Debug, Clone)]
pub struct MaxOf<A, B> {
    /// First limiter.
    pub first: A,
    /// Second limiter.
    pub second: B,
}

impl<A, B> MaxOf<A, B> {
    /// Combines two limiters.
    pub fn new(first: A, second: B) -> Self {
        MaxOf { first, second }
    }
}

impl<K, A: RateLimiter<K>, B: RateLimiter<K>> RateLimiter<K> for MaxOf<A, B> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        let a = self.first.when(key, now);
        let b = self.second.when(key, now);
        a.max(b)
    }
    fn forget(&mut self, key: &K) {
        self.first.forget(key);
        self.second.forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        self.first
            .num_requeues(key)
            .max(self.second.num_requeues(key))
    }
}

/// The limiter KubeVirt's controllers use: per-key 5 ms..1000 s backoff combined with an overall
/// 10 qps / burst 100 bucket.
pub type ControllerRateLimiter<K> = MaxOf<ItemExponentialFailure<K>, TokenBucket>;

/// Builds [`ControllerRateLimiter`] with KubeVirt's settings.
pub fn controller_rate_limiter<K: Eq + Hash + Clone>() -> ControllerRateLimiter<K> {
    MaxOf::new(
        ItemExponentialFailure::controller_default(),
        TokenBucket::controller_default(),
    )
}

impl<K: Eq + Hash + Clone> Default for ControllerRateLimiter<K> {
    fn default() -> Self {
        controller_rate_limiter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn backoff_doubles_from_5ms_caps_at_1000s_and_resets_on_forget() {
        let mut l = ItemExponentialFailure::<&str>::controller_default();
        let t = Instant::ZERO;
        let got: Vec<Duration> = (0..20).map(|_| l.when(&"a", t)).collect();
        let mut want = Vec::new();
        for n in 0..18u32 {
            want.push(MS * 5 * 2u32.pow(n)); // 5 ms .. 655.36 s
        }
        want.push(Duration::from_secs(1000)); // 5 ms * 2^18 = 1310.72 s, capped
        want.push(Duration::from_secs(1000));
        assert_eq!(got, want);
        assert_eq!(l.num_requeues(&"a"), 20);
        assert_eq!(l.num_requeues(&"b"), 0);
        // Another key has its own history.
        assert_eq!(l.when(&"b", t), MS * 5);
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a", t), MS * 5);
        assert_eq!(l.when(&"a", t), MS * 10);
    }

    #[test]
    fn backoff_never_overflows() {
        let mut l =
            ItemExponentialFailure::<u8>::new(Duration::from_secs(u64::MAX / 4), Duration::MAX);
        for _ in 0..100 {
            assert!(l.when(&1, Instant::ZERO) <= Duration::MAX);
        }
        assert_eq!(l.when(&1, Instant::ZERO), Duration::MAX);
    }

    #[test]
    fn bucket_allows_burst_then_spaces_by_100ms_and_refills() {
        let mut b = TokenBucket::controller_default();
        let t0 = Instant::ZERO + Duration::from_secs(7);
        for i in 0..100 {
            assert_eq!(b.reserve(t0), Duration::ZERO, "token {i} of the burst");
        }
        // In debt: each further reservation is 100 ms later than the previous one.
        assert_eq!(b.reserve(t0), MS * 100);
        assert_eq!(b.reserve(t0), MS * 200);
        assert_eq!(b.reserve(t0), MS * 300);
        assert_eq!(b.tokens_at(t0), -3);
        // 250 ms later 2.5 tokens came back: still 0.5 in debt, next waits 150 ms.
        let t1 = t0 + MS * 250;
        assert_eq!(b.reserve(t1), MS * 150);
        // After a long pause the bucket is full again, never above burst.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!(b.tokens_at(t2), 100);
        for _ in 0..100 {
            assert_eq!(b.reserve(t2), Duration::ZERO);
        }
        assert_eq!(b.reserve(t2), MS * 100);
    }

    #[test]
    fn bucket_rounds_waits_up_and_rejects_bad_settings() {
        let mut b = TokenBucket::new(3, 1).unwrap();
        assert_eq!(b.reserve(Instant::ZERO), Duration::ZERO);
        // One third of a second is 333_333_333.33 ns: rounded up.
        assert_eq!(b.reserve(Instant::ZERO), Duration::from_nanos(333_333_334));
        assert_eq!(
            TokenBucket::new(0, 1).unwrap_err(),
            RateLimitError::ZeroRate(0)
        );
        assert_eq!(
            TokenBucket::new(1, 0).unwrap_err(),
            RateLimitError::ZeroBurst(0)
        );
    }

    #[test]
    fn combined_limiter_takes_the_larger_delay_and_both_record() {
        let mut l = controller_rate_limiter::<u32>();
        let t = Instant::ZERO;
        // 100 distinct keys fail once: per-key 5 ms dominates, the burst is spent.
        for k in 0..100 {
            assert_eq!(l.when(&k, t), MS * 5);
        }
        // Key 0 fails again: per-key says 10 ms, bucket says 100 ms: bucket wins.
        assert_eq!(l.when(&0, t), MS * 100);
        assert_eq!(l.num_requeues(&0), 2);
        // Much later, bucket refilled: key 0's third failure waits its own 20 ms.
        let later = t + Duration::from_secs(60);
        assert_eq!(l.when(&0, later), MS * 20);
        l.forget(&0);
        assert_eq!(l.num_requeues(&0), 0);
        assert_eq!(l.when(&0, later), MS * 5);
    }
}
