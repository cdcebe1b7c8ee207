//! # kvrs-executor
//!
//! The pure half of kvrs's shell. The decisions in `kvrs-decide` say *what* to do as a
//! [`Plan`](kvrs_decide::Plan); this crate says *how* a plan is carried out, the same way in the
//! cluster binaries, in `kvrs run` and in the simulator:
//!
//! - [`Api`], [`Launcher`] and [`Node`] are the three kinds of side effect a plan has. The cluster
//!   binaries implement them with kube-rs, the kvrs-ipc client and netlink (`kvrs-runtime`,
//!   `kvrs-node`); the simulator with its in-memory store and fake launchers.
//! - [`execute`] runs a controller plan: raise each write's expectation, send it, stop at the
//!   first failure, lower the expectation again, turn the outcome into a rate-limited retry.
//! - [`execute_handler`] runs virt-handler's plans: node steps and launcher commands in order,
//!   a failure recorded as a fact and the sync decided again, the status write last.
//! - [`observe`] turns a watch event into the keys to queue and the expectations it fulfils.
//! - [`requeue`] applies a plan's queue operations to a work queue.
//! - [`world`] builds each controller's decision input from its informer caches — one function
//!   per controller, which the binaries and the simulator both call, so the decisions are fed
//!   the same way everywhere.
//!
//! ## Why there is no IO here
//!
//! Nothing in this crate reads a clock, opens a socket, spawns a task or depends on an async
//! runtime: time comes in as a [`kvrs_queue::Instant`] or a [`Now`](kvrs_decide::Now), IO goes
//! through the traits, and the futures it returns complete as soon as the effects do
//! ([`ready::run_ready`] drives them without a runtime). That is what lets the simulator's
//! deterministic, single-threaded property tests exercise the very code the binaries run, and
//! why this crate lives under `core/`: no crate there depends on one under `bins/` (the
//! `shell_layout` test in `kvrs-tests` pins it). The kube-rs, gRPC and tokio plumbing around it
//! is `kvrs-runtime`, which re-exports this crate's API.
//!
//! ## Example
//!
//! A plan with one write, run against an API that accepts everything:
//!
//! ```
//! use kvrs_decide::{ApiWrite, Event, Expectation, Plan, WriteOp};
//! use kvrs_executor::{Api, ApiError, ControllerExpectations, With, execute, ready::run_ready};
//!
//! struct Accepts(Vec<String>);
//!
//! impl Api for Accepts {
//!     async fn write(&mut self, w: &ApiWrite) -> Result<(), ApiError> {
//!         self.0.push(format!("{} {}", w.op.verb(), w.name));
//!         Ok(())
//!     }
//!     async fn event(&mut self, _: &Event) {}
//! }
//!
//! let mut plan = Plan::idle();
//! plan.push_write(
//!     ApiWrite::new("virtualmachineinstances", "ns", "vm",
//!                   WriteOp::Create { object: serde_json::json!({"metadata": {"name": "vm"}}) })
//!         .expecting(Expectation::Creations { key: "ns/vm".into(), count: 1 }),
//! );
//! let (mut api, mut expectations) = (Accepts(Vec::new()), ControllerExpectations::new());
//! let now = kvrs_queue::Instant::ZERO;
//! let out = run_ready(execute(&plan, &mut With(&mut api, &mut expectations), now)).unwrap();
//! assert_eq!((out.writes_sent, api.0.as_slice()), (1, ["create vm".to_string()].as_slice()));
//! // The create is expected until the watch shows the VMI.
//! assert_eq!(expectations.pending("ns/vm", now).creations, 1);
//! ```

#![warn(unreachable_pub)]

mod effects;
mod executor;
mod expectations;
mod handler;
mod observer;
mod queue;
pub mod ready;
mod storage;
pub mod world;

pub use effects::{Api, ApiError, ApiErrorKind, Expecting, Launcher, Node, With};
pub use executor::{Executed, execute};
pub use expectations::ControllerExpectations;
pub use handler::{HandlerExecuted, execute_handler};
pub use observer::{Change, Enqueue, Seen, Watched, observe, observe_migrations};
pub use queue::requeue;
pub use storage::{
    Dependents, StorageChange, StorageKind, StorageSeen, backend_claim_created, observe_storage,
};
