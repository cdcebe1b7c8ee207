//! # kvrs-runtime
//!
//! The IO half of kvrs's shell: what the cluster daemons and `kvrs run` need around the pure
//! executor of `kvrs-executor`, whose API this crate re-exports (so `kvrs_runtime::execute`,
//! `kvrs_runtime::Api`, ... are the executor's):
//!
//! - [`kube`] (feature `kube`): [`Api`] on a real API server with kube-rs, the controllers'
//!   effects on it ([`kube::controller`]), leader election, the metrics and health endpoints, the
//!   KubeVirt CR's live configuration, and the client and logging set-up;
//! - [`ipc`] (feature `ipc`): [`Launcher`] over virt-launcher's command socket;
//! - [`requeue_async`] and [`spawn_workers`] (feature `kube`): the async work queue's side of
//!   [`requeue`], and the worker tasks that take its keys.
//!
//! Everything that decides how a plan runs — the order of writes, expectations, retries, the
//! handler's re-decisions after a failed step, the observer, the cache → world step — is in
//! `kvrs-executor`, which has no IO, so the simulator runs it exactly as the binaries do.

#[cfg(feature = "ipc")]
pub mod ipc;
#[cfg(feature = "kube")]
pub mod kube;
#[cfg(feature = "kube")]
mod queue;

pub use kvrs_executor::{
    Api, ApiError, ApiErrorKind, Change, ControllerExpectations, Enqueue, Executed, Expecting,
    HandlerExecuted, Launcher, Node, Seen, Watched, With, execute, execute_handler, observe,
    observe_migrations, ready, requeue, world,
};
#[cfg(feature = "kube")]
pub use queue::{requeue_async, spawn_workers};
