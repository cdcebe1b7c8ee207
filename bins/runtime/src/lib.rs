//! # kvrs-runtime
//!
//! The one shell every kvrs runtime shares. The decisions in `kvrs-decide` say *what* to do as a
//! [`Plan`](kvrs_decide::Plan); this crate *does* it, the same way everywhere:
//!
//! - [`Api`], [`Launcher`] and [`Node`] are the three kinds of side effect a plan has. The cluster
//!   binaries implement them with kube-rs, the kvrs-ipc client and netlink; the simulator with
//!   its in-memory store and fake launchers; `kvrs run` with the embedded store.
//! - [`execute`] runs a controller plan: raise each write's expectation, send it, stop at the
//!   first failure, lower the expectation again, turn the outcome into a rate-limited retry.
//! - [`execute_handler`] runs virt-handler's plans: node steps and launcher commands in order,
//!   a failure recorded as a fact and the sync decided again, the status write last.
//! - [`observe`] turns a watch event into the keys to queue and the expectations it fulfils.
//! - [`requeue`] applies a plan's queue operations to a work queue.
//!
//! Nothing here reads a clock or opens a socket: time comes in as a [`kvrs_queue::Instant`], IO
//! goes through the traits. That is what lets the simulator's property tests exercise the very
//! code the binaries run.

mod effects;
mod executor;
mod expectations;
mod handler;
#[cfg(feature = "ipc")]
pub mod ipc;
#[cfg(feature = "kube")]
pub mod kube;
mod observer;
mod queue;
pub mod ready;

pub use effects::{Api, ApiError, ApiErrorKind, Expecting, Launcher, Node, With};
pub use executor::{Executed, execute};
pub use expectations::ControllerExpectations;
pub use handler::{HandlerExecuted, execute_handler};
pub use observer::{Change, Enqueue, Seen, Watched, observe};
pub use queue::requeue;
#[cfg(feature = "kube")]
pub use queue::{requeue_async, spawn_workers};
