//! Start-failure backoff: how long a VM whose VMIs keep failing before reaching Running waits
//! before the next start.
//!
//! Restarting a crash-looping VM immediately would hammer the scheduler and the node; KubeVirt
//! waits `10 s x failures^2` plus up to half of that again as jitter (so many failing VMs do not
//! retry in lockstep), capped at five minutes. The jitter is an input here: the caller draws it.

/// The cap on the delay, seconds (KubeVirt's default crash-loop maximum).
pub const MAX_DELAY_SECONDS: i64 = 300;
/// The smallest base interval, seconds.
const MIN_INTERVAL_SECONDS: i64 = 10;

/// The base delay before jitter for the `fail_count`-th consecutive failure (at least the first).
pub fn base_delay_seconds(fail_count: i64, max_delay: i64) -> i64 {
    let n = fail_count.max(1);
    let interval = (max_delay / 30).max(MIN_INTERVAL_SECONDS);
    interval.saturating_mul(n.saturating_mul(n))
}

/// The delay, seconds: base plus `floor(jitter x (base/2 + 1))`, capped at `max_delay`.
/// `jitter` is a uniform draw from `[0, 1)`; values outside are clamped.
pub fn start_backoff_seconds(fail_count: i64, max_delay: i64, jitter: f64) -> i64 {
    let base = base_delay_seconds(fail_count, max_delay);
    let range = base / 2 + 1;
    let j = jitter.clamp(0.0, 1.0);
    // j x range is in [0, range]: Go's float-to-int truncation, never out of range.
    #[expect(clippy::cast_possible_truncation, reason = "a value in [0, range]")]
    let extra = ((j * range as f64) as i64).min(range - 1);
    (base + extra).min(max_delay)
}

/// The jitter draw that yields exactly `extra` seconds of jitter for `fail_count` (used to replay
/// a recorded run, e.g. an oracle that drew from Go's generator).
pub fn jitter_for_extra_seconds(fail_count: i64, max_delay: i64, extra: i64) -> f64 {
    let range = base_delay_seconds(fail_count, max_delay) / 2 + 1;
    (extra as f64 + 0.5) / range as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_grows_quadratically_and_caps() {
        assert_eq!(base_delay_seconds(0, 300), 10);
        assert_eq!(base_delay_seconds(1, 300), 10);
        assert_eq!(base_delay_seconds(2, 300), 40);
        assert_eq!(start_backoff_seconds(10, 300, 0.99), 300);
    }

    #[test]
    fn jitter_stays_within_half_the_base() {
        for n in 1..6 {
            let base = base_delay_seconds(n, 300);
            for j in [0.0, 0.3, 0.999_999, 1.0] {
                let d = start_backoff_seconds(n, 300, j);
                assert!(
                    d >= base.min(300) && d <= (base + base / 2).min(300),
                    "{n} {j} {d}"
                );
            }
        }
        assert_eq!(
            start_backoff_seconds(1, 300, jitter_for_extra_seconds(1, 300, 5)),
            15
        );
    }
}
