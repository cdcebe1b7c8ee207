//! The crate's own notion of time.
//!
//! Every decision in this crate takes `now` as an argument instead of reading a clock, so the same
//! code runs under tokio's paused clock, in a simulator stepping a virtual clock, and in production.
//! [`Instant`] is a point on a monotonic timeline measured from an arbitrary origin chosen by the
//! caller (the async shell uses the moment the queue was created). Using a plain offset instead of
//! `std::time::Instant` lets tests and simulators build any instant they like (`Instant::ZERO +
//! 5 ms`) without touching the operating system's clock.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in time, as an offset from an origin the caller chose.
///
/// Only differences between instants of the same timeline mean anything.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(Duration);

impl Instant {
    /// The origin of the timeline.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `offset` after the origin.
    pub const fn from_offset(offset: Duration) -> Self {
        Instant(offset)
    }

    /// How far this instant is from the origin.
    pub const fn offset(self) -> Duration {
        self.0
    }

    /// Time elapsed from `earlier` to `self`, or zero when `earlier` is later (a clock never
    /// makes a decision go negative).
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    /// `self + d`, saturating at the end of the representable timeline instead of panicking:
    /// a backoff of "forever" must not crash a controller.
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, rhs: Duration) -> Instant {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: see [`Instant::saturating_duration_since`].
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    /// Saturating at the origin.
    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(rhs))
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T+{:?}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let t = Instant::ZERO + Duration::from_millis(5);
        assert_eq!(t.offset(), Duration::from_millis(5));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(5));
        assert_eq!(t - Duration::from_secs(1), Instant::ZERO);
        let end = Instant::from_offset(Duration::MAX);
        assert_eq!(end + Duration::from_secs(1), end);
        assert_eq!(format!("{t:?}"), "T+5ms");
    }
}
