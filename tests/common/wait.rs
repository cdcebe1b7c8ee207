//! The asynchronous wait of the launcher end-to-end tests (`e2e_launcher`, `e2e_hooks`): they
//! drive a launcher over gRPC from a current-thread runtime, so the probe is awaited, and the
//! sleep between probes must yield to that runtime rather than block it.

use std::time::{Duration, Instant};

/// Awaits `probe` every 20 ms until it returns `Some`, or panics after `timeout` naming `what`.
pub async fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
