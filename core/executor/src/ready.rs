//! Driving the executor where every effect completes at once (the simulator, tests).

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

/// The executor's future never finished: an effect implementation awaited something that is not
/// ready. Only synchronous implementations may be driven with [`run_ready`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an effect did not complete synchronously")]
pub struct NotReady;

/// Runs `fut` to completion on the current thread, for effect implementations that never wait
/// (an in-memory store, a fake launcher). No runtime, no threads: the simulator stays a
/// deterministic single-threaded loop while running the same executor as the binaries.
pub fn run_ready<F: Future>(fut: F) -> Result<F::Output, NotReady> {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    // An effect that yields once (e.g. a cooperative `yield_now`) still completes; one that
    // really waits never would, and is reported instead of spinning forever.
    for _ in 0..64 {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return Ok(out);
        }
    }
    Err(NotReady)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_futures_complete_and_pending_ones_are_reported() {
        assert_eq!(run_ready(async { 7 }), Ok(7));
        assert_eq!(run_ready(std::future::pending::<()>()), Err(NotReady));
    }
}
