//! The randomness the decisions take as input (start-failure jitter, qemu-timeout jitter, the
//! launcher pod's name suffix): drawn here, in the shell, never inside a decision.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// A uniformly random `u64` (std's per-process random hasher keys, no extra crate).
pub fn u64() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u64(0x6b76_7273);
    h.finish()
}

/// A uniform draw from `[0, 1)`.
pub fn unit() -> f64 {
    // 53 random bits are what an f64 mantissa holds.
    (u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn unit_draws_stay_in_range_and_vary() {
        let draws: Vec<f64> = (0..64).map(|_| super::unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        assert!(draws.windows(2).any(|w| w[0] != w[1]));
    }
}
