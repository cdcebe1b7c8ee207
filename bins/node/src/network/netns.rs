//! Running work inside a pod's network namespace without moving the caller.
//!
//! `setns(CLONE_NEWNET)` changes the namespace of the calling *thread* only, and a thread's
//! namespace is inherited by the sockets it opens and the children it forks. So the work runs
//! on a fresh OS thread that enters the namespace first and ends afterwards: the caller's
//! threads (and the handler's async runtime) never leave the host namespace.

use crate::error::NodeError;
use nix::sched::{CloneFlags, setns};
use std::fs::File;
use std::path::Path;

/// Runs `work` on a new thread inside the network namespace at `netns`, and returns its result.
pub fn run_in_netns<T, F>(netns: &Path, work: F) -> Result<T, NodeError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, NodeError> + Send + 'static,
{
    let fail = |reason: String| NodeError::NetnsEnter {
        path: netns.to_path_buf(),
        reason,
    };
    let file = File::open(netns).map_err(|e| fail(format!("open: {e}")))?;
    let path = netns.to_path_buf();
    let handle = std::thread::Builder::new()
        .name("kvrs-netns".into())
        .spawn(move || {
            setns(&file, CloneFlags::CLONE_NEWNET).map_err(|e| NodeError::NetnsEnter {
                path,
                reason: format!("setns: {}", e.desc()),
            })?;
            work()
        })
        .map_err(|e| fail(format!("spawning the namespace thread: {e}")))?;
    handle
        .join()
        .map_err(|_| fail("the namespace thread panicked".into()))?
}
